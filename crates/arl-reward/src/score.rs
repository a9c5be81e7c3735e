//! What scoring a record gives ([`Score`]) or why it cannot
//! ([`ScoreError`]), and the field checks the reward kinds share: a leaf
//! the kinds use, so that none of them reads the crate root.
use arl_core::record::Record;
use serde_json::Value;

/// A scored record.
#[derive(Debug, Clone, PartialEq)]
pub struct Score {
    pub reward: f32,
    pub detail: Value,
    pub explain: String,
}

/// Why a record could not be scored (missing field, bad label, sandbox down).
/// Bad records are rejected under `--on-error skip`; nothing is guessed.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreError(pub String);

impl std::fmt::Display for ScoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScoreError {}

/// A reward that scores one record on its own, against its label (the
/// arena's `score` judge compares two records by one; built from a rule
/// reward with [`crate::base_score`]).
pub type BaseScore = Box<dyn Fn(&Record) -> Result<Score, ScoreError> + Send + Sync>;

pub(crate) fn err(s: impl Into<String>) -> ScoreError {
    ScoreError(s.into())
}

pub(crate) fn need_response(r: &Record) -> Result<&str, ScoreError> {
    r.response.as_deref().ok_or_else(|| err("field `response`: missing; reward needs the response text"))
}

pub(crate) fn need_label(r: &Record) -> Result<&Value, ScoreError> {
    r.label
        .as_ref()
        .filter(|v| !v.is_null())
        .ok_or_else(|| err("field `label`: missing; this reward compares with the label"))
}
