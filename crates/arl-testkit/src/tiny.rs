//! The tiny model committed under `testdata/tiny-model` (a character-level
//! Qwen2-shaped checkpoint: token id = byte) and records over its vocabulary,
//! shared by the trainer, critic and server tests.
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// `testdata/tiny-model`.
pub fn model() -> PathBuf {
    let p = crate::common::root().join("testdata/tiny-model");
    assert!(p.join("config.json").exists(), "missing {}", p.display());
    p
}

/// Record `i`: prompt `<q{i}>` and `response` as the tiny model's character
/// ids, with `prompt_id` `p{i}`, `tokens`, `prompt_len` and a `loss_mask` of
/// ones; returns it with the response's length, for the caller's per-token
/// fields.
pub fn record(i: usize, response: &str) -> (Value, usize) {
    let prompt: Vec<u32> = format!("<q{i}>").bytes().map(u32::from).collect();
    let resp: Vec<u32> = response.bytes().map(u32::from).collect();
    let n = resp.len();
    let mut tokens = prompt.clone();
    tokens.extend(resp);
    let r =
        json!({"prompt_id": format!("p{i}"), "tokens": tokens, "prompt_len": prompt.len(), "loss_mask": vec![1; n]});
    (r, n)
}

/// Records as JSONL text.
pub fn jsonl_text(recs: impl IntoIterator<Item = Value>) -> String {
    recs.into_iter().map(|r| r.to_string() + "\n").collect()
}

/// `n` records (`record(i, "answer {7·i}!")`) with advantage `adv(i)` on
/// every response token, as JSONL text.
pub fn advantaged_records(n: usize, adv: impl Fn(usize) -> f32) -> String {
    jsonl_text((0..n).map(|i| {
        let (mut r, len) = record(i, &format!("answer {}!", i * 7));
        r["advantages"] = json!(vec![adv(i); len]);
        r
    }))
}

/// `arl-train` on one thread, quiet, run in `dir` with `args` and `input`
/// on stdin; in float32 unless `args` say `--precision` (the tests compare
/// numbers, and what `--precision auto` picks may differ between CPUs).
pub fn train(dir: &Path, args: &[&str], input: &str) -> crate::common::Run {
    let mut a = vec!["--threads", "1", "-q"];
    if !args.contains(&"--precision") {
        a.extend(["--precision", "fp32"]);
    }
    a.extend_from_slice(args);
    crate::common::run_in(dir, "arl-train", &a, input.as_bytes())
}
