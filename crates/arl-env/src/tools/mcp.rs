//! A Model Context Protocol client over stdio (`--mcp COMMAND`): one server
//! process per run, newline-delimited JSON-RPC 2.0; `initialize`, then
//! `tools/list` for the definitions and `tools/call` per call. Calls are
//! multiplexed by request id, so concurrent episodes share the process.
//! Spec: modelcontextprotocol.io, "Transports: stdio" and "Tools" (2024-11-05).
use super::ToolOutput;
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Value>>>>;

pub struct McpClient {
    pub command: String,
    stdin: tokio::sync::Mutex<tokio::process::ChildStdin>,
    pending: Pending,
    next_id: AtomicU64,
    timeout: Duration,
    _child: tokio::process::Child,
}

impl McpClient {
    /// Starts the server and completes the handshake.
    pub async fn start(command: &str, timeout: Duration) -> Result<McpClient> {
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start MCP server `{command}`"))?;
        let stdin = child.stdin.take().context("MCP stdin")?;
        let stdout = child.stdout.take().context("MCP stdout")?;
        let pending: Pending = Arc::default();
        let p2 = pending.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
                // Responses carry our id; server requests/notifications are ignored.
                if let Some(id) = msg.get("id").and_then(Value::as_u64) {
                    if msg.get("method").is_none() {
                        if let Some(tx) = p2.lock().ok().and_then(|mut m| m.remove(&id)) {
                            let _ = tx.send(msg);
                        }
                    }
                }
            }
            // The server went away: fail every waiting call.
            if let Ok(mut m) = p2.lock() {
                m.clear();
            }
        });
        let c = McpClient {
            command: command.to_string(),
            stdin: tokio::sync::Mutex::new(stdin),
            pending,
            next_id: AtomicU64::new(1),
            timeout,
            _child: child,
        };
        c.request(
            "initialize",
            json!({"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "arl-rollout", "version": env!("CARGO_PKG_VERSION")}}),
        )
        .await
        .with_context(|| format!("MCP server `{command}`: initialize"))?;
        c.notify("notifications/initialized", json!({})).await?;
        Ok(c)
    }

    async fn send(&self, msg: &Value) -> Result<()> {
        let mut line = msg.to_string();
        line.push('\n');
        let mut w = self.stdin.lock().await;
        w.write_all(line.as_bytes()).await?;
        w.flush().await?;
        Ok(())
    }

    async fn notify(&self, method: &str, params: Value) -> Result<()> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params})).await
    }

    /// One JSON-RPC request; returns its `result`.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().map_err(|_| anyhow!("MCP state poisoned"))?.insert(id, tx);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        let msg = match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(m)) => m,
            Ok(Err(_)) => bail!("the MCP server closed its output"),
            Err(_) => {
                if let Ok(mut m) = self.pending.lock() {
                    m.remove(&id);
                }
                bail!("no answer to `{method}` within {:?}", self.timeout)
            }
        };
        if let Some(e) = msg.get("error") {
            bail!("`{method}` failed: {}", e.get("message").and_then(Value::as_str).unwrap_or(&e.to_string()));
        }
        msg.get("result").cloned().ok_or_else(|| anyhow!("`{method}`: answer without `result`"))
    }

    /// `tools/list` as OpenAI tool definitions (name, description, inputSchema → parameters).
    pub async fn list_tools(&self) -> Result<Vec<(String, Value)>> {
        let r = self.request("tools/list", json!({})).await?;
        let tools = r.get("tools").and_then(Value::as_array).ok_or_else(|| anyhow!("`tools/list`: no `tools` list"))?;
        let mut out = Vec::new();
        for t in tools {
            let name =
                t.get("name").and_then(Value::as_str).ok_or_else(|| anyhow!("`tools/list`: a tool without `name`"))?;
            let desc = t.get("description").and_then(Value::as_str).unwrap_or("");
            let params = t.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"}));
            out.push((name.to_string(), super::function_def(name, desc, params)));
        }
        Ok(out)
    }

    /// `tools/call`: the text parts of the content, joined by newlines.
    pub async fn call(&self, name: &str, args: &Value) -> ToolOutput {
        match self.request("tools/call", json!({"name": name, "arguments": args})).await {
            Ok(r) => {
                let text = r
                    .get("content")
                    .and_then(Value::as_array)
                    .map(|parts| {
                        parts
                            .iter()
                            .map(|p| match p.get("text").and_then(Value::as_str) {
                                Some(t) => t.to_string(),
                                None => p.to_string(),
                            })
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default();
                ToolOutput { text, error: r.get("isError").and_then(Value::as_bool).unwrap_or(false) }
            }
            Err(e) => ToolOutput::err(format!("Error: {e:#}")),
        }
    }
}
