//! The HTTP surface, shaped exactly like SGLang's (reference/protocols.md §1–2),
//! so a client cannot tell `arl-serve` from an SGLang server: request fields and
//! their defaults, batch and `n` expansion, rids, `meta_info`, log-prob tuples,
//! cumulative SSE chunks ending in `data: [DONE]`, and 400 `{"error": …}` bodies.
use super::chat;
use super::sampling::Knobs;
use super::scheduler::{Cmd, Finish, InputLogprobs, Job, Params, PauseMode, Shared, TokenOut, Update, UpdateResult};
use super::Config;
use crate::http_body::{closing, BodyError};
use crate::tokenizer::Tokenizer;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

pub struct AppState {
    pub cfg: Config,
    pub tx: crossbeam_channel::Sender<Cmd>,
    pub shared: Arc<Shared>,
    pub tok: Arc<Tokenizer>,
    pub port: u16,
    counter: AtomicU64,
    seed: u64,
    /// `/generate` and `/abort_request` calls received (in `/get_server_info`).
    generate_calls: AtomicU64,
    abort_calls: AtomicU64,
}

impl AppState {
    pub fn new(cfg: Config, tx: crossbeam_channel::Sender<Cmd>, shared: Arc<Shared>, tok: Arc<Tokenizer>, port: u16) -> AppState {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let seed = crate::rng::mix(&[nanos, std::process::id() as u64, port as u64]);
        AppState {
            cfg,
            tx,
            shared,
            tok,
            port,
            counter: AtomicU64::new(0),
            seed,
            generate_calls: AtomicU64::new(0),
            abort_calls: AtomicU64::new(0),
        }
    }

    /// A fresh 32-hex-digit id, like `uuid4().hex`.
    pub fn uuid_hex(&self) -> String {
        let c = self.counter.fetch_add(1, Ordering::Relaxed);
        let a = crate::rng::mix(&[self.seed, c, 1]);
        let b = crate::rng::mix(&[self.seed, c, 2]);
        format!("{a:016x}{b:016x}")
    }

    fn send(&self, c: Cmd) -> Result<(), Response> {
        self.tx.send(c).map_err(|_| error(StatusCode::SERVICE_UNAVAILABLE, "the scheduler has stopped"))
    }
}

/// SGLang's error body: `{"error": {"message": …}}`.
pub fn error(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(json!({"error": {"message": msg.into()}}))).into_response()
}

fn bad(msg: impl Into<String>) -> Response {
    error(StatusCode::BAD_REQUEST, msg)
}

pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.cfg.max_body_bytes;
    Router::new()
        .route("/generate", post(generate).put(generate))
        .route("/health", get(health))
        .route("/health_generate", get(health_generate))
        .route("/get_model_info", get(model_info))
        // Newer SGLang names (sgl-router asks for these first).
        .route("/model_info", get(model_info))
        .route("/server_info", get(server_info))
        .route("/get_weight_version", get(weight_version))
        .route("/get_server_info", get(server_info))
        .route("/get_load", get(load))
        .route("/v1/loads", get(load))
        .route("/flush_cache", get(flush_cache).post(flush_cache))
        .route("/pause_generation", post(pause))
        .route("/continue_generation", post(continue_generation))
        .route("/abort_request", post(abort_request))
        .route("/update_weights_from_disk", post(update_weights_from_disk))
        .route("/update_weight_version", post(update_weight_version))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .with_state(state)
}

/// `--api-key`: every route but `/health` wants `Authorization: Bearer KEY`, as in SGLang.
/// A body over `--max-body-bytes` gets 413 (see [`crate::http_body`]).
async fn auth(State(st): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if let Some(key) = &st.cfg.api_key {
        let ok = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|k| k.trim() == key);
        if !ok && req.uri().path() != "/health" {
            return (StatusCode::UNAUTHORIZED, Json(json!({"error": "Unauthorized"}))).into_response();
        }
    }
    // The body is read here, within --read-timeout, so a client that stalls
    // mid-body cannot hold a connection (the handlers read whole bodies anyway).
    // An oversized one is drained before the 413 so that the client reads it.
    match crate::http_body::buffer(req, st.cfg.max_body_bytes, st.cfg.read_timeout).await {
        Ok(req) => next.run(req).await,
        Err(BodyError::TooLarge) => closing(body_too_large(&st)),
        Err(BodyError::Timeout) => closing(error(
            StatusCode::REQUEST_TIMEOUT,
            format!("request body not received within {:?} (--read-timeout)", st.cfg.read_timeout),
        )),
        Err(BodyError::Broken(e)) => closing(bad(format!("cannot read the request body: {e}"))),
    }
}

