//! `arl-serve` protocol tests against its `--scripted` TEST DOUBLE (no model,
//! no libtorch): SGLang's wire shapes, batching, `n`, rids, stop rules,
//! streaming, errors, auth, abort/pause, chat with tool calls, and `arl-sync`.
use arl_testkit::common;
use arl_testkit::serve_util;

use serde_json::{json, Value};
use serve_util::{scripted_model_dir, Server};
use std::path::Path;

fn scripted_server(dir: &Path, scripts: &[Value], extra: &[&str]) -> Server {
    scripted_model_dir(&dir.join("model"));
    let lines: Vec<String> = scripts.iter().map(|s| s.to_string()).collect();
    std::fs::write(dir.join("script.jsonl"), lines.join("\n")).unwrap();
    let model = dir.join("model").display().to_string();
    let script = dir.join("script.jsonl").display().to_string();
    let mut args = vec!["--model-path", &model, "--scripted", &script];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn ids(v: &Value) -> Vec<u64> {
    v["output_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

#[test]
fn generate_shapes_batches_and_stops_like_sglang() {
    let d = common::tmpdir();
    let s = scripted_server(d.path(), &[json!({"completion": "Hello world. The end"})], &[]);
    // Single text prompt: text, output_ids, meta_info; EOS trimmed from text, kept in ids.
    let v = s.generate(json!({"text": "hi", "sampling_params": {"temperature": 0, "max_new_tokens": 64}, "rid": "r1", "return_logprob": true}));
    assert_eq!(v["text"], "Hello world. The end");
    let m = &v["meta_info"];
    assert_eq!(m["id"], "r1");
    assert_eq!(m["finish_reason"], json!({"type": "stop", "matched": 258}));
    assert_eq!(m["prompt_tokens"], 2);
    assert_eq!(m["completion_tokens"], 21);
    assert_eq!(*ids(&v).last().unwrap(), 258);
    assert_eq!(m["weight_version"], "default");
    assert!(m["e2e_latency"].as_f64().unwrap() >= 0.0);
    assert_eq!(m["output_token_logprobs"].as_array().unwrap().len(), 21);
    assert_eq!(m["input_token_logprobs"], json!([[null, b'i', null]]));
    assert_eq!(m["output_token_logprobs"][0], json!([0.0, b'H', null]));
    // no_stop_trim keeps EOS text? EOS is special: skip_special_tokens drops it either way.
    let v = s.generate(json!({"text": "hi", "sampling_params": {"max_new_tokens": 64, "skip_special_tokens": false, "no_stop_trim": true}}));
    assert_eq!(v["text"], "Hello world. The end<|im_end|>");
    // Length.
    let v = s.generate(json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5}}));
    assert_eq!(v["text"], "Hello");
    assert_eq!(v["meta_info"]["finish_reason"], json!({"type": "length", "length": 5}));
    // Stop string: trimmed unless no_stop_trim; ids keep the stop tokens.
    let v = s.generate(json!({"text": "x", "sampling_params": {"stop": [". T", "zzz"], "max_new_tokens": 64}}));
    assert_eq!(v["text"], "Hello world");
    assert_eq!(v["meta_info"]["finish_reason"], json!({"type": "stop", "matched": ". T"}));
    assert_eq!(ids(&v).len(), 14);
    let v = s.generate(json!({"text": "x", "sampling_params": {"stop": ". T", "no_stop_trim": true}}));
    assert_eq!(v["text"], "Hello world. T");
    // Stop token id.
    let v = s.generate(json!({"text": "x", "sampling_params": {"stop_token_ids": [b' ']}}));
    assert_eq!(v["text"], "Hello");
    assert_eq!(v["meta_info"]["finish_reason"], json!({"type": "stop", "matched": 32}));
    // ignore_eos runs to max_new_tokens.
    let v = s.generate(json!({"input_ids": [5], "sampling_params": {"max_new_tokens": 30, "ignore_eos": true}}));
    assert_eq!(v["meta_info"]["completion_tokens"], 30);
    assert_eq!(v["meta_info"]["finish_reason"]["type"], "length");
    // Batch × n: prompt-major order, rid suffixes only when n == 1.
    let v = s.generate(json!({"input_ids": [[1, 2], [3, 4, 5]], "rid": "b", "sampling_params": {"max_new_tokens": 2}}));
    let a = v.as_array().unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!((a[0]["meta_info"]["id"].as_str(), a[1]["meta_info"]["id"].as_str()), (Some("b_0"), Some("b_1")));
    assert_eq!(
        (a[0]["meta_info"]["prompt_tokens"].as_u64(), a[1]["meta_info"]["prompt_tokens"].as_u64()),
        (Some(2), Some(3))
    );
    let v = s.generate(json!({"text": ["a", "bbb"], "sampling_params": {"max_new_tokens": 3, "n": 2}}));
    let a = v.as_array().unwrap();
    let pt: Vec<u64> = a.iter().map(|x| x["meta_info"]["prompt_tokens"].as_u64().unwrap()).collect();
    assert_eq!(pt, [1, 1, 3, 3]);
    let rids: std::collections::HashSet<&str> = a.iter().map(|x| x["meta_info"]["id"].as_str().unwrap()).collect();
    assert_eq!(rids.len(), 4);
    // A single prompt with n > 1 answers a list.
    let v = s.generate(json!({"text": "a", "sampling_params": {"max_new_tokens": 1, "n": 3}}));
    assert_eq!(v.as_array().unwrap().len(), 3);
    // top_logprobs: k entries, first one the greedy token.
    let v = s.generate(
        json!({"input_ids": [1, 2, 3, 4], "return_logprob": true, "logprob_start_len": 0, "top_logprobs_num": 3,
        "return_text_in_logprobs": true, "sampling_params": {"temperature": 0, "max_new_tokens": 4}}),
    );
    let m = &v["meta_info"];
    assert_eq!(m["input_token_logprobs"].as_array().unwrap().len(), 4);
    assert!(m["input_token_logprobs"][0][0].is_null());
    assert_eq!(m["input_top_logprobs"][0], Value::Null);
    for (i, t) in m["output_top_logprobs"].as_array().unwrap().iter().enumerate() {
        assert_eq!(t.as_array().unwrap().len(), 3);
        assert_eq!(t[0][1], m["output_token_logprobs"][i][1]);
    }
    assert_eq!(m["output_token_logprobs"][0][2], "H");
}

