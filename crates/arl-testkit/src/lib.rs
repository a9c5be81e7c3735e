//! The test kit of arl's integration tests: running the real binaries
//! (`common`), the scripted and real `arl-serve` (`serve_util`), the rollout
//! tests' model directory and stand-in servers (`rollout_kit`), a
//! throwaway PostgreSQL server (`pg_util`), and the one guard for spawned
//! daemons (`daemon`), the fetched real models (`real`).
pub mod common;
pub mod daemon;
pub mod pg_util;
pub mod real;
pub mod rollout_kit;
pub mod serve_util;
pub mod tiny;
pub mod tls;
