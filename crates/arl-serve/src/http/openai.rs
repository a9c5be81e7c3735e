//! The OpenAI-compatible endpoints: `/v1/models` and `/v1/chat/completions`.

use super::chat;
use super::generate::abort_status;
use super::{parse_body, AppState, Running};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
/// OpenAI-style error body, as SGLang's `/v1/*` endpoints send it.
pub(super) fn openai_error(status: StatusCode, msg: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"object": "error", "message": msg.into(), "type": "BadRequestError", "param": null, "code": status.as_u16()})),
    )
        .into_response()
}

pub(super) async fn chat_completions(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
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
    let events = futures::stream::unfold(
        (run, st, meta, progress, false),
        |(mut run, st, meta, mut progress, ended)| async move {
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
        },
    );
    Sse::new(futures::StreamExt::flatten(events)).into_response()
}
