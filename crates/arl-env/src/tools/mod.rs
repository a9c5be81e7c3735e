//! The tools an agent can call during a rollout: built-in `calculator` and
//! `python`, external commands (`--tool NAME=COMMAND`, JSON on stdin/stdout)
//! MCP servers over stdio (`--mcp COMMAND`), `sql` (the task's database) and
//! the operations of an OpenAPI service (`--openapi SPEC`) and the browser
//! actions of the web environment (`--web URL`). Each tool has an OpenAI tool
//! definition (JSON schema) that the chat template writes into the system turn.
pub mod calculator;
pub mod external;
pub mod mcp;
pub mod openapi;
pub mod python;
pub mod sql;
pub mod web;

pub use crate::tool_output::{function_def, ToolOutput};
use serde_json::{json, Value};
use std::sync::Arc;

/// Per-episode tool state (the `--python-stateful` notebook's cells).
#[derive(Default)]
pub struct EpisodeState {
    /// `--python-stateful` against SandboxFusion: the cells run so far.
    pub python_cells: Vec<String>,
    /// `--python-stateful` with the local sandbox: the episode's interpreter.
    pub python_session: Option<Arc<std::sync::Mutex<crate::sandbox::Session>>>,
    /// The record's `metadata` (an object, or null): what environment tools
    /// need to know about the task (the `sql` tool's `sql_setup`).
    pub task: Value,
    /// The `sql` tool's database for this episode, built on its first call.
    pub sql_db: Option<Arc<std::sync::Mutex<crate::sql::Db>>>,
    /// The OpenAPI service's episode id, once the first call started it.
    pub api_episode: Option<String>,
    /// The web task site's episode id, once the first browser call started it.
    pub web_episode: Option<String>,
    /// The episode's browser tab (its context is disposed when this drops).
    pub web: Option<Arc<crate::web::Session>>,
}

impl EpisodeState {
    pub fn for_task(metadata: Value) -> EpisodeState {
        EpisodeState { task: metadata, ..EpisodeState::default() }
    }
}

pub enum ToolImpl {
    Calculator,
    Python(Arc<python::Python>),
    External(external::External),
    Mcp(Arc<mcp::McpClient>),
    Sql(Arc<sql::SqlTool>),
    OpenApi(Arc<openapi::OpenApiTool>),
    Web(Arc<web::WebTool>),
}

pub struct Tool {
    pub name: String,
    /// OpenAI tool object: `{"type": "function", "function": {name, description, parameters}}`.
    pub definition: Value,
    pub imp: ToolImpl,
}

/// Every tool known to this run, by name.
#[derive(Default)]
pub struct Registry {
    pub tools: Vec<Tool>,
}

pub fn calculator_def() -> Value {
    function_def(
        "calculator",
        "Evaluate an arithmetic expression exactly (+ - * / // % **, parentheses, sqrt, abs, min, max, round, floor, ceil, log, exp).",
        json!({"type": "object", "properties": {"expression": {"type": "string", "description": "The expression, e.g. 347*29"}}, "required": ["expression"]}),
    )
}

pub fn sql_def(max_rows: usize) -> Value {
    function_def(
        "sql",
        &format!("Run one SQL query on the task's database and return the result rows (at most {max_rows}). The database is read-only."),
        json!({"type": "object", "properties": {"query": {"type": "string", "description": "One SQL statement, e.g. SELECT name FROM customers"}}, "required": ["query"]}),
    )
}

pub fn python_def() -> Value {
    function_def(
        "python",
        "Run Python code in a sandbox and return its standard output and errors. Print what you want to see.",
        json!({"type": "object", "properties": {"code": {"type": "string", "description": "The Python code to run"}}, "required": ["code"]}),
    )
}

impl Registry {
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.tools.iter().find(|t| t.name == name)
    }

    pub fn add(&mut self, tool: Tool) -> anyhow::Result<()> {
        if self.get(&tool.name).is_some() {
            anyhow::bail!("tool `{}` is defined twice", tool.name);
        }
        self.tools.push(tool);
        Ok(())
    }

    /// Runs one call. Never fails: errors become the text the model sees.
    pub async fn call(
        &self,
        name: &str,
        args: &Value,
        allowed: &[String],
        state: &tokio::sync::Mutex<EpisodeState>,
    ) -> ToolOutput {
        let Some(tool) = self.get(name).filter(|_| allowed.iter().any(|a| a == name)) else {
            return ToolOutput::err(format!("Error: unknown tool `{name}`; available: {}", allowed.join(", ")));
        };
        match &tool.imp {
            ToolImpl::Calculator => {
                let Some(expr) = args.get("expression").and_then(Value::as_str) else {
                    return ToolOutput::err("Error: `calculator` needs a string argument `expression`");
                };
                match calculator::eval(expr) {
                    Ok(v) => ToolOutput::ok(v.to_string()),
                    Err(e) => ToolOutput::err(format!("Error: {e}")),
                }
            }
            ToolImpl::Python(py) => {
                let Some(code) = args.get("code").and_then(Value::as_str) else {
                    return ToolOutput::err("Error: `python` needs a string argument `code`");
                };
                py.run(code, state).await
            }
            ToolImpl::External(ext) => ext.call(name, args).await,
            ToolImpl::Mcp(client) => client.call(name, args).await,
            ToolImpl::Sql(t) => t.call(args, state).await,
            ToolImpl::OpenApi(t) => t.call(name, args, state).await,
            ToolImpl::Web(t) => t.call(name, args, state).await,
        }
    }
}

/// Cuts text longer than `max` characters in the middle, saying how much was cut.
pub fn truncate_middle(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if max == 0 || n <= max {
        return text.to_string();
    }
    let head = max / 2;
    let tail = max - head;
    let h: String = text.chars().take(head).collect();
    let t: String = text.chars().skip(n - tail).collect();
    format!("{h}\n... [{} characters truncated] ...\n{t}", n - max)
}

#[cfg(test)]
mod tests {
    #[test]
    fn truncates_in_the_middle() {
        let s = "abcdefghij";
        assert_eq!(super::truncate_middle(s, 20), s);
        assert_eq!(super::truncate_middle(s, 4), "ab\n... [6 characters truncated] ...\nij");
    }
}
