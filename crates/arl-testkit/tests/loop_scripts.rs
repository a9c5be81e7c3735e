//! The loop scripts (`scripts/loop-sync.sh`, `scripts/loop-async.sh`,
//! `scripts/replay.sh`) on a tiny model made here, each against its own
//! `arl-serve` on loopback: the synchronous loop and a bit-for-bit replay of
//! one of its steps, every metric also sent to TensorBoard, W&B (offline) and
//! MLflow and read back with their readers; the asynchronous loop, stopped, left with the debris of a
//! crash (a half-written batch, a claimed batch never trained) and resumed —
//! every batch is trained exactly once, in order of claim.
use arl_testkit::common;

use common::{exe, jsonl, run_in};
use std::path::Path;
use std::process::Command;

fn make_model(p: &Path) {
    let cfg = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/golden/tiny.json");
    run_in(p, "arl-train", &["make-tokenizer", "--template", "compact", "--out", "tok"], b"").ok();
    run_in(
        p,
        "arl-train",
        &["init", "--config", cfg.to_str().unwrap(), "--tokenizer", "tok", "--out", "model", "--seed", "4"],
        b"",
    )
    .ok();
    run_in(p, "arl-tasks", &["arith", "-n", "64", "--difficulty", "3", "--seed", "9", "-o", "prompts.jsonl"], b"").ok();
}

/// Runs a script of `scripts/` with the loop variables for a tiny, fast run.
fn script(p: &Path, name: &str, vars: &[(&str, &str)]) -> common::Run {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let bin = exe("arl-train").parent().unwrap().to_path_buf();
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("scripts").join(name))
        .env("BIN", &bin)
        .env("MODEL", p.join("model"))
        .env("PROMPTS", p.join("prompts.jsonl"))
        .env("BATCH", "4")
        .env("N", "4")
        .env("ROLLOUT_ARGS", "--tools calculator --max-turns 2 --max-response-len 40")
        // float32 on both sides: the replay compares numbers bit for bit.
        .env("TRAIN_ARGS", "--lr 1e-3 --precision fp32")
        .env("SERVE_ARGS", "--dtype float32")
        .env_remove("EXP");
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.output().expect("bash").into()
}

