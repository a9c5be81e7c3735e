//! Procedurally generated, automatically verifiable tasks (RLVE-style):
//! `arith` (calculator-tool arithmetic), `math` (`\boxed{}` answers),
//! `code` (Python functions with hidden unit tests), `sql` (questions
//! over a generated database, answered with a query), `api` (goals in
//! the shop service of `arl-env`, reached through its OpenAPI tools) and
//! `web` (goals on `arl-env`'s task site, reached in a headless browser). Every task is a prompt
//! record with a `label`, `data_source` (which selects the verifier under
//! `arl-reward --rm auto`), and `metadata.difficulty`; generation is a pure
//! function of (family, seed, index, difficulty), so it is reproducible.
//! `bench` imports the standard benchmarks (GSM8K, MATH, AIME, HumanEval,
//! MBPP) into records of the same shape.
//!
//! With solutions, `response` holds the final answer as a model would write
//! it and `messages` the whole demonstration (tool turns in the Qwen
//! `<tool_call>` convention, docs/reference/protocols.md §5.2).
pub mod api;
pub mod arena;
pub mod arith;
pub mod bench;
pub mod code;
pub mod difficulty;
pub mod math;
pub mod sql;
pub mod web;

use arl_core::record::Record;
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
    /// A task whose reference solution is a walk of tool calls (`calls`:
    /// each call's text and the tool's answer), ending with `last`: the
    /// demonstration's messages (user, then assistant/tool turns) and its
    /// response (the calls and `last`, one per line).
    pub fn tool_walk(
        prompt: String,
        label: Value,
        calls: &[(String, String)],
        last: &str,
        metadata: serde_json::Map<String, Value>,
        tools: Vec<Value>,
    ) -> Task {
        let mut messages = vec![json!({"role": "user", "content": prompt})];
        let mut response = String::new();
        for (c, o) in calls {
            messages.push(json!({"role": "assistant", "content": c}));
            messages.push(json!({"role": "tool", "content": o}));
            response.push_str(c);
            response.push('\n');
        }
        messages.push(json!({"role": "assistant", "content": last}));
        response.push_str(last);
        Task { prompt, label, response, messages: Some(Value::Array(messages)), metadata, tools }
    }

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
            let msgs = self.messages.unwrap_or_else(
                || json!([{"role": "user", "content": self.prompt}, {"role": "assistant", "content": self.response}]),
            );
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

/// The Qwen/Hermes tool-call text of one call (`json.dumps` spacing).
pub fn tool_call(name: &str, arguments: &Value) -> String {
    let mut body = serde_json::to_string(&json!({"name": name, "arguments": arguments})).unwrap_or_default();
    body = python_spacing(&body);
    format!("<tool_call>\n{body}\n</tool_call>")
}

/// `json.dumps` separators (`", "`, `": "`) for compact JSON text, outside strings.
fn python_spacing(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 16);
    let (mut in_str, mut esc) = (false, false);
    for c in s.chars() {
        out.push(c);
        if in_str {
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
        } else if c == ':' || c == ',' {
            out.push(' ');
        }
    }
    out
}
