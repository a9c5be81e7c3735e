//! The trajectory record: the one contract between arl's binaries (docs/DESIGN.md §3).
//!
//! Every field is optional because records grow as they move down the pipeline
//! (a prompt record has no `tokens`; `advantages` appear only after
//! `arl-advantage`). Fields this type does not know are kept verbatim in
//! [`Record::extra`] so a tool passes them through unchanged, in both formats.
//!
//! JSON (de)serialisation is written by hand rather than derived: it is the
//! hot path of every tool, it must name the field that failed, and unknown
//! keys must be captured without serde's buffering `flatten`.
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// How an episode ended (`status` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    Completed,
    Truncated,
    Aborted,
    Failed,
}

impl Status {
    pub const ALL: [Status; 4] = [Status::Completed, Status::Truncated, Status::Aborted, Status::Failed];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::Truncated => "truncated",
            Status::Aborted => "aborted",
            Status::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One sampled trajectory (or, before rollout, one prompt).
///
/// Per-response-token lists (`loss_mask`, `rollout_log_probs`, `ref_log_probs`,
/// `values`, `advantages`, `returns`) have one entry per token of
/// `tokens[prompt_len..]`; [`Record::validate`] checks it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Record {
    pub prompt_id: Option<String>,
    pub sample_index: Option<u32>,
    pub data_source: Option<String>,
    /// Prompt text, or chat messages serialised as JSON text.
    pub prompt: Option<String>,
    pub label: Option<Value>,
    pub tokens: Option<Vec<u32>>,
    pub prompt_len: Option<u32>,
    pub response: Option<String>,
    pub loss_mask: Option<Vec<u8>>,
    pub rollout_log_probs: Option<Vec<f32>>,
    pub status: Option<Status>,
    pub finish_reason: Option<String>,
    pub turns: Option<u32>,
    pub tool_calls: Option<u32>,
    pub weight_versions: Option<Vec<String>>,
    pub reward: Option<f32>,
    pub reward_detail: Option<Value>,
    pub ref_log_probs: Option<Vec<f32>>,
    pub values: Option<Vec<f32>>,
    pub advantages: Option<Vec<f32>>,
    pub returns: Option<Vec<f32>>,
    pub metadata: Option<Map<String, Value>>,
    pub messages: Option<Value>,
    /// Tool schemas offered to the model for this record (OpenAI tool
    /// objects), a JSON list; [`Record::tool_schemas`] reads them.
    pub tools: Option<Value>,
    /// Fields arl does not own, kept in input order and written back unchanged.
    pub extra: Map<String, Value>,
    /// Not part of the record: the Parquet row it was read from, set only by
    /// a projected read (`RecordReader::open_projected`), so that a
    /// pass-through writer can add back the columns that were not read.
    pub source_row: Option<u64>,
}

/// The kind of value a known field holds; used for error messages and the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    Str,
    U32,
    F32,
    Json,
    JsonObject,
    ListU32,
    ListU8,
    ListF32,
    ListStr,
}

impl FieldKind {
    pub fn expected(self) -> &'static str {
        match self {
            FieldKind::Str => "a string",
            FieldKind::U32 => "an unsigned 32-bit integer",
            FieldKind::F32 => "a number",
            FieldKind::Json => "any JSON value",
            FieldKind::JsonObject => "a JSON object",
            FieldKind::ListU32 => "a list of unsigned 32-bit integers",
            FieldKind::ListU8 => "a list of 0/1 integers",
            FieldKind::ListF32 => "a list of numbers",
            FieldKind::ListStr => "a list of strings",
        }
    }
}

/// Known fields in schema order: the order of columns in Parquet and of keys in JSONL.
pub const FIELDS: &[(&str, FieldKind)] = &[
    ("prompt_id", FieldKind::Str),
    ("sample_index", FieldKind::U32),
    ("data_source", FieldKind::Str),
    ("prompt", FieldKind::Str),
    ("label", FieldKind::Json),
    ("tokens", FieldKind::ListU32),
    ("prompt_len", FieldKind::U32),
    ("response", FieldKind::Str),
    ("loss_mask", FieldKind::ListU8),
    ("rollout_log_probs", FieldKind::ListF32),
    ("status", FieldKind::Str),
    ("finish_reason", FieldKind::Str),
    ("turns", FieldKind::U32),
    ("tool_calls", FieldKind::U32),
    ("weight_versions", FieldKind::ListStr),
    ("reward", FieldKind::F32),
    ("reward_detail", FieldKind::Json),
    ("ref_log_probs", FieldKind::ListF32),
    ("values", FieldKind::ListF32),
    ("advantages", FieldKind::ListF32),
    ("returns", FieldKind::ListF32),
    ("metadata", FieldKind::JsonObject),
    ("messages", FieldKind::Json),
    ("tools", FieldKind::Json),
];

