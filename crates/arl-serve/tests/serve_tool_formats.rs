//! `/v1/chat/completions` on a model whose chat template has no tool section
//! (SmolLM2's), with Llama 3 JSON tool calls (`--tool-call-parser llama3`):
//! the tools are in the prompt's tool header, the calls come back as OpenAI
//! `tool_calls`, and earlier calls are shown to the model in its own format.
//! Against the `--scripted` TEST DOUBLE, whose completions depend on the prompt.
use arl_testkit::common;
use arl_testkit::rollout_kit::SMOLLM2_TEMPLATE;
use arl_testkit::serve_util::{scripted_model_dir, Server};
use serde_json::{json, Value};

#[test]
fn chat_with_llama3_calls_and_a_tool_header() {
    let d = common::tmpdir();
    let model = d.path().join("model");
    scripted_model_dir(&model);
    std::fs::write(
        model.join("tokenizer_config.json"),
        json!({"eos_token": "<|im_end|>", "chat_template": SMOLLM2_TEMPLATE}).to_string(),
    )
    .unwrap();
    // Each completion answers only a prompt that holds what the header and
    // the history should have put there.
    let call = "{\"name\": \"calculator\", \"parameters\": {\"expression\": \"347*29\"}}";
    let script = [
        json!({"completion": "I see no tools."}),
        json!({"when": "{\"type\": \"function\", \"function\": {\"name\": \"calculator\"", "completion": call}),
        json!({"when": format!("<|im_start|>assistant\n{call}<|im_end|>\n<|im_start|>tool\n10063<|im_end|>\n<|im_start|>assistant\n"),
               "completion": "The answer is 10063."}),
    ];
    let lines: Vec<String> = script.iter().map(Value::to_string).collect();
    std::fs::write(d.path().join("script.jsonl"), lines.join("\n")).unwrap();
    let (m, s) = (model.display().to_string(), d.path().join("script.jsonl").display().to_string());
    let srv = Server::start(&["--model-path", &m, "--scripted", &s, "--tool-call-parser", "llama3"]);

    let tools = json!([{"type": "function", "function": {"name": "calculator", "description": "evaluate",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}]);
    let mut messages = vec![json!({"role": "user", "content": "What is 347*29?"})];
    let (code, v) = srv.post("/v1/chat/completions", &json!({"messages": messages, "tools": tools, "temperature": 0}));
    assert_eq!(code, 200, "{v}");
    let c = &v["choices"][0];
    assert_eq!(c["finish_reason"], "tool_calls", "{v}");
    assert!(c["message"]["content"].is_null(), "{v}");
    let tc = &c["message"]["tool_calls"][0];
    assert_eq!(tc["function"]["name"], "calculator");
    assert_eq!(
        serde_json::from_str::<Value>(tc["function"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"expression": "347*29"})
    );
    // Without `tools` the same text is plain content (no header, no parsing).
    let (_, v) = srv.post("/v1/chat/completions", &json!({"messages": messages}));
    assert_eq!(v["choices"][0]["message"]["content"], "I see no tools.", "{v}");

    messages.push(json!({"role": "assistant", "content": null, "tool_calls": [tc]}));
    messages.push(json!({"role": "tool", "tool_call_id": tc["id"], "content": "10063"}));
    let (code, v) = srv.post("/v1/chat/completions", &json!({"messages": messages, "tools": tools}));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "The answer is 10063.", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    drop(srv);

    // An unreadable header file stops the server before it listens.
    let r = common::run(
        "arl-serve",
        &["--model-path", &m, "--scripted", &s, "--port", "0", "--tool-header", "/nonexistent/h.j2"],
        b"",
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("`--tool-header /nonexistent/h.j2`: cannot read it"), "{}", r.stderr);
}
