//! The rollout engine behind `arl-rollout`: the deterministic dataset walk,
//! group scheduling over a single-threaded async runtime, output with
//! `NAME.partial` and `--resume`, over-sampling with aborts.
//!
//! A group (the `-n` samples of one prompt) is placed on one endpoint and its
//! episodes run concurrently; at most `--concurrency` requests are in flight
//! overall, and enough groups are active to keep that many busy. A group is
//! written only when all its samples are done, so a killed run never leaves a
//! half group behind.
//!
//! A run, in order: `setup` builds what it runs with from the [`Config`]
//! (tools, template, clients); `plan` reads the dataset, walks it and renders
//! each prompt into a job; `drive` runs the jobs as groups and writes them
//! through `output`; `group` runs one group — its episodes (`episode`: one
//! token-in/token-out conversation with tools) or, with `--arena`, its games
//! (`arena`); `client` speaks to the servers (`answer` reads their answers)
//! and `trace` records the timeline.
pub mod answer;
pub mod arena;
pub mod client;
pub mod config;
mod drive;
pub mod env;
pub mod episode;
mod group;
pub mod output;
mod plan;
mod setup;
pub mod trace;

pub use crate::config::{Config, TOOL};
pub use crate::plan::{selected, walk};
use anyhow::Result;
use std::process::ExitCode;
use std::sync::Arc;

/// Runs the rollout of `cfg` to the end: every group written, or an error
/// (completed groups stay in the `.partial` file).
pub fn run(cfg: Config) -> Result<ExitCode> {
    // A steady loop of small requests over a heap that grows with the dataset.
    arl_core::alloc::keep_freed_memory();
    arl_core::alloc::no_transparent_huge_pages();
    // First, so that the trace's clock covers the whole run.
    let tracer = match &cfg.trace {
        Some(p) => Some(Arc::new(trace::Tracer::create(
            p,
            &trace::RunInfo {
                concurrency: cfg.concurrency,
                endpoints: cfg.router.as_slice().iter().chain(&cfg.endpoints).cloned().collect::<Vec<_>>().as_slice(),
                n_samples_per_prompt: cfg.n_samples_per_prompt,
            },
        )?)),
        None => None,
    };
    let res = run_with(cfg, tracer.clone());
    match tracer {
        Some(t) => {
            let finished = t.finish(res.is_ok());
            let code = res?;
            finished?;
            Ok(code)
        }
        None => res,
    }
}

fn run_with(cfg: Config, tracer: Option<Arc<trace::Tracer>>) -> Result<ExitCode> {
    let out_path = cfg.output.path.clone();
    let setup::Setup { rt, shared, opponent, envs } = setup::build(&cfg, tracer)?;
    let res = rt.block_on(drive::drive(cfg, shared.clone(), opponent.clone(), envs, out_path));
    // Tasks still holding `shared` (aborted groups) go with the runtime; the
    // last reference is dropped here, outside async code.
    drop(rt);
    drop(shared);
    drop(opponent);
    res
}
