//! What a run of `arl-rollout` is asked to do, resolved and checked by its
//! command line before any file, tokenizer or server is opened. The library
//! works from this, never from clap types.
use arl_core::cli::{InputSpec, OutputSpec};
use arl_core::dataset::PromptKeys;
use std::path::PathBuf;
use std::time::Duration;

/// The name every message of the rollout starts with.
pub const TOOL: &str = "arl-rollout";

/// One rollout run (docs/DESIGN.md §4).
#[derive(Debug, Clone)]
pub struct Config {
    pub input: InputSpec,
    pub output: OutputSpec,
    /// The dataset's prompt and label columns.
    pub keys: PromptKeys,
    /// Continue from `OUTPUT.partial` (needs an output file).
    pub resume: bool,
    /// Write the run's timeline here (`--trace`, see [`crate::trace`]).
    pub trace: Option<PathBuf>,

    /// The servers (at least one unless `router` is set).
    pub endpoints: Vec<String>,
    /// An sgl-router URL that names the workers.
    pub router: Option<String>,
    pub api_key: Option<String>,
    /// Requests in flight at most (≥ 1).
    pub concurrency: usize,
    pub request_timeout: Duration,
    pub max_retries: u32,
    pub retry_backoff: Duration,
    /// The LoRA adapter the policy requests name (`lora_path`).
    pub lora: Option<String>,

    /// The model directory whose tokenizer (and chat template) is used.
    pub tokenizer: PathBuf,
    /// A system message put before prompts that have none.
    pub system: Option<String>,
    /// Prompts are raw text, not rendered with the chat template.
    pub no_chat_template: bool,
    /// Variables for every rendering of the chat template (`--chat-template-kwargs`).
    pub chat_template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// How the model writes tool calls (`--tool-call-parser`).
    pub tool_call_parser: arl_chat::toolcall::Parser,
    /// A tool header template replacing the default (`--tool-header`).
    pub tool_header: Option<PathBuf>,
    /// When tools go into the system message as a header (`--tool-header-mode`).
    pub tool_header_mode: arl_chat::tool_header::HeaderMode,

    /// Samples per prompt (≥ 1).
    pub n_samples_per_prompt: u32,
    pub temperature: f64,
    pub top_p: f64,
    pub top_k: i64,
    pub max_new_tokens: Option<u32>,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,

    pub max_turns: u32,
    /// Tokens across the whole episode, tool tokens included.
    pub max_response_len: u32,
    /// Characters of a tool's output kept (truncated in the middle).
    pub max_tool_output: usize,
    /// Per-environment settings (`--env-config`).
    pub env_config: Option<PathBuf>,

    /// Built-in tools: `calculator`, `python`, `sql`.
    pub tools: Vec<String>,
    /// External tools as `NAME=COMMAND`.
    pub external: Vec<String>,
    /// Definitions of the external tools.
    pub tool_spec: Option<PathBuf>,
    /// MCP servers (commands speaking MCP on stdio).
    pub mcp: Vec<String>,
    pub sandbox_url: Option<String>,
    pub sandbox_concurrency: Option<usize>,
    pub python_stateful: bool,
    /// An OpenAPI spec (file or URL) whose operations become tools.
    pub openapi: Option<String>,
    /// The web task site's URL (browser tools).
    pub web: Option<String>,
    pub web_max_chars: usize,
    pub chromium: Option<PathBuf>,
    pub sql_url: Option<String>,
    pub sql_timeout: Duration,
    pub sql_max_rows: usize,
    pub tool_timeout: Duration,

    /// The dataset walk: `batch_size` prompts of step `step` of a seeded shuffle.
    pub batch_size: Option<usize>,
    pub step: u64,
    pub seed: u64,

    /// Early termination by a rule reward: `math`, `exact`, `f1` or `game`.
    pub rm: Option<String>,

    /// Two seats play a board game (`move` tool calls).
    pub arena: bool,
    /// What plays seat `o`: another server, else the policy itself.
    pub opponent_endpoint: Option<String>,
    pub illegal_retries: u32,

    /// Stop when this many groups are done and abort the rest.
    pub target_groups: Option<u64>,
}
