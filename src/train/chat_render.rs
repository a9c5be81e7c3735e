//! Renders SFT demonstrations (`messages`) with the model's chat template and
//! marks the assistant turns, so only they are trained.
//!
//! The template runs in minijinja with transformers' settings (trim_blocks,
//! lstrip_blocks, Python string methods, a `tojson` that writes like
//! Python's `json.dumps`). An assistant turn's span is found by rendering the
//! conversation up to it with the generation prompt and up to and including
//! it: the difference is the turn's text. The span ends after the turn's last
//! EOS (`<|im_end|>`), not on the newline after it, which the model never
//! generates. The `arl-rollout` side has its own renderer in `src/chat.rs`.
use crate::tokenizer::Tokenizer;
use anyhow::{anyhow, bail, Result};
use minijinja::value::Serde;
use minijinja::{Environment, Value as JValue};
use serde_json::Value;

/// Python's `json.dumps(v, ensure_ascii=False)`, what HF templates' `tojson` prints
/// (one implementation: [`crate::chat::py_json_dumps`]).
pub fn py_json(v: &Value) -> String {
    crate::chat::py_json_dumps(v, None)
}

pub struct ChatRenderer {
    env: Environment<'static>,
    eos: Option<String>,
}

/// One rendered demonstration: ids, and which of them are trained.
pub struct Rendered {
    pub ids: Vec<u32>,
    pub trained: Vec<bool>,
}

impl ChatRenderer {
    pub fn new(template: &str, eos: Option<String>) -> Result<ChatRenderer> {
        let mut env = Environment::new();
        // transformers renders with trim_blocks and lstrip_blocks.
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| anyhow!("{e}"))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", |v: JValue| -> Result<String, minijinja::Error> {
            let j: Value = serde_json::to_value(&v)
                .map_err(|e| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string()))?;
            Ok(py_json(&j))
        });
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned("chat", template.to_string()).map_err(|e| anyhow!("chat template: {e}"))?;
        Ok(ChatRenderer { env, eos })
    }

    /// The renderer of a model directory's `tokenizer_config.json`.
    pub fn from_tokenizer(tok: &Tokenizer) -> Result<ChatRenderer> {
        let Some(t) = tok.config_str("chat_template") else {
            bail!("`{}/tokenizer_config.json` has no `chat_template`", tok.dir.display());
        };
        ChatRenderer::new(&t, tok.config_str("eos_token"))
    }

    pub fn render(&self, messages: &[Value], tools: Option<&Value>, add_generation_prompt: bool) -> Result<String> {
        let t = self.env.get_template("chat").map_err(|e| anyhow!("{e}"))?;
        let ctx = minijinja::context! {
            messages => JValue::from(Serde(messages)),
            tools => tools.map(|t| JValue::from(Serde(t))),
            add_generation_prompt => add_generation_prompt,
        };
        t.render(ctx).map_err(|e| anyhow!("rendering the chat template: {e}"))
    }

    /// Byte spans of the assistant turns in the full rendering.
    pub fn assistant_spans(&self, messages: &[Value], tools: Option<&Value>) -> Result<(String, Vec<(usize, usize)>)> {
        let full = self.render(messages, tools, false)?;
        let mut spans = vec![];
        for (i, m) in messages.iter().enumerate() {
            if m.get("role").and_then(Value::as_str) != Some("assistant") {
                continue;
            }
            let before = self.render(&messages[..i], tools, true)?;
            let upto = self.render(&messages[..=i], tools, false)?;
            if !upto.starts_with(&before) || !full.starts_with(&upto) {
                bail!("the chat template does not render message {i} as an extension of the ones before it");
            }
            let mut end = upto.len();
            if let Some(eos) = &self.eos {
                if let Some(p) = upto[before.len()..].rfind(eos.as_str()) {
                    end = before.len() + p + eos.len();
                }
            }
            spans.push((before.len(), end));
        }
        Ok((full, spans))
    }

    /// Renders and tokenizes a demonstration; a token is trained when it
    /// starts inside an assistant span.
    pub fn tokenize(&self, tok: &Tokenizer, messages: &[Value], tools: Option<&Value>) -> Result<Rendered> {
        let (text, spans) = self.assistant_spans(messages, tools)?;
        if spans.is_empty() {
            bail!("no assistant message to train on");
        }
        let enc = tok.inner.encode(text.as_str(), false).map_err(|e| anyhow!("tokenizing: {e}"))?;
        let trained =
            enc.get_offsets().iter().map(|&(s, e)| e > s && spans.iter().any(|&(a, b)| s >= a && s < b)).collect();
        Ok(Rendered { ids: enc.get_ids().to_vec(), trained })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn python_style_json() {
        assert_eq!(py_json(&json!({"a": [1, "x<y"], "b": {"c": null}})), r#"{"a": [1, "x<y"], "b": {"c": null}}"#);
    }

    #[test]
    fn qwen_tool_turns_and_spans() {
        let r = ChatRenderer::new(crate::tokenizer_build::CHAT_TEMPLATE, Some("<|im_end|>".into())).unwrap();
        let msgs = vec![
            json!({"role": "user", "content": "2+2?"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"e": "2+2"}}}]}),
            json!({"role": "tool", "content": "4"}),
            json!({"role": "tool", "content": "ok"}),
            json!({"role": "assistant", "content": "4"}),
        ];
        let (text, spans) = r.assistant_spans(&msgs, None).unwrap();
        assert_eq!(
            text,
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"e\": \"2+2\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n4\n</tool_response>\n<tool_response>\nok\n</tool_response><|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
        );
        let got: Vec<&str> = spans.iter().map(|&(a, b)| &text[a..b]).collect();
        assert_eq!(
            got,
            vec![
                "<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"e\": \"2+2\"}}\n</tool_call><|im_end|>",
                "4<|im_end|>"
            ]
        );
        let tools = json!([{"type": "function", "function": {"name": "calc"}}]);
        let sys = r.render(&msgs[..1], Some(&tools), true).unwrap();
        assert!(sys.starts_with("<|im_start|>system\n# Tools\n"), "{sys}");
        assert!(sys.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"calc\"}}\n</tools>"));
        assert!(sys.ends_with("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"));
    }
}
