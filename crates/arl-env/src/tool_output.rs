//! What every tool speaks, below both the tools and the environments that
//! implement them (the web session acts as tools): a call's output, and an
//! OpenAI function definition. Re-exported by [`crate::tools`].

/// What a tool call produced: the text the model sees, and whether it failed.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    pub text: String,
    pub error: bool,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> ToolOutput {
        ToolOutput { text: text.into(), error: false }
    }
    pub fn err(text: impl Into<String>) -> ToolOutput {
        ToolOutput { text: text.into(), error: true }
    }
}

/// An OpenAI tool definition (the arena's game tools need it too, hence its
/// home in `arl-env-core`).
pub use arl_env_core::function_def;
