//! The scheduler's channel types: a sequence to generate ([`Job`], with
//! its [`Params`]), what its request hears back ([`Update`], [`Finish`]),
//! and the commands the HTTP layer sends ([`Cmd`]) with their answers.
use super::lora::{AdapterInfo, LoraVersion};
use crate::sampling::Knobs;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// Validated sampling parameters of one sequence.
#[derive(Debug, Clone)]
pub struct Params {
    pub knobs: Knobs,
    pub max_new_tokens: usize,
    pub min_new_tokens: usize,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub no_stop_trim: bool,
    pub skip_special_tokens: bool,
    pub seed: Option<u64>,
}

/// One sequence to generate, as its request asked for it (one expanded item
/// of a `/generate` or chat request).
#[derive(Debug)]
pub struct Item {
    pub rid: String,
    pub input_ids: Vec<u32>,
    pub params: Params,
    pub return_logprob: bool,
    /// Resolved: in `0..input_ids.len()`.
    pub logprob_start_len: usize,
    pub top_logprobs_num: usize,
    /// Index among the samples of its prompt (seeds differ per sample).
    pub sample_index: u64,
    /// The LoRA adapter to run with, by name (`lora_path`); `None`: the base model.
    pub lora: Option<String>,
}

/// An [`Item`] on its way through a scheduler: where its updates go, and
/// what the scheduler pins when it receives it.
#[derive(Debug)]
pub struct Job {
    pub item: Item,
    /// Position in the request's expanded batch; sent back with every update.
    pub index: usize,
    /// Send every token as it comes (streaming); otherwise one update at the end.
    pub stream: bool,
    pub tx: mpsc::UnboundedSender<(usize, Update)>,
    /// When the request arrived (time to first token and end-to-end latency
    /// in `/metrics` count from here).
    pub arrived: Instant,
    /// The version of the item's adapter the sequence runs with, pinned by
    /// the scheduler when it receives the job (`None` from the HTTP layer).
    pub adapter: Option<Arc<LoraVersion>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// EOS or a stop token id.
    StopToken(u32),
    StopStr(String),
    Length(usize),
    Abort {
        message: String,
        status_code: Option<u16>,
        err_type: Option<String>,
    },
}

impl Finish {
    /// SGLang's `finish_reason` JSON.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Finish::StopToken(t) => json!({"type": "stop", "matched": t}),
            Finish::StopStr(s) => json!({"type": "stop", "matched": s}),
            Finish::Length(n) => json!({"type": "length", "length": n}),
            Finish::Abort { message, status_code, err_type } => {
                json!({"type": "abort", "message": message, "status_code": status_code, "err_type": err_type})
            }
        }
    }
}

/// One generated token with its log-prob and, when asked, the top entries of its row.
#[derive(Debug, Clone)]
pub struct TokenOut {
    pub id: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// Log-probs over the prompt, `input_ids[logprob_start_len..]` (first entry `None`).
#[derive(Debug, Clone)]
pub struct InputLogprobs {
    pub ids: Vec<u32>,
    pub logprobs: Vec<Option<f32>>,
    pub top: Vec<Option<Vec<(u32, f32)>>>,
}

/// What a request's channel receives: new tokens, once the prompt log-probs,
/// and at the end the finish reason.
#[derive(Debug, Clone)]
pub struct Update {
    pub tokens: Vec<TokenOut>,
    /// Prompt tokens served from the prefix cache (known once prefilled).
    pub cached: usize,
    pub input: Option<InputLogprobs>,
    pub finish: Option<Finish>,
    pub weight_version: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseMode {
    /// Abort running and queued requests (SGLang's default).
    Abort,
    /// Keep them, with their caches, and resume on `/continue_generation`.
    InPlace,
}

#[derive(Debug)]
pub struct UpdateResult {
    pub success: bool,
    pub message: String,
    pub num_paused_requests: usize,
}

pub enum Cmd {
    Generate(Job),
    /// `rid` matches exactly or as the prefix of a batch item (`{rid}_{i}`).
    Abort {
        rid: Option<String>,
        all: bool,
    },
    Pause {
        mode: PauseMode,
        reply: oneshot::Sender<()>,
    },
    Continue {
        reply: oneshot::Sender<()>,
    },
    Update {
        path: PathBuf,
        version: Option<String>,
        abort_all: bool,
        reply: oneshot::Sender<UpdateResult>,
    },
    /// Empties the prefix cache, only when idle; answers whether it did.
    Flush {
        reply: oneshot::Sender<bool>,
    },
    /// Loads (or replaces) a LoRA adapter (`/load_lora_adapter`).
    LoadLora {
        name: String,
        path: String,
        version: Option<String>,
        reply: oneshot::Sender<LoraResult>,
    },
    /// Unloads a LoRA adapter (`/unload_lora_adapter`).
    UnloadLora {
        name: String,
        reply: oneshot::Sender<LoraResult>,
    },
}

/// How a LoRA load or unload went; `info`: what was loaded.
#[derive(Debug, Clone)]
pub struct LoraResult {
    pub success: bool,
    pub error: Option<String>,
    pub info: Option<AdapterInfo>,
}
