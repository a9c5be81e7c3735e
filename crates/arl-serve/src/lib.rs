//! `arl-serve`'s server: SGLang's HTTP API (docs/reference/protocols.md §1–2) over
//! a continuous-batching scheduler on the shared model code.
//!
//! * `config`: the server's settings ([`Config`]).
//! * `http`: the axum routes, request validation and SGLang's wire shapes,
//!   and the OpenAI-style `/v1/chat/completions` (`http::chat`).
//! * `scheduler`: the thread that owns the engine and batches sequences
//!   (one per `--dp-size` replica), and the dispatcher in front of several.
//! * `metrics`: `/metrics` in Prometheus' text format under SGLang's names.
//! * `sampling`: greedy / top-k / top-p / min-p draws from log-prob rows.
//! * `engine`: the interface to a model, and the `--scripted` test double.
//! * `tch_engine`: the libtorch engine over `arl_model`.
mod config;
pub mod engine;
pub mod http;
pub mod metrics;
pub mod prefix;
pub mod sampling;
pub mod scheduler;
pub mod tch_engine;

use anyhow::{Context, Result};
use arl_chat::tokenizer::Tokenizer;
use std::sync::Arc;

pub use config::Config;

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
        let listener = arl_http::server::listen(&addr).await.with_context(|| format!("cannot listen on `{addr}`"))?;
        let local = listener.local_addr()?;
        eprintln!("arl-serve: listening on http://{local}");
        let read_timeout = cfg.read_timeout;
        let state = Arc::new(http::AppState::new(cfg, tx, shared, tok, local.port()));
        arl_http::server::accept_loop("arl-serve", listener, http::router(state), read_timeout).await;
        Ok(())
    })
}
