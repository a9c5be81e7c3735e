//! `arl-train --lora-rank` end to end on the tiny model: the first step is
//! the base policy (ratio exactly 1) and only the adapter moves, the adapter
//! is PEFT's format (PEFT loads it onto the transformers model with the same
//! log-probs), `arl-train merge` equals base + s·B·A, `--resume` with an
//! adapter is bit for bit, and adapters that do not fit are refused.
use arl_testkit::{common, tiny};

use common::{jsonl, run_in, tmpdir};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tiny::{advantaged_records as records, train};

fn tiny() -> PathBuf {
    tiny::model()
}

/// Every float32 tensor of a safetensors file, by name.
fn tensors(path: &Path) -> Vec<(String, Vec<i64>, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Vec<_> = st
        .tensors()
        .into_iter()
        .map(|(name, v)| {
            assert_eq!(v.dtype(), safetensors::Dtype::F32, "{name}");
            let shape = v.shape().iter().map(|&d| d as i64).collect();
            (name, shape, v.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Per-token response log-probs of every record under `model`.
fn logprobs(dir: &Path, model: &str, input: &str) -> Vec<Vec<f64>> {
    let out = run_in(dir, "arl-train", &["logprobs", "--model", model, "--threads", "1"], input.as_bytes()).ok();
    jsonl(&out.stdout)
        .iter()
        .map(|r| r["ref_log_probs"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect())
        .collect()
}

fn max_diff(a: &[Vec<f64>], b: &[Vec<f64>]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[test]
fn first_step_is_the_base_policy_and_only_the_adapter_is_saved() {
    let t = tmpdir();
    let m = tiny();
    let input = records(6, |i| if i % 2 == 0 { 1.0 } else { -1.0 });
    let go = |save: &str, extra: &[&str]| {
        let mpath = format!("{save}.jsonl");
        let mut a = vec!["--model", m.to_str().unwrap(), "--recompute-old-logprobs", "--save", save];
        a.extend_from_slice(&["--metrics", &mpath, "--lr", "1e-2", "--global-batch-size", "6"]);
        a.extend_from_slice(extra);
        train(t.path(), &a, &input).ok();
        jsonl(&std::fs::read(t.path().join(mpath)).unwrap())
    };
    let ms = go("ad", &["--lora-rank", "4", "--lora-alpha", "8", "--lora-targets", "q_proj,v_proj,down_proj"]);
    assert_eq!(ms.len(), 1);
    assert_eq!(ms[0]["ratio_min"], 1.0, "{}", ms[0]);
    assert_eq!(ms[0]["ratio_max"], 1.0, "{}", ms[0]);
    assert_eq!(ms[0]["approx_kl"], 0.0);
    assert!(ms[0]["grad_norm"].as_f64().unwrap() > 0.0);
    // The adapter alone, in PEFT's layout, naming its base.
    let ad = t.path().join("ad");
    assert!(!ad.join("config.json").exists() && !ad.join("model.safetensors").exists());
    let cfg: Value = serde_json::from_str(&std::fs::read_to_string(ad.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(
        (cfg["peft_type"].as_str(), cfg["r"].as_u64(), cfg["lora_alpha"].as_f64()),
        (Some("LORA"), Some(4), Some(8.0))
    );
    assert_eq!(cfg["target_modules"], json!(["q_proj", "v_proj", "down_proj"]));
    assert_eq!(PathBuf::from(cfg["base_model_name_or_path"].as_str().unwrap()), std::fs::canonicalize(&m).unwrap());
    let ts = tensors(&ad.join("adapter_model.safetensors"));
    let model_cfg: Value = serde_json::from_str(&std::fs::read_to_string(m.join("config.json")).unwrap()).unwrap();
    let layers = model_cfg["num_hidden_layers"].as_u64().unwrap() as usize;
    assert_eq!(ts.len(), layers * 3 * 2, "A and B of 3 projections per layer");
    let hidden = model_cfg["hidden_size"].as_i64().unwrap();
    let (name, shape, _) = &ts[0];
    assert!(name.starts_with("base_model.model.model.layers.0."), "{name}");
    assert!(
        ts.iter()
            .any(|(n, s, _)| n == "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
                && s == &vec![4, hidden]),
        "{name} {shape:?}"
    );
    // B moved from zero (the policy changed), and the optimizer holds the
    // adapter's moments only: 2 float32 moments per adapter element.
    assert!(ts.iter().filter(|(n, _, _)| n.contains("lora_B")).all(|(_, _, v)| v.iter().any(|x| *x != 0.0)));
    let numel: usize = ts.iter().map(|(_, _, v)| v.len()).sum();
    assert_eq!(ms[0]["optimizer_state_bytes"].as_f64().unwrap(), (numel * 8) as f64, "{}", ms[0]);
    let full = go("full", &[]);
    assert!(full[0]["optimizer_state_bytes"].as_f64().unwrap() > 10.0 * (numel * 8) as f64);
    // The adapter changes the log-probs; the base's are untouched.
    let (base, adapted) = (logprobs(t.path(), m.to_str().unwrap(), &input), logprobs(t.path(), "ad", &input));
    assert!(max_diff(&base, &adapted) > 1e-4);
    // A second run continues the adapter (`--model ADAPTER`); flags that
    // disagree with it are refused.
    let a = ["--model", "ad", "--recompute-old-logprobs", "--save", "ad2", "--lr", "1e-2"];
    train(t.path(), &a, &input).ok();
    assert!(t.path().join("ad2/adapter_model.safetensors").exists());
    let mut bad = a.to_vec();
    bad.extend_from_slice(&["--lora-rank", "8"]);
    let r = train(t.path(), &bad, &input);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("rank 4") && r.stderr.contains("rank 8"), "{}", r.stderr);
}

#[test]
fn peft_loads_the_adapter_and_merge_equals_base_plus_ba() {
    let py = common::require_python();
    let t = tmpdir();
    let m = tiny();
    let input = records(3, |i| i as f32 - 1.0);
    let a = ["--model", m.to_str().unwrap(), "--recompute-old-logprobs", "--lr", "3e-2", "--save", "ad"];
    let mut a = a.to_vec();
    a.extend_from_slice(&["--lora-rank", "4", "--lora-alpha", "16"]);
    train(t.path(), &a, &input).ok();
    run_in(t.path(), "arl-train", &["logprobs", "--model", "ad", "--threads", "1", "-o", "lp.jsonl"], input.as_bytes())
        .ok();
    let script = common::root().join("scripts/golden/make_tiny.py");
    let check = |dir: &str, lp: &str| -> f64 {
        let o = std::process::Command::new(&py)
            .args([script.to_str().unwrap(), "--check-logprobs", dir, lp])
            .current_dir(t.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<Value>(&o.stdout).unwrap()["max_abs_diff"].as_f64().unwrap()
    };
    let d = check("ad", "lp.jsonl");
    eprintln!("PEFT on transformers vs arl, adapter log-probs: max |Δ| = {d:e}");
    assert!(d < 1e-4, "{d}");
    // The merged checkpoint: an ordinary model with the adapter's log-probs,
    // which transformers reads too.
    run_in(t.path(), "arl-train", &["merge", "--model", "ad", "--out", "merged"], b"").ok();
    assert!(t.path().join("merged/config.json").exists() && t.path().join("merged/tokenizer.json").exists());
    let (lp_ad, lp_merged) = (logprobs(t.path(), "ad", &input), logprobs(t.path(), "merged", &input));
    let d = max_diff(&lp_ad, &lp_merged);
    eprintln!("merged vs adapter log-probs: max |Δ| = {d:e}");
    assert!(d < 1e-4, "{d}");
    let base = logprobs(t.path(), m.to_str().unwrap(), &input);
    assert!(max_diff(&base, &lp_merged) > 1e-3, "the adapter changed nothing: the comparison would prove nothing");
    run_in(
        t.path(),
        "arl-train",
        &["logprobs", "--model", "merged", "--threads", "1", "-o", "lpm.jsonl"],
        input.as_bytes(),
    )
    .ok();
    assert!(check("merged", "lpm.jsonl") < 1e-4);
    // Merge is W + (alpha/r)·B·A, tensor by tensor.
    let ad = tensors(&t.path().join("ad/adapter_model.safetensors"));
    let (base_w, merged_w) =
        (tensors(&m.join("model.safetensors")), tensors(&t.path().join("merged/model.safetensors")));
    let find = |v: &[(String, Vec<i64>, Vec<f32>)], n: &str| v.iter().find(|x| x.0 == n).cloned().unwrap();
    let mut checked = 0;
    for (name, shape, w) in &base_w {
        let (_, _, mw) = find(&merged_w, name);
        let key = |ab: &str| format!("base_model.model.{}.lora_{ab}.weight", name.trim_end_matches(".weight"));
        match ad.iter().find(|x| x.0 == key("A")) {
            None => assert_eq!(w, &mw, "{name}: not adapted, unchanged"),
            Some((_, ashape, av)) => {
                let (_, _, bv) = find(&ad, &key("B"));
                let (out, inp, r) = (shape[0] as usize, shape[1] as usize, ashape[0] as usize);
                for o in 0..out {
                    for i in 0..inp {
                        let ba: f32 = (0..r).map(|k| bv[o * r + k] * av[k * inp + i]).sum();
                        let want = w[o * inp + i] + 16.0 / 4.0 * ba;
                        assert!(
                            (mw[o * inp + i] - want).abs() <= 1e-6,
                            "{name}[{o},{i}]: {} vs {want}",
                            mw[o * inp + i]
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    assert!(checked >= 7, "all-linear: every projection of every layer ({checked})");
}

#[test]
fn resume_with_an_adapter_is_bit_for_bit() {
    let t = tmpdir();
    let m = tiny();
    let input = records(4, |i| i as f32 - 1.5);
    let sft = ["--loss", "sft", "--lr", "1e-2", "--weight-decay", "0.1", "--lora-rank", "2", "--lora-dropout", "0.1"];
    let go = |model: &Path, save: &str, extra: &[&str]| {
        let mut a = vec!["--model", model.to_str().unwrap(), "--save", save];
        a.extend_from_slice(&sft);
        a.extend_from_slice(extra);
        train(t.path(), &a, &input).ok();
    };
    go(&m, "two", &["--epochs", "2"]);
    go(&m, "one", &[]);
    go(&t.path().join("one"), "resumed", &["--resume"]);
    let w = |d: &str| std::fs::read(t.path().join(d).join("adapter_model.safetensors")).unwrap();
    assert!(w("one") != w("two"));
    assert!(
        w("two") == w("resumed"),
        "resume restores the adapter, its optimizer state, the step and the dropout masks"
    );
}

#[test]
fn adapters_that_do_not_fit_are_refused() {
    let t = tmpdir();
    let m = tiny();
    let input = records(2, |_| 1.0);
    train(t.path(), &["--model", m.to_str().unwrap(), "--loss", "sft", "--save", "ad", "--lora-rank", "2"], &input)
        .ok();
    // Another base's shapes: a B matrix one row short.
    std::fs::create_dir(t.path().join("bad")).unwrap();
    std::fs::copy(t.path().join("ad/adapter_config.json"), t.path().join("bad/adapter_config.json")).unwrap();
    let bytes = std::fs::read(t.path().join("ad/adapter_model.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = vec![];
    for (name, v) in st.tensors() {
        let mut shape = v.shape().to_vec();
        let mut data = v.data().to_vec();
        if name == "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight" {
            shape[0] -= 1;
            data.truncate(data.len() - shape[1] * 4);
        }
        owned.push((name, v.dtype(), shape, data));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = owned
        .iter()
        .map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, &t.path().join("bad/adapter_model.safetensors")).unwrap();
    for args in [
        vec!["logprobs", "--model", "bad", "--threads", "1"],
        vec!["--model", "bad", "--loss", "sft", "--threads", "1"],
        vec!["merge", "--model", "bad", "--out", "merged"],
    ] {
        let r = run_in(t.path(), "arl-train", &args, input.as_bytes());
        assert_eq!(r.code, 65, "{args:?}: {}", r.stderr);
        assert!(
            r.stderr.contains("layers.0.mlp.down_proj.lora_B.weight") && r.stderr.contains("another base model"),
            "{}",
            r.stderr
        );
    }
    assert!(!t.path().join("merged").exists());
    // A config arl cannot apply exactly is named.
    let mut cfg: Value =
        serde_json::from_str(&std::fs::read_to_string(t.path().join("ad/adapter_config.json")).unwrap()).unwrap();
    cfg["use_dora"] = json!(true);
    std::fs::write(t.path().join("ad/adapter_config.json"), cfg.to_string()).unwrap();
    let r = run_in(t.path(), "arl-train", &["logprobs", "--model", "ad"], input.as_bytes());
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("DoRA"), "{}", r.stderr);
}
