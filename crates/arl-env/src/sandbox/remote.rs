//! The SandboxFusion backend: `POST {url}/run_code` (docs/reference/protocols.md §4).
//!
//! The URL may be the server's base (`http://host:8080`) or the full
//! `/run_code` endpoint, as verl's `sandbox_fusion_url` is written. Transport
//! errors and HTTP 5xx are retried with linear backoff (verl retries 504 only;
//! a fleet behind a load balancer also answers 502/503 while scaling).
use super::{cut_middle, Language, Limits, Outcome, Request, RunResult};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The `/run_code` endpoint.
    pub url: String,
    /// Attempts per request, at least 1.
    pub attempts: u32,
    pub backoff: Duration,
    client: reqwest::blocking::Client,
}

impl RemoteConfig {
    pub fn new(url: &str, attempts: u32) -> Result<RemoteConfig> {
        let url = url.trim_end_matches('/');
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("sandbox URL `{url}` must start with http:// or https://");
        }
        let url = if url.ends_with("/run_code") { url.to_string() } else { format!("{url}/run_code") };
        let client = arl_http::client::blocking_builder().build().context("building the HTTP client")?;
        Ok(RemoteConfig { url, attempts: attempts.max(1), backoff: Duration::from_secs(1), client })
    }
}

fn str_of(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

/// Maps a `RunCodeResponse` to a result.
pub fn parse_response(v: &Value, limits: &Limits) -> Result<RunResult> {
    let top = v.get("status").and_then(Value::as_str).unwrap_or("");
    let cap = limits.max_output;
    if let Some(c) = v.get("compile_result").filter(|c| !c.is_null()) {
        let rc = c.get("return_code").and_then(Value::as_i64);
        let cs = c.get("status").and_then(Value::as_str).unwrap_or("");
        if cs == "TimeLimitExceeded" || rc.is_some_and(|x| x != 0) {
            let diag = format!("{}{}", str_of(c, "stdout"), str_of(c, "stderr"));
            return Ok(RunResult {
                outcome: Outcome::CompileError,
                exit_code: rc.map(|x| x as i32),
                signal: None,
                stdout: String::new(),
                stderr: cut_middle(&diag, cap),
                truncated: diag.len() > cap,
                wall_s: 0.0,
                compile_output: Some(cut_middle(&diag, cap)),
            });
        }
    }
    let Some(r) = v.get("run_result").filter(|r| !r.is_null()) else {
        bail!("SandboxFusion answered `{top}` without a run_result: {}", str_of(v, "message"));
    };
    let status = r.get("status").and_then(Value::as_str).unwrap_or("");
    let rc = r.get("return_code").and_then(Value::as_i64).map(|x| x as i32);
    let (stdout, stderr) = (str_of(r, "stdout"), str_of(r, "stderr"));
    let truncated = stdout.len() > cap || stderr.len() > cap;
    let outcome = match status {
        "TimeLimitExceeded" => Outcome::Timeout,
        "Finished" if rc == Some(0) => {
            if truncated {
                Outcome::OutputTruncated
            } else {
                Outcome::Ok
            }
        }
        "Finished" if stderr.contains("MemoryError") || stderr.contains("bad_alloc") => Outcome::Memory,
        "Finished" => Outcome::Error,
        _ => bail!("SandboxFusion sandbox error (run status `{status}`): {}", cut_middle(&str_of(v, "message"), 500)),
    };
    Ok(RunResult {
        outcome,
        exit_code: rc,
        signal: None,
        stdout: cut_middle(&stdout, cap),
        stderr: cut_middle(&stderr, cap),
        truncated,
        wall_s: r.get("execution_time").and_then(Value::as_f64).unwrap_or(0.0),
        compile_output: None,
    })
}

pub fn run(cfg: &RemoteConfig, req: &Request, limits: &Limits) -> Result<RunResult> {
    let body = json!({
        "code": req.code,
        "language": match req.language { Language::Python => "python", Language::Cpp => "cpp", Language::Bash => "bash" },
        "compile_timeout": limits.compile_timeout.as_secs_f64(),
        "run_timeout": limits.timeout.as_secs_f64(),
        "memory_limit_MB": limits.memory_mb,
        "stdin": req.stdin,
        "files": {},
        "fetch_files": [],
    });
    // Same client budget as verl: compile + run + 10 s.
    let timeout = limits.compile_timeout + limits.timeout + Duration::from_secs(10);
    let mut last = anyhow!("no attempt made");
    for attempt in 0..cfg.attempts {
        if attempt > 0 {
            std::thread::sleep(cfg.backoff * attempt);
        }
        let resp = cfg.client.post(&cfg.url).timeout(timeout).header("Accept", "application/json").json(&body).send();
        match resp {
            Ok(r) if r.status().is_success() => {
                let v: Value = r.json().with_context(|| format!("{}: response is not JSON", cfg.url))?;
                return parse_response(&v, limits);
            }
            Ok(r) if r.status().is_server_error() => {
                last = anyhow!("{}: HTTP {}", cfg.url, r.status());
            }
            Ok(r) => {
                let s = r.status();
                let text = r.text().unwrap_or_default();
                bail!("{}: HTTP {s}: {}", cfg.url, cut_middle(&text, 500));
            }
            Err(e) => last = anyhow::Error::new(e).context(format!("POST {}", cfg.url)),
        }
    }
    Err(last.context(format!("SandboxFusion did not answer after {} attempts", cfg.attempts)))
}
