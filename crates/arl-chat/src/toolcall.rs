//! Tool calls as Qwen2.5/Qwen3 chat templates write them (the Hermes form):
//! `<tool_call>\n{"name": "calculator", "arguments": {"expression": "347*29"}}\n</tool_call>`
//! (docs/DESIGN.md §4). The one parser of arl: rollout runs the calls it finds,
//! the rewards read them back from responses, and `arl-serve`'s
//! `/v1/chat/completions` returns them as OpenAI `tool_calls`.
use serde_json::Value;

/// The tag that opens a tool call.
pub const OPEN: &str = "<tool_call>";
/// The tag that closes a tool call.
pub const CLOSE: &str = "</tool_call>";

/// A parsed `<tool_call>` block, or why it could not be parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Ok { name: String, arguments: Value },
    Malformed(String),
}

/// Finds `<tool_call>…</tool_call>` blocks as Qwen2.5's parser does
/// (SGLang's `Qwen25Detector`): each body is `{"name": …, "arguments": {…}}`
/// (`parameters` is accepted for `arguments`); `arguments` may also be a JSON
/// string holding the object, and a missing or null `arguments` is `{}`. An
/// unclosed block at the end of the turn is malformed.
pub fn parse_tool_calls(text: &str) -> Vec<Call> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        let after = &rest[i + OPEN.len()..];
        let Some(j) = after.find(CLOSE) else {
            out.push(Call::Malformed("`<tool_call>` without `</tool_call>`".into()));
            break;
        };
        out.push(parse_one(after[..j].trim()));
        rest = &after[j + CLOSE.len()..];
    }
    out
}

/// Splits a completion into the text before its first `<tool_call>` (trimmed,
/// OpenAI's `content` next to `tool_calls`) and its calls; without a call the
/// whole text is the content.
pub fn split_tool_calls(text: &str) -> (&str, Vec<Call>) {
    match text.find(OPEN) {
        Some(first) => (text[..first].trim(), parse_tool_calls(&text[first..])),
        None => (text, Vec::new()),
    }
}

fn parse_one(body: &str) -> Call {
    let v: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => return Call::Malformed(format!("the tool call is not valid JSON ({e})")),
    };
    let Some(name) = v.get("name").and_then(Value::as_str) else {
        return Call::Malformed("the tool call has no string `name`".into());
    };
    let arguments = match v.get("arguments").or_else(|| v.get("parameters")) {
        Some(Value::Object(o)) => Value::Object(o.clone()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(o @ Value::Object(_)) => o,
            _ => return Call::Malformed("`arguments` is a string that is not a JSON object".into()),
        },
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(_) => return Call::Malformed("`arguments` must be a JSON object".into()),
    };
    Call::Ok { name: name.to_string(), arguments }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_qwen_tool_calls() {
        let t = "Let me compute.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"347*29\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"python\", \"arguments\": \"{\\\"code\\\": \\\"print(1)\\\"}\"}\n</tool_call><|im_end|>";
        let c = parse_tool_calls(t);
        assert_eq!(
            c,
            vec![
                Call::Ok { name: "calculator".into(), arguments: json!({"expression": "347*29"}) },
                Call::Ok { name: "python".into(), arguments: json!({"code": "print(1)"}) },
            ]
        );
        assert!(matches!(&parse_tool_calls("<tool_call>{\"name\": 3}</tool_call>")[..], [Call::Malformed(_)]));
        assert!(matches!(&parse_tool_calls("<tool_call>{oops</tool_call>")[..], [Call::Malformed(_)]));
        assert!(matches!(&parse_tool_calls("x <tool_call>{\"name\": \"a\"")[..], [Call::Malformed(_)]));
        assert!(parse_tool_calls("no calls here").is_empty());
    }

    #[test]
    fn content_before_the_calls() {
        let (content, calls) =
            split_tool_calls("Let me compute.\n<tool_call>\n{\"name\": \"f\", \"arguments\": null}\n</tool_call>");
        assert_eq!(content, "Let me compute.");
        assert_eq!(calls, vec![Call::Ok { name: "f".into(), arguments: json!({}) }]);
        assert_eq!(split_tool_calls("plain answer"), ("plain answer", vec![]));
    }
}
