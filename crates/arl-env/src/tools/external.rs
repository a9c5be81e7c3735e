//! External tools: `--tool NAME=COMMAND` runs `sh -c COMMAND` once per call,
//! writes `{"name": NAME, "arguments": {…}}` on its stdin and reads its stdout:
//! a JSON object with a string `content` (and optional `"error": true`), or any
//! other text, used as is. A non-zero exit or a timeout is an error the model sees.
use super::ToolOutput;
use serde_json::{json, Value};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

pub struct External {
    pub command: String,
    pub timeout: Duration,
}

impl External {
    pub async fn call(&self, name: &str, args: &Value) -> ToolOutput {
        let child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => return ToolOutput::err(format!("Error: cannot start tool `{name}`: {e}")),
        };
        let input = json!({"name": name, "arguments": args}).to_string();
        if let Some(mut stdin) = child.stdin.take() {
            // A tool that does not read its input is fine; ignore EPIPE.
            let _ = stdin.write_all(input.as_bytes()).await;
            let _ = stdin.write_all(b"\n").await;
        }
        let out = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(Ok(o)) => o,
            Ok(Err(e)) => return ToolOutput::err(format!("Error: tool `{name}` failed: {e}")),
            Err(_) => return ToolOutput::err(format!("Error: tool `{name}` timed out after {:?}", self.timeout)),
        };
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return ToolOutput::err(format!("Error: tool `{name}` exited with {}: {}", out.status, stderr.trim()));
        }
        match serde_json::from_str::<Value>(stdout.trim()) {
            Ok(Value::Object(o)) if o.get("content").is_some_and(Value::is_string) => ToolOutput {
                text: o["content"].as_str().unwrap_or_default().to_string(),
                error: o.get("error").and_then(Value::as_bool).unwrap_or(false),
            },
            _ => ToolOutput::ok(stdout.trim_end_matches('\n').to_string()),
        }
    }
}