fn body_too_large(st: &AppState) -> Response {
    error(StatusCode::PAYLOAD_TOO_LARGE, format!("request body larger than {} bytes (--max-body-bytes)", st.cfg.max_body_bytes))
}

/// Parses a body as a JSON object; an empty body counts as `{}`.
fn parse_body(body: Result<Bytes, BytesRejection>) -> Result<Map<String, Value>, Response> {
    let body = body.map_err(|r| error(r.status(), format!("cannot read the request body: {}", r.body_text())))?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(bad("the request body must be a JSON object")),
        Err(e) => Err(bad(format!("invalid JSON body: {e}"))),
    }
}

// ---------------------------------------------------------------- request parsing

/// Tokenises prompt text the way SGLang does (`tokenizer.encode`, special tokens added).
pub fn encode(tok: &Tokenizer, s: &str) -> Result<Vec<u32>, String> {
    tok.inner.encode(s, true).map(|e| e.get_ids().to_vec()).map_err(|e| format!("cannot tokenize the prompt: {e}"))
}

fn field<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    m.get(k).filter(|v| !v.is_null())
}

fn as_f32(m: &Map<String, Value>, k: &str, default: f32) -> Result<f32, String> {
    match field(m, k) {
        None => Ok(default),
        Some(v) => v.as_f64().map(|x| x as f32).ok_or_else(|| format!("`{k}` must be a number, got {v}")),
    }
}

fn as_int(m: &Map<String, Value>, k: &str, default: i64) -> Result<i64, String> {
    match field(m, k) {
        None => Ok(default),
        Some(v) => v.as_i64().ok_or_else(|| format!("`{k}` must be an integer, got {v}")),
    }
}

fn as_bool(m: &Map<String, Value>, k: &str, default: bool) -> Result<bool, String> {
    match field(m, k) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| format!("`{k}` must be true or false, got {v}")),
    }
}

fn token_id(v: &Value, what: &str, vocab: usize) -> Result<u32, String> {
    match v.as_u64() {
        Some(x) if (x as usize) < vocab => Ok(x as u32),
        Some(x) => Err(format!("{what}: token id {x} is out of the vocabulary (size {vocab})")),
        None => Err(format!("{what}: expected a token id (non-negative integer), got {v}")),
    }
}

/// SGLang's `SamplingParams` with its defaults and checks; returns the params and `n`.
pub fn parse_sampling(v: Option<&Value>, vocab: usize) -> Result<(Params, usize), String> {
    let empty = Map::new();
    let m = match v {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(other) => return Err(format!("`sampling_params` must be an object, got {other}")),
    };
    let max_new_tokens = as_int(m, "max_new_tokens", 128)?;
    if max_new_tokens < 0 {
        return Err(format!("max_new_tokens must be at least 0, got {max_new_tokens}"));
    }
    let min_new_tokens = as_int(m, "min_new_tokens", 0)?;
    if min_new_tokens < 0 || min_new_tokens > max_new_tokens {
        return Err(format!("min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}"));
    }
    let temperature = as_f32(m, "temperature", 1.0)?;
    if !(temperature >= 0.0 && temperature.is_finite()) {
        return Err(format!("temperature must be non-negative, got {temperature}"));
    }
    let top_p = as_f32(m, "top_p", 1.0)?;
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(format!("top_p must be in (0, 1], got {top_p}"));
    }
    let top_k = as_int(m, "top_k", -1)?;
    if top_k < -1 || top_k == 0 {
        return Err(format!("top_k must be -1 (disable), or at least 1, got {top_k}"));
    }
    let min_p = as_f32(m, "min_p", 0.0)?;
    if !(0.0..=1.0).contains(&min_p) {
        return Err(format!("min_p must be in [0, 1], got {min_p}"));
    }
    let n = as_int(m, "n", 1)?;
    if n < 1 {
        return Err(format!("n must be at least 1, got {n}"));
    }
    for (k, neutral) in [("frequency_penalty", 0.0), ("presence_penalty", 0.0), ("repetition_penalty", 1.0)] {
        let x = as_f32(m, k, neutral)?;
        if x != neutral {
            return Err(format!("`{k}` is not supported by arl-serve (only the neutral value {neutral})"));
        }
    }
    for k in ["json_schema", "regex", "ebnf", "structural_tag", "stop_regex", "custom_params"] {
        if field(m, k).is_some() {
            return Err(format!("`{k}` is not supported by arl-serve"));
        }
    }
    if field(m, "logit_bias").is_some_and(|v| v.as_object().is_none_or(|o| !o.is_empty())) {
        return Err("`logit_bias` is not supported by arl-serve".into());
    }
    let stop = match field(m, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_str().map(str::to_string).ok_or_else(|| format!("`stop` must hold strings, got {x}")))
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(format!("`stop` must be a string or a list of strings, got {v}")),
    };
    let stop_token_ids = match field(m, "stop_token_ids") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.iter().map(|x| token_id(x, "stop_token_ids", vocab)).collect::<Result<_, _>>()?,
        Some(v) => return Err(format!("`stop_token_ids` must be a list of token ids, got {v}")),
    };
    let seed = match field(m, "sampling_seed") {
        None => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| format!("`sampling_seed` must be an integer, got {v}"))? as u64),
    };
    Ok((
        Params {
            knobs: Knobs { temperature, top_p, top_k, min_p },
            max_new_tokens: max_new_tokens as usize,
            min_new_tokens: min_new_tokens as usize,
            stop,
            stop_token_ids,
            ignore_eos: as_bool(m, "ignore_eos", false)?,
            no_stop_trim: as_bool(m, "no_stop_trim", false)?,
            skip_special_tokens: as_bool(m, "skip_special_tokens", true)?,
            seed,
        },
        n as usize,
    ))
}

