//! BFCL v4's single-turn Python categories through the binaries, on the real
//! files of the `bfcl-eval` package that `scripts/fetch-benchmarks.sh`
//! unpacks: `arl-tasks import bfcl:CATEGORY` gives each category's count
//! with its tools and label; the ground truth scores 1 under `arl-reward --rm
//! auto` except the four items no answer can satisfy; `--rm bfcl` agrees with
//! BFCL's own checker (run from the unpacked package by
//! `scripts/bench/py/bfcl_reference.py`) on mutations of the ground truth in
//! every class and on real SmolLM2 outputs; and a scripted tool call goes
//! end to end (serve → rollout → reward) scoring 1, and 0 with one argument
//! changed.
use arl_testkit::common::{jsonl, require_python, root, run, run_in, tmpdir, to_jsonl};
use arl_testkit::real::{benchmarks_dir, real};
use arl_testkit::serve_util::{self, Server};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// Every category `import bfcl:CATEGORY` reads, with BFCL's counts.
const COUNTS: [(&str, usize); 11] = [
    ("simple_python", 400),
    ("multiple", 200),
    ("parallel", 200),
    ("parallel_multiple", 200),
    ("live_simple", 258),
    ("live_multiple", 1053),
    ("live_parallel", 16),
    ("live_parallel_multiple", 24),
    ("irrelevance", 240),
    ("live_irrelevance", 884),
    ("live_relevance", 16),
];

/// Items whose ground truth no call satisfies (BFCL's own checker rejects
/// every answer too): a required parameter whose allowed list is empty
/// (`live_simple_106-63-0`, `live_simple_112-68-0`), an answer parameter
/// the schema does not have and that is not optional
/// (`live_multiple_862-181-3`), and an answer that names `question` where
/// the schema requires `statement` (`live_multiple_964-207-0`).
const UNSATISFIABLE: [&str; 4] = [
    "bfcl-live_simple_106-63-0",
    "bfcl-live_simple_112-68-0",
    "bfcl-live_multiple_862-181-3",
    "bfcl-live_multiple_964-207-0",
];

fn import(cat: &str, extra: &[&str]) -> Vec<Value> {
    let dir = benchmarks_dir();
    let name = format!("bfcl:{cat}");
    let mut args = vec!["import", name.as_str(), "--data", dir.to_str().unwrap(), "-q"];
    args.extend_from_slice(extra);
    jsonl(&run("arl-tasks", &args, b"").ok().stdout)
}

fn has_answers(cat: &str) -> bool {
    !cat.contains("relevance")
}

#[test]
fn every_category_imports_with_its_count_tools_and_label() {
    for (cat, n) in COUNTS {
        let recs = import(cat, &[]);
        assert_eq!(recs.len(), n, "{cat}");
        let ids: HashSet<&str> = recs.iter().map(|r| r["prompt_id"].as_str().unwrap()).collect();
        assert_eq!(ids.len(), n, "{cat}: unique prompt ids");
        for r in &recs {
            assert_eq!(r["data_source"], "bfcl");
            assert_eq!(r["metadata"]["category"], cat);
            let l = &r["label"];
            assert_eq!(l["category"], cat);
            assert_eq!(l["underscore_to_dot"], false);
            assert_eq!(l["ground_truth"].is_array(), has_answers(cat), "{cat}: {l}");
            let msgs: Value = serde_json::from_str(r["prompt"].as_str().unwrap()).unwrap();
            assert!(msgs.as_array().unwrap().iter().any(|m| m["role"] == "user"), "{msgs}");
            // The tools are OpenAI objects with JSON-schema types, one per BFCL function.
            let tools = r["tools"].as_array().unwrap();
            assert_eq!(tools.len(), l["functions"].as_array().unwrap().len());
            for t in tools {
                assert_eq!(t["type"], "function");
                let f = &t["function"];
                assert!(f["description"]
                    .as_str()
                    .unwrap()
                    .ends_with("Note that the provided function is in Python 3 syntax."));
                assert_eq!(f["parameters"]["type"], "object");
                for p in f["parameters"]["properties"].as_object().unwrap().values() {
                    let ty = p["type"].as_str().unwrap();
                    assert!(["string", "integer", "number", "boolean", "array", "object"].contains(&ty), "{p}");
                }
            }
        }
    }
    // `--underscore-names` writes `.` as `_` in the tools and tells the reward.
    let r = &import("simple_python", &["-n", "2", "--underscore-names"])[1];
    assert_eq!(r["tools"][0]["function"]["name"], "math_factorial");
    assert_eq!(r["label"]["functions"][0]["name"], "math.factorial");
    assert_eq!(r["label"]["underscore_to_dot"], true);
}

