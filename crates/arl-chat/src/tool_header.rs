//! Tool definitions for models whose chat template has no tool section
//! (SmolLM2's, and most templates that predate tool calling): the template
//! renders a conversation the same with and without `tools`, so the model
//! would never see them. For such a template the definitions go into the
//! system message instead, as a *tool header*: a small template (minijinja,
//! with the chat templates' syntax and `tojson`) given `tools` (the OpenAI
//! tool objects), `format` (how to call a tool in the chosen
//! `--tool-call-parser` format, with an example) and `parser` (its name).
//! The header is appended to the conversation's system message after a blank
//! line, or becomes the first message when there is none (the template's own
//! default system message, if it has one, is then not rendered, as with any
//! system message). Earlier assistant calls (`tool_calls`) are written into
//! the assistant's text in the same format, since such a template ignores
//! them too. Rollout and serve both render through [`ToolPrompt`], so they
//! show a model the same prompt.
//!
//! `--tool-header-mode` (`$ARL_TOOL_HEADER_MODE`): `auto` (the default) uses
//! the header only when the template ignores tools; `on` always (the
//! template is then not given `tools`); `off` never. `--tool-header FILE`
//! replaces [`DEFAULT_HEADER`].
use crate::template::ChatTemplate;
use crate::toolcall::Parser;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::borrow::Cow;

/// The tool header used unless `--tool-header FILE` gives another.
pub const DEFAULT_HEADER: &str = "\
You can call tools. Each tool is described by one JSON object per line:
{% for tool in tools %}
{{ tool | tojson }}
{% endfor %}
{{ format }}";

/// The `--help` text of `--tool-header`, the same in every binary.
pub const HEADER_HELP: &str = "Tool header template (minijinja, the chat templates' syntax) for a model whose chat \
template has no tool section: rendered with `tools` (the OpenAI tool objects), `format` (how to call a tool in the \
`--tool-call-parser` format, with an example) and `parser` (its name), and put into the system message; default: \
the tools as JSON, one per line, then `format`";

/// The `--help` text of `--tool-header-mode`, the same in every binary.
pub const MODE_HELP: &str = "When tool definitions go into the system message as a tool header (`--tool-header`): \
`auto` when the chat template renders the same with and without tools (it has no tool section), `on` always (the \
template is not given the tools), `off` never";

/// When the tool header is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum HeaderMode {
    /// When the chat template ignores `tools`.
    #[default]
    Auto,
    /// Always, instead of the template's own tool section.
    On,
    /// Never.
    Off,
}

/// Whether `template` shows tool definitions: a one-message conversation
/// rendered with and without a tool differs. A template that fails with a
/// tool but not without one does not show them either.
pub fn template_shows_tools(template: &ChatTemplate) -> bool {
    let msgs = [json!({"role": "user", "content": "Hello"})];
    let tool = [json!({"type": "function", "function": {
        "name": "arl_probe_tool",
        "description": "Probe whether the template shows tools.",
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
    }})];
    match (template.render(&msgs, None, true), template.render(&msgs, Some(&tool), true)) {
        (Ok(without), Ok(with)) => without != with,
        (Err(_), Ok(_)) => true,
        (_, Err(_)) => false,
    }
}

/// How tools reach the model: through the chat template, or through a tool
/// header in the system message.
pub struct ToolPrompt {
    pub parser: Parser,
    /// The compiled header template (`DEFAULT_HEADER` or `--tool-header`).
    header: ChatTemplate,
    /// Whether the header is used (decided once, from the mode and the template).
    uses_header: bool,
}