/// A per-prompt field that may be given once or as a list (one per prompt).
fn per_prompt<'a>(m: &'a Map<String, Value>, k: &str, batch: Option<usize>) -> Result<Vec<Option<&'a Value>>, String> {
    let count = batch.unwrap_or(1);
    match field(m, k) {
        None => Ok(vec![None; count]),
        Some(Value::Array(a)) if batch.is_some() && k != "stop" => {
            if a.len() != count {
                return Err(format!("`{k}` has {} entries for a batch of {count}", a.len()));
            }
            Ok(a.iter().map(Some).collect())
        }
        Some(v) => Ok(vec![Some(v); count]),
    }
}

/// One expanded item of a `/generate` request.
pub struct Item {
    pub rid: String,
    pub input_ids: Vec<u32>,
    pub params: Params,
    pub return_logprob: bool,
    pub logprob_start_len: usize,
    pub top_logprobs_num: usize,
    pub sample_index: u64,
}

pub struct GenerateRequest {
    pub items: Vec<Item>,
    pub batched: bool,
    pub stream: bool,
    pub return_text_in_logprobs: bool,
}

/// Validates a `/generate` body and expands it prompt-major (`[p0.s0, p0.s1, …, p1.s0, …]`).
pub fn parse_generate(st: &AppState, m: &Map<String, Value>) -> Result<GenerateRequest, String> {
    let vocab = st.cfg.vocab_size;
    let given: Vec<&str> = ["text", "input_ids", "input_embeds"].into_iter().filter(|k| field(m, k).is_some()).collect();
    if given.len() != 1 {
        return Err("Either text, input_ids or input_embeds should be provided.".into());
    }
    for k in ["image_data", "audio_data", "video_data", "lora_path", "session_params", "custom_logit_processor", "token_ids_logprob"] {
        if field(m, k).is_some() {
            return Err(format!("`{k}` is not supported by arl-serve"));
        }
    }
    let (prompts, batched): (Vec<Vec<u32>>, bool) = match (given[0], &m[given[0]]) {
        ("input_embeds", _) => return Err("`input_embeds` is not supported by arl-serve".into()),
        ("text", Value::String(s)) => (vec![encode(&st.tok, s)?], false),
        ("text", Value::Array(a)) => {
            let mut out = Vec::new();
            for t in a {
                let s = t.as_str().ok_or_else(|| format!("`text` must be a string or a list of strings, got {t}"))?;
                out.push(encode(&st.tok, s)?);
            }
            (out, true)
        }
        ("text", v) => return Err(format!("`text` must be a string or a list of strings, got {v}")),
        (_, Value::Array(a)) if a.iter().all(Value::is_array) && !a.is_empty() => {
            let mut out = Vec::new();
            for (i, p) in a.iter().enumerate() {
                let ids: Vec<u32> = p.as_array().into_iter().flatten().map(|x| token_id(x, &format!("input_ids[{i}]"), vocab)).collect::<Result<_, _>>()?;
                out.push(ids);
            }
            (out, true)
        }
        (_, Value::Array(a)) => (vec![a.iter().map(|x| token_id(x, "input_ids", vocab)).collect::<Result<_, _>>()?], false),
        (_, v) => return Err(format!("`input_ids` must be a list of token ids or a list of such lists, got {v}")),
    };
    if batched && prompts.is_empty() {
        return Err("the batch is empty".into());
    }
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(if batched { format!("input_ids cannot be empty (prompt {i}).") } else { "input_ids cannot be empty.".into() });
        }
        if p.len() >= st.cfg.context_len {
            return Err(format!(
                "The input ({} tokens) is longer than the model's context length ({} tokens).",
                p.len(),
                st.cfg.context_len
            ));
        }
    }
    let b = batched.then_some(prompts.len());
    let sps: Vec<Option<&Value>> = match field(m, "sampling_params") {
        Some(Value::Array(a)) => {
            if a.len() != prompts.len() {
                return Err(format!("`sampling_params` has {} entries for {} prompts", a.len(), prompts.len()));
            }
            a.iter().map(Some).collect()
        }
        other => vec![other; prompts.len()],
    };
    let parsed: Vec<(Params, usize)> = sps.into_iter().map(|v| parse_sampling(v, vocab)).collect::<Result<_, _>>()?;
    let n = parsed[0].1;
    if parsed.iter().any(|p| p.1 != n) {
        return Err("all entries of `sampling_params` must have the same `n`".into());
    }
    let rl = per_prompt(m, "return_logprob", b)?;
    let ls = per_prompt(m, "logprob_start_len", b)?;
    let tn = per_prompt(m, "top_logprobs_num", b)?;
    let total = prompts.len() * n;
    let rids: Vec<String> = match field(m, "rid") {
        None => (0..total).map(|_| st.uuid_hex()).collect(),
        Some(Value::String(r)) if total == 1 => vec![r.clone()],
        Some(Value::String(r)) if n == 1 => (0..total).map(|i| format!("{r}_{i}")).collect(),
        Some(Value::String(_)) => (0..total).map(|_| st.uuid_hex()).collect(),
        Some(Value::Array(a)) => {
            if a.len() != prompts.len() {
                return Err(format!("`rid` has {} entries for a batch of {}", a.len(), prompts.len()));
            }
            let rs: Vec<String> = a.iter().map(|x| x.as_str().map(str::to_string).ok_or_else(|| format!("`rid` must hold strings, got {x}"))).collect::<Result<_, _>>()?;
            let mut seen = std::collections::HashSet::new();
            if let Some(d) = rs.iter().find(|r| !seen.insert(r.as_str())) {
                return Err(format!("duplicate rid `{d}` in the batch"));
            }
            if n == 1 {
                rs
            } else {
                (0..total).map(|_| st.uuid_hex()).collect()
            }
        }
        Some(v) => return Err(format!("`rid` must be a string or a list of strings, got {v}")),
    };
    let mut items = Vec::with_capacity(total);
    for (p, ids) in prompts.into_iter().enumerate() {
        let return_logprob = match rl[p] {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| format!("`return_logprob` must be true or false, got {v}"))?,
        };
        let start = match ls[p] {
            None => -1,
            Some(v) => v.as_i64().ok_or_else(|| format!("`logprob_start_len` must be an integer, got {v}"))?,
        };
        if start < -1 || start >= ids.len() as i64 {
            return Err(format!("logprob_start_len ({start}) must be -1 or in [0, {}) for a prompt of {} tokens", ids.len(), ids.len()));
        }
        let top = match tn[p] {
            None => 0,
            Some(v) => v.as_u64().ok_or_else(|| format!("`top_logprobs_num` must be a non-negative integer, got {v}"))? as usize,
        };
        // -1 means "only the output": SGLang then starts at the last prompt token.
        let start = if start < 0 { ids.len() - 1 } else { start as usize };
        for s in 0..n {
            items.push(Item {
                rid: rids[p * n + s].clone(),
                input_ids: ids.clone(),
                params: parsed[p].0.clone(),
                return_logprob,
                logprob_start_len: start,
                top_logprobs_num: top.min(vocab),
                sample_index: s as u64,
            });
        }
    }
    Ok(GenerateRequest {
        items,
        batched: batched || n > 1,
        stream: as_bool(m, "stream", false)?,
        return_text_in_logprobs: as_bool(m, "return_text_in_logprobs", false)?,
    })
}

