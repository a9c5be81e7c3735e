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
use crate::score::{err, need_label, need_response, Score, ScoreError};
use arl_chat::toolcall::{Call, Parser};
use arl_core::record::Record;
use serde_json::{json, Map, Value};

#[derive(Debug, Clone, Copy)]
pub struct BfclOpts {
    /// How the model writes tool calls (`--tool-call-parser`).
    pub parser: Parser,
}

/// A verdict, as BFCL's checker returns it: `valid`, an `error_type` and the errors.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub valid: bool,
    pub error_type: String,
    pub error: Vec<String>,
}

impl Verdict {
    fn ok() -> Verdict {
        Verdict { valid: true, error_type: String::new(), error: Vec::new() }
    }
    fn bad(error_type: &str, error: String) -> Verdict {
        Verdict { valid: false, error_type: error_type.into(), error: vec![error] }
    }
}

/// Where BFCL's code would raise: the answer or schema has a shape it does not expect.
#[derive(Debug)]
struct Raise(String);

type Checked = Result<Verdict, Raise>;

fn raise<T>(why: impl Into<String>) -> Result<T, Raise> {
    Err(Raise(why.into()))
}

/// Python's type of a JSON value (as `json.loads` gives it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Py {
    Str,
    Int,
    Float,
    Bool,
    List,
    Dict,
    None,
}

impl Py {
    fn of(v: &Value) -> Py {
        match v {
            Value::String(_) => Py::Str,
            Value::Number(n) if n.is_f64() => Py::Float,
            Value::Number(_) => Py::Int,
            Value::Bool(_) => Py::Bool,
            Value::Array(_) => Py::List,
            Value::Object(_) => Py::Dict,
            Value::Null => Py::None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Py::Str => "str",
            Py::Int => "int",
            Py::Float => "float",
            Py::Bool => "bool",
            Py::List => "list",
            Py::Dict => "dict",
            Py::None => "NoneType",
        }
    }

    /// BFCL's `PYTHON_TYPE_MAPPING`.
    fn from_bfcl(t: &str) -> Option<Py> {
        Some(match t {
            "string" | "any" => Py::Str,
            "integer" => Py::Int,
            "float" => Py::Float,
            "boolean" => Py::Bool,
            "array" | "tuple" => Py::List,
            "dict" => Py::Dict,
            _ => return None,
        })
    }
}

/// A number as Python sees it: an int (exact) or a float.
fn num(v: &Value) -> Option<Result<i128, f64>> {
    match v {
        Value::Bool(b) => Some(Ok(i128::from(*b))),
        Value::Number(n) => Some(match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Ok(i128::from(i)),
            (None, Some(u)) => Ok(i128::from(u)),
            _ => Err(n.as_f64().unwrap_or(f64::NAN)),
        }),
        _ => None,
    }
}

/// Python's `==` on JSON values: numbers and bools compare by value
/// (`1 == 1.0 == True`), lists item by item, dicts by keys and values.
pub fn py_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| py_eq(v, w)))
        }
        _ => match (num(a), num(b)) {
            (Some(Ok(x)), Some(Ok(y))) => x == y,
            (Some(Ok(x)), Some(Err(y))) | (Some(Err(y)), Some(Ok(x))) => (x as f64) == y,
            (Some(Err(x)), Some(Err(y))) => x == y,
            _ => false,
        },
    }
}

/// Python's `x in container`: a list's items, a dict's keys, a string's substrings.
fn py_in(x: &Value, container: &Value) -> Result<bool, Raise> {
    match container {
        Value::Array(items) => Ok(items.iter().any(|i| py_eq(x, i))),
        Value::Object(m) => Ok(x.as_str().is_some_and(|k| m.contains_key(k))),
        Value::String(s) => match x {
            Value::String(n) => Ok(s.contains(n.as_str())),
            _ => raise("`in <string>` requires a string"),
        },
        other => raise(format!("argument of type '{}' is not iterable", Py::of(other).name())),
    }
}

