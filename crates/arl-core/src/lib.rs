//! The core of arl shared by every tool: the trajectory record (`record`) and
//! its Arrow schema (`schema`), JSONL/Parquet I/O (`io`) and Parquet read and written by columns (`columnar`), the conventions of
//! every binary (`cli`, `error`) and the flags they share (`args`), prompt datasets (`dataset`), groups by `prompt_id`
//! (`group`), model directories (`model_dir`), streaming statistics (`stats`), the seeded PRNG (`rng`), man
//! pages and completions (`docs`) and the process-wide allocator (`alloc`).
pub mod alloc;
pub mod args;
pub mod cli;
pub mod columnar;
pub mod dataset;
pub mod docs;
pub mod error;
pub mod group;
pub mod io;
pub mod model_dir;
pub mod record;
pub mod rng;
pub mod schema;
pub mod stats;
pub mod trace;

pub use record::{Record, Status};

/// mimalloc for every binary that links this library (all of arl's): many
/// small short-lived allocations per record and per request, where glibc's
/// malloc spent a quarter of `arl-rollout`'s CPU (`scripts/bench/rollout.sh`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
