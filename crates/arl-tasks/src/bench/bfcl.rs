//! BFCL v4's single-turn Python categories as prompt records
//! (`arl-tasks import bfcl:CATEGORY`), read from the unpacked
//! `bfcl-eval` package (`scripts/fetch-benchmarks.sh`):
//! `bfcl_eval/data/BFCL_v4_<category>.json` and its answers in
//! `bfcl_eval/data/possible_answer/`.
//!
//! Each record is scored by `arl-reward --rm bfcl` the way BFCL scores a
//! function-calling (FC) model:
//! * `prompt`: the item's messages (JSON text), as BFCL sends them;
//! * `tools`: the item's functions as OpenAI tool objects, as BFCL's FC
//!   handlers offer them: BFCL's types mapped to JSON schema (`dict` →
//!   `object`, `float` → `number` with `format: float`, `tuple` → `array`,
//!   `any` → `string`), the language hint appended to each description
//!   ("Note that the provided function is in Python 3 syntax."), and with
//!   `--underscore-names` each `.` in a name written `_` (BFCL's mode for
//!   models whose tool names cannot hold a dot; the checker then expects the
//!   `_` form);
//! * `label`: `{category, functions, ground_truth, underscore_to_dot}`: the
//!   functions as BFCL's checker reads them (BFCL's own types) and the
//!   possible answers (`ground_truth`: per call `{name: {param: [allowed
//!   values]}}`, `""` allowed = may be omitted); the no-call categories
//!   (`irrelevance`, `live_irrelevance`) and `live_relevance` have none.
//!
//! Java and JavaScript (`simple_java`, `simple_javascript`) are not
//! imported: their checker parses argument strings in those languages'
//! syntax. The multi-turn, memory, web-search and format-sensitivity
//! categories need more than one turn or outside services.
use super::Doc;
use anyhow::{bail, Context, Result};
use arl_core::record::Record;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// The categories `import bfcl:CATEGORY` reads, and whether each has ground truth.
pub const CATEGORIES: [(&str, Gold); 11] = [
    ("simple_python", Gold::Calls),
    ("multiple", Gold::Calls),
    ("parallel", Gold::Calls),
    ("parallel_multiple", Gold::Calls),
    ("live_simple", Gold::Calls),
    ("live_multiple", Gold::Calls),
    ("live_parallel", Gold::Calls),
    ("live_parallel_multiple", Gold::Calls),
    ("irrelevance", Gold::NoCall),
    ("live_irrelevance", Gold::NoCall),
    ("live_relevance", Gold::AnyCall),
];

/// What a category counts as right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gold {
    /// The calls in `ground_truth`.
    Calls,
    /// No call.
    NoCall,
    /// Any call.
    AnyCall,
}

/// The hint BFCL appends to every Python function's description.
pub const PYTHON_HINT: &str = " Note that the provided function is in Python 3 syntax.";

/// A category's name and gold, or an error naming the known ones.
pub fn category(name: &str) -> Result<(&'static str, Gold), String> {
    CATEGORIES.iter().find(|(c, _)| *c == name).copied().ok_or_else(|| {
        let known: Vec<&str> = CATEGORIES.iter().map(|(c, _)| *c).collect();
        let why = if matches!(name, "simple_java" | "simple_javascript") {
            " (Java and JavaScript are not imported)"
        } else if name.starts_with("multi_turn") || matches!(name, "memory" | "web_search" | "format_sensitivity") {
            " (multi-turn and agentic categories are not imported)"
        } else {
            ""
        };
        format!("unknown BFCL category `{name}`{why}; known: {}", known.join(", "))
    })
}

/// The package's data directory under the benchmarks directory.
pub fn data_dir(dir: &Path) -> PathBuf {
    dir.join("bfcl-eval/bfcl_eval/data")
}

/// Reads a BFCL file (JSON Lines despite its `.json` name).
fn read_lines(path: &Path) -> Result<Vec<Doc>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {} (run `make benchmarks` to fetch BFCL)", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let doc: Value =
            serde_json::from_str(line).with_context(|| format!("{}:{}: not a JSON object", path.display(), i + 1))?;
        out.push(Doc { doc, file: path.to_path_buf(), line: i + 1 });
    }
    Ok(out)
}

