//! `arl-filter` end to end through the real binary: DAPO dynamic sampling on
//! 1,000 groups, record filters, over-sampling cut, and the stats adding up.
use arl_core::rng::Rng;
use arl_testkit::common;
use common::{jsonl, run, run_in, tmpdir};
use serde_json::{json, Value};
use std::collections::BTreeSet;

fn lines(recs: &[Value]) -> Vec<u8> {
    recs.iter().map(|r| r.to_string() + "\n").collect::<String>().into_bytes()
}

fn rec(id: &str, ix: u32, reward: f64, status: &str, len: usize, version: u64) -> Value {
    json!({
        "prompt_id": id, "sample_index": ix, "reward": reward, "status": status,
        "tokens": vec![7u32; 3 + len], "prompt_len": 3, "loss_mask": vec![1u8; len],
        "weight_versions": [version.to_string()], "other": "kept as is",
    })
}

fn ids(out: &[Value]) -> BTreeSet<String> {
    out.iter().map(|v| v["prompt_id"].as_str().unwrap().to_string()).collect()
}

#[test]
fn drop_zero_std_on_1000_groups() {
    let mut rng = Rng::new(42);
    let (groups, size) = (1000, 8);
    let mut recs = Vec::new();
    let mut varying = BTreeSet::new();
    for g in 0..groups {
        let id = format!("p{g}");
        let constant = rng.bool(0.3);
        let base = rng.below(2) as f64;
        let mut rewards: Vec<f64> = (0..size).map(|_| if constant { base } else { rng.below(2) as f64 }).collect();
        if !constant && rewards.iter().all(|r| *r == rewards[0]) {
            rewards[0] = 1.0 - rewards[0];
        }
        if !constant {
            varying.insert(id.clone());
        }
        for (i, r) in rewards.into_iter().enumerate() {
            recs.push(rec(&id, i as u32, r, "completed", 4, 1));
        }
    }
    // Shuffle so groups are interleaved: grouping must come from prompt_id.
    rng.shuffle(&mut recs);
    let n_const = groups - varying.len();
    assert!(n_const > 200 && n_const < 400);
    let dir = tmpdir();
    let r = run_in(
        dir.path(),
        "arl-filter",
        &["--drop-zero-std", "--stats-json", "stats.json", "-o", "out.jsonl"],
        &lines(&recs),
    )
    .ok();
    let out = jsonl(&std::fs::read(dir.path().join("out.jsonl")).unwrap());
    assert_eq!(ids(&out), varying);
    assert_eq!(out.len(), varying.len() * size);
    assert!(out.iter().all(|v| v["other"] == "kept as is"));
    let st: Value = serde_json::from_slice(&std::fs::read(dir.path().join("stats.json")).unwrap()).unwrap();
    let total = (groups * size) as u64;
    assert_eq!(st["records"]["read"], total);
    assert_eq!(st["records"]["kept"], (varying.len() * size) as u64);
    assert_eq!(st["records"]["dropped"], (n_const * size) as u64);
    assert_eq!(st["groups"]["in"], groups as u64);
    assert_eq!(st["groups"]["kept"], varying.len() as u64);
    assert_eq!(st["dropped_by_reason"]["zero_std"], json!({"records": n_const * size, "groups": n_const}));
    assert!(
        r.stderr.contains(&format!(
            "kept {} of {total} records ({} of {groups} groups)",
            varying.len() * size,
            varying.len()
        )),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains(&format!("dropped by zero_std: {} records, {n_const} groups", n_const * size)),
        "{}",
        r.stderr
    );
}

