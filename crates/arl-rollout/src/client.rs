//! SGLang client: `POST /generate` with token ids in and token ids, log-probs,
//! finish reason and weight version out (docs/reference/protocols.md §1), spread
//! over one or many endpoints or sent through an sgl-router; retries with
//! exponential backoff; aborts (`POST /abort_request`) for over-sampling.
pub use super::answer::Generation;
use super::trace::{Attempt, Outcome, TurnTrace};
use anyhow::{anyhow, bail, Context, Result};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How long `abort_all` waits for aborted requests to come back before it
/// drops their connections.
pub const ABORT_GRACE: Duration = Duration::from_secs(1);
/// When `abort_all` sends the aborts again for requests still on the wire.
pub const ABORT_RESEND: Duration = Duration::from_millis(200);

pub struct ClientConfig {
    pub endpoints: Vec<String>,
    /// An sgl-router URL: requests go there, aborts go to every worker it lists.
    pub router: Option<String>,
    pub api_key: Option<String>,
    pub timeout: Duration,
    pub max_retries: u32,
    pub backoff: Duration,
    /// The LoRA adapter every request asks for (`lora_path`), by name.
    pub lora: Option<String>,
}

/// Counters printed in the run summary.
#[derive(Default)]
pub struct ClientStats {
    pub requests: AtomicU64,
    pub retries: AtomicU64,
    pub aborts_sent: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub generated_tokens: AtomicU64,
}

pub struct Client {
    http: reqwest::Client,
    pub cfg: ClientConfig,
    /// Groups currently assigned to each endpoint (for least-loaded placement).
    load: Vec<AtomicUsize>,
    pub stats: ClientStats,
    /// rid → endpoint index of every request on the wire.
    inflight: Mutex<HashMap<String, usize>>,
    cancelled: AtomicBool,
    seq: AtomicU64,
    /// `<base>/generate` of each endpoint (of the router when routed).
    generate_urls: Vec<reqwest::Url>,
    /// This process's id, for request ids (a system call each time otherwise).
    pid: u32,
    cancel_notify: tokio::sync::Notify,
    /// `--concurrency`: one permit per request on the wire.
    slots: tokio::sync::Semaphore,
    /// Written after the fixed fields of every request (`,"lora_path":…`).
    extra: Vec<u8>,
}

/// Why a generation call did not produce an answer.
#[derive(Debug)]
pub enum GenError {
    /// The run is stopping (`--target-groups` reached, or a fatal error elsewhere).
    Cancelled,
    Fatal(anyhow::Error),
}