/// What `for i in range(len(x)): x[i]` walks: a list's items, a string's characters.
fn py_items(x: &Value) -> Result<Vec<Value>, Raise> {
    match x {
        Value::Array(items) => Ok(items.clone()),
        Value::String(s) => Ok(s.chars().map(|c| Value::String(c.to_string())).collect()),
        Value::Object(m) if m.is_empty() => Ok(Vec::new()),
        Value::Object(_) => raise("KeyError: a dict indexed by position"),
        other => raise(format!("object of type '{}' has no len()", Py::of(other).name())),
    }
}

/// `len(x)` for what Python can measure.
fn py_len(x: &Value) -> Result<usize, Raise> {
    match x {
        Value::Array(items) => Ok(items.len()),
        Value::String(s) => Ok(s.chars().count()),
        Value::Object(m) => Ok(m.len()),
        other => raise(format!("object of type '{}' has no len()", Py::of(other).name())),
    }
}

/// BFCL's `standardize_string`: spaces and `,./-_*^` removed, lower case, `'` as `"`.
pub fn standardize(s: &str) -> String {
    let kept: String = s.chars().filter(|c| !matches!(c, ' ' | ',' | '.' | '/' | '-' | '_' | '*' | '^')).collect();
    kept.to_lowercase().replace('\'', "\"")
}

fn std_value(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(standardize(s)),
        other => other.clone(),
    }
}

fn repr(v: &Value) -> String {
    v.to_string()
}

/// The type of the first allowed value that is not `""` (BFCL's `get_possible_answer_type`).
fn answer_type(possible: &Value) -> Result<Option<Py>, Raise> {
    Ok(py_items(possible)?.iter().find(|a| a.as_str() != Some("")).map(Py::of))
}

struct TypeCheck {
    verdict: Verdict,
    is_variable: bool,
}

/// BFCL's `type_checker` (nested types one level deep).
fn type_checker(
    param: &str,
    value: &Value,
    possible: &Value,
    expected: Py,
    nested: Option<Py>,
) -> Result<TypeCheck, Raise> {
    let pat = answer_type(possible)?;
    let is_variable = pat.is_some_and(|t| t != expected);
    let mut v = Verdict { valid: true, error_type: "type_error:simple".into(), error: Vec::new() };
    if Py::of(value) == expected {
        let Some(inner) = nested else {
            return Ok(TypeCheck { verdict: v, is_variable });
        };
        for item in py_items(possible)? {
            let mut flag = true;
            if item.is_array() {
                for vi in py_items(value)? {
                    if !type_checker(param, &vi, &item, inner, None)?.verdict.valid {
                        flag = false;
                        break;
                    }
                }
            }
            if flag {
                return Ok(TypeCheck { verdict: Verdict::ok(), is_variable });
            }
        }
        v = Verdict {
            valid: false,
            error_type: "type_error:nested".into(),
            error: vec![format!(
                "Nested type checking failed for parameter '{param}'. Expected outer type {} with inner type {}. Parameter value: {}.",
                expected.name(),
                inner.name(),
                repr(value)
            )],
        };
    }
    if pat.is_some_and(|t| t == Py::of(value)) {
        return Ok(TypeCheck { verdict: v, is_variable: true });
    }
    v.valid = false;
    v.error.push(format!(
        "Incorrect type for parameter '{param}'. Expected type {}, got {}. Parameter value: {}.",
        expected.name(),
        Py::of(value).name(),
        repr(value)
    ));
    v.error_type = "type_error:simple".into();
    Ok(TypeCheck { verdict: v, is_variable })
}

fn string_checker(param: &str, out: &str, possible: &Value) -> Result<Verdict, Raise> {
    let std_possible: Vec<Value> =
        py_items(possible)?.iter().filter_map(|p| p.as_str().map(|s| Value::String(standardize(s)))).collect();
    let s = Value::String(standardize(out));
    if !std_possible.iter().any(|p| py_eq(&s, p)) {
        return Ok(Verdict::bad(
            "value_error:string",
            format!(
                "Invalid value for parameter '{param}': {}. Expected one of {}. Case insensitive.",
                repr(&json!(out)),
                possible
            ),
        ));
    }
    Ok(Verdict::ok())
}

