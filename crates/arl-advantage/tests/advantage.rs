//! `arl-advantage` end to end: hand-computed cases per estimator through the
//! real binary, grouping by `prompt_id`, bad records, streaming.
use arl_testkit::common;
use common::{jsonl, run, run_in, tmpdir};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// A trajectory with `n` response tokens.
fn traj(id: &str, ix: u32, reward: f64, mask: &[u8]) -> Value {
    let n = mask.len();
    json!({
        "prompt_id": id, "sample_index": ix, "reward": reward,
        "tokens": (0..(2 + n) as u32).collect::<Vec<_>>(), "prompt_len": 2,
        "loss_mask": mask, "keep_me": {"x": [1, 2]},
    })
}

fn lines(recs: &[Value]) -> Vec<u8> {
    let mut s = String::new();
    for r in recs {
        s += &r.to_string();
        s.push('\n');
    }
    s.into_bytes()
}

fn floats(v: &Value, field: &str) -> Vec<f64> {
    v[field].as_array().unwrap_or_else(|| panic!("no {field} in {v}")).iter().map(|x| x.as_f64().unwrap()).collect()
}

#[track_caller]
fn close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{got:?} vs {want:?}");
    }
}

fn by_key(out: &[Value]) -> std::collections::HashMap<(String, u64), Value> {
    out.iter()
        .map(|v| ((v["prompt_id"].as_str().unwrap().to_string(), v["sample_index"].as_u64().unwrap()), v.clone()))
        .collect()
}

#[test]
fn grpo_uneven_groups_singletons_tool_tokens() {
    // Interleaved: groups come from prompt_id, not position.
    let input = lines(&[
        traj("a", 0, 1.0, &[1, 0, 1]),
        traj("b", 0, 2.0, &[1, 1]),
        traj("a", 1, 0.0, &[1, 1, 1]),
        traj("c", 0, 5.0, &[1]),
        traj("b", 1, 0.0, &[1, 1]),
        traj("a", 2, 0.0, &[0, 1, 1]),
        traj("b", 2, 1.0, &[1, 0]),
        traj("a", 3, 1.0, &[1, 1, 1]),
        traj("d", 0, 0.5, &[1, 1]),
        traj("d", 1, 0.5, &[1, 1]),
    ]);
    let r = run("arl-advantage", &["--estimator", "grpo"], &input).ok();
    assert!(r.stderr.contains("1 group(s) of a single sample") && r.stderr.contains("`c`"), "{}", r.stderr);
    let out = jsonl(&r.stdout);
    assert_eq!(out.len(), 10);
    // Groups in order of first record, records in input order.
    let order: Vec<String> =
        out.iter().map(|v| format!("{}{}", v["prompt_id"].as_str().unwrap(), v["sample_index"])).collect();
    assert_eq!(order, ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "c0", "d0", "d1"]);
    let m = by_key(&out);
    // a: rewards 1,0,0,1, mean .5, Bessel std sqrt(1/3)
    let s = 0.5 / ((1.0f64 / 3.0).sqrt() + 1e-6);
    close(&floats(&m[&("a".into(), 0)], "advantages"), &[s, 0.0, s]);
    close(&floats(&m[&("a".into(), 2)], "advantages"), &[0.0, -s, -s]);
    // b (3 samples): rewards 2,0,1: mean 1, std 1
    let t = 1.0 / (1.0 + 1e-6);
    close(&floats(&m[&("b".into(), 0)], "advantages"), &[t, t]);
    close(&floats(&m[&("b".into(), 2)], "advantages"), &[0.0, 0.0]);
    close(&floats(&m[&("b".into(), 1)], "returns"), &[-t, -t]);
    close(&floats(&m[&("c".into(), 0)], "advantages"), &[0.0]);
    close(&floats(&m[&("d".into(), 1)], "advantages"), &[0.0, 0.0]);
    // Unknown fields pass through unchanged.
    assert_eq!(m[&("a".into(), 0)]["keep_me"], json!({"x": [1, 2]}));

    // Dr.GRPO: no std division.
    let out = jsonl(&run("arl-advantage", &["--no-std", "-q"], &input).ok().stdout);
    let m = by_key(&out);
    close(&floats(&m[&("a".into(), 0)], "advantages"), &[0.5, 0.0, 0.5]);
    close(&floats(&m[&("b".into(), 0)], "advantages"), &[1.0, 1.0]);
}

#[test]
fn rloo_by_hand() {
    let input = lines(&[
        traj("a", 0, 1.0, &[1, 1]),
        traj("a", 1, 0.0, &[1, 0]),
        traj("a", 2, 0.0, &[1, 1]),
        traj("b", 0, 3.0, &[1]),
    ]);
    let out = jsonl(&run("arl-advantage", &["--estimator", "rloo", "-q"], &input).ok().stdout);
    let m = by_key(&out);
    close(&floats(&m[&("a".into(), 0)], "advantages"), &[1.0, 1.0]);
    close(&floats(&m[&("a".into(), 1)], "advantages"), &[-0.5, 0.0]);
    close(&floats(&m[&("b".into(), 0)], "advantages"), &[0.0]);
}

