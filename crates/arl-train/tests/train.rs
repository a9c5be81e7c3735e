//! `arl-train` end to end on the tiny model: the PPO ratio at the first
//! micro-batch, SFT learning, a GRPO step raising a rewarded sample's
//! log-prob, CPU determinism, resume, atomic checkpoints under SIGKILL, and
//! transformers reading what arl writes.
use arl_testkit::{common, tiny};

use common::{jsonl, run_in, tmpdir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tiny::{advantaged_records as records, train};

fn tiny() -> PathBuf {
    tiny::model()
}

fn metrics(dir: &Path, name: &str) -> Vec<Value> {
    jsonl(&std::fs::read(dir.join(name)).unwrap())
}

/// Sum of response log-probs per record under `model`.
fn seq_logprobs(dir: &Path, model: &Path, input: &str) -> Vec<f64> {
    let out =
        run_in(dir, "arl-train", &["logprobs", "--model", model.to_str().unwrap(), "--threads", "1"], input.as_bytes())
            .ok();
    jsonl(&out.stdout)
        .iter()
        .map(|r| r["ref_log_probs"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).sum())
        .collect()
}

#[test]
fn ppo_first_step_has_ratio_one_and_no_clipping() {
    let t = tmpdir();
    let m = tiny();
    let input = records(6, |i| if i % 2 == 0 { 1.0 } else { -1.0 });
    train(
        t.path(),
        &[
            "--model",
            m.to_str().unwrap(),
            "--recompute-old-logprobs",
            "--metrics",
            "m.jsonl",
            "--max-tokens-per-micro-batch",
            "40",
            "--lr",
            "1e-3",
            "--global-batch-size",
            "6",
        ],
        &input,
    )
    .ok();
    let ms = metrics(t.path(), "m.jsonl");
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0]["ratio_min"], 1.0, "{}", ms[0]);
    assert_eq!(ms[0]["ratio_max"], 1.0, "{}", ms[0]);
    assert_eq!(ms[0]["clipfrac"], 0.0);
    assert_eq!(ms[0]["approx_kl"], 0.0);
    assert!(ms[0]["grad_norm"].as_f64().unwrap() > 0.0);
    // Without old log-probs and without recomputing, the run refuses.
    let r = train(t.path(), &["--model", m.to_str().unwrap()], &input);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("rollout_log_probs") && r.stderr.contains("--recompute-old-logprobs"), "{}", r.stderr);
}

#[test]
fn sft_drives_the_loss_down() {
    let t = tmpdir();
    let m = tiny();
    let msgs = |q: &str, a: &str| {
        json!({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}).to_string()
    };
    let input = [msgs("2+2?", "4"), msgs("3+3?", "6"), records(2, |_| 0.0)].join("\n");
    train(
        t.path(),
        &[
            "--model",
            m.to_str().unwrap(),
            "--loss",
            "sft",
            "--epochs",
            "12",
            "--lr",
            "3e-3",
            "--metrics",
            "m.jsonl",
            "--save",
            "out",
        ],
        &input,
    )
    .ok();
    let ms = metrics(t.path(), "m.jsonl");
    let first = ms[0]["loss"].as_f64().unwrap();
    let last = ms.last().unwrap()["loss"].as_f64().unwrap();
    assert!(last < 0.7 * first, "loss {first} → {last}");
    assert!(t.path().join("out/model.safetensors").exists() && t.path().join("out/tokenizer.json").exists());
}

/// SFT demonstrations are rendered on the trainer's threads: the samples
/// keep the input's order (the plan's fingerprint, which hashes every
/// sample's tokens in order, is the same on one thread and on two) and bad
/// records are rejected in line order, the others trained.
#[test]
fn sft_messages_render_on_every_thread_in_input_order() {
    let t = tmpdir();
    let m = tiny();
    let input: Vec<String> = (0..300)
        .map(|i| {
            let mut msgs = vec![json!({"role": "user", "content": format!("{i}+{i}?")})];
            if i != 7 && i != 201 {
                msgs.push(json!({"role": "assistant", "content": format!("{}", 2 * i)}));
            }
            json!({ "messages": msgs }).to_string()
        })
        .collect();
    let input = input.join("\n");
    let run = |threads: &str| {
        let save = format!("out-{threads}");
        let rejects = format!("rej-{threads}.jsonl");
        #[rustfmt::skip]
        let args = ["--threads", threads, "-q", "--precision", "fp32", "--model", m.to_str().unwrap(), "--loss", "sft", "--max-steps", "1",
                    "--global-batch-size", "8", "--save", &save, "--on-error", "skip", "--rejects", &rejects];
        run_in(t.path(), "arl-train", &args, input.as_bytes()).ok();
        let state: Value =
            serde_json::from_slice(&std::fs::read(t.path().join(&save).join("trainer_state/state.json")).unwrap())
                .unwrap();
        let rej = std::fs::read_to_string(t.path().join(&rejects)).unwrap();
        (state["input"].clone(), rej)
    };
    let (one, rej_one) = run("1");
    let (two, rej_two) = run("2");
    assert_eq!(one["samples"], 298, "{one}");
    assert_eq!(one, two, "the same samples in the same order on 1 and 2 threads");
    let lines: Vec<&str> = rej_two.lines().collect();
    assert_eq!(lines.len(), 2, "{rej_two}");
    assert!(lines[0].contains("7+7?") && lines[1].contains("201+201?"), "{rej_two}");
    assert_eq!(rej_one, rej_two);
}

