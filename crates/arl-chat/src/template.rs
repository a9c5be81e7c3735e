//! A model's chat template (`chat_template.jinja`, or `chat_template` in
//! `tokenizer_config.json`) rendered with minijinja the way Hugging Face
//! `apply_chat_template` renders it with Jinja2. The one renderer of arl:
//! `arl-train` renders SFT demonstrations with it ([`ChatTemplate::assistant_spans`]),
//! `arl-rollout` its prompts and tool turns, `arl-serve` its
//! `/v1/chat/completions` prompts, so the three render the same bytes by
//! construction. A template is compiled once, when it is loaded.
//!
//! The differences that matter, and how they are bridged:
//! * HF compiles templates with `trim_blocks` and `lstrip_blocks` on.
//! * HF's `tojson` is `json.dumps(x, ensure_ascii=False)`: `", "` and `": "`
//!   separators, keys in insertion order, no HTML escaping. minijinja's
//!   built-in `tojson` is compact, sorts keys and escapes `<>&'`; it is
//!   replaced here (and minijinja is built with `preserve_order`).
//! * Python string methods (`.strip()`, `.startswith()`, `.split()` …) come
//!   from minijinja-contrib's `pycompat` callback.
//! * HF exposes `raise_exception(msg)`, `strftime_now(fmt)` and the special
//!   tokens (`bos_token`, `eos_token`, …) to the template.
use crate::tokenizer::Tokenizer;
use anyhow::{anyhow, Context, Result};
use minijinja::{Environment, Error as JinjaError, ErrorKind, Value as JValue};
use serde_json::Value;

/// A compiled chat template with the tokenizer's special tokens.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// Extra globals HF passes: `bos_token`, `eos_token`, `pad_token`, `unk_token`.
    specials: Vec<(&'static str, String)>,
    /// The end-of-turn text (`eos_token` of the config), e.g. `<|im_end|>`.
    pub eos_token: Option<String>,
}

/// Writes JSON the way Python's `json.dumps` does by default: `", "` between
/// items and `": "` between key and value.
struct PyFormatter;

impl serde_json::ser::Formatter for PyFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// `json.dumps(v, ensure_ascii=False)` (compact form with Python separators),
/// or with `indent` its pretty form.
pub fn py_json_dumps(v: &Value, indent: Option<usize>) -> String {
    let mut out = Vec::new();
    match indent {
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PyFormatter);
            serde::Serialize::serialize(v, &mut ser).expect("JSON values always serialise");
        }
        Some(n) => {
            let ind = vec![b' '; n];
            let fmt = serde_json::ser::PrettyFormatter::with_indent(&ind);
            let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
            serde::Serialize::serialize(v, &mut ser).expect("JSON values always serialise");
        }
    }
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

fn tojson(v: JValue, kwargs: minijinja::value::Kwargs) -> Result<JValue, JinjaError> {
    let indent: Option<usize> = kwargs.get("indent")?;
    // HF's signature also has ensure_ascii/separators/sort_keys; templates in
    // the wild only pass indent, so the others are accepted and ignored.
    for k in ["ensure_ascii", "separators", "sort_keys"] {
        let _: Option<JValue> = kwargs.get(k)?;
    }
    kwargs.assert_all_used()?;
    let j: Value = serde_json::to_value(&v).map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))?;
    // `safe` so that minijinja's auto-escaping (off here anyway) never touches it.
    Ok(JValue::from_safe_string(py_json_dumps(&j, indent)))
}

fn raise_exception(msg: String) -> Result<JValue, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
}

fn strftime_now(fmt: String) -> Result<JValue, JinjaError> {
    // Only templates that print today's date use this (Llama 3); UTC is what a
    // reproducible rollout wants anyway.
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let (y, m, d) = civil_from_days(days);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let out = fmt
        .replace("%Y", &format!("{y:04}"))
        .replace("%m", &format!("{m:02}"))
        .replace("%d", &format!("{d:02}"))
        .replace("%B", MONTHS[(m - 1) as usize])
        .replace("%b", &MONTHS[(m - 1) as usize][..3]);
    Ok(JValue::from(out))
}

