//! `arl-reward` and `arl-tasks` run as binaries on real data.
use arl_testkit::common;
use common::{jsonl, run, run_in, tmpdir};
use serde_json::{json, Value};

fn lines(recs: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in recs {
        out.extend_from_slice(r.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

fn code_label() -> Value {
    json!({"tests": ["assert sq(2) == 4", "assert sq(-3) == 9", "assert sq(0) == 0", "assert sq(10) == 100"]})
}

#[test]
fn code_reward_correct_wrong_crash_and_hang() {
    let resp = |body: &str| format!("Here you go:\n```python\n{body}\n```\n");
    let recs = vec![
        json!({"prompt_id": "c", "sample_index": 0, "response": resp("def sq(x):\n    return x * x"), "label": code_label()}),
        json!({"prompt_id": "c", "sample_index": 1, "response": resp("def sq(x):\n    return x * 2"), "label": code_label()}),
        json!({"prompt_id": "c", "sample_index": 2, "response": resp("import nonexistent_module_xyz\ndef sq(x):\n    return x * x"), "label": code_label()}),
        json!({"prompt_id": "c", "sample_index": 3, "response": resp("def sq(x):\n    while True:\n        pass"), "label": code_label()}),
        json!({"prompt_id": "c", "sample_index": 4, "response": resp("import sys\nsys.exit(0)"), "label": code_label()}),
        json!({"prompt_id": "c", "sample_index": 5, "response": "no code at all", "label": code_label()}),
        json!({"prompt_id": "c", "sample_index": 6, "response": resp("def sq(x):\n    return x * x\nprint('noise')"), "label": code_label(), "extra_field": [1, 2]}),
    ];
    let t = std::time::Instant::now();
    let out = run("arl-reward", &["--rm", "code", "--test-timeout", "1", "--explain"], &lines(&recs)).ok();
    let el = t.elapsed().as_secs_f64();
    let v = jsonl(&out.stdout);
    assert_eq!(v.len(), 7);
    let rewards: Vec<f64> = v.iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert_eq!(rewards[0], 1.0);
    assert_eq!(rewards[1], 0.5, "x*2 agrees with x*x at 2 and 0 only: 2 of 4 tests");
    assert_eq!(rewards[2], 0.0);
    assert_eq!(rewards[3], 0.0);
    assert_eq!(rewards[4], 0.0, "sys.exit at import must not pass");
    assert_eq!(rewards[5], 0.0);
    assert_eq!(rewards[6], 1.0);
    let d = |i: usize| v[i]["reward_detail"].clone();
    assert_eq!(d(0)["passed"], 4);
    assert!(d(1)["reason"].as_str().unwrap().starts_with("wrong"), "{}", d(1));
    assert!(
        d(2)["reason"].as_str().unwrap().contains("crash")
            && d(2)["reason"].as_str().unwrap().contains("ModuleNotFoundError"),
        "{}",
        d(2)
    );
    assert_eq!(d(3)["tests"][0]["why"], "timeout");
    assert!(d(3)["tests"][1]["why"].as_str().unwrap().starts_with("not run"));
    assert!(d(5)["reason"].as_str().unwrap().contains("no fenced code block"));
    assert_eq!(d(0)["rm"], "code");
    // Order and pass-through.
    for (i, r) in v.iter().enumerate() {
        assert_eq!(r["sample_index"], i);
    }
    assert_eq!(v[6]["extra_field"], json!([1, 2]));
    assert!(out.stderr.contains("c#3: reward 0.0000: 0/4 tests passed; first failure: timeout"), "{}", out.stderr);
    // Concurrent: the hang (≈1 s) does not serialise everything.
    assert!(el < 15.0, "{el}");
}

/// HumanEval's protocol: a body alone runs after the label's prompt, a
/// complete function gets the prompt's imports; MBPP's `test_setup` runs
/// after the solution (it builds inputs from the solution's classes).
#[test]
fn humaneval_completions_and_mbpp_test_setup() {
    let prompt = "from typing import List\n\n\ndef total(xs: List[int]) -> int:\n    \"\"\"Sum.\"\"\"\n";
    let he = json!({"test": "def check(candidate):\n    assert candidate([1, 2]) == 3\n", "entry_point": "total", "prompt": prompt});
    let mb = json!({"tests": ["assert depth(t) == 2"], "test_setup": "t = Node(Node(None))"});
    let recs = vec![
        // The body alone.
        json!({"response": "```python\n    return sum(xs)\n```", "label": he}),
        // The whole function, without the import its signature needs.
        json!({"response": "```python\ndef total(xs: List[int]) -> int:\n    return sum(xs)\n```", "label": he}),
        json!({"response": "```python\ndef total(xs: List[int]) -> int:\n    return 0\n```", "label": he}),
        json!({"response": "```python\nclass Node:\n    def __init__(self, c):\n        self.c = c\ndef depth(n):\n    return 0 if n is None else 1 + depth(n.c)\n```", "label": mb}),
    ];
    let v = jsonl(&run("arl-reward", &["--rm", "code"], &lines(&recs)).ok().stdout);
    let rewards: Vec<f64> = v.iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert_eq!(rewards, [1.0, 1.0, 0.0, 1.0], "{v:#?}");
    assert_eq!(v[0]["reward_detail"]["prompt_prepended"], true);
    assert!(v[1]["reward_detail"].get("prompt_prepended").is_none());
}

#[test]
fn stdin_stdout_cases_python_and_cpp() {
    let label = json!({"cases": [{"stdin": "2 3\n", "stdout": "5\n"}, {"stdin": "10 -4\n", "stdout": "6"}, {"stdin": "0 0", "stdout": "0\n"}]});
    let recs = vec![
        json!({"response": "```python\na, b = map(int, input().split())\nprint(a + b)\n```", "label": label}),
        json!({"response": "```cpp\n#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<\"\\n\";}\n```", "label": label}),
        json!({"response": "```python\na, b = map(int, input().split())\nprint(a - b if a > 5 else a + b)\n```", "label": label}),
        json!({"response": "```cpp\nint main( {\n```", "label": label}),
    ];
    let out = run("arl-reward", &["--rm", "code", "--test-timeout", "5"], &lines(&recs)).ok();
    let v = jsonl(&out.stdout);
    let r: Vec<f64> = v.iter().map(|x| x["reward"].as_f64().unwrap()).collect();
    assert!((r[0] - 1.0).abs() < 1e-6 && (r[1] - 1.0).abs() < 1e-6, "{r:?} {}", v[1]["reward_detail"]);
    assert!((r[2] - 2.0 / 3.0).abs() < 1e-6, "{r:?}");
    assert_eq!(r[3], 0.0);
    assert!(
        v[3]["reward_detail"]["reason"].as_str().unwrap().starts_with("compile_error"),
        "{}",
        v[3]["reward_detail"]
    );
}

#[test]
fn tasks_code_solutions_all_score_one() {
    let d = tmpdir();
    let tasks = run_in(
        d.path(),
        "arl-tasks",
        &["code", "-n", "30", "--difficulty", "10", "--with-solutions", "--seed", "7"],
        b"",
    )
    .ok();
    let out = run_in(d.path(), "arl-reward", &["--rm", "code"], &tasks.stdout).ok();
    let v = jsonl(&out.stdout);
    assert_eq!(v.len(), 30);
    let fns: std::collections::BTreeSet<String> =
        v.iter().map(|r| r["metadata"]["function"].as_str().unwrap().to_string()).collect();
    assert!(fns.len() >= 5, "variety: {fns:?}");
    for r in &v {
        assert_eq!(r["reward"], 1.0, "{}", r["reward_detail"]);
    }
    // And a wrong solution to the same tasks does not.
    let mut wrong = jsonl(&tasks.stdout);
    for r in wrong.iter_mut() {
        r["response"] = json!("```python\ndef f(*a):\n    return None\n```");
    }
    let out = run_in(d.path(), "arl-reward", &["--rm", "auto"], &lines(&wrong)).ok();
    assert!(jsonl(&out.stdout).iter().all(|r| r["reward"] == 0.0));
}

#[test]
fn tasks_math_and_arith_solutions_score_one_under_auto() {
    for fam in ["math", "arith"] {
        for level in ["1", "5", "10"] {
            let t = run("arl-tasks", &[fam, "-n", "40", "--difficulty", level, "--with-solutions"], b"").ok();
            let out = run("arl-reward", &["--rm", "auto"], &t.stdout).ok();
            for r in jsonl(&out.stdout) {
                assert_eq!(r["reward"], 1.0, "{fam} {level}: {}", r);
            }
        }
    }
    // Noisy demonstrations are wrong, and about as many as asked.
    let t =
        run("arl-tasks", &["arith", "-n", "400", "--difficulty", "6", "--with-solutions", "--noise", "0.7"], b"").ok();
    let out = run("arl-reward", &["--rm", "auto"], &t.stdout).ok();
    let v = jsonl(&out.stdout);
    let noisy = v.iter().filter(|r| r["metadata"]["noisy"] == true).count();
    assert!((240..=320).contains(&noisy), "{noisy}");
    for r in &v {
        let want = if r["metadata"]["noisy"] == true { 0.0 } else { 1.0 };
        assert_eq!(r["reward"], want, "{r}");
    }
}

#[test]
fn cmd_reward_per_record_and_by_group() {
    let recs: Vec<Value> = (0..6)
        .map(|i| json!({"prompt_id": format!("p{}", i % 2), "sample_index": i / 2, "response": "x".repeat(i + 1)}))
        .collect();
    // Per record: reward = response length, from a shell+python one-liner.
    let prog = "python3 -c \"import sys,json\nfor l in sys.stdin:\n    r=json.loads(l); print(json.dumps({'reward': len(r['response']), 'detail': {'n': len(r['response'])}}))\"";
    let out = run("arl-reward", &["--rm", "cmd", "--cmd", prog], &lines(&recs)).ok();
    let v = jsonl(&out.stdout);
    for (i, r) in v.iter().enumerate() {
        assert_eq!(r["reward"].as_f64().unwrap(), (i + 1) as f64);
        assert_eq!(r["reward_detail"]["detail"]["n"], i + 1);
        assert_eq!(r["reward_detail"]["rm"], "cmd");
    }
    // By group: 1 for the longest response of each group, 0 otherwise; output in input order.
    let prog = "python3 -c \"import sys,json\nfor l in sys.stdin:\n    g=json.loads(l); m=max(len(r['response']) for r in g); print(json.dumps([1 if len(r['response'])==m else 0 for r in g]))\"";
    let out = run("arl-reward", &["--rm", "cmd", "--by-group", "--cmd", prog], &lines(&recs)).ok();
    let v = jsonl(&out.stdout);
    let got: Vec<f64> = v.iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert_eq!(got, vec![0.0, 0.0, 0.0, 0.0, 1.0, 1.0]);
    // A program that answers too few lines is a runtime failure, with no output file.
    let d = tmpdir();
    let r = run_in(d.path(), "arl-reward", &["--rm", "cmd", "--cmd", "head -c 0", "-o", "out.jsonl"], &lines(&recs));
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("gave 0 answer lines"), "{}", r.stderr);
    assert!(!d.path().join("out.jsonl").exists());
}

/// A loopback reward server for the `remote` test: reward = 1 when the
/// response contains the label; the first request of each body gets a 503.
fn reward_server() -> String {
    use axum::{routing::post, Json, Router};
    use std::sync::{Arc, Mutex};
    let seen: Arc<Mutex<std::collections::HashSet<String>>> = Arc::default();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let app = Router::new().route(
                "/score",
                post(move |Json(b): Json<Value>| {
                    let seen = seen.clone();
                    async move {
                        let key = b.to_string();
                        if seen.lock().unwrap().insert(key) {
                            return (axum::http::StatusCode::SERVICE_UNAVAILABLE, Json(json!({})));
                        }
                        let ok = b["response"].as_str().unwrap_or("").contains(b["label"].as_str().unwrap_or("\u{0}"));
                        if b["label"] == "number" {
                            return (axum::http::StatusCode::OK, Json(json!(0.25)));
                        }
                        (
                            axum::http::StatusCode::OK,
                            Json(json!({"reward": if ok {1.0} else {0.0}, "detail": {"ok": ok}})),
                        )
                    }
                }),
            );
            axum::serve(tokio::net::TcpListener::from_std(l).unwrap(), app).await.unwrap();
        });
    });
    format!("http://{addr}/score")
}