#[test]
fn unknown_categories_and_bad_schemas_are_errors() {
    let out = run("arl-tasks", &["import", "bfcl:simple_java"], b"");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("Java") && out.stderr.contains("live_irrelevance"), "{}", out.stderr);
    let out = run("arl-tasks", &["import", "bfcl:nope"], b"");
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("known: simple_python"), "{}", out.stderr);
    // A schema BFCL's checker cannot read is an error naming the record.
    let mut r = import("simple_python", &["-n", "1", "--with-solutions"]).remove(0);
    r["label"]["functions"][0]["parameters"]["properties"]["base"]["type"] = json!("Integer32");
    let out = run("arl-reward", &["--rm", "bfcl"], &to_jsonl(&[r]));
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("<stdin>:1") && out.stderr.contains("Integer32"), "{}", out.stderr);
    // A record whose `tools` cannot be read is rejected by rollout, naming it.
    let d = tmpdir();
    let model = d.path().join("model");
    serve_util::scripted_model_dir(&model);
    let bad = json!({"prompt_id": "p", "prompt": "hi", "tools": [{"description": "no name"}]});
    let out = run_in(
        d.path(),
        "arl-rollout",
        &["--endpoint", "http://127.0.0.1:9", "--tokenizer", model.to_str().unwrap()],
        &to_jsonl(&[bad]),
    );
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("<stdin>:1") && out.stderr.contains("field `tools`: item 0"), "{}", out.stderr);
}

/// All categories with answers, with their reference solutions, scored.
#[test]
fn ground_truth_scores_one_in_every_category() {
    let mut recs = Vec::new();
    for (cat, _) in COUNTS.iter().filter(|(c, _)| *c != "live_relevance") {
        recs.extend(import(cat, &["--with-solutions"]));
    }
    let out = jsonl(&run("arl-reward", &["--rm", "auto", "-q"], &to_jsonl(&recs)).ok().stdout);
    assert_eq!(out.len(), recs.len());
    let failing: Vec<&str> =
        out.iter().filter(|r| r["reward"] != 1.0).map(|r| r["prompt_id"].as_str().unwrap()).collect();
    assert_eq!(failing, UNSATISFIABLE, "the ground truth fails only where no answer can pass");
    // The same under `--underscore-names`: the answers' names are mapped as the tools are.
    let recs = import("parallel_multiple", &["--with-solutions", "--underscore-names"]);
    assert!(
        recs.iter()
            .any(|r| r["response"].as_str().unwrap().contains("_")
                && r["label"]["ground_truth"].to_string().contains('.'))
    );
    let out = jsonl(&run("arl-reward", &["--rm", "bfcl", "-q"], &to_jsonl(&recs)).ok().stdout);
    assert!(out.iter().all(|r| r["reward"] == 1.0));
}

/// Greedy SmolLM2-135M-Instruct outputs on the first items of each
/// category, through arl-serve and arl-rollout (tools in its tool header).
fn smollm2_outputs(dir: &Path) -> Vec<Value> {
    let model = real("SmolLM2-135M-Instruct");
    let mut prompts = Vec::new();
    for (cat, _) in COUNTS {
        prompts.extend(import(cat, &["-n", "1"]));
    }
    let server = Server::start(&["--model-path", model.to_str().unwrap()]);
    let input = dir.join("smol.prompts.jsonl");
    std::fs::write(&input, to_jsonl(&prompts)).unwrap();
    let args = [
        "-i",
        input.to_str().unwrap(),
        "--endpoint",
        server.url.as_str(),
        "--tokenizer",
        model.to_str().unwrap(),
        "--temperature",
        "0",
        "--max-new-tokens",
        "32",
        "--concurrency",
        "16",
        "-q",
    ];
    let rolled = run("arl-rollout", &args, b"").ok().stdout;
    let recs = jsonl(&rolled);
    assert_eq!(recs.len(), prompts.len());
    for r in &recs {
        assert_eq!(r["turns"], 1, "single-turn: {}", r["response"]);
    }
    recs
}