fn list_checker(param: &str, out: &[Value], possible: &Value) -> Result<Verdict, Raise> {
    let std_out = Value::Array(out.iter().map(std_value).collect());
    let mut std_possible = Vec::new();
    for p in py_items(possible)? {
        std_possible.push(Value::Array(py_items(&p)?.iter().map(std_value).collect()));
    }
    if !std_possible.iter().any(|p| py_eq(&std_out, p)) {
        return Ok(Verdict::bad(
            "value_error:list/tuple",
            format!(
                "Invalid value for parameter '{param}': {}. Expected one of {}.",
                repr(&Value::Array(out.to_vec())),
                possible
            ),
        ));
    }
    Ok(Verdict::ok())
}

fn dict_checker(out: &Map<String, Value>, possible: &[Value]) -> Checked {
    let mut result = Verdict { valid: false, error_type: "dict_checker:unclear".into(), error: Vec::new() };
    for pa in possible {
        if pa.as_str() == Some("") {
            continue;
        }
        result = Verdict { valid: false, error_type: "dict_checker:unclear".into(), error: Vec::new() };
        let mut flag = true;
        for (key, value) in out {
            if !py_in(&json!(key), pa)? {
                result.error.push(format!("Unexpected dict key parameter: '{key}'."));
                result.error_type = "value_error:dict_key".into();
                flag = false;
                break;
            }
            let allowed = match pa {
                Value::Object(m) => &m[key],
                _ => return raise("a dict's possible answer is not a dict"),
            };
            let std_allowed: Vec<Value> = py_items(allowed)?.iter().map(std_value).collect();
            let sv = std_value(value);
            if !std_allowed.iter().any(|a| py_eq(&sv, a)) {
                result.error.push(format!(
                    "Invalid value for parameter '{key}': {}. Expected one of {}.",
                    repr(value),
                    Value::Array(std_allowed)
                ));
                result.error_type = "value_error:dict_value".into();
                flag = false;
                break;
            }
        }
        let Value::Object(pm) = pa else {
            return raise("'list' object has no attribute 'items'");
        };
        for (key, allowed) in pm {
            if !out.contains_key(key) && !py_in(&json!(""), allowed)? {
                result.error.push(format!("Missing dict key parameter: '{key}'."));
                result.error_type = "value_error:dict_key".into();
                flag = false;
                break;
            }
        }
        if flag {
            return Ok(Verdict::ok());
        }
    }
    Ok(result)
}

fn list_dict_checker(out: &[Value], possible: &[Value]) -> Checked {
    let mut result = Verdict { valid: false, error_type: "list_dict_checker:unclear".into(), error: Vec::new() };
    for pa in possible {
        if out.len() != py_len(pa)? {
            result = Verdict::bad("value_error:list_dict_count", "Wrong number of dictionaries in the list.".into());
            continue;
        }
        let items = py_items(pa)?;
        let mut flag = true;
        for (o, p) in out.iter().zip(&items) {
            let Value::Object(om) = o else {
                return raise(format!("'{}' object has no attribute 'items'", Py::of(o).name()));
            };
            result = dict_checker(om, std::slice::from_ref(p))?;
            if !result.valid {
                flag = false;
                break;
            }
        }
        if flag {
            return Ok(Verdict::ok());
        }
    }
    Ok(result)
}

/// The name the checker expects for a function (BFCL's `convert_func_name`).
fn expected_name(name: &str, underscore_to_dot: bool) -> String {
    if underscore_to_dot && name.contains('.') {
        name.replace('.', "_")
    } else {
        name.to_string()
    }
}