#[test]
fn streaming_sends_cumulative_chunks_then_done() {
    let d = common::tmpdir();
    let s = scripted_server(d.path(), &[json!({"completion": "abc"})], &[]);
    let r = serve_util::client()
        .post(format!("{}/generate", s.url))
        .json(&json!({"text": "q", "stream": true, "return_logprob": true, "sampling_params": {"max_new_tokens": 10}}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let body = r.text().unwrap();
    let events: Vec<&str> =
        body.split("\n\n").filter(|e| !e.is_empty()).map(|e| e.strip_prefix("data: ").unwrap()).collect();
    assert_eq!(*events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks.len(), 4, "{body}");
    let texts: Vec<&str> = chunks.iter().map(|c| c["text"].as_str().unwrap()).collect();
    assert_eq!(texts, ["a", "ab", "abc", "abc"]);
    for (i, c) in chunks.iter().enumerate() {
        assert_eq!(c["output_ids"].as_array().unwrap().len(), i + 1);
        assert_eq!(c["meta_info"]["output_token_logprobs"].as_array().unwrap().len(), i + 1);
        assert_eq!(c["meta_info"]["finish_reason"].is_null(), i < 3);
        assert_eq!(c["meta_info"].get("e2e_latency").is_some(), i == 3);
    }
    // Batched streams carry the index of each item.
    let body = serve_util::client()
        .post(format!("{}/generate", s.url))
        .json(&json!({"input_ids": [[1], [2]], "stream": true, "sampling_params": {"max_new_tokens": 2}}))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let idx: std::collections::BTreeSet<u64> = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str::<Value>(e).unwrap()["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx.into_iter().collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn bad_requests_answer_400_and_the_server_survives() {
    let d = common::tmpdir();
    let s = scripted_server(d.path(), &[json!({"completion": "ok"})], &["--max-body-bytes", "4096"]);
    let cases = [
        (json!({}), "Either text, input_ids or input_embeds"),
        (json!({"text": "a", "input_ids": [1]}), "Either text"),
        (json!({"input_ids": []}), "input_ids cannot be empty"),
        (json!({"input_ids": [999999]}), "out of the vocabulary"),
        (json!({"text": "a", "sampling_params": {"temperature": -1}}), "temperature"),
        (json!({"text": "a", "sampling_params": {"top_p": 0}}), "top_p"),
        (json!({"text": "a", "sampling_params": {"top_k": 0}}), "top_k"),
        (json!({"text": "a", "sampling_params": {"max_new_tokens": -3}}), "max_new_tokens"),
        (json!({"text": "a", "sampling_params": {"stop": 3}}), "stop"),
        (json!({"text": ["a", "b"], "sampling_params": [{"n": 1}, {"n": 2}]}), "same `n`"),
        (json!({"text": ["a", "b"], "rid": ["x", "x"]}), "duplicate rid"),
        (json!({"text": "a", "logprob_start_len": 5}), "logprob_start_len"),
        (json!({"text": "a", "sampling_params": {"regex": "a+"}}), "regex"),
    ];
    for (body, want) in cases {
        let (code, v) = s.post("/generate", &body);
        assert_eq!(code, 400, "{body} → {v}");
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(want), "{body}: `{msg}` lacks `{want}`");
    }
    let r = serve_util::client().post(format!("{}/generate", s.url)).body("{not json").send().unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let big = json!({"text": "a".repeat(10_000)});
    let (code, _) = s.post("/generate", &big);
    assert_eq!(code, 413);
    let v = s.generate(json!({"text": "a"}));
    assert_eq!(v["text"], "ok");
    assert_eq!(s.get("/health").0, 200);
    assert_eq!(s.get("/health_generate").0, 200);
}

#[test]
fn api_key_is_required_when_set() {
    let d = common::tmpdir();
    let s = scripted_server(d.path(), &[json!({"completion": "ok"})], &["--api-key", "sekret"]);
    assert_eq!(s.post("/generate", &json!({"text": "a"})).0, 401);
    assert_eq!(s.get("/get_model_info").0, 401);
    assert_eq!(s.get("/health").0, 200);
    let r = serve_util::client()
        .post(format!("{}/generate", s.url))
        .bearer_auth("sekret")
        .json(&json!({"text": "a"}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
}

#[test]
fn abort_pause_continue_and_weight_updates() {
    let d = common::tmpdir();
    let s = scripted_server(d.path(), &[json!({"completion": "x"})], &[]);
    let long = json!({"input_ids": [1], "sampling_params": {"max_new_tokens": 900_000, "ignore_eos": true}});
    // abort_all_requests on a weight update: 16 running requests all finish with abort.
    let url = s.url.clone();
    let handles: Vec<_> = (0..16)
        .map(|_| {
            let (u, b) = (url.clone(), long.clone());
            std::thread::spawn(move || serve_util::post(&format!("{u}/generate"), &b))
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(400));
    let ckpt = d.path().join("model").display().to_string();
    let (code, v) = s.post(
        "/update_weights_from_disk",
        &json!({"model_path": ckpt, "weight_version": "7", "abort_all_requests": true}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["success"], true);
    for h in handles {
        let (code, v) = h.join().unwrap();
        assert_eq!(code, 200);
        assert_eq!(v["meta_info"]["finish_reason"]["type"], "abort", "{}", v["meta_info"]);
    }
    assert_eq!(s.get("/get_model_info").1["weight_version"], "7");
    assert_eq!(s.get("/get_weight_version").1, json!({"weight_version": "7"}));
    // A bad path: success false, 400, nothing changes.
    let (code, v) =
        s.post("/update_weights_from_disk", &json!({"model_path": "/nonexistent/ckpt", "weight_version": "8"}));
    assert_eq!((code, v["success"].clone()), (400, json!(false)));
    assert!(v["message"].as_str().unwrap().contains("/nonexistent/ckpt"));
    assert_eq!(s.get("/get_model_info").1["weight_version"], "7");
    // Abort by rid.
    let (u, b) = (
        url.clone(),
        json!({"input_ids": [1], "rid": "victim", "sampling_params": {"max_new_tokens": 900_000, "ignore_eos": true}}),
    );
    let h = std::thread::spawn(move || serve_util::post(&format!("{u}/generate"), &b));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(s.post("/abort_request", &json!({"rid": "victim"})).0, 200);
    let (_, v) = h.join().unwrap();
    assert_eq!(v["meta_info"]["finish_reason"]["type"], "abort");
    assert_eq!(v["meta_info"]["weight_version"], "7");
    // Pause in place holds requests; continue lets them finish.
    assert_eq!(s.post("/pause_generation", &json!({"mode": "in_place"})).1["status"], "ok");
    let (u, b) = (url.clone(), json!({"input_ids": [1], "sampling_params": {"max_new_tokens": 3}}));
    let h = std::thread::spawn(move || serve_util::post(&format!("{u}/generate"), &b));
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!h.is_finished());
    assert_eq!(s.get("/get_load").1["num_reqs"], 1);
    assert_eq!(s.post("/flush_cache", &json!({})).0, 400);
    assert_eq!(s.post("/continue_generation", &json!({})).0, 200);
    let (_, v) = h.join().unwrap();
    assert_eq!(v["meta_info"]["completion_tokens"], 2);
    assert_eq!(s.get("/flush_cache").0, 200);
}

#[test]
fn chat_completions_with_qwen_tool_calls_multi_turn() {
    let d = common::tmpdir();
    let call = "I will compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"347*29\"}}\n</tool_call>";
    let s = scripted_server(
        d.path(),
        &[
            json!({"when": "347*29?", "completion": call}),
            json!({"when": "<tool_response>\n10063", "completion": "The answer is 10063."}),
        ],
        &[],
    );
    let tools = json!([{"type": "function", "function": {"name": "calculator", "description": "evaluate", "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]);
    let mut messages = vec![json!({"role": "user", "content": "What is 347*29?"})];
    let (code, v) =
        s.post("/v1/chat/completions", &json!({"model": "m", "messages": messages, "tools": tools, "temperature": 0}));
    assert_eq!(code, 200, "{v}");
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls");
    assert_eq!(c["message"]["content"], "I will compute.");
    let tc = &c["message"]["tool_calls"][0];
    assert_eq!(tc["function"]["name"], "calculator");
    assert_eq!(
        serde_json::from_str::<Value>(tc["function"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"expression": "347*29"})
    );
    assert!(tc["id"].as_str().unwrap().starts_with("call_"));
    messages.push(json!({"role": "assistant", "content": "I will compute.", "tool_calls": [tc]}));
    messages.push(json!({"role": "tool", "tool_call_id": tc["id"], "content": "10063"}));
    let (code, v) = s.post("/v1/chat/completions", &json!({"messages": messages, "tools": tools, "logprobs": true}));
    assert_eq!(code, 200, "{v}");
    let c = &v["choices"][0];
    assert_eq!(c["message"]["content"], "The answer is 10063.");
    assert_eq!(c["finish_reason"], "stop");
    assert!(c["message"]["tool_calls"].is_null());
    assert_eq!(
        c["logprobs"]["content"].as_array().unwrap().len(),
        v["usage"]["completion_tokens"].as_u64().unwrap() as usize
    );
    let r = serve_util::client().post(format!("{}/v1/chat/completions", s.url)).body("{}").send().unwrap();
    assert_eq!(r.status().as_u16(), 400, "non-JSON content type is refused");
}

/// The `data: …` events of an SSE body, `[DONE]` last.
fn sse_events(r: reqwest::blocking::Response) -> (Vec<Value>, String) {
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let body = r.text().unwrap();
    let events: Vec<&str> =
        body.split("\n\n").filter(|e| !e.is_empty()).map(|e| e.strip_prefix("data: ").unwrap()).collect();
    assert_eq!(*events.last().unwrap(), "[DONE]", "{body}");
    (events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect(), body)
}

#[test]
fn chat_completions_stream_openai_chunks() {
    let d = common::tmpdir();
    let call =
        "Let me see.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"2+2\"}}\n</tool_call>";
    let s = scripted_server(
        d.path(),
        &[json!({"when": "tool please", "completion": call}), json!({"completion": "Hello there, friend. END more"})],
        &[],
    );
    let post = |body: Value| serde_json::to_string(&body).unwrap();
    let send = |body: Value| {
        serve_util::client()
            .post(format!("{}/v1/chat/completions", s.url))
            .header("content-type", "application/json")
            .body(post(body))
            .send()
            .unwrap()
    };
    // Plain text: a role chunk, content deltas that add up to the text the
    // non-streaming answer gives, a finish chunk, a usage chunk, [DONE].
    let messages = json!([{"role": "user", "content": "hi"}]);
    let (_, whole) = s.post("/v1/chat/completions", &json!({"messages": messages, "temperature": 0, "stop": ["END"]}));
    let want = whole["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert_eq!(want, "Hello there, friend. ");
    let (chunks, body) =
        sse_events(send(json!({"messages": messages, "temperature": 0, "stop": ["END"], "stream": true,
                                                 "logprobs": true, "stream_options": {"include_usage": true}})));
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk", "{body}");
        assert!(c["id"].as_str().unwrap().starts_with("chatcmpl-"));
    }
    let choices: Vec<&Value> = chunks.iter().filter_map(|c| c["choices"].as_array()).flatten().collect();
    assert_eq!(choices[0]["delta"], json!({"role": "assistant", "content": ""}));
    let text: String = choices.iter().filter_map(|c| c["delta"]["content"].as_str()).collect();
    assert_eq!(text, want, "{body}");
    assert!(
        choices.iter().filter(|c| c["delta"]["content"].as_str().is_some_and(|t| !t.is_empty())).count() > 3,
        "deltas, not one blob: {body}"
    );
    let last = choices.last().unwrap();
    assert_eq!((last["finish_reason"].as_str(), last["delta"].clone()), (Some("stop"), json!({})));
    assert_eq!(last["matched_stop"], "END");
    assert!(choices[..choices.len() - 1].iter().all(|c| c["finish_reason"].is_null()));
    // Log-probs arrive with the chunks, one per completion token in all.
    let n_lp: usize = choices.iter().filter_map(|c| c["logprobs"]["content"].as_array()).map(Vec::len).sum();
    let usage = &chunks.last().unwrap()["usage"];
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    assert_eq!(n_lp as u64, usage["completion_tokens"].as_u64().unwrap());
    assert_eq!(usage, &whole["usage"]);
    // With tools: the parsed call arrives whole, finish_reason tool_calls.
    let tools = json!([{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]);
    let (chunks, body) = sse_events(send(
        json!({"messages": [{"role": "user", "content": "tool please"}], "tools": tools, "stream": true}),
    ));
    let choices: Vec<&Value> = chunks.iter().filter_map(|c| c["choices"].as_array()).flatten().collect();
    let calls: Vec<&Value> = choices.iter().filter_map(|c| c["delta"]["tool_calls"].as_array()).flatten().collect();
    assert_eq!(calls.len(), 1, "{body}");
    assert_eq!(calls[0]["function"]["name"], "calculator");
    let content: String = choices.iter().filter_map(|c| c["delta"]["content"].as_str()).collect();
    assert_eq!(content, "Let me see.");
    assert_eq!(choices.last().unwrap()["finish_reason"], "tool_calls");
    assert!(chunks.iter().all(|c| c.get("usage").is_none()), "no usage chunk unless asked");
    // n = 2: each choice streams under its own index.
    let (chunks, _) =
        sse_events(send(json!({"messages": messages, "n": 2, "temperature": 0.5, "stream": true, "max_tokens": 3})));
    let finished: std::collections::BTreeSet<u64> = chunks
        .iter()
        .filter_map(|c| c["choices"].as_array())
        .flatten()
        .filter(|c| c["finish_reason"] == "length")
        .map(|c| c["index"].as_u64().unwrap())
        .collect();
    assert_eq!(finished.into_iter().collect::<Vec<_>>(), [0, 1]);
    // A non-boolean stream is a 400.
    assert_eq!(send(json!({"messages": messages, "stream": "yes"})).status().as_u16(), 400);
}

#[test]
fn sync_updates_three_servers_one_stopped() {
    let d = common::tmpdir();
    let a = scripted_server(&d.path().join("a"), &[json!({"completion": "ok"})], &[]);
    let b = scripted_server(&d.path().join("b"), &[json!({"completion": "ok"})], &[]);
    let mut c = scripted_server(&d.path().join("c"), &[json!({"completion": "ok"})], &[]);
    c.daemon.kill();
    let ckpt = d.path().join("ckpt");
    scripted_model_dir(&ckpt);
    let ck = ckpt.display().to_string();
    let r = common::run(
        "arl-sync",
        &[
            "--checkpoint",
            &ck,
            "--weight-version",
            "42",
            "--endpoint",
            &a.url,
            "--endpoint",
            &b.url,
            "--endpoint",
            &c.url,
            "--verify-timeout",
            "5",
        ],
        b"",
    );
    assert_eq!(r.code, 1, "stderr: {}", r.stderr);
    let out = r.stdout_str();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].starts_with("ok ") && lines[0].contains(&a.url) && lines[0].contains("weight_version=42"),
        "{out}"
    );
    assert!(lines[1].starts_with("ok ") && lines[1].contains(&b.url), "{out}");
    assert!(lines[2].starts_with("failed ") && lines[2].contains(&c.url) && lines[2].contains("update"), "{out}");
    for s in [&a, &b] {
        let info = s.get("/get_model_info").1;
        assert_eq!(info["weight_version"], "42");
        assert_eq!(info["model_path"], ckpt.canonicalize().unwrap().display().to_string());
    }
    // --json summary of the two live servers.
    let r = common::run(
        "arl-sync",
        &["--checkpoint", &ck, "--weight-version", "43", "--endpoint", &a.url, "--endpoint", &b.url, "--json"],
        b"",
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!((v["ok"].clone(), v["failed"].clone(), v["servers"].clone()), (json!(true), json!(0), json!(2)));
    assert_eq!(v["results"][0]["weight_version"], "43");
    // An incomplete checkpoint touches no server.
    std::fs::write(
        ckpt.join("model.safetensors.index.json"),
        r#"{"weight_map": {"w": "model-00001-of-00002.safetensors"}}"#,
    )
    .unwrap();
    let r = common::run("arl-sync", &["--checkpoint", &ck, "--weight-version", "44", "--endpoint", &a.url], b"");
    assert_eq!(r.code, 65, "{}", r.stderr);
    assert!(r.stderr.contains("model-00001-of-00002.safetensors"), "{}", r.stderr);
    assert_eq!(a.get("/get_model_info").1["weight_version"], "43");
}

#[test]
fn sync_discovers_workers_from_a_router() {
    let d = common::tmpdir();
    let a = scripted_server(&d.path().join("a"), &[json!({"completion": "ok"})], &[]);
    // A stand-in sgl-router that only answers the legacy `GET /list_workers`.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let router = format!("http://{}", listener.local_addr().unwrap());
    let body = json!({"urls": [a.url]}).to_string();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for stream in listener.incoming().take(2) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let req = String::from_utf8_lossy(&buf[..n]);
            let resp = if req.starts_with("GET /list_workers") {
                format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len())
            } else {
                "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_string()
            };
            let _ = s.write_all(resp.as_bytes());
        }
    });
    let ckpt = d.path().join("ckpt");
    scripted_model_dir(&ckpt);
    let r = common::run(
        "arl-sync",
        &["--checkpoint", &ckpt.display().to_string(), "--weight-version", "5", "--router", &router],
        b"",
    );
    assert_eq!(r.code, 0, "{}\n{}", r.stdout_str(), r.stderr);
    assert!(r.stdout_str().contains(&a.url));
    assert_eq!(a.get("/get_model_info").1["weight_version"], "5");
}

/// `name{labels} value` of one sample line of a Prometheus exposition.
fn sample(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no sample `{name_and_labels}` in:\n{text}"))
        .parse()
        .unwrap()
}

#[test]
fn metrics_move_under_load_with_sglangs_names() {
    let d = common::tmpdir();
    // 30 ms per decode step: requests stay running long enough to be seen.
    let s = scripted_server(
        d.path(),
        &[json!({"completion": "one two three four five six seven eight nine", "token_delay_ms": 30})],
        &["--served-model-name", "tiny \"q\"", "--max-running-requests", "4"],
    );
    let scrape = || {
        let r = serve_util::client().get(format!("{}/metrics", s.url)).send().unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/plain; version=0.0.4"));
        r.text().unwrap()
    };
    let l = r#"{model_name="tiny \"q\""}"#;
    let before = scrape();
    for name in [
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:num_requests_total",
        "sglang:num_aborted_requests_total",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:gen_throughput",
        "sglang:cache_hit_rate",
        "sglang:time_to_first_token_seconds",
        "sglang:inter_token_latency_seconds",
        "sglang:e2e_request_latency_seconds",
    ] {
        assert!(before.contains(&format!("# TYPE {name} ")), "{name} missing:\n{before}");
    }
    assert_eq!(sample(&before, &format!("sglang:generation_tokens_total{l}")), 0.0);
    // 12 requests of prompt length 3, at most 4 running at once (the rest queue).
    let url = s.url.clone();
    let handles: Vec<_> = (0..12)
        .map(|_| {
            let u = url.clone();
            std::thread::spawn(move || {
                serve_util::post(
                    &format!("{u}/generate"),
                    &json!({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 20}}),
                )
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(250));
    let during = scrape();
    assert!(sample(&during, &format!("sglang:num_running_reqs{l}")) >= 1.0, "{during}");
    assert!(sample(&during, &format!("sglang:num_queue_reqs{l}")) >= 1.0, "{during}");
    assert!(sample(&during, &format!("sglang:token_usage{l}")) > 0.0);
    let gen1 = sample(&during, &format!("sglang:generation_tokens_total{l}"));
    assert!(gen1 > 0.0);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let during2 = scrape();
    assert!(sample(&during2, &format!("sglang:generation_tokens_total{l}")) > gen1, "the counter moves");
    assert!(sample(&during2, &format!("sglang:gen_throughput{l}")) > 0.0);
    let mut completion = 0.0;
    for h in handles {
        let (code, v) = h.join().unwrap();
        assert_eq!(code, 200, "{v}");
        completion += v["meta_info"]["completion_tokens"].as_f64().unwrap();
    }
    let after = scrape();
    assert_eq!(sample(&after, &format!("sglang:num_requests_total{l}")), 12.0);
    assert_eq!(sample(&after, &format!("sglang:prompt_tokens_total{l}")), 36.0);
    assert_eq!(sample(&after, &format!("sglang:generation_tokens_total{l}")), completion);
    assert_eq!(sample(&after, &format!("sglang:num_running_reqs{l}")), 0.0);
    assert_eq!(sample(&after, &format!("sglang:time_to_first_token_seconds_count{l}")), 12.0);
    assert_eq!(sample(&after, &format!("sglang:e2e_request_latency_seconds_count{l}")), 12.0);
    assert_eq!(sample(&after, &format!("sglang:inter_token_latency_seconds_count{l}")), completion - 12.0);
    // Decode steps take >= 30 ms: no inter-token gap falls in the 25 ms bucket.
    assert_eq!(sample(&after, r#"sglang:inter_token_latency_seconds_bucket{le="0.025",model_name="tiny \"q\""}"#), 0.0);
    // Queued requests waited for a slot: some first tokens came after 0.1 s.
    assert!(sample(&after, r#"sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="tiny \"q\""}"#) < 12.0);
    assert!(after.contains(r#"arl:weight_version{model_name="tiny \"q\"",version="default"} 1"#), "{after}");
    // An aborted request counts as aborted.
    let u = url.clone();
    let h = std::thread::spawn(move || {
        serve_util::post(
            &format!("{u}/generate"),
            &json!({"input_ids": [1], "rid": "gone", "sampling_params": {"max_new_tokens": 900_000, "ignore_eos": true}}),
        )
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(s.post("/abort_request", &json!({"rid": "gone"})).0, 200);
    h.join().unwrap();
    let last = scrape();
    assert_eq!(sample(&last, &format!("sglang:num_aborted_requests_total{l}")), 1.0);
    assert_eq!(sample(&last, &format!("sglang:num_requests_total{l}")), 13.0);
}

#[test]
fn log_level_debug_logs_each_request_and_info_does_not() {
    let d = common::tmpdir();
    let script = [json!({"completion": "ok then"})];
    let body = |rid: &str| json!({"input_ids": [1, 2], "rid": rid, "sampling_params": {"max_new_tokens": 3}});
    let s = scripted_server(&d.path().join("a"), &script, &["--log-level", "debug"]);
    s.generate(body("first-rid"));
    let s2 = scripted_server(&d.path().join("b"), &script, &[]);
    s2.generate(body("second-rid"));
    let s3 = scripted_server(&d.path().join("c"), &script, &["--log-requests"]);
    s3.generate(body("third-rid"));
    // The log line is written when the sequence ends, before the answer is sent.
    let log = s.daemon.log();
    let line = log.lines().find(|l| l.contains("request ended")).unwrap_or_else(|| panic!("{log}"));
    assert!(line.contains("DEBUG") && line.contains("rid=\"first-rid\"") && line.contains("prompt_tokens=2"), "{line}");
    assert!(line.contains("generated=3") && line.contains("finish=\"length\""), "{line}");
    assert!(!s2.daemon.log().contains("request ended"), "info does not log requests: {}", s2.daemon.log());
    // (The test's reader thread may not have drained that line yet: wait a moment for it.)
    let logged = |l: &str| l.contains("INFO") && l.contains("rid=\"third-rid\"");
    for _ in 0..50 {
        if s3.daemon.log().lines().any(logged) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let log3 = s3.daemon.log();
    assert!(log3.lines().any(logged), "{log3}");
    let r = common::run("arl-serve", &["--model-path", "x", "--log-level", "loud"], b"");
    assert_eq!(r.code, 2, "{}", r.stderr);
}
