//! Procedurally generated, automatically verifiable tasks (RLVE-style):
//! `arith` (calculator-tool arithmetic), `math` (`\boxed{}` answers) and
//! `code` (Python functions with hidden unit tests). Every task is a prompt
//! record with a `label`, `data_source` (which selects the verifier under
//! `arl-reward --rm auto`), and `metadata.difficulty`; generation is a pure
//! function of (family, seed, index, difficulty), so it is reproducible.
//!
//! With solutions, `response` holds the final answer as a model would write
//! it and `messages` the whole demonstration (tool turns in the Qwen
//! `<tool_call>` convention, reference/protocols.md §5.2).
pub mod arith;
pub mod code;
pub mod difficulty;
pub mod math;

use crate::record::Record;
use serde_json::{json, Value};

/// Highest difficulty level.
pub const MAX_LEVEL: u32 = 10;

/// A generated task before it becomes a record.
#[derive(Debug, Clone)]
pub struct Task {
    pub prompt: String,
    pub label: Value,
    /// Final answer text of the reference solution.
    pub response: String,
    /// The whole demonstration, when it differs from user + one assistant turn.
    pub messages: Option<Value>,
    pub metadata: serde_json::Map<String, Value>,
    /// Definitions of the tools the demonstration may call; with solutions they
    /// go to `metadata.tools`, where `arl-train --loss sft` renders them into the
    /// system turn exactly as `arl-rollout --tools …` does.
    pub tools: Vec<Value>,
}

impl Task {
    pub fn into_record(mut self, family: &str, id: String, difficulty: u32, with_solution: bool) -> Record {
        self.metadata.insert("difficulty".into(), json!(difficulty));
        self.metadata.insert("env".into(), json!(family));
        let mut r = Record {
            prompt_id: Some(id),
            data_source: Some(family.to_string()),
            prompt: Some(self.prompt.clone()),
            label: Some(self.label),
            metadata: Some(self.metadata),
            ..Record::default()
        };
        if with_solution {
            let msgs = self.messages.unwrap_or_else(|| {
                json!([{"role": "user", "content": self.prompt}, {"role": "assistant", "content": self.response}])
            });
            r.response = Some(self.response);
            r.messages = Some(msgs);
            if !self.tools.is_empty() {
                if let Some(m) = r.metadata.as_mut() {
                    m.insert("tools".into(), Value::Array(self.tools));
                }
            }
        }
        r
    }
}

/// The Qwen/Hermes tool-call text of one calculator call.
pub fn calculator_call(expression: &str) -> String {
    format!("<tool_call>\n{}\n</tool_call>", json!({"name": "calculator", "arguments": {"expression": expression}}))
        .replace("\":", "\": ")
        .replace(",\"", ", \"")
}