/// The records of one category; with `solutions`, `response` holds the
/// ground truth written as `qwen25` tool calls (one concrete value per
/// allowed list), or a reply with no call for the no-call categories
/// (`live_relevance` has no reference).
pub fn import(dir: &Path, name: &str, solutions: bool, underscore: bool) -> Result<Vec<Record>> {
    let (cat, gold) = category(name).map_err(anyhow::Error::msg)?;
    let data = data_dir(dir);
    let items = read_lines(&data.join(format!("BFCL_v4_{cat}.json")))?;
    let answers = match gold {
        Gold::Calls => Some(read_lines(&data.join(format!("possible_answer/BFCL_v4_{cat}.json")))?),
        _ => None,
    };
    if let Some(a) = &answers {
        if a.len() != items.len() {
            bail!("BFCL {cat}: {} items but {} answers", items.len(), a.len());
        }
    }
    let mut out = Vec::with_capacity(items.len());
    for (k, d) in items.iter().enumerate() {
        let id = d.text("id")?;
        let loc = || format!("{}:{}", d.file.display(), d.line);
        let question = d
            .doc
            .get("question")
            .and_then(Value::as_array)
            .with_context(|| format!("{}: no `question` list", loc()))?;
        if question.len() != 1 {
            bail!("{}: {} turns; only single-turn items are imported", loc(), question.len());
        }
        let messages =
            question[0].as_array().with_context(|| format!("{}: `question[0]` is not a message list", loc()))?;
        let functions = d
            .doc
            .get("function")
            .and_then(Value::as_array)
            .with_context(|| format!("{}: no `function` list", loc()))?;
        let tools = functions
            .iter()
            .map(|f| {
                openai_tool(f, underscore)
                    .with_context(|| format!("{}: function {}", loc(), f.get("name").unwrap_or(&Value::Null)))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut label = Map::new();
        label.insert("category".into(), json!(cat));
        label.insert("functions".into(), Value::Array(functions.clone()));
        let mut truth = None;
        if let Some(a) = &answers {
            let ad = &a[k];
            let aid = ad.text("id")?;
            if aid != id {
                bail!("{}:{}: answer `{aid}` where `{id}` was expected", ad.file.display(), ad.line);
            }
            let gt = ad
                .doc
                .get("ground_truth")
                .and_then(Value::as_array)
                .with_context(|| format!("{}:{}: no `ground_truth` list", ad.file.display(), ad.line))?;
            truth = Some(gt.clone());
            label.insert("ground_truth".into(), Value::Array(gt.clone()));
        }
        label.insert("underscore_to_dot".into(), json!(underscore));
        let mut r = Record {
            prompt_id: Some(format!("bfcl-{id}")),
            data_source: Some("bfcl".into()),
            prompt: Some(Value::Array(messages.clone()).to_string()),
            label: Some(Value::Object(label)),
            tools: Some(Value::Array(tools)),
            metadata: Some(
                json!({"benchmark": "bfcl", "id": id, "category": cat}).as_object().cloned().unwrap_or_default(),
            ),
            ..Record::default()
        };
        if solutions {
            r.response = match (gold, &truth) {
                (Gold::Calls, Some(gt)) => Some(gold_calls(gt, functions, underscore).with_context(loc)?),
                (Gold::NoCall, _) => Some("None of the functions I have fits this request.".into()),
                _ => None,
            };
        }
        out.push(r);
    }
    Ok(out)
}

/// A BFCL function doc as an OpenAI tool object (BFCL's FC conversion).
pub fn openai_tool(f: &Value, underscore: bool) -> Result<Value> {
    let mut f = f.as_object().cloned().context("expected a function object")?;
    let name = f.get("name").and_then(Value::as_str).context("no string `name`")?.to_string();
    let name = if underscore { name.replace('.', "_") } else { name };
    f.insert("name".into(), json!(name));
    let desc = f.get("description").and_then(Value::as_str).unwrap_or_default();
    f.insert("description".into(), json!(format!("{desc}{PYTHON_HINT}")));
    let mut params = match f.remove("parameters") {
        Some(Value::Object(p)) => p,
        None => Map::new(),
        Some(_) => bail!("`parameters` is not an object"),
    };
    params.insert("type".into(), json!("object"));
    if let Some(Value::Object(props)) = params.get_mut("properties") {
        cast_properties(props);
    }
    f.insert("parameters".into(), Value::Object(params));
    Ok(json!({"type": "function", "function": Value::Object(f)}))
}

/// BFCL's types in JSON-schema terms (`GORILLA_TO_OPENAPI`, Python's part).
fn openapi_type(t: &str) -> &'static str {
    match t {
        "integer" | "byte" | "short" | "long" | "Bigint" => "integer",
        "number" | "float" | "double" => "number",
        "boolean" | "bool" => "boolean",
        "array" | "list" | "tuple" | "ArrayList" | "Array" | "Queue" | "Stack" => "array",
        "dict" | "object" | "HashMap" | "Hashtable" => "object",
        _ => "string",
    }
}

/// Casts each property's schema in place: the type mapped (a missing or
/// unknown one is `string`), floats marked, nested properties and items cast.
fn cast_properties(props: &mut Map<String, Value>) {
    for (_, p) in props.iter_mut() {
        if let Value::Object(p) = p {
            cast_schema(p, true);
        }
    }
}

fn cast_schema(p: &mut Map<String, Value>, is_property: bool) {
    let t = p.get("type").and_then(Value::as_str).unwrap_or("string").to_string();
    if is_property && t == "float" {
        p.insert("format".into(), json!("float"));
        let d = p.get("description").and_then(Value::as_str).unwrap_or_default();
        p.insert("description".into(), json!(format!("{d} This is a float type value.")));
    }
    let mapped = openapi_type(&t);
    p.insert("type".into(), json!(mapped));
    if mapped == "array" || mapped == "object" {
        if let Some(Value::Object(props)) = p.get_mut("properties") {
            cast_properties(props);
        } else if let Some(Value::Object(items)) = p.get_mut("items") {
            cast_schema(items, false);
        }
    }
}

/// The ground truth as `qwen25` tool calls: each call's name (its `_` form
/// with `underscore`) and, per parameter, the first allowed value that is
/// not `""` (a parameter whose only allowed value is `""` is left out, and
/// so is an optional one that the function's schema does not have; a
/// required one whose only allowed value is `""` gets `""`). A
/// `dict` parameter's allowed values are themselves `{key: [values]}`, as
/// are the items of a list of dicts (`functions` gives the types).
pub fn gold_calls(ground_truth: &[Value], functions: &[Value], underscore: bool) -> Result<String> {
    let mut calls = Vec::new();
    for c in ground_truth {
        let (name, params) = c
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.iter().next())
            .context("a ground-truth call is not `{name: {param: [values]}}`")?;
        let props = functions
            .iter()
            .find(|f| f.get("name").and_then(Value::as_str) == Some(name))
            .and_then(|f| f.pointer("/parameters/properties"));
        let call_name = name.as_str();
        let name = if underscore { name.replace('.', "_") } else { name.clone() };
        let params = params.as_object().context("a ground-truth call's parameters are not an object")?;
        let mut args = Map::new();
        for (p, allowed) in params {
            let allowed =
                allowed.as_array().with_context(|| format!("parameter `{p}`: allowed values are not a list"))?;
            let schema = props.and_then(|x| x.get(p));
            let ty = schema.and_then(|s| s.get("type")).and_then(Value::as_str).unwrap_or("");
            let item_ty = schema.and_then(|s| s.pointer("/items/type")).and_then(Value::as_str).unwrap_or("");
            // An optional parameter the function does not have (the
            // answers of a few items list one) is left out.
            if schema.is_none() && allowed.iter().any(|v| v.as_str() == Some("")) {
                continue;
            }
            let required = props.is_some()
                && functions.iter().any(|f| {
                    f.get("name").and_then(Value::as_str) == Some(call_name)
                        && f.pointer("/parameters/required")
                            .and_then(Value::as_array)
                            .is_some_and(|r| r.iter().any(|x| x.as_str() == Some(p)))
                });
            // A required parameter whose only allowed value is `""`: that value.
            let empty = json!("");
            let chosen = first_concrete(allowed).or_else(|| (required && allowed.contains(&empty)).then_some(&empty));
            if let Some(v) = chosen {
                let v = match (ty, v) {
                    ("dict", Value::Object(o)) => resolve_dict(o),
                    ("array" | "tuple", Value::Array(items)) if item_ty == "dict" => Value::Array(
                        items.iter().map(|x| x.as_object().map_or_else(|| x.clone(), resolve_dict)).collect(),
                    ),
                    (_, v) => v.clone(),
                };
                args.insert(p.clone(), v);
            }
        }
        calls.push(format!("<tool_call>\n{}\n</tool_call>", json!({"name": name, "arguments": args})));
    }
    Ok(calls.join("\n"))
}

