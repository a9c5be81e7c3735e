//! The task site's HTTP side inside `arl-env`: episodes of [`site::State`]
//! and their pages.
//!
//! - `POST /web/episodes {"setup": metadata.web_setup}` → `{"episode_id"}`
//! - `GET /web/episodes/ID` → the state (what `arl-reward --rm web` checks);
//!   `DELETE /web/episodes/ID` forgets it
//! - `GET|POST /web/e/ID/PATH` → the episode's pages and forms (HTML)
//!
//! Episode ids are random; beyond the episode limit the oldest is forgotten.
use super::site::{self, Resp, State};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Ax};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

struct Episodes {
    map: HashMap<String, (u64, State)>,
    next: u64,
    max: usize,
}

type St = Arc<Mutex<Episodes>>;

fn err(status: StatusCode, msg: impl Into<String>) -> Response {
    (status, Json(json!({"error": msg.into()}))).into_response()
}

fn new_id() -> String {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    static CTR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let c = CTR.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let a = crate::rng::mix(&[t, std::process::id() as u64, c, 0x3eb]);
    let b = crate::rng::mix(&[a, c, 0x9e37_79b9]);
    format!("web-{a:016x}{b:016x}")
}

async fn create(Ax(st): Ax<St>, body: Bytes) -> Response {
    let v: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return err(StatusCode::BAD_REQUEST, format!("invalid JSON body: {e}")),
        }
    };
    let setup = v.get("setup").cloned().unwrap_or(json!({"products": []}));
    let state = match State::from_setup(&setup) {
        Ok(s) => s,
        Err(e) => return err(StatusCode::UNPROCESSABLE_ENTITY, e),
    };
    let id = new_id();
    let mut g = st.lock().unwrap_or_else(|p| p.into_inner());
    if g.map.len() >= g.max {
        if let Some(oldest) = g.map.iter().min_by_key(|(_, (n, _))| *n).map(|(k, _)| k.clone()) {
            g.map.remove(&oldest);
        }
    }
    let n = g.next;
    g.next += 1;
    g.map.insert(id.clone(), (n, state));
    Json(json!({"episode_id": id})).into_response()
}

async fn state(Ax(st): Ax<St>, Path(id): Path<String>) -> Response {
    let g = st.lock().unwrap_or_else(|p| p.into_inner());
    match g.map.get(&id) {
        Some((_, s)) => Json(json!(s)).into_response(),
        None => err(StatusCode::NOT_FOUND, format!("no episode `{id}`")),
    }
}

async fn forget(Ax(st): Ax<St>, Path(id): Path<String>) -> Response {
    let mut g = st.lock().unwrap_or_else(|p| p.into_inner());
    match g.map.remove(&id) {
        Some(_) => Json(json!({"deleted": id})).into_response(),
        None => err(StatusCode::NOT_FOUND, format!("no episode `{id}`")),
    }
}

fn html(status: u16, body: String) -> Response {
    (StatusCode::from_u16(status).unwrap_or(StatusCode::OK), [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

fn answer(base: &str, r: Resp) -> Response {
    match r {
        Resp::Page { status, html: h } => html(status, h),
        Resp::Redirect(to) => (StatusCode::SEE_OTHER, [(header::LOCATION, format!("{base}{to}"))]).into_response(),
    }
}

fn not_found() -> Response {
    html(404, "<!doctype html><title>Not found</title><p>There is no such episode (it ended, or the server restarted).</p>".into())
}

async fn page_get(Ax(st): Ax<St>, Path((id, rest)): Path<(String, String)>, RawQuery(q): RawQuery) -> Response {
    let g = st.lock().unwrap_or_else(|p| p.into_inner());
    let Some((_, s)) = g.map.get(&id) else { return not_found() };
    let base = format!("/web/e/{id}/");
    answer(&base, site::get(s, &base, &rest, q.as_deref().unwrap_or("")))
}

async fn root_get(st: Ax<St>, Path(id): Path<String>, q: RawQuery) -> Response {
    page_get(st, Path((id, String::new())), q).await
}

async fn page_post(Ax(st): Ax<St>, Path((id, rest)): Path<(String, String)>, body: Bytes) -> Response {
    let text = String::from_utf8_lossy(&body);
    let form: Vec<(String, String)> = text
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (a, b) = kv.split_once('=').unwrap_or((kv, ""));
            (site::url_decode(a), site::url_decode(b))
        })
        .collect();
    let mut g = st.lock().unwrap_or_else(|p| p.into_inner());
    let Some((_, s)) = g.map.get_mut(&id) else { return not_found() };
    let base = format!("/web/e/{id}/");
    answer(&base, site::post(s, &base, &rest, &form))
}

/// The `/web/…` routes, merged into `arl-env`'s router.
pub fn router<S: Clone + Send + Sync + 'static>(max_episodes: usize) -> Router<S> {
    let st: St = Arc::new(Mutex::new(Episodes { map: HashMap::new(), next: 0, max: max_episodes.max(1) }));
    Router::new()
        .route("/web/episodes", post(create))
        .route("/web/episodes/{id}", get(state).delete(forget))
        .route("/web/e/{id}/", get(root_get))
        .route("/web/e/{id}/{*rest}", get(page_get).post(page_post))
        .with_state(st)
}
