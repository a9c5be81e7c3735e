//! Tool calls in a model's text, in the formats model families write them,
//! chosen by name as SGLang's `--tool-call-parser` chooses them ([`Parser`]):
//! * `qwen25` (also `qwen`, `hermes`), the default, as Qwen2.5/Qwen3 chat
//!   templates write them (the Hermes form):
//!   `<tool_call>\n{"name": "calculator", "arguments": {"expression": "347*29"}}\n</tool_call>`;
//! * `llama3`, Llama 3.x JSON calls: `{"name": "calculator", "parameters": {…}}`,
//!   optionally after `<|python_tag|>`, several separated by `;`, or a JSON
//!   list of such objects;
//! * `mistral`: `[TOOL_CALLS] [{"name": …, "arguments": {…}}, …]`.
//!
//! The parsers of arl (docs/DESIGN.md §4): rollout runs the calls it finds
//! in a turn, the rewards read them back from responses, and `arl-serve`'s
//! `/v1/chat/completions` returns them as OpenAI `tool_calls`. Every format
//! gives the same [`Call`]s.
use serde_json::Value;

/// The tag that opens a `qwen25` tool call.
pub const OPEN: &str = "<tool_call>";
/// The tag that closes a `qwen25` tool call.
pub const CLOSE: &str = "</tool_call>";
/// The token Llama 3.x may put before its JSON calls.
pub const PYTHON_TAG: &str = "<|python_tag|>";
/// The marker before Mistral's list of calls.
pub const TOOL_CALLS: &str = "[TOOL_CALLS]";

/// A parsed tool call, or why it could not be parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Ok { name: String, arguments: Value },
    Malformed(String),
}

/// The `--help` text of `--tool-call-parser`, the same in every binary.
pub const PARSER_HELP: &str = "How the model writes tool calls, by SGLang's `--tool-call-parser` names: \
`qwen25` (also `qwen`, `hermes`): `<tool_call>{\"name\": …, \"arguments\": {…}}</tool_call>`; \
`llama3`: `{\"name\": …, \"parameters\": {…}}` at the start of the turn or after `<|python_tag|>`, \
several separated by `;`; `mistral`: `[TOOL_CALLS] [{\"name\": …, \"arguments\": {…}}, …]`";

/// A tool-call format, named as SGLang's `--tool-call-parser` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Parser {
    /// `<tool_call>{"name": …, "arguments": {…}}</tool_call>` (Qwen2.5, Qwen3, Hermes).
    #[default]
    #[value(name = "qwen25", alias = "qwen", alias = "hermes")]
    Qwen25,
    /// `{"name": …, "parameters": {…}}`, optionally after `<|python_tag|>`, `;` between calls (Llama 3.x).
    #[value(name = "llama3")]
    Llama3,
    /// `[TOOL_CALLS] [{"name": …, "arguments": {…}}, …]` (Mistral).
    #[value(name = "mistral")]
    Mistral,
}

impl std::str::FromStr for Parser {
    type Err = String;
    fn from_str(s: &str) -> Result<Parser, String> {
        <Parser as clap::ValueEnum>::from_str(s, false)
            .map_err(|_| format!("unknown tool-call parser `{s}` (known: qwen25, qwen, hermes, llama3, mistral)"))
    }
}