// ---------------------------------------------------------------- running and answering

/// What has arrived for one item so far.
pub struct ItemState {
    pub rid: String,
    pub prompt_tokens: usize,
    pub return_logprob: bool,
    pub top_n: usize,
    pub params: Params,
    pub tokens: Vec<TokenOut>,
    pub input: Option<InputLogprobs>,
    pub finish: Option<Finish>,
    pub weight_version: String,
}

impl ItemState {
    fn apply(&mut self, u: Update) {
        self.tokens.extend(u.tokens);
        if u.input.is_some() {
            self.input = u.input;
        }
        if u.finish.is_some() {
            self.finish = u.finish;
        }
        self.weight_version = u.weight_version;
    }

    pub fn output_ids(&self) -> Vec<u32> {
        self.tokens.iter().map(|t| t.id).collect()
    }

    /// The completion text with SGLang's stop trimming (unless `no_stop_trim`).
    pub fn text(&self, tok: &Tokenizer) -> String {
        let ids = self.output_ids();
        let p = &self.params;
        let ids: &[u32] = match &self.finish {
            Some(Finish::StopToken(_)) if !p.no_stop_trim && !ids.is_empty() => &ids[..ids.len() - 1],
            _ => &ids,
        };
        let mut text = tok.inner.decode(ids, p.skip_special_tokens).unwrap_or_default();
        if let Some(Finish::StopStr(s)) = &self.finish {
            if !p.no_stop_trim {
                if let Some(pos) = text.find(s.as_str()) {
                    text.truncate(pos);
                }
            }
        }
        text
    }
}