/// `arl-train render` writes what SFT would render: training on its output
/// (Parquet, as scripts/run.sh does) takes bit for bit the steps training on
/// the `messages` takes. The rendered records keep their other fields; a
/// record with `tokens` passes through unchanged; one that cannot be
/// rendered is rejected with the field named.
#[test]
fn rendered_demonstrations_train_as_their_messages() {
    let t = tmpdir();
    let m = tiny();
    let mut recs: Vec<Value> = (0..40)
        .map(|i| {
            let mut msgs = vec![json!({"role": "user", "content": format!("{i}*3?")})];
            if i != 5 {
                msgs.push(json!({"role": "assistant", "content": format!("{}", 3 * i)}));
            }
            json!({"prompt_id": format!("d{i}"), "messages": msgs})
        })
        .collect();
    let (tok_rec, _) = tiny::record(99, "a token record");
    recs.insert(17, tok_rec.clone());
    let input = tiny::jsonl_text(recs);
    std::fs::write(t.path().join("in.jsonl"), &input).unwrap();
    let mm = m.to_str().unwrap();
    for out in ["r.jsonl", "r.parquet"] {
        #[rustfmt::skip]
        let r = run_in(t.path(), "arl-train", &["render", "-q", "--model", mm, "-i", "in.jsonl", "-o", out,
                                                "--on-error", "skip", "--rejects", "rej.jsonl"], b"");
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let rej = std::fs::read_to_string(t.path().join("rej.jsonl")).unwrap();
    assert!(rej.lines().count() == 1 && rej.contains("5*3?"), "{rej}");
    let r = run_in(t.path(), "arl-train", &["render", "-q", "--model", mm, "-i", "in.jsonl", "-o", "x.jsonl"], b"");
    assert_eq!(r.code, 65);
    assert!(r.stderr.contains("in.jsonl:6") && r.stderr.contains("field `messages`: no assistant"), "{}", r.stderr);
    assert!(!t.path().join("x.jsonl").exists(), "no output from a failed run");
    let rendered = jsonl(&std::fs::read(t.path().join("r.jsonl")).unwrap());
    assert_eq!(rendered.len(), 40);
    assert_eq!(rendered[16], tok_rec, "a record with tokens passes through unchanged");
    let r0 = &rendered[0];
    assert_eq!(r0["prompt_id"], "d0");
    assert!(r0["messages"].is_array(), "{r0}");
    let (tokens, plen) = (r0["tokens"].as_array().unwrap(), r0["prompt_len"].as_u64().unwrap() as usize);
    assert_eq!(r0["loss_mask"].as_array().unwrap().len(), tokens.len() - plen);
    // The character-level tokenizer: the assistant's answer "0" is trained.
    let trained: String = tokens[plen..]
        .iter()
        .zip(r0["loss_mask"].as_array().unwrap())
        .filter(|(_, m)| m.as_u64() == Some(1))
        .map(|(t, _)| char::from(t.as_u64().unwrap() as u8))
        .collect();
    assert!(trained.starts_with('0'), "trained tokens {trained:?}");
    let sft = |input: &str, save: &str| {
        #[rustfmt::skip]
        let r = train(t.path(), &["--model", mm, "--loss", "sft", "--max-steps", "3", "--global-batch-size", "8",
                                  "-i", input, "--save", save, "--on-error", "skip", "--rejects", "rej2.jsonl"], "");
        assert_eq!(r.code, 0, "{}", r.stderr);
        std::fs::read(t.path().join(save).join("model.safetensors")).unwrap()
    };
    let from_messages = sft("in.jsonl", "a");
    assert_eq!(from_messages, sft("r.parquet", "b"), "the same steps from the rendered records");
    assert_ne!(from_messages, std::fs::read(m.join("model.safetensors")).unwrap());
}

/// `--precision amp` (bf16 autocast; here on the CPU): the first step's loss
/// (before any update) is the fp32 one up to bf16 rounding — close, but not
/// bit-equal, which shows the matmuls did run in bf16 — the loss still falls,
/// and the checkpoint keeps float32 weights.
#[test]
fn amp_autocasts_matmuls_and_keeps_float32_weights() {
    let t = tmpdir();
    let m = tiny();
    let input = records(8, |_| 0.0);
    let run = |precision: &str| {
        let mfile = format!("m-{precision}.jsonl");
        let save = format!("out-{precision}");
        train(
            t.path(),
            &[
                "--model",
                m.to_str().unwrap(),
                "--loss",
                "sft",
                "--epochs",
                "8",
                "--lr",
                "3e-3",
                "--precision",
                precision,
            ]
            .into_iter()
            .chain(["--metrics", &mfile, "--save", &save, "--global-batch-size", "8"])
            .collect::<Vec<_>>(),
            &input,
        )
        .ok();
        let ms = metrics(t.path(), &mfile);
        (ms[0]["loss"].as_f64().unwrap(), ms.last().unwrap()["loss"].as_f64().unwrap())
    };
    let (f0, _) = run("fp32");
    let (a0, a_last) = run("amp");
    assert!(a0 != f0 && (a0 - f0).abs() < 0.02 * f0, "first-step loss fp32 {f0} vs amp {a0}");
    assert!(a_last < 0.8 * a0, "amp loss {a0} → {a_last}");
    let cfg: Value = serde_json::from_slice(&std::fs::read(t.path().join("out-amp/config.json")).unwrap()).unwrap();
    assert_eq!(cfg["torch_dtype"], "float32");
}

#[test]
fn grpo_positive_advantage_raises_that_sample() {
    let t = tmpdir();
    let m = tiny();
    // One sample rewarded, the rest neutral.
    let input = records(4, |i| if i == 2 { 1.0 } else { 0.0 });
    let before = seq_logprobs(t.path(), &m, &input);
    train(
        t.path(),
        &["--model", m.to_str().unwrap(), "--recompute-old-logprobs", "--lr", "1e-3", "--save", "s1"],
        &input,
    )
    .ok();
    let after = seq_logprobs(t.path(), &t.path().join("s1"), &input);
    assert!(after[2] > before[2] + 1e-3, "{before:?} → {after:?}");
}

#[test]
fn cpu_determinism_and_resume() {
    let t = tmpdir();
    let m = tiny();
    let input = records(4, |i| i as f32 - 1.5);
    let common = ["--recompute-old-logprobs", "--lr", "1e-3", "--weight-decay", "0.1"];
    let go = |model: &Path, save: &str, extra: &[&str]| {
        let mut a = vec!["--model", model.to_str().unwrap(), "--save", save];
        a.extend_from_slice(&common);
        a.extend_from_slice(extra);
        train(t.path(), &a, &input).ok();
    };
    go(&m, "a", &[]);
    go(&m, "b", &[]);
    let w = |d: &str| std::fs::read(t.path().join(d).join("model.safetensors")).unwrap();
    assert_eq!(w("a"), w("b"), "same inputs, checkpoint and seed → same bytes");
    assert_ne!(w("a"), std::fs::read(m.join("model.safetensors")).unwrap());
    // Two epochs in one run equal one epoch, save, and one resumed epoch
    // (SFT, so no old log-probs are recomputed between the two).
    let sft = ["--loss", "sft", "--lr", "1e-3", "--weight-decay", "0.1"];
    let go_sft = |model: &Path, save: &str, extra: &[&str]| {
        let mut a = vec!["--model", model.to_str().unwrap(), "--save", save];
        a.extend_from_slice(&sft);
        a.extend_from_slice(extra);
        train(t.path(), &a, &input).ok();
    };
    go_sft(&m, "two", &["--epochs", "2"]);
    go_sft(&m, "one", &[]);
    go_sft(&t.path().join("one"), "resumed", &["--resume"]);
    assert_eq!(w("two"), w("resumed"), "resume restores optimizer state and step");
    let st: Value =
        serde_json::from_str(&std::fs::read_to_string(t.path().join("resumed/trainer_state/state.json")).unwrap())
            .unwrap();
    assert_eq!(st["step"], 2);
}

#[test]
fn max_steps_then_resume_continues_mid_input_bit_for_bit() {
    // 3 epochs × 2 batches, shuffled, cosine schedule: stopped after 2 steps,
    // then after 3 more, then run to the end, it ends where one run ends.
    let t = tmpdir();
    let m = tiny();
    let input = records(4, |i| i as f32 - 1.5);
    let plan = [
        "--loss",
        "sft",
        "--lr",
        "1e-3",
        "--min-lr",
        "1e-4",
        "--lr-schedule",
        "cosine",
        "--weight-decay",
        "0.1",
        "--epochs",
        "3",
        "--global-batch-size",
        "2",
        "--shuffle",
        "--seed",
        "7",
    ];
    let go = |model: &Path, save: &str, extra: &[&str]| {
        let mut a = vec!["--model", model.to_str().unwrap(), "--save", save];
        a.extend_from_slice(&plan);
        a.extend_from_slice(extra);
        train(t.path(), &a, &input).ok();
    };
    let state = |d: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(t.path().join(d).join("trainer_state/state.json")).unwrap())
            .unwrap()
    };
    let w = |d: &str| std::fs::read(t.path().join(d).join("model.safetensors")).unwrap();
    go(&m, "whole", &[]);
    assert_eq!(state("whole")["step"], 6);
    assert_eq!(state("whole")["input"]["complete"], true);
    go(&m, "part1", &["--max-steps", "2"]);
    let s1 = state("part1");
    assert_eq!(
        (s1["step"].clone(), s1["input"]["epoch"].clone(), s1["input"]["batches"].clone()),
        (json!(2), json!(1), json!(0))
    );
    assert_eq!(s1["input"]["complete"], false);
    go(&t.path().join("part1"), "part2", &["--resume", "--max-steps", "3"]);
    let s2 = state("part2");
    assert_eq!(
        (s2["step"].clone(), s2["input"]["epoch"].clone(), s2["input"]["batches"].clone()),
        (json!(5), json!(2), json!(1))
    );
    assert_ne!(w("part2"), w("whole"));
    go(&t.path().join("part2"), "part3", &["--resume"]);
    assert_eq!(state("part3")["step"], 6);
    assert_eq!(w("part3"), w("whole"), "a run stopped twice and resumed ends on the same bytes");
    // Another input is not a continuation: the position is ignored and
    // every batch of the new input is trained.
    let other = records(4, |i| 1.5 - i as f32);
    let p1 = t.path().join("part1");
    let mut a = vec!["--model", p1.to_str().unwrap(), "--save", "other", "--resume"];
    a.extend_from_slice(&plan);
    train(t.path(), &a, &other).ok();
    assert_eq!(state("other")["step"], 8);
}