#[test]
fn record_filters_group_size_and_keep_groups() {
    let recs = vec![
        rec("a", 0, 1.0, "completed", 5, 10),
        rec("a", 1, 0.0, "truncated", 5, 10), // status
        rec("b", 0, 1.0, "completed", 1, 10), // too short
        rec("b", 1, 0.0, "completed", 5, 10),
        rec("c", 0, 1.0, "completed", 5, 6),   // stale: 10 - 6 > 3
        rec("c", 1, 0.0, "completed", 50, 10), // too long
        rec("d", 0, 1.0, "completed", 5, 9),
        rec("d", 1, 0.0, "aborted", 5, 9),
        rec("e", 0, 1.0, "completed", 5, 9),
        rec("e", 1, 0.0, "completed", 5, 9),
        rec("f", 0, 0.0, "completed", 5, 9),
        rec("f", 1, 1.0, "completed", 5, 9),
        rec("g", 0, 1.0, "completed", 5, 9),
    ];
    let dir = tmpdir();
    let args = [
        "--drop-status",
        "truncated,aborted",
        "--min-response-len",
        "2",
        "--max-response-len",
        "10",
        "--current-version",
        "10",
        "--max-staleness",
        "3",
        "--stats-json",
        "s.json",
    ];
    // Without group filters: records stream one by one.
    let r = run_in(dir.path(), "arl-filter", &args, &lines(&recs)).ok();
    let out = jsonl(&r.stdout);
    assert_eq!(out.len(), 13 - 5);
    let st: Value = serde_json::from_slice(&std::fs::read(dir.path().join("s.json")).unwrap()).unwrap();
    assert_eq!(st["dropped_by_reason"]["status"]["records"], 2);
    assert_eq!(st["dropped_by_reason"]["min_response_len"]["records"], 1);
    assert_eq!(st["dropped_by_reason"]["max_response_len"]["records"], 1);
    assert_eq!(st["dropped_by_reason"]["stale"]["records"], 1);
    assert_eq!(st["dropped_by_reason"]["all_records_dropped"]["groups"], 1); // c
    assert_eq!(st["groups"], json!({"in": 7, "kept": 6, "dropped": 1}));

    // --group-size 2: only groups with both records surviving; --keep-groups 1 keeps the first.
    let mut a2: Vec<&str> = args.to_vec();
    a2.extend(["--group-size", "2"]);
    let out = jsonl(&run_in(dir.path(), "arl-filter", &a2, &lines(&recs)).ok().stdout);
    assert_eq!(ids(&out), ["e", "f"].iter().map(|s| s.to_string()).collect());
    let st: Value = serde_json::from_slice(&std::fs::read(dir.path().join("s.json")).unwrap()).unwrap();
    // a, b, d lose a record; g has one in the input; c loses both.
    assert_eq!(st["dropped_by_reason"]["incomplete_group"], json!({"records": 4, "groups": 4}));
    assert_eq!(st["groups"], json!({"in": 7, "kept": 2, "dropped": 5}));
    assert_eq!(st["records"], json!({"read": 13, "kept": 4, "dropped": 9, "rejected": 0}));
    a2.extend(["--keep-groups", "1"]);
    let out = jsonl(&run_in(dir.path(), "arl-filter", &a2, &lines(&recs)).ok().stdout);
    assert_eq!(ids(&out), ["e"].iter().map(|s| s.to_string()).collect());
    let st: Value = serde_json::from_slice(&std::fs::read(dir.path().join("s.json")).unwrap()).unwrap();
    assert_eq!(st["dropped_by_reason"]["over_keep_groups"], json!({"records": 2, "groups": 1}));
}

#[test]
fn bad_records_are_named_or_rejected() {
    let mut bad = rec("a", 0, 1.0, "completed", 5, 1);
    bad["weight_versions"] = json!(["v1"]);
    let input = lines(&[rec("a", 1, 0.0, "completed", 5, 1), bad]);
    let args = ["--current-version", "3", "--max-staleness", "1"];
    let r = run("arl-filter", &args, &input);
    assert_eq!(r.code, 65);
    assert!(r.stderr.contains("<stdin>:2") && r.stderr.contains("field `weight_versions`"), "{}", r.stderr);
    let dir = tmpdir();
    let mut a2 = args.to_vec();
    a2.extend(["--on-error", "skip", "--rejects", "rej.jsonl", "--stats-json", "s.json"]);
    run_in(dir.path(), "arl-filter", &a2, &input).ok();
    let st: Value = serde_json::from_slice(&std::fs::read(dir.path().join("s.json")).unwrap()).unwrap();
    assert_eq!(st["records"], json!({"read": 2, "kept": 0, "dropped": 1, "rejected": 1}));
    let r = run("arl-filter", &["--drop-status", "done"], b"");
    assert_eq!(r.code, 2);
}

/// A 7 KB Parquet file (found by fuzzing) whose page header declares a
/// Thrift list of 2³¹ eight-byte elements past the end of the data: the
/// parquet crate's header parser used to skip through every one of them
/// (20 s here); reading past the end is now an error at once, exit 65.
#[test]
fn a_page_header_skipping_past_the_end_is_refused() {
    let f = common::root().join("fuzz/corpus/parquet_reader/regress-thrift-skip-past-end.parquet");
    let r = run("arl-filter", &["-i", f.to_str().unwrap(), "-q"], b"");
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("corrupt Parquet data") && r.stderr.contains("read past the end"), "{}", r.stderr);
}