/// The first allowed value that is not `""` (the optional marker).
fn first_concrete(allowed: &[Value]) -> Option<&Value> {
    allowed.iter().find(|v| v.as_str() != Some(""))
}

/// A dict whose values are lists of allowed values, as one concrete dict
/// (a key with only `""` allowed left out).
fn resolve_dict(o: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    for (k, x) in o {
        match x {
            Value::Array(vals) => {
                if let Some(first) = first_concrete(vals) {
                    out.insert(k.clone(), first.clone());
                }
            }
            other => {
                out.insert(k.clone(), other.clone());
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_take_openapi_types() {
        let f = json!({"name": "a.b", "description": "D.", "parameters": {"type": "dict", "properties": {
            "x": {"type": "float", "description": "X."},
            "t": {"type": "tuple", "items": {"type": "integer"}, "description": "T."},
            "d": {"type": "dict", "properties": {"k": {"type": "any", "description": "K."}}, "description": "D."}
        }, "required": ["x"]}});
        let t = openai_tool(&f, true).unwrap();
        let g = &t["function"];
        assert_eq!(g["name"], "a_b");
        assert_eq!(g["description"], format!("D.{PYTHON_HINT}"));
        assert_eq!(g["parameters"]["type"], "object");
        let p = &g["parameters"]["properties"];
        assert_eq!(p["x"]["type"], "number");
        assert_eq!(p["x"]["format"], "float");
        assert_eq!(p["t"]["type"], "array");
        assert_eq!(p["d"]["type"], "object");
        assert_eq!(p["d"]["properties"]["k"]["type"], "string");
        assert_eq!(openai_tool(&f, false).unwrap()["function"]["name"], "a.b");
    }

    #[test]
    fn gold_takes_the_first_concrete_value() {
        let gt = [json!({"math.hypot": {"x": [4], "y": [5, 6], "z": ["", 0], "w": [""],
            "d": [{"k": ["", "v"], "j": [[1, 2]]}], "l": [[[1, 2]]]}})];
        let f = [
            json!({"name": "math.hypot", "parameters": {"properties": {"x": {"type": "integer"}, "y": {"type": "integer"},
            "z": {"type": "integer"}, "d": {"type": "dict"}, "l": {"type": "array"}}}}),
        ];
        let s = gold_calls(&gt, &f, false).unwrap();
        let body = s.strip_prefix("<tool_call>\n").unwrap().strip_suffix("\n</tool_call>").unwrap();
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["name"], "math.hypot");
        assert_eq!(v["arguments"], json!({"x": 4, "y": 5, "z": 0, "d": {"k": "v", "j": [1, 2]}, "l": [[1, 2]]}));
    }

    #[test]
    fn unknown_categories_name_the_known_ones() {
        let e = category("simple_java").unwrap_err();
        assert!(e.contains("Java") && e.contains("simple_python"), "{e}");
        assert!(category("live_simple").is_ok());
    }
}