/// Log-probs giving a k1 KL of 1 per trained token.
fn with_kl(mut v: Value) -> Value {
    let n = v["loss_mask"].as_array().unwrap().len();
    v["rollout_log_probs"] = json!(vec![-1.0; n]);
    v["ref_log_probs"] = json!(vec![-2.0; n]);
    v
}

#[test]
fn reinforce_pp_by_hand_and_whitened() {
    // mask 1 1 0 1 0, γ = 0.5, kl_coef 0.1, k1 KL = 1 on trained tokens:
    // token rewards -0.1,-0.1,0,-0.1+1,0 → G4=0, G3=0.9, G2=0.45, G1=0.125, G0=-0.0375
    let input = lines(&[with_kl(traj("a", 0, 1.0, &[1, 1, 0, 1, 0])), with_kl(traj("b", 0, 0.0, &[1, 1]))]);
    let args = ["--estimator", "reinforce++", "--gamma", "0.5", "--kl-coef", "0.1", "--no-normalize"];
    let out = jsonl(&run("arl-advantage", &args, &input).ok().stdout);
    close(&floats(&out[0], "advantages"), &[-0.0375, 0.125, 0.0, 0.9, 0.0]);
    // b: -0.1, -0.1 → G1 = -0.1, G0 = -0.15
    close(&floats(&out[1], "advantages"), &[-0.15, -0.1]);

    // Default: whitened over the batch's trained tokens (unbiased variance, eps 1e-8);
    // returns stay the raw returns.
    let out = jsonl(&run("arl-advantage", &args[..6], &input).ok().stdout);
    let trained = [-0.0375, 0.125, 0.9, -0.15, -0.1];
    let mean: f64 = trained.iter().sum::<f64>() / 5.0;
    let var: f64 = trained.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / 4.0;
    let w = |x: f64| (x - mean) / (var + 1e-8).sqrt();
    close(&floats(&out[0], "advantages"), &[w(-0.0375), w(0.125), 0.0, w(0.9), 0.0]);
    close(&floats(&out[1], "advantages"), &[w(-0.15), w(-0.1)]);
    close(&floats(&out[0], "returns"), &[-0.0375, 0.125, 0.0, 0.9, 0.0]);
}

#[test]
fn reinforce_pp_baseline_by_hand() {
    // group a: rewards 1, 0 → baselined 0.5, -0.5; k2 KL = 0.5 per trained token, coef 0.2 → -0.1
    let input = lines(&[with_kl(traj("a", 0, 1.0, &[1, 0, 1])), with_kl(traj("a", 1, 0.0, &[1, 1, 1]))]);
    let args =
        ["--estimator", "reinforce++-baseline", "--kl-coef", "0.2", "--kl-estimator", "k2", "--no-normalize", "-q"];
    let out = jsonl(&run("arl-advantage", &args, &input).ok().stdout);
    close(&floats(&out[0], "advantages"), &[0.4, 0.0, 0.4]);
    close(&floats(&out[1], "advantages"), &[-0.6, -0.6, -0.6]);
    // whitened (the default): trained values 0.4,0.4,-0.6,-0.6,-0.6
    let out = jsonl(&run("arl-advantage", &args[..6], &input).ok().stdout);
    let t = [0.4, 0.4, -0.6, -0.6, -0.6];
    let mean: f64 = t.iter().sum::<f64>() / 5.0;
    let sd = (t.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / 4.0 + 1e-8).sqrt();
    close(&floats(&out[0], "advantages"), &[(0.4 - mean) / sd, 0.0, (0.4 - mean) / sd]);
    close(&floats(&out[1], "returns"), &[(-0.6 - mean) / sd; 3]);
}

#[test]
fn gae_by_hand_vanilla_and_chunked() {
    // r = [0, 0(tool), 1] (reward on the last response token), V = [0.5, 0.2, 0.4], γ .9, λ .8
    let mut t = traj("a", 0, 1.0, &[1, 0, 1]);
    t["values"] = json!([0.5, 0.2, 0.4]);
    let input = lines(&[t]);
    for imp in ["vanilla", "chunked"] {
        let args = ["--estimator", "gae", "--gamma", "0.9", "--lambda", "0.8", "--gae-impl", imp, "--chunk", "2"];
        let out = jsonl(&run("arl-advantage", &args, &input).ok().stdout);
        close(&floats(&out[0], "advantages"), &[0.10624, 0.0, 0.6]);
        close(&floats(&out[0], "returns"), &[0.60624, 0.0, 1.0]);
    }
    // k3 KL shaping: lp -1, ref -2 → k3 = e^-1; coef 0.5 on trained tokens 0 and 2
    let mut t = with_kl(traj("a", 0, 1.0, &[1, 0, 1]));
    t["values"] = json!([0.0, 0.0, 0.0]);
    let args = ["--estimator", "gae", "--kl-coef", "0.5", "--kl-estimator", "k3"];
    let out = jsonl(&run("arl-advantage", &args, &lines(&[t])).ok().stdout);
    let k = -0.5 * (-1.0f64).exp();
    close(&floats(&out[0], "advantages"), &[k + 1.0 + k, 0.0, 1.0 + k]);
}