#[test]
fn killing_a_save_leaves_the_previous_checkpoint() {
    let t = tmpdir();
    let m = tiny();
    let input = records(4, |_| 1.0);
    train(
        t.path(),
        &["--model", m.to_str().unwrap(), "--recompute-old-logprobs", "--save", "ck", "--lr", "1e-3"],
        &input,
    )
    .ok();
    let dest = t.path().join("ck");
    let exe = common::exe("arl-train");
    let old = std::fs::read(dest.join("model.safetensors")).unwrap();
    let mut saw_new = false;
    for delay_ms in [0u64, 150, 300, 450] {
        let mut child = std::process::Command::new(&exe)
            .args([
                "--model",
                dest.to_str().unwrap(),
                "--recompute-old-logprobs",
                "--save",
                dest.to_str().unwrap(),
                "--lr",
                "1e-3",
                "--threads",
                "1",
                "-q",
                "--save-dtype",
                "float32",
            ])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        // Whatever the moment, `ck` is a complete checkpoint: the old or a new one.
        let now = std::fs::read(dest.join("model.safetensors")).unwrap();
        saw_new |= now != old;
        let r = run_in(t.path(), "arl-train", &["logprobs", "--model", "ck", "--threads", "1"], input.as_bytes());
        assert_eq!(r.code, 0, "after kill at {delay_ms} ms: {}", r.stderr);
        let names: Vec<String> =
            std::fs::read_dir(&dest).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert!(
            names.contains(&"config.json".to_string()) && names.contains(&"trainer_state".to_string()),
            "{names:?}"
        );
    }
    eprintln!("a kill landed after a completed save: {saw_new}");
}