/// BFCL's `simple_function_checker`: one call (`{name: args}`) against one answer.
fn simple_function_checker(desc: &Value, call: &(String, Map<String, Value>), answer: &Value, u2d: bool) -> Checked {
    let Some(possible) = answer.as_object().and_then(|o| o.values().next()) else {
        return raise("an answer is not `{name: {param: [values]}}`");
    };
    let Some(possible) = possible.as_object() else {
        return raise("an answer's parameters are not a dict");
    };
    let Some(name) = desc.get("name").and_then(Value::as_str) else {
        return raise("a function without a `name`");
    };
    let Some(details) = desc.pointer("/parameters/properties").and_then(Value::as_object) else {
        return raise(format!("function `{name}`: no `parameters.properties`"));
    };
    let Some(required) = desc.pointer("/parameters/required") else {
        return raise(format!("function `{name}`: no `parameters.required`"));
    };
    let name = expected_name(name, u2d);
    if call.0 != name {
        return Ok(Verdict::bad(
            "simple_function_checker:wrong_func_name",
            format!("Function name '{name}' not found in model output."),
        ));
    }
    let params = &call.1;
    for p in py_items(required)? {
        if !params.contains_key(p.as_str().unwrap_or_default()) {
            return Ok(Verdict::bad(
                "simple_function_checker:missing_required",
                format!("Missing required parameter: {}.", repr(&p)),
            ));
        }
    }
    for (param, value) in params {
        let (Some(detail), Some(allowed)) = (details.get(param), possible.get(param)) else {
            return Ok(Verdict::bad(
                "simple_function_checker:unexpected_param",
                format!("Unexpected parameter: '{param}'."),
            ));
        };
        let Some(tdesc) = detail.get("type").and_then(Value::as_str) else {
            return raise(format!("parameter `{param}` has no `type`"));
        };
        let Some(expected) = Py::from_bfcl(tdesc) else {
            return raise(format!("parameter `{param}`: unknown type `{tdesc}`"));
        };
        let nested = if matches!(tdesc, "array" | "tuple") {
            let Some(it) = detail.pointer("/items/type").and_then(Value::as_str) else {
                return raise(format!("parameter `{param}`: an array without `items.type`"));
            };
            Some(Py::from_bfcl(it).ok_or_else(|| Raise(format!("parameter `{param}`: unknown item type `{it}`")))?)
        } else {
            None
        };
        // Python's int → float conversion where a float is expected.
        let converted;
        let value = match (tdesc, value) {
            ("float", Value::Number(n)) if !n.is_f64() => {
                converted = json!(n.as_f64().unwrap_or(f64::NAN));
                &converted
            }
            _ => value,
        };
        let tc = type_checker(param, value, allowed, expected, nested)?;
        if !tc.verdict.valid {
            return Ok(tc.verdict);
        }
        if !tc.is_variable {
            let allowed_items = || py_items(allowed);
            let v = match (expected, value) {
                (Py::Dict, Value::Object(o)) => Some(dict_checker(o, &allowed_items()?)?),
                (Py::List, Value::Array(items)) if nested == Some(Py::Dict) => {
                    Some(list_dict_checker(items, &allowed_items()?)?)
                }
                (Py::Str, Value::String(s)) => Some(string_checker(param, s, allowed)?),
                (Py::List, Value::Array(items)) => Some(list_checker(param, items, allowed)?),
                _ => None,
            };
            if let Some(v) = v {
                if !v.valid {
                    return Ok(v);
                }
                continue;
            }
        }
        if !py_in(value, allowed)? {
            return Ok(Verdict::bad(
                "value_error:others",
                format!("Invalid value for parameter '{param}': {}. Expected one of {allowed}.", repr(value)),
            ));
        }
    }
    for (param, allowed) in possible {
        if !params.contains_key(param) && !py_in(&json!(""), allowed)? {
            return Ok(Verdict::bad(
                "simple_function_checker:missing_optional",
                format!("Optional parameter '{param}' not provided and not marked as optional."),
            ));
        }
    }
    Ok(Verdict::ok())
}

