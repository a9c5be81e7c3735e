//! `/v1/chat/completions` for OpenAI-style agent harnesses: messages rendered
//! with the model's own chat template (`tokenizer_config.json`), sampling
//! mapped onto SGLang's parameters, and tool calls parsed from the Qwen/Hermes
//! form `<tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>` the way
//! SGLang's `qwen25` detector does (reference/protocols.md §5).
use super::http::{parse_sampling, AppState, Item, ItemState};
use super::scheduler::Finish;
use crate::tokenizer::Tokenizer;
use serde_json::{json, Map, Value};

/// What the response needs to know about the request.
pub struct ChatMeta {
    pub id: String,
    pub created: u64,
    pub parse_tools: bool,
    pub tool_names: Vec<String>,
    pub logprobs: bool,
    pub top_logprobs: usize,
}

pub struct ChatRequest {
    pub items: Vec<Item>,
    pub meta: ChatMeta,
}

/// Python's `json.dumps(v, ensure_ascii=False)`, what HF templates' `tojson` prints
/// (one implementation: [`crate::chat::py_json_dumps`]).
pub fn py_json(v: &Value) -> String {
    crate::chat::py_json_dumps(v, None)
}

/// Renders `messages` (and `tools`) with the tokenizer's chat template, ending
/// with the generation prompt.
pub fn render(tok: &Tokenizer, messages: &Value, tools: Option<&Value>, extra: &Map<String, Value>) -> Result<String, String> {
    let src = tok
        .config
        .as_ref()
        .and_then(|c| c.get("chat_template"))
        .and_then(Value::as_str)
        .ok_or("the model has no chat template (`chat_template` in tokenizer_config.json)")?;
    let mut env = minijinja::Environment::new();
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
        Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
    });
    env.add_function("strftime_now", |_fmt: String| -> String { String::new() });
    env.add_filter("tojson", |v: minijinja::Value, kwargs: minijinja::value::Kwargs| -> Result<minijinja::Value, minijinja::Error> {
        let _indent: Option<minijinja::Value> = kwargs.get("indent")?;
        let j = serde_json::to_value(&v).map_err(|e| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string()))?;
        Ok(minijinja::Value::from_safe_string(py_json(&j)))
    });
    env.add_template("chat", src).map_err(|e| format!("the chat template does not parse: {e}"))?;
    let mut ctx = Map::new();
    ctx.insert("messages".into(), messages.clone());
    if let Some(t) = tools {
        ctx.insert("tools".into(), t.clone());
    }
    ctx.insert("add_generation_prompt".into(), Value::Bool(true));
    for k in ["bos_token", "eos_token", "pad_token"] {
        if let Some(s) = tok.config_str(k) {
            ctx.insert(k.into(), Value::String(s));
        }
    }
    for (k, v) in extra {
        ctx.insert(k.clone(), v.clone());
    }
    let t = env.get_template("chat").map_err(|e| e.to_string())?;
    t.render(minijinja::value::Serde(Value::Object(ctx))).map_err(|e| format!("rendering the chat template: {e}"))
}

/// A parsed tool call: its name and its arguments as a JSON string.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// Splits a completion into the text before the first `<tool_call>` (trimmed)
/// and the calls inside `<tool_call>…</tool_call>` blocks. Blocks that are not
/// `{"name": str, "arguments": …}` JSON, or name a tool not offered (when
/// `names` is not empty), are dropped, as SGLang's detector does.
pub fn parse_tool_calls(text: &str, names: &[String]) -> (String, Vec<ToolCall>) {
    let Some(first) = text.find("<tool_call>") else {
        return (text.to_string(), Vec::new());
    };
    let normal = text[..first].trim().to_string();
    let mut calls = Vec::new();
    let mut rest = &text[first..];
    while let Some(a) = rest.find("<tool_call>") {
        let body_start = a + "<tool_call>".len();
        let Some(b) = rest[body_start..].find("</tool_call>") else { break };
        let body = rest[body_start..body_start + b].trim();
        rest = &rest[body_start + b + "</tool_call>".len()..];
        let Ok(Value::Object(o)) = serde_json::from_str::<Value>(body) else { continue };
        let Some(name) = o.get("name").and_then(Value::as_str) else { continue };
        if !names.is_empty() && !names.iter().any(|n| n == name) {
            continue;
        }
        let args = match o.get("arguments").or_else(|| o.get("parameters")) {
            None | Some(Value::Null) => "{}".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => py_json(v),
        };
        calls.push(ToolCall { name: name.to_string(), arguments: args });
    }
    (normal, calls)
}