/// Sends the items to the scheduler; aborts them if dropped before they finish
/// (a client that hangs up stops costing compute).
pub struct Running {
    st: Arc<AppState>,
    pub states: Vec<ItemState>,
    rx: mpsc::UnboundedReceiver<(usize, Update)>,
    done: usize,
    pub t0: Instant,
}

impl Drop for Running {
    fn drop(&mut self) {
        for s in &self.states {
            if s.finish.is_none() {
                let _ = self.st.tx.send(Cmd::Abort { rid: Some(s.rid.clone()), all: false });
            }
        }
    }
}

impl Running {
    /// `stream`: the caller reads every token as it comes; otherwise the
    /// scheduler keeps them and sends each item's tokens once, when it ends.
    pub fn start(st: &Arc<AppState>, items: Vec<Item>, stream: bool) -> Result<Running, Response> {
        let (tx, rx) = mpsc::unbounded_channel();
        let version = st.shared.version();
        let mut states = Vec::with_capacity(items.len());
        let mut jobs = Vec::with_capacity(items.len());
        for (index, it) in items.into_iter().enumerate() {
            states.push(ItemState {
                rid: it.rid.clone(),
                prompt_tokens: it.input_ids.len(),
                return_logprob: it.return_logprob,
                top_n: it.top_logprobs_num,
                params: it.params.clone(),
                tokens: Vec::new(),
                input: None,
                finish: None,
                weight_version: version.clone(),
            });
            jobs.push(Job {
                rid: it.rid,
                input_ids: it.input_ids,
                params: it.params,
                return_logprob: it.return_logprob,
                logprob_start_len: it.logprob_start_len,
                top_logprobs_num: it.top_logprobs_num,
                sample_index: it.sample_index,
                index,
                stream,
                tx: tx.clone(),
            });
        }
        let run = Running { st: st.clone(), states, rx, done: 0, t0: Instant::now() };
        for j in jobs {
            st.send(Cmd::Generate(j))?;
        }
        Ok(run)
    }

    /// Waits for the next update; returns the index it touched, or None when all finished.
    pub async fn next(&mut self) -> Option<usize> {
        if self.done == self.states.len() {
            return None;
        }
        let (i, u) = self.rx.recv().await?;
        let was = self.states[i].finish.is_some();
        self.states[i].apply(u);
        if !was && self.states[i].finish.is_some() {
            self.done += 1;
        }
        Some(i)
    }

    pub async fn finish(&mut self) {
        while self.next().await.is_some() {}
    }

    pub fn all_done(&self) -> bool {
        self.done == self.states.len()
    }
}

fn lp_tuple(tok: &Tokenizer, lp: Option<f32>, id: u32, with_text: bool) -> Value {
    let text = if with_text { Value::String(tok.inner.decode(&[id], false).unwrap_or_default()) } else { Value::Null };
    json!([lp.map(|x| x as f64), id, text])
}

fn top_list(tok: &Tokenizer, top: &[(u32, f32)], with_text: bool) -> Value {
    Value::Array(top.iter().map(|&(id, lp)| lp_tuple(tok, Some(lp), id, with_text)).collect())
}