#[test]
fn duplicate_sample_index_is_a_bad_record() {
    let input = lines(&[traj("a", 0, 1.0, &[1]), traj("a", 0, 0.0, &[1]), traj("a", 1, 0.0, &[1])]);
    let r = run("arl-advantage", &[], &input);
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(
        r.stderr.contains("<stdin>:2") && r.stderr.contains("duplicated") && r.stderr.contains("`a`"),
        "{}",
        r.stderr
    );
    let dir = tmpdir();
    let r = run_in(
        dir.path(),
        "arl-advantage",
        &["--on-error", "skip", "--rejects", "rej.jsonl", "-o", "out.jsonl"],
        &input,
    )
    .ok();
    assert!(r.stderr.contains("3 records read, 2 written, 1 rejected"), "{}", r.stderr);
    let rej = jsonl(&std::fs::read(dir.path().join("rej.jsonl")).unwrap());
    assert_eq!(rej.len(), 1);
    assert_eq!(rej[0]["reward"], 0.0);
}

#[test]
fn missing_fields_are_named() {
    let r = run("arl-advantage", &["--estimator", "gae"], &lines(&[traj("a", 0, 1.0, &[1])]));
    assert_eq!(r.code, 65);
    assert!(r.stderr.contains("<stdin>:1") && r.stderr.contains("field `values`"), "{}", r.stderr);
    let mut t = traj("a", 0, 1.0, &[1]);
    t.as_object_mut().unwrap().remove("reward");
    let r = run("arl-advantage", &[], &lines(&[t]));
    assert_eq!(r.code, 65);
    assert!(r.stderr.contains("field `reward`: missing"), "{}", r.stderr);
    let r = run("arl-advantage", &["--kl-coef", "0.1"], b"");
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn group_size_checks_and_allow_uneven() {
    let input = lines(&[traj("a", 0, 1.0, &[1]), traj("a", 1, 0.0, &[1]), traj("b", 0, 1.0, &[1])]);
    let r = run("arl-advantage", &["--group-size", "2"], &input);
    assert_eq!(r.code, 65);
    assert!(r.stderr.contains("group `b` has 1 records") && r.stderr.contains("--allow-uneven"), "{}", r.stderr);
    let r = run("arl-advantage", &["--group-size", "2", "--allow-uneven"], &input).ok();
    assert_eq!(jsonl(&r.stdout).len(), 3);
    // A reused prompt_id after its group was complete.
    let input = lines(&[traj("a", 0, 1.0, &[1]), traj("a", 1, 0.0, &[1]), traj("a", 2, 0.0, &[1])]);
    let r = run("arl-advantage", &["--group-size", "2"], &input);
    assert_eq!(r.code, 65);
    assert!(r.stderr.contains("already had its 2 records"), "{}", r.stderr);
}

#[test]
fn complete_group_is_written_before_input_ends() {
    let mut child = Command::new(common::exe("arl-advantage"))
        .args(["--group-size", "2", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut sin = child.stdin.take().unwrap();
    sin.write_all(&lines(&[traj("a", 0, 1.0, &[1]), traj("b", 0, 1.0, &[1]), traj("a", 1, 0.0, &[1])])).unwrap();
    sin.flush().unwrap();
    // Group `a` is complete: both its records arrive while stdin is still open.
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for _ in 0..2 {
            let mut l = String::new();
            out.read_line(&mut l).unwrap();
            tx.send(l).unwrap();
        }
    });
    for ix in 0..2 {
        let l = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("group `a` streamed before EOF");
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!((v["prompt_id"].as_str(), v["sample_index"].as_u64()), (Some("a"), Some(ix)));
    }
    sin.write_all(&lines(&[traj("b", 1, 0.0, &[1])])).unwrap();
    drop(sin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn parquet_in_and_out() {
    let dir = tmpdir();
    let input = lines(&[traj("a", 0, 1.0, &[1, 0]), traj("a", 1, 0.0, &[1, 1])]);
    std::fs::write(dir.path().join("in.jsonl"), &input).unwrap();
    run_in(dir.path(), "arl-inspect", &["convert", "-i", "in.jsonl", "-o", "in.parquet"], b"").ok();
    run_in(dir.path(), "arl-advantage", &["-i", "in.parquet", "-o", "out.parquet", "--no-std"], b"").ok();
    let r = run_in(dir.path(), "arl-inspect", &["convert", "-i", "out.parquet", "--format", "jsonl"], b"").ok();
    let out = jsonl(&r.stdout);
    close(&floats(&out[0], "advantages"), &[0.5, 0.0]);
    close(&floats(&out[1], "advantages"), &[-0.5, -0.5]);
}