pub fn parse_request(st: &AppState, m: &Map<String, Value>) -> Result<ChatRequest, String> {
    if m.get("stream").and_then(Value::as_bool) == Some(true) {
        return Err("`stream` is not supported on /v1/chat/completions by arl-serve (use /generate with `stream`)".into());
    }
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
            .map(|x| x.as_u64().filter(|&i| (i as usize) < st.cfg.vocab_size).map(|i| i as u32).ok_or_else(|| format!("bad token id {x} in `input_ids`")))
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(format!("`input_ids` must be a list of token ids, got {v}")),
        None => {
            let text = render(&st.tok, messages, if tools_off { None } else { tools }, &extra)?;
            st.tok.encode(&text).map_err(|e| format!("{e:#}"))?
        }
    };
    if input_ids.is_empty() {
        return Err("the rendered prompt is empty".into());
    }
    if input_ids.len() >= st.cfg.context_len {
        return Err(format!("The prompt ({} tokens) is longer than the model's context length ({} tokens).", input_ids.len(), st.cfg.context_len));
    }
    let mut sp = Map::new();
    for k in ["temperature", "top_p", "top_k", "min_p", "stop", "stop_token_ids", "n", "ignore_eos", "no_stop_trim", "skip_special_tokens", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_tokens"] {
        if let Some(v) = m.get(k).filter(|v| !v.is_null()) {
            let key = if k == "min_tokens" { "min_new_tokens" } else { k };
            sp.insert(key.into(), v.clone());
        }
    }
    let max = m.get("max_completion_tokens").filter(|v| !v.is_null()).or_else(|| m.get("max_tokens").filter(|v| !v.is_null()));
    sp.insert("max_new_tokens".into(), max.cloned().unwrap_or_else(|| json!(st.cfg.context_len - input_ids.len())));
    if let Some(seed) = m.get("seed").filter(|v| !v.is_null()) {
        sp.insert("sampling_seed".into(), seed.clone());
    }
    let (params, n) = parse_sampling(Some(&Value::Object(sp)), st.cfg.vocab_size)?;
    let logprobs = m.get("logprobs").and_then(Value::as_bool).unwrap_or(false);
    let top_logprobs = m.get("top_logprobs").and_then(Value::as_u64).unwrap_or(0) as usize;
    let base = m.get("rid").and_then(Value::as_str).map(str::to_string);
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
        })
        .collect();
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Ok(ChatRequest {
        items,
        meta: ChatMeta { id: st.uuid_hex(), created, parse_tools: tools.is_some() && !tools_off, tool_names, logprobs, top_logprobs },
    })
}

fn token_entry(tok: &Tokenizer, id: u32, lp: f32) -> Value {
    let t = tok.inner.decode(&[id], false).unwrap_or_default();
    json!({"token": t, "logprob": lp, "bytes": t.as_bytes()})
}

pub fn response(st: &AppState, meta: &ChatMeta, states: &[ItemState]) -> Value {
    let tok = &st.tok;
    let mut choices = Vec::new();
    for (i, s) in states.iter().enumerate() {
        let text = s.text(tok);
        let (content, calls) = if meta.parse_tools { parse_tool_calls(&text, &meta.tool_names) } else { (text, Vec::new()) };
        let tool_calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(k, c)| {
                json!({"id": format!("call_{}", &st.uuid_hex()[..24]), "index": k, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        let (finish, matched) = match &s.finish {
            Some(Finish::StopToken(t)) => ("stop", json!(t)),
            Some(Finish::StopStr(x)) => ("stop", json!(x)),
            Some(Finish::Length(_)) => ("length", Value::Null),
            Some(Finish::Abort { .. }) => ("abort", Value::Null),
            None => ("stop", Value::Null),
        };
        let finish = if tool_calls.is_empty() { finish } else { "tool_calls" };
        let content = if content.is_empty() && !tool_calls.is_empty() { Value::Null } else { Value::String(content) };
        let logprobs = if meta.logprobs {
            json!({"content": s.tokens.iter().map(|t| {
                let mut e = token_entry(tok, t.id, t.logprob);
                e["top_logprobs"] = Value::Array(t.top.iter().take(meta.top_logprobs).map(|&(id, lp)| token_entry(tok, id, lp)).collect());
                e
            }).collect::<Vec<_>>()})
        } else {
            Value::Null
        };
        choices.push(json!({
            "index": i,
            "message": {"role": "assistant", "content": content, "reasoning_content": null,
                        "tool_calls": if tool_calls.is_empty() { Value::Null } else { Value::Array(tool_calls) }},
            "logprobs": logprobs,
            "finish_reason": finish,
            "matched_stop": matched,
        }));
    }
    let prompt = states.first().map_or(0, |s| s.prompt_tokens);
    let completion: usize = states.iter().map(|s| s.tokens.len()).sum();
    json!({
        "id": format!("chatcmpl-{}", meta.id),
        "object": "chat.completion",
        "created": meta.created,
        "model": st.cfg.served_model_name,
        "choices": choices,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        "weight_version": states.first().map(|s| s.weight_version.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qwen_tool_calls() {
        let text = "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"347*29\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call><tool_call>not json</tool_call>";
        let (normal, calls) = parse_tool_calls(text, &["calculator".to_string()]);
        assert_eq!(normal, "Let me compute.");
        assert_eq!(calls, vec![ToolCall { name: "calculator".into(), arguments: "{\"expression\": \"347*29\"}".into() }]);
        let (normal, calls) = parse_tool_calls("plain answer", &[]);
        assert_eq!((normal.as_str(), calls.len()), ("plain answer", 0));
    }

    #[test]
    fn python_style_json() {
        let v: Value = serde_json::from_str(r#"{"a": [1, "é"], "b": {"c": null}}"#).unwrap();
        assert_eq!(py_json(&v), r#"{"a": [1, "é"], "b": {"c": null}}"#);
    }
}