#[test]
fn remote_reward_with_retries() {
    let url = reward_server();
    let recs = vec![
        json!({"prompt": "q", "response": "the answer is blue", "label": "blue"}),
        json!({"prompt": "q", "response": "red", "label": "blue"}),
        json!({"prompt": "q", "response": "x", "label": "number"}),
    ];
    let out = run("arl-reward", &["--rm", "remote", "--url", &url, "--retries", "3"], &lines(&recs)).ok();
    let v = jsonl(&out.stdout);
    let got: Vec<f64> = v.iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert_eq!(got, vec![1.0, 0.0, 0.25]);
    assert_eq!(v[0]["reward_detail"]["detail"]["ok"], true);
    // No retries left: the 503 is an error naming the record.
    let r = run(
        "arl-reward",
        &["--rm", "remote", "--url", &url, "--retries", "1"],
        &lines(&[json!({"response": "new", "label": "z"})]),
    );
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("503"), "{}", r.stderr);
}

#[test]
fn shaping_explain_rejects_and_auto_mapping() {
    let d = tmpdir();
    let mk = |resp: &str, len: usize| json!({"prompt_id": "p", "data_source": "gsm8k", "response": resp, "label": "4", "tokens": vec![1; 10 + len], "prompt_len": 10});
    let recs = vec![
        mk("<think>x</think> \\boxed{4}", 50),
        mk("\\boxed{4}", 90),
        mk("\\boxed{5}", 120),
        json!({"prompt_id": "q", "data_source": "unknown_src", "response": "\\boxed{4}", "label": "4"}),
        json!({"prompt_id": "r", "data_source": "gsm8k", "label": "4"}),
    ];
    let args = [
        "--rm",
        "auto",
        "--max-response-len",
        "100",
        "--overlong-buffer",
        "20",
        "--format-pattern",
        "<think>.*</think>",
        "--format-bonus",
        "0.5",
        "--explain",
        "--on-error",
        "skip",
        "--rejects",
        "bad.jsonl",
        "-o",
        "out.jsonl",
    ];
    let r = run_in(d.path(), "arl-reward", &args, &lines(&recs)).ok();
    let v = jsonl(&std::fs::read(d.path().join("out.jsonl")).unwrap());
    assert_eq!(v.len(), 3);
    let got: Vec<f64> = v.iter().map(|r| r["reward"].as_f64().unwrap()).collect();
    assert!((got[0] - 1.5).abs() < 1e-6, "{got:?}");
    assert!((got[1] - 0.5).abs() < 1e-6, "90 tokens: half the buffer: {got:?}");
    assert!((got[2] + 1.0).abs() < 1e-6, "{got:?}");
    assert_eq!(v[1]["reward_detail"]["overlong_penalty"], -0.5);
    assert_eq!(v[0]["reward_detail"]["data_source"], "gsm8k");
    let bad = jsonl(&std::fs::read(d.path().join("bad.jsonl")).unwrap());
    assert_eq!(bad.len(), 2);
    assert!(r.stderr.contains("p: reward 1.5000"), "{}", r.stderr);
    // `--map` routes an unknown source; without it the default policy fails with exit 65.
    let r = run("arl-reward", &["--rm", "auto", "--map", "unknown_src=exact"], &lines(&recs[3..4])).ok();
    let x = &jsonl(&r.stdout)[0];
    assert_eq!(x["reward"], 1.0, "exact compares the boxed part: {x}");
    assert_eq!(x["reward_detail"]["rm"], "exact");
    let r = run("arl-reward", &["--rm", "auto"], &lines(&recs[3..4]));
    assert_eq!(r.code, 65);
    assert!(r.stderr.contains("unknown_src"), "{}", r.stderr);
    // Tool cost from metadata.
    let rec = json!({"response": "Answer: 4", "label": "4", "data_source": "arith", "tool_calls": 2, "metadata": {"tool_cost": 0.1}});
    let r = run("arl-reward", &["--rm", "auto"], &lines(&[rec])).ok();
    assert!((jsonl(&r.stdout)[0]["reward"].as_f64().unwrap() - 0.8).abs() < 1e-6);
}

