//! `/v1/chat/completions` for OpenAI-style agent harnesses: messages rendered
//! with the model's own chat template (`tokenizer_config.json`; tools in a
//! tool header when the template has no tool section, [`arl_chat::tool_header`]),
//! sampling mapped onto SGLang's parameters, and tool calls parsed in the
//! `--tool-call-parser` format, by default the Qwen/Hermes form
//! `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>` the way
//! SGLang's `qwen25` detector does (docs/reference/protocols.md §5).
use super::{parse_sampling, AppState, Item, ItemState};
use crate::scheduler::Finish;
use arl_chat::tokenizer::Tokenizer;
use arl_chat::toolcall::{Call, Parser};
use serde_json::{json, Map, Value};

/// What the response needs to know about the request.
pub struct ChatMeta {
    pub id: String,
    pub created: u64,
    pub parse_tools: bool,
    pub tool_names: Vec<String>,
    pub logprobs: bool,
    pub top_logprobs: usize,
    /// SSE `chat.completion.chunk` events instead of one response.
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with `usage` and no choices.
    pub include_usage: bool,
}

pub struct ChatRequest {
    pub items: Vec<Item>,
    pub meta: ChatMeta,
}

/// Python's `json.dumps(v, ensure_ascii=False)`, what HF templates' `tojson` prints
/// (one implementation: [`arl_chat::template::py_json_dumps`]).
pub fn py_json(v: &Value) -> String {
    arl_chat::template::py_json_dumps(v, None)
}

/// Renders `messages` (and `tools`) with the model's chat template, compiled
/// once when the server started ([`AppState::template`]), ending with the
/// generation prompt; tools as [`AppState::tool_prompt`] shows them.
pub fn render(
    st: &AppState,
    messages: &Value,
    tools: Option<&Value>,
    extra: &Map<String, Value>,
) -> Result<String, String> {
    let template = st.template.as_ref().map_err(Clone::clone)?;
    let prompt = st.tool_prompt.as_ref().map_err(Clone::clone)?;
    let messages = messages.as_array().map(Vec::as_slice).unwrap_or_default();
    let tools = tools.and_then(Value::as_array).map(Vec::as_slice);
    let (messages, tools) = prompt.prepare(messages, tools).map_err(|e| format!("{e:#}"))?;
    template.render_with(&messages, tools, true, extra).map_err(|e| format!("{e:#}"))
}

/// A parsed tool call: its name and its arguments as a JSON string.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// Splits a completion into the text before its first call (trimmed) and its
/// calls in `parser`'s format ([`arl_chat::toolcall`]), with arguments as
/// the JSON text OpenAI's `tool_calls` carry. Malformed calls, and calls to a
/// tool not offered (when `names` is not empty), are dropped, as SGLang's
/// detectors do.
pub fn parse_tool_calls(parser: Parser, text: &str, names: &[String]) -> (String, Vec<ToolCall>) {
    let (content, calls) = parser.split(text);
    let calls = calls
        .into_iter()
        .filter_map(|c| match c {
            Call::Ok { name, arguments } if names.is_empty() || names.contains(&name) => {
                Some(ToolCall { name, arguments: py_json(&arguments) })
            }
            _ => None,
        })
        .collect();
    (content.to_string(), calls)
}