/// A record that failed to parse or validate: which field, and what was wrong.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The offending field, when the problem is with one field.
    pub field: Option<String>,
    pub message: String,
}

impl FieldError {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError { field: Some(field.into()), message: message.into() }
    }
    pub fn whole(message: impl Into<String>) -> Self {
        FieldError { field: None, message: message.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "field `{field}`: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for FieldError {}

impl Record {
    /// Number of response tokens (`tokens.len() - prompt_len`), when both are known.
    pub fn response_len(&self) -> Option<usize> {
        let t = self.tokens.as_ref()?;
        let p = self.prompt_len? as usize;
        t.len().checked_sub(p)
    }

    /// The response token ids.
    pub fn response_tokens(&self) -> Option<&[u32]> {
        let t = self.tokens.as_ref()?;
        let p = self.prompt_len? as usize;
        t.get(p..)
    }

    /// Number of trainable response tokens (mask 1).
    pub fn trainable_tokens(&self) -> usize {
        self.loss_mask.as_ref().map(|m| m.iter().filter(|&&x| x != 0).count()).unwrap_or(0)
    }

    /// `metadata[key]`, if present.
    pub fn meta(&self, key: &str) -> Option<&Value> {
        self.metadata.as_ref()?.get(key)
    }

    /// Sets `metadata[key]`, creating the object when needed.
    pub fn set_meta(&mut self, key: &str, v: Value) {
        self.metadata.get_or_insert_with(Map::new).insert(key.to_string(), v);
    }

    /// Checks the invariants between fields: `prompt_len <= len(tokens)`, every
    /// per-response-token list as long as the response, and mask values 0/1.
    pub fn validate(&self) -> Result<(), FieldError> {
        if let (Some(t), Some(p)) = (&self.tokens, self.prompt_len) {
            if p as usize > t.len() {
                return Err(FieldError::new(
                    "prompt_len",
                    format!("prompt_len {p} is larger than len(tokens) {}", t.len()),
                ));
            }
        }
        let want = self.response_len();
        let lists: [(&str, Option<usize>); 6] = [
            ("loss_mask", self.loss_mask.as_ref().map(Vec::len)),
            ("rollout_log_probs", self.rollout_log_probs.as_ref().map(Vec::len)),
            ("ref_log_probs", self.ref_log_probs.as_ref().map(Vec::len)),
            ("values", self.values.as_ref().map(Vec::len)),
            ("advantages", self.advantages.as_ref().map(Vec::len)),
            ("returns", self.returns.as_ref().map(Vec::len)),
        ];
        let mut first: Option<(&str, usize)> = None;
        for (name, len) in lists {
            let Some(len) = len else { continue };
            match want {
                Some(w) if w != len => {
                    return Err(FieldError::new(
                        name,
                        format!("has {len} entries but the response has {w} tokens (len(tokens) - prompt_len)"),
                    ))
                }
                Some(_) => {}
                None => match first {
                    Some((other, l)) if l != len => {
                        return Err(FieldError::new(
                            name,
                            format!("has {len} entries but `{other}` has {l}; per-token lists must have one entry per response token"),
                        ))
                    }
                    Some(_) => {}
                    None => first = Some((name, len)),
                },
            }
        }
        if let Some(m) = &self.loss_mask {
            if let Some(i) = m.iter().position(|&x| x > 1) {
                return Err(FieldError::new("loss_mask", format!("entry {i} is {}, expected 0 or 1", m[i])));
            }
        }
        Ok(())
    }

    /// Parses one JSON text (a JSONL line) into a record, naming the failing field.
    pub fn from_json_slice(bytes: &[u8]) -> Result<Record, FieldError> {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let rec = match RecordSeed.deserialize(&mut de) {
            Ok(r) => r,
            Err(e) => return Err(decode_error(e)),
        };
        if let Err(e) = de.end() {
            return Err(FieldError::whole(format!("trailing characters after the record ({})", strip_position(&e))));
        }
        rec.validate()?;
        Ok(rec)
    }

    /// Serialises to one compact JSON line (without the newline).
    pub fn to_json_vec(&self, out: &mut Vec<u8>) {
        // Writing into a Vec cannot fail, and every value is representable.
        serde_json::to_writer(&mut *out, self).expect("serialising a record to memory");
    }

    /// The record as a JSON value (for rejects files, `--explain`, tests).
    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).expect("records are always representable as JSON")
    }
}

