//! The `sql` reward: execution match. The response's query (its last ```sql
//! block, else its last `sql` tool call) and the label's gold query run on a
//! fresh copy of the task's database (`metadata.sql_setup`, SQLite or
//! PostgreSQL as for the tool); reward 1 when the results are the same
//! multiset of rows (the same list when the gold query has a top-level
//! `ORDER BY`), else 0 with the reason in `reward_detail.reason`.
//!
//! Label: `{"gold": "SELECT …", "ordered"?: bool}` or the gold query as a string.
//! A query that is refused (writes, ATTACH, server files), times out or
//! returns more than `max_rows` rows scores 0.
use crate::score::{Score, ScoreError};
use arl_core::record::Record;
use arl_env::sql::{self, Backend, Db, Limits, QueryError, TaskDb};
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct SqlOpts {
    pub backend: Backend,
    pub timeout: Duration,
    /// Rows a result may have to be compared.
    pub max_rows: usize,
    /// How the model writes tool calls (`--tool-call-parser`).
    pub parser: arl_chat::toolcall::Parser,
}

impl Default for SqlOpts {
    fn default() -> Self {
        SqlOpts {
            backend: Backend::Sqlite,
            timeout: Duration::from_secs(5),
            max_rows: 10_000,
            parser: arl_chat::toolcall::Parser::default(),
        }
    }
}

/// The query a response answers with, and where it was found (a fenced
/// block, else the last `sql` call written in `parser`'s format).
pub fn extract_query(resp: &str, parser: arl_chat::toolcall::Parser) -> Option<(String, &'static str)> {
    // The last fenced block in SQL (or unlabelled) that is not inside a tool call.
    let mut best: Option<String> = None;
    let mut rest = resp;
    while let Some(p) = rest.find("```") {
        let after = &rest[p + 3..];
        let Some(nl) = after.find('\n') else { break };
        let lang = after[..nl].trim().to_ascii_lowercase();
        let body = &after[nl + 1..];
        let Some(end) = body.find("```") else { break };
        if matches!(lang.as_str(), "sql" | "sqlite" | "postgresql" | "postgres" | "") && !body[..end].trim().is_empty()
        {
            best = Some(body[..end].trim().to_string());
        }
        rest = &body[end + 3..];
    }
    if let Some(q) = best {
        return Some((q, "sql block"));
    }
    parser.parse_transcript(resp).into_iter().rev().find_map(|c| match c {
        arl_chat::toolcall::Call::Ok { name, arguments } if name == "sql" => {
            arguments.get("query").and_then(Value::as_str).map(|q| (q.to_string(), "tool call"))
        }
        _ => None,
    })
}

fn zero(detail: Value, reason: String) -> Score {
    let mut d = detail;
    d["match"] = json!(false);
    d["reason"] = json!(reason);
    Score { reward: 0.0, explain: reason, detail: d }
}

pub fn score(o: &SqlOpts, r: &Record) -> Result<Score, ScoreError> {
    let resp = crate::score::need_response(r)?;
    let label = crate::score::need_label(r)?;
    let (gold, ordered) = match label {
        Value::String(s) => (s.clone(), None),
        Value::Object(m) => (
            m.get("gold")
                .and_then(Value::as_str)
                .ok_or_else(|| ScoreError("field `label.gold`: missing; the sql reward needs the gold query".into()))?
                .to_string(),
            m.get("ordered").and_then(Value::as_bool),
        ),
        _ => return Err(ScoreError("field `label`: expected {\"gold\": QUERY} or the gold query as a string".into())),
    };
    let ordered = ordered.unwrap_or_else(|| sql::orders(&gold));
    let meta = r.metadata.clone().map_or(Value::Null, Value::Object);
    let task = TaskDb::from_metadata(&meta).map_err(ScoreError)?;
    let mut detail = json!({"backend": o.backend.name(), "ordered": ordered});
    let Some((query, from)) = extract_query(resp, o.parser) else {
        return Ok(zero(detail, "no SQL query in the response (neither a ```sql block nor an `sql` tool call)".into()));
    };
    detail["query"] = json!(query);
    detail["query_from"] = json!(from);
    let limits = Limits { timeout: o.timeout, max_rows: o.max_rows };
    let mut db =
        Db::open(&o.backend, &task, limits).map_err(|e| ScoreError(format!("building the task's database: {e}")))?;
    let want = db.query(&gold).map_err(|e| ScoreError(format!("field `label.gold`: the gold query fails: {e}")))?;
    if want.truncated {
        return Err(ScoreError(format!("field `label.gold`: the gold result has more than {} rows", o.max_rows)));
    }
    detail["gold_rows"] = json!(want.rows.len());
    let got = match db.query(&query) {
        Ok(t) => t,
        Err(e) => {
            let kind = match e {
                QueryError::Denied(_) => "denied",
                QueryError::Timeout(_) => "timeout",
                QueryError::Sql(_) => "error",
                QueryError::Env(_) => return Err(ScoreError(format!("the database failed: {e}"))),
            };
            detail["outcome"] = json!(kind);
            return Ok(zero(detail, format!("the query failed: {e}")));
        }
    };
    detail["rows"] = json!(got.rows.len());
    match sql::compare(&got, &want, ordered) {
        None => {
            detail["match"] = json!(true);
            detail["reason"] = json!("same result as the gold query");
            let n = want.rows.len();
            Ok(Score {
                reward: 1.0,
                detail,
                explain: format!("same result as the gold query ({n} rows{})", if ordered { ", in order" } else { "" }),
            })
        }
        Some(why) => {
            detail["outcome"] = json!("mismatch");
            Ok(zero(detail, why))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arl_chat::toolcall::Parser;

    #[test]
    fn the_last_sql_call_in_the_chosen_format() {
        // A ChatML episode in the llama3 format: two `sql` calls, a tool output between.
        let resp = "{\"name\": \"sql\", \"parameters\": {\"query\": \"SELECT 1\"}}<|im_end|>\n<|im_start|>tool\n\
                    {\"name\": \"sql\", \"rows\": 1}<|im_end|>\n<|im_start|>assistant\n\
                    {\"name\": \"sql\", \"parameters\": {\"query\": \"SELECT name FROM t\"}}<|im_end|>";
        assert_eq!(extract_query(resp, Parser::Llama3), Some(("SELECT name FROM t".into(), "tool call")));
        assert_eq!(extract_query(resp, Parser::Qwen25), None);
        let qwen = "<tool_call>\n{\"name\": \"sql\", \"arguments\": {\"query\": \"SELECT 2\"}}\n</tool_call>";
        assert_eq!(extract_query(qwen, Parser::Qwen25), Some(("SELECT 2".into(), "tool call")));
        assert_eq!(extract_query(qwen, Parser::Llama3), None);
    }
}