#[test]
fn agrees_with_bfcls_own_checker_on_every_mutation_class_and_real_outputs() {
    let d = tmpdir();
    let p = d.path();
    let py = require_python();
    let mut prompts = Vec::new();
    for (cat, _) in COUNTS {
        prompts.extend(import(cat, &[]));
    }
    std::fs::write(p.join("prompts.jsonl"), to_jsonl(&prompts)).unwrap();
    let script = |name: &str| root().join("scripts/bench/py").join(name);
    let st = std::process::Command::new(&py)
        .arg(script("bfcl_mutations.py"))
        .args(["-i", "prompts.jsonl", "--per-class", "60", "--seed", "0", "-o", "mut.jsonl"])
        .current_dir(p)
        .status()
        .unwrap();
    assert!(st.success());
    let mut recs = jsonl(&std::fs::read(p.join("mut.jsonl")).unwrap());
    recs.extend(smollm2_outputs(p));
    let scored = run("arl-reward", &["--rm", "bfcl", "-q"], &to_jsonl(&recs)).ok().stdout;
    std::fs::write(p.join("scored.jsonl"), &scored).unwrap();
    let out = std::process::Command::new(&py)
        .arg(script("bfcl_reference.py"))
        .args(["-i", "scored.jsonl", "--package"])
        .arg(benchmarks_dir().join("bfcl-eval"))
        .args(["--summary", "summary.json"])
        .current_dir(p)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}\n{}", String::from_utf8_lossy(&out.stderr));
    let s: Value = serde_json::from_slice(&std::fs::read(p.join("summary.json")).unwrap()).unwrap();
    let classes: BTreeMap<String, Value> =
        s["classes"].as_object().unwrap_or_else(|| panic!("{s}")).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert!(classes.len() >= 20, "{classes:?}");
    for (class, c) in &classes {
        let n = c["scored"].as_u64().unwrap();
        let agree = c["agree"].as_u64().unwrap();
        let min = if class == "real" { 11 } else { 50 };
        assert!(n >= min, "class {class}: only {n} records");
        assert!(agree as f64 >= 0.98 * n as f64, "class {class}: {agree}/{n} agree\n{table}");
    }
    // Both verdicts occur where the class is mixed, so agreement is not by default.
    for class in ["int_float", "dotted_name", "list_order", "malformed"] {
        let c = &classes[class];
        let pass = c["bfcl_pass"].as_u64().unwrap();
        assert!(pass > 0 && pass < c["scored"].as_u64().unwrap(), "{class}: {c}");
    }
    let o = &s["overall"];
    assert!(o["agree"].as_f64().unwrap() >= 0.995 * o["scored"].as_f64().unwrap(), "{table}");
}

#[test]
fn a_scripted_tool_call_goes_end_to_end_and_one_changed_argument_scores_zero() {
    let d = tmpdir();
    let p = d.path();
    let model = p.join("model");
    serve_util::scripted_model_dir(&model);
    let prompts = import("simple_python", &["-n", "2"]);
    // Item 0 asks for the triangle's area (base 10, height 5); item 1 for 5!.
    let call = |name: &str, args: Value| {
        format!("<tool_call>\n{}\n</tool_call><|im_end|>", json!({"name": name, "arguments": args}))
    };
    let scripts = [
        json!({"when": "base of 10 units", "completion": call("calculate_triangle_area", json!({"base": 10, "height": 5}))}),
        json!({"when": "factorial of 5", "completion": call("math.factorial", json!({"number": 6}))}),
    ];
    std::fs::write(p.join("script.jsonl"), to_jsonl(&scripts)).unwrap();
    let server = Server::start(&[
        "--model-path",
        model.to_str().unwrap(),
        "--scripted",
        p.join("script.jsonl").to_str().unwrap(),
    ]);
    let args = ["--endpoint", server.url.as_str(), "--tokenizer", model.to_str().unwrap(), "--max-turns", "4", "-q"];
    let rolled = run("arl-rollout", &args, &to_jsonl(&prompts)).ok().stdout;
    let scored = jsonl(&run("arl-reward", &["--rm", "auto", "-q"], &rolled).ok().stdout);
    assert_eq!(scored.len(), 2);
    let by_id = |id: &str| scored.iter().find(|r| r["prompt_id"] == id).unwrap();
    let (good, bad) = (by_id("bfcl-simple_python_0"), by_id("bfcl-simple_python_1"));
    for r in [good, bad] {
        // A call to a schema-only tool ends the episode: one turn, one call.
        assert_eq!(r["status"], "completed");
        assert_eq!(r["turns"], 1);
        assert_eq!(r["tool_calls"], 1);
        assert!(r["response"].as_str().unwrap().starts_with("<tool_call>"), "{r}");
    }
    // The tools reached the model through the template's tool section.
    let tok = arl_chat::tokenizer::Tokenizer::load(&model).unwrap();
    let ids: Vec<u32> = good["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let prompt = tok.decode(&ids[..good["prompt_len"].as_u64().unwrap() as usize]);
    assert!(prompt.contains("<tools>") && prompt.contains("\"calculate_triangle_area\""), "{prompt}");
    assert_eq!(good["reward"], 1.0, "{}", good["reward_detail"]);
    assert_eq!(bad["reward"], 0.0);
    assert_eq!(bad["reward_detail"]["error_type"], "value_error:others", "{}", bad["reward_detail"]);
}