/// One item in SGLang's response shape (`text`, `output_ids`, `meta_info`).
pub fn item_json(tok: &Tokenizer, s: &ItemState, with_text: bool, elapsed: Option<f64>) -> Value {
    let mut meta = Map::new();
    meta.insert("id".into(), json!(s.rid));
    meta.insert("finish_reason".into(), s.finish.as_ref().map_or(Value::Null, Finish::to_json));
    meta.insert("prompt_tokens".into(), json!(s.prompt_tokens));
    meta.insert("completion_tokens".into(), json!(s.tokens.len()));
    meta.insert("cached_tokens".into(), json!(0));
    meta.insert("weight_version".into(), json!(s.weight_version));
    if s.return_logprob {
        let (ids, lps, tops) = match &s.input {
            Some(i) => (i.ids.clone(), i.logprobs.clone(), i.top.clone()),
            None => (Vec::new(), Vec::new(), Vec::new()),
        };
        meta.insert(
            "input_token_logprobs".into(),
            Value::Array(ids.iter().zip(&lps).map(|(&id, &lp)| lp_tuple(tok, lp, id, with_text)).collect()),
        );
        meta.insert(
            "output_token_logprobs".into(),
            Value::Array(s.tokens.iter().map(|t| lp_tuple(tok, Some(t.logprob), t.id, with_text)).collect()),
        );
        meta.insert("output_token_logprobs_length".into(), json!(s.tokens.len()));
        if s.top_n > 0 {
            meta.insert(
                "input_top_logprobs".into(),
                Value::Array(tops.iter().map(|t| t.as_ref().map_or(Value::Null, |t| top_list(tok, t, with_text))).collect()),
            );
            meta.insert("output_top_logprobs".into(), Value::Array(s.tokens.iter().map(|t| top_list(tok, &t.top, with_text)).collect()));
        }
    }
    if let Some(e) = elapsed {
        meta.insert("e2e_latency".into(), json!(e));
    }
    json!({"text": s.text(tok), "output_ids": s.output_ids(), "meta_info": meta})
}

/// The HTTP status an aborted item maps to (SGLang: 400 / 5xx aborts become errors).
fn abort_status(states: &[ItemState]) -> Option<(StatusCode, String)> {
    for s in states {
        if let Some(Finish::Abort { message, status_code: Some(code), .. }) = &s.finish {
            if *code == 400 || *code >= 500 {
                return Some((StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), message.clone()));
            }
        }
    }
    None
}

async fn generate(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    st.generate_calls.fetch_add(1, Ordering::Relaxed);
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let req = match parse_generate(&st, &m) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    let mut run = match Running::start(&st, req.items, req.stream) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let with_text = req.return_text_in_logprobs;
    if !req.stream {
        run.finish().await;
        if let Some((code, msg)) = abort_status(&run.states) {
            return error(code, msg);
        }
        let e2e = run.t0.elapsed().as_secs_f64();
        let items: Vec<Value> = run.states.iter().map(|s| item_json(&st.tok, s, with_text, Some(e2e))).collect();
        let body = if req.batched { Value::Array(items) } else { items.into_iter().next().unwrap_or(Value::Null) };
        return Json(body).into_response();
    }
    let batched = req.batched;
    let stream = futures::stream::unfold((run, st, false), move |(mut run, st, ended)| async move {
        if ended {
            return None;
        }
        match run.next().await {
            Some(i) => {
                let s = &run.states[i];
                let fin = s.finish.is_some();
                let mut v = item_json(&st.tok, s, with_text, fin.then(|| run.t0.elapsed().as_secs_f64()));
                if batched {
                    v["index"] = json!(i);
                }
                let ev = Event::default().data(v.to_string());
                Some((Ok::<Event, Infallible>(ev), (run, st, false)))
            }
            None => Some((Ok(Event::default().data("[DONE]")), (run, st, true))),
        }
    });
    Sse::new(stream).into_response()
}

// ---------------------------------------------------------------- admin endpoints

async fn health() -> StatusCode {
    StatusCode::OK
}

