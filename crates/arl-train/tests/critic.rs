//! PPO's critic through the real binaries on the tiny model: `arl-train
//! values` (a policy is a critic with a zero head; a trained one is
//! deterministic), `arl-advantage --estimator gae` on those values, and
//! `arl-train --train-critic` fitting the returns, its checkpoint (marked,
//! value head, AdamW state continued), and its bad-input errors.
use arl_testkit::{common, tiny};

use common::{jsonl, run_in, tmpdir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn tiny() -> PathBuf {
    tiny::model()
}

/// Rewarded records over the tiny model's character vocabulary: record i has
/// reward 1 when i is even, and a tool-output token (mask 0) at response position 2.
fn records(n: usize) -> String {
    tiny::jsonl_text((0..n).map(|i| {
        let (mut r, _) = tiny::record(i, &format!("answer {}!", i * 7));
        r["loss_mask"][2] = json!(0);
        r["sample_index"] = json!(0);
        r["reward"] = json!(if i % 2 == 0 { 1.0 } else { 0.0 });
        r
    }))
}

fn values(dir: &Path, critic: &Path, input: &[u8]) -> Vec<Value> {
    let r = run_in(dir, "arl-train", &["values", "--critic", critic.to_str().unwrap(), "--threads", "1", "-q"], input);
    assert_eq!(r.code, 0, "{}", r.stderr);
    jsonl(&r.stdout)
}

fn gae(dir: &Path, recs: &[Value]) -> String {
    let input: String = recs.iter().map(|r| r.to_string() + "\n").collect();
    let r = run_in(dir, "arl-advantage", &["--estimator", "gae", "-q"], input.as_bytes());
    assert_eq!(r.code, 0, "{}", r.stderr);
    String::from_utf8(r.stdout).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// 1 − Var(R − V)/Var(R) over trained tokens, computed here independently.
fn explained_variance(recs: &[Value]) -> f64 {
    let (mut r, mut d) = (vec![], vec![]);
    for x in recs {
        for ((v, g), m) in floats(&x["values"]).iter().zip(floats(&x["returns"])).zip(floats(&x["loss_mask"])) {
            if m == 1.0 {
                r.push(g);
                d.push(g - v);
            }
        }
    }
    let var = |x: &[f64]| {
        let mu = x.iter().sum::<f64>() / x.len() as f64;
        x.iter().map(|a| (a - mu).powi(2)).sum::<f64>() / x.len() as f64
    };
    1.0 - var(&d) / var(&r)
}

fn train_critic(dir: &Path, extra: &[&str], input: &str) -> common::Run {
    let m = tiny();
    let mut a = vec![
        "--threads",
        "1",
        "-q",
        "--precision",
        "fp32",
        "--model",
        m.to_str().unwrap(),
        "--save",
        "policy",
        "--recompute-old-logprobs",
        "--lr",
        "1e-4",
        "--train-critic",
        "--critic-save",
        "critic",
        "--critic-lr",
        "3e-3",
        "--metrics",
        "m.jsonl",
    ];
    a.extend_from_slice(extra);
    run_in(dir, "arl-train", &a, input.as_bytes())
}

#[test]
fn a_trained_critic_fits_the_returns_and_reloads() {
    let t = tmpdir();
    let p = t.path();
    // A policy checkpoint is a critic with a zero value head.
    let v0 = values(p, &tiny(), records(6).as_bytes());
    assert_eq!(v0.len(), 6);
    for r in &v0 {
        let v = floats(&r["values"]);
        assert_eq!(v.len(), r["loss_mask"].as_array().unwrap().len(), "one value per response token");
        assert!(v.iter().all(|&x| x == 0.0), "{r}");
    }
    let batch = gae(p, &v0);
    let r = train_critic(p, &["--epochs", "30"], &batch);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let m = jsonl(&std::fs::read(p.join("m.jsonl")).unwrap());
    assert_eq!(m.len(), 30);
    // The rollout's values were all 0: a constant critic explains nothing.
    assert!(m[0]["value_explained_var"].as_f64().unwrap().abs() < 1e-9, "{}", m[0]);
    // Returns are 1 or 0 on trained tokens, V = 0: value loss ½·mean(R²) = ¼
    // (the rewarded records hold 8 + 9 + 9 of the 52 trained tokens).
    assert!((m[0]["value_loss"].as_f64().unwrap() - 0.25).abs() < 1e-6, "{}", m[0]);
    let last = m[29]["value_loss"].as_f64().unwrap();
    assert!(last < 0.05, "the critic fits the returns: {last}");
    assert!(m.iter().all(|x| x["value_clipfrac"] == 0.0), "no clipping without --value-clip");
    // The checkpoint: marked, with a value head and the critic's AdamW state.
    let cfg: Value = serde_json::from_slice(&std::fs::read(p.join("critic/config.json")).unwrap()).unwrap();
    assert!(cfg["arl_critic"]["value_head"].is_array(), "{cfg}");
    let st: Value =
        serde_json::from_slice(&std::fs::read(p.join("critic/trainer_state/critic.json")).unwrap()).unwrap();
    assert_eq!(st["step"], 30);
    // Reloaded, it scores deterministically and explains the returns.
    let v1 = values(p, &p.join("critic"), records(6).as_bytes());
    let v1b = values(p, &p.join("critic"), records(6).as_bytes());
    assert_eq!(v1, v1b);
    let scored: Vec<Value> = jsonl(gae(p, &v1).as_bytes());
    let ev = explained_variance(&scored);
    assert!(ev > 0.5, "explained variance of the trained critic: {ev}");
    // A second run continues the critic's own AdamW moments.
    let batch2: String = scored.iter().map(|r| r.to_string() + "\n").collect();
    let r = train_critic(p, &["--critic", "critic", "--epochs", "2", "--value-clip", "0.001"], &batch2);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let st: Value =
        serde_json::from_slice(&std::fs::read(p.join("critic/trainer_state/critic.json")).unwrap()).unwrap();
    assert_eq!(st["step"], 32);
    let m = jsonl(&std::fs::read(p.join("m.jsonl")).unwrap());
    assert!((m[30]["value_explained_var"].as_f64().unwrap() - ev).abs() < 1e-4, "{} vs {ev}", m[30]);
    // The first step starts at V_old (nothing clipped); after it V has moved
    // by more than 0.001 on some tokens, which the second step clips.
    assert_eq!(m[30]["value_clipfrac"], 0.0, "{}", m[30]);
    assert!(m[31]["value_clipfrac"].as_f64().unwrap() > 0.0, "{}", m[31]);
    // A critic is not a policy: loading it as one names the head.
    let r = run_in(p, "arl-train", &["logprobs", "--model", "critic", "--threads", "1"], records(1).as_bytes());
    assert_ne!(r.code, 0);
    assert!(r.stderr.contains("value_head.weight"), "{}", r.stderr);
}

#[test]
fn train_critic_names_what_is_missing() {
    let t = tmpdir();
    let p = t.path();
    // No returns (no arl-advantage gae): bad data, naming the field and line.
    let plain: Vec<Value> = jsonl(records(2).as_bytes())
        .into_iter()
        .map(|mut r| {
            let n = r["loss_mask"].as_array().unwrap().len();
            r["advantages"] = json!(vec![0.5; n]);
            r
        })
        .collect();
    let input: String = plain.iter().map(|r| r.to_string() + "\n").collect();
    let r = train_critic(p, &[], &input);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("`returns`") && r.stderr.contains(":1"), "{}", r.stderr);
    // Value clipping needs the rollout's values.
    let batch = gae(p, &values(p, &tiny(), records(2).as_bytes()));
    let no_values: String = jsonl(batch.as_bytes())
        .into_iter()
        .map(|mut r| {
            r.as_object_mut().unwrap().remove("values");
            r.to_string() + "\n"
        })
        .collect();
    let r = train_critic(p, &["--value-clip", "0.2"], &no_values);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("`values`"), "{}", r.stderr);
    // Without clipping the values are not needed.
    let r = train_critic(p, &[], &no_values);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // `--train-critic` without `--critic-save` is a usage error.
    let m = tiny();
    let r = run_in(
        p,
        "arl-train",
        &["--model", m.to_str().unwrap(), "--recompute-old-logprobs", "--train-critic", "-q"],
        batch.as_bytes(),
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--critic-save"), "{}", r.stderr);
}

/// With `--lora-rank`, the policy and the critic each train an adapter (the
/// critic's value head trains too): the critic directory is the adapter
/// with `value_head.safetensors`, it fits the returns, reloads for `arl-train
/// values` and continues its own AdamW moments.
#[test]
fn a_lora_critic_trains_its_adapter_and_value_head() {
    let t = tmpdir();
    let p = t.path();
    let batch = gae(p, &values(p, &tiny(), records(6).as_bytes()));
    let lora = ["--lora-rank", "4", "--lora-alpha", "8", "--epochs", "30"];
    let r = train_critic(p, &lora, &batch);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let m = jsonl(&std::fs::read(p.join("m.jsonl")).unwrap());
    assert!((m[0]["value_loss"].as_f64().unwrap() - 0.25).abs() < 1e-6, "{}", m[0]);
    let last = m[29]["value_loss"].as_f64().unwrap();
    assert!(last < 0.1, "the LoRA critic fits the returns: {last}");
    let c = p.join("critic");
    for f in ["adapter_config.json", "adapter_model.safetensors", "value_head.safetensors"] {
        assert!(c.join(f).exists(), "{f}");
    }
    assert!(!c.join("config.json").exists() && p.join("policy/adapter_model.safetensors").exists());
    let v1 = values(p, &c, records(6).as_bytes());
    assert!(v1.iter().any(|r| floats(&r["values"]).iter().any(|&x| x != 0.0)));
    let ev = explained_variance(&jsonl(gae(p, &v1).as_bytes()));
    assert!(ev > 0.3, "explained variance of the LoRA critic: {ev}");
    let r = train_critic(p, &["--critic", "critic", "--epochs", "2", "--lora-rank", "4", "--lora-alpha", "8"], &batch);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let st: Value = serde_json::from_slice(&std::fs::read(c.join("trainer_state/critic.json")).unwrap()).unwrap();
    assert_eq!(st["step"], 32);
}
