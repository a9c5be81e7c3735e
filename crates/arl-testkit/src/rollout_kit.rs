//! Test kit for `arl-rollout`: a tiny byte-level tokenizer with ChatML
//! specials and a Qwen2.5-style chat template, and a STAND-IN SGLang server
//! (`StubSglang`: axum on 127.0.0.1, native `/generate` per
//! docs/reference/protocols.md §1, scripted outputs) that can be killed and
//! restarted on the same port. Used until `arl-serve --scripted` exists.
#![allow(dead_code)]
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const ENDOFTEXT: u32 = 256;
pub const IM_START: u32 = 257;
pub const IM_END: u32 = 258;

/// The Qwen2.5-style template the rollout tests render, from `arl-chat`
/// (with its test tokenizers).
pub use arl_chat::tokenizer_build::QWEN25_TEMPLATE;

/// SmolLM2-135M-Instruct's chat template: ChatML with a default system
/// message and no tool section (tools reach the model through a tool header).
pub const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// A template in the style of Qwen3's, using Python string methods, slicing
/// and `namespace` (the places where minijinja and Jinja2 can differ).
pub const QWEN3_STYLE_TEMPLATE: &str = r#"{%- set ns = namespace(last_query=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if message.role == "user" and not message.content.startswith('<tool_response>') and ns.last_query == messages|length - 1 %}
        {%- set ns.last_query = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == "assistant" %}
        {%- set reasoning = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query and reasoning %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning.strip() + '\n</think>\n\n' + content.lstrip('\n') + '<|im_end|>\n' }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content.strip() + '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\n' + content.replace('  ', ' ').title() if message.role == 'system' else '<|im_start|>' + message.role + '\n' + content }}{{ '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"#;

/// Writes a model directory: a byte-level BPE `tokenizer.json` (one token per
/// byte; ChatML specials; `<tool_call>`/`</tool_call>` added, not special)
/// and `tokenizer_config.json` with `template`.
pub fn write_model_dir(dir: &Path, template: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let tok = arl_chat::tokenizer_build::byte_level_bpe_json(
        &[],
        &[
            (256, "<|endoftext|>", true),
            (257, "<|im_start|>", true),
            (258, "<|im_end|>", true),
            (259, "<tool_call>", false),
            (260, "</tool_call>", false),
        ],
    );
    std::fs::write(dir.join("tokenizer.json"), serde_json::to_string(&tok).unwrap()).expect("write tokenizer.json");
    let cfg = json!({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": null,
        "model_max_length": 32768, "clean_up_tokenization_spaces": false,
        "chat_template": template
    });
    std::fs::write(dir.join("tokenizer_config.json"), serde_json::to_string_pretty(&cfg).unwrap())
        .expect("write config");
}

pub fn calc_call(expr: &str) -> String {
    format!("<tool_call>\n{{\"name\": \"calculator\", \"arguments\": {{\"expression\": \"{expr}\"}}}}\n</tool_call>")
}

pub fn py_call(code: &str) -> String {
    format!("<tool_call>\n{}\n</tool_call>", json!({"name": "python", "arguments": {"code": code}}))
}

/// The scripted assistant turns for `SCRIPT:<name>` prompts; `None` = hang until aborted.
pub fn script(name: &str, turn: usize) -> Option<String> {
    let turns: Vec<String> = match name {
        "plain" => vec!["Hello there.".into()],
        "calc" => vec![format!("I will compute.\n{}", calc_call("347*29")), "The answer is 10063.".into()],
        "malformed" => {
            vec!["<tool_call>\n{\"name\": \"calculator\", \"arguments\": {oops}}\n</tool_call>".into(), "Sorry.".into()]
        }
        "two" => vec![format!("{}\n{}", calc_call("2**10"), calc_call("7 // -2")), "1024 and -4.".into()],
        "loop" => vec![calc_call("1+1"); 50],
        "python" => vec![py_call("x = 6*7\nprint(x)"), py_call("print(x + 1)"), "Done: 43.".into()],
        "echo" => vec![
            "<tool_call>\n{\"name\": \"echo\", \"arguments\": {\"text\": \"hi\"}}\n</tool_call>".into(),
            "ok".into(),
        ],
        "mcp" => vec![
            "<tool_call>\n{\"name\": \"upper\", \"arguments\": {\"text\": \"abc\"}}\n</tool_call>".into(),
            "ok".into(),
        ],
        // Llama 3.x JSON calls (`--tool-call-parser llama3`): two at once, then the answer.
        "llama" => vec![
            "{\"name\": \"calculator\", \"parameters\": {\"expression\": \"347*29\"}}; {\"name\": \"calculator\", \"parameters\": {\"expression\": \"2**10\"}}".into(),
            "The answer is 10063.".into(),
        ],
        "slow" => return None,
        _ => vec![format!("unknown script {name}")],
    };
    Some(turns.get(turn).cloned().unwrap_or_else(|| "(end)".into()))
}

/// Deterministic stand-in log-prob of a generated token.
pub fn fake_logprob(id: u32, pos: usize) -> f64 {
    -(((id as usize * 7 + pos) % 13) as f64 + 1.0) / 16.0
}

#[derive(Default)]
pub struct StubState {
    pub requests: AtomicU64,
    pub aborted: Mutex<Vec<String>>,
    /// Every answered request: (input_ids, output_ids).
    pub log: Mutex<Vec<(Vec<u32>, Vec<u32>)>>,
    pub waiters: Mutex<HashMap<String, Arc<tokio::sync::Notify>>>,
    pub delay_ms: AtomicU64,
}

/// The STAND-IN SGLang server.
pub struct StubSglang {
    pub port: u16,
    pub state: Arc<StubState>,
    tok: Arc<tokenizers::Tokenizer>,
    rt: Option<tokio::runtime::Runtime>,
}

impl StubSglang {
    pub fn start(model_dir: &Path) -> StubSglang {
        let tok = Arc::new(tokenizers::Tokenizer::from_file(model_dir.join("tokenizer.json")).expect("tokenizer"));
        let mut s = StubSglang { port: 0, state: Arc::default(), tok, rt: None };
        s.serve(0);
        s
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn serve(&mut self, port: u16) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        let (state, tok) = (self.state.clone(), self.tok.clone());
        let listener = rt.block_on(async {
            let mut tries = 0;
            loop {
                match tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
                    Ok(l) => break l,
                    Err(e) if tries < 50 => {
                        tries += 1;
                        let _ = e;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(e) => panic!("bind {port}: {e}"),
                }
            }
        });
        self.port = listener.local_addr().expect("addr").port();
        let app = axum::Router::new()
            .route(
                "/generate",
                axum::routing::post({
                    let (state, tok) = (state.clone(), tok.clone());
                    move |body: axum::Json<Value>| {
                        let (state, tok) = (state.clone(), tok.clone());
                        async move { axum::Json(generate(&state, &tok, body.0).await) }
                    }
                }),
            )
            .route(
                "/abort_request",
                axum::routing::post({
                    let state = state.clone();
                    move |body: axum::Json<Value>| {
                        let state = state.clone();
                        async move {
                            let rid = body.0.get("rid").and_then(Value::as_str).unwrap_or("").to_string();
                            state.aborted.lock().unwrap().push(rid.clone());
                            if let Some(n) = state.waiters.lock().unwrap().get(&rid) {
                                n.notify_one();
                            }
                            ""
                        }
                    }
                }),
            );
        rt.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        self.rt = Some(rt);
    }

    /// Kills the server: the listener and every open connection go away.
    pub fn kill(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        let port = self.port;
        self.serve(port);
    }
}

impl Drop for StubSglang {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn generate(state: &StubState, tok: &tokenizers::Tokenizer, req: Value) -> Value {
    state.requests.fetch_add(1, Ordering::Relaxed);
    let rid = req.get("rid").and_then(Value::as_str).unwrap_or("none").to_string();
    let input: Vec<u32> =
        req["input_ids"].as_array().expect("input_ids").iter().map(|x| x.as_u64().expect("id") as u32).collect();
    let max_new = req["sampling_params"]["max_new_tokens"].as_u64().unwrap_or(128) as usize;
    let text = tok.decode(&input, false).expect("decode");
    let name = text
        .split("SCRIPT:")
        .nth(1)
        .map(|s| s.chars().take_while(|c| c.is_ascii_alphanumeric()).collect::<String>())
        .unwrap_or_default();
    let turn = text.matches("<|im_start|>assistant\n").count().saturating_sub(1);
    let delay = state.delay_ms.load(Ordering::Relaxed);
    if delay > 0 {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let (mut out, mut finish) = match script(&name, turn) {
        Some(t) => {
            let mut ids = tok.encode(t.as_str(), false).expect("encode").get_ids().to_vec();
            ids.push(IM_END);
            (ids, json!({"type": "stop", "matched": IM_END}))
        }
        None => {
            let n = Arc::new(tokio::sync::Notify::new());
            state.waiters.lock().unwrap().insert(rid.clone(), n.clone());
            let _ = tokio::time::timeout(Duration::from_secs(30), n.notified()).await;
            (
                tok.encode("partial", false).expect("encode").get_ids().to_vec(),
                json!({"type": "abort", "message": "Abort request"}),
            )
        }
    };
    if out.len() > max_new {
        out.truncate(max_new);
        finish = json!({"type": "length", "length": max_new});
    }
    state.log.lock().unwrap().push((input.clone(), out.clone()));
    let lps: Vec<Value> = out.iter().enumerate().map(|(i, &id)| json!([fake_logprob(id, i), id, null])).collect();
    json!({
        "text": tok.decode(&out, false).unwrap_or_default(),
        "output_ids": out,
        "meta_info": {"id": rid, "finish_reason": finish, "prompt_tokens": input.len(), "completion_tokens": lps.len(),
                      "cached_tokens": 0, "weight_version": "3", "output_token_logprobs": lps}
    })
}

/// Prompt records (slime-style JSONL) for the given scripts, ids `p0`, `p1`, …
pub fn prompts_jsonl(scripts: &[&str]) -> String {
    scripts
        .iter()
        .enumerate()
        .map(|(i, s)| {
            json!({"id": format!("p{i}"), "prompt": format!("Task {i}. SCRIPT:{s}"), "label": "x"}).to_string() + "\n"
        })
        .collect()
}
