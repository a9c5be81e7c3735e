//! Real chat templates rendered by arl's one renderer against transformers'
//! `apply_chat_template` (tests/hf_reference.py): Qwen3's (in its
//! tokenizer_config.json: system, multi-turn, tools, tool calls and
//! responses, thinking on and off, assistant turns with `<think>`), Qwen2.5's
//! hub template from the llama.cpp sources (its default system message) as a
//! `chat_template.jinja`-only directory, and both as the named-list form
//! (`default` / `tool_use`) with an `eos_token` object — same text, and the
//! same ids through arl's tokenizer (Qwen3's vocabulary, which Qwen2.5 shares).
use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer::Tokenizer;
use arl_testkit::common::{require_python, tmpdir};
use arl_testkit::real::real;
use serde_json::{json, Value};
use std::path::Path;

fn tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "calculator", "description": "Evaluates an arithmetic expression, e.g. 2*(3+4).",
         "parameters": {"type": "object", "properties": {"expr": {"type": "string", "description": "the expression — ASCII only"}},
                        "required": ["expr"]}}},
        {"type": "function", "function": {"name": "get_weather", "description": "天气 in a city",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]},
                        "days": {"type": "integer", "minimum": 1}}, "required": ["city"]}}}
    ])
}

/// (messages, with tools, add_generation_prompt, kwargs)
fn cases() -> Vec<(Value, bool, bool, Value)> {
    let user = json!({"role": "user", "content": "What is 12 + 35?"});
    let system = json!({"role": "system", "content": "You are a careful math tutor."});
    let think =
        json!({"role": "assistant", "content": "<think>\nAdd the tens, then the units.\n</think>\n\n12 + 35 = 47."});
    let plain = json!({"role": "assistant", "content": "47"});
    let call = json!({"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": {"expr": "12+35"}}}]});
    let calls_str = json!({"role": "assistant", "content": "Let me check both.", "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": "{\"expr\": \"12+35\"}"}},
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "北京", "days": 2}}}]});
    let tool1 = json!({"role": "tool", "content": "47"});
    let tool2 = json!({"role": "tool", "content": "{\"temp\": 21, \"sky\": \"晴\"}"});
    let reasoning = json!({"role": "assistant", "content": "The answer is 47.", "reasoning_content": "12+35: 40+7."});
    let reasoning_alias = json!({"role": "assistant", "content": "47 again.", "reasoning": "Same sum."});
    let user2 = json!({"role": "user", "content": "And 47 × 2? 用中文回答 🙂"});
    let none = json!({});
    let no_think = json!({"enable_thinking": false});
    let think_on = json!({"enable_thinking": true});
    vec![
        (json!([user]), false, true, none.clone()),
        (json!([user]), false, true, no_think.clone()),
        (json!([system, user]), false, true, think_on.clone()),
        (json!([system, user]), false, false, none.clone()),
        (json!([system, user, think, user2]), false, true, none.clone()),
        (json!([system, user, think, user2]), false, true, no_think.clone()),
        (json!([user, think]), false, false, none.clone()),
        (json!([user, plain, user2, think]), false, false, none.clone()),
        (json!([user, reasoning, user2]), false, true, none.clone()),
        (json!([user, reasoning]), false, false, none.clone()),
        (json!([user, reasoning_alias]), false, false, none.clone()),
        (json!([user]), true, true, none.clone()),
        (json!([system, user]), true, true, no_think.clone()),
        (json!([system, user, call, tool1]), true, true, none.clone()),
        (json!([user, call, tool1, plain]), true, false, none.clone()),
        (json!([system, user, calls_str, tool1, tool2]), true, true, no_think.clone()),
        (json!([system, user, calls_str, tool1, tool2, think, user2]), true, true, none.clone()),
        (json!([user, calls_str, tool1, tool2, reasoning]), true, false, none.clone()),
    ]
}