impl std::fmt::Display for Parser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Parser {
    /// The SGLang name (`qwen25`, `llama3`, `mistral`).
    pub fn name(self) -> &'static str {
        match self {
            Parser::Qwen25 => "qwen25",
            Parser::Llama3 => "llama3",
            Parser::Mistral => "mistral",
        }
    }

    /// The calls in one assistant turn (no calls: an empty list).
    pub fn parse(self, text: &str) -> Vec<Call> {
        self.split(text).1
    }

    /// Splits one assistant turn into the text before its calls (trimmed,
    /// OpenAI's `content` next to `tool_calls`) and the calls; without a call
    /// the whole text is the content.
    pub fn split(self, text: &str) -> (&str, Vec<Call>) {
        match self {
            Parser::Qwen25 => match text.find(OPEN) {
                Some(first) => (text[..first].trim(), qwen_calls(&text[first..])),
                None => (text, Vec::new()),
            },
            Parser::Llama3 => {
                if let Some(at) = text.find(PYTHON_TAG) {
                    let (calls, _) = llama_calls(&text[at + PYTHON_TAG.len()..], true);
                    return (text[..at].trim(), calls);
                }
                match llama_calls(text, false) {
                    (calls, _) if !calls.is_empty() => ("", calls),
                    _ => (text, Vec::new()),
                }
            }
            Parser::Mistral => match text.find(TOOL_CALLS) {
                Some(first) => (text[..first].trim(), mistral_calls(&text[first..])),
                None => (text, Vec::new()),
            },
        }
    }

    /// The well-formed calls anywhere in a whole episode's response (every
    /// turn, tool outputs included), for rewards that replay them. For
    /// `llama3`, whose calls have no opening tag, a call is looked for after
    /// each `<|python_tag|>`, at the start of the text and at the start of
    /// each later assistant turn (the line after a role header ending in
    /// `assistant` or `model`), and an untagged object counts only with both
    /// `name` and `parameters` (or `arguments`), so that JSON a tool printed
    /// is not taken for a call.
    pub fn parse_transcript(self, text: &str) -> Vec<Call> {
        let calls = match self {
            Parser::Qwen25 | Parser::Mistral => self.parse(text),
            Parser::Llama3 => {
                // Where a call may start: the text's start (the first turn's),
                // each later assistant turn's (a line after a role header that
                // ends in `assistant` or `model`, as ChatML, Llama 3 and Gemma
                // headers do), each tag.
                let turn_start = |i: usize| {
                    let before = text[..i].trim_end();
                    let before = before.strip_suffix("<|end_header_id|>").unwrap_or(before);
                    before.ends_with("assistant") || before.ends_with("model")
                };
                let mut starts: Vec<usize> = std::iter::once(0)
                    .chain(text.match_indices('\n').map(|(i, _)| i + 1).filter(|&i| turn_start(i)))
                    .chain(text.match_indices(PYTHON_TAG).map(|(i, _)| i))
                    .collect();
                starts.sort_unstable();
                starts.dedup();
                let mut out = Vec::new();
                let mut done = 0;
                for at in starts.into_iter().filter(|&at| at < text.len()) {
                    if at < done {
                        continue;
                    }
                    let rest = &text[at..];
                    let (tagged, body) = match rest.strip_prefix(PYTHON_TAG) {
                        Some(b) => (true, b),
                        None => (false, rest),
                    };
                    let (calls, used) = llama_calls(body, tagged);
                    let all_ok = calls.iter().all(|c| matches!(c, Call::Ok { .. }));
                    if !calls.is_empty() && (tagged || (all_ok && has_arguments_key(body))) {
                        out.extend(calls);
                        done = at + (rest.len() - body.len()) + used;
                    }
                }
                out
            }
        };
        calls.into_iter().filter(|c| matches!(c, Call::Ok { .. })).collect()
    }

    /// `calls` (name and arguments) written as the model writes them in this
    /// format: what a tool header shows as an example, and how earlier calls
    /// in a conversation are shown to a model whose template has no tool
    /// section.
    pub fn format_calls(self, calls: &[(String, Value)]) -> String {
        let obj = |name: &str, args: &Value, key: &str| {
            let mut m = serde_json::Map::new();
            m.insert("name".into(), Value::String(name.to_string()));
            m.insert(key.into(), args.clone());
            crate::template::py_json_dumps(&Value::Object(m), None)
        };
        match self {
            Parser::Qwen25 => calls
                .iter()
                .map(|(n, a)| format!("{OPEN}\n{}\n{CLOSE}", obj(n, a, "arguments")))
                .collect::<Vec<_>>()
                .join("\n"),
            Parser::Llama3 => calls.iter().map(|(n, a)| obj(n, a, "parameters")).collect::<Vec<_>>().join("; "),
            Parser::Mistral => format!(
                "{TOOL_CALLS} [{}]",
                calls.iter().map(|(n, a)| obj(n, a, "arguments")).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// How to call a tool in this format, in words and an example: the
    /// `format` of a tool header (crate::tool_header).
    pub fn instructions(self) -> String {
        let example = self.format_calls(&[("TOOL_NAME".into(), serde_json::json!({"ARGUMENT": "VALUE"}))]);
        match self {
            Parser::Qwen25 => format!(
                "To call a tool, write the call as a JSON object with the tool's `name` and its `arguments`, \
                 between <tool_call> and </tool_call> tags, one block per call:\n{example}"
            ),
            Parser::Llama3 => format!(
                "To call a tool, answer with only a JSON object holding the tool's `name` and its `parameters`, \
                 and nothing else; separate several calls with `;`:\n{example}"
            ),
            Parser::Mistral => format!(
                "To call tools, write [TOOL_CALLS] and then a JSON list of calls, each an object with the tool's \
                 `name` and its `arguments`:\n{example}"
            ),
        }
    }
}

/// The `qwen25` calls of `text` (every `<tool_call>` block, as SGLang's
/// `Qwen25Detector` finds them); an unclosed block at the end of the turn is
/// malformed.
pub fn parse_tool_calls(text: &str) -> Vec<Call> {
    Parser::Qwen25.parse(text)
}

/// [`Parser::split`] for `qwen25`, the default format.
pub fn split_tool_calls(text: &str) -> (&str, Vec<Call>) {
    Parser::Qwen25.split(text)
}

fn qwen_calls(text: &str) -> Vec<Call> {
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

/// The first JSON value of `text` (after whitespace) and the bytes it took,
/// whitespace included.
fn first_json(text: &str) -> Result<(Value, usize), serde_json::Error> {
    let mut it = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    match it.next() {
        Some(Ok(v)) => Ok((v, it.byte_offset())),
        Some(Err(e)) => Err(e),
        None => Err(serde_json::from_str::<Value>("").unwrap_err()),
    }
}

/// Llama 3.x JSON calls at the start of `text`: objects separated by `;`, or
/// one JSON list of objects; what follows them (an end-of-turn token) is
/// ignored. With `tagged` (after `<|python_tag|>`) anything that is not a
/// call is a malformed one; without, text that is not a call is no call
/// (plain content), unless it starts as one (`{"name"`) and breaks. Returns
/// the calls and the bytes they took.
fn llama_calls(text: &str, tagged: bool) -> (Vec<Call>, usize) {
    let body = text.trim_start();
    let lead = text.len() - body.len();
    let looks_like_call = |s: &str| {
        s.strip_prefix('{').map(str::trim_start).is_some_and(|r| r.starts_with("\"name\""))
            || s.strip_prefix('[').map(str::trim_start).is_some_and(|r| r.starts_with('{'))
    };
    if !body.starts_with('{') && !body.starts_with('[') {
        return if tagged {
            (vec![Call::Malformed("no JSON call after `<|python_tag|>`".into())], 0)
        } else {
            (vec![], 0)
        };
    }
    if body.starts_with('[') {
        return match first_json(body) {
            Ok((Value::Array(items), used)) if tagged || items.iter().all(|v| v.get("name").is_some()) => {
                (items.iter().map(call_from_value).collect(), lead + used)
            }
            Ok(_) if !tagged => (vec![], 0),
            Ok(_) => (vec![Call::Malformed("the list of tool calls must hold call objects".into())], lead),
            Err(_) if !tagged && !looks_like_call(body) => (vec![], 0),
            Err(e) => (vec![Call::Malformed(format!("the tool call is not valid JSON ({e})"))], lead),
        };
    }
    let mut out = Vec::new();
    let mut at = lead;
    loop {
        let rest = &text[at..];
        match first_json(rest) {
            Ok((v, used)) => {
                if out.is_empty() && !tagged && v.get("name").is_none() {
                    return (vec![], 0);
                }
                out.push(call_from_value(&v));
                at += used;
            }
            Err(_) if out.is_empty() && !tagged && !looks_like_call(body) => return (vec![], 0),
            Err(e) => {
                out.push(Call::Malformed(format!("the tool call is not valid JSON ({e})")));
                break;
            }
        }
        let after = text[at..].trim_start();
        match after.strip_prefix(';') {
            Some(next) if next.trim_start().starts_with('{') => at = text.len() - next.len(),
            _ => break,
        }
    }
    (out, at)
}

/// Whether the first object of `text` has a `parameters` or `arguments` key.
fn has_arguments_key(text: &str) -> bool {
    let body = text.trim_start();
    let first = match first_json(body) {
        Ok((Value::Array(items), _)) => items.into_iter().next(),
        Ok((v, _)) => Some(v),
        Err(_) => None,
    };
    first.is_some_and(|v| v.get("parameters").or_else(|| v.get("arguments")).is_some())
}

/// Mistral's calls: after each `[TOOL_CALLS]`, a JSON list of call objects
/// (a single object is taken as a list of one).
fn mistral_calls(text: &str) -> Vec<Call> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(TOOL_CALLS) {
        let after = &rest[i + TOOL_CALLS.len()..];
        match first_json(after) {
            Ok((Value::Array(items), used)) => {
                if items.is_empty() {
                    out.push(Call::Malformed("`[TOOL_CALLS]` with an empty list".into()));
                }
                out.extend(items.iter().map(call_from_value));
                rest = &after[used..];
            }
            Ok((v @ Value::Object(_), used)) => {
                out.push(call_from_value(&v));
                rest = &after[used..];
            }
            Ok(_) => {
                out.push(Call::Malformed("`[TOOL_CALLS]` must be followed by a JSON list of calls".into()));
                rest = after;
            }
            Err(e) => {
                out.push(Call::Malformed(format!("the tool calls are not valid JSON ({e})")));
                rest = after;
            }
        }
    }
    out
}

fn parse_one(body: &str) -> Call {
    match serde_json::from_str::<Value>(body) {
        Ok(v) => call_from_value(&v),
        Err(e) => Call::Malformed(format!("the tool call is not valid JSON ({e})")),
    }
}

/// A call object `{"name": …, "arguments": {…}}` (`parameters` is accepted
/// for `arguments`, as SGLang's detectors accept it); `arguments` may also be
/// a JSON string holding the object, and a missing or null `arguments` is `{}`.
fn call_from_value(v: &Value) -> Call {
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

    fn ok(name: &str, arguments: Value) -> Call {
        Call::Ok { name: name.into(), arguments }
    }

    #[test]
    fn parser_names() {
        for (name, p) in [
            ("qwen25", Parser::Qwen25),
            ("qwen", Parser::Qwen25),
            ("hermes", Parser::Qwen25),
            ("llama3", Parser::Llama3),
            ("mistral", Parser::Mistral),
        ] {
            assert_eq!(name.parse::<Parser>(), Ok(p));
        }
        assert_eq!(Parser::default(), Parser::Qwen25);
        let e = "llama4".parse::<Parser>().unwrap_err();
        assert!(e.contains("`llama4`") && e.contains("llama3"), "{e}");
    }

    #[test]
    fn hermes_is_qwen25() {
        let t = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>";
        assert_eq!("hermes".parse::<Parser>().unwrap().parse(t), vec![ok("f", json!({"x": 1}))]);
    }

    #[test]
    fn llama3_calls() {
        let p = Parser::Llama3;
        // One call, the turn's end token after it.
        let t = "{\"name\": \"calculator\", \"parameters\": {\"expression\": \"347*29\"}}<|eot_id|>";
        assert_eq!(p.split(t), ("", vec![ok("calculator", json!({"expression": "347*29"}))]));
        // After the python tag, with text before it; several separated by `;`.
        let t = "Let me see.<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"arguments\": {}} ;{\"name\": \"c\"}<|im_end|>";
        assert_eq!(p.split(t), ("Let me see.", vec![ok("a", json!({"x": 1})), ok("b", json!({})), ok("c", json!({}))]));
        // A JSON list of calls.
        let t = " [{\"name\": \"a\", \"parameters\": {}}, {\"name\": \"b\", \"parameters\": {\"y\": [2]}}]";
        assert_eq!(p.parse(t), vec![ok("a", json!({})), ok("b", json!({"y": [2]}))]);
        // Malformed: broken JSON that starts as a call, a bad call after the tag, a bad second call.
        assert!(matches!(&p.parse("{\"name\": \"a\", \"parameters\": {")[..], [Call::Malformed(_)]));
        assert!(matches!(&p.parse("<|python_tag|>print(1)")[..], [Call::Malformed(_)]));
        assert!(matches!(&p.parse("<|python_tag|>{\"city\": \"Paris\"}")[..], [Call::Malformed(_)]));
        assert!(matches!(&p.parse("{\"name\": \"a\"}; {\"name\": 5}")[..], [Call::Ok { .. }, Call::Malformed(_)]));
        assert!(matches!(&p.parse("{\"name\": \"a\", \"parameters\": [1]}")[..], [Call::Malformed(_)]));
        // No call: plain text, JSON that is no call, a call later in the text (Llama calls start the turn).
        assert_eq!(p.split("The answer is 42."), ("The answer is 42.", vec![]));
        assert_eq!(p.split("{\"answer\": 42}"), ("{\"answer\": 42}", vec![]));
        assert_eq!(p.parse("{not json at all"), vec![]);
        assert_eq!(p.parse("I will call {\"name\": \"a\"}"), vec![]);
        // The qwen25 form is no llama3 call, and the other way round.
        assert_eq!(p.parse("<tool_call>{\"name\": \"a\"}</tool_call>"), vec![]);
        assert_eq!(Parser::Qwen25.parse("{\"name\": \"a\", \"parameters\": {}}"), vec![]);
    }

    #[test]
    fn mistral_calls() {
        let p = Parser::Mistral;
        let t = "Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": \"{\\\"y\\\": 2}\"}]</s>";
        assert_eq!(p.split(t), ("Sure.", vec![ok("a", json!({"x": 1})), ok("b", json!({"y": 2}))]));
        assert_eq!(
            p.parse("[TOOL_CALLS][{\"name\": \"a\"}][TOOL_CALLS] {\"name\": \"b\"}"),
            vec![ok("a", json!({})), ok("b", json!({}))]
        );
        assert!(matches!(&p.parse("[TOOL_CALLS] [{\"name\": \"a\"")[..], [Call::Malformed(_)]));
        assert!(matches!(&p.parse("[TOOL_CALLS] [{\"arguments\": {}}]")[..], [Call::Malformed(_)]));
        assert!(matches!(&p.parse("[TOOL_CALLS] 42")[..], [Call::Malformed(_)]));
        assert_eq!(p.split("no calls"), ("no calls", vec![]));
    }

    #[test]
    fn calls_in_a_whole_transcript() {
        // A ChatML episode: two assistant turns with llama3 calls, tool outputs between.
        let t = "{\"name\": \"sql\", \"parameters\": {\"query\": \"SELECT 1\"}}<|im_end|>\n<|im_start|>tool\n\
                 {\"name\": \"Alice\", \"age\": 3}\n<|im_end|>\n<|im_start|>assistant\n\
                 {\"name\": \"sql\", \"parameters\": {\"query\": \"SELECT 2\"}}; {\"name\": \"python\", \"parameters\": {}}<|im_end|>\n\
                 <|im_start|>tool\nok\n{\"name\": \"g\", \"parameters\": {}}<|im_end|>\n<|im_start|>assistant\nDone. <|python_tag|>{\"name\": \"f\", \"parameters\": {}}";
        assert_eq!(
            Parser::Llama3.parse_transcript(t),
            vec![
                ok("sql", json!({"query": "SELECT 1"})),
                ok("sql", json!({"query": "SELECT 2"})),
                ok("python", json!({})),
                ok("f", json!({})),
            ]
        );
        let q = "<tool_call>{\"name\": \"a\"}</tool_call>x<tool_call>bad</tool_call><tool_call>{\"name\": \"b\"}</tool_call>";
        assert_eq!(Parser::Qwen25.parse_transcript(q), vec![ok("a", json!({})), ok("b", json!({}))]);
    }

    #[test]
    fn calls_written_back_parse_the_same() {
        let calls = vec![("a".to_string(), json!({"x": "é<>"})), ("b".to_string(), json!({}))];
        for p in [Parser::Qwen25, Parser::Llama3, Parser::Mistral] {
            let text = p.format_calls(&calls);
            let want: Vec<Call> = calls.iter().map(|(n, a)| ok(n, a.clone())).collect();
            assert_eq!(p.parse(&text), want, "{p}: {text}");
            assert!(p.instructions().contains("TOOL_NAME"));
        }
    }
}
