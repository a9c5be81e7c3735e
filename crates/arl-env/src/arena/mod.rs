//! The arena's games and rankings, apart from the episodes that play them
//! (the arena module of `arl-rollout`): the board games' rules (`game`), tournaments over a
//! group's samples (`tournament`), and their `arl-inspect show` views
//! (`render`).
pub mod game;
pub mod render;
pub mod tournament;

/// The seat names, in playing order (`X` moves first from the empty board).
pub const SEATS: [&str; 2] = ["x", "o"];
