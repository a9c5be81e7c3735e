//! `arl-rollout` end to end: chat-template golden test against Hugging Face,
//! scripted tool episodes checked turn by turn and token by token, faults
//! (server killed and restarted, `kill -9` + `--resume`), over-sampling aborts.
//! The server is the STAND-IN SGLang server of `rollout_kit` (see there).
use arl_testkit::common;
use arl_testkit::rollout_kit;

use arl_chat::template::ChatTemplate;
use common::{jsonl, run_in, tmpdir};
use rollout_kit::*;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn template(dir: &Path) -> ChatTemplate {
    let tok = arl_chat::tokenizer::Tokenizer::load(dir).unwrap();
    ChatTemplate::from_tokenizer(&tok).unwrap()
}

fn golden_cases() -> Vec<Value> {
    let calc = arl_env::tools::calculator_def();
    let py = arl_env::tools::python_def();
    // Key order not sorted, non-ASCII, characters minijinja's tojson would HTML-escape.
    let odd = json!({"type": "function", "function": {"name": "lookup", "description": "Find <b>cafés</b> & 'bars' \"quoted\"\ttab",
        "parameters": {"type": "object", "required": ["q"], "properties": {"q": {"type": "string"}, "limit": {"type": "integer", "default": 10, "minimum": 1.5}}}}});
    vec![
        json!({"messages": [{"role": "user", "content": "What is 2+2?"}], "tools": null}),
        json!({"messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi ünïcødé 😀"}], "tools": null}),
        json!({"messages": [{"role": "user", "content": "347*29?"}], "tools": [calc, py, odd]}),
        json!({"messages": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Compute."}], "tools": [calc]}),
        json!({"messages": [
            {"role": "user", "content": "What is 347*29 and 2**10?"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "347*29"}}},
                {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "2**10", "note": "ü<&>"}}}]},
            {"role": "tool", "content": "10063"},
            {"role": "tool", "content": "1024"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [{"name": "python", "arguments": {"code": "print(1)"}}]},
            {"role": "tool", "content": "1\n"},
            {"role": "assistant", "content": "10063 and 1024."},
            {"role": "user", "content": "Thanks"}], "tools": [calc, py]}),
    ]
}

const GOLDEN_PY: &str = r#"
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
out = []
for case in json.load(open(sys.argv[2])):
    kw = dict(tools=case["tools"]) if case["tools"] else {}
    text = tok.apply_chat_template(case["messages"], tokenize=False, add_generation_prompt=True, **kw)
    ids = tok.apply_chat_template(case["messages"], tokenize=True, add_generation_prompt=True, return_dict=True, **kw)["input_ids"]
    out.append({"text": text, "ids": list(ids)})
json.dump(out, open(sys.argv[3], "w"))
"#;

fn golden_against_transformers(template_src: &str) {
    let py = common::require_python();
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, template_src);
    let cases = golden_cases();
    std::fs::write(t.path().join("cases.json"), serde_json::to_string(&cases).unwrap()).unwrap();
    std::fs::write(t.path().join("golden.py"), GOLDEN_PY).unwrap();
    let o = Command::new(&py)
        .args(["golden.py", "model", "cases.json", "hf.json"])
        .current_dir(t.path())
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "python failed: {}", String::from_utf8_lossy(&o.stderr));
    let hf: Vec<Value> = serde_json::from_slice(&std::fs::read(t.path().join("hf.json")).unwrap()).unwrap();
    let tmpl = template(&model);
    let tok = arl_chat::tokenizer::Tokenizer::load(&model).unwrap();
    for (case, want) in cases.iter().zip(&hf) {
        let msgs = case["messages"].as_array().unwrap();
        let tools = case["tools"].as_array().map(|v| &v[..]);
        let got = tmpl.render(msgs, tools, true).unwrap();
        assert_eq!(got, want["text"].as_str().unwrap(), "case {case}");
        let ids: Vec<u32> = want["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
        assert_eq!(tok.encode(&got).unwrap(), ids, "token ids differ for case {case}");
    }
}

#[test]
fn chat_template_matches_transformers_qwen25() {
    golden_against_transformers(QWEN25_TEMPLATE);
}