fn find_description<'a>(functions: &'a [Value], name: &str) -> Option<&'a Value> {
    functions.iter().find(|f| f.get("name").and_then(Value::as_str) == Some(name))
}

fn answer_name(answer: &Value) -> Result<&str, Raise> {
    answer
        .as_object()
        .and_then(|o| o.keys().next())
        .map(String::as_str)
        .ok_or_else(|| Raise("an answer is not `{name: …}`".into()))
}

/// BFCL's `ast_checker` for a Python category.
fn ast_checker(
    functions: &[Value],
    calls: &[(String, Map<String, Value>)],
    answers: &[Value],
    category: &str,
    u2d: bool,
) -> Checked {
    if category.contains("parallel") {
        if calls.len() != answers.len() {
            return Ok(Verdict::bad(
                "parallel_function_checker_no_order:wrong_count",
                "Wrong number of functions.".into(),
            ));
        }
        let mut matched = vec![false; calls.len()];
        for (i, a) in answers.iter().enumerate() {
            let desc = find_description(functions, answer_name(a)?)
                .ok_or_else(|| Raise("an answer names no function".into()))?;
            let mut errors = Vec::new();
            let mut found = false;
            for (j, c) in calls.iter().enumerate() {
                if matched[j] {
                    continue;
                }
                let r = simple_function_checker(desc, c, a, u2d)?;
                if r.valid {
                    matched[j] = true;
                    found = true;
                    break;
                }
                errors.push(format!("model result {j}: {} ({})", r.error.join(" "), r.error_type));
            }
            if !found {
                let mut error = vec![format!(
                    "Could not find a matching function among the model's unmatched calls for answer {i}."
                )];
                error.extend(errors);
                return Ok(Verdict {
                    valid: false,
                    error_type: "parallel_function_checker_no_order:cannot_find_match".into(),
                    error,
                });
            }
        }
        Ok(Verdict::ok())
    } else if category.contains("multiple") {
        if calls.len() != answers.len() {
            return Ok(Verdict::bad("multiple_function_checker:wrong_count", "Wrong number of functions.".into()));
        }
        let Some(a) = answers.first() else { return Ok(Verdict::ok()) };
        let desc =
            find_description(functions, answer_name(a)?).ok_or_else(|| Raise("the answer names no function".into()))?;
        simple_function_checker(desc, &calls[0], a, u2d)
    } else {
        if calls.len() != 1 {
            return Ok(Verdict::bad("simple_function_checker:wrong_count", "Wrong number of functions.".into()));
        }
        let desc = functions.first().ok_or_else(|| Raise("no function".into()))?;
        let a = answers.first().ok_or_else(|| Raise("no answer".into()))?;
        simple_function_checker(desc, &calls[0], a, u2d)
    }
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
            if Py::from_bfcl(t).is_none() {
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

    fn check(functions: Value, answers: Value, category: &str, calls: Value) -> Verdict {
        let calls: Vec<(String, Map<String, Value>)> = calls
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let (n, a) = c.as_object().unwrap().iter().next().unwrap();
                (n.clone(), a.as_object().unwrap().clone())
            })
            .collect();
        ast_checker(functions.as_array().unwrap(), &calls, answers.as_array().unwrap(), category, false).unwrap()
    }

    fn tri() -> Value {
        json!([{"name": "area", "parameters": {"type": "dict", "properties": {
            "base": {"type": "integer"}, "h": {"type": "float"}, "unit": {"type": "string"},
            "flag": {"type": "boolean"}, "xs": {"type": "array", "items": {"type": "integer"}},
            "d": {"type": "dict", "properties": {}}}, "required": ["base"]}}])
    }

    fn ans() -> Value {
        json!([{"area": {"base": [10], "h": [5.0, ""], "unit": ["Square Units", ""], "flag": [true, ""],
            "xs": [[1, 2], ""], "d": [{"a": [1], "b": ["x", ""]}, ""]}}])
    }

    #[test]
    fn python_equality() {
        assert!(py_eq(&json!(1), &json!(1.0)));
        assert!(py_eq(&json!(true), &json!(1)));
        assert!(!py_eq(&json!("1"), &json!(1)));
        assert!(py_eq(&json!([1, {"a": 2.0}]), &json!([1.0, {"a": 2}])));
        assert_eq!(standardize("Square-Units, 'x'"), "squareunits\"x\"");
    }

    #[test]
    fn the_rules() {
        let ok = |c: Value| check(tri(), ans(), "simple_python", c);
        assert!(ok(json!([{"area": {"base": 10}}])).valid);
        // An int for a float; string normalisation; optional dict keys.
        assert!(ok(json!([{"area": {"base": 10, "h": 5, "unit": "square units", "d": {"a": 1}}}])).valid);
        // A float for an int, a bool for an int: wrong types.
        assert_eq!(ok(json!([{"area": {"base": 10.0}}])).error_type, "type_error:simple");
        assert_eq!(ok(json!([{"area": {"base": true}}])).error_type, "type_error:simple");
        assert_eq!(ok(json!([{"area": {"h": 5.0}}])).error_type, "simple_function_checker:missing_required");
        assert_eq!(ok(json!([{"area": {"base": 10, "z": 1}}])).error_type, "simple_function_checker:unexpected_param");
        assert_eq!(ok(json!([{"area": {"base": 11}}])).error_type, "value_error:others");
        assert_eq!(ok(json!([{"area": {"base": 10, "xs": [2, 1]}}])).error_type, "value_error:list/tuple");
        // `""` among the allowed values skips the item types (as in BFCL); without it they are checked.
        assert_eq!(ok(json!([{"area": {"base": 10, "xs": [1, "a"]}}])).error_type, "value_error:list/tuple");
        let strict = json!([{"area": {"base": [10], "xs": [[1, 2]]}}]);
        let v = check(tri(), strict, "simple_python", json!([{"area": {"base": 10, "xs": [1, "a"]}}]));
        assert_eq!(v.error_type, "type_error:nested");
        assert_eq!(ok(json!([{"area": {"base": 10, "d": {"a": 1, "c": 2}}}])).error_type, "value_error:dict_key");
        assert_eq!(ok(json!([{"area": {"base": 10, "d": {"a": 2}}}])).error_type, "value_error:dict_value");
        assert_eq!(ok(json!([{"arena": {"base": 10}}])).error_type, "simple_function_checker:wrong_func_name");
        assert_eq!(ok(json!([])).error_type, "simple_function_checker:wrong_count");
    }

    #[test]
    fn parallel_matches_in_any_order() {
        let answers = json!([{"area": {"base": [1]}}, {"area": {"base": [2]}}]);
        let p = |c: Value| check(tri(), answers.clone(), "parallel", c);
        assert!(p(json!([{"area": {"base": 2}}, {"area": {"base": 1}}])).valid);
        assert!(!p(json!([{"area": {"base": 2}}, {"area": {"base": 2}}])).valid);
        assert!(!p(json!([{"area": {"base": 1}}])).valid);
    }

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

    #[test]
    fn dotted_names_follow_the_mode() {
        let f = json!([{"name": "math.f", "parameters": {"properties": {}, "required": []}}]);
        let a = json!([{"math.f": {}}]);
        let call = |n: &str| vec![(n.to_string(), Map::new())];
        let f = f.as_array().unwrap();
        let a = a.as_array().unwrap();
        assert!(ast_checker(f, &call("math.f"), a, "simple_python", false).unwrap().valid);
        assert!(!ast_checker(f, &call("math_f"), a, "simple_python", false).unwrap().valid);
        assert!(ast_checker(f, &call("math_f"), a, "simple_python", true).unwrap().valid);
        assert!(!ast_checker(f, &call("math.f"), a, "simple_python", true).unwrap().valid);
    }
}
