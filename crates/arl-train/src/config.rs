//! What a run of `arl-train` is asked to do, resolved and checked by its
//! command line (every flag combination, before any file or model is opened):
//! the library works from these, never from clap types. The enums are also
//! the flags' values (they derive clap's `ValueEnum`, so each name is written
//! once).
use arl_core::cli::{InputSpec, OutputSpec};
use arl_model::device::DeviceSpec;
use clap::ValueEnum;
use std::path::PathBuf;
use tch::Kind;

/// The name every message of the trainer starts with.
pub const TOOL: &str = "arl-train";

/// `--loss`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LossKind {
    /// Policy-gradient RL (`--policy-loss`), with KL, entropy, TIS, OPSM.
    Rl,
    /// Cross-entropy on `loss_mask` tokens (or assistant turns of `messages`).
    Sft,
}

/// `--precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Precision {
    /// bf16 on CUDA; on the CPU `amp` where bf16 matrix multiplies measure 1.5× float32 at the model's shape, else fp32 (logged; the metrics' `precision`).
    Auto,
    /// Everything in float32.
    Fp32,
    /// bf16 weights and activations with float32 master weights and optimizer state.
    Bf16,
    /// Automatic mixed precision: float32 weights, matrix multiplies in bf16 under libtorch autocast (CUDA or CPU).
    Amp,
}

impl Precision {
    /// As `--precision` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Auto => "auto",
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Amp => "amp",
        }
    }
}

/// `--policy-loss`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PolicyLoss {
    /// PPO clipped surrogate with per-token ratios.
    Ppo,
    /// GSPO: the sequence-level ratio exp(mean_t(log π − log π_old)), clipped like the token ratio.
    Gspo,
}

/// `--kl-loss-type` (verl's `kl_penalty`; Schulman's k1/k2/k3 estimators).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KlType {
    /// log π − log π_ref
    K1,
    /// ½ (log π − log π_ref)²
    K2,
    /// exp(log π_ref − log π) − (log π_ref − log π) − 1
    K3,
    /// k3 clamped to [−10, 10] (verl's `low_var_kl`)
    #[value(name = "low_var_kl")]
    LowVarKl,
}

/// `--loss-agg` (verl's `loss_agg_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LossAgg {
    /// Mean over every trainable token of the global batch.
    TokenMean,
    /// Sum over a sequence's tokens, mean over sequences.
    SeqMeanTokenSum,
    /// Mean over a sequence's tokens, mean over sequences.
    SeqMeanTokenMean,
    /// Sum over a sequence's tokens divided by a constant horizon, mean over
    /// sequences (Dr. GRPO, arXiv:2503.20783).
    SeqMeanTokenSumNorm,
}

/// `--lr-schedule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// Linear warm-up, then the peak rate.
    Constant,
    /// Linear warm-up, then cosine decay to `--min-lr` over `--lr-decay-steps`.
    Cosine,
}

/// A training run (`arl-train` without a subcommand).
#[derive(Debug, Clone)]
pub struct TrainConfig {
    /// The model to start from.
    pub model: PathBuf,
    /// Where the trained checkpoint goes (none: train without saving).
    pub save: Option<PathBuf>,
    /// Also save every N optimizer steps (0: only at the end).
    pub save_interval: u64,
    /// Older checkpoints of the run to keep after a save (0: all).
    pub keep_last: usize,
    /// Continue from the model's trainer state.
    pub resume: bool,
    /// Dtype of the saved weights; `None`: the model's `torch_dtype`.
    pub save_dtype: Option<Kind>,
    /// Largest safetensors shard, in bytes.
    pub max_shard_bytes: u64,

    pub loss: LossKind,
    pub policy_loss: PolicyLoss,
    /// The ratio is clipped to [1 − eps_clip, 1 + eps_clip_high].
    pub eps_clip: f64,
    pub eps_clip_high: f64,
    /// Dual clip constant (> 1).
    pub eps_clip_c: Option<f64>,
    pub recompute_old_logprobs: bool,
    /// Sampling temperature of the rollout (> 0).
    pub temperature: f64,
    pub ref_model: Option<PathBuf>,
    pub kl_loss_coef: f64,
    pub kl_loss_type: KlType,
    pub entropy_coef: f64,
    pub tis_clip: Option<f64>,
    pub opsm_delta: Option<f64>,
    pub loss_agg: LossAgg,
    pub loss_agg_horizon: Option<f64>,

    /// Records per optimizer step (> 0; `None`: all records).
    pub global_batch_size: Option<usize>,
    /// Token budget of one micro-batch (> 0): real tokens when packing,
    /// batch × padded length otherwise.
    pub max_tokens_per_micro_batch: usize,
    /// Micro-batches packed without padding ([`arl_model::Layout::Packed`]).
    pub packing: bool,
    /// Packed samples that share their prompt run their common prefix once
    /// ([`arl_model::Layout::Grouped`]); needs `packing`.
    pub shared_prefix: bool,
    pub epochs: u64,
    pub shuffle: bool,

