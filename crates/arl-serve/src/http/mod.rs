//! The HTTP surface, shaped exactly like SGLang's (docs/reference/protocols.md §1–2),
//! so a client cannot tell `arl-serve` from an SGLang server: request fields and
//! their defaults, batch and `n` expansion, rids, `meta_info`, log-prob tuples,
//! cumulative SSE chunks ending in `data: [DONE]`, and 400 `{"error": …}` bodies.
//!
//! This file holds the shared state, the route table and the `--api-key` /
//! body-size middleware; `request` parses and validates bodies, `generate`
//! runs items through the scheduler and writes SGLang's answer, `admin` has
//! the health, info, pause and weight-update endpoints, and `openai` the
//! `/v1/*` ones, whose chat shapes (rendering, tool calls, chunks) are in
//! `chat`.

mod admin;
pub mod chat;
mod generate;
mod openai;
mod request;

use admin::{
    abort_request, continue_generation, flush_cache, health, health_generate, load, load_lora_adapter, model_info,
    models, pause, server_info, unload_lora_adapter, update_weight_version, update_weights_from_disk, weight_version,
};
use generate::generate;
pub use generate::{item_json, ItemState, Running};
use openai::chat_completions;
pub use request::{encode, parse_generate, parse_sampling, GenerateRequest, Item};

use crate::scheduler::{Cmd, Shared};
use crate::Config;
use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer::Tokenizer;
use arl_chat::tool_header::ToolPrompt;
use arl_http::body::{closing, BodyError};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub struct AppState {
    pub cfg: Config,
    pub tx: crossbeam_channel::Sender<Cmd>,
    pub shared: Arc<Shared>,
    pub tok: Arc<Tokenizer>,
    /// The model's chat template, compiled once, for `/v1/chat/completions`;
    /// why there is none (answered with 400 to chat requests) otherwise.
    pub template: Result<Arc<ChatTemplate>, String>,
    /// How tools reach the model with `template` (its tool section or a tool
    /// header, [`arl_chat::tool_header`]); why not, when it cannot be built.
    pub tool_prompt: Result<Arc<ToolPrompt>, String>,
    pub port: u16,
    counter: AtomicU64,
    seed: u64,
    /// `/generate` and `/abort_request` calls received (in `/get_server_info`).
    generate_calls: AtomicU64,
    abort_calls: AtomicU64,
}

impl AppState {
    pub fn new(
        cfg: Config,
        tx: crossbeam_channel::Sender<Cmd>,
        shared: Arc<Shared>,
        tok: Arc<Tokenizer>,
        port: u16,
    ) -> AppState {
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let seed = arl_core::rng::mix(&[nanos, std::process::id() as u64, port as u64]);
        let template = ChatTemplate::from_tokenizer(&tok).map(Arc::new).map_err(|e| format!("{e:#}"));
        let tool_prompt = template.clone().and_then(|t| {
            ToolPrompt::new(&t, cfg.tool_call_parser, cfg.tool_header.as_deref(), cfg.tool_header_mode)
                .map(Arc::new)
                .map_err(|e| format!("{e:#}"))
        });
        AppState {
            cfg,
            tx,
            shared,
            tok,
            template,
            tool_prompt,
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
        let a = arl_core::rng::mix(&[self.seed, c, 1]);
        let b = arl_core::rng::mix(&[self.seed, c, 2]);
        format!("{a:016x}{b:016x}")
    }

    fn send(&self, c: Cmd) -> Result<(), Response> {
        self.tx.send(c).map_err(|_| error(StatusCode::SERVICE_UNAVAILABLE, "the scheduler has stopped"))
    }
}

/// `/metrics`: Prometheus' text format under SGLang's metric names.
async fn metrics(State(st): State<Arc<AppState>>) -> Response {
    let sh = &st.shared;
    let g = crate::metrics::Gauges {
        running: sh.running(),
        queued: sh.waiting(),
        used_tokens: sh.used_tokens(),
        max_total_tokens: st.cfg.max_running_requests * st.cfg.context_len * st.cfg.dp_size.max(1),
        weight_version: sh.version(),
    };
    let body = sh.metrics.render(&st.cfg.served_model_name, &g);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
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
        .route("/metrics", get(metrics))
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
        .route("/load_lora_adapter", post(load_lora_adapter))
        .route("/unload_lora_adapter", post(unload_lora_adapter))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .with_state(state)
}

/// `--api-key`: every route but `/health` wants `Authorization: Bearer KEY`, as in SGLang.
/// A body over `--max-body-bytes` gets 413 (see [`arl_http::body`]).
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
    match arl_http::body::buffer(req, st.cfg.max_body_bytes, st.cfg.read_timeout).await {
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
    error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body larger than {} bytes (--max-body-bytes)", st.cfg.max_body_bytes),
    )
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
