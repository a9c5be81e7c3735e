//! The record formats end to end through the real binaries: lossless
//! JSONL ⇄ Parquet round trips, format detection from content, bad-record
//! policy, atomic outputs, broken pipes, and what pyarrow sees.
use arl_core::record::{Record, Status};
use arl_core::rng::Rng;
use arl_testkit::common;
use common::*;
use serde_json::json;
use std::path::Path;

/// Trajectory-shaped records with every known field and some unknown ones.
fn make_records(n: usize, seed: u64, max_resp: usize) -> Vec<Record> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            let plen = 4 + rng.below(12) as usize;
            let rlen = 1 + rng.below(max_resp as u64) as usize;
            let tokens: Vec<u32> = (0..plen + rlen).map(|_| rng.below(151_000) as u32).collect();
            let mask: Vec<u8> = (0..rlen).map(|_| rng.bool(0.8) as u8).collect();
            let lp: Vec<f32> = mask.iter().map(|&m| if m == 1 { -(rng.f64() as f32) * 5.0 } else { 0.0 }).collect();
            let mut r = Record {
                prompt_id: Some(format!("gsm8k:{}", i / 8)),
                sample_index: Some((i % 8) as u32),
                data_source: Some(if i % 3 == 0 { "math".into() } else { "code".into() }),
                prompt: Some(format!("What is {i} + 1? \"quoted\" ünïcode ✓")),
                label: Some(if i % 2 == 0 {
                    json!(format!("{}", i + 1))
                } else {
                    json!({"tests": ["assert f(2) == 4"]})
                }),
                tokens: Some(tokens),
                prompt_len: Some(plen as u32),
                response: Some(format!("The answer is \\boxed{{{}}}\n", i + 1)),
                loss_mask: Some(mask),
                rollout_log_probs: Some(lp.clone()),
                status: Some(Status::ALL[i % 4]),
                finish_reason: Some("stop".into()),
                turns: Some(1 + (i % 3) as u32),
                tool_calls: Some((i % 3) as u32),
                weight_versions: Some(vec!["41".into(), "42".into()]),
                reward: Some((i % 2) as f32),
                reward_detail: Some(json!({"extracted": i + 1, "ok": true})),
                ref_log_probs: Some(lp.iter().map(|x| x * 1.01).collect()),
                values: None,
                advantages: Some(lp.iter().map(|x| x * 0.5 + 0.1).collect()),
                returns: None,
                metadata: Some(serde_json::from_value(json!({"difficulty": i % 5, "env": "calc"})).unwrap()),
                messages: None,
                tools: (i % 4 == 0).then(|| json!([{"type": "function", "function": {"name": "f", "parameters": {}}}])),
                extra: Default::default(),
                source_row: None,
            };
            r.extra.insert("custom_score".into(), json!(rng.f64()));
            r.extra.insert("tags".into(), json!(["a", {"nested": [1, 2, null]}]));
            if i % 7 == 0 {
                r.extra.insert("only_some".into(), json!(null));
            }
            r
        })
        .collect()
}

fn write_jsonl(path: &Path, recs: &[Record]) {
    arl_core::io::write_all(path, recs).unwrap();
}

#[test]
fn hundred_thousand_records_round_trip_through_parquet() {
    let d = tmpdir();
    let recs = make_records(100_000, 1, 48);
    let src = d.path().join("in.jsonl");
    write_jsonl(&src, &recs);
    run_in(d.path(), "arl-inspect", &["convert", "-i", "in.jsonl", "-o", "mid.parquet"], b"").ok();
    run_in(d.path(), "arl-inspect", &["convert", "-i", "mid.parquet", "-o", "back.jsonl"], b"").ok();
    let back = arl_core::io::read_all(&d.path().join("back.jsonl")).unwrap();
    assert_eq!(back.len(), recs.len());
    for (i, (a, b)) in recs.iter().zip(&back).enumerate() {
        assert_eq!(a, b, "record {i} differs after JSONL → Parquet → JSONL");
    }
    // And byte-identical JSONL: the writer is deterministic.
    assert_eq!(std::fs::read(&src).unwrap(), std::fs::read(d.path().join("back.jsonl")).unwrap());
}

#[test]
fn format_is_detected_from_content_not_name() {
    let d = tmpdir();
    let recs = make_records(50, 2, 8);
    write_jsonl(&d.path().join("x.parquet"), &recs); // a real Parquet file…
    std::fs::rename(d.path().join("x.parquet"), d.path().join("misnamed.jsonl")).unwrap(); // …named .jsonl
    let out = run_in(d.path(), "arl-inspect", &["convert", "-i", "misnamed.jsonl", "--format", "jsonl"], b"").ok();
    assert_eq!(jsonl(&out.stdout).len(), 50);
    // Parquet on stdin.
    let bytes = std::fs::read(d.path().join("misnamed.jsonl")).unwrap();
    let out = run_in(d.path(), "arl-inspect", &["stats", "--json"], &bytes).ok();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["records"], 50);
}

