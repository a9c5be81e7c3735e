//! `arl-serve`'s server: SGLang's HTTP API (docs/reference/protocols.md §1–2) over
//! a continuous-batching scheduler on the shared model code.
//!
//! * `http`: the axum routes, request validation and SGLang's wire shapes,
//!   and the OpenAI-style `/v1/chat/completions` (`http::chat`).
//! * `scheduler`: the thread that owns the engine and batches sequences
//!   (one per `--dp-size` replica), and the dispatcher in front of several.
//! * `metrics`: `/metrics` in Prometheus' text format under SGLang's names.
//! * `sampling`: greedy / top-k / top-p / min-p draws from log-prob rows.
//! * `engine`: the interface to a model, and the `--scripted` test double.
//! * `tch_engine`: the libtorch engine over `arl_model`.
pub mod engine;
pub mod http;
pub mod metrics;
pub mod sampling;
pub mod scheduler;
pub mod tch_engine;

use anyhow::{Context, Result};
use arl_chat::tokenizer::Tokenizer;
use std::sync::Arc;

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
    /// How CPU float32 linears multiply (`--cpu-matmul` as chosen: `blas`,
    /// `onednn`; `none` off the CPU or in another dtype).
    pub cpu_matmul: String,
    /// `--scripted` file, when the test double answers.
    pub scripted: Option<String>,
    pub quiet: bool,
    /// Log every request as it ends at `info` rather than `debug`.
    pub log_requests: bool,
    /// Data-parallel replicas (`--dp-size`).
    pub dp_size: usize,
    /// How the model writes tool calls (`--tool-call-parser`).
    pub tool_call_parser: arl_chat::toolcall::Parser,
    /// The text of `--tool-header FILE`, replacing the default tool header.
    pub tool_header: Option<String>,
    /// When tools go into the system message as a header (`--tool-header-mode`).
    pub tool_header_mode: arl_chat::tool_header::HeaderMode,
    /// LoRA adapters loaded at start (`--lora-paths`): name and directory.
    pub lora_paths: Vec<(String, String)>,
}

/// Starts one scheduler thread per engine (data-parallel replicas behind a
/// [`scheduler::Dispatcher`] when there are several) and serves HTTP until the
/// process is killed. Prints `listening on http://HOST:PORT` on stderr once
/// bound (port 0 picks a free port). The `--lora-paths` adapters are loaded
/// into every replica first: one that does not load is bad input data
/// ([`arl_core::cli`]'s exit 65), before anything listens.
pub fn serve(cfg: Config, engines: Vec<Box<dyn engine::Engine>>, tok: Arc<Tokenizer>, eos: Vec<u32>) -> Result<()> {
    anyhow::ensure!(!engines.is_empty(), "no engine to serve");
    let metrics = Arc::new(metrics::Metrics::default());
    let new_shared =
        |replicas| Arc::new(scheduler::Shared::new(&cfg.weight_version, &cfg.model_path, replicas, metrics.clone()));
    let (tx, rx) = crossbeam_channel::unbounded();
    let start = |engine, shared: Arc<scheduler::Shared>, rx, seed, name: String| {
        let mut sched = scheduler::Scheduler::new(
            engine,
            tok.clone(),
            eos.clone(),
            shared,
            rx,
            cfg.max_running_requests,
            cfg.max_prefill_tokens,
            seed,
            cfg.log_requests,
        );
        for (lora, dir) in &cfg.lora_paths {
            sched.load_lora(lora, dir, None).map_err(|e| {
                arl_core::error::data(format!("`--lora-paths {lora}={dir}`: the adapter does not load: {e:#}"))
            })?;
        }
        std::thread::Builder::new()
            .name(name)
            .spawn(move || sched.run())
            .context("starting a scheduler thread")
            .map(drop)
    };
    let shared = if engines.len() == 1 {
        let shared = new_shared(vec![]);
        let engine = engines.into_iter().next().expect("one engine");
        start(engine, shared.clone(), rx, cfg.random_seed, "arl-scheduler".into())?;
        shared
    } else {
        let mut txs = Vec::new();
        let mut parts = Vec::new();
        for (i, engine) in engines.into_iter().enumerate() {
            let (t, r) = crossbeam_channel::unbounded();
            let part = new_shared(vec![]);
            // Replica 0 keeps the server's seed; the others draw their own streams.
            let seed = if i == 0 { cfg.random_seed } else { arl_core::rng::mix(&[cfg.random_seed, i as u64]) };
            start(engine, part.clone(), r, seed, format!("arl-scheduler-{i}"))?;
            txs.push(t);
            parts.push(part);
        }
        let shared = new_shared(parts);
        if let Some(first) = shared.replicas.first() {
            *shared.adapters.lock().map_err(|_| anyhow::anyhow!("poisoned"))? = first.adapters();
        }
        let dispatcher = scheduler::Dispatcher::new(rx, txs, shared.clone());
        std::thread::Builder::new()
            .name("arl-dispatcher".into())
            .spawn(move || dispatcher.run())
            .context("starting the dispatcher thread")?;
        shared
    };
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
async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    read_timeout: std::time::Duration,
) -> Result<()> {
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
