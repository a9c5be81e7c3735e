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
use crate::episodes::{self, Episodes, Shared};
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State as Ax};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;

type St = Shared<State>;

async fn create(Ax(st): Ax<St>, body: Bytes) -> Response {
    episodes::create(&st, &body, json!({"products": []}), State::from_setup)
}

async fn state(Ax(st): Ax<St>, Path(id): Path<String>) -> Response {
    episodes::state(&st, &id)
}

async fn forget(Ax(st): Ax<St>, Path(id): Path<String>) -> Response {
    episodes::forget(&st, &id)
}

fn html(status: u16, body: String) -> Response {
    (StatusCode::from_u16(status).unwrap_or(StatusCode::OK), [(header::CONTENT_TYPE, "text/html; charset=utf-8")], body)
        .into_response()
}

fn answer(base: &str, r: Resp) -> Response {
    match r {
        Resp::Page { status, html: h } => html(status, h),
        Resp::Redirect(to) => (StatusCode::SEE_OTHER, [(header::LOCATION, format!("{base}{to}"))]).into_response(),
    }
}

fn not_found() -> Response {
    html(
        404,
        "<!doctype html><title>Not found</title><p>There is no such episode (it ended, or the server restarted).</p>"
            .into(),
    )
}

async fn page_get(Ax(st): Ax<St>, Path((id, rest)): Path<(String, String)>, RawQuery(q): RawQuery) -> Response {
    let g = episodes::lock(&st);
    let Some(s) = g.get(&id) else { return not_found() };
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
    let mut g = episodes::lock(&st);
    let Some(s) = g.get_mut(&id) else { return not_found() };
    let base = format!("/web/e/{id}/");
    answer(&base, site::post(s, &base, &rest, &form))
}

/// The `/web/…` routes, merged into `arl-env`'s router.
pub fn router<S: Clone + Send + Sync + 'static>(max_episodes: usize) -> Router<S> {
    let st: St = Episodes::shared(max_episodes, "web-");
    Router::new()
        .route("/web/episodes", post(create))
        .route("/web/episodes/{id}", get(state).delete(forget))
        .route("/web/e/{id}/", get(root_get))
        .route("/web/e/{id}/{*rest}", get(page_get).post(page_post))
        .with_state(st)
}
