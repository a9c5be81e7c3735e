//! A record's `tools` field (docs/DESIGN.md §3): the tool schemas offered
//! to the model for that record, as OpenAI tool objects. [`tool_objects`]
//! checks them and writes each in the one form the chat templates and the
//! tool header read: `{"type": "function", "function": {"name", "description",
//! "parameters"}}` (a bare `{"name", …}` object is wrapped; a missing
//! `parameters` becomes an empty object schema).
use serde_json::{json, Value};

/// The tool objects of a `tools` value, each in the OpenAI form, or why
/// they cannot be read (naming the item). Names must be unique.
pub fn tool_objects(tools: &Value) -> Result<Vec<Value>, String> {
    let items = tools.as_array().ok_or("expected a list of tool objects")?;
    let mut out = Vec::with_capacity(items.len());
    let mut names = std::collections::HashSet::new();
    for (i, t) in items.iter().enumerate() {
        let at = |why: String| format!("item {i}: {why}");
        let obj = t.as_object().ok_or_else(|| at("expected a tool object".into()))?;
        let f = match obj.get("type").and_then(Value::as_str) {
            Some("function") => obj.get("function").ok_or_else(|| at("`type: function` without `function`".into()))?,
            Some(other) => return Err(at(format!("unknown tool type `{other}` (only `function`)"))),
            None if obj.contains_key("function") => &obj["function"],
            None => t,
        };
        let f = f.as_object().ok_or_else(|| at("`function` must be an object".into()))?;
        let name = match f.get("name") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(at("`name` must be a non-empty string".into())),
        };
        if !names.insert(name.clone()) {
            return Err(at(format!("tool `{name}` is given twice")));
        }
        let mut func = serde_json::Map::new();
        func.insert("name".into(), Value::String(name.clone()));
        match f.get("description") {
            None | Some(Value::Null) => {}
            Some(Value::String(d)) => {
                func.insert("description".into(), Value::String(d.clone()));
            }
            Some(_) => return Err(at(format!("tool `{name}`: `description` must be a string"))),
        }
        let params = match f.get("parameters") {
            None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => return Err(at(format!("tool `{name}`: `parameters` must be a JSON-schema object"))),
        };
        func.insert("parameters".into(), params);
        for (k, v) in f {
            if !matches!(k.as_str(), "name" | "description" | "parameters") {
                func.insert(k.clone(), v.clone());
            }
        }
        out.push(json!({"type": "function", "function": Value::Object(func)}));
    }
    Ok(out)
}

/// The name of an OpenAI tool object.
pub fn tool_name(t: &Value) -> Option<&str> {
    t.get("function").unwrap_or(t).get("name").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_bare_objects_and_keeps_openai_ones() {
        let v = json!([
            {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}},
            {"type": "function", "function": {"name": "g"}},
        ]);
        let t = tool_objects(&v).unwrap();
        assert_eq!(t[0]["function"]["name"], "f");
        assert_eq!(t[0]["type"], "function");
        assert_eq!(t[1]["function"]["parameters"], json!({"type": "object", "properties": {}}));
        assert_eq!(tool_name(&t[1]), Some("g"));
    }

    #[test]
    fn bad_schemas_name_the_item() {
        let e = tool_objects(&json!([{"name": "f"}, {"description": "no name"}])).unwrap_err();
        assert!(e.starts_with("item 1:"), "{e}");
        let e = tool_objects(&json!([{"name": "f", "parameters": "x"}])).unwrap_err();
        assert!(e.contains("`parameters`"), "{e}");
        let e = tool_objects(&json!([{"name": "f"}, {"name": "f"}])).unwrap_err();
        assert!(e.contains("twice"), "{e}");
        assert!(tool_objects(&json!({"name": "f"})).is_err());
    }
}
