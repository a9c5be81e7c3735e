//! Prompt datasets as they exist in the field, mapped onto prompt records.
//!
//! * slime-style JSONL: `prompt` (text or chat messages), `label`, `metadata`.
//! * verl-style Parquet: `prompt` as a chat-message list, `data_source`,
//!   `reward_model.ground_truth` (→ `label`), `extra_info` (kept as is).
//! * Other layouts: `--prompt-key` / `--label-key` name the columns, with
//!   dots for nested keys (`--label-key reward_model.ground_truth`).
//!
//! Every prompt gets a `prompt_id`: its `prompt_id` or `id` column, else
//! `<file stem>:<row>` (row counted from 0 over the file's records).
use crate::record::{FieldError, Record};
use serde_json::Value;

/// Which columns of a prompt dataset hold the prompt and the label
/// (`--prompt-key`, `--label-key`); `None` is the default layout.
#[derive(Debug, Clone, Default)]
pub struct PromptKeys {
    /// Column holding the prompt (text or chat messages); dots reach into objects.
    pub prompt_key: Option<String>,
    /// Column holding the ground truth; default: `label`, else `reward_model.ground_truth`.
    pub label_key: Option<String>,
}

/// Looks up a dotted path in a record's fields (known or extra).
pub fn lookup(rec: &Record, path: &str) -> Option<Value> {
    let mut parts = path.split('.');
    let first = parts.next()?;
    let mut cur = match rec.extra.get(first) {
        Some(v) => v.clone(),
        // A field of the schema: through the record's JSON form. (Any other
        // name is absent: not serialising the record for it saved a tenth of
        // preparing a prompt in arl-rollout, which looks up
        // `reward_model.ground_truth` in every row without a label.)
        None if crate::record::FIELDS.iter().any(|(name, _)| *name == first) => rec.to_value().get(first)?.clone(),
        None => return None,
    };
    for p in parts {
        cur = match cur {
            Value::Object(mut m) => m.remove(p)?,
            Value::Array(a) => a.into_iter().nth(p.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Normalises one dataset row into a prompt record. A row that cannot be
/// one comes back unchanged with the reason (for the rejects file).
pub fn to_prompt(mut rec: Record, row: u64, stem: &str, args: &PromptKeys) -> Result<Record, (Record, FieldError)> {
    // The prompt the row had, put back if the label then fails.
    let mut original_prompt = None;
    if let Some(key) = args.prompt_key.as_deref().filter(|k| *k != "prompt") {
        let prompt = match lookup(&rec, key) {
            Some(Value::String(s)) => s,
            Some(v @ Value::Array(_)) => v.to_string(),
            Some(other) => {
                let e = FieldError::new(
                    key,
                    format!("expected a string or chat messages, got {}", crate::record::json_type(&other)),
                );
                return Err((rec, e));
            }
            None => return Err((rec, FieldError::new(key, "missing (named by --prompt-key)"))),
        };
        original_prompt = Some(rec.prompt.replace(prompt));
    }
    if rec.prompt.is_none() {
        return Err((rec, FieldError::new("prompt", "missing (use --prompt-key to name another column)")));
    }
    match args.label_key.as_deref() {
        Some(key) if key != "label" => match lookup(&rec, key) {
            Some(v) => rec.label = Some(v),
            None => {
                if let Some(p) = original_prompt {
                    rec.prompt = p;
                }
                return Err((rec, FieldError::new(key, "missing (named by --label-key)")));
            }
        },
        _ => {
            if rec.label.is_none() {
                rec.label = lookup(&rec, "reward_model.ground_truth");
            }
        }
    }
    if rec.prompt_id.is_none() {
        rec.prompt_id = Some(match rec.extra.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => format!("{stem}:{row}"),
        });
    }
    Ok(rec)
}

/// Parses a prompt that may be chat messages in JSON text.
pub fn prompt_messages(prompt: &str) -> Option<Vec<Value>> {
    let t = prompt.trim_start();
    if !t.starts_with('[') {
        return None;
    }
    match serde_json::from_str::<Value>(prompt) {
        Ok(Value::Array(a)) if a.iter().all(|m| m.get("role").is_some()) => Some(a),
        _ => None,
    }
}

/// The file stem used in default prompt ids.
pub fn stem_of(path: &std::path::Path) -> String {
    if path == std::path::Path::new("-") {
        return "stdin".to_string();
    }
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "input".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verl_row_maps_ground_truth_and_id() {
        let rec = Record::from_json_slice(
            br#"{"data_source":"openai/gsm8k","prompt":[{"role":"user","content":"1+1?"}],"reward_model":{"style":"rule","ground_truth":"2"},"extra_info":{"index":3}}"#,
        )
        .unwrap();
        let p = to_prompt(rec, 3, "train", &PromptKeys::default()).map_err(|(_, e)| e).unwrap();
        assert_eq!(p.label, Some(Value::String("2".into())));
        assert_eq!(p.prompt_id.as_deref(), Some("train:3"));
        assert_eq!(prompt_messages(p.prompt.as_deref().unwrap()).unwrap().len(), 1);
    }

    #[test]
    fn custom_keys() {
        let rec = Record::from_json_slice(br#"{"id":7,"question":"q","answer":{"v":"a"}}"#).unwrap();
        let args = PromptKeys { prompt_key: Some("question".into()), label_key: Some("answer.v".into()) };
        let p = to_prompt(rec, 0, "x", &args).map_err(|(_, e)| e).unwrap();
        assert_eq!(p.prompt.as_deref(), Some("q"));
        assert_eq!(p.label, Some(Value::String("a".into())));
        assert_eq!(p.prompt_id.as_deref(), Some("7"));
    }

    #[test]
    fn a_rejected_row_comes_back_unchanged() {
        let text = br#"{"id":7,"prompt":"p","question":"q","answer":{"v":"a"}}"#;
        for (prompt_key, label_key, field) in [
            (Some("question"), Some("answer.w"), "answer.w"),
            (Some("missing"), None, "missing"),
            (Some("answer"), None, "answer"),
        ] {
            let args = PromptKeys { prompt_key: prompt_key.map(Into::into), label_key: label_key.map(Into::into) };
            let (back, e) = to_prompt(Record::from_json_slice(text).unwrap(), 0, "x", &args).unwrap_err();
            assert_eq!(back, Record::from_json_slice(text).unwrap());
            assert_eq!(e.field.as_deref(), Some(field));
        }
        let (_, e) =
            to_prompt(Record::from_json_slice(br#"{"id":1}"#).unwrap(), 0, "x", &PromptKeys::default()).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("prompt"));
    }
}
