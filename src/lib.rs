//! arl: agent reinforcement learning for LLMs as composable Unix tools.
//!
//! The binaries in `bin/` are thin mains; the work lives here. See
//! `src/README.md` for what each module is for.
pub mod advantage;
pub mod arena;
pub mod chat;
pub mod cli;
pub mod cmd;
pub mod dataset;
pub mod dist;
pub mod docs;
pub mod episodes;
pub mod filter;
pub mod group;
pub mod http_body;
pub mod io;
pub mod model;
pub mod record;
pub mod reward;
pub mod rng;
pub mod rollout;
pub mod sandbox;
pub mod sql;
pub mod schema;
pub mod tasks;
pub mod serve;
pub mod shop;
pub mod sync;
pub mod tokenizer;
pub mod tokenizer_build;
pub mod tools;
pub mod stats;
pub mod train;
pub mod web;

pub use record::{Record, Status};

/// mimalloc for every binary that links this library (all of arl's): many
/// small short-lived allocations per record and per request, where glibc's
/// malloc spent a quarter of `arl-rollout`'s CPU (`scripts/bench/rollout.sh`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