    pub lr: f64,
    pub min_lr: f64,
    pub lr_warmup_steps: u64,
    pub lr_schedule: Schedule,
    /// Stop after this many optimizer steps (≥ 1).
    pub max_steps: Option<u64>,
    pub lr_decay_steps: Option<u64>,
    pub weight_decay: f64,
    pub adam_beta1: f64,
    pub adam_beta2: f64,
    pub adam_eps: f64,
    /// Global gradient-norm clip (0: none).
    pub clip_grad: f64,

    pub device: DeviceSpec,
    pub precision: Precision,
    /// libtorch CPU threads (0: all cores, shared between the ranks of a machine).
    pub threads: usize,
    pub gradient_checkpointing: bool,
    /// Positions through the LM head at a time (0: [`arl_model::HeadOptions::auto_chunk`]).
    pub logprob_chunk_tokens: usize,
    pub seed: u64,
    /// JSONL file that gets one line of metrics per step.
    pub metrics: Option<PathBuf>,

    /// Data-parallel processes (1: one).
    pub nproc: usize,
    /// Seconds a rank waits in a collective (0: forever).
    pub collective_timeout: f64,
    /// Gradient all-reduce bucket, MiB (also the bucket of ZeRO's collectives).
    pub allreduce_bucket_mb: f64,
    /// ZeRO stage: 0 (every rank holds the whole optimizer state), 1 (AdamW
    /// moments sharded over ranks), 2 (and the reduced gradients).
    pub zero_stage: u8,

    pub critic: CriticConfig,
    /// Train a LoRA adapter instead of the weights (`--lora-rank`); `None`
    /// with an adapter directory as `model` continues that adapter.
    pub lora: Option<arl_model::LoraConfig>,
    pub input: InputSpec,
}

impl TrainConfig {
    /// How the micro-batches run: `--no-packing`, `--no-shared-prefix`, or both on.
    pub fn batching(&self) -> crate::micro::Batching {
        use crate::micro::Batching;
        match (self.packing, self.shared_prefix) {
            (false, _) => Batching::Padded,
            (true, false) => Batching::Packed,
            (true, true) => Batching::SharedPrefix,
        }
    }
}

/// PPO's critic, trained alongside the policy (`--train-critic`).
#[derive(Debug, Clone)]
pub struct CriticConfig {
    /// Train the critic (then `save` is set and the loss is RL).
    pub train: bool,
    /// The critic to start from; `None`: the policy (a zero value head).
    pub critic: Option<PathBuf>,
    /// Where the trained critic goes.
    pub save: Option<PathBuf>,
    pub lr: f64,
    pub value_clip: Option<f64>,
    /// The policy's `--lora-*` settings: a critic that is not already a LoRA
    /// critic gets a fresh adapter of these (its value head trains too).
    pub lora: Option<arl_model::LoraConfig>,
}

/// `arl-train init`: a randomly initialised model.
#[derive(Debug, Clone)]
pub struct InitConfig {
    /// The model's `config.json` (HF keys).
    pub config: PathBuf,
    /// Where the tokenizer files come from.
    pub tokenizer: PathBuf,
    pub out: PathBuf,
    pub seed: u64,
    pub dtype: Kind,
}

/// `arl-train render`: `messages` rendered into `tokens`, `prompt_len` and
/// `loss_mask` with a model's tokenizer and chat template.
#[derive(Debug, Clone)]
pub struct RenderConfig {
    /// The model (or tokenizer) directory: `tokenizer.json`, `tokenizer_config.json`.
    pub model: PathBuf,
    /// Threads that render (0: all cores).
    pub threads: usize,
    pub input: InputSpec,
    pub output: OutputSpec,
}

/// `arl-train merge`: an adapter folded into its base model.
#[derive(Debug, Clone)]
pub struct MergeConfig {
    /// The adapter directory (its base is `base_model_name_or_path`, or `base`).
    pub adapter: PathBuf,
    /// The base model, when not the one the adapter names.
    pub base: Option<PathBuf>,
    pub out: PathBuf,
    /// Dtype of the written weights; `None`: the base's `torch_dtype`.
    pub dtype: Option<Kind>,
}

/// `arl-train logprobs` and `arl-train values`: one number per response token
/// of every record, from a model (log-probs) or a critic (values).
#[derive(Debug, Clone)]
pub struct ScoreConfig {
    /// The model (`logprobs`) or the critic (`values`).
    pub model: PathBuf,
    /// Temperature of the log-probs (> 0; `values` ignore it).
    pub temperature: f64,
    /// Token budget of one forward batch (> 0).
    pub max_tokens_per_micro_batch: usize,
    /// Positions through the LM head at a time (0: automatic; `logprobs` only).
    pub logprob_chunk_tokens: usize,
    /// Samples that share their prompt run its prefix once (else packed alone).
    pub shared_prefix: bool,
    pub device: DeviceSpec,
    pub threads: usize,
    pub input: InputSpec,
    pub output: OutputSpec,
}

impl ScoreConfig {
    /// How the scoring passes run: packed, with or without the shared prefix.
    pub fn batching(&self) -> crate::micro::Batching {
        if self.shared_prefix {
            crate::micro::Batching::SharedPrefix
        } else {
            crate::micro::Batching::Packed
        }
    }
}