pub fn parse_request(st: &AppState, m: &Map<String, Value>) -> Result<ChatRequest, String> {
    let stream = match m.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(format!("`stream` must be a boolean, got {v}")),
    };
    let include_usage =
        m.get("stream_options").and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false);
    let messages = m.get("messages").filter(|v| v.is_array()).ok_or("`messages` (a list) is required")?;
    let tools = m.get("tools").filter(|v| !v.is_null());
    if let Some(t) = tools {
        if !t.is_array() {
            return Err("`tools` must be a list".into());
        }
    }
    let tool_choice = m.get("tool_choice").cloned().unwrap_or(Value::Null);
    let tools_off = tool_choice.as_str() == Some("none");
    let mut tool_names: Vec<String> = tools
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str).map(str::to_string))
        .collect();
    if let Some(forced) = tool_choice.pointer("/function/name").and_then(Value::as_str) {
        tool_names = vec![forced.to_string()];
    }
    let extra = m.get("chat_template_kwargs").and_then(Value::as_object).cloned().unwrap_or_default();
    let input_ids: Vec<u32> = match m.get("input_ids").filter(|v| !v.is_null()) {
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_u64()
                    .filter(|&i| (i as usize) < st.cfg.vocab_size)
                    .map(|i| i as u32)
                    .ok_or_else(|| format!("bad token id {x} in `input_ids`"))
            })
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(format!("`input_ids` must be a list of token ids, got {v}")),
        None => {
            let text = render(st, messages, if tools_off { None } else { tools }, &extra)?;
            st.tok.encode(&text).map_err(|e| format!("{e:#}"))?
        }
    };
    if input_ids.is_empty() {
        return Err("the rendered prompt is empty".into());
    }
    if input_ids.len() >= st.cfg.context_len {
        return Err(format!(
            "The prompt ({} tokens) is longer than the model's context length ({} tokens).",
            input_ids.len(),
            st.cfg.context_len
        ));
    }
    let mut sp = Map::new();
    for k in [
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "stop",
        "stop_token_ids",
        "n",
        "ignore_eos",
        "no_stop_trim",
        "skip_special_tokens",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "min_tokens",
    ] {
        if let Some(v) = m.get(k).filter(|v| !v.is_null()) {
            let key = if k == "min_tokens" { "min_new_tokens" } else { k };
            sp.insert(key.into(), v.clone());
        }
    }
    let max = m
        .get("max_completion_tokens")
        .filter(|v| !v.is_null())
        .or_else(|| m.get("max_tokens").filter(|v| !v.is_null()));
    sp.insert("max_new_tokens".into(), max.cloned().unwrap_or_else(|| json!(st.cfg.context_len - input_ids.len())));
    if let Some(seed) = m.get("seed").filter(|v| !v.is_null()) {
        sp.insert("sampling_seed".into(), seed.clone());
    }
    let (params, n) = parse_sampling(Some(&Value::Object(sp)), st.cfg.vocab_size)?;
    let logprobs = m.get("logprobs").and_then(Value::as_bool).unwrap_or(false);
    let top_logprobs = m.get("top_logprobs").and_then(Value::as_u64).unwrap_or(0) as usize;
    let base = m.get("rid").and_then(Value::as_str).map(str::to_string);
    // SGLang's extra body field: the LoRA adapter, by name.
    let lora = super::request::lora_paths(st, m, 1, false)?.pop().flatten();
    let items = (0..n)
        .map(|s| Item {
            rid: match &base {
                Some(r) if n == 1 => r.clone(),
                Some(r) => format!("{r}_{s}"),
                None => st.uuid_hex(),
            },
            input_ids: input_ids.clone(),
            params: params.clone(),
            return_logprob: logprobs,
            logprob_start_len: input_ids.len() - 1,
            top_logprobs_num: if logprobs { top_logprobs } else { 0 },
            sample_index: s as u64,
            lora: lora.clone(),
        })
        .collect();
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Ok(ChatRequest {
        items,
        meta: ChatMeta {
            id: st.uuid_hex(),
            created,
            parse_tools: tools.is_some() && !tools_off,
            tool_names,
            logprobs,
            top_logprobs,
            stream,
            include_usage,
        },
    })
}

fn token_entry(tok: &Tokenizer, id: u32, lp: f32) -> Value {
    let t = tok.inner.decode(&[id], false).unwrap_or_default();
    json!({"token": t, "logprob": lp, "bytes": t.as_bytes()})
}

