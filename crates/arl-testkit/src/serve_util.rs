//! Helpers for the `arl-serve` / `arl-sync` tests: a server process that is
//! killed on drop ([`Daemon`]), a byte-level tokenizer for test-double model directories,
//! and small HTTP calls.
#![allow(dead_code)]
use crate::daemon::Daemon;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A running `arl-serve` (a [`Daemon`]: killed and reaped when dropped).
pub struct Server {
    pub daemon: Daemon,
    pub url: String,
}

impl Server {
    /// Starts `arl-serve ARGS --port 0` and waits for its "listening on" line.
    /// The tests compare numbers (log-probs, greedy tokens) with float32
    /// references, so the weights are float32 unless ARGS say `--dtype`:
    /// what `--dtype auto` picks may differ from one CPU to the next.
    pub fn start(args: &[&str]) -> Server {
        let mut cmd = Command::new(super::common::exe("arl-serve"));
        cmd.args(args).args(["--port", "0"]);
        if !args.contains(&"--dtype") {
            cmd.args(["--dtype", "float32"]);
        }
        let (daemon, url) = Daemon::start("arl-serve", &mut cmd, "arl-serve: listening on ", Duration::from_secs(120));
        Server { daemon, url }
    }

    pub fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        post(&format!("{}{path}", self.url), body)
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        let r = client().get(format!("{}{path}", self.url)).send().expect("GET");
        let code = r.status().as_u16();
        let text = r.text().unwrap_or_default();
        (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    pub fn generate(&self, body: Value) -> Value {
        let (code, v) = self.post("/generate", &body);
        assert_eq!(code, 200, "{v}");
        v
    }
}

pub fn client() -> reqwest::blocking::Client {
    arl_http::client::blocking_builder().timeout(Duration::from_secs(300)).build().expect("client")
}

pub fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = client().post(url).json(body).send().expect("POST");
    let code = r.status().as_u16();
    let text = r.text().unwrap_or_default();
    (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// GPT-2's byte → printable-char table used by byte-level BPE.
fn bytes_to_unicode() -> Vec<char> {
    let mut bs: Vec<u32> = (b'!' as u32..=b'~' as u32).chain(0xA1..=0xAC).chain(0xAE..=0xFF).collect();
    let mut cs = bs.clone();
    let mut n = 0;
    for b in 0..256u32 {
        if !bs.contains(&b) {
            bs.push(b);
            cs.push(256 + n);
            n += 1;
        }
    }
    let mut table = vec![' '; 256];
    for (b, c) in bs.iter().zip(cs) {
        table[*b as usize] = char::from_u32(c).expect("char");
    }
    table
}

/// Writes a test-double model directory: a byte-level tokenizer (256 bytes, no
/// merges, Qwen's special tokens), a Qwen-style chat template, `config.json`
/// with `eos_token_id` = `<|im_end|>`, and an empty `model.safetensors`
/// (enough for `--scripted` and for `arl-sync`'s completeness check).
pub fn scripted_model_dir(dir: &Path) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let mut vocab = serde_json::Map::new();
    for (i, c) in bytes_to_unicode().into_iter().enumerate() {
        vocab.insert(c.to_string(), json!(i));
    }
    let added: Vec<Value> = [("<|endoftext|>", true), ("<|im_start|>", true), ("<|im_end|>", true), ("<tool_call>", false), ("</tool_call>", false)]
        .iter()
        .enumerate()
        .map(|(i, (t, special))| json!({"id": 256 + i, "content": t, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": special}))
        .collect();
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "vocab": vocab, "merges": []}
    });
    std::fs::write(dir.join("tokenizer.json"), tok.to_string()).expect("write");
    let template = concat!(
        "{%- if tools %}{{- '<|im_start|>system\\n# Tools\\n<tools>' }}{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}",
        "{{- '\\n</tools><|im_end|>\\n' }}{%- endif %}",
        "{%- for message in messages %}",
        "{%- if message.role == 'tool' %}{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}",
        "{%- elif message.role == 'assistant' and message.tool_calls %}{{- '<|im_start|>assistant\\n' + (message.content or '') }}",
        "{%- for tc in message.tool_calls %}{{- '<tool_call>\\n{\"name\": \"' + tc.function.name + '\", \"arguments\": ' + tc.function.arguments + '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}",
        "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}",
        "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    );
    std::fs::write(
        dir.join("tokenizer_config.json"),
        json!({"eos_token": "<|im_end|>", "chat_template": template}).to_string(),
    )
    .expect("write");
    std::fs::write(
        dir.join("config.json"),
        json!({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 261, "eos_token_id": 258, "max_position_embeddings": 1_000_000}).to_string(),
    )
    .expect("write");
    std::fs::write(dir.join("model.safetensors"), b"").expect("write");
}
