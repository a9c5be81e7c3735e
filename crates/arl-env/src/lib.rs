//! The environments an agent acts in during rollout, and the services
//! `arl-env` serves: the code sandbox (`sandbox`), SQL databases (`sql`), the
//! shop API (`shop`) and the per-episode store behind it (`episodes`), the web
//! environment with headless Chromium (`web`), the tools an agent calls
//! (`tools`), and the arena's games (`arena`).
pub mod arena;
pub mod episodes;
pub mod sandbox;
pub mod shop;
pub mod sql;
pub mod tool_output;
pub mod tools;
pub mod web;