/// `(content, tool_calls)` of a finished choice: the text split into normal
/// content and parsed calls when tools are on.
fn content_and_calls(st: &AppState, meta: &ChatMeta, s: &ItemState) -> (Value, Vec<Value>) {
    let text = s.text(&st.tok);
    let (content, calls) = if meta.parse_tools {
        parse_tool_calls(st.cfg.tool_call_parser, &text, &meta.tool_names)
    } else {
        (text, Vec::new())
    };
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(k, c)| {
            json!({"id": format!("call_{}", &st.uuid_hex()[..24]), "index": k, "type": "function",
                   "function": {"name": c.name, "arguments": c.arguments}})
        })
        .collect();
    let content = if content.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(content) };
    (content, tool_calls)
}

/// OpenAI's `finish_reason` and SGLang's `matched_stop`.
fn finish_of(s: &ItemState, has_calls: bool) -> (&'static str, Value) {
    let (finish, matched) = match &s.finish {
        Some(Finish::StopToken(t)) => ("stop", json!(t)),
        Some(Finish::StopStr(x)) => ("stop", json!(x)),
        Some(Finish::Length(_)) => ("length", Value::Null),
        Some(Finish::Abort { .. }) => ("abort", Value::Null),
        None => ("stop", Value::Null),
    };
    (if has_calls { "tool_calls" } else { finish }, matched)
}

fn logprobs_of(tok: &Tokenizer, meta: &ChatMeta, tokens: &[crate::scheduler::TokenOut]) -> Value {
    if !meta.logprobs {
        return Value::Null;
    }
    json!({"content": tokens.iter().map(|t| {
        let mut e = token_entry(tok, t.id, t.logprob);
        e["top_logprobs"] = Value::Array(t.top.iter().take(meta.top_logprobs).map(|&(id, lp)| token_entry(tok, id, lp)).collect());
        e
    }).collect::<Vec<_>>()})
}

