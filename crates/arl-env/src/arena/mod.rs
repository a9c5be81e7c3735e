//! The arena's games and rankings, apart from the episodes that play them
//! (the arena module of `arl-rollout`): the board games' rules (`game`, from
//! `arl-env-core`, which `arl-inspect show` replays them with) and
//! tournaments over a group's samples (`tournament`).
pub use arl_env_core::game;
pub mod tournament;

/// The seat names, in playing order (`X` moves first from the empty board).
pub const SEATS: [&str; 2] = ["x", "o"];
