//! Arbitrary chat messages through the Qwen-style templates of
//! `tokenizer_build` (`CHAT_TEMPLATE` and `COMPACT_CHAT_TEMPLATE`) as
//! `ChatTemplate` renders them for rollouts, and `tool_turn`.
//!
//! Input: JSON — an array of messages, or an object
//! `{"messages": [...], "tools": [...], "results": ["..."]}`; anything else
//! is the content of one user message. Template errors (`raise_exception`,
//! undefined attributes) are fine; panics and hangs are not.
#![no_main]
use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer_build::{CHAT_TEMPLATE, COMPACT_CHAT_TEMPLATE};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};

thread_local! {
    static TEMPLATES: Vec<ChatTemplate> = [CHAT_TEMPLATE, COMPACT_CHAT_TEMPLATE]
        .iter()
        .map(|src| {
            let specials = vec![("eos_token", "<|im_end|>".to_string()), ("pad_token", "<|endoftext|>".to_string())];
            ChatTemplate::new(src, specials).expect("the built-in templates compile")
        })
        .collect();
}

fuzz_target!(|data: &[u8]| {
    let (messages, tools, results) = match serde_json::from_slice::<Value>(data) {
        Ok(Value::Array(m)) => (m, None, Vec::new()),
        Ok(Value::Object(mut o)) => {
            let m = match o.remove("messages") {
                Some(Value::Array(m)) => m,
                Some(other) => vec![other],
                None => Vec::new(),
            };
            let t = match o.remove("tools") {
                Some(Value::Array(t)) => Some(t),
                Some(other) => Some(vec![other]),
                None => None,
            };
            let r = match o.remove("results") {
                Some(Value::Array(r)) => {
                    r.into_iter().map(|v| v.as_str().map(String::from).unwrap_or_else(|| v.to_string())).collect()
                }
                _ => Vec::new(),
            };
            (m, t, r)
        }
        Ok(other) => (vec![json!({"role": "user", "content": other})], None, Vec::new()),
        Err(_) => (vec![json!({"role": "user", "content": String::from_utf8_lossy(data)})], None, Vec::new()),
    };
    TEMPLATES.with(|ts| {
        for t in ts {
            let _ = t.render(&messages, tools.as_deref(), true);
            let _ = t.render(&messages, tools.as_deref(), false);
            let _ = t.tool_turn(tools.as_deref(), &results);
        }
    });
});