fn usage(states: &[ItemState]) -> Value {
    let prompt = states.first().map_or(0, |s| s.prompt_tokens);
    let completion: usize = states.iter().map(|s| s.tokens.len()).sum();
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

pub fn response(st: &AppState, meta: &ChatMeta, states: &[ItemState]) -> Value {
    let tok = &st.tok;
    let mut choices = Vec::new();
    for (i, s) in states.iter().enumerate() {
        let (content, tool_calls) = content_and_calls(st, meta, s);
        let (finish, matched) = finish_of(s, !tool_calls.is_empty());
        let logprobs = logprobs_of(tok, meta, &s.tokens);
        choices.push(json!({
            "index": i,
            "message": {"role": "assistant", "content": content, "reasoning_content": null,
                        "tool_calls": if tool_calls.is_empty() { Value::Null } else { Value::Array(tool_calls) }},
            "logprobs": logprobs,
            "finish_reason": finish,
            "matched_stop": matched,
        }));
    }
    json!({
        "id": format!("chatcmpl-{}", meta.id),
        "object": "chat.completion",
        "created": meta.created,
        "model": st.cfg.served_model_name,
        "choices": choices,
        "usage": usage(states),
        "weight_version": states.first().map(|s| s.weight_version.clone()),
    })
}

/// What a streamed choice has sent so far.
#[derive(Default, Clone)]
pub struct StreamState {
    started: bool,
    /// Bytes of content text sent.
    sent_text: usize,
    /// Tokens whose log-probs were sent.
    sent_tokens: usize,
    finished: bool,
}

fn chunk(st: &AppState, meta: &ChatMeta, choices: Vec<Value>) -> Value {
    json!({
        "id": format!("chatcmpl-{}", meta.id),
        "object": "chat.completion.chunk",
        "created": meta.created,
        "model": st.cfg.served_model_name,
        "choices": choices,
    })
}

/// The `chat.completion.chunk` events for choice `i` after an update: the
/// role first, then content deltas (text that can no longer change: a
/// possible stop-string start or an unfinished UTF-8 character is held back;
/// with tools on, content and calls come whole at the end, once parsed), and
/// with the finish an empty delta carrying `finish_reason`.
pub fn stream_chunks(st: &AppState, meta: &ChatMeta, i: usize, s: &ItemState, ss: &mut StreamState) -> Vec<Value> {
    let tok = &st.tok;
    let mut out = Vec::new();
    if ss.finished {
        return out;
    }
    if !ss.started {
        ss.started = true;
        out.push(chunk(st, meta, vec![json!({"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": null, "finish_reason": null})]));
    }
    let done = s.finish.is_some();
    let (delta, calls) = if done {
        let (content, calls) = content_and_calls(st, meta, s);
        let text = content.as_str().unwrap_or("");
        (text.get(ss.sent_text..).unwrap_or("").to_string(), calls)
    } else if meta.parse_tools {
        (String::new(), Vec::new())
    } else {
        let text = s.text(tok);
        let hold = s.params.stop.iter().map(|x| x.len()).max().unwrap_or(0);
        let mut end = text.len().saturating_sub(hold.saturating_sub(1)).max(ss.sent_text);
        while end > ss.sent_text && !text.is_char_boundary(end) {
            end -= 1;
        }
        let safe = &text[..end];
        let safe = safe.trim_end_matches('\u{FFFD}');
        (safe.get(ss.sent_text..).unwrap_or("").to_string(), Vec::new())
    };
    let new_tokens = &s.tokens[ss.sent_tokens.min(s.tokens.len())..];
    if !delta.is_empty() || !calls.is_empty() || (meta.logprobs && !new_tokens.is_empty() && !done) {
        let mut d = json!({"content": delta});
        if !calls.is_empty() {
            d["tool_calls"] = Value::Array(calls.clone());
            if delta.is_empty() {
                d["content"] = Value::Null;
            }
        }
        ss.sent_text += delta.len();
        let lp = logprobs_of(tok, meta, new_tokens);
        ss.sent_tokens = s.tokens.len();
        out.push(chunk(st, meta, vec![json!({"index": i, "delta": d, "logprobs": lp, "finish_reason": null})]));
    }
    if done {
        ss.finished = true;
        let (finish, matched) = finish_of(s, !calls.is_empty());
        let lp = if ss.sent_tokens < s.tokens.len() {
            logprobs_of(tok, meta, &s.tokens[ss.sent_tokens..])
        } else {
            Value::Null
        };
        ss.sent_tokens = s.tokens.len();
        out.push(chunk(
            st,
            meta,
            vec![json!({"index": i, "delta": {}, "logprobs": lp, "finish_reason": finish, "matched_stop": matched})],
        ));
    }
    out
}

/// The last chunk when `stream_options.include_usage`: no choices, `usage`.
pub fn usage_chunk(st: &AppState, meta: &ChatMeta, states: &[ItemState]) -> Value {
    let mut c = chunk(st, meta, Vec::new());
    c["usage"] = usage(states);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen_tool_calls() {
        let text = "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"347*29\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call><tool_call>not json</tool_call>";
        let (normal, calls) = parse_tool_calls(Parser::Qwen25, text, &["calculator".to_string()]);
        assert_eq!(normal, "Let me compute.");
        assert_eq!(
            calls,
            vec![ToolCall { name: "calculator".into(), arguments: "{\"expression\": \"347*29\"}".into() }]
        );
        let (normal, calls) = parse_tool_calls(Parser::Qwen25, "plain answer", &[]);
        assert_eq!((normal.as_str(), calls.len()), ("plain answer", 0));
    }

    #[test]
    fn python_style_json() {
        let v: Value = serde_json::from_str(r#"{"a": [1, "é"], "b": {"c": null}}"#).unwrap();
        assert_eq!(py_json(&v), r#"{"a": [1, "é"], "b": {"c": null}}"#);
    }
}