// The field error is smuggled through serde's string-only custom errors with a
// separator that cannot appear in a field name, then split apart again.
const SEP: char = '\u{1}';

fn decode_error(e: serde_json::Error) -> FieldError {
    let text = strip_position(&e);
    if let Some((field, msg)) = text.split_once(SEP) {
        return FieldError::new(field, msg.to_string());
    }
    if e.is_eof() {
        return FieldError::whole(format!("truncated JSON ({text})"));
    }
    if e.is_syntax() {
        return FieldError::whole(format!("malformed JSON ({text}, column {})", e.column()));
    }
    FieldError::whole(text)
}

/// serde_json appends " at line L column C"; the line is ours to report.
fn strip_position(e: &serde_json::Error) -> String {
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

struct RecordSeed;

impl<'de> DeserializeSeed<'de> for RecordSeed {
    type Value = Record;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Record, D::Error> {
        d.deserialize_map(RecordVisitor)
    }
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Record, D::Error> {
        d.deserialize_map(RecordVisitor)
    }
}

struct RecordVisitor;

/// A map key, borrowed when the input allows (no allocation for known fields).
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

fn field_err<E: de::Error>(field: &str, kind: FieldKind, inner: impl fmt::Display) -> E {
    let inner = inner.to_string();
    let inner = match inner.rfind(" at line ") {
        Some(i) => inner[..i].to_string(),
        None => inner,
    };
    E::custom(format!("{field}{SEP}expected {} ({inner})", kind.expected()))
}

/// Reads a value that may be `null` (meaning: absent).
fn opt<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    map: &mut A,
    field: &str,
    kind: FieldKind,
) -> Result<Option<T>, A::Error> {
    map.next_value::<Option<T>>().map_err(|e| {
        // Syntax errors and EOF are about the line, not the field: keep them as they are.
        let s = e.to_string();
        if s.starts_with("invalid ") || s.starts_with("mask value") {
            field_err(field, kind, s)
        } else {
            e
        }
    })
}

/// A loss mask accepts integers 0/1 and booleans.
struct Mask(Vec<u8>);

impl<'de> Deserialize<'de> for Mask {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Mask, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Mask;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of 0/1")
            }
            fn visit_seq<S: de::SeqAccess<'de>>(self, mut s: S) -> Result<Mask, S::Error> {
                let mut out = Vec::with_capacity(s.size_hint().unwrap_or(64));
                while let Some(b) = s.next_element::<MaskBit>()? {
                    out.push(b.0);
                }
                Ok(Mask(out))
            }
        }
        d.deserialize_seq(V)
    }
}

struct MaskBit(u8);

impl<'de> Deserialize<'de> for MaskBit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MaskBit, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaskBit;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("0 or 1")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<MaskBit, E> {
                Ok(MaskBit(b as u8))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MaskBit, E> {
                if v <= 1 {
                    Ok(MaskBit(v as u8))
                } else {
                    Err(E::custom(format!("mask value {v}, expected 0 or 1")))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MaskBit, E> {
                Err(E::custom(format!("mask value {v}, expected 0 or 1")))
            }
        }
        d.deserialize_any(V)
    }
}

/// Accepts a JSON number (ints included) as f32; NaN/inf cannot appear in JSON.
fn f32_list<'de, A: MapAccess<'de>>(map: &mut A, field: &str) -> Result<Option<Vec<f32>>, A::Error> {
    opt::<A, Vec<f32>>(map, field, FieldKind::ListF32)
}