#[test]
fn pyarrow_reads_the_documented_column_types() {
    let py = require_python();
    let d = tmpdir();
    arl_core::io::write_all(&d.path().join("t.parquet"), &make_records(100, 3, 8)).unwrap();
    let script = r#"
import sys, json, pyarrow.parquet as pq
f = pq.ParquetFile(sys.argv[1])
t = f.read()
md = f.schema_arrow.metadata or {}
out = {n: str(t.schema.field(n).type) for n in t.schema.names}
out["__version"] = md.get(b"arl.schema_version", b"").decode()
out["__rows"] = t.num_rows
out["__label0"] = json.loads(t.column("label").to_pylist()[0])
print(json.dumps(out))
"#;
    let o = std::process::Command::new(py).arg("-c").arg(script).arg(d.path().join("t.parquet")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["__version"], "1");
    assert_eq!(j["__rows"], 100);
    assert_eq!(j["tokens"], "list<item: uint32>");
    assert_eq!(j["loss_mask"], "list<item: uint8>");
    assert_eq!(j["rollout_log_probs"], "list<item: float>");
    assert_eq!(j["advantages"], "list<item: float>");
    assert_eq!(j["weight_versions"], "list<item: string>");
    assert_eq!(j["reward"], "float");
    assert_eq!(j["sample_index"], "uint32");
    assert_eq!(j["prompt_id"], "string");
    // JSON-typed fields carry Arrow's canonical JSON extension type.
    assert!(j["label"].as_str().unwrap().contains("json"), "{}", j["label"]);
    assert!(j["metadata"].as_str().unwrap().contains("json"), "{}", j["metadata"]);
    assert_eq!(j["__label0"], json!("1"));
}

/// 10k lines, 1% of them malformed in assorted ways.
fn corrupt_input(d: &Path) -> (Vec<u8>, Vec<Vec<u8>>, usize) {
    let recs = make_records(10_000, 4, 6);
    let mut out = Vec::new();
    let mut bad = Vec::new();
    let mut first_bad_line = 0;
    for (i, r) in recs.iter().enumerate() {
        let mut line = Vec::new();
        r.to_json_vec(&mut line);
        if i % 100 == 37 {
            line = match (i / 100) % 5 {
                0 => br#"{"prompt_id": "x", "tokens": [1, 2, "three"]}"#.to_vec(),
                1 => line[..line.len() / 2].to_vec(),
                2 => br#"{"prompt_id": "x", "reward": "high"}"#.to_vec(),
                3 => br#"{"tokens": [1, 2, 3], "prompt_len": 1, "loss_mask": [1]}"#.to_vec(),
                _ => b"not json at all".to_vec(),
            };
            if first_bad_line == 0 {
                first_bad_line = i + 1;
            }
            bad.push(line.clone());
        }
        out.extend_from_slice(&line);
        out.push(b'\n');
    }
    std::fs::write(d.join("in.jsonl"), &out).unwrap();
    (out, bad, first_bad_line)
}

#[test]
fn malformed_lines_fail_by_default_and_leave_no_output() {
    let d = tmpdir();
    let (_, _, first) = corrupt_input(d.path());
    let r = run_in(d.path(), "arl-inspect", &["convert", "-i", "in.jsonl", "-o", "out.parquet"], b"");
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains(&format!("in.jsonl:{first}`")), "{}", r.stderr);
    assert!(r.stderr.contains("field `tokens`"), "{}", r.stderr);
    assert!(r.stderr.starts_with("arl-inspect: error: "), "{}", r.stderr);
    let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("in.jsonl")], "no output or temporary file may remain");
}

#[test]
fn skip_puts_every_bad_line_in_rejects_verbatim() {
    let d = tmpdir();
    let (_, bad, _) = corrupt_input(d.path());
    let r = run_in(
        d.path(),
        "arl-inspect",
        &["convert", "-i", "in.jsonl", "-o", "out.parquet", "--on-error", "skip", "--rejects", "r.jsonl"],
        b"",
    )
    .ok();
    assert!(r.stderr.contains("100 rejected"), "{}", r.stderr);
    let kept = arl_core::io::read_all(&d.path().join("out.parquet")).unwrap().len();
    let rejected = std::fs::read(d.path().join("r.jsonl")).unwrap();
    let rejected: Vec<&[u8]> = rejected.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    assert_eq!(kept + rejected.len(), 10_000);
    assert_eq!(rejected.len(), bad.len());
    for (a, b) in rejected.iter().zip(&bad) {
        assert_eq!(*a, &b[..]);
    }
}

#[test]
fn skip_without_rejects_is_a_usage_error() {
    let d = tmpdir();
    let r = run_in(d.path(), "arl-inspect", &["stats", "--on-error", "skip"], b"");
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("--rejects"), "{}", r.stderr);
}

