//! Parquet by columns through the real binaries: every data tool gives the
//! same records from JSONL and from Parquet (where it reads only the columns
//! it needs and passes the others through), the columns it never reads are
//! copied undecoded where whole row groups keep their rows, unknown fields
//! and the schema metadata survive, rejected rows are written whole, and a
//! corrupt column chunk the tool never decodes fails the output's reader.
use arl_core::columnar::ParquetSource;
use arl_core::record::{Record, Status};
use arl_core::rng::Rng;
use arl_testkit::common::*;
use serde_json::json;
use std::path::Path;

/// 9,000 records: three row groups in Parquet (4096 + 4096 + 808 rows).
const N: usize = 9000;

/// Trajectories in groups of 8 (contiguous, or spread over the file when
/// `interleaved`), some groups all-correct or all-wrong, with every field
/// the tools read and some they don't know.
fn records(interleaved: bool) -> Vec<Record> {
    let mut rng = Rng::new(7);
    (0..N)
        .map(|i| {
            let group = if interleaved { i % (N / 8) } else { i / 8 };
            let plen = 3 + rng.below(6) as usize;
            let rlen = 4 + rng.below(20) as usize;
            let mask: Vec<u8> = (0..rlen).map(|k| u8::from(k % 5 != 4)).collect();
            let lp: Vec<f32> = mask.iter().map(|&m| if m == 1 { -(rng.f64() as f32) * 3.0 } else { 0.0 }).collect();
            // Groups 0 mod 5 all right, 1 mod 5 all wrong, the rest mixed.
            let right = match group % 5 {
                0 => true,
                1 => false,
                _ => rng.bool(0.5),
            };
            let answer = group % 97;
            let mut r = Record {
                prompt_id: Some(format!("task:{group}")),
                sample_index: Some(if interleaved { (i / (N / 8)) as u32 } else { (i % 8) as u32 }),
                data_source: Some("math".into()),
                prompt: Some(format!("What is {answer} + 0?")),
                label: Some(json!(answer.to_string())),
                tokens: Some((0..plen + rlen).map(|_| rng.below(151_000) as u32).collect()),
                prompt_len: Some(plen as u32),
                response: Some(format!("Thinking… \\boxed{{{}}}", if right { answer } else { answer + 1 })),
                loss_mask: Some(mask),
                rollout_log_probs: Some(lp.clone()),
                status: Some(if i % 13 == 0 { Status::Failed } else { Status::Completed }),
                finish_reason: Some("stop".into()),
                turns: Some(1),
                tool_calls: Some((i % 3) as u32),
                weight_versions: Some(vec![(40 + i % 3).to_string()]),
                reward: Some(if right { 1.0 } else { 0.0 }),
                ref_log_probs: Some(lp.iter().map(|x| x * 1.05).collect()),
                values: Some((0..rlen).map(|_| rng.f64() as f32).collect()),
                metadata: Some(serde_json::from_value(json!({"difficulty": i % 4})).unwrap()),
                ..Default::default()
            };
            r.extra.insert("run".into(), json!({"id": i, "tags": ["x", null]}));
            r
        })
        .collect()
}

fn write_jsonl(path: &Path, recs: &[Record]) {
    let mut b = Vec::new();
    for r in recs {
        r.to_json_vec(&mut b);
        b.push(b'\n');
    }
    std::fs::write(path, b).unwrap();
}

/// Writes the records as JSONL and (through `arl-inspect convert`, the
/// record path) as Parquet.
fn inputs(d: &Path, name: &str, recs: &[Record]) {
    write_jsonl(&d.join(format!("{name}.jsonl")), recs);
    run_in(d, "arl-inspect", &["convert", "-q", "-i", &format!("{name}.jsonl"), "-o", &format!("{name}.parquet")], b"")
        .ok();
}

/// Runs `bin args` on `name`.jsonl and on `name`.parquet (to Parquet), and
/// returns both outputs as JSONL bytes.
fn both(d: &Path, name: &str, bin: &str, args: &[&str]) -> (Vec<u8>, Vec<u8>) {
    let run_to = |input: &str, output: &str| {
        let mut a: Vec<&str> = args.to_vec();
        a.extend(["-q", "-i", input, "-o", output]);
        run_in(d, bin, &a, b"").ok();
    };
    run_to(&format!("{name}.jsonl"), "out.jsonl");
    run_to(&format!("{name}.parquet"), "out.parquet");
    run_in(d, "arl-inspect", &["convert", "-q", "-i", "out.parquet", "-o", "out-p.jsonl"], b"").ok();
    (std::fs::read(d.join("out.jsonl")).unwrap(), std::fs::read(d.join("out-p.jsonl")).unwrap())
}

