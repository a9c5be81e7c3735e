//! `arl-env`: environment services over HTTP: the shop API
//! ([`arl_env::shop`]) with per-episode state and its OpenAPI spec, and the
//! web environment's task site under `/web/` ([`arl_env::web::server`]).
use anyhow::{Context, Result};
use arl_core::cli::EXIT_CODES_HELP;
use arl_env::episodes::{self, body_object, error as err, Episodes, Shared};
use arl_env::shop::{self, Shop, EPISODE_HEADER};
use arl_http::body::{self as http_body, closing, BodyError};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use serde_json::json;
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

pub const TOOL: &str = "arl-env";

/// Environment services for agent rollouts: a stateful shop API with its OpenAPI spec, and a web site for browser tasks
///
/// Serves an inventory-and-orders API (`list_items`, `get_item`,
/// `restock_item`, `create_order`, `list_orders`, `cancel_order`) whose spec
/// is at `/openapi.json`, for `arl-rollout --openapi URL/openapi.json`. Each
/// episode has its own state: `POST /episodes {"setup": {…}}` starts one from
/// a task's `metadata.api_setup` and returns its id, which the tool calls
/// carry in the `X-Episode-Id` header; `GET /episodes/ID` returns the state
/// (for `arl-reward --rm api`), `DELETE /episodes/ID` forgets it. Episode ids
/// are random; a call without a known id is refused (404). Episodes beyond
/// `--max-episodes` evict the oldest.
///
/// The web environment's task site (a shop with a sign-up form, a product
/// search, a wishlist and a three-step checkout) lives under `/web/`:
/// `POST /web/episodes {"setup": {…}}` starts an episode from a task's
/// `metadata.web_setup`, its pages are under `/web/e/ID/` (for the browser
/// of `arl-rollout --web URL`), `GET /web/episodes/ID` returns what was
/// submitted (for `arl-reward --rm web`), `DELETE` forgets it.
///
/// Prints `arl-env: listening on http://HOST:PORT` on stderr once bound
/// (`--port 0` picks a free port) and serves until killed.
#[derive(Debug, Parser)]
#[command(name = "arl-env", version, after_long_help = EXIT_CODES_HELP)]
pub struct Args {
    /// Address to bind (loopback by default)
    #[arg(long, default_value = "127.0.0.1", value_name = "HOST")]
    pub host: String,
    /// Port; 0 picks a free one
    #[arg(long, default_value_t = 8700, value_name = "PORT")]
    pub port: u16,
    /// Largest request body, bytes (413 beyond)
    #[arg(long, default_value_t = 65536, value_name = "BYTES")]
    pub max_body_bytes: usize,
    /// Seconds a client gets to send a request's headers, then its body; a
    /// connection that stalls longer is closed (a stalled body gets 408)
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    pub read_timeout: f64,
    /// Most episodes kept; starting one more forgets the oldest
    #[arg(long, default_value_t = 100_000, value_name = "N")]
    pub max_episodes: usize,
}

type St = Shared<Shop>;

async fn create_episode(State(st): State<St>, body: Bytes) -> Response {
    episodes::create(&st, &body, json!({"items": []}), Shop::from_setup)
}

async fn get_episode(State(st): State<St>, Path(id): Path<String>) -> Response {
    episodes::state(&st, &id)
}

async fn delete_episode(State(st): State<St>, Path(id): Path<String>) -> Response {
    episodes::forget(&st, &id)
}

/// Every tool operation: route, gather path + query + body arguments, run on the episode's shop.
async fn operation(
    State(st): State<St>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Response {
    let Some((op, mut args)) = shop::route(method.as_str(), uri.path()) else {
        return err(StatusCode::NOT_FOUND, format!("no route {} {}", method, uri.path()));
    };
    let Some(id) = headers.get(EPISODE_HEADER).and_then(|v| v.to_str().ok()).map(str::to_string) else {
        return err(StatusCode::BAD_REQUEST, format!("missing the `{EPISODE_HEADER}` header"));
    };
    for (k, v) in q {
        args.insert(k, json!(v));
    }
    if method == Method::POST {
        match body_object(&body) {
            Ok(m) => {
                for (k, v) in m {
                    if args.contains_key(&k) {
                        return err(StatusCode::UNPROCESSABLE_ENTITY, format!("`{k}` given twice"));
                    }
                    args.insert(k, v);
                }
            }
            Err(r) => return r,
        }
    }
    let mut g = episodes::lock(&st);
    let Some(shop) = g.get_mut(&id) else { return episodes::not_found(&id) };
    let r = shop.handle(op, &args);
    (StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), Json(r.body)).into_response()
}

/// Reads every body within the size and time limits; an oversized one is
/// drained before its 413 so that the client reads the answer ([`arl_http::body`]).
async fn bounded_body(State(lim): State<(usize, Duration)>, req: Request, next: Next) -> Response {
    match http_body::buffer(req, lim.0, lim.1).await {
        Ok(req) => next.run(req).await,
        Err(BodyError::TooLarge) => closing(err(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body larger than {} bytes (--max-body-bytes)", lim.0),
        )),
        Err(BodyError::Timeout) => closing(err(
            StatusCode::REQUEST_TIMEOUT,
            format!("request body not received within {:?} (--read-timeout)", lim.1),
        )),
        Err(BodyError::Broken(e)) => {
            closing(err(StatusCode::BAD_REQUEST, format!("cannot read the request body: {e}")))
        }
    }
}

pub fn router(max_body: usize, read_timeout: Duration, max_episodes: usize, base_url: String) -> Router {
    let st: St = Episodes::shared(max_episodes, "ep-");
    let spec = Arc::new(shop::openapi(&base_url));
    Router::new()
        .route(
            "/openapi.json",
            get(move || {
                let s = spec.clone();
                async move { Json((*s).clone()) }
            }),
        )
        .route("/health", get(|| async { Json(json!({"ok": true})) }))
        .route("/episodes", post(create_episode))
        .route("/episodes/{id}", get(get_episode).delete(delete_episode))
        .merge(arl_env::web::server::router(max_episodes))
        .fallback(operation)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state((max_body, read_timeout), bounded_body))
        .with_state(st)
}

pub fn run(a: Args) -> Result<ExitCode> {
    if !(a.read_timeout.is_finite() && a.read_timeout > 0.0) {
        anyhow::bail!("--read-timeout must be a positive number of seconds, got {}", a.read_timeout);
    }
    let read_timeout = Duration::from_secs_f64(a.read_timeout);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the HTTP runtime")?;
    rt.block_on(async move {
        let addr = format!("{}:{}", a.host, a.port);
        let listener = arl_http::server::listen(&addr).await.with_context(|| format!("cannot listen on `{addr}`"))?;
        let local = listener.local_addr()?;
        eprintln!("{TOOL}: listening on http://{local}");
        let app = router(a.max_body_bytes, read_timeout, a.max_episodes, format!("http://{local}"));
        arl_http::server::accept_loop(TOOL, listener, app, read_timeout).await;
        anyhow::Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> std::process::ExitCode {
    arl_core::cli::main(TOOL, run)
}