impl<'de> Visitor<'de> for RecordVisitor {
    type Value = Record;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object (one trajectory record)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Record, A::Error> {
        use FieldKind as K;
        let mut r = Record::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key.0.as_ref() {
                "prompt_id" => r.prompt_id = opt(&mut map, "prompt_id", K::Str)?,
                "sample_index" => r.sample_index = opt(&mut map, "sample_index", K::U32)?,
                "data_source" => r.data_source = opt(&mut map, "data_source", K::Str)?,
                "prompt" => {
                    // A chat-message list is kept as its JSON text (docs/DESIGN.md §3).
                    let v: Option<Value> = opt(&mut map, "prompt", K::Str)?;
                    r.prompt = match v {
                        None => None,
                        Some(Value::String(s)) => Some(s),
                        Some(v @ Value::Array(_)) => Some(v.to_string()),
                        Some(other) => return Err(field_err("prompt", K::Str, format!("got {}", json_type(&other)))),
                    };
                }
                "label" => r.label = opt(&mut map, "label", K::Json)?,
                "tokens" => r.tokens = opt(&mut map, "tokens", K::ListU32)?,
                "prompt_len" => r.prompt_len = opt(&mut map, "prompt_len", K::U32)?,
                "response" => r.response = opt(&mut map, "response", K::Str)?,
                "loss_mask" => r.loss_mask = opt::<A, Mask>(&mut map, "loss_mask", K::ListU8)?.map(|m| m.0),
                "rollout_log_probs" => r.rollout_log_probs = f32_list(&mut map, "rollout_log_probs")?,
                "status" => {
                    let s: Option<String> = opt(&mut map, "status", K::Str)?;
                    r.status = match s {
                        None => None,
                        Some(s) => Some(Status::parse(&s).ok_or_else(|| {
                            A::Error::custom(format!(
                                "status{SEP}expected one of completed, truncated, aborted, failed (got {s:?})"
                            ))
                        })?),
                    };
                }
                "finish_reason" => {
                    // SGLang's finish_reason is an object; keep its `type`.
                    let v: Option<Value> = opt(&mut map, "finish_reason", K::Str)?;
                    r.finish_reason = match v {
                        None => None,
                        Some(Value::String(s)) => Some(s),
                        Some(Value::Object(o)) => o.get("type").and_then(|t| t.as_str()).map(str::to_string),
                        Some(other) => {
                            return Err(field_err("finish_reason", K::Str, format!("got {}", json_type(&other))))
                        }
                    };
                }
                "turns" => r.turns = opt(&mut map, "turns", K::U32)?,
                "tool_calls" => r.tool_calls = opt(&mut map, "tool_calls", K::U32)?,
                "weight_versions" => {
                    // Versions are strings; integers are accepted and written back as strings.
                    let v: Option<Vec<Value>> = opt(&mut map, "weight_versions", K::ListStr)?;
                    r.weight_versions = match v {
                        None => None,
                        Some(list) => Some(
                            list.into_iter()
                                .map(|x| match x {
                                    Value::String(s) => Ok(s),
                                    Value::Number(n) => Ok(n.to_string()),
                                    other => Err(field_err::<A::Error>(
                                        "weight_versions",
                                        K::ListStr,
                                        format!("got {}", json_type(&other)),
                                    )),
                                })
                                .collect::<Result<Vec<_>, _>>()?,
                        ),
                    };
                }
                "reward" => r.reward = opt(&mut map, "reward", K::F32)?,
                "reward_detail" => r.reward_detail = opt(&mut map, "reward_detail", K::Json)?,
                "ref_log_probs" => r.ref_log_probs = f32_list(&mut map, "ref_log_probs")?,
                "values" => r.values = f32_list(&mut map, "values")?,
                "advantages" => r.advantages = f32_list(&mut map, "advantages")?,
                "returns" => r.returns = f32_list(&mut map, "returns")?,
                "metadata" => r.metadata = opt(&mut map, "metadata", K::JsonObject)?,
                "messages" => r.messages = opt(&mut map, "messages", K::Json)?,
                "tools" => {
                    r.tools = opt(&mut map, "tools", K::Json)?;
                    if let Some(t) = r.tools.as_ref().filter(|t| !t.is_array()) {
                        return Err(A::Error::custom(format!(
                            "tools{SEP}expected a list of tool objects (got {})",
                            json_type(t)
                        )));
                    }
                }
                other => {
                    let v: Value = map.next_value()?;
                    r.extra.insert(other.to_string(), v);
                }
            }
        }
        Ok(r)
    }
}