const RUNS: &[(&str, &[&str])] = &[
    ("arl-advantage", &["--estimator", "grpo"]),
    ("arl-advantage", &["--estimator", "grpo", "--group-size", "8", "--no-std"]),
    ("arl-advantage", &["--estimator", "rloo"]),
    ("arl-advantage", &["--estimator", "reinforce++", "--kl-coef", "0.1", "--kl-estimator", "k3"]),
    ("arl-advantage", &["--estimator", "reinforce++-baseline", "--kl-coef", "0.05"]),
    ("arl-advantage", &["--estimator", "gae", "--gamma", "0.99", "--lambda", "0.95"]),
    ("arl-filter", &["--drop-zero-std"]),
    ("arl-filter", &["--min-response-len", "8", "--max-response-len", "20", "--drop-status", "failed"]),
    ("arl-filter", &["--keep-groups", "300", "--current-version", "42", "--max-staleness", "1"]),
    ("arl-reward", &["--rm", "math", "--max-response-len", "20", "--overlong-buffer", "6"]),
];

#[test]
fn every_data_tool_gives_the_same_records_from_jsonl_and_parquet() {
    let d = tmpdir();
    for (name, interleaved) in [("groups", false), ("interleaved", true)] {
        inputs(d.path(), name, &records(interleaved));
        for (bin, args) in RUNS {
            let (j, p) = both(d.path(), name, bin, args);
            assert!(!j.is_empty() || bin == &"arl-filter", "{bin} {args:?} wrote nothing");
            assert!(j == p, "{bin} {args:?} on {name}: the Parquet path's records differ from the JSONL path's");
        }
        // And the record path on Parquet (pass-through off) agrees too.
        run_in_env(
            d.path(),
            "arl-advantage",
            &["-q", "-i", &format!("{name}.parquet"), "-o", "rec.parquet"],
            b"",
            &[("ARL_NO_PASS_THROUGH", "1")],
        )
        .ok();
        run_in(d.path(), "arl-advantage", &["-q", "-i", &format!("{name}.parquet"), "-o", "pt.parquet"], b"").ok();
        for f in ["rec", "pt"] {
            run_in(
                d.path(),
                "arl-inspect",
                &["convert", "-q", "-i", &format!("{f}.parquet"), "-o", &format!("{f}.jsonl")],
                b"",
            )
            .ok();
        }
        assert_eq!(
            std::fs::read(d.path().join("rec.jsonl")).unwrap(),
            std::fs::read(d.path().join("pt.jsonl")).unwrap()
        );
    }
}

#[test]
fn columns_a_tool_never_reads_are_copied_undecoded_with_the_schema_metadata() {
    let d = tmpdir();
    inputs(d.path(), "in", &records(false));
    run_in(d.path(), "arl-advantage", &["-q", "-i", "in.parquet", "-o", "out.parquet"], b"").ok();
    let open =
        |f: &str| ParquetSource::from_file(&d.path().join(f), std::fs::File::open(d.path().join(f)).unwrap()).unwrap();
    let (inp, out) = (open("in.parquet"), open("out.parquet"));
    assert_eq!(out.num_row_groups(), 3);
    for rg in 0..3 {
        assert_eq!(inp.row_group(rg), out.row_group(rg));
        for col in ["tokens", "rollout_log_probs", "response", "_extra", "metadata"] {
            assert_eq!(
                inp.column_chunk_bytes(rg, col).unwrap(),
                out.column_chunk_bytes(rg, col).unwrap(),
                "row group {rg}, column {col}: not copied as it was"
            );
        }
        assert_ne!(
            inp.column_chunk_bytes(rg, "advantages").unwrap(),
            out.column_chunk_bytes(rg, "advantages").unwrap()
        );
    }
    assert!(out.passes_through(), "the output has arl's columns");
    assert_eq!(out.key_value(arl_core::schema::SCHEMA_VERSION_KEY).as_deref(), Some(arl_core::schema::SCHEMA_VERSION));
    assert!(out.key_value("ARROW:schema").is_some(), "the Arrow schema (arrow.json fields) is embedded");
    // The unknown fields came through `_extra`.
    let recs = arl_core::io::read_all(&d.path().join("out.parquet")).unwrap();
    assert_eq!(recs[5].extra["run"], json!({"id": 5, "tags": ["x", null]}));
    assert!(recs.iter().all(|r| r.advantages.as_ref().map(Vec::len) == r.loss_mask.as_ref().map(Vec::len)));
}