fn lines(f: &Path) -> Vec<serde_json::Value> {
    jsonl(&std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// What the tracking backends hold, read back with each library's reader
/// (scripts/testdata/read_tracking.py), equals metrics.jsonl and the
/// trainer's lines, once each across a resume, with the run's variables as
/// hyper-parameters and its commands attached.
fn tracked_equals_metrics(run: &Path, m: &[serde_json::Value]) {
    let py = common::python().expect("ARL_PYTHON: run the tests with `make test`");
    let reader = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/testdata/read_tracking.py");
    let out = Command::new(py).arg(reader).arg(run.join("tracking")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Every numeric field of every rl line, at its step.
    let mut want: Vec<(String, u64, f64)> = Vec::new();
    for x in m.iter().filter(|x| x["phase"] == "rl") {
        for (k, v) in x.as_object().unwrap() {
            if let (Some(v), false) = (v.as_f64(), k == "step") {
                want.push((format!("rl/{k}"), x["step"].as_u64().unwrap(), v));
            }
        }
    }
    // The trainer's lines, in order, at the optimizer step counted over the run.
    let mut train = Vec::new();
    for s in 1..=3 {
        train.extend(lines(&run.join(format!("steps/step-{s}/train-metrics.jsonl"))));
    }
    for (i, x) in train.iter().enumerate() {
        want.push(("train/loss".into(), i as u64 + 1, x["loss"].as_f64().unwrap()));
        want.push(("train/grad_norm".into(), i as u64 + 1, x["grad_norm"].as_f64().unwrap()));
    }
    assert!(want.iter().any(|w| w.0 == "rl/reward_mean") && train.len() >= 3);
    for backend in ["tensorboard", "wandb", "mlflow"] {
        let sc = &t[backend]["scalars"];
        for (key, step, v) in &want {
            let pts = sc[key].as_array().unwrap_or_else(|| panic!("{backend}: no `{key}`: {sc}"));
            let at: Vec<f64> =
                pts.iter().filter(|p| p[0].as_u64() == Some(*step)).map(|p| p[1].as_f64().unwrap()).collect();
            // Once (the resumed run sent nothing twice); TensorBoard keeps float32.
            assert_eq!(at.len(), 1, "{backend} `{key}` at step {step}: {pts:?}");
            assert!((at[0] - v).abs() <= 1e-6 * v.abs().max(1.0), "{backend} `{key}` at {step}: {} vs {v}", at[0]);
        }
    }
    // Hyper-parameters and the commands.
    assert_eq!(t["mlflow"]["params"]["BATCH"], "4", "{}", t["mlflow"]);
    assert_eq!(t["mlflow"]["status"], "FINISHED");
    assert!(t["mlflow"]["artifacts"].as_array().unwrap().iter().any(|a| a == "commands.log"));
    assert_eq!(t["wandb"]["config"]["TRAIN_ARGS"], "--lr 1e-3 --precision fp32", "{}", t["wandb"]["config"]);
    assert!(t["wandb"]["files"].as_array().unwrap().iter().any(|a| a == "commands.log"));
    let texts = t["tensorboard"]["texts"].as_array().unwrap();
    assert!(texts.iter().any(|x| x.as_str().unwrap().starts_with("config/params")), "{texts:?}");
    let cmds = std::fs::read_to_string(run.join("logs/commands.log")).unwrap();
    for tool in ["arl-serve", "arl-rollout", "arl-reward", "arl-filter", "arl-advantage", "arl-train", "arl-sync"] {
        assert!(cmds.lines().any(|l| l.contains(&format!("/{tool} "))), "no {tool} in commands.log:\n{cmds}");
    }
}

#[test]
fn sync_loop_runs_resumes_and_replays_bit_for_bit() {
    let d = common::tmpdir();
    let p = d.path();
    make_model(p);
    let run = p.join("run");
    // With every tracking backend on (scripts/track.py follows the run).
    let vars = |steps| [("RUN", run.to_str().unwrap()), ("STEPS", steps), ("PORT", "30141"), ("TRACKING", "all")];
    let r = script(p, "loop-sync.sh", &vars("2"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Resume: two more steps continue after step 2.
    let r = script(p, "loop-sync.sh", &vars("3"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("ckpt/step-2 on"), "resumed from step 2: {}", r.stderr);
    let m = lines(&run.join("metrics.jsonl"));
    tracked_equals_metrics(&run, &m);
    let steps: Vec<u64> = m.iter().filter(|x| x["phase"] == "rl").map(|x| x["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, vec![1, 2, 3]);
    for x in m.iter().filter(|x| x["phase"] == "rl") {
        assert_eq!(x["samples"], 16);
        assert!(x["reward_mean"].is_number() && x["loss"].is_number(), "{x}");
    }
    // Each step's batch holds the step's own prompts (batch K-1 of the pool).
    let b3 = lines(&run.join("steps/step-3/batch.jsonl"));
    assert!(b3.iter().all(|r| r["weight_versions"].as_array().unwrap().iter().all(|v| v == "2")));
    let r = Command::new("bash")
        .arg(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/replay.sh"))
        .args([run.to_str().unwrap(), "2"])
        .output()
        .unwrap();
    let r: common::Run = r.into();
    assert_eq!(r.code, 0, "replay: {}\n{}", r.stdout_str(), r.stderr);
    assert!(r.stdout_str().contains("identical  model.safetensors"), "{}", r.stdout_str());
    // A changed input does not replay: the check can fail. (The random model
    // scores 0 everywhere, so GRPO advantages are 0; give them a value.)
    let batch = run.join("steps/step-2/batch.jsonl");
    let mut recs = lines(&batch);
    for r in &mut recs {
        let n = r["advantages"].as_array().unwrap().len();
        r["advantages"] = serde_json::json!(vec![1.0; n]);
    }
    std::fs::write(&batch, recs.iter().map(|r| r.to_string() + "\n").collect::<String>()).unwrap();
    let r: common::Run = Command::new("bash")
        .arg(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/replay.sh"))
        .args([run.to_str().unwrap(), "2"])
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 1, "a different batch must not reproduce the checkpoint: {}", r.stdout_str());
}

#[test]
fn async_loop_trains_every_batch_once_across_a_crash() {
    let d = common::tmpdir();
    let p = d.path();
    make_model(p);
    let run = p.join("run");
    let run_s = run.to_str().unwrap().to_string();
    let go = |steps: &str| {
        script(
            p,
            "loop-async.sh",
            &[("RUN", &run_s), ("STEPS", steps), ("PORT", "30142"), ("MAX_STALENESS", "1"), ("MAX_AHEAD", "1")],
        )
    };
    let r = go("2");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let spool = run.join("spool");
    assert_eq!(names(&spool.join("done")).len(), 2);
    // The debris of a crash: the producer died mid-write, and the trainer
    // claimed the next batch for step 3 and died before training it.
    let ready = names(&spool.join("ready"));
    assert!(!ready.is_empty(), "the producer ran ahead: {ready:?}");
    let claimed_name = format!("step-3.{}", ready[0]);
    std::fs::rename(spool.join("ready").join(&ready[0]), spool.join("claimed").join(&claimed_name)).unwrap();
    std::fs::write(spool.join("ready/.tmp-99"), "{\"half\": ").unwrap();
    let r = go("4");
    assert_eq!(r.code, 0, "{}", r.stderr);
    let done = names(&spool.join("done"));
    // Trained batches are `step-N.batch-K`; a batch too stale to train is
    // `stale.step-N.batch-K` (spent, not trained). The claimed one was used
    // for step 3 either way.
    let trained: Vec<&String> = done.iter().filter(|n| n.starts_with("step-")).collect();
    assert_eq!(trained.len(), 4, "{done:?}");
    for (i, n) in trained.iter().enumerate() {
        assert!(n.starts_with(&format!("step-{}.", i + 1)), "{done:?}");
    }
    assert!(done.iter().any(|n| n.ends_with(&claimed_name)), "the claimed batch went to step 3: {done:?}");
    // Every batch number at most once: none used twice.
    let mut batches: Vec<&str> =
        done.iter().map(|n| n.rsplit_once('.').unwrap().0.rsplit('.').next().unwrap()).collect();
    let n = batches.len();
    batches.sort();
    batches.dedup();
    assert_eq!(batches.len(), n, "no batch used twice: {done:?}");
    assert!(names(&spool.join("claimed")).is_empty());
    assert!(!spool.join("ready/.tmp-99").exists(), "half-written batch removed");
    // Staleness is bounded: every trained record was produced at most one
    // version before its step.
    for step in 1..=4u64 {
        for r in lines(&run.join(format!("steps/step-{step}/batch.jsonl"))) {
            for v in r["weight_versions"].as_array().unwrap() {
                let v: u64 = v.as_str().unwrap().parse().unwrap();
                assert!(step - 1 - v <= 1, "step {step} trained on version {v}");
            }
        }
    }
    let m = lines(&run.join("metrics.jsonl"));
    assert_eq!(m.iter().filter(|x| x["phase"] == "rl").count(), 4);
    assert!(m.iter().any(|x| x["phase"] == "async" && x["samples_per_s"].as_f64().unwrap() > 0.0));
}

/// PPO with a learned critic (`ESTIMATOR=gae`): each step scores its batch
/// with the previous step's critic (`arl-train values`), takes GAE
/// advantages, and trains the policy and the critic; the critic of step K is
/// a marked checkpoint with a value head, and a step replays bit for bit
/// without touching the run's critic.
#[test]
fn sync_loop_runs_ppo_with_a_learned_critic() {
    let d = common::tmpdir();
    let p = d.path();
    make_model(p);
    let run = p.join("run");
    // A random model scores 0 on arithmetic; a format reward (a `7` anywhere
    // in the response) gives the returns some spread.
    let vars = [
        ("RUN", run.to_str().unwrap()),
        ("STEPS", "2"),
        ("PORT", "30143"),
        ("ESTIMATOR", "gae"),
        ("ADV_ARGS", "--normalize"),
        ("REWARD_ARGS", "--rm regex --pattern 7"),
        ("CRITIC_ARGS", "--critic-lr 1e-2 --value-clip 0.5"),
        ("VALUES_ARGS", "--threads 1"),
    ];
    let r = script(p, "loop-sync.sh", &vars);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let m = lines(&run.join("metrics.jsonl"));
    let rl: Vec<&serde_json::Value> = m.iter().filter(|x| x["phase"] == "rl").collect();
    assert_eq!(rl.len(), 2);
    for x in &rl {
        assert!(x["value_loss"].as_f64().unwrap() >= 0.0 && x["value_clipfrac"].is_number(), "{x}");
    }
    let mut rewards = vec![];
    for step in 1..=2u64 {
        let batch = lines(&run.join(format!("steps/step-{step}/batch.jsonl")));
        let mut any_nonzero = false;
        for r in &batch {
            let mask = r["loss_mask"].as_array().unwrap();
            let values = r["values"].as_array().unwrap();
            let returns = r["returns"].as_array().unwrap();
            assert_eq!((values.len(), returns.len()), (mask.len(), mask.len()), "one per response token");
            any_nonzero |= values.iter().any(|v| v.as_f64().unwrap() != 0.0);
            // γ = λ = 1 without KL: the return A + V of every trained token is
            // the reward, whatever the values (they cancel); 0 where untrained.
            let reward = r["reward"].as_f64().unwrap();
            rewards.push(reward);
            for (m, g) in mask.iter().zip(returns) {
                let want = if m == 1 { reward } else { 0.0 };
                assert!((g.as_f64().unwrap() - want).abs() < 1e-4, "{g} vs {want}: {r}");
            }
        }
        // Step 1 is scored by the policy with a zero head; step 2 by the
        // critic trained in step 1.
        assert_eq!(any_nonzero, step == 2, "step {step}");
        let cmd = std::fs::read_to_string(run.join(format!("steps/step-{step}/train.cmd"))).unwrap();
        assert!(cmd.contains("--train-critic") && cmd.contains(&format!("critic/step-{step}")), "{cmd}");
    }
    assert!(rewards.iter().any(|&r| r > 0.0) && rewards.contains(&0.0), "returns vary: {rewards:?}");
    assert!(rl.iter().any(|x| x["value_explained_var"].is_number()), "{rl:?}");
    for step in 1..=2 {
        let c = run.join(format!("critic/step-{step}"));
        let cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(c.join("config.json")).unwrap()).unwrap();
        assert!(cfg["arl_critic"].is_object(), "{cfg}");
        let w = std::fs::read(c.join("model.safetensors")).unwrap();
        let header = String::from_utf8_lossy(&w[..w.len().min(1 << 16)]).into_owned();
        assert!(header.contains("\"value_head.weight\"") && header.contains("\"value_head.bias\""));
        assert!(c.join("trainer_state/critic.json").exists());
    }
    let critic2 = std::fs::read(run.join("critic/step-2/model.safetensors")).unwrap();
    let r: common::Run = Command::new("bash")
        .arg(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/replay.sh"))
        .args([run.to_str().unwrap(), "2"])
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 0, "replay: {}\n{}", r.stdout_str(), r.stderr);
    assert_eq!(
        std::fs::read(run.join("critic/step-2/model.safetensors")).unwrap(),
        critic2,
        "replay left the critic alone"
    );
    // The asynchronous loop says it does not do this.
    let r = script(p, "loop-async.sh", &[("RUN", run.to_str().unwrap()), ("STEPS", "3"), ("ESTIMATOR", "gae")]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("loop-sync.sh"), "{}", r.stderr);
}

/// `LORA_RANK`: the synchronous loop trains an adapter (each step's checkpoint
/// is the adapter alone), the server keeps the base and gets each version by
/// `arl-sync --lora`, rollouts and the evaluation ask for it, a resumed run
/// serves the base with the last adapter at its version, and a step replays
/// bit for bit.
#[test]
fn sync_loop_trains_a_lora_adapter() {
    let d = common::tmpdir();
    let p = d.path();
    make_model(p);
    let run = p.join("run");
    let vars = |steps| {
        [
            ("RUN", run.to_str().unwrap()),
            ("STEPS", steps),
            ("PORT", "30144"),
            ("LORA_RANK", "2"),
            ("LORA_ARGS", "--lora-alpha 4 --lora-targets all-linear"),
            ("TRAIN_ARGS", "--lr 1e-2 --precision fp32"),
            ("REWARD_ARGS", "--rm regex --pattern 7"),
            ("EVAL_PROMPTS", p.join("prompts.jsonl").to_str().unwrap().to_string().leak()),
            ("EVAL_EVERY", "2"),
            ("EVAL_K", "1"),
        ]
    };
    let r = script(p, "loop-sync.sh", &vars("2"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    for step in 1..=2 {
        let c = run.join(format!("ckpt/step-{step}"));
        assert!(c.join("adapter_model.safetensors").exists() && !c.join("config.json").exists(), "step {step}");
        let cmd = std::fs::read_to_string(run.join(format!("steps/step-{step}/train.cmd"))).unwrap();
        assert!(cmd.contains("--lora-rank 2"), "{cmd}");
    }
    // Step 2's rollouts ran on the adapter of step 1, as its weight version.
    let b2 = lines(&run.join("steps/step-2/batch.jsonl"));
    assert!(b2.iter().all(|r| r["weight_versions"].as_array().unwrap().iter().all(|v| v == "1")), "{:?}", b2[0]);
    let sync = std::fs::read_to_string(run.join("logs/sync.log")).unwrap();
    assert!(sync.contains("policy"), "{sync}");
    let m = lines(&run.join("metrics.jsonl"));
    assert!(m.iter().any(|x| x["phase"] == "eval" && x["step"] == 2), "{m:?}");
    let r = script(p, "loop-sync.sh", &vars("3"));
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stderr.contains("ckpt/step-2 as adapter policy"), "{}", r.stderr);
    let b3 = lines(&run.join("steps/step-3/batch.jsonl"));
    assert!(b3.iter().all(|r| r["weight_versions"].as_array().unwrap().iter().all(|v| v == "2")), "{:?}", b3[0]);
    let r: common::Run = Command::new("bash")
        .arg(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/replay.sh"))
        .args([run.to_str().unwrap(), "2"])
        .output()
        .unwrap()
        .into();
    assert_eq!(r.code, 0, "replay: {}\n{}", r.stdout_str(), r.stderr);
    assert!(r.stdout_str().contains("identical  adapter_model.safetensors"), "{}", r.stdout_str());
}