#[test]
fn chat_template_matches_transformers_arl_templates() {
    // The two templates `arl-train make-tokenizer` writes (Qwen and compact).
    golden_against_transformers(arl_chat::tokenizer_build::CHAT_TEMPLATE);
    golden_against_transformers(arl_chat::tokenizer_build::COMPACT_CHAT_TEMPLATE);
}

#[test]
fn chat_template_matches_transformers_python_string_methods() {
    golden_against_transformers(QWEN3_STYLE_TEMPLATE);
}

#[test]
fn tool_turn_text_is_the_templates() {
    let t = tmpdir();
    write_model_dir(t.path(), QWEN25_TEMPLATE);
    let tmpl = template(t.path());
    assert_eq!(
        tmpl.tool_turn(None, &["10063".into(), "1024".into()]).unwrap(),
        "\n<|im_start|>user\n<tool_response>\n10063\n</tool_response>\n<tool_response>\n1024\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    );
}

/// Checks the token-level invariants of every trajectory against what the
/// stand-in server produced: mask-1 spans are exactly the server's
/// `output_ids` (with its log-probs), mask-0 spans are tool turns.
fn check_token_exactness(recs: &[Value], log: &[(Vec<u32>, Vec<u32>)]) {
    let answers: HashMap<&[u32], &[u32]> = log.iter().map(|(i, o)| (&i[..], &o[..])).collect();
    for r in recs {
        let tokens: Vec<u32> = serde_json::from_value(r["tokens"].clone()).unwrap();
        let mask: Vec<u8> = serde_json::from_value(r["loss_mask"].clone()).unwrap();
        let lps: Vec<f32> = serde_json::from_value(r["rollout_log_probs"].clone()).unwrap();
        let pl = r["prompt_len"].as_u64().unwrap() as usize;
        assert_eq!(mask.len(), tokens.len() - pl, "{r}");
        assert_eq!(lps.len(), tokens.len() - pl);
        // Walk the turns: at each mask-1 run, the server saw exactly the prefix
        // before it and answered exactly the run.
        let mut i = pl;
        let mut gen_turns = 0;
        while i < tokens.len() {
            let m = mask[i - pl];
            let mut j = i;
            while j < tokens.len() && mask[j - pl] == m {
                j += 1;
            }
            if m == 1 {
                let out = answers.get(&tokens[..i]).unwrap_or_else(|| panic!("no request with this prefix in {r}"));
                assert_eq!(&tokens[i..j], *out, "generated span differs from the server's output_ids");
                for (k, &id) in tokens[i..j].iter().enumerate() {
                    assert_eq!(lps[i - pl + k], fake_logprob(id, k) as f32);
                }
                gen_turns += 1;
            } else {
                assert!(lps[i - pl..j - pl].iter().all(|&x| x == 0.0));
                // A tool turn follows the model's end-of-turn token: it opens with "\n" (byte-level id 10).
                assert_eq!(tokens[i], b'\n' as u32, "tool span");
                assert_eq!(tokens[i - 1], IM_END);
            }
            i = j;
        }
        assert_eq!(gen_turns, r["turns"].as_u64().unwrap(), "{r}");
    }
}

fn group_ids(recs: &[Value]) -> HashMap<String, Vec<u64>> {
    let mut g: HashMap<String, Vec<u64>> = HashMap::new();
    for r in recs {
        g.entry(r["prompt_id"].as_str().unwrap().to_string()).or_default().push(r["sample_index"].as_u64().unwrap());
    }
    for v in g.values_mut() {
        v.sort();
    }
    g
}

#[test]
fn calculator_episodes_turn_by_turn() {
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, QWEN25_TEMPLATE);
    let stub = StubSglang::start(&model);
    let mut input = prompts_jsonl(&["calc", "malformed", "two", "loop", "plain", "echo"]);
    input.push_str(&(json!({"id": "p6", "prompt": "SCRIPT:plain", "metadata": {"env": "bare"}}).to_string() + "\n"));
    std::fs::write(t.path().join("envs.json"), r#"{"envs": {"bare": {"tools": []}}}"#).unwrap();
    let url = stub.url();
    let r = run_in(
        t.path(),
        "arl-rollout",
        &[
            "--endpoint",
            &url,
            "--tokenizer",
            "model",
            "-n",
            "2",
            "--tools",
            "calculator",
            "--tool",
            "echo=cat",
            "--max-turns",
            "3",
            "--env-config",
            "envs.json",
            "--concurrency",
            "4",
            "--rm",
            "exact",
        ],
        input.as_bytes(),
    )
    .ok();
    let recs = jsonl(&r.stdout);
    assert_eq!(recs.len(), 14, "{}", r.stderr);
    let by: HashMap<String, &Value> =
        recs.iter().map(|r| (format!("{}#{}", r["prompt_id"].as_str().unwrap(), r["sample_index"]), r)).collect();
    let tool_turn = |c: &str| {
        format!(
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n{c}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        )
    };

    let calc = by["p0#0"];
    assert_eq!(
        calc["response"].as_str().unwrap(),
        format!("I will compute.\n{}{}The answer is 10063.<|im_end|>", calc_call("347*29"), tool_turn("10063"))
    );
    assert_eq!(
        (calc["status"].as_str(), calc["turns"].as_u64(), calc["tool_calls"].as_u64()),
        (Some("completed"), Some(2), Some(1))
    );
    assert_eq!(calc["weight_versions"], json!(["3", "3"]));
    assert_eq!(calc["finish_reason"], "stop");
    assert_eq!(calc["metadata"]["tool_errors"], 0);
    assert_eq!(calc["label"], "x", "fields rollout does not own pass through");
    assert_eq!(
        (calc["reward"].as_f64(), calc["reward_detail"]["rm"].as_str()),
        (Some(0.0), Some("exact")),
        "inline --rm"
    );
    // The prompt: rendered once, with the calculator and echo definitions in the system turn.
    let tokens: Vec<u32> = serde_json::from_value(calc["tokens"].clone()).unwrap();
    let pl = calc["prompt_len"].as_u64().unwrap() as usize;
    let tok = arl_chat::tokenizer::Tokenizer::load(&model).unwrap();
    let prompt = tok.decode(&tokens[..pl]);
    assert!(
        prompt.starts_with("<|im_start|>system\nYou are Qwen")
            && prompt.contains("\"name\": \"calculator\"")
            && prompt.contains("\"name\": \"echo\"")
    );
    assert!(prompt.ends_with("Task 0. SCRIPT:calc<|im_end|>\n<|im_start|>assistant\n"), "{prompt}");

    let bad = by["p1#1"];
    assert!(
        bad["response"].as_str().unwrap().contains("<tool_response>\nError: the tool call is not valid JSON"),
        "{bad}"
    );
    assert_eq!(bad["metadata"]["tool_errors"], 1);
    assert_eq!(bad["status"], "completed");

    let two = by["p2#0"];
    assert!(two["response"]
        .as_str()
        .unwrap()
        .contains("<tool_response>\n1024\n</tool_response>\n<tool_response>\n-4\n</tool_response>"));
    assert_eq!(two["tool_calls"], 2);

    let lp = by["p3#0"];
    assert_eq!(
        (lp["status"].as_str(), lp["turns"].as_u64(), lp["tool_calls"].as_u64()),
        (Some("truncated"), Some(3), Some(2))
    );

    let plain = by["p4#1"];
    assert_eq!(plain["response"], "Hello there.<|im_end|>");
    assert_eq!((plain["turns"].as_u64(), plain["tool_calls"].as_u64()), (Some(1), Some(0)));

    let echo = by["p5#0"];
    assert!(
        echo["response"].as_str().unwrap().contains(&tool_turn(r#"{"name":"echo","arguments":{"text":"hi"}}"#)),
        "{echo}"
    );

    let bare = by["p6#0"];
    let bt: Vec<u32> = serde_json::from_value(bare["tokens"].clone()).unwrap();
    let bare_prompt = tok.decode(&bt[..bare["prompt_len"].as_u64().unwrap() as usize]);
    assert!(!bare_prompt.contains("# Tools"), "env `bare` offers no tools: {bare_prompt}");

    check_token_exactness(&recs, &stub.state.log.lock().unwrap());
    assert!(r.stderr.contains("7 groups written"), "{}", r.stderr);
}

#[test]
fn max_response_len_truncates_across_turns() {
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, QWEN25_TEMPLATE);
    let stub = StubSglang::start(&model);
    let url = stub.url();
    let r = run_in(
        t.path(),
        "arl-rollout",
        &["--endpoint", &url, "--tokenizer", "model", "--tools", "calculator", "--max-response-len", "150", "-q"],
        prompts_jsonl(&["loop"]).as_bytes(),
    )
    .ok();
    let recs = jsonl(&r.stdout);
    let rec = &recs[0];
    let n = rec["tokens"].as_array().unwrap().len() - rec["prompt_len"].as_u64().unwrap() as usize;
    assert_eq!(n, 150);
    assert_eq!(rec["status"], "truncated");
    check_token_exactness(&recs, &stub.state.log.lock().unwrap());
}

/// A STAND-IN for SandboxFusion (`/run_code`, `/run_jupyter`) that runs the code
/// with the system `python3` and no isolation: only for this test.
fn fake_sandboxfusion() -> (tokio::runtime::Runtime, String) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    const RUNNER: &str = "import json,sys,io,contextlib\ncells=json.load(sys.stdin)\ng={}\nfor c in cells[:-1]:\n    with contextlib.redirect_stdout(io.StringIO()): exec(c,g)\nexec(cells[-1],g)\n";
    let run = |cells: Vec<String>| -> (String, String, i32) {
        let mut child = Command::new("python3")
            .args(["-c", RUNNER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(serde_json::to_string(&cells).unwrap().as_bytes()).unwrap();
        let o = child.wait_with_output().unwrap();
        (
            String::from_utf8_lossy(&o.stdout).into(),
            String::from_utf8_lossy(&o.stderr).into(),
            o.status.code().unwrap_or(-1),
        )
    };
    let app = axum::Router::new()
        .route(
            "/run_code",
            axum::routing::post(move |b: axum::Json<Value>| async move {
                let (out, err, code) = run(vec![b.0["code"].as_str().unwrap().to_string()]);
                axum::Json(json!({"status": if code == 0 {"Success"} else {"Failed"}, "message": "", "compile_result": null,
                    "run_result": {"status": "Finished", "execution_time": 0.01, "return_code": code, "stdout": out, "stderr": err}, "files": {}}))
            }),
        )
        .route(
            "/run_jupyter",
            axum::routing::post(move |b: axum::Json<Value>| async move {
                let cells: Vec<String> = serde_json::from_value(b.0["cells"].clone()).unwrap();
                let (out, err, code) = run(cells);
                let error = if code == 0 { json!([]) } else { json!([{"ename": "Error", "evalue": err.trim(), "traceback": []}]) };
                axum::Json(json!({"status": "Success", "message": "", "cells": [{"stdout": out, "stderr": "", "display": [], "error": error}], "files": {}}))
            }),
        );
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (rt, url)
}

#[test]
fn python_tool_episode_stateful() {
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, QWEN25_TEMPLATE);
    let stub = StubSglang::start(&model);
    let (_rt, sandbox) = fake_sandboxfusion();
    let url = stub.url();
    let base = [
        "--endpoint",
        url.as_str(),
        "--tokenizer",
        "model",
        "--tools",
        "python",
        "--sandbox-url",
        sandbox.as_str(),
        "-q",
    ];
    let tool_turn = |c: &str| {
        format!(
            "<|im_end|>\n<|im_start|>user\n<tool_response>\n{c}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        )
    };
    let mut args = base.to_vec();
    args.push("--python-stateful");
    let r = run_in(t.path(), "arl-rollout", &args, prompts_jsonl(&["python"]).as_bytes()).ok();
    let recs = jsonl(&r.stdout);
    let rec = &recs[0];
    assert_eq!(
        rec["response"].as_str().unwrap(),
        format!(
            "{}{}{}{}Done: 43.<|im_end|>",
            py_call("x = 6*7\nprint(x)"),
            tool_turn("42\n"),
            py_call("print(x + 1)"),
            tool_turn("43\n")
        )
    );
    assert_eq!(
        (rec["turns"].as_u64(), rec["tool_calls"].as_u64(), rec["metadata"]["tool_errors"].as_u64()),
        (Some(3), Some(2), Some(0))
    );
    check_token_exactness(&recs, &stub.state.log.lock().unwrap());
    // The local sandbox (namespaces, rlimits), one interpreter per episode.
    let r = run_in(
        t.path(),
        "arl-rollout",
        &[
            "--endpoint",
            url.as_str(),
            "--tokenizer",
            "model",
            "--tools",
            "python",
            "--python-stateful",
            "-q",
            "-n",
            "2",
        ],
        prompts_jsonl(&["python"]).as_bytes(),
    )
    .ok();
    for rec in jsonl(&r.stdout) {
        assert!(rec["response"].as_str().unwrap().contains(&tool_turn("43\n")), "{rec}");
        assert_eq!(rec["metadata"]["tool_errors"], 0);
    }
    // Stateless: the second call does not see `x`.
    let r = run_in(t.path(), "arl-rollout", &base, prompts_jsonl(&["python"]).as_bytes()).ok();
    let rec = &jsonl(&r.stdout)[0];
    assert!(rec["response"].as_str().unwrap().contains("NameError"), "{rec}");
    assert_eq!(rec["metadata"]["tool_errors"], 1);
}

const MCP_SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    meth = m["method"]
    if meth == "initialize":
        r = {"protocolVersion": "2024-11-05", "capabilities": {"tools": {}}, "serverInfo": {"name": "t", "version": "0"}}
    elif meth == "tools/list":
        r = {"tools": [{"name": "upper", "description": "Upper-case text", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]}
    elif meth == "tools/call":
        r = {"content": [{"type": "text", "text": m["params"]["arguments"]["text"].upper()}], "isError": False}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "no"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
"#;

#[test]
fn mcp_tool_episode() {
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, QWEN25_TEMPLATE);
    std::fs::write(t.path().join("mcp.py"), MCP_SERVER).unwrap();
    let stub = StubSglang::start(&model);
    let url = stub.url();
    let r = run_in(
        t.path(),
        "arl-rollout",
        &["--endpoint", &url, "--tokenizer", "model", "--mcp", "python3 mcp.py", "-q"],
        prompts_jsonl(&["mcp"]).as_bytes(),
    )
    .ok();
    let rec = &jsonl(&r.stdout)[0];
    let resp = rec["response"].as_str().unwrap();
    assert!(resp.contains("<tool_response>\nABC\n</tool_response>"), "{resp}");
    let tokens: Vec<u32> = serde_json::from_value(rec["tokens"].clone()).unwrap();
    let tok = arl_chat::tokenizer::Tokenizer::load(&model).unwrap();
    let prompt = tok.decode(&tokens[..rec["prompt_len"].as_u64().unwrap() as usize]);
    assert!(
        prompt.contains(r#""name": "upper", "description": "Upper-case text", "parameters": {"type": "object""#),
        "{prompt}"
    );
}

fn spawn_rollout(dir: &Path, args: &[&str], stdin_file: &str) -> std::process::Child {
    Command::new(common::exe("arl-rollout"))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(std::fs::File::open(dir.join(stdin_file)).unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn server_killed_and_restarted_every_group_once() {
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, QWEN25_TEMPLATE);
    let mut stub = StubSglang::start(&model);
    stub.state.delay_ms.store(150, std::sync::atomic::Ordering::Relaxed);
    let scripts: Vec<&str> = (0..12).map(|i| if i % 2 == 0 { "calc" } else { "plain" }).collect();
    std::fs::write(t.path().join("in.jsonl"), prompts_jsonl(&scripts)).unwrap();
    let url = stub.url();
    let child = spawn_rollout(
        t.path(),
        &[
            "--endpoint",
            &url,
            "--tokenizer",
            "model",
            "-n",
            "2",
            "--tools",
            "calculator",
            "--concurrency",
            "4",
            "--retry-backoff",
            "0.1",
            "--max-retries",
            "20",
        ],
        "in.jsonl",
    );
    std::thread::sleep(Duration::from_millis(400));
    stub.kill();
    std::thread::sleep(Duration::from_millis(1200));
    stub.restart();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let recs = jsonl(&out.stdout);
    let groups = group_ids(&recs);
    assert_eq!(groups.len(), 12, "{stderr}");
    assert!(groups.values().all(|v| v == &vec![0, 1]), "{groups:?}");
    let retries: u64 = stderr
        .split(" retries")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("retries in stats");
    assert!(retries > 0, "{stderr}");
    check_token_exactness(&recs, &stub.state.log.lock().unwrap());
}

#[test]
fn resume_after_kill_9() {
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, QWEN25_TEMPLATE);
    let stub = StubSglang::start(&model);
    stub.state.delay_ms.store(100, std::sync::atomic::Ordering::Relaxed);
    let scripts: Vec<&str> = (0..10).map(|_| "calc").collect();
    std::fs::write(t.path().join("in.jsonl"), prompts_jsonl(&scripts)).unwrap();
    let url = stub.url();
    let args = [
        "--endpoint",
        url.as_str(),
        "--tokenizer",
        "model",
        "-n",
        "2",
        "--tools",
        "calculator",
        "--concurrency",
        "2",
        "-o",
        "out.parquet",
        "-i",
        "in.jsonl",
    ];
    let mut child = spawn_rollout(t.path(), &args, "in.jsonl");
    let partial = t.path().join("out.parquet.partial");
    let start = Instant::now();
    loop {
        let lines = std::fs::read(&partial).map(|b| b.iter().filter(|&&c| c == b'\n').count()).unwrap_or(0);
        if lines >= 4 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    let _ = child.wait();
    assert!(!t.path().join("out.parquet").exists());
    let before = std::fs::read(&partial).unwrap().iter().filter(|&&c| c == b'\n').count();
    assert!(before < 20, "killed too late to test anything");
    // Without --resume the leftover is refused.
    let r = run_in(t.path(), "arl-rollout", &args, b"");
    assert_eq!(r.code, 2, "{}", r.stderr);
    let mut a = args.to_vec();
    a.push("--resume");
    let r = run_in(t.path(), "arl-rollout", &a, b"").ok();
    assert!(r.stderr.contains("10 groups written ("), "{}", r.stderr);
    assert!(!partial.exists());
    let recs: Vec<Value> =
        arl_core::io::read_all(&t.path().join("out.parquet")).unwrap().iter().map(|r| r.to_value()).collect();
    let groups = group_ids(&recs);
    assert_eq!(recs.len(), 20);
    assert_eq!(groups.len(), 10);
    assert!(groups.values().all(|v| v == &vec![0, 1]), "{groups:?}");
}

#[test]
fn target_groups_stops_and_aborts_the_rest() {
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, QWEN25_TEMPLATE);
    let stub = StubSglang::start(&model);
    let scripts = ["slow", "plain", "slow", "calc", "slow", "plain", "slow"];
    let url = stub.url();
    let start = Instant::now();
    let r = run_in(
        t.path(),
        "arl-rollout",
        &[
            "--endpoint",
            &url,
            "--tokenizer",
            "model",
            "-n",
            "2",
            "--tools",
            "calculator",
            "--concurrency",
            "16",
            "--target-groups",
            "3",
        ],
        prompts_jsonl(&scripts).as_bytes(),
    )
    .ok();
    assert!(start.elapsed() < Duration::from_secs(20), "waited for the slow requests instead of aborting them");
    let recs = jsonl(&r.stdout);
    let groups = group_ids(&recs);
    let mut ids: Vec<_> = groups.keys().cloned().collect();
    ids.sort();
    assert_eq!(ids, vec!["p1", "p3", "p5"], "{}", r.stderr);
    // Every slow request (4 groups × 2 samples) got an /abort_request.
    let aborted = stub.state.aborted.lock().unwrap().clone();
    assert_eq!(aborted.len(), 8, "{aborted:?} {}", r.stderr);
    assert!(r.stderr.contains("8 aborted"), "{}", r.stderr);
}

#[test]
fn dataset_walk_is_deterministic_and_suffixes_epochs() {
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, QWEN25_TEMPLATE);
    let stub = StubSglang::start(&model);
    let scripts = ["plain"; 5];
    std::fs::write(t.path().join("in.jsonl"), prompts_jsonl(&scripts)).unwrap();
    let url = stub.url();
    let ids = |step: &str| -> Vec<String> {
        let r = run_in(
            t.path(),
            "arl-rollout",
            &[
                "--endpoint",
                &url,
                "--tokenizer",
                "model",
                "-i",
                "in.jsonl",
                "--batch-size",
                "3",
                "--step",
                step,
                "--seed",
                "7",
                "-q",
            ],
            b"",
        )
        .ok();
        let mut v: Vec<String> =
            jsonl(&r.stdout).iter().map(|r| r["prompt_id"].as_str().unwrap().to_string()).collect();
        v.sort();
        v
    };
    let (s0, s1, s0b) = (ids("0"), ids("1"), ids("0"));
    assert_eq!(s0, s0b);
    assert_eq!(s0.len(), 3);
    // Step 1 holds the 2 prompts left of epoch 0 and 1 of epoch 1.
    assert_eq!(s1.iter().filter(|i| i.ends_with("@1")).count(), 1, "{s1:?}");
    let mut epoch0: Vec<&String> = s0.iter().chain(s1.iter().filter(|i| !i.contains('@'))).collect();
    epoch0.sort();
    assert_eq!(epoch0, vec!["p0", "p1", "p2", "p3", "p4"]);
}

/// A STAND-IN for sgl-router, in front of SGLang-shaped stubs that record each
/// aborted rid: forwards `/generate` round-robin to its workers, lists them at
/// `GET /workers`, and, like the real router, does not forward `/abort_request`.
/// The real sgl-router in front of `arl-serve` workers: `router.rs` beside this file.
fn fake_router(workers: Vec<String>) -> (tokio::runtime::Runtime, String) {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let http = arl_http::client::builder().build().unwrap();
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let list = workers.clone();
    let app = axum::Router::new()
        .route(
            "/generate",
            axum::routing::post(move |b: axum::Json<Value>| {
                let (http, workers, next) = (http.clone(), workers.clone(), next.clone());
                async move {
                    let w = &workers[next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % workers.len()];
                    let v: Value = http.post(format!("{w}/generate")).json(&b.0).send().await.unwrap().json().await.unwrap();
                    axum::Json(v)
                }
            }),
        )
        .route(
            "/workers",
            axum::routing::get(move || {
                let list = list.clone();
                async move { axum::Json(json!({"workers": list.iter().map(|u| json!({"url": u})).collect::<Vec<_>>(), "total": list.len()})) }
            }),
        );
    rt.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (rt, url)
}

#[test]
fn router_target_groups_aborts_reach_every_worker() {
    let t = tmpdir();
    let model = t.path().join("model");
    write_model_dir(&model, QWEN25_TEMPLATE);
    let (w1, w2) = (StubSglang::start(&model), StubSglang::start(&model));
    let (_rt, router) = fake_router(vec![w1.url(), w2.url()]);
    let scripts = ["plain", "slow", "calc", "slow"];
    let r = run_in(
        t.path(),
        "arl-rollout",
        &["--router", &router, "--tokenizer", "model", "-n", "2", "--tools", "calculator", "--target-groups", "2"],
        prompts_jsonl(&scripts).as_bytes(),
    )
    .ok();
    let mut ids: Vec<_> = group_ids(&jsonl(&r.stdout)).keys().cloned().collect();
    ids.sort();
    assert_eq!(ids, vec!["p0", "p2"], "{}", r.stderr);
    // 4 slow requests, each abort sent to both workers (the router does not forward them).
    // A request can be aborted twice (when the target is reached and again when
    // the run ends while its answer is still in flight): harmless, SGLang's abort
    // is idempotent, so the distinct ids are counted.
    let distinct = |v: Vec<String>| v.into_iter().collect::<std::collections::BTreeSet<_>>();
    let (a1, a2) =
        (distinct(w1.state.aborted.lock().unwrap().clone()), distinct(w2.state.aborted.lock().unwrap().clone()));
    assert_eq!((a1.len(), a2.len()), (4, 4), "{a1:?} {a2:?}");
    assert!(
        w1.state.requests.load(std::sync::atomic::Ordering::Relaxed) > 0
            && w2.state.requests.load(std::sync::atomic::Ordering::Relaxed) > 0
    );
}