impl Client {
    pub fn new(cfg: ClientConfig, concurrency: usize) -> Result<Client> {
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(k) = &cfg.api_key {
            let v = reqwest::header::HeaderValue::from_str(&format!("Bearer {k}"))
                .context("`--api-key` is not a valid header value")?;
            headers.insert(reqwest::header::AUTHORIZATION, v);
        }
        let http = arl_http::client::builder()
            .default_headers(headers)
            .pool_max_idle_per_host(concurrency.max(1))
            // Below the servers' keep-alive limits (arl-serve --read-timeout 30 s),
            // so a pooled connection is not reused just as the server closes it.
            .pool_idle_timeout(Duration::from_secs(20))
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .build()
            .context("building the HTTP client")?;
        let n = if cfg.router.is_some() { 1 } else { cfg.endpoints.len() };
        if n == 0 {
            bail!("no endpoint");
        }
        // Parsed once here (per request, URL parsing was a visible share of the client's CPU).
        let bases: Vec<&String> = match &cfg.router {
            Some(r) => vec![r],
            None => cfg.endpoints.iter().collect(),
        };
        let generate_urls = bases
            .iter()
            .map(|b| {
                reqwest::Url::parse(&format!("{}/generate", b.trim_end_matches('/'))).map_err(|e| {
                    arl_core::cli::usage(format!("`{b}`: not a server URL ({e}); expected e.g. http://127.0.0.1:30000"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let extra = match &cfg.lora {
            Some(name) => format!(",\"lora_path\":{}", Value::String(name.clone())).into_bytes(),
            None => Vec::new(),
        };
        Ok(Client {
            extra,
            http,
            generate_urls,
            load: (0..n).map(|_| AtomicUsize::new(0)).collect(),
            cfg,
            stats: ClientStats::default(),
            inflight: Mutex::new(HashMap::new()),
            cancelled: AtomicBool::new(false),
            seq: AtomicU64::new(0),
            pid: std::process::id(),
            cancel_notify: tokio::sync::Notify::new(),
            slots: tokio::sync::Semaphore::new(concurrency.max(1)),
        })
    }

    fn base(&self, ep: usize) -> &str {
        match &self.cfg.router {
            Some(r) => r.trim_end_matches('/'),
            None => self.cfg.endpoints[ep % self.cfg.endpoints.len()].trim_end_matches('/'),
        }
    }

    /// Places a group on the least-loaded endpoint; its turns stay there so
    /// the server's prefix cache holds the shared prompt. Release with [`Client::release`].
    pub fn place(&self) -> usize {
        let ep = (0..self.load.len()).min_by_key(|&i| self.load[i].load(Ordering::Relaxed)).unwrap_or(0);
        self.load[ep].fetch_add(1, Ordering::Relaxed);
        ep
    }

    pub fn release(&self, ep: usize) {
        self.load[ep].fetch_sub(1, Ordering::Relaxed);
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// One `/generate` call with retries. Retries on connection errors,
    /// timeouts and HTTP 408/429/5xx, each after `backoff · 2^k` (capped at
    /// 10 s, jittered), moving to the next endpoint when there are several.
    ///
    /// With `trace` (`--trace`), each attempt is noted when it ends: when it
    /// started waiting for a `--concurrency` slot, when it was sent, how it
    /// ended; and each wait before a retry. Without, no clock is read.
    pub async fn generate(
        &self,
        ep: usize,
        input_ids: &[u32],
        sampling: &Sampling,
        max_new_tokens: u32,
        trace: Option<TurnTrace<'_>>,
    ) -> Result<Generation, GenError> {
        let mut attempt = 0u32;
        loop {
            let queued = trace.map(|t| t.now());
            let at = ep + attempt as usize;
            // Notes how this attempt ended (with `--trace`).
            let note = |sent: Option<f64>, outcome: Outcome, g: Option<&Generation>, error: Option<String>| {
                if let (Some(t), Some(queued)) = (trace, queued) {
                    t.request(Attempt {
                        attempt,
                        endpoint: at % self.generate_urls.len(),
                        queued,
                        sent,
                        outcome,
                        finish: g.map(|g| g.finish.as_str()),
                        prompt_tokens: input_ids.len(),
                        output_tokens: g.map_or(0, |g| g.output_ids.len()),
                        error,
                    });
                }
            };
            // Closed by abort_all, so waiting episodes stop too.
            let Ok(_slot) = self.slots.acquire().await else {
                note(None, Outcome::Cancelled, None, None);
                return Err(GenError::Cancelled);
            };
            if self.is_cancelled() {
                note(None, Outcome::Cancelled, None, None);
                return Err(GenError::Cancelled);
            }
            let sent = trace.map(|t| t.now());
            let rid = format!("arl-{}-{}", self.pid, self.seq.fetch_add(1, Ordering::Relaxed));
            let body = request_body(&rid, input_ids, sampling, max_new_tokens, &self.extra);
            self.stats.requests.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut m) = self.inflight.lock() {
                m.insert(rid.clone(), at);
            }
            let send = self
                .http
                .post(self.generate_urls[at % self.generate_urls.len()].clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body)
                .timeout(self.cfg.timeout)
                .send();
            let outcome = tokio::select! {
                r = send => Some(r),
                _ = self.cancel_notify.notified() => None,
            };
            let outcome = match outcome {
                // After `abort_all`'s grace: the connection is dropped.
                None => {
                    note(sent, Outcome::Cancelled, None, None);
                    return Err(GenError::Cancelled);
                }
                Some(r) => r,
            };
            let res: Result<bytes::Bytes, (bool, anyhow::Error)> = match outcome {
                Err(e) => Err((true, anyhow::Error::new(e).context(format!("POST {}/generate", self.base(at))))),
                Ok(resp) => {
                    let status = resp.status();
                    if status.is_success() {
                        resp.bytes()
                            .await
                            .map_err(|e| (true, anyhow::Error::new(e).context("reading the /generate answer")))
                    } else {
                        let text = resp.text().await.unwrap_or_default();
                        let retry = matches!(status.as_u16(), 408 | 429 | 500..=599);
                        Err((retry, anyhow!("POST {}/generate: HTTP {status}: {}", self.base(at), text.trim())))
                    }
                }
            };
            if let Ok(mut m) = self.inflight.lock() {
                m.remove(&rid);
            }
            // A garbled body (not JSON, cut short) is retried like a failed
            // connection; a well-formed answer that lacks what rollout needs is not.
            let res = res.and_then(|b| {
                super::answer::parse(&b).map_err(|e| {
                    let garbled = e.downcast_ref::<serde_json::Error>().is_some_and(|j| j.is_syntax() || j.is_eof());
                    (garbled, e)
                })
            });
            match res {
                Ok(g) => {
                    note(sent, if g.finish == "abort" { Outcome::Aborted } else { Outcome::Ok }, Some(&g), None);
                    return Ok(g);
                }
                Err((true, e)) if attempt < self.cfg.max_retries => {
                    note(sent, Outcome::Retry, None, trace.map(|_| format!("{e:#}")));
                    attempt += 1;
                    self.stats.retries.fetch_add(1, Ordering::Relaxed);
                    let exp = self.cfg.backoff.as_secs_f64() * 2f64.powi(attempt as i32 - 1);
                    let jitter = 1.0 + 0.25 * ((self.seq.load(Ordering::Relaxed) % 7) as f64 / 7.0);
                    let wait = Duration::from_secs_f64((exp * jitter).min(10.0));
                    let backoff_start = trace.map(|t| t.now());
                    let cancelled = tokio::select! {
                        _ = tokio::time::sleep(wait) => false,
                        _ = self.cancel_notify.notified() => true,
                    };
                    if let (Some(t), Some(start)) = (trace, backoff_start) {
                        t.backoff(attempt, start);
                    }
                    if cancelled {
                        return Err(GenError::Cancelled);
                    }
                }
                Err((_, e)) => {
                    note(sent, Outcome::Error, None, trace.map(|_| format!("{e:#}")));
                    let e = if attempt > 0 { e.context(format!("gave up after {attempt} retries")) } else { e };
                    return Err(GenError::Fatal(e));
                }
            }
        }
    }

    /// Stops the run: no new requests; every request on the wire gets an
    /// `/abort_request` on its server (on every router worker when routed),
    /// and the run waits a moment (at most [`ABORT_GRACE`]) for the servers to
    /// answer them as aborted. A request whose abort overtook it (routed
    /// requests travel through the router; the abort goes straight to the
    /// workers) is still on the wire after [`ABORT_RESEND`]: its abort is sent
    /// once more. Then the remaining connections are dropped, which also stops
    /// a request on `arl-serve`. Returns how many requests were aborted.
    pub async fn abort_all(&self) -> usize {
        self.cancelled.store(true, Ordering::Relaxed);
        self.slots.close();
        let rids = self.inflight_rids();
        let targets: Vec<String> = match &self.cfg.router {
            Some(r) => match self.router_workers(r).await {
                Ok(w) => w,
                Err(e) => {
                    arl_core::cli::warn(
                        "arl-rollout",
                        format!("cannot list the router's workers, aborts not sent: {e:#}"),
                    );
                    vec![]
                }
            },
            None => vec![],
        };
        self.send_aborts(&rids, &targets).await;
        let t0 = std::time::Instant::now();
        let mut resent = false;
        while t0.elapsed() < ABORT_GRACE {
            let left = self.inflight_rids();
            if left.is_empty() {
                break;
            }
            if !resent && t0.elapsed() >= ABORT_RESEND {
                self.send_aborts(&left, &targets).await;
                resent = true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.cancel_notify.notify_waiters();
        rids.len()
    }

    fn inflight_rids(&self) -> Vec<(String, usize)> {
        self.inflight.lock().map(|m| m.iter().map(|(k, v)| (k.clone(), *v)).collect()).unwrap_or_default()
    }

    /// `/abort_request {rid}` for each request, on its endpoint or on every
    /// worker of the router (`targets`), all at once.
    async fn send_aborts(&self, rids: &[(String, usize)], targets: &[String]) {
        let mut calls = Vec::new();
        for (rid, ep) in rids {
            let urls: Vec<String> =
                if self.cfg.router.is_some() { targets.to_vec() } else { vec![self.base(*ep).to_string()] };
            for u in urls {
                let body = json!({"rid": rid});
                let req = self
                    .http
                    .post(format!("{}/abort_request", u.trim_end_matches('/')))
                    .json(&body)
                    .timeout(Duration::from_secs(5));
                self.stats.aborts_sent.fetch_add(1, Ordering::Relaxed);
                calls.push(async move {
                    let _ = req.send().await;
                });
            }
        }
        futures::future::join_all(calls).await;
    }

    /// The workers behind an sgl-router: `GET /workers` (gateway ≥ 0.2.2),
    /// else the legacy `GET /list_workers`.
    async fn router_workers(&self, router: &str) -> Result<Vec<String>> {
        let base = router.trim_end_matches('/');
        if let Ok(r) = self.http.get(format!("{base}/workers")).timeout(Duration::from_secs(5)).send().await {
            if r.status().is_success() {
                if let Ok(v) = r.json::<Value>().await {
                    if let Some(ws) = v.get("workers").and_then(Value::as_array) {
                        return Ok(ws
                            .iter()
                            .filter_map(|w| w.get("url").and_then(Value::as_str).map(str::to_string))
                            .collect());
                    }
                }
            }
        }
        let v: Value = self
            .http
            .get(format!("{base}/list_workers"))
            .timeout(Duration::from_secs(5))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(v.get("urls")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(|u| u.as_str().map(str::to_string)).collect())
            .unwrap_or_default())
    }
}

/// The `sampling_params` of a run's `/generate` calls, serialised once; each
/// call adds its own `max_new_tokens` (per call, cloning and serialising a
/// map of a dozen keys was a visible share of the client's CPU).
#[derive(Clone, Debug)]
pub struct Sampling {
    /// The object's JSON without its closing brace, ending in `{` or `,`.
    head: Vec<u8>,
}

impl Sampling {
    /// `params` without `max_new_tokens` (each call sets its own).
    pub fn new(mut params: serde_json::Map<String, Value>) -> Sampling {
        params.remove("max_new_tokens");
        let empty = params.is_empty();
        let mut head = serde_json::to_vec(&Value::Object(params)).expect("a JSON map serialises");
        head.pop();
        if !empty {
            head.push(b',');
        }
        Sampling { head }
    }

    fn write(&self, max_new_tokens: u32, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(b"\"max_new_tokens\":");
        out.extend_from_slice(itoa::Buffer::new().format(max_new_tokens).as_bytes());
        out.push(b'}');
    }
}

/// A `/generate` request: `{"rid", "input_ids", "sampling_params", "return_logprob": true}`
/// and `extra` (JSON members, each after a comma), written straight from
/// the slices (a `json!` tree would box every token id).
fn request_body(rid: &str, input_ids: &[u32], sampling: &Sampling, max_new_tokens: u32, extra: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(96 + sampling.head.len() + extra.len() + 11 * input_ids.len());
    b.extend_from_slice(b"{\"rid\":");
    serde_json::to_writer(&mut b, rid).expect("writing to a Vec");
    b.extend_from_slice(b",\"input_ids\":[");
    let mut num = itoa::Buffer::new();
    for (i, id) in input_ids.iter().enumerate() {
        if i > 0 {
            b.push(b',');
        }
        b.extend_from_slice(num.format(*id).as_bytes());
    }
    b.extend_from_slice(b"],\"sampling_params\":");
    sampling.write(max_new_tokens, &mut b);
    b.extend_from_slice(b",\"return_logprob\":true");
    b.extend_from_slice(extra);
    b.push(b'}');
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_body_is_the_json_of_its_parts() {
        let mut params = serde_json::Map::new();
        params.insert("temperature".into(), json!(0.7));
        params.insert("stop".into(), json!(["\"</s>\"", "\n"]));
        params.insert("max_new_tokens".into(), json!(5));
        let body = request_body("arl-\"1\"-2", &[0, 7, 4294967295], &Sampling::new(params), 300, b"");
        let v: Value = serde_json::from_slice(&body).expect("valid JSON");
        assert_eq!(
            v,
            json!({"rid": "arl-\"1\"-2", "input_ids": [0, 7, 4294967295u32],
                   "sampling_params": {"temperature": 0.7, "stop": ["\"</s>\"", "\n"], "max_new_tokens": 300},
                   "return_logprob": true})
        );
        let v: Value = serde_json::from_slice(&request_body("r", &[], &Sampling::new(Default::default()), 1, b""))
            .expect("valid JSON");
        assert_eq!(
            v,
            json!({"rid": "r", "input_ids": [], "sampling_params": {"max_new_tokens": 1}, "return_logprob": true})
        );
        // `--lora`: the adapter's name, JSON-escaped, after the fixed fields.
        let v: Value = serde_json::from_slice(&request_body(
            "r",
            &[1],
            &Sampling::new(Default::default()),
            1,
            b",\"lora_path\":\"my \\\"a\\\"\"",
        ))
        .expect("valid JSON");
        assert_eq!(v["lora_path"], "my \"a\"");
    }
}
