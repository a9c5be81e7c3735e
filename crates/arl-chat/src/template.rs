//! A model's chat template (`chat_template.jinja`, or `chat_template` in
//! `tokenizer_config.json`) rendered with minijinja the way Hugging Face
//! `apply_chat_template` renders it with Jinja2 (transformers 5, compared by
//! `tests/real_templates.rs` on Qwen3's and Qwen2.5's templates). The one renderer of arl:
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
//! * HF exposes `raise_exception(msg)`, `strftime_now(fmt)`, the named special
//!   tokens (`bos_token`, `eos_token`, …, and the names of
//!   `extra_special_tokens`) and `documents` (none) to the template, and
//!   copies a message's reasoning (`reasoning_content`, `thinking` or
//!   `reasoning`) to both `reasoning_content` and `thinking`.
//!
//! Where a model directory keeps its template, as transformers reads it:
//! `chat_template.jinja` (and named ones in `additional_chat_templates/`)
//! first, else `chat_template` in `tokenizer_config.json`, a string or a list
//! of `{"name", "template"}`. With several, `tool_use` renders requests with
//! tools when there is one, `default` the others.
use crate::tokenizer::Tokenizer;
use anyhow::{anyhow, bail, Context, Result};
use minijinja::{Environment, Error as JinjaError, ErrorKind, Value as JValue};
use serde_json::Value;

/// A compiled chat template with the tokenizer's special tokens.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The template names compiled in `env` (`chat` for a single template).
    names: Vec<String>,
    /// Extra globals HF passes: `bos_token`, `eos_token`, `pad_token`, `unk_token` …
    specials: Vec<(String, String)>,
    /// Variables every rendering gets (`--chat-template-kwargs`), under a
    /// call's own `extra`.
    kwargs: serde_json::Map<String, Value>,
    /// The end-of-turn text (`eos_token` of the config), e.g. `<|im_end|>`.
    pub eos_token: Option<String>,
}

/// The special-token names transformers passes to a template when set.
const SPECIAL_NAMES: &[&str] =
    &["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

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
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let mut j: Value =
        serde_json::to_value(&v).map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))?;
    if sort_keys == Some(true) {
        sort_json_keys(&mut j);
    }
    let mut out = match &separators {
        Some(sep) => match sep.as_slice() {
            [item, key] => py_json_dumps_with(&j, indent, item, key),
            _ => return Err(JinjaError::new(ErrorKind::InvalidOperation, "tojson: separators must be two strings")),
        },
        None => py_json_dumps(&j, indent),
    };
    if ensure_ascii == Some(true) {
        out = ascii_escaped(&out);
    }
    // `safe` so that minijinja's auto-escaping (off here anyway) never touches it.
    Ok(JValue::from_safe_string(out))
}

fn sort_json_keys(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = std::mem::take(m).into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (k, mut x) in entries {
                sort_json_keys(&mut x);
                m.insert(k, x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(sort_json_keys),
        _ => {}
    }
}

/// Python's `ensure_ascii`: every non-ASCII character as `\uXXXX` (UTF-16 units).
fn ascii_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// `json.dumps` with explicit `separators=(item, key)`; with `indent`, items
/// end their line after `item` with its trailing spaces removed, as Python does.
fn py_json_dumps_with(v: &Value, indent: Option<usize>, item: &str, key: &str) -> String {
    fn write(v: &Value, indent: Option<usize>, depth: usize, item: &str, key: &str, out: &mut String) {
        let nl = |out: &mut String, d: usize| {
            if let Some(n) = indent {
                out.push('\n');
                out.push_str(&" ".repeat(n * d));
            }
        };
        let item = if indent.is_some() { item.trim_end_matches(' ') } else { item };
        match v {
            Value::Array(a) if !a.is_empty() => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push_str(item);
                    }
                    nl(out, depth + 1);
                    write(x, indent, depth + 1, item, key, out);
                }
                nl(out, depth);
                out.push(']');
            }
            Value::Object(m) if !m.is_empty() => {
                out.push('{');
                for (i, (k, x)) in m.iter().enumerate() {
                    if i > 0 {
                        out.push_str(item);
                    }
                    nl(out, depth + 1);
                    out.push_str(&serde_json::to_string(k).expect("a string serialises"));
                    out.push_str(key);
                    write(x, indent, depth + 1, item, key, out);
                }
                nl(out, depth);
                out.push('}');
            }
            _ => out.push_str(&py_json_dumps(v, None)),
        }
    }
    let mut out = String::new();
    write(v, indent, 0, item, key, &mut out);
    out
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

