//! A small character-level tokenizer for tests and the demo, built through
//! the HF `tokenizers` crate (`arl-train make-tokenizer`).
//!
//! Ids 0–127 are ASCII code points (so a token id *is* the byte of a printable
//! character or newline/tab; the other control codes are unused placeholders
//! and id 0 is `<unk>`), then the ChatML specials as Qwen has them:
//! `<|endoftext|>`, `<|im_start|>`, `<|im_end|>` are special tokens;
//! `<tool_call>`, `</tool_call>`, `<tool_response>`, `</tool_response>`,
//! `<think>`, `</think>` are added, non-special tokens (they survive
//! `skip_special_tokens` decoding, as in Qwen's tokenizer).
//!
//! Beside it, chat templates for test-double model directories
//! ([`QWEN25_TEMPLATE`]).
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::Path;

/// Specials (special=true), in id order from 128.
pub const SPECIAL: &[&str] = &["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
/// Added non-special tokens, after the specials.
pub const ADDED: &[&str] =
    &["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"];

/// Number of ids the tokenizer uses (a model's `vocab_size` must be at least this).
pub fn vocab_len() -> usize {
    128 + SPECIAL.len() + ADDED.len()
}

// The templates are assembled from a system part and the shared message part.
macro_rules! qwen_system {
    () => {
        r##"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
"##
    };
}

macro_rules! compact_system {
    () => {
        r##"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] + '\n\n' }}
    {%- endif %}
    {{- 'Tools: ' }}
    {%- for tool in tools %}
        {%- if tool.function is defined %}
            {{- tool.function.name }}
        {%- else %}
            {{- tool.name }}
        {%- endif %}
        {%- if not loop.last %}
            {{- ', ' }}
        {%- endif %}
    {%- endfor %}
    {{- '<|im_end|>\n' }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
"##
    };
}

macro_rules! chat_body {
    () => {
        r##"{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content %}
            {{- message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {%- if not loop.first or message.content %}
                {{- '\n' }}
            {%- endif %}
            {{- '<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"##
    };
}

/// ChatML with the Qwen2.5 tool-call convention (docs/reference/protocols.md §5.2):
/// tool signatures in the system turn, `<tool_call>` JSON in assistant turns
/// (string arguments inserted as-is), consecutive tool results merged into one
/// user turn of `<tool_response>` blocks. No default system prompt (as Qwen3),
/// which keeps character-level sequences short.
pub const CHAT_TEMPLATE: &str = concat!(qwen_system!(), chat_body!());

/// The same template with a one-line tool header (`Tools: calculator, python`)
/// instead of Qwen's ~800-character instructions and JSON signatures: calls
/// and results keep the Qwen convention (`<tool_call>` JSON, `<tool_response>`
/// in a user turn). For models trained from scratch on a character-level
/// vocabulary (the demo), where the long header would be most of every
/// sequence and of the compute, and carries nothing such a model can read.
pub const COMPACT_CHAT_TEMPLATE: &str = concat!(compact_system!(), chat_body!());

/// A Qwen2.5-style template (the Qwen2.5-Instruct template's structure: tools
/// in the system turn, `<tool_call>` blocks, tool turns merged into one user turn),
/// for test-double model directories (`arl-testkit`'s `rollout_kit` re-exports it).
pub const QWEN25_TEMPLATE: &str = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

fn token_name(i: u32) -> String {
    match i {
        0 => "<unk>".to_string(),
        9 | 10 | 32..=126 => char::from_u32(i).expect("ascii").to_string(),
        _ => format!("<|ascii_{i}|>"),
    }
}

/// A byte-level BPE `tokenizer.json` (Qwen's kind, without merges): ids 0-255
/// the 256 bytes' characters of GPT-2's alphabet ([`crate::tokenizer::byte_level_chars`]),
/// then `extra` tokens from id 256 on, then the `added` ones `(id, content,
/// special)`. For test-double model directories.
pub fn byte_level_bpe_json(extra: &[&str], added: &[(u32, &str, bool)]) -> Value {
    let mut vocab = serde_json::Map::new();
    for (i, c) in crate::tokenizer::byte_level_chars().iter().enumerate() {
        vocab.insert(c.to_string(), json!(i));
    }
    for (i, t) in extra.iter().enumerate() {
        vocab.insert(t.to_string(), json!(256 + i));
    }
    let added: Vec<Value> = added
        .iter()
        .map(|(id, content, special)| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": special})
        })
        .collect();
    json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": vocab, "merges": []}
    })
}

/// The `tokenizer.json` text, checked by loading it through `tokenizers`.
pub fn tokenizer_json() -> Result<String> {
    let mut vocab = serde_json::Map::new();
    for i in 0..128u32 {
        vocab.insert(token_name(i), i.into());
    }
    let mut added = vec![];
    for (k, t) in SPECIAL.iter().chain(ADDED).enumerate() {
        let id = 128 + k as u32;
        vocab.insert(t.to_string(), id.into());
        added.push(json!({"id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": false, "special": k < SPECIAL.len()}));
    }
    let tok = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        // One piece per character; `[\s\S]` rather than a dotall flag so
        // both regex engines (onig in Python, fancy-regex here) read it alike.
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[\\s\\S]"}, "behavior": "Isolated", "invert": false},
        "post_processor": null,
        "decoder": {"type": "Fuse"},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    });
    let text = serde_json::to_string(&tok)?;
    let t: tokenizers::Tokenizer = text.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    t.to_string(true).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Which chat template `make-tokenizer` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Template {
    /// Qwen2.5's tool header: instructions and every tool's JSON signature.
    #[default]
    Qwen,
    /// One line naming the tools; calls and results as Qwen writes them.
    Compact,
}

impl Template {
    pub fn source(self) -> &'static str {
        match self {
            Template::Qwen => CHAT_TEMPLATE,
            Template::Compact => COMPACT_CHAT_TEMPLATE,
        }
    }
}

/// `tokenizer_config.json`: eos `<|im_end|>`, pad `<|endoftext|>`, the chat template.
pub fn tokenizer_config(template: Template) -> Value {
    let mut decoder = serde_json::Map::new();
    for (k, t) in SPECIAL.iter().chain(ADDED).enumerate() {
        decoder.insert(
            (128 + k).to_string(),
            json!({"content": t, "lstrip": false, "normalized": false, "rstrip": false,
                   "single_word": false, "special": k < SPECIAL.len()}),
        );
    }
    json!({
        "added_tokens_decoder": decoder,
        "additional_special_tokens": SPECIAL[1..],
        "bos_token": null,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": "<unk>",
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": false,
        "errors": "replace",
        "split_special_tokens": false,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": template.source(),
    })
}

/// Writes `tokenizer.json` and `tokenizer_config.json` into `dir`.
pub fn write(dir: &Path, template: Template) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let tok = tokenizer_json()?;
    std::fs::write(dir.join("tokenizer.json"), tok + "\n").context("writing tokenizer.json")?;
    let cfg = serde_json::to_string_pretty(&tokenizer_config(template))? + "\n";
    std::fs::write(dir.join("tokenizer_config.json"), cfg).context("writing tokenizer_config.json")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_level_ids_and_added_tokens() {
        let text = tokenizer_json().unwrap();
        let t: tokenizers::Tokenizer = text.parse().unwrap();
        let enc = t.encode("<|im_start|>hi\n<tool_call>{}</tool_call><|im_end|>", false).unwrap();
        let mut want = vec![129u32, 104, 105, 10, 131, 123, 125, 132, 130];
        assert_eq!(enc.get_ids(), want.as_slice());
        // Added non-special tokens survive skip_special_tokens; specials do not.
        assert_eq!(t.decode(&want, true).unwrap(), "hi\n<tool_call>{}</tool_call>");
        want.insert(1, 0);
        assert_eq!(t.decode(&want[..3], false).unwrap(), "<|im_start|><unk>h");
        assert_eq!(t.get_vocab_size(true), vocab_len());
    }
}
