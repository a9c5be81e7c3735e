//! The `bfcl` reward: a response's tool calls scored by the rules of the
//! Berkeley Function-Calling Leaderboard's AST checker (BFCL v4,
//! `bfcl_eval/eval_checker/ast_eval/ast_checker.py` in `bfcl-eval
//! 2026.3.23`), for the single-turn Python categories that `arl-tasks import
//! bfcl:CATEGORY` writes. The rules are BFCL's, written again in Rust from
//! reading its checker; `scripts/bench/bfcl-agreement.sh` measures the
//! agreement with the package's own code on real and mutated outputs.
//!
//! The label: `{category, functions, ground_truth, underscore_to_dot}`
//! (BFCL's function docs with BFCL's types, the possible answers, and
//! whether names were offered with `.` written `_`). The response's calls
//! are read with `--tool-call-parser` (function-calling mode: JSON
//! arguments); a call that cannot be read fails the decode, as it fails
//! BFCL's. Then, as BFCL decides:
//! * `irrelevance`, `live_irrelevance`: 1 when there is no decodable call;
//!   `live_relevance`: 1 when there is one;
//! * a category whose name holds `parallel`: as many calls as answers, each
//!   answer matched greedily to the first unmatched call that passes, in any
//!   order; else one holding `multiple`: exactly one call, checked against
//!   the answer; else (simple): exactly one call;
//! * one call against one answer: the function's name (its `_` form with
//!   `underscore_to_dot`); every required parameter present; no parameter
//!   outside the schema or the answer; types exactly as Python sees the JSON
//!   (an int is accepted where a float is expected and compared as a float;
//!   a bool is not an int; an array or tuple's items checked one level
//!   deep; a value of the answer's own type where the schema says another is
//!   a "variable" and compared as it is); strings compared after BFCL's
//!   normalisation (the characters ` ,./-_*^` removed, lower case, `'` as
//!   `"`), top-level list items likewise and in order; dicts one level deep
//!   (each key's value among its allowed ones), lists of dicts in order; a
//!   `""` among a parameter's allowed values makes it optional.
//!
//! Values compare as Python compares them (`1 == 1.0 == True`). Where BFCL's
//! own code would raise on an answer (a shape it does not expect), the call
//! is invalid with `error_type` `checker_exception`. Every decision is in
//! `reward_detail`: `valid`, `error_type`, `error`, the decoded `calls`.
mod rules;

use crate::score::{err, need_label, need_response, Score, ScoreError};
use arl_chat::toolcall::{Call, Parser};
use arl_core::record::Record;
use rules::{ast_checker, bfcl_type_known, Raise};
pub use rules::{py_eq, standardize, Verdict};
use serde_json::{json, Map, Value};

#[derive(Debug, Clone, Copy)]
pub struct BfclOpts {
    /// How the model writes tool calls (`--tool-call-parser`).
    pub parser: Parser,
}

/// The calls of a response, or why they cannot be decoded. Only the text
/// after the last `</think>` counts (BFCL keeps only that of a reasoning
/// model's reply). `qwen25` calls are read as BFCL's Qwen function-calling
/// handler reads them: each `<tool_call>\n…\n</tool_call>` (newlines
/// exactly so, the first closing tag after the opening one); a body that is
/// not JSON is skipped; a body that is not an object with a `name` and an
/// object of `arguments` fails the whole decode. Other formats are read by
/// arl's parser, and any malformed call fails the decode.
pub fn decode(parser: Parser, response: &str) -> Result<Vec<(String, Map<String, Value>)>, String> {
    let text = response.rsplit_once("</think>").map_or(response, |(_, after)| after);
    if parser != Parser::Qwen25 {
        return parser
            .parse(text)
            .into_iter()
            .map(|c| match c {
                Call::Ok { name, arguments: Value::Object(a) } => Ok((name, a)),
                Call::Ok { name, .. } => Err(format!("call `{name}`: the arguments are not an object")),
                Call::Malformed(why) => Err(why),
            })
            .collect();
    }
    const OPEN: &str = "<tool_call>\n";
    const CLOSE: &str = "\n</tool_call>";
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        let body_at = &rest[i + OPEN.len()..];
        let Some(j) = body_at.find(CLOSE) else { break };
        let body = &body_at[..j];
        rest = &body_at[j + CLOSE.len()..];
        let Ok(v) = serde_json::from_str::<Value>(body) else { continue };
        let Value::Object(call) = v else {
            return Err("a tool call is not a JSON object".into());
        };
        let name = match call.get("name") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(_) | Value::Object(_)) => return Err("a tool call's `name` is not a string".into()),
            Some(other) => other.to_string(),
            None => return Err("a tool call has no `name`".into()),
        };
        match call.get("arguments") {
            Some(Value::Object(a)) => out.push((name, a.clone())),
            Some(_) => return Err(format!("call `{name}`: `arguments` is not an object")),
            None => return Err(format!("call `{name}`: no `arguments`")),
        }
    }
    Ok(out)
}

