//! The `remote` reward: `POST {prompt, response, label}` (plus `data_source`,
//! `metadata`) to a URL; the answer is a JSON number or
//! `{"reward": …, "detail": …}`. Timeouts and retries with linear backoff on
//! transport errors and HTTP 5xx.
use crate::score::{need_response, Score, ScoreError};
use arl_core::record::Record;
use serde_json::{json, Value};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct RemoteRm {
    pub url: String,
    pub timeout: Duration,
    pub attempts: u32,
    pub backoff: Duration,
    client: reqwest::blocking::Client,
}

impl RemoteRm {
    pub fn new(url: &str, timeout: Duration, attempts: u32) -> anyhow::Result<RemoteRm> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            anyhow::bail!("reward URL `{url}` must start with http:// or https://");
        }
        let client = arl_http::client::blocking_builder().timeout(timeout).build()?;
        Ok(RemoteRm {
            url: url.to_string(),
            timeout,
            attempts: attempts.max(1),
            backoff: Duration::from_millis(500),
            client,
        })
    }

    pub fn score(&self, r: &Record) -> Result<Score, ScoreError> {
        let body = json!({
            "prompt": r.prompt,
            "response": need_response(r)?,
            "label": r.label,
            "data_source": r.data_source,
            "metadata": r.metadata,
        });
        let mut last = String::new();
        for attempt in 0..self.attempts {
            if attempt > 0 {
                std::thread::sleep(self.backoff * attempt);
            }
            match self.client.post(&self.url).json(&body).send() {
                Ok(resp) if resp.status().is_success() => {
                    let v: Value =
                        resp.json().map_err(|e| ScoreError(format!("{}: answer is not JSON: {e}", self.url)))?;
                    return parse_answer(&v).map_err(|m| ScoreError(format!("{}: {m}", self.url)));
                }
                Ok(resp) if resp.status().is_server_error() => last = format!("HTTP {}", resp.status()),
                Ok(resp) => return Err(ScoreError(format!("{}: HTTP {}", self.url, resp.status()))),
                Err(e) => {
                    last = if e.is_timeout() {
                        format!("timed out after {:?}", self.timeout)
                    } else {
                        arl_http::client::why(&e)
                    }
                }
            }
        }
        Err(ScoreError(format!("{}: no answer after {} attempts: {last}", self.url, self.attempts)))
    }
}

/// `3.5`, `{"reward": 1}` or `{"reward": 1, "detail": {...}}`.
pub fn parse_answer(v: &Value) -> Result<Score, String> {
    let (reward, detail) = match v {
        Value::Number(n) => (n.as_f64(), Value::Null),
        Value::Object(o) => (
            o.get("reward").or_else(|| o.get("score")).and_then(Value::as_f64),
            o.get("detail").cloned().unwrap_or(Value::Null),
        ),
        _ => (None, Value::Null),
    };
    let reward = reward.ok_or_else(|| {
        format!(
            "expected a number or {{\"reward\": number}}, got `{}`",
            arl_env::sandbox::cut_middle(&v.to_string(), 200)
        )
    })?;
    if !reward.is_finite() {
        return Err(format!("reward {reward} is not finite"));
    }
    let explain = match &detail {
        Value::Null => format!("reward {reward} from the remote/cmd scorer"),
        d => format!("reward {reward} from the scorer: {}", arl_env::sandbox::cut_middle(&d.to_string(), 200)),
    };
    Ok(Score {
        reward: reward as f32,
        detail: if detail.is_null() { json!({}) } else { json!({ "detail": detail }) },
        explain,
    })
}
