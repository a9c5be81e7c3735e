//! The `python` tool: runs the model's code in a sandbox and returns what it
//! printed. Remote: SandboxFusion (`--sandbox-url`, `POST /run_code`; with
//! `--python-stateful`, `POST /run_jupyter` replaying the episode's earlier
//! cells, since SandboxFusion starts a fresh kernel per request).
//! Output shape follows verl's `SandboxFusionTool`: stdout then stderr.
use super::{EpisodeState, ToolOutput};
use serde_json::{json, Value};
use std::time::Duration;

pub struct Python {
    /// SandboxFusion base URL (`http://host:8080`, with or without `/run_code`).
    pub url: String,
    pub stateful: bool,
    pub run_timeout: Duration,
    pub http: reqwest::Client,
}

impl Python {
    fn endpoint(&self, path: &str) -> String {
        let base = self.url.trim_end_matches('/');
        let base = base.strip_suffix("/run_code").or_else(|| base.strip_suffix("/run_jupyter")).unwrap_or(base);
        format!("{base}/{path}")
    }

    pub async fn run(&self, code: &str, state: &tokio::sync::Mutex<EpisodeState>) -> ToolOutput {
        let secs = self.run_timeout.as_secs_f64();
        // Client timeout: the sandbox's own limits plus slack, as verl does (+10 s).
        let client_timeout = self.run_timeout + Duration::from_secs(10);
        if self.stateful {
            let mut st = state.lock().await;
            let mut cells = st.python_cells.clone();
            cells.push(code.to_string());
            let body = json!({"cells": cells, "cell_timeout": secs, "total_timeout": secs * cells.len() as f64 + 5.0, "kernel": "python3"});
            let r = self.post("run_jupyter", &body, client_timeout).await;
            let out = match r {
                Ok(v) => jupyter_output(&v),
                Err(e) => ToolOutput::err(e),
            };
            if !out.error {
                st.python_cells.push(code.to_string());
            }
            return out;
        }
        let body = json!({"code": code, "language": "python", "run_timeout": secs, "compile_timeout": secs});
        match self.post("run_code", &body, client_timeout).await {
            Ok(v) => run_code_output(&v),
            Err(e) => ToolOutput::err(e),
        }
    }

    async fn post(&self, path: &str, body: &Value, timeout: Duration) -> Result<Value, String> {
        let url = self.endpoint(path);
        // SandboxFusion answers 504 when overloaded; verl retries those (1 s, 2 s).
        for attempt in 0..3u64 {
            let r = self.http.post(&url).json(body).timeout(timeout).send().await;
            match r {
                Ok(resp) if resp.status().as_u16() == 504 && attempt < 2 => {
                    tokio::time::sleep(Duration::from_secs(attempt + 1)).await;
                }
                Ok(resp) => {
                    let status = resp.status();
                    let v: Value = resp.json().await.map_err(|e| format!("Error: sandbox answer is not JSON: {e}"))?;
                    if !status.is_success() {
                        return Err(format!("Error: sandbox answered {status}: {v}"));
                    }
                    return Ok(v);
                }
                Err(e) => return Err(format!("Error: sandbox unreachable: {e}")),
            }
        }
        Err("Error: sandbox overloaded (504)".into())
    }
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

fn run_code_output(v: &Value) -> ToolOutput {
    let status = s(v, "status");
    let run = v.get("run_result").cloned().unwrap_or(Value::Null);
    let mut text = s(&run, "stdout");
    text.push_str(&s(&run, "stderr"));
    match (status.as_str(), s(&run, "status").as_str()) {
        ("Success", _) => ToolOutput::ok(text),
        (_, "TimeLimitExceeded") => ToolOutput::err(format!("{text}\nTimeoutError: execution timed out")),
        ("SandboxError", _) => ToolOutput::err(format!("Error: sandbox error: {}", s(v, "message"))),
        _ => ToolOutput::err(text),
    }
}

fn jupyter_output(v: &Value) -> ToolOutput {
    let Some(last) = v.get("cells").and_then(Value::as_array).and_then(|c| c.last()) else {
        return ToolOutput::err(format!("Error: sandbox error: {}", s(v, "message")));
    };
    let mut text = s(last, "stdout");
    text.push_str(&s(last, "stderr"));
    if let Some(disp) = last.get("display").and_then(Value::as_array) {
        for d in disp {
            if let Some(t) = d.get("text/plain").and_then(Value::as_str) {
                text.push_str(t);
                text.push('\n');
            }
        }
    }
    let errors = last.get("error").and_then(Value::as_array).cloned().unwrap_or_default();
    for e in &errors {
        text.push_str(&format!("{}: {}\n", s(e, "ename"), s(e, "evalue")));
    }
    ToolOutput { text, error: !errors.is_empty() }
}