#[test]
fn rejected_rows_are_written_whole_from_either_format() {
    let d = tmpdir();
    let mut recs = records(false);
    for i in [3, 4100, 8999] {
        recs[i].reward = None;
    }
    recs[5000].loss_mask = None;
    inputs(d.path(), "in", &recs);
    let args = |input: &str, out: &str, rej: &str| {
        vec![
            "-q".to_string(),
            "--on-error".into(),
            "skip".into(),
            "--rejects".into(),
            rej.into(),
            "-i".into(),
            input.into(),
            "-o".into(),
            out.into(),
        ]
    };
    let run_args = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run_in(d.path(), "arl-advantage", &a, b"").ok();
    };
    run_args(args("in.jsonl", "out.jsonl", "rej-j.jsonl"));
    run_args(args("in.parquet", "out.parquet", "rej-p.jsonl"));
    run_in(d.path(), "arl-inspect", &["convert", "-q", "-i", "out.parquet", "-o", "out-p.jsonl"], b"").ok();
    let read = |f: &str| std::fs::read(d.path().join(f)).unwrap();
    assert_eq!(read("out.jsonl"), read("out-p.jsonl"));
    let rej = jsonl(&read("rej-p.jsonl"));
    assert_eq!(rej.len(), 4);
    assert_eq!(rej, jsonl(&read("rej-j.jsonl")), "the rejects hold the whole records, tokens and all");
    assert!(rej.iter().all(|r| r["tokens"].is_array() && r["run"].is_object()));
    // Without skip, the first bad row is named.
    let r = run_in(d.path(), "arl-advantage", &["-q", "-i", "in.parquet", "-o", "x.parquet"], b"");
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("in.parquet`: row 3") && r.stderr.contains("`reward`"), "{}", r.stderr);
    assert!(!d.path().join("x.parquet").exists());
}

#[test]
fn a_corrupt_chunk_the_tool_never_reads_fails_the_outputs_reader() {
    let d = tmpdir();
    inputs(d.path(), "in", &records(false));
    let path = d.path().join("in.parquet");
    let chunk = ParquetSource::from_file(&path, std::fs::File::open(&path).unwrap())
        .unwrap()
        .column_chunk_bytes(1, "tokens")
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.windows(chunk.len()).position(|w| w == &chunk[..]).expect("the chunk is in the file");
    let mid = at + chunk.len() / 2;
    bytes[mid..mid + 256].fill(0xA5);
    std::fs::write(&path, &bytes).unwrap();
    // arl-advantage reads reward, loss_mask, prompt_id, sample_index: the
    // corrupt `tokens` chunk is copied as it is (no checksum to verify) ...
    run_in(d.path(), "arl-advantage", &["-q", "-i", "in.parquet", "-o", "out.parquet"], b"").ok();
    // ... and the first reader of `tokens` fails on it, cleanly.
    let r = run_in(d.path(), "arl-inspect", &["convert", "-q", "-i", "out.parquet", "-o", "out.jsonl"], b"");
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("out.parquet") && r.stderr.contains("orrupt"), "{}", r.stderr);
    assert!(!d.path().join("out.jsonl").exists());
    // The record path, which decodes every column, fails on the input.
    let r = run_in_env(
        d.path(),
        "arl-advantage",
        &["-q", "-i", "in.parquet", "-o", "rec.parquet"],
        b"",
        &[("ARL_NO_PASS_THROUGH", "1")],
    );
    assert_eq!(r.code, 65, "{}", r.stderr);
}

#[test]
fn stats_read_only_their_columns_and_agree_with_jsonl() {
    let d = tmpdir();
    inputs(d.path(), "in", &records(true));
    let j = run_in(d.path(), "arl-inspect", &["stats", "--json", "--by", "metadata.difficulty", "-i", "in.jsonl"], b"")
        .ok();
    let p =
        run_in(d.path(), "arl-inspect", &["stats", "--json", "--by", "metadata.difficulty", "-i", "in.parquet"], b"")
            .ok();
    assert_eq!(j.stdout_str(), p.stdout_str());
    let by_run = run_in(d.path(), "arl-inspect", &["stats", "--json", "--by", "run", "-i", "in.parquet"], b"").ok();
    assert!(
        by_run.stdout_str().contains(r#"{\"id\":"#),
        "an unknown field is read from `_extra`: {}",
        by_run.stdout_str()
    );
}

#[test]
fn stdin_reaches_a_parquet_output_whole_in_either_format() {
    let d = tmpdir();
    inputs(d.path(), "in", &records(false));
    // The reader opened to decide on pass-through is the one that reads: a
    // pipe cannot be opened twice (JSONL on stdin takes the record path).
    let jsonl = std::fs::read(d.path().join("in.jsonl")).unwrap();
    let pq = std::fs::read(d.path().join("in.parquet")).unwrap();
    for (name, bytes) in [("jsonl", &jsonl), ("parquet", &pq)] {
        let out = format!("out-{name}.parquet");
        run_in(d.path(), "arl-advantage", &["-q", "-o", &out], bytes).ok();
        let n = arl_core::io::read_all(&d.path().join(&out)).unwrap().len();
        assert_eq!(n, N, "{name} on stdin: {n} of {N} records reached the output");
    }
}