#[test]
fn transformers_reads_what_arl_writes() {
    let Some(py) = common::python() else {
        panic!("ARL_PYTHON is not set: run the tests with `make test`");
    };
    let t = tmpdir();
    let m = tiny();
    let input = records(3, |i| i as f32 - 1.0);
    // A trained (not just initialised) checkpoint, sharded.
    train(
        t.path(),
        &[
            "--model",
            m.to_str().unwrap(),
            "--recompute-old-logprobs",
            "--lr",
            "1e-2",
            "--save",
            "ck",
            "--max-shard-size",
            "100KB",
        ],
        &input,
    )
    .ok();
    assert!(t.path().join("ck/model.safetensors.index.json").exists());
    let out = run_in(
        t.path(),
        "arl-train",
        &["logprobs", "--model", "ck", "--threads", "1", "-o", "lp.jsonl"],
        input.as_bytes(),
    )
    .ok();
    assert!(out.stdout.is_empty());
    let script = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/golden/make_tiny.py");
    let o = std::process::Command::new(py)
        .args([script.to_str().unwrap(), "--check-logprobs", "ck", "lp.jsonl"])
        .current_dir(t.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = v["max_abs_diff"].as_f64().unwrap();
    eprintln!("transformers vs arl log-probs: max |Δ| = {d:e}");
    assert!(d < 1e-4, "{d}");
}

/// Packed micro-batches (the default) and padded ones (`--no-packing`) give
/// the same step on responses of very different lengths: the same loss and
/// statistics, and the same weights to float32 rounding.
#[test]
fn packed_and_padded_micro_batches_take_the_same_step() {
    let t = tmpdir();
    let m = tiny();
    let input = tiny::jsonl_text((0..9).map(|i| {
        // 3 to ~200 response tokens.
        let text = "ab".repeat(1 + (i * i * 3) % 97);
        let (mut r, len) = tiny::record(i, &text);
        r["advantages"] = json!(vec![if i % 3 == 0 { -1.0 } else { 0.5 }; len]);
        r
    }));
    let step = |out: &str, extra: &[&str]| {
        let mut a = vec![
            "--model",
            m.to_str().unwrap(),
            "--recompute-old-logprobs",
            "--entropy-coef",
            "0.01",
            "--lr",
            "1e-3",
            "--max-tokens-per-micro-batch",
            "256",
            "--save",
            out,
            "--metrics",
        ];
        let mfile = format!("{out}.jsonl");
        a.push(&mfile);
        a.extend_from_slice(extra);
        train(t.path(), &a, &input).ok();
        metrics(t.path(), &mfile).remove(0)
    };
    let packed = step("packed", &[]);
    let padded = step("padded", &["--no-packing"]);
    for k in ["loss", "pg_loss", "entropy", "grad_norm", "trained_tokens"] {
        let (a, b) = (packed[k].as_f64().unwrap(), padded[k].as_f64().unwrap());
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{k}: packed {a}, padded {b}");
    }
    let read = |d: &str| -> std::collections::BTreeMap<String, tch::Tensor> {
        tch::Tensor::read_safetensors(t.path().join(d).join("model.safetensors")).unwrap().into_iter().collect()
    };
    let (a, b, base) = (read("packed"), read("padded"), read(m.to_str().unwrap()));
    let mut worst = 0f64;
    let mut moved = 0f64;
    for (k, x) in &a {
        worst = worst.max((x - &b[k]).abs().max().double_value(&[]));
        moved = moved.max((x - &base[k]).abs().max().double_value(&[]));
    }
    assert!(moved > 1e-4, "the step moved the weights by {moved}");
    assert!(worst < 1e-6, "packed and padded weights differ by {worst}");
}

/// GRPO groups: 3 prompts of 20-60 tokens × 4 samples of 2-90 tokens, some
/// answers sharing their first tokens, the records interleaved.
fn group_records() -> String {
    let mut recs = vec![];
    for k in 0..4 {
        for g in 0..3usize {
            let prompt: Vec<u32> = format!("<q{g}>{}", "context ".repeat(2 + 3 * g)).bytes().map(u32::from).collect();
            let text = if k % 2 == 0 {
                format!("ab{}", "cd".repeat(1 + (k * 7 + g * 13) % 45))
            } else {
                "x".repeat(2 + k + g)
            };
            let resp: Vec<u32> = text.bytes().map(u32::from).collect();
            let n = resp.len();
            let mut tokens = prompt.clone();
            tokens.extend(resp);
            let adv = if (k + g) % 3 == 0 { -1.0 } else { 0.5 };
            recs.push(json!({"prompt_id": format!("p{g}"), "sample_index": k, "tokens": tokens,
                "prompt_len": prompt.len(), "loss_mask": vec![1; n], "advantages": vec![adv; n],
                "values": vec![0.0; n], "returns": (0..n).map(|j| adv * (j as f64 / n as f64)).collect::<Vec<_>>()}));
        }
    }
    tiny::jsonl_text(recs)
}

/// The shared prompt forward (the default) and every sample run whole
/// (`--no-shared-prefix`) take the same step on GRPO groups — a group split
/// by the budget, the old-policy and reference log-probs recomputed, the
/// critic trained beside — and `arl-train logprobs` gives the same numbers.
#[test]
fn the_shared_prompt_forward_takes_the_same_step_as_whole_rows() {
    let t = tmpdir();
    let m = tiny();
    let input = group_records();
    let step = |out: &str, extra: &[&str]| {
        let mfile = format!("{out}.jsonl");
        let critic = format!("{out}-critic");
        let mut a = vec![
            "--model",
            m.to_str().unwrap(),
            "--recompute-old-logprobs",
            "--entropy-coef",
            "0.01",
            "--kl-loss-coef",
            "0.1",
            "--ref-model",
            m.to_str().unwrap(),
            "--lr",
            "1e-3",
            "--max-tokens-per-micro-batch",
            "200",
            "--save",
            out,
            "--metrics",
            &mfile,
            "--train-critic",
            "--critic-save",
            &critic,
            "--critic-lr",
            "3e-3",
        ];
        a.extend_from_slice(extra);
        train(t.path(), &a, &input).ok();
        metrics(t.path(), &mfile).remove(0)
    };
    let shared = step("shared", &[]);
    let whole = step("whole", &["--no-shared-prefix"]);
    for k in [
        "loss",
        "pg_loss",
        "kl_loss",
        "entropy",
        "grad_norm",
        "trained_tokens",
        "tokens",
        "value_loss",
        "value_grad_norm",
    ] {
        let (a, b) = (shared[k].as_f64().unwrap(), whole[k].as_f64().unwrap());
        assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{k}: shared {a}, whole {b}");
    }
    let read = |d: &str| -> std::collections::BTreeMap<String, tch::Tensor> {
        tch::Tensor::read_safetensors(t.path().join(d).join("model.safetensors")).unwrap().into_iter().collect()
    };
    let base = read(m.to_str().unwrap());
    for (x, y) in [("shared", "whole"), ("shared-critic", "whole-critic")] {
        let (a, b) = (read(x), read(y));
        let (mut worst, mut moved) = (0f64, 0f64);
        for (k, v) in &a {
            worst = worst.max((v - &b[k]).abs().max().double_value(&[]));
            // The critic's value head starts at 0 (and so its trunk barely moves).
            let from = base.get(k).map_or_else(|| v.zeros_like(), |w| w.shallow_clone());
            moved = moved.max((v - from).abs().max().double_value(&[]));
        }
        assert!(moved > 1e-4, "{x}: the step moved the weights by {moved}");
        // Adam's first step is lr·g/(|g|+eps): where a gradient is near eps,
        // float32 summation order alone moves that weight by up to ~1e-6
        // (1.75e-6 seen on an AMD EPYC), against the 1e-3 step. A layout
        // that gets a gradient wrong moves weights by the step itself.
        assert!(worst < 1e-5, "{x} and {y} weights differ by {worst} (the step moved them by {moved})");
    }
    // Scoring: the same log-probs either way.
    let lp = |extra: &[&str]| -> Vec<Vec<f64>> {
        let mut a = vec!["logprobs", "--model", m.to_str().unwrap(), "--max-tokens-per-micro-batch", "150"];
        a.extend_from_slice(extra);
        let out = run_in(t.path(), "arl-train", &a, input.as_bytes()).ok();
        jsonl(&out.stdout).iter().map(|r| serde_json::from_value(r["ref_log_probs"].clone()).unwrap()).collect()
    };
    let (x, y) = (lp(&[]), lp(&["--no-shared-prefix"]));
    assert_eq!(x.len(), 12);
    for (r, (u, v)) in x.iter().zip(&y).enumerate() {
        assert_eq!(u.len(), v.len());
        let d = u.iter().zip(v).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
        assert!(d < 1e-5, "record {r}: log-probs differ by {d:e}");
    }
}