use de::Error as _;

pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Serialises an f32 list; non-finite values (which JSON cannot hold) become null.
struct F32s<'a>(&'a [f32]);

impl Serialize for F32s<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for &x in self.0 {
            if x.is_finite() {
                seq.serialize_element(&x)?;
            } else {
                seq.serialize_element(&Option::<f32>::None)?;
            }
        }
        seq.end()
    }
}

impl Serialize for Record {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        macro_rules! put {
            ($name:literal, $v:expr) => {
                if let Some(v) = &$v {
                    m.serialize_entry($name, v)?;
                }
            };
        }
        macro_rules! put_f32s {
            ($name:literal, $v:expr) => {
                if let Some(v) = &$v {
                    m.serialize_entry($name, &F32s(v))?;
                }
            };
        }
        put!("prompt_id", self.prompt_id);
        put!("sample_index", self.sample_index);
        put!("data_source", self.data_source);
        put!("prompt", self.prompt);
        put!("label", self.label);
        put!("tokens", self.tokens);
        put!("prompt_len", self.prompt_len);
        put!("response", self.response);
        put!("loss_mask", self.loss_mask);
        put_f32s!("rollout_log_probs", self.rollout_log_probs);
        if let Some(st) = self.status {
            m.serialize_entry("status", st.as_str())?;
        }
        put!("finish_reason", self.finish_reason);
        put!("turns", self.turns);
        put!("tool_calls", self.tool_calls);
        put!("weight_versions", self.weight_versions);
        if let Some(r) = self.reward {
            if r.is_finite() {
                m.serialize_entry("reward", &r)?;
            } else {
                m.serialize_entry("reward", &Option::<f32>::None)?;
            }
        }
        put!("reward_detail", self.reward_detail);
        put_f32s!("ref_log_probs", self.ref_log_probs);
        put_f32s!("values", self.values);
        put_f32s!("advantages", self.advantages);
        put_f32s!("returns", self.returns);
        put!("metadata", self.metadata);
        put!("messages", self.messages);
        put!("tools", self.tools);
        for (k, v) in &self.extra {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_unknown_fields_in_order() {
        let line = br#"{"prompt_id":"a:0","tokens":[1,2,3],"prompt_len":1,"loss_mask":[1,0],"zeta":{"x":[1,2]},"alpha":"keep"}"#;
        let r = Record::from_json_slice(line).unwrap();
        assert_eq!(r.extra.keys().collect::<Vec<_>>(), vec!["zeta", "alpha"]);
        let mut out = Vec::new();
        r.to_json_vec(&mut out);
        assert_eq!(Record::from_json_slice(&out).unwrap(), r);
    }

    #[test]
    fn wrong_type_names_the_field() {
        let e = Record::from_json_slice(br#"{"tokens":[1,"x"]}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("tokens"));
        assert!(e.message.starts_with("expected a list of unsigned 32-bit integers"), "{e}");
    }

    #[test]
    fn mismatched_mask_length_is_an_error() {
        let e = Record::from_json_slice(br#"{"tokens":[1,2,3],"prompt_len":1,"loss_mask":[1]}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("loss_mask"));
    }

    #[test]
    fn mask_values_must_be_binary() {
        let e = Record::from_json_slice(br#"{"loss_mask":[1,2]}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("loss_mask"));
    }

    #[test]
    fn truncated_json_is_reported() {
        let e = Record::from_json_slice(br#"{"tokens":[1,2"#).unwrap_err();
        assert!(e.field.is_none());
        assert!(e.message.contains("truncated"), "{e}");
    }

    #[test]
    fn bad_status_is_an_error() {
        let e = Record::from_json_slice(br#"{"status":"done"}"#).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("status"));
    }

    #[test]
    fn chat_prompt_becomes_json_text() {
        let r = Record::from_json_slice(br#"{"prompt":[{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(r.prompt.as_deref(), Some(r#"[{"role":"user","content":"hi"}]"#));
    }
}
