//! The `python` tool: runs the model's code in the sandbox ([`crate::sandbox`]:
//! local namespaces by default, SandboxFusion with `--sandbox-url`) and
//! returns what it printed, stdout then stderr (verl's `SandboxFusionTool`
//! shape). With `--python-stateful`, each episode gets its own interpreter
//! that keeps variables across calls ([`crate::sandbox::Session`]); against
//! SandboxFusion, whose kernels are fresh per request, the episode's earlier
//! cells are replayed through `POST /run_jupyter` instead.
use super::{EpisodeState, ToolOutput};
use crate::sandbox::{Outcome, Request, RunResult, Sandbox};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub struct Python {
    pub sandbox: Sandbox,
    pub stateful: bool,
    /// SandboxFusion base URL, for stateful replay through `/run_jupyter`.
    pub remote_url: Option<String>,
    pub run_timeout: Duration,
    pub http: reqwest::Client,
}

/// What the model sees of a sandbox run.
fn result_output(r: RunResult) -> ToolOutput {
    let mut text = r.stdout;
    text.push_str(&r.stderr);
    match r.outcome {
        Outcome::Ok | Outcome::OutputTruncated => ToolOutput::ok(text),
        Outcome::Timeout => ToolOutput::err(format!("{text}\nTimeoutError: execution timed out")),
        Outcome::Memory => ToolOutput::err(format!("{text}\nMemoryError: out of memory")),
        _ => ToolOutput::err(text),
    }
}

impl Python {
    pub async fn run(&self, code: &str, state: &tokio::sync::Mutex<EpisodeState>) -> ToolOutput {
        if self.stateful {
            if let Some(url) = &self.remote_url {
                return self.run_jupyter(url, code, state).await;
            }
            let session = {
                let mut st = state.lock().await;
                if st.python_session.is_none() {
                    match self.sandbox.session() {
                        Ok(s) => st.python_session = Some(Arc::new(Mutex::new(s))),
                        Err(e) => return ToolOutput::err(format!("Error: cannot start the Python session: {e:#}")),
                    }
                }
                st.python_session.clone().expect("set above")
            };
            let code = code.to_string();
            let r = tokio::task::spawn_blocking(move || match session.lock() {
                Ok(mut s) => s.run(&code),
                Err(_) => Err(anyhow::anyhow!("the Python session crashed")),
            })
            .await;
            return match r {
                Ok(Ok(r)) => result_output(r),
                Ok(Err(e)) => ToolOutput::err(format!("Error: sandbox: {e:#}")),
                Err(e) => ToolOutput::err(format!("Error: sandbox: {e}")),
            };
        }
        let (sb, req) = (self.sandbox.clone(), Request::python(code));
        match tokio::task::spawn_blocking(move || sb.run(&req)).await {
            Ok(Ok(r)) => result_output(r),
            Ok(Err(e)) => ToolOutput::err(format!("Error: sandbox: {e:#}")),
            Err(e) => ToolOutput::err(format!("Error: sandbox: {e}")),
        }
    }

    async fn run_jupyter(&self, url: &str, code: &str, state: &tokio::sync::Mutex<EpisodeState>) -> ToolOutput {
        let secs = self.run_timeout.as_secs_f64();
        let mut st = state.lock().await;
        let mut cells = st.python_cells.clone();
        cells.push(code.to_string());
        let body = json!({"cells": cells, "cell_timeout": secs, "total_timeout": secs * cells.len() as f64 + 5.0, "kernel": "python3"});
        let base = url.trim_end_matches('/');
        let base = base.strip_suffix("/run_code").or_else(|| base.strip_suffix("/run_jupyter")).unwrap_or(base);
        // Client timeout: the sandbox's own limits plus slack, as verl does (+10 s).
        let timeout = Duration::from_secs_f64(secs * cells.len() as f64 + 15.0);
        let r = self.http.post(format!("{base}/run_jupyter")).json(&body).timeout(timeout).send().await;
        let out = match r {
            Ok(resp) if resp.status().is_success() => match resp.json::<Value>().await {
                Ok(v) => jupyter_output(&v),
                Err(e) => ToolOutput::err(format!("Error: sandbox answer is not JSON: {e}")),
            },
            Ok(resp) => ToolOutput::err(format!("Error: sandbox answered {}", resp.status())),
            Err(e) => ToolOutput::err(format!("Error: sandbox unreachable: {e}")),
        };
        if !out.error {
            st.python_cells.push(code.to_string());
        }
        out
    }
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
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
