//! BFCL's AST checker rules (`ast_checker.py`), with Python's semantics of
//! the JSON values they compare: see the module above for what they decide.
use serde_json::{json, Map, Value};

/// A verdict, as BFCL's checker returns it: `valid`, an `error_type` and the errors.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub valid: bool,
    pub error_type: String,
    pub error: Vec<String>,
}

impl Verdict {
    pub(super) fn ok() -> Verdict {
        Verdict { valid: true, error_type: String::new(), error: Vec::new() }
    }
    pub(super) fn bad(error_type: &str, error: String) -> Verdict {
        Verdict { valid: false, error_type: error_type.into(), error: vec![error] }
    }
}

/// Where BFCL's code would raise: the answer or schema has a shape it does not expect.
#[derive(Debug)]
pub(super) struct Raise(pub(super) String);

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
pub(super) fn ast_checker(
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

/// Whether `t` is one of BFCL's Python types (`PYTHON_TYPE_MAPPING`).
pub(super) fn bfcl_type_known(t: &str) -> bool {
    Py::from_bfcl(t).is_some()
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
