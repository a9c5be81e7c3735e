//! The whole loop, three steps, through the real binaries: `arl-serve` on
//! loopback serving a model made here from scratch, then per step
//! `arl-tasks → arl-rollout → arl-reward → arl-filter → arl-advantage →
//! arl-train → arl-sync`. Checks that every file between stages is valid, that
//! the weight version advances, and that after each sync the server computes
//! with exactly the checkpoint the trainer wrote (its sampling log-probs equal
//! the trainer's log-probs of the same tokens under that checkpoint).
use arl_testkit::common;
use arl_testkit::serve_util;

use common::{jsonl, run_in};
use serde_json::Value;
use serve_util::Server;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every record of a trained batch: lengths agree, masks are 0/1, and the
/// fields each stage adds are there.
fn check_batch(recs: &[Value], version: u32) {
    assert!(!recs.is_empty(), "empty batch");
    for r in recs {
        let tokens = r["tokens"].as_array().expect("tokens").len();
        let plen = r["prompt_len"].as_u64().expect("prompt_len") as usize;
        let mask = r["loss_mask"].as_array().expect("loss_mask");
        assert_eq!(tokens, plen + mask.len(), "tokens = prompt + response");
        assert!(mask.iter().all(|m| m == 0 || m == 1));
        assert_eq!(r["rollout_log_probs"].as_array().unwrap().len(), mask.len());
        assert_eq!(r["advantages"].as_array().expect("advantages").len(), mask.len());
        assert!(r["reward"].is_number(), "reward: {r}");
        assert!(r["reward_detail"].is_object());
        let wv = r["weight_versions"].as_array().expect("weight_versions");
        assert!(!wv.is_empty() && wv.iter().all(|v| v == &Value::String(version.to_string())), "{wv:?} at {version}");
        // Tool output is never trained.
        for (m, lp) in mask.iter().zip(r["rollout_log_probs"].as_array().unwrap()) {
            if m == 0 {
                assert_eq!(lp.as_f64(), Some(0.0));
            }
        }
    }
}

#[test]
fn three_steps_of_the_loop_against_arl_serve() {
    let d = common::tmpdir();
    let p = d.path();
    let cfg = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("scripts/golden/tiny.json");
    run_in(p, "arl-train", &["make-tokenizer", "--template", "compact", "--out", "tok"], b"").ok();
    run_in(p, "arl-train", &["init", "--config", s(&cfg), "--tokenizer", "tok", "--out", "step-0", "--seed", "3"], b"")
        .ok();
    run_in(p, "arl-tasks", &["arith", "-n", "12", "--difficulty", "3", "--seed", "5", "-o", "prompts.jsonl"], b"").ok();

    let server = Server::start(&["--model-path", s(&p.join("step-0")), "--weight-version", "0"]);
    let (_, info) = server.get("/get_model_info");
    assert_eq!(info["weight_version"], "0");

    for step in 1..=3u32 {
        let prev = format!("step-{}", step - 1);
        let next = format!("step-{step}");
        // Rollout batch step-1 of the prompt pool: 4 prompts × 4 samples, calculator tool.
        let rollout = run_in(
            p,
            "arl-rollout",
            &[
                "-q",
                "-i",
                "prompts.jsonl",
                "--batch-size",
                "4",
                "--step",
                &(step - 1).to_string(),
                "--endpoint",
                &server.url,
                "--tokenizer",
                &prev,
                "-n",
                "4",
                "--tools",
                "calculator",
                "--max-turns",
                "2",
                "--max-response-len",
                "48",
                "--temperature",
                "1.0",
                "-o",
                "rollouts.jsonl",
            ],
            b"",
        )
        .ok();
        drop(rollout);
        let recs = jsonl(&std::fs::read(p.join("rollouts.jsonl")).unwrap());
        assert_eq!(recs.len(), 16);

        // The server sampled with the weights of `prev`: its log-probs are the
        // trainer's log-probs of the same tokens under that checkpoint.
        run_in(
            p,
            "arl-train",
            &["logprobs", "--model", &prev, "-i", "rollouts.jsonl", "-o", "scored-ref.jsonl", "-q"],
            b"",
        )
        .ok();
        let with_ref = jsonl(&std::fs::read(p.join("scored-ref.jsonl")).unwrap());
        let mut compared = 0;
        for r in &with_ref {
            let mask = r["loss_mask"].as_array().unwrap();
            let a = r["rollout_log_probs"].as_array().unwrap();
            let b = r["ref_log_probs"].as_array().unwrap();
            for ((m, x), y) in mask.iter().zip(a).zip(b) {
                if m == 1 {
                    let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
                    assert!((x - y).abs() < 2e-3, "step {step}: server log-prob {x} vs trainer {y} under {prev}");
                    compared += 1;
                }
            }
        }
        assert!(compared > 50, "{compared} tokens compared");

        run_in(p, "arl-reward", &["-q", "--rm", "auto", "-i", "rollouts.jsonl", "-o", "scored.jsonl"], b"").ok();
        run_in(
            p,
            "arl-filter",
            &["-q", "--drop-status", "aborted,failed", "-i", "scored.jsonl", "-o", "kept.jsonl"],
            b"",
        )
        .ok();
        run_in(
            p,
            "arl-advantage",
            &["-q", "--estimator", "grpo", "--group-size", "4", "-i", "kept.jsonl", "-o", "batch.parquet"],
            b"",
        )
        .ok();
        let batch = run_in(p, "arl-inspect", &["convert", "-i", "batch.parquet", "-q"], b"").ok();
        check_batch(&jsonl(&batch.stdout), step - 1);

        run_in(
            p,
            "arl-train",
            &[
                "-q",
                "--precision",
                "fp32",
                "--model",
                &prev,
                "--save",
                &next,
                "-i",
                "batch.parquet",
                "--lr",
                "1e-3",
                "--seed",
                "1",
                "--metrics",
                "m.jsonl",
            ],
            b"",
        )
        .ok();
        assert!(p.join(&next).join("config.json").exists() && p.join(&next).join("tokenizer.json").exists());
        // Readable by an inference server running as another user.
        use std::os::unix::fs::PermissionsExt;
        for f in ["model.safetensors", "config.json"] {
            let mode = std::fs::metadata(p.join(&next).join(f)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "{f}");
        }
        assert_eq!(std::fs::metadata(p.join(&next)).unwrap().permissions().mode() & 0o777, 0o755);
        let sync = run_in(
            p,
            "arl-sync",
            &["--checkpoint", &next, "--endpoint", &server.url, "--weight-version", &step.to_string()],
            b"",
        );
        let sync = sync.ok();
        drop(sync);
        let (_, info) = server.get("/get_model_info");
        assert_eq!(info["weight_version"], step.to_string(), "{info}");
        let served = std::fs::canonicalize(info["model_path"].as_str().unwrap()).unwrap();
        assert_eq!(served, std::fs::canonicalize(p.join(&next)).unwrap(), "the server reports the trained checkpoint");
    }
    // One optimizer step per RL step, and the metrics say so.
    let m = jsonl(&std::fs::read(p.join("m.jsonl")).unwrap());
    assert_eq!(m.len(), 3);
    assert!(m.iter().all(|x| x["loss"].as_f64().is_some_and(f64::is_finite)));
}
