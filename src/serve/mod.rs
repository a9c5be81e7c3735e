//! `arl-serve`'s server: SGLang's HTTP API (reference/protocols.md §1–2) over
//! a continuous-batching scheduler on the shared model code.
//!
//! * `http`: the axum routes, request validation and SGLang's wire shapes.
//! * `scheduler`: the thread that owns the engine and batches sequences.
//! * `sampling`: greedy / top-k / top-p / min-p draws from log-prob rows.
//! * `engine`: the interface to a model, and the `--scripted` test double.
//! * `tch_engine`: the libtorch engine over `crate::model` (feature `torch`).
//! * `chat`: `/v1/chat/completions` prompt rendering and Qwen tool-call parsing.
pub mod chat;
pub mod engine;
pub mod http;
pub mod sampling;
pub mod scheduler;
#[cfg(feature = "torch")]
pub mod tch_engine;

use crate::tokenizer::Tokenizer;
use anyhow::{Context, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex};

/// Everything the server needs besides the engine.
#[derive(Debug, Clone)]
pub struct Config {
    pub model_path: String,
    pub tokenizer_path: String,
    pub served_model_name: String,
    pub host: String,
    pub port: u16,
    pub api_key: Option<String>,
    pub max_running_requests: usize,
    pub max_prefill_tokens: usize,
    pub max_body_bytes: usize,
    /// Time a client has for a request's headers, then again for its body.
    pub read_timeout: std::time::Duration,
    pub weight_version: String,
    pub random_seed: u64,
    pub context_len: usize,
    pub vocab_size: usize,
    pub device: String,
    pub dtype: String,
    /// `--scripted` file, when the test double answers.
    pub scripted: Option<String>,
    pub quiet: bool,
}

/// Starts the scheduler thread and serves HTTP until the process is killed.
/// Prints `listening on http://HOST:PORT` on stderr once bound (port 0 picks a free port).
pub fn serve(cfg: Config, engine: Box<dyn engine::Engine>, tok: Arc<Tokenizer>, eos: Vec<u32>) -> Result<()> {
    let shared = Arc::new(scheduler::Shared {
        weight_version: Mutex::new(cfg.weight_version.clone()),
        model_path: Mutex::new(cfg.model_path.clone()),
        running: AtomicUsize::new(0),
        waiting: AtomicUsize::new(0),
        paused: AtomicBool::new(false),
    });
    let (tx, rx) = crossbeam_channel::unbounded();
    let sched = scheduler::Scheduler::new(engine, tok.clone(), eos, shared.clone(), rx, cfg.max_running_requests, cfg.max_prefill_tokens, cfg.random_seed);
    std::thread::Builder::new().name("arl-scheduler".into()).spawn(move || sched.run()).context("starting the scheduler thread")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the HTTP runtime")?;
    rt.block_on(async move {
        let addr = format!("{}:{}", cfg.host, cfg.port);
        let listener = listen(&addr).await.with_context(|| format!("cannot listen on `{addr}`"))?;
        let local = listener.local_addr()?;
        eprintln!("arl-serve: listening on http://{local}");
        let read_timeout = cfg.read_timeout;
        let state = Arc::new(http::AppState::new(cfg, tx, shared, tok, local.port()));
        accept_loop(listener, http::router(state), read_timeout).await
    })
}

/// Serves each connection with HTTP/1.1 on its own task. Unlike `axum::serve`,
/// a connection whose request headers do not arrive within `read_timeout` is
/// closed (the body has the same time again: `http::auth` reads it).
async fn accept_loop(listener: tokio::net::TcpListener, app: axum::Router, read_timeout: std::time::Duration) -> Result<()> {
    use hyper_util::rt::{TokioIo, TokioTimer};
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            // Out of file descriptors and the like: the next accept may succeed.
            Err(e) => {
                eprintln!("arl-serve: accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new()).header_read_timeout(read_timeout);
            // A client that goes away mid-request is its own business.
            let _ = b.serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

/// Binds with a deep accept queue: a rollout opening hundreds of connections
/// at once would overflow the usual 128 (the kernel caps it at somaxconn),
/// and the connections that do not fit are reset.
async fn listen(addr: &str) -> Result<tokio::net::TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let sock = if a.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        sock.set_reuseaddr(true)?;
        match sock.bind(a).and_then(|_| sock.listen(4096)) {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.map_or_else(|| anyhow::anyhow!("`{addr}` resolves to no address"), Into::into))
}