#[test]
fn closed_pipe_downstream_exits_zero() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let d = tmpdir();
    write_jsonl(&d.path().join("in.jsonl"), &make_records(20_000, 5, 32));
    let mut child = Command::new(exe("arl-inspect"))
        .args(["convert", "-i", "in.jsonl", "--format", "jsonl"])
        .current_dir(d.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut buf = [0u8; 100];
    out.read_exact(&mut buf).unwrap();
    drop(out); // like `| head -c 100`
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn stats_on_a_verl_style_gsm8k_parquet() {
    let py = require_python();
    let d = tmpdir();
    // verl's GSM8K preprocessing shape: prompt as chat messages, reward_model struct, extra_info struct.
    let script = r##"
import sys, pyarrow as pa, pyarrow.parquet as pq
rows = []
for i in range(40):
    src = "openai/gsm8k" if i < 30 else "lighteval/MATH"
    rows.append({
        "data_source": src,
        "prompt": [{"role": "user", "content": f"Q{i}: what is {i}+{i}? Let's think step by step."}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
        "extra_info": {"split": "train", "index": i, "answer": "#" * 4 + f" {2*i}"},
        "prompt_id": f"gsm8k:{i // 4}",
        "reward": float(i % 4 == 0),
    })
pq.write_table(pa.Table.from_pylist(rows), sys.argv[1])
"##;
    let o = std::process::Command::new(&py).arg("-c").arg(script).arg(d.path().join("train.parquet")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = run_in(d.path(), "arl-inspect", &["stats", "--json", "-i", "train.parquet"], b"").ok();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["records"], 40);
    let g = &j["by_data_source"]["openai/gsm8k"];
    assert_eq!(g["records"], 30);
    assert_eq!(g["groups"], 8); // gsm8k:0 … gsm8k:7 (rows 0–29 → ids 0..=7)
    assert_eq!(j["by_data_source"]["lighteval/MATH"]["records"], 10);
    // rewards: 1 for every 4th row → 10 of 40.
    let close = |v: &serde_json::Value, x: f64| assert!((v.as_f64().unwrap() - x).abs() < 1e-12, "{v} != {x}");
    close(&j["reward"]["mean"], 0.25);
    close(&g["reward"]["mean"], 8.0 / 30.0);
    // pass@k: each group of 4 rows starts with a rewarded row, except none missing.
    assert_eq!(g["pass_at_k"], 1.0);
    assert_eq!(j["groups"]["count"], 10);
    assert_eq!(j["groups"]["sizes"]["4"], 10);
    // The nested verl columns survive a conversion as JSON, and the prompt becomes chat JSON text.
    let conv = run_in(d.path(), "arl-inspect", &["convert", "-i", "train.parquet", "--format", "jsonl"], b"").ok();
    let first = &jsonl(&conv.stdout)[0];
    assert_eq!(first["reward_model"]["ground_truth"], "0");
    assert_eq!(first["extra_info"]["index"], 0);
    let msgs: serde_json::Value = serde_json::from_str(first["prompt"].as_str().unwrap()).unwrap();
    assert_eq!(msgs[0]["role"], "user");
}

#[test]
fn unknown_fields_survive_parquet_in_both_directions() {
    let d = tmpdir();
    let line = br#"{"prompt_id":"p","zzz":{"deep":[1,2.5,"x",null,true]},"aaa":"first?","metadata":{"k":[1]}}"#;
    let out = run_in(d.path(), "arl-inspect", &["convert", "-o", "x.parquet"], &[&line[..], b"\n"].concat()).ok();
    assert!(out.stdout.is_empty());
    let back = run_in(d.path(), "arl-inspect", &["convert", "-i", "x.parquet", "--format", "jsonl"], b"").ok();
    // Same fields and values; known fields are written first, in schema order.
    let a: serde_json::Value = serde_json::from_slice(line).unwrap();
    assert_eq!(jsonl(&back.stdout), vec![a]);
}

#[test]
fn show_renders_trained_spans() {
    let d = tmpdir();
    let r = Record {
        prompt_id: Some("p:0".into()),
        tokens: Some(vec![1, 2, 3, 4, 5, 6]),
        prompt_len: Some(2),
        loss_mask: Some(vec![1, 1, 0, 1]),
        response: Some("abcd".into()),
        reward: Some(1.0),
        ..Default::default()
    };
    write_jsonl(&d.path().join("t.jsonl"), &[r]);
    let out = run_in(d.path(), "arl-inspect", &["show", "-i", "t.jsonl"], b"").ok();
    let s = out.stdout_str();
    assert!(s.contains("4 tokens, 3 trained, 1 tool/environment"), "{s}");
    assert!(s.contains("tokens [2, 3) not trained"), "{s}");
    let missing = run_in(d.path(), "arl-inspect", &["show", "-i", "t.jsonl", "-n", "5"], b"");
    assert_eq!(missing.code, 2);
}