#[test]
fn templates_render_as_transformers_renders_them() {
    let qwen3 = real("qwen3-tokenizer");
    let qwen25_template = std::fs::read_to_string(real("llama.cpp/templates/Qwen-Qwen2.5-7B-Instruct.jinja")).unwrap();
    let qwen3_config: Value =
        serde_json::from_slice(&std::fs::read(qwen3.join("tokenizer_config.json")).unwrap()).unwrap();
    let qwen3_template = qwen3_config["chat_template"].as_str().unwrap().to_string();
    let t = tmpdir();
    let link_tokenizer = |d: &Path| {
        std::fs::create_dir_all(d).unwrap();
        std::os::unix::fs::symlink(qwen3.join("tokenizer.json"), d.join("tokenizer.json")).unwrap();
    };
    // Qwen2.5: the template only in chat_template.jinja.
    let qwen25 = t.path().join("qwen25");
    link_tokenizer(&qwen25);
    let mut cfg = qwen3_config.clone();
    cfg.as_object_mut().unwrap().remove("chat_template");
    std::fs::write(qwen25.join("tokenizer_config.json"), cfg.to_string()).unwrap();
    std::fs::write(qwen25.join("chat_template.jinja"), &qwen25_template).unwrap();
    // Named templates: Qwen2.5's by default, Qwen3's for requests with tools;
    // `eos_token` as an object.
    let named = t.path().join("named");
    link_tokenizer(&named);
    let mut cfg = qwen3_config.clone();
    cfg["chat_template"] =
        json!([{"name": "default", "template": qwen25_template}, {"name": "tool_use", "template": qwen3_template}]);
    cfg["eos_token"] = json!({"__type": "AddedToken", "content": "<|im_end|>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true});
    std::fs::write(named.join("tokenizer_config.json"), cfg.to_string()).unwrap();

    let dirs = [qwen3.clone(), qwen25, named];
    let mut all = Vec::new();
    for d in &dirs {
        for (messages, with_tools, gen, kwargs) in cases() {
            all.push(json!({"dir": d, "messages": messages, "tools": if with_tools { tools() } else { Value::Null },
                            "add_generation_prompt": gen, "kwargs": kwargs}));
        }
    }
    let (inp, out) = (t.path().join("cases.json"), t.path().join("out.json"));
    std::fs::write(&inp, Value::Array(all.clone()).to_string()).unwrap();
    let st = std::process::Command::new(require_python())
        .args([concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hf_reference.py"), "chat"])
        .args([&inp, &out])
        .status()
        .unwrap();
    assert!(st.success(), "hf_reference.py chat failed");
    let reference: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    eprintln!("{} cases, transformers {}", all.len(), reference["version"]);

    let toks: Vec<(Tokenizer, ChatTemplate)> = dirs
        .iter()
        .map(|d| {
            let tok = Tokenizer::load(d).unwrap();
            let tmpl = ChatTemplate::from_tokenizer(&tok).unwrap();
            (tok, tmpl)
        })
        .collect();
    let mut thinking_checked = false;
    for (i, (case, want)) in all.iter().zip(reference["cases"].as_array().unwrap()).enumerate() {
        let (tok, tmpl) = &toks[dirs.iter().position(|d| json!(d) == case["dir"]).unwrap()];
        assert!(want.get("error").is_none(), "transformers refused case {i}: {}", want["error"]);
        let tools = case["tools"].as_array().map(Vec::as_slice);
        let got = tmpl
            .render_with(
                case["messages"].as_array().unwrap(),
                tools,
                case["add_generation_prompt"].as_bool().unwrap(),
                case["kwargs"].as_object().unwrap(),
            )
            .unwrap_or_else(|e| panic!("case {i}: {e:#}"));
        assert_eq!(got, want["text"].as_str().unwrap(), "case {i}: {case}");
        let ids: Vec<u32> = serde_json::from_value(want["ids"].clone()).unwrap();
        assert_eq!(tok.encode(&got).unwrap(), ids, "ids of case {i}");
        thinking_checked |= got.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n");
    }
    assert!(thinking_checked, "enable_thinking=false was rendered");
    // Qwen2.5's default system message, and the named form's choice.
    let user = [json!({"role": "user", "content": "hi"})];
    assert!(toks[1].1.render(&user, None, true).unwrap().contains("You are Qwen, created by Alibaba Cloud."));
    assert!(toks[2].1.render(&user, None, true).unwrap().contains("You are Qwen, created by Alibaba Cloud."));
    assert!(!toks[2].1.render(&user, tools().as_array().map(Vec::as_slice), true).unwrap().contains("Alibaba"));
    assert_eq!(toks[2].1.eos_token.as_deref(), Some("<|im_end|>"));
}