#[test]
fn tasks_are_reproducible_and_difficulty_adapts() {
    let d = tmpdir();
    let a = run_in(d.path(), "arl-tasks", &["arith", "-n", "50", "--seed", "3", "--difficulty", "7"], b"").ok();
    let b = run_in(d.path(), "arl-tasks", &["arith", "-n", "50", "--seed", "3", "--difficulty", "7"], b"").ok();
    assert_eq!(a.stdout, b.stdout);
    let c = run_in(d.path(), "arl-tasks", &["arith", "-n", "50", "--seed", "4", "--difficulty", "7"], b"").ok();
    assert_ne!(a.stdout, c.stdout);
    let v = jsonl(&a.stdout);
    let ids: std::collections::HashSet<&str> = v.iter().map(|r| r["prompt_id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 50);
    assert!(v.iter().all(|r| r["metadata"]["difficulty"] == 7 && r["data_source"] == "arith"));
    // History: level 3 solved 90% → 4; then level 4 at 10% → back to 3.
    let hist = |lvl: u32, acc: f64| -> Vec<Value> {
        (0..20).map(|i| json!({"data_source": "arith", "reward": if (i as f64) < acc * 20.0 {1.0} else {0.0}, "metadata": {"difficulty": lvl}})).collect()
    };
    std::fs::write(d.path().join("h1.jsonl"), lines(&hist(3, 0.9))).unwrap();
    let r =
        run_in(d.path(), "arl-tasks", &["arith", "-n", "5", "--difficulty", "auto", "--history", "h1.jsonl"], b"").ok();
    assert!(jsonl(&r.stdout).iter().all(|x| x["metadata"]["difficulty"] == 4), "{}", r.stderr);
    assert!(r.stderr.contains("up to 4"), "{}", r.stderr);
    std::fs::write(d.path().join("h2.jsonl"), lines(&hist(4, 0.1))).unwrap();
    let r = run_in(
        d.path(),
        "arl-tasks",
        &["arith", "-n", "5", "--difficulty", "auto", "--history", "h1.jsonl", "h2.jsonl"],
        b"",
    )
    .ok();
    assert!(jsonl(&r.stdout).iter().all(|x| x["metadata"]["difficulty"] == 3), "{}", r.stderr);
    let r = run_in(d.path(), "arl-tasks", &["arith", "--difficulty", "auto"], b"");
    assert_eq!(r.code, 2);
    // Mixed with a tool cost: easy ones answered directly, hard ones with the calculator.
    let r = run_in(
        d.path(),
        "arl-tasks",
        &["arith", "-n", "40", "--mixed", "--tool-cost", "0.05", "--difficulty", "6", "--with-solutions"],
        b"",
    )
    .ok();
    let v = jsonl(&r.stdout);
    let easy = v.iter().filter(|x| x["metadata"]["kind"] == "easy").count();
    assert!((10..=30).contains(&easy), "{easy}");
    for x in &v {
        let n_msgs = x["messages"].as_array().unwrap().len();
        assert_eq!(n_msgs, if x["metadata"]["kind"] == "easy" { 2 } else { 4 });
        assert_eq!(x["metadata"]["tool_cost"], 0.05);
    }
    let hard = v.iter().find(|x| x["metadata"]["kind"] == "hard").unwrap();
    let call = hard["messages"][1]["content"].as_str().unwrap();
    assert!(call.starts_with("<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \""), "{call}");
    assert!(call.ends_with("\"}}\n</tool_call>"), "{call}");
    assert_eq!(hard["messages"][2]["role"], "tool");
}

/// Found by GRPO on SmolLM2 (experiments/smollm2-arith.env): within five steps
/// the policy answered "The answer is 9 + 8." and the grader, comparing by
/// value, paid for it. A computation copied from the prompt is not an answer;
/// `--last-number-credit` pays part for a right last number without an
/// answer line, and accuracy (`score` ≥ 1) counts only full credit.
#[test]
fn restated_computations_score_zero_and_last_number_credit_is_partial() {
    let rec = |i: usize, resp: &str| {
        json!({"prompt_id": format!("p{i}"), "data_source": "arith", "prompt": "What is 9+8? Reply in the form: The answer is N.",
               "label": "17", "response": resp})
    };
    let recs = [
        rec(0, "The answer is 9 + 8."),
        rec(1, "The answer is 17."),
        rec(2, "9 + 8 = 17"),
        rec(3, "9 + 8 = 16"),
        rec(4, "The answer is 34/2."),
    ];
    let out = jsonl(&run("arl-reward", &["--rm", "auto", "--last-number-credit", "0.5"], &lines(&recs)).ok().stdout);
    let got: Vec<(f64, &str)> =
        out.iter().map(|r| (r["reward"].as_f64().unwrap(), r["reward_detail"]["match"].as_str().unwrap())).collect();
    assert_eq!(got, [(0.0, "restated"), (1.0, "string"), (0.5, "last_number"), (0.0, "no_answer"), (1.0, "value")]);
    // Without the flag a right last number earns nothing; an out-of-range credit is a usage error.
    let out = jsonl(&run("arl-reward", &["--rm", "auto"], &lines(&recs[2..3])).ok().stdout);
    assert_eq!(out[0]["reward"], 0.0);
    assert_eq!(run("arl-reward", &["--rm", "auto", "--last-number-credit", "1"], &lines(&recs[..1])).code, 2);
}
