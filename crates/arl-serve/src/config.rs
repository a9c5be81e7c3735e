//! [`Config`]: the server's settings from the command line (everything
//! `serve` needs besides the engine).
/// Everything the server needs besides the engine.
#[derive(Debug, Clone)]
pub struct Config {
    pub model_path: String,
    pub tokenizer_path: String,
    pub served_model_name: String,
    pub host: String,
    pub port: u16,
    pub api_key: Option<String>,
    pub max_running_requests: usize,
    pub max_prefill_tokens: usize,
    pub max_body_bytes: usize,
    /// Time a client has for a request's headers, then again for its body.
    pub read_timeout: std::time::Duration,
    pub weight_version: String,
    pub random_seed: u64,
    pub context_len: usize,
    pub vocab_size: usize,
    pub device: String,
    pub dtype: String,
    /// How CPU float32 linears multiply (`--cpu-matmul` as chosen: `blas`,
    /// `onednn`; `none` off the CPU or in another dtype).
    pub cpu_matmul: String,
    /// How CPU float32 decode products multiply (`--decode-matmul` as
    /// chosen: `blas`, `float32`, `bf16`; `none` off the CPU or in another dtype).
    pub decode_matmul: String,
    /// `--scripted` file, when the test double answers.
    pub scripted: Option<String>,
    pub quiet: bool,
    /// Log every request as it ends at `info` rather than `debug`.
    pub log_requests: bool,
    /// Data-parallel replicas (`--dp-size`).
    pub dp_size: usize,
    /// How the model writes tool calls (`--tool-call-parser`).
    pub tool_call_parser: arl_chat::toolcall::Parser,
    /// The text of `--tool-header FILE`, replacing the default tool header.
    pub tool_header: Option<String>,
    /// When tools go into the system message as a header (`--tool-header-mode`).
    pub tool_header_mode: arl_chat::tool_header::HeaderMode,
    /// LoRA adapters loaded at start (`--lora-paths`): name and directory.
    pub lora_paths: Vec<(String, String)>,
}