impl ToolPrompt {
    /// Decides, for `template`, whether tools go into a header (`mode`), and
    /// compiles the header `source` (default: [`DEFAULT_HEADER`]).
    pub fn new(template: &ChatTemplate, parser: Parser, source: Option<&str>, mode: HeaderMode) -> Result<ToolPrompt> {
        let header = ChatTemplate::new(source.unwrap_or(DEFAULT_HEADER), Vec::new()).context("the tool header")?;
        let uses_header = match mode {
            HeaderMode::On => true,
            HeaderMode::Off => false,
            HeaderMode::Auto => !template_shows_tools(template),
        };
        let p = ToolPrompt { parser, header, uses_header };
        // A header that cannot render fails now, not on the first request.
        if p.uses_header {
            let probe = [json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}})];
            p.header_text(&probe)?;
        }
        Ok(p)
    }

    /// Whether tool definitions go into the system message.
    pub fn uses_header(&self) -> bool {
        self.uses_header
    }

    /// The header for `tools`.
    pub fn header_text(&self, tools: &[Value]) -> Result<String> {
        let mut extra = serde_json::Map::new();
        extra.insert("format".into(), Value::String(self.parser.instructions()));
        extra.insert("parser".into(), Value::String(self.parser.name().into()));
        let text = self.header.render_with(&[], Some(tools), false, &extra).context("rendering the tool header")?;
        Ok(text.trim_end().to_string())
    }

    /// The messages and tools to give the chat template: unchanged when the
    /// template shows tools itself; otherwise the header merged into the
    /// system message (when there are tools), assistant `tool_calls` written
    /// into their text in the parser's format, and no `tools`.
    pub fn prepare<'a>(
        &self,
        messages: &'a [Value],
        tools: Option<&'a [Value]>,
    ) -> Result<(Cow<'a, [Value]>, Option<&'a [Value]>)> {
        if !self.uses_header {
            return Ok((Cow::Borrowed(messages), tools));
        }
        let mut msgs: Vec<Value> = messages.iter().map(|m| self.calls_as_text(m)).collect();
        if let Some(tools) = tools.filter(|t| !t.is_empty()) {
            let header = self.header_text(tools)?;
            match msgs.first_mut().filter(|m| m.get("role").and_then(Value::as_str) == Some("system")) {
                Some(sys) => {
                    let content = match sys.get("content") {
                        Some(Value::String(s)) if !s.is_empty() => Value::String(format!("{s}\n\n{header}")),
                        Some(Value::Array(parts)) => {
                            let mut parts = parts.clone();
                            parts.push(json!({"type": "text", "text": format!("\n\n{header}")}));
                            Value::Array(parts)
                        }
                        _ => Value::String(header),
                    };
                    sys["content"] = content;
                }
                None => msgs.insert(0, json!({"role": "system", "content": header})),
            }
        }
        Ok((Cow::Owned(msgs), None))
    }

    /// An assistant message with OpenAI `tool_calls`, its calls appended to
    /// its text as the model writes them; other messages as they are.
    fn calls_as_text(&self, m: &Value) -> Value {
        let Some(calls) = m.get("tool_calls").and_then(Value::as_array).filter(|c| !c.is_empty()) else {
            return m.clone();
        };
        let calls: Vec<(String, Value)> = calls
            .iter()
            .map(|c| {
                let f = c.get("function").unwrap_or(c);
                let name = f.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                let args = match f.get("arguments") {
                    // OpenAI sends arguments as JSON text.
                    Some(Value::String(s)) => serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone())),
                    Some(v) => v.clone(),
                    None => json!({}),
                };
                (name, args)
            })
            .collect();
        let written = self.parser.format_calls(&calls);
        let mut out = m.clone();
        let text = match m.get("content").and_then(Value::as_str).map(str::trim_end) {
            Some(c) if !c.is_empty() => format!("{c}\n{written}"),
            _ => written,
        };
        out["content"] = Value::String(text);
        if let Some(o) = out.as_object_mut() {
            o.remove("tool_calls");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SmolLM2-135M-Instruct's chat template: ChatML, no tool section.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    fn tools() -> Vec<Value> {
        vec![
            json!({"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic.",
                "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}}),
            json!({"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}),
        ]
    }

    fn render(p: &ToolPrompt, t: &ChatTemplate, msgs: &[Value], tools: &[Value]) -> String {
        let (m, tl) = p.prepare(msgs, Some(tools)).unwrap();
        t.render(&m, tl, true).unwrap()
    }

    #[test]
    fn header_for_a_template_without_tools() {
        let t = ChatTemplate::new(SMOLLM2, vec![("eos_token", "<|im_end|>".into())]).unwrap();
        assert!(!template_shows_tools(&t));
        let p = ToolPrompt::new(&t, Parser::Llama3, None, HeaderMode::Auto).unwrap();
        assert!(p.uses_header());
        let user = [json!({"role": "user", "content": "What is 347*29?"})];
        let out = render(&p, &t, &user, &tools());
        let want_head = "<|im_start|>system\nYou can call tools. Each tool is described by one JSON object per line:\n\
            {\"type\": \"function\", \"function\": {\"name\": \"calculator\", \"description\": \"Evaluate arithmetic.\", \
            \"parameters\": {\"type\": \"object\", \"properties\": {\"expression\": {\"type\": \"string\"}}}}}\n\
            {\"type\": \"function\", \"function\": {\"name\": \"python\", \"parameters\": {\"type\": \"object\"}}}\n\
            To call a tool, answer with only a JSON object";
        assert!(out.starts_with(want_head), "{out}");
        assert!(
            out.contains("{\"name\": \"TOOL_NAME\", \"parameters\": {\"ARGUMENT\": \"VALUE\"}}<|im_end|>\n"),
            "{out}"
        );
        assert!(out.ends_with("<|im_end|>\n<|im_start|>user\nWhat is 347*29?<|im_end|>\n<|im_start|>assistant\n"));
        // The template's default system message gives way to the header.
        assert!(!out.contains("SmolLM"), "{out}");
        // The format follows the parser.
        let q = ToolPrompt::new(&t, Parser::Qwen25, None, HeaderMode::Auto).unwrap();
        assert!(render(&q, &t, &user, &tools()).contains("<tool_call>\n{\"name\": \"TOOL_NAME\", \"arguments\""));

        // An existing system message keeps its text, the header after a blank line.
        let sys = [json!({"role": "system", "content": "Be brief."}), user[0].clone()];
        let out = render(&p, &t, &sys, &tools());
        assert!(out.starts_with("<|im_start|>system\nBe brief.\n\nYou can call tools."), "{out}");
        assert_eq!(out.matches("<|im_start|>system").count(), 1);

        // No tools: the conversation renders as it would without the header.
        let (m, tl) = p.prepare(&user, None).unwrap();
        assert_eq!(t.render(&m, tl, true).unwrap(), t.render(&user, None, true).unwrap());

        // Earlier calls are written into the assistant's text in the parser's format.
        let hist = [
            user[0].clone(),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "calculator", "arguments": "{\"expression\": \"347*29\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "10063"}),
        ];
        let out = render(&p, &t, &hist, &tools());
        assert!(out.contains(
            "<|im_start|>assistant\n{\"name\": \"calculator\", \"parameters\": {\"expression\": \"347*29\"}}<|im_end|>\n\
             <|im_start|>tool\n10063<|im_end|>\n<|im_start|>assistant\n"
        ), "{out}");
    }

    #[test]
    fn no_header_for_qwen_unless_forced() {
        let t =
            ChatTemplate::new(crate::tokenizer_build::CHAT_TEMPLATE, vec![("eos_token", "<|im_end|>".into())]).unwrap();
        assert!(template_shows_tools(&t));
        let p = ToolPrompt::new(&t, Parser::Qwen25, None, HeaderMode::Auto).unwrap();
        assert!(!p.uses_header());
        let user = [json!({"role": "user", "content": "2+2?"})];
        let out = render(&p, &t, &user, &tools());
        assert_eq!(out, t.render(&user, Some(&tools()), true).unwrap());
        assert!(!out.contains("You can call tools"));
        // Forced on: the header, and the template's tool section is not rendered.
        let on = ToolPrompt::new(&t, Parser::Qwen25, None, HeaderMode::On).unwrap();
        let out = render(&on, &t, &user, &tools());
        assert!(out.contains("You can call tools") && !out.contains("# Tools"), "{out}");
        // Forced off on a template without tools: the model sees none.
        let s = ChatTemplate::new(SMOLLM2, vec![]).unwrap();
        let off = ToolPrompt::new(&s, Parser::Llama3, None, HeaderMode::Off).unwrap();
        assert!(!render(&off, &s, &user, &tools()).contains("calculator"));
    }

    #[test]
    fn custom_header() {
        let t = ChatTemplate::new(SMOLLM2, vec![]).unwrap();
        let src = "Tools ({{ parser }}): {% for t in tools %}{{ t.function.name }} {% endfor %}| {{ format[:7] }}";
        let p = ToolPrompt::new(&t, Parser::Mistral, Some(src), HeaderMode::Auto).unwrap();
        assert_eq!(p.header_text(&tools()).unwrap(), "Tools (mistral): calculator python | To call");
        assert!(ToolPrompt::new(&t, Parser::Qwen25, Some("{% for %}"), HeaderMode::Auto).is_err());
        let err = ToolPrompt::new(&t, Parser::Qwen25, Some("{{ raise_exception('no') }}"), HeaderMode::Auto);
        assert!(format!("{:#}", err.err().unwrap()).contains("no"));
    }
}