/// A model directory's template source: one, or several by name.
enum Source {
    One(String),
    Named(Vec<(String, String)>),
}

impl ChatTemplate {
    /// Compiles template `source`; `specials` are the tokenizer's special
    /// tokens by their config names (`eos_token` …).
    pub fn new(source: &str, specials: Vec<(&'static str, String)>) -> Result<ChatTemplate> {
        let specials = specials.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        ChatTemplate::compile(vec![("chat".to_string(), source.to_string())], specials)
    }

    fn compile(sources: Vec<(String, String)>, specials: Vec<(String, String)>) -> Result<ChatTemplate> {
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
        let mut names = Vec::new();
        for (name, source) in sources {
            env.add_template_owned(name.clone(), source)
                .with_context(|| format!("compiling the chat template `{name}`"))?;
            names.push(name);
        }
        let eos_token = specials.iter().find(|(k, _)| k == "eos_token").map(|(_, v)| v.clone());
        Ok(ChatTemplate { env, names, specials, kwargs: serde_json::Map::new(), eos_token })
    }

    /// Variables every rendering gets (OpenAI's `chat_template_kwargs`, e.g.
    /// Qwen3's `{"enable_thinking": false}`), a call's own `extra` over them.
    pub fn with_kwargs(mut self, kwargs: serde_json::Map<String, Value>) -> ChatTemplate {
        self.kwargs = kwargs;
        self
    }

    /// The template of a model directory, found as transformers finds it:
    /// `chat_template.jinja` (with named ones in `additional_chat_templates/`),
    /// else `chat_template` in `tokenizer_config.json`, a string or the list
    /// form (`[{"name": "default", "template": …}, {"name": "tool_use", …}]`).
    /// The special tokens come from `tokenizer_config.json` (strings or
    /// `{"content": …}`), else `special_tokens_map.json`.
    pub fn from_tokenizer(tok: &Tokenizer) -> Result<ChatTemplate> {
        let dir = &tok.dir;
        let cfg_path = dir.join("tokenizer_config.json");
        let source = match template_files(dir)? {
            Some(s) => s,
            None => match tok.config.as_ref().and_then(|c| c.get("chat_template")) {
                Some(Value::String(s)) => Source::One(s.clone()),
                Some(Value::Array(list)) => {
                    let mut named = Vec::new();
                    for (i, t) in list.iter().enumerate() {
                        let field = |k: &str| t.get(k).and_then(Value::as_str).map(str::to_string);
                        let (Some(name), Some(template)) = (field("name"), field("template")) else {
                            bail!(
                                "`{}`: field `chat_template` item {i}: expected {{\"name\": …, \"template\": …}}",
                                cfg_path.display()
                            )
                        };
                        named.push((name, template));
                    }
                    Source::Named(named)
                }
                Some(Value::Null) | None => bail!(
                    "the model has no chat template (neither `{0}/chat_template.jinja` nor `chat_template` in `{0}/tokenizer_config.json`{1})",
                    dir.display(),
                    if tok.config.is_none() { ", which is absent" } else { "" }
                ),
                Some(other) => bail!(
                    "`{}`: field `chat_template`: expected a string or a list of named templates, got {}",
                    cfg_path.display(),
                    arl_core::record::json_type(other)
                ),
            },
        };
        let specials = special_tokens(tok)?;
        let sources = match source {
            Source::One(s) => vec![("chat".to_string(), s)],
            Source::Named(list) => list,
        };
        ChatTemplate::compile(sources, specials).with_context(|| format!("the chat template of `{}`", dir.display()))
    }

    /// The template a rendering uses: the only one, or by transformers' rule
    /// among named ones.
    fn pick(&self, tools: bool) -> Result<minijinja::Template<'_, '_>> {
        let name = match self.names.as_slice() {
            [one] => one.as_str(),
            names => {
                let has = |n: &str| names.iter().any(|x| x == n);
                if tools && has("tool_use") {
                    "tool_use"
                } else if has("default") {
                    "default"
                } else {
                    bail!("the model has several chat templates ({}) and none is named `default`", names.join(", "))
                }
            }
        };
        self.env.get_template(name).context("chat template")
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
        let tools = tools.filter(|t| !t.is_empty());
        let tmpl = self.pick(tools.is_some())?;
        let mut ctx = serde_json::Map::new();
        for (k, v) in &self.specials {
            ctx.insert(k.clone(), Value::String(v.clone()));
        }
        ctx.insert("messages".into(), Value::Array(messages.iter().map(alias_reasoning).collect()));
        // HF passes tools=None (which templates test with `if tools`) and documents=None.
        ctx.insert("tools".into(), tools.map_or(Value::Null, |t| Value::Array(t.to_vec())));
        ctx.insert("documents".into(), Value::Null);
        ctx.insert("add_generation_prompt".into(), Value::Bool(add_generation_prompt));
        for (k, v) in self.kwargs.iter().chain(extra) {
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

/// `chat_template.jinja` and `additional_chat_templates/NAME.jinja` of `dir`.
fn template_files(dir: &std::path::Path) -> Result<Option<Source>> {
    let read =
        |p: &std::path::Path| std::fs::read_to_string(p).with_context(|| format!("cannot read `{}`", p.display()));
    let mut named = Vec::new();
    let main = dir.join("chat_template.jinja");
    if main.is_file() {
        named.push(("default".to_string(), read(&main)?));
    }
    let extra = dir.join("additional_chat_templates");
    if extra.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(&extra)
            .with_context(|| format!("cannot read `{}`", extra.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jinja"))
            .collect();
        files.sort();
        for p in files {
            let name = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            named.push((name, read(&p)?));
        }
    }
    Ok(match named.len() {
        0 => None,
        1 if named[0].0 == "default" => Some(Source::One(named.remove(0).1)),
        _ => Some(Source::Named(named)),
    })
}

/// The named special tokens transformers passes to the template: each of
/// [`SPECIAL_NAMES`] and each name of `extra_special_tokens` (an object)
/// that `tokenizer_config.json` sets (a string or `{"content": …}`), else
/// `special_tokens_map.json`.
fn special_tokens(tok: &Tokenizer) -> Result<Vec<(String, String)>> {
    let map_path = tok.dir.join("special_tokens_map.json");
    let map: Option<Value> = match std::fs::read_to_string(&map_path) {
        Ok(text) => {
            Some(serde_json::from_str(&text).with_context(|| format!("`{}`: invalid JSON", map_path.display()))?)
        }
        Err(_) => None,
    };
    let text_of = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    };
    let mut names: Vec<String> = SPECIAL_NAMES.iter().map(|s| s.to_string()).collect();
    if let Some(Value::Object(extra)) = tok.config.as_ref().and_then(|c| c.get("extra_special_tokens")) {
        names.extend(extra.keys().cloned());
    }
    let mut out = Vec::new();
    for name in names {
        let from = |c: &Option<Value>| {
            c.as_ref()
                .and_then(|c| c.get(&name).or_else(|| c.pointer(&format!("/extra_special_tokens/{name}"))))
                .and_then(text_of)
        };
        if let Some(v) = from(&tok.config).or_else(|| map.as_ref().and_then(|m| m.get(&name)).and_then(text_of)) {
            out.push((name, v));
        }
    }
    Ok(out)
}

/// A message as transformers hands it to the template: its reasoning, under
/// any of the names it is sent with, also as `reasoning_content` and `thinking`.
fn alias_reasoning(m: &Value) -> Value {
    let Some(obj) = m.as_object() else { return m.clone() };
    let reasoning =
        ["reasoning_content", "thinking", "reasoning"].iter().find_map(|k| obj.get(*k).filter(|v| !v.is_null()));
    match reasoning {
        Some(r) => {
            // {"thinking": r, **message, "reasoning_content": r}: `thinking` keeps its place if the message has it.
            let mut out = serde_json::Map::new();
            out.insert("thinking".into(), r.clone());
            for (k, v) in obj {
                out.insert(k.clone(), v.clone());
            }
            out.insert("reasoning_content".into(), r.clone());
            Value::Object(out)
        }
        None => m.clone(),
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
    fn tojson_options_as_python_json_dumps() {
        // Python: json.dumps(v, sort_keys=True), separators=(",", ":"),
        // ensure_ascii=True, indent=2 with separators=(", ", ": ").
        let t = ChatTemplate::new(
            "{{ v | tojson(sort_keys=true) }}|{{ v | tojson(separators=[',', ':']) }}|{{ v | tojson(ensure_ascii=true) }}|{{ v | tojson(indent=2, separators=[', ', ': ']) }}",
            vec![],
        )
        .unwrap();
        let v = json!({"b": [1, {"d": 2, "c": "é😀"}], "a": {}});
        let out = t.render_with(&[], None, false, json!({"v": v}).as_object().unwrap()).unwrap();
        assert_eq!(
            out,
            concat!(
                r#"{"a": {}, "b": [1, {"c": "é😀", "d": 2}]}|{"b":[1,{"d":2,"c":"é😀"}],"a":{}}|"#,
                r#"{"b": [1, {"d": 2, "c": "\u00e9\ud83d\ude00"}], "a": {}}|"#,
                "{\n  \"b\": [\n    1,\n    {\n      \"d\": 2,\n      \"c\": \"é😀\"\n    }\n  ],\n  \"a\": {}\n}"
            )
        );
    }

    #[test]
    fn named_templates_reasoning_and_special_tokens_from_a_directory() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("tokenizer.json"),
            crate::tokenizer_build::byte_level_bpe_json(&[], &[(256, "<|im_end|>", true)]).to_string(),
        )
        .unwrap();
        let cfg = json!({"chat_template": [{"name": "default", "template": "D{{ eos_token }}{{ sep_token }}"},
                                           {"name": "tool_use", "template": "T{{ tools | length }}"}],
                         "eos_token": {"content": "<|im_end|>"}, "extra_special_tokens": {"image_token": "<img>"}});
        std::fs::write(d.path().join("tokenizer_config.json"), cfg.to_string()).unwrap();
        std::fs::write(d.path().join("special_tokens_map.json"), json!({"sep_token": "<sep>"}).to_string()).unwrap();
        let tok = Tokenizer::load(d.path()).unwrap();
        let t = ChatTemplate::from_tokenizer(&tok).unwrap();
        assert_eq!(t.render(&[], None, false).unwrap(), "D<|im_end|><sep>");
        assert_eq!(t.render(&[], Some(&[json!({})]), false).unwrap(), "T1");
        // chat_template.jinja wins over the config, as in transformers;
        // reasoning under any name reaches `reasoning_content` and `thinking`.
        std::fs::write(
            d.path().join("chat_template.jinja"),
            "{% for m in messages %}{{ m.reasoning_content }}/{{ m.thinking }}{% endfor %}{{ image_token }}",
        )
        .unwrap();
        let t = ChatTemplate::from_tokenizer(&tok).unwrap();
        let msgs = [json!({"role": "assistant", "content": "x", "reasoning": "r"})];
        assert_eq!(t.render(&msgs, None, false).unwrap(), "r/r<img>");
        // No template anywhere: said, naming both places.
        std::fs::remove_file(d.path().join("chat_template.jinja")).unwrap();
        std::fs::write(d.path().join("tokenizer_config.json"), json!({"eos_token": "<|im_end|>"}).to_string()).unwrap();
        let err = ChatTemplate::from_tokenizer(&Tokenizer::load(d.path()).unwrap()).err().unwrap().to_string();
        assert!(err.contains("chat_template.jinja") && err.contains("tokenizer_config.json"), "{err}");
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
