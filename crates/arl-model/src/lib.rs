//! The one decoder implementation shared by `arl-train` and `arl-serve`
//! (Qwen2/Qwen2.5, Qwen3, Llama 3), on tch. Structure after candle's
//! `qwen2.rs`/`llama.rs`: a [`ModelConfig`] with HF key names, blocks built
//! with `new(cfg, path)` whose variable paths are the safetensors keys
//! (`model.layers.3.self_attn.q_proj.weight`), so loading and saving are a
//! name-for-name copy. The maths follows transformers' `modeling_qwen2.py`,
//! `modeling_qwen3.py` and `modeling_llama.py`.
pub mod amp;
pub mod config;
mod decode_attn;
pub mod device;
pub mod gemv;
pub mod lora;
mod net;
pub mod onednn;
mod spin_pool;
pub mod weights;

pub use config::{Family, ModelConfig, RopeScaling};
pub use gemv::DecodeMatmul;
pub use lora::LoraConfig;
pub use net::{token_logprobs, EntropyMode, HeadOptions, KvCache, Layout, Model, PrefixRun, SaveOptions, TokenScores};
pub use onednn::CpuMatmul;
