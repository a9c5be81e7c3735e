//! The admin endpoints: health, model and server info, load, cache, pause
//! and continue, abort, weight updates, and LoRA adapters.

use super::request::{as_bool, field};
use super::{bad, error, parse_body, parse_sampling, AppState, Item, Running};
use crate::scheduler::{Cmd, Finish, LoraResult, PauseMode, Shared, UpdateResult};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

pub(super) async fn health() -> StatusCode {
    StatusCode::OK
}

/// A 1-token greedy generate through the scheduler; 200 when it answers, 503
/// after 20 s (SGLang's `SGLANG_HEALTH_CHECK_TIMEOUT`). A paused server counts
/// as healthy: it is alive and waiting for `/continue_generation`.
pub(super) async fn health_generate(State(st): State<Arc<AppState>>) -> Response {
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
        lora: None,
    };
    let mut run = match Running::start(&st, vec![item], false) {
        Ok(r) => r,
        Err(_) => return StatusCode::SERVICE_UNAVAILABLE.into_response(),
    };
    match tokio::time::timeout(Duration::from_secs(20), run.finish()).await {
        Ok(())
            if run.states[0]
                .finish
                .as_ref()
                .is_some_and(|f| !matches!(f, Finish::Abort { status_code: Some(_), .. })) =>
        {
            StatusCode::OK.into_response()
        }
        _ => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

pub(super) fn current_model_path(st: &AppState) -> String {
    st.shared.model_path()
}

pub(super) fn current_version(st: &AppState) -> String {
    st.shared.version()
}

/// The loaded adapters as SGLang's `loaded_adapters`: name → path.
fn loaded_adapters(st: &AppState) -> Value {
    Value::Object(st.shared.adapters().into_iter().map(|(n, a)| (n, Value::String(a.path))).collect())
}

/// arl's fuller view: name → path, weight version, rank, alpha, targets.
fn lora_adapters(st: &AppState) -> Value {
    Value::Object(st.shared.adapters().into_iter().map(|(n, a)| (n, a.to_json())).collect())
}

pub(super) async fn model_info(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "model_path": current_model_path(&st),
        "tokenizer_path": st.cfg.tokenizer_path,
        "is_generation": true,
        "preferred_sampling_params": null,
        "weight_version": current_version(&st),
        "has_image_understanding": false,
        "has_audio_understanding": false,
        // arl's: the LoRA adapters requests can name in `lora_path`.
        "lora_adapters": lora_adapters(&st),
    }))
}

pub(super) async fn weight_version(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"weight_version": current_version(&st)}))
}

pub(super) fn load_json(st: &AppState) -> Value {
    load_of(&st.shared)
}

/// `/get_load` of one scheduler's state (or of the front one: the replicas' sums).
pub(super) fn load_of(s: &Shared) -> Value {
    let (running, waiting) = (s.running(), s.waiting());
    json!({"num_reqs": running + waiting, "num_running_reqs": running, "num_waiting_reqs": waiting, "num_tokens": 0})
}

pub(super) async fn server_info(State(st): State<Arc<AppState>>) -> Json<Value> {
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
        "cpu_matmul": c.cpu_matmul,
        "decode_matmul": c.decode_matmul,
        "max_running_requests": c.max_running_requests,
        "max_prefill_tokens": c.max_prefill_tokens,
        "context_length": c.context_len,
        "random_seed": c.random_seed,
        "weight_version": current_version(&st),
        "scripted": c.scripted,
        "max_req_input_len": c.context_len.saturating_sub(1),
        // SGLang's server args name the adapters (`lora_paths`); arl's
        // `lora_adapters` says more (weight version, rank, targets).
        "enable_lora": true,
        "lora_paths": loaded_adapters(&st),
        "lora_adapters": lora_adapters(&st),
        // One entry per data-parallel replica, as SGLang has one per DP rank.
        "internal_states": if st.shared.replicas.is_empty() { vec![load_json(&st)] } else { st.shared.replicas.iter().map(|r| load_of(r)).collect() },
        "version": format!("arl-serve {}", env!("CARGO_PKG_VERSION")),
        // arl's own counters (not in SGLang): calls received since start.
        "arl_generate_calls": st.generate_calls.load(Ordering::Relaxed),
        "arl_abort_calls": st.abort_calls.load(Ordering::Relaxed),
    }))
}

pub(super) async fn load(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(load_json(&st))
}

