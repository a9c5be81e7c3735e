//! The pure parts of the environments, below `arl-env` (which re-exports
//! them where they used to be) and the tools that need them without its
//! sandbox, databases and servers (`arl-inspect show` and `trace`): the
//! arena's board games (`game`), the web environment's browser tool names
//! and HTML escaping (`web`), and the OpenAI function definition of a tool.
//! Depends on `serde_json` only.
pub mod game;
pub mod web;

use serde_json::{json, Value};

/// An OpenAI tool definition: `{"type": "function", "function": {name, description, parameters}}`.
pub fn function_def(name: &str, description: &str, parameters: Value) -> Value {
    json!({"type": "function", "function": {"name": name, "description": description, "parameters": parameters}})
}
