//! The decoder network, its KV cache, and checkpoint loading/saving, one
//! file per part:
//!
//! * `linear`: the linear layer, with LoRA adapters on it; `norm`: RMSNorm
//! * `attention`: q, k, v, o, RoPE, GQA — with the family-specific parts
//!   (Qwen3's q/k norm, the biases the config gives Qwen2)
//! * `mlp`: SwiGLU; `block`: one decoder layer of both
//! * `model`: the [`Model`], its plain forward and inference layouts
//! * `checkpoint`: loading and saving HF directories ([`SaveOptions`])
//! * `adapters`: the attached LoRA adapter and the served ones
//! * `plan`: how a scored forward is laid out ([`Layout`]); `scores`: the LM
//!   head scored in chunks, the lean forward-backward, [`token_logprobs`]
//! * `cache`: the [`KvCache`]; `infer`: the cached forward of inference;
//!   `native`: its decode step on the CPU without libtorch operators
//!
//! Everything else of a family (RoPE scaling, a tied head, defaults) is in
//! [`ModelConfig`](crate::ModelConfig).
mod adapters;
mod attention;
mod block;
mod cache;
mod checkpoint;
mod infer;
mod linear;
mod mlp;
mod model;
mod native;
mod norm;
mod plan;
mod scores;

pub use cache::KvCache;
pub use checkpoint::SaveOptions;
pub use model::Model;
pub use plan::{Layout, PrefixRun};
pub use scores::{token_logprobs, EntropyMode, HeadOptions, TokenScores};