pub(super) async fn flush_cache(State(st): State<Arc<AppState>>) -> Response {
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

pub(super) async fn pause(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
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

pub(super) async fn continue_generation(State(st): State<Arc<AppState>>) -> Response {
    let (tx, rx) = oneshot::channel();
    if let Err(r) = st.send(Cmd::Continue { reply: tx }) {
        return r;
    }
    let _ = rx.await;
    Json(json!({"message": "Generation continued successfully.", "status": "ok"})).into_response()
}

pub(super) async fn abort_request(State(st): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
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

/// A request's optional `weight_version`: a string, or a number taken as
/// its decimal text (what a trainer's step counter sends).
fn version_field(m: &serde_json::Map<String, Value>) -> Result<Option<String>, String> {
    match field(m, "weight_version") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(v) => Err(format!("`weight_version` must be a string, got {v}")),
    }
}

pub(super) async fn update_weights_from_disk(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let fail = |msg: String| {
        (StatusCode::BAD_REQUEST, Json(json!({"success": false, "message": msg, "num_paused_requests": 0})))
            .into_response()
    };
    let Some(path) = field(&m, "model_path").and_then(Value::as_str) else {
        return fail("`model_path` (a string) is required".into());
    };
    let version = match version_field(&m) {
        Ok(v) => v,
        Err(e) => return fail(e),
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
            (code, Json(json!({"success": success, "message": message, "num_paused_requests": num_paused_requests})))
                .into_response()
        }
        Err(_) => fail("the scheduler dropped the update".into()),
    }
}

pub(super) async fn update_weight_version(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
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
    Json(json!({"success": true, "message": format!("Weight version updated to {v}"), "new_version": v}))
        .into_response()
}

/// The served model, then each LoRA adapter as SGLang lists them (`parent`: the base).
pub(super) async fn models(State(st): State<Arc<AppState>>) -> Json<Value> {
    let base = &st.cfg.served_model_name;
    let mut data = vec![json!({
        "id": base, "object": "model", "created": 0, "owned_by": "arl",
        "root": base, "max_model_len": st.cfg.context_len,
    })];
    for (name, a) in st.shared.adapters() {
        data.push(json!({
            "id": name, "object": "model", "created": 0, "owned_by": "arl",
            "root": a.path, "parent": base, "max_model_len": st.cfg.context_len,
        }));
    }
    Json(json!({"object": "list", "data": data}))
}

/// SGLang's answer to a LoRA load or unload: 200 on success, 400 otherwise,
/// with the adapters loaded afterwards.
fn lora_answer(st: &AppState, r: LoraResult) -> Response {
    let code = if r.success { StatusCode::OK } else { StatusCode::BAD_REQUEST };
    let body = json!({"success": r.success, "error_message": r.error, "loaded_adapters": loaded_adapters(st)});
    (code, Json(body)).into_response()
}

fn lora_failure(st: &AppState, msg: impl Into<String>) -> Response {
    lora_answer(st, LoraResult { success: false, error: Some(msg.into()), info: None })
}

/// `POST /load_lora_adapter` `{"lora_name", "lora_path"}` (and arl's
/// optional `weight_version`): loads the adapter into every replica, or
/// replaces the one of that name (requests already received keep the
/// version they started with). Nothing changes when it fails.
pub(super) async fn load_lora_adapter(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let name = match field(&m, "lora_name") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => return lora_failure(&st, "`lora_name` (a non-empty string) is required"),
    };
    let Some(path) = field(&m, "lora_path").and_then(Value::as_str).map(str::to_string) else {
        return lora_failure(&st, "`lora_path` (a string) is required");
    };
    let version = match version_field(&m) {
        Ok(v) => v,
        Err(e) => return lora_failure(&st, e),
    };
    let (tx, rx) = oneshot::channel();
    if let Err(r) = st.send(Cmd::LoadLora { name: name.clone(), path: path.clone(), version, reply: tx }) {
        return r;
    }
    match rx.await {
        Ok(LoraResult { success: false, error, .. }) => {
            let e = error.unwrap_or_default();
            lora_failure(&st, format!("Failed to load LoRA adapter `{name}` from `{path}`: {e}"))
        }
        Ok(r) => lora_answer(&st, r),
        Err(_) => lora_failure(&st, "the scheduler dropped the request"),
    }
}

/// `POST /unload_lora_adapter` `{"lora_name"}`: new requests can no longer
/// name it; those already received finish with it.
pub(super) async fn unload_lora_adapter(
    State(st): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let m = match parse_body(body) {
        Ok(m) => m,
        Err(r) => return r,
    };
    let Some(name) = field(&m, "lora_name").and_then(Value::as_str).map(str::to_string) else {
        return lora_failure(&st, "`lora_name` (a string) is required");
    };
    let (tx, rx) = oneshot::channel();
    if let Err(r) = st.send(Cmd::UnloadLora { name, reply: tx }) {
        return r;
    }
    match rx.await {
        Ok(r) => lora_answer(&st, r),
        Err(_) => lora_failure(&st, "the scheduler dropped the request"),
    }
}