/// Checks a label's shape: the category, and the functions and answers its rules read.
struct Label<'a> {
    category: &'a str,
    functions: &'a [Value],
    answers: Option<&'a [Value]>,
    u2d: bool,
}

fn label(v: &Value) -> Result<Label<'_>, ScoreError> {
    let bad = |why: &str| {
        err(format!("field `label`: {why} (a BFCL label is {{category, functions, ground_truth, underscore_to_dot}}, as `arl-tasks import bfcl:CATEGORY` writes it)"))
    };
    let category = v.get("category").and_then(Value::as_str).ok_or_else(|| bad("no string `category`"))?;
    let relevance = category.contains("irrelevance") || category.contains("relevance");
    let functions = match v.get("functions") {
        Some(Value::Array(f)) => f.as_slice(),
        None if relevance => &[],
        _ => return Err(bad("`functions` is not a list")),
    };
    let answers = match v.get("ground_truth") {
        Some(Value::Array(a)) => Some(a.as_slice()),
        None | Some(Value::Null) if relevance => None,
        _ => return Err(bad("`ground_truth` is not a list")),
    };
    for (i, f) in functions.iter().enumerate() {
        let name = f.get("name").and_then(Value::as_str);
        let props = f.pointer("/parameters/properties").and_then(Value::as_object);
        let (Some(name), Some(props)) = (name, props) else {
            return Err(bad(&format!("`functions[{i}]` has no `name` or no `parameters.properties`")));
        };
        for (p, d) in props {
            let t = d.get("type").and_then(Value::as_str).unwrap_or("(none)");
            if !bfcl_type_known(t) {
                return Err(bad(&format!(
                    "function `{name}`, parameter `{p}`: type `{t}` is not one of BFCL's Python types"
                )));
            }
        }
    }
    let u2d = v.get("underscore_to_dot").and_then(Value::as_bool).unwrap_or(false);
    Ok(Label { category, functions, answers, u2d })
}

/// Scores one record (1 when BFCL's rules accept the response, else 0).
pub fn score(o: &BfclOpts, r: &Record) -> Result<Score, ScoreError> {
    let response = need_response(r)?;
    let l = label(need_label(r)?)?;
    let decoded = decode(o.parser, response);
    let calls_json = |calls: &[(String, Map<String, Value>)]| {
        Value::Array(calls.iter().map(|(n, a)| json!({ n.clone(): Value::Object(a.clone()) })).collect())
    };
    let mut detail = json!({"category": l.category, "underscore_to_dot": l.u2d});
    let verdict = if l.category.contains("relevance") {
        let has_call = matches!(&decoded, Ok(c) if !c.is_empty());
        if let Ok(c) = &decoded {
            detail["calls"] = calls_json(c);
        }
        if l.category.contains("irrelevance") {
            if has_call {
                Verdict::bad(
                    "irrelevance_error:decoder_success",
                    "Valid syntax. Successfully decode AST when it should not.".into(),
                )
            } else {
                Verdict::ok()
            }
        } else if has_call {
            Verdict::ok()
        } else {
            Verdict::bad(
                "relevance_error:decoder_failed",
                "Invalid syntax. Failed to decode AST when it should have.".into(),
            )
        }
    } else {
        let answers = l.answers.ok_or_else(|| err("field `label`: `ground_truth` missing"))?;
        match decoded {
            Err(why) => {
                Verdict::bad("ast_decoder:decoder_failed", format!("Invalid syntax. Failed to decode AST. {why}"))
            }
            Ok(calls) => {
                detail["calls"] = calls_json(&calls);
                match ast_checker(l.functions, &calls, answers, l.category, l.u2d) {
                    Ok(v) => v,
                    Err(Raise(why)) => Verdict::bad("checker_exception", format!("BFCL's checker would raise: {why}")),
                }
            }
        }
    };
    detail["valid"] = json!(verdict.valid);
    let explain = if verdict.valid {
        format!("bfcl {}: valid", l.category)
    } else {
        detail["error_type"] = json!(verdict.error_type);
        detail["error"] = json!(verdict.error);
        format!("bfcl {}: {} — {}", l.category, verdict.error_type, verdict.error.join(" "))
    };
    Ok(Score { reward: if verdict.valid { 1.0 } else { 0.0 }, detail, explain })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_as_bfcls_qwen_handler() {
        let d = |t: &str| decode(Parser::Qwen25, t);
        let one = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>";
        assert_eq!(d(one).unwrap().len(), 1);
        assert_eq!(d(&format!("<think>{one}</think>no call")).unwrap().len(), 0);
        // Without the newlines BFCL's handler sees no call.
        assert_eq!(d("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>").unwrap().len(), 0);
        // A body that is not JSON is skipped; one without `arguments` fails the decode.
        assert_eq!(d(&format!("<tool_call>\n{{broken\n</tool_call>{one}")).unwrap().len(), 1);
        assert!(d("<tool_call>\n{\"name\": \"f\"}\n</tool_call>").is_err());
        assert!(d("<tool_call>\n{\"name\": \"f\", \"arguments\": \"{}\"}\n</tool_call>").is_err());
    }
}