/// A 1-token greedy generate through the scheduler; 200 when it answers, 503
/// after 20 s (SGLang's `SGLANG_HEALTH_CHECK_TIMEOUT`). A paused server counts
/// as healthy: it is alive and waiting for `/continue_generation`.
async fn health_generate(State(st): State<Arc<AppState>>) -> Response {
    if st.shared.paused() {
        return StatusCode::OK.into_response();
    }
    let (params, _) = match parse_sampling(Some(&json!({"max_new_tokens": 1, "temperature": 0})), st.cfg.vocab_size) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e),
    };
    let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let item = Item {
        rid: format!("HEALTH_CHECK_{ts}_{}", st.uuid_hex()),
        input_ids: vec![0],
        params,
        return_logprob: false,
        logprob_start_len: 0,
        top_logprobs_num: 0,
        sample_index: 0,
    };
    let mut run = match Running::start(&st, vec![item], false) {
        Ok(r) => r,
        Err(_) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
    };
    match tokio::time::timeout(Duration::from_secs(20), run.finish()).await {
        Ok(()) if run.states[0].finish.as_ref().is_some_and(|f| !matches!(f, Finish::Abort { status_code: Some(_), .. })) => StatusCode::OK.into_response(),
        _ => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

fn current_model_path(st: &AppState) -> String {
    st.shared.model_path()
}

fn current_version(st: &AppState) -> String {
    st.shared.version()
}

async fn model_info(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "model_path": current_model_path(&st),
        "tokenizer_path": st.cfg.tokenizer_path,
        "is_generation": true,
        "preferred_sampling_params": null,
        "weight_version": current_version(&st),
        "has_image_understanding": false,
        "has_audio_understanding": false,
    }))
}

async fn weight_version(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"weight_version": current_version(&st)}))
}

fn load_json(st: &AppState) -> Value {
    load_of(&st.shared)
}

/// `/get_load` of one scheduler's state (or of the front one: the replicas' sums).
fn load_of(s: &Shared) -> Value {
    let (running, waiting) = (s.running(), s.waiting());
    json!({"num_reqs": running + waiting, "num_running_reqs": running, "num_waiting_reqs": waiting, "num_tokens": 0})
}

async fn server_info(State(st): State<Arc<AppState>>) -> Json<Value> {
    let c = &st.cfg;
    Json(json!({
        "model_path": current_model_path(&st),
        "tokenizer_path": c.tokenizer_path,
        "served_model_name": c.served_model_name,
        "host": c.host,
        "port": st.port,
        "tp_size": 1,
        "dp_size": c.dp_size,
        "device": c.device,
        "dtype": c.dtype,
        "max_running_requests": c.max_running_requests,
        "max_prefill_tokens": c.max_prefill_tokens,
        "context_length": c.context_len,
        "random_seed": c.random_seed,
        "weight_version": current_version(&st),
        "scripted": c.scripted,
        "max_req_input_len": c.context_len.saturating_sub(1),
        // One entry per data-parallel replica, as SGLang has one per DP rank.
        "internal_states": if st.shared.replicas.is_empty() { vec![load_json(&st)] } else { st.shared.replicas.iter().map(|r| load_of(r)).collect() },
        "version": format!("arl-serve {}", env!("CARGO_PKG_VERSION")),
        // arl's own counters (not in SGLang): calls received since start.
        "arl_generate_calls": st.generate_calls.load(Ordering::Relaxed),
        "arl_abort_calls": st.abort_calls.load(Ordering::Relaxed),
    }))
}

async fn load(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(load_json(&st))
}

async fn flush_cache(State(st): State<Arc<AppState>>) -> Response {
    let (tx, rx) = oneshot::channel();
    if let Err(r) = st.send(Cmd::Flush { reply: tx }) {
        return r;
    }
    match rx.await {
        Ok(true) => (
            StatusCode::OK,
            "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n",
        )
            .into_response(),
        _ => (StatusCode::BAD_REQUEST, "Cache not flushed: there are running or waiting requests.\n").into_response(),
    }
}

async fn pause(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let mode = match field(&m, "mode").map(|v| v.as_str()) {
        None | Some(Some("abort")) => PauseMode::Abort,
        Some(Some("in_place" | "retract")) => PauseMode::InPlace,
        Some(_) => return bad("`mode` must be \"abort\", \"retract\" or \"in_place\""),
    };
    let (tx, rx) = oneshot::channel();
    if let Err(r) = st.send(Cmd::Pause { mode, reply: tx }) {
        return r;
    }
    let _ = rx.await;
    Json(json!({"message": "Generation paused successfully.", "status": "ok"})).into_response()
}

async fn continue_generation(State(st): State<Arc<AppState>>) -> Response {
    let (tx, rx) = oneshot::channel();
    if let Err(r) = st.send(Cmd::Continue { reply: tx }) {
        return r;
    }
    let _ = rx.await;
    Json(json!({"message": "Generation continued successfully.", "status": "ok"})).into_response()
}