/// Days since 1970-01-01 → (year, month, day); Howard Hinnant's `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

impl ChatTemplate {
    /// Compiles template `source`; `specials` are the tokenizer's special
    /// tokens by their config names (`eos_token` …).
    pub fn new(source: &str, specials: Vec<(&'static str, String)>) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .context("template syntax")?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned("chat", source.to_string()).context("compiling the chat template")?;
        let eos_token = specials.iter().find(|(k, _)| *k == "eos_token").map(|(_, v)| v.clone());
        Ok(ChatTemplate { env, specials, eos_token })
    }

    /// The template of a model directory: `chat_template` in its
    /// `tokenizer_config.json` (a string, or the list form with `tool_use` and
    /// `default` entries), else `chat_template.jinja` next to it (as
    /// transformers writes it since version 4.43).
    pub fn from_tokenizer(tok: &Tokenizer) -> Result<ChatTemplate> {
        let source = match tok.config.as_ref().and_then(|c| c.get("chat_template")) {
            Some(Value::String(s)) => s.clone(),
            // The list form: [{"name": "default", "template": …}, {"name": "tool_use", …}].
            Some(Value::Array(list)) => {
                let pick = |n: &str| list.iter().find(|t| t.get("name").and_then(Value::as_str) == Some(n));
                pick("tool_use")
                    .or_else(|| pick("default"))
                    .and_then(|t| t.get("template"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| anyhow!("`chat_template` list has no `default` entry"))?
                    .to_string()
            }
            _ => {
                // Newer HF checkpoints keep it in chat_template.jinja next to the config.
                let p = tok.dir.join("chat_template.jinja");
                std::fs::read_to_string(&p).map_err(|_| {
                    anyhow!(
                        "the model has no chat template (neither `chat_template` in `{0}/tokenizer_config.json` nor `{0}/chat_template.jinja`)",
                        tok.dir.display()
                    )
                })?
            }
        };
        let mut specials = Vec::new();
        for key in ["bos_token", "eos_token", "pad_token", "unk_token"] {
            if let Some(v) = tok.config_str(key) {
                specials.push((key, v));
            }
        }
        ChatTemplate::new(&source, specials)
    }

    /// Renders `messages` (OpenAI-style chat messages) with optional tool
    /// definitions (OpenAI tool objects) into prompt text.
    pub fn render(&self, messages: &[Value], tools: Option<&[Value]>, add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, tools, add_generation_prompt, &serde_json::Map::new())
    }

    /// [`ChatTemplate::render`] with extra template variables (OpenAI's
    /// `chat_template_kwargs`, e.g. Qwen3's `enable_thinking`), which may
    /// override the defaults.
    pub fn render_with(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
        add_generation_prompt: bool,
        extra: &serde_json::Map<String, Value>,
    ) -> Result<String> {
        let tmpl = self.env.get_template("chat").context("chat template")?;
        let mut ctx = serde_json::Map::new();
        ctx.insert("messages".into(), Value::Array(messages.to_vec()));
        match tools {
            Some(t) if !t.is_empty() => {
                ctx.insert("tools".into(), Value::Array(t.to_vec()));
            }
            // HF passes tools=None, which templates test with `if tools`.
            _ => {
                ctx.insert("tools".into(), Value::Null);
            }
        }
        ctx.insert("add_generation_prompt".into(), Value::Bool(add_generation_prompt));
        for (k, v) in &self.specials {
            ctx.insert((*k).into(), Value::String(v.clone()));
        }
        for (k, v) in extra {
            ctx.insert(k.clone(), v.clone());
        }
        let out = tmpl
            .render(JValue::from(minijinja::value::Serde(&ctx)))
            .map_err(|e| anyhow!("rendering the chat template: {e:#}"))?;
        Ok(out)
    }

    /// The full rendering of a demonstration and the byte spans of its
    /// assistant turns, for SFT (only they are trained). A turn's span is
    /// found by rendering the conversation up to it with the generation prompt
    /// and up to and including it: the difference is the turn's text. The span
    /// ends after the turn's last EOS (`<|im_end|>`), not on the newline after
    /// it, which the model never generates.
    pub fn assistant_spans(
        &self,
        messages: &[Value],
        tools: Option<&[Value]>,
    ) -> Result<(String, Vec<(usize, usize)>)> {
        let full = self.render(messages, tools, false)?;
        let mut spans = vec![];
        for (i, m) in messages.iter().enumerate() {
            if m.get("role").and_then(Value::as_str) != Some("assistant") {
                continue;
            }
            let before = self.render(&messages[..i], tools, true)?;
            let upto = self.render(&messages[..=i], tools, false)?;
            if !upto.starts_with(&before) || !full.starts_with(&upto) {
                anyhow::bail!("the chat template does not render message {i} as an extension of the ones before it");
            }
            let mut end = upto.len();
            if let Some(eos) = &self.eos_token {
                if let Some(p) = upto[before.len()..].rfind(eos.as_str()) {
                    end = before.len() + p + eos.len();
                }
            }
            spans.push((before.len(), end));
        }
        Ok((full, spans))
    }

    /// The text the template puts after an assistant turn that ends with the
    /// end-of-turn token when tool results follow, up to and including the
    /// next generation prompt: for Qwen,
    /// `\n<|im_start|>user\n<tool_response>\n…\n</tool_response><|im_end|>\n<|im_start|>assistant\n`.
    /// Derived from the template itself, so any Hermes-style template works.
    pub fn tool_turn(&self, tools: Option<&[Value]>, results: &[String]) -> Result<String> {
        const SENTINEL: &str = "\u{1}ARL-ASSISTANT-TURN\u{1}";
        let eos = self.eos_token.as_deref().ok_or_else(|| anyhow!("tokenizer_config.json has no `eos_token`"))?;
        let mut msgs = vec![
            serde_json::json!({"role": "user", "content": "x"}),
            serde_json::json!({"role": "assistant", "content": SENTINEL}),
        ];
        for r in results {
            msgs.push(serde_json::json!({"role": "tool", "content": r}));
        }
        let text = self.render(&msgs, tools, true)?;
        let marker = format!("{SENTINEL}{eos}");
        let at = text
            .find(&marker)
            .ok_or_else(|| anyhow!("the chat template does not end an assistant turn with `{eos}`"))?;
        Ok(text[at + marker.len()..].to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn py_json_matches_python_dumps() {
        let v = json!({"b": 1, "a": [1, 2.5, "x<y>&'\"\n"], "é": null, "t": true});
        assert_eq!(py_json_dumps(&v, None), r#"{"b": 1, "a": [1, 2.5, "x<y>&'\"\n"], "é": null, "t": true}"#);
        assert_eq!(py_json_dumps(&json!({"a": [1]}), Some(2)), "{\n  \"a\": [\n    1\n  ]\n}");
    }

    #[test]
    fn trim_blocks_pycompat_and_tojson() {
        let t = ChatTemplate::new(
            "{% for m in messages %}\n  {{ m.content.strip().upper() }}|{{ m | tojson }}\n{% endfor %}{{ eos_token }}\n",
            vec![("eos_token", "</s>".into())],
        )
        .unwrap();
        let out = t.render(&[json!({"role": "user", "content": " hi "})], None, false).unwrap();
        assert_eq!(out, "  HI|{\"role\": \"user\", \"content\": \" hi \"}\n</s>");
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_454), (2026, 1, 1));
    }

    #[test]
    fn qwen_tool_turns_and_spans() {
        let r =
            ChatTemplate::new(crate::tokenizer_build::CHAT_TEMPLATE, vec![("eos_token", "<|im_end|>".into())]).unwrap();
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
        let sys = r.render(&msgs[..1], tools.as_array().map(Vec::as_slice), true).unwrap();
        assert!(sys.starts_with("<|im_start|>system\n# Tools\n"), "{sys}");
        assert!(sys.contains("<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"calc\"}}\n</tools>"));
        assert!(sys.ends_with("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"));
    }
}
