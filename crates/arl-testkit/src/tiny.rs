//! The tiny model committed under `testdata/tiny-model` (a character-level
//! Qwen2-shaped checkpoint: token id = byte) and records over its vocabulary,
//! shared by the trainer, critic and server tests.
use serde_json::{json, Value};
use std::path::PathBuf;

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