async fn abort_request(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    st.abort_calls.fetch_add(1, Ordering::Relaxed);
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let all = match as_bool(&m, "abort_all", false) {
        Ok(a) => a,
        Err(e) => return bad(e),
    };
    let rid = match field(&m, "rid") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return bad(format!("`rid` must be a string, got {v}")),
    };
    if let Err(r) = st.send(Cmd::Abort { rid, all }) {
        return r;
    }
    StatusCode::OK.into_response()
}

async fn update_weights_from_disk(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let fail = |msg: String| (StatusCode::BAD_REQUEST, Json(json!({"success": false, "message": msg, "num_paused_requests": 0}))).into_response();
    let Some(path) = field(&m, "model_path").and_then(Value::as_str) else {
        return fail("`model_path` (a string) is required".into());
    };
    let version = match field(&m, "weight_version") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(v) => return fail(format!("`weight_version` must be a string, got {v}")),
    };
    let abort_all = match as_bool(&m, "abort_all_requests", false) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    if let Some(f) = field(&m, "load_format").and_then(Value::as_str) {
        if !matches!(f, "auto" | "safetensors") {
            return fail(format!("load_format `{f}` is not supported by arl-serve (auto, safetensors)"));
        }
    }
    let (tx, rx) = oneshot::channel();
    if let Err(r) = st.send(Cmd::Update { path: path.into(), version, abort_all, reply: tx }) {
        return r;
    }
    match rx.await {
        Ok(UpdateResult { success, message, num_paused_requests }) => {
            let code = if success { StatusCode::OK } else { StatusCode::BAD_REQUEST };
            (code, Json(json!({"success": success, "message": message, "num_paused_requests": num_paused_requests}))).into_response()
        }
        Err(_) => fail("the scheduler dropped the update".into()),
    }
}

async fn update_weight_version(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let Some(v) = field(&m, "new_version").and_then(Value::as_str) else {
        return bad("`new_version` (a string) is required");
    };
    if as_bool(&m, "abort_all_requests", true).unwrap_or(true) {
        let _ = st.send(Cmd::Abort { rid: None, all: true });
    }
    st.shared.set_version(v);
    Json(json!({"success": true, "message": format!("Weight version updated to {v}"), "new_version": v})).into_response()
}

async fn models(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"object": "list", "data": [{
        "id": st.cfg.served_model_name, "object": "model", "created": 0, "owned_by": "arl",
        "root": st.cfg.served_model_name, "max_model_len": st.cfg.context_len,
    }]}))
}

/// OpenAI-style error body, as SGLang's `/v1/*` endpoints send it.
fn openai_error(status: StatusCode, msg: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"object": "error", "message": msg.into(), "type": "BadRequestError", "param": null, "code": status.as_u16()})),
    )
        .into_response()
}

async fn chat_completions(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Result<Bytes, BytesRejection>) -> Response {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !ct.starts_with("application/json") {
        return openai_error(StatusCode::BAD_REQUEST, "Unsupported Media Type: Only 'application/json' is allowed");
    }
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let req = match chat::parse_request(&st, &m) {
        Ok(r) => r,
        Err(e) => return openai_error(StatusCode::BAD_REQUEST, e),
    };
    let stream = req.meta.stream;
    let mut run = match Running::start(&st, req.items, stream) {
        Ok(r) => r,
        Err(r) => return r,
    };
    if !stream {
        run.finish().await;
        if let Some((code, msg)) = abort_status(&run.states) {
            return openai_error(code, msg);
        }
        return Json(chat::response(&st, &req.meta, &run.states)).into_response();
    }
    // SSE: `chat.completion.chunk` events per choice, an optional usage chunk, then `[DONE]`.
    let meta = Arc::new(req.meta);
    let progress = vec![chat::StreamState::default(); run.states.len()];
    let events = futures::stream::unfold((run, st, meta, progress, false), |(mut run, st, meta, mut progress, ended)| async move {
        if ended {
            return None;
        }
        let (evs, ended) = match run.next().await {
            Some(i) => {
                let chunks = chat::stream_chunks(&st, &meta, i, &run.states[i], &mut progress[i]);
                (chunks.into_iter().map(|c| Event::default().data(c.to_string())).collect::<Vec<_>>(), false)
            }
            None => {
                let mut evs = Vec::new();
                if meta.include_usage {
                    evs.push(Event::default().data(chat::usage_chunk(&st, &meta, &run.states).to_string()));
                }
                evs.push(Event::default().data("[DONE]"));
                (evs, true)
            }
        };
        let evs = futures::stream::iter(evs.into_iter().map(Ok::<Event, Infallible>));
        Some((evs, (run, st, meta, progress, ended)))
    });
    Sse::new(futures::StreamExt::flatten(events)).into_response()
}
