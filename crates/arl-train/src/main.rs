//! `arl-train`: trains a Hugging Face decoder (Qwen2/Qwen2.5, Qwen3, Llama 3)
//! on trajectory records with RL losses or SFT, on libtorch. Also makes the
//! test tokenizer (`make-tokenizer`), random models (`init`), reference
//! log-probs (`logprobs`) and PPO critic values (`values`); trains the critic
//! alongside the policy with `--train-critic`. See `arl_train` and `arl_model`.
use anyhow::Result;
use arl_core::args::{InputArgs, OutputArgs};
use arl_core::cli;
use arl_core::cli::usage;
use arl_model::device::DeviceSpec;
use arl_train::config::{
    CriticConfig, InitConfig, KlType, LossAgg, LossKind, MergeConfig, PolicyLoss, Precision, RenderConfig, Schedule,
    ScoreConfig, TrainConfig,
};
use clap::{Args as ClapArgs, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

use arl_train::config::TOOL;

/// Train a Hugging Face decoder on trajectory records (RL losses or SFT).
///
/// Reads records (JSONL or Parquet) with `tokens`, `prompt_len`, `loss_mask`,
/// `advantages` and `rollout_log_probs` (or chat `messages` for SFT), trains
/// `--model` and writes the result to `--save` as a Hugging Face checkpoint
/// (sharded safetensors, config.json, generation_config.json, tokenizer files)
/// that appears whole or not at all. Per-step metrics go to `--metrics`.
/// With `--lora-rank R` it trains a LoRA adapter instead and saves the
/// adapter alone, in PEFT's format; `--model ADAPTER_DIR` continues one.
///
/// Example: `arl-advantage … | arl-train --model ckpt/step-41 --save ckpt/step-42 --lr 1e-6 --metrics m.jsonl`
#[derive(Debug, Parser)]
#[command(name = TOOL, version, after_long_help = cli::EXIT_CODES_HELP, args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,

    #[command(flatten)]
    pub train: TrainArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a randomly initialised model (config + safetensors + tokenizer)
    Init(InitArgs),
    /// Write arl's character-level test tokenizer (tokenizer.json, tokenizer_config.json)
    MakeTokenizer(MakeTokenizerArgs),
    /// Write `ref_log_probs` (each response token's log-prob under `--model`) into records
    Logprobs(LogprobsArgs),
    /// Write `values` (PPO's critic: each response token's value under `--critic`) into records
    Values(ValuesArgs),
    /// Convert a GGUF model (llama.cpp's format) into a Hugging Face model directory
    #[command(long_about = CONVERT_HELP)]
    Convert(ConvertArgs),
    /// Fold a LoRA adapter into its base model: an ordinary checkpoint any server loads
    #[command(long_about = MERGE_HELP)]
    Merge(MergeArgs),
    /// Render SFT demonstrations (`messages`) into `tokens`, `prompt_len` and `loss_mask` once
    #[command(long_about = RENDER_HELP)]
    Render(RenderArgs),
}

const RENDER_HELP: &str = "Render SFT demonstrations (`messages`) into `tokens`, `prompt_len` and `loss_mask` once.

Each record's `messages` (with `metadata.tools`) goes through the model's chat template and \
tokenizer exactly as `arl-train --loss sft` renders them: `tokens` are the whole conversation, \
`prompt_len` the tokens before the first assistant token, `loss_mask` 1 on the assistant turns' \
tokens after it. The other fields are kept. Training on the output gives the same steps as on \
the input, without rendering again: an SFT run resumed stretch by stretch (scripts/run.sh's \
checks), or several runs over one data set, render once. Records that already have `tokens` pass \
through unchanged; a record with neither, or whose messages cannot be rendered, is rejected \
(`--on-error`). Threads: `--threads` (0: all cores); the output keeps the input's order.

Example: `arl-train render --model ckpt/init -i sft.jsonl -o sft.parquet`";

#[derive(Debug, Clone, ClapArgs)]
pub struct RenderArgs {
    /// The model (or tokenizer) directory whose tokenizer and chat template render
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// Threads that render (0: all cores)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

const MERGE_HELP: &str = "Fold a LoRA adapter into its base model: an ordinary checkpoint any server loads.

Reads the adapter directory (PEFT's `adapter_config.json` and `adapter_model.safetensors`, as \
`arl-train --lora-rank` writes them or PEFT's `save_pretrained`), loads its base model \
(`base_model_name_or_path`, or `--base`), and writes W + s·B·A for every adapted projection \
(s = lora_alpha / r; lora_alpha / √r with rsLoRA), computed in float32, with the base's config, \
generation config and tokenizer files. The directory appears whole or not at all. An adapter \
whose shapes do not fit the base exits 65 and writes nothing.";

#[derive(Debug, Clone, ClapArgs)]
pub struct MergeArgs {
    /// The adapter directory
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// The base model (default: the adapter's `base_model_name_or_path`)
    #[arg(long, value_name = "DIR")]
    pub base: Option<PathBuf>,
    /// The merged model directory to write (replaced atomically)
    #[arg(long, visible_alias = "save", value_name = "DIR")]
    pub out: PathBuf,
    /// Tensor dtype of the written weights: `auto` is the base's `torch_dtype`
    #[arg(long, default_value = "auto", value_name = "DTYPE")]
    pub dtype: String,
}

const CONVERT_HELP: &str = "Convert a GGUF model (llama.cpp's format) into a Hugging Face model directory.

Writes float32 `model.safetensors` with transformers' tensor names (llama.cpp's row order of \
Llama's query/key projections undone), `config.json`, `generation_config.json`, `tokenizer.json` \
(byte-level BPE with the pre-tokenizer that `tokenizer.ggml.pre` names, split as llama.cpp splits \
it), `tokenizer_config.json` and `chat_template.jinja` (from `tokenizer.chat_template`).

Architectures: llama, qwen2, qwen3. Tensor types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 \
(K-quants are not read yet). The directory appears complete or not at all; a truncated or \
malformed file, or one of another architecture, exits 65 and writes nothing.";

#[derive(Debug, Clone, ClapArgs)]
pub struct ConvertArgs {
    /// The GGUF file
    #[arg(value_name = "FILE")]
    pub gguf: PathBuf,
    /// The model directory to create (must not exist, or be empty)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Debug, Clone, ClapArgs)]
pub struct TrainArgs {
    /// Model directory to start from (HF layout: config.json, *.safetensors, tokenizer files)
    #[arg(long, value_name = "DIR", help_heading = "Model")]
    pub model: Option<PathBuf>,

    /// Where to write the trained checkpoint (replaced atomically)
    #[arg(long, value_name = "DIR", help_heading = "Model")]
    pub save: Option<PathBuf>,

    /// Also write the checkpoint to `--save` every N optimizer steps (0: only at the end)
    #[arg(long, default_value_t = 0, value_name = "N", help_heading = "Model")]
    pub save_interval: u64,

    /// After saving, delete older checkpoints of the run: siblings of `--save`
    /// with the same name but another trailing number (`step-40` for `step-42`),
    /// keeping the N newest (0: keep all)
    #[arg(long, default_value_t = 0, value_name = "N", help_heading = "Model")]
    pub keep_last: usize,

    /// Continue from `--model`'s trainer state (optimizer moments, step counter,
    /// schedule position), as written by an earlier `arl-train --save`
    #[arg(long, help_heading = "Model")]
    pub resume: bool,

    /// Tensor dtype of the saved weights: `auto` is the model's `torch_dtype`
    /// (float32, bfloat16, float16)
    #[arg(long, default_value = "auto", value_name = "DTYPE", help_heading = "Model")]
    pub save_dtype: String,

    /// Largest safetensors shard in bytes (suffixes KB, MB, GB)
    #[arg(long, default_value = "5GB", value_name = "SIZE", help_heading = "Model")]
    pub max_shard_size: String,

    /// `rl` (policy gradient on `advantages`) or `sft` (cross-entropy)
    #[arg(long, value_enum, default_value_t = LossKind::Rl, help_heading = "Loss")]
    pub loss: LossKind,

    /// Policy loss: per-token PPO ratio or GSPO's sequence-level ratio
    #[arg(long, value_enum, default_value_t = PolicyLoss::Ppo, help_heading = "Loss")]
    pub policy_loss: PolicyLoss,

    /// Lower clip range: the ratio is clipped to [1 − eps, 1 + eps-high]
    #[arg(long, default_value_t = 0.2, value_name = "EPS", help_heading = "Loss")]
    pub eps_clip: f64,

    /// Upper clip range (clip-higher, DAPO); default: `--eps-clip`
    #[arg(long, value_name = "EPS", help_heading = "Loss")]
    pub eps_clip_high: Option<f64>,

    /// Dual clip constant c > 1: for negative advantages the loss is at most −A·c
    #[arg(long, value_name = "C", help_heading = "Loss")]
    pub eps_clip_c: Option<f64>,

    /// Recompute the old-policy log-probs with `--model` before the first update
    /// (otherwise they are the records' `rollout_log_probs`)
    #[arg(long, help_heading = "Loss")]
    pub recompute_old_logprobs: bool,

    /// Sampling temperature the rollout used; log-probs are of logits / T
    #[arg(long, default_value_t = 1.0, value_name = "T", help_heading = "Loss")]
    pub temperature: f64,

    /// Reference model for the KL loss (when records carry no `ref_log_probs`)
    #[arg(long, value_name = "DIR", help_heading = "Loss")]
    pub ref_model: Option<PathBuf>,

    /// Weight of the KL-to-reference loss (0: off)
    #[arg(long, default_value_t = 0.0, value_name = "COEF", help_heading = "Loss")]
    pub kl_loss_coef: f64,

    /// KL estimator of the KL loss
    #[arg(long, value_enum, default_value_t = KlType::LowVarKl, help_heading = "Loss")]
    pub kl_loss_type: KlType,

    /// Weight of the entropy bonus (subtracted from the loss; 0: off)
    #[arg(long, default_value_t = 0.0, value_name = "COEF", help_heading = "Loss")]
    pub entropy_coef: f64,

    /// Truncated importance sampling: weight each token's policy loss by
    /// min(π_old/π_rollout, CLIP) (needs `rollout_log_probs`; off by default)
    #[arg(long, value_name = "CLIP", help_heading = "Loss")]
    pub tis_clip: Option<f64>,

    /// Off-policy sequence masking: drop the tokens of a negative-advantage
    /// sequence whose mean log(π_rollout/π) exceeds DELTA (off by default)
    #[arg(long, value_name = "DELTA", help_heading = "Loss")]
    pub opsm_delta: Option<f64>,

    /// How per-token losses are reduced
    #[arg(long, value_enum, default_value_t = LossAgg::TokenMean, help_heading = "Loss")]
    pub loss_agg: LossAgg,

    /// Horizon of `seq-mean-token-sum-norm`; default: the longest response of the step
    #[arg(long, value_name = "TOKENS", help_heading = "Loss")]
    pub loss_agg_horizon: Option<f64>,

    /// Records per optimizer step (default: all records, one step per epoch)
    #[arg(long, value_name = "N", help_heading = "Batching")]
    pub global_batch_size: Option<usize>,

    /// Token budget of one micro-batch: the samples' own tokens, packed
    /// longest-first into as few micro-batches as fit (with `--no-packing`:
    /// batch × padded length); a longer sequence goes alone
    #[arg(long, default_value_t = 8192, value_name = "TOKENS", help_heading = "Batching")]
    pub max_tokens_per_micro_batch: usize,

    /// Pad micro-batches to their longest sample instead of packing: by
    /// default the samples of a micro-batch run concatenated, positions
    /// restarting and attention kept within each sample (the same values,
    /// without computing on padding)
    #[arg(long, help_heading = "Batching")]
    pub no_packing: bool,

    /// Run every sample's prompt on its own: by default the packed samples
    /// that share their prompt (a GRPO group) are kept in one micro-batch and
    /// their common prefix runs through the model once, each response
    /// attending to its keys and values (the same log-probs and gradients;
    /// the budget counts the positions that run). Also for the log-prob
    /// passes (`--recompute-old-logprobs`, `--ref-model`) and the critic
    #[arg(long, help_heading = "Batching")]
    pub no_shared_prefix: bool,

    /// Passes over the input
    #[arg(long, default_value_t = 1, value_name = "N", help_heading = "Batching")]
    pub epochs: u64,

    /// Shuffle the records each epoch (seeded by `--seed`)
    #[arg(long, help_heading = "Batching")]
    pub shuffle: bool,

    /// Peak learning rate
    #[arg(long, default_value_t = 1e-6, value_name = "LR", help_heading = "Optimizer")]
    pub lr: f64,

    /// Final learning rate of the cosine schedule
    #[arg(long, default_value_t = 0.0, value_name = "LR", help_heading = "Optimizer")]
    pub min_lr: f64,

    /// Linear warm-up steps
    #[arg(long, default_value_t = 0, value_name = "N", help_heading = "Optimizer")]
    pub lr_warmup_steps: u64,

    /// Schedule after warm-up
    #[arg(long, value_enum, default_value_t = Schedule::Constant, help_heading = "Optimizer")]
    pub lr_schedule: Schedule,

    /// Stop after N optimizer steps of this invocation, saving where the run
    /// stands in its input: `--resume` from that checkpoint with the same
    /// input continues with the next batch (the schedule spans the whole input)
    #[arg(long, value_name = "N", help_heading = "Optimizer")]
    pub max_steps: Option<u64>,

    /// Step at which the cosine reaches `--min-lr` (default: the last step of this run)
    #[arg(long, value_name = "N", help_heading = "Optimizer")]
    pub lr_decay_steps: Option<u64>,

    /// AdamW decoupled weight decay (not applied to biases and norms)
    #[arg(long, default_value_t = 0.01, help_heading = "Optimizer")]
    pub weight_decay: f64,

    #[arg(long, default_value_t = 0.9, help_heading = "Optimizer", help = "AdamW β1")]
    pub adam_beta1: f64,

    #[arg(long, default_value_t = 0.999, help_heading = "Optimizer", help = "AdamW β2")]
    pub adam_beta2: f64,

    #[arg(long, default_value_t = 1e-8, help_heading = "Optimizer", help = "AdamW ε")]
    pub adam_eps: f64,

    /// Clip the global gradient norm to this value (0: no clipping)
    #[arg(long, default_value_t = 1.0, value_name = "NORM", help_heading = "Optimizer")]
    pub clip_grad: f64,

    /// `cpu`, `cuda` or `cuda:N`
    #[arg(long, default_value = "cpu", help_heading = "Runtime")]
    pub device: String,

    /// Numeric precision
    #[arg(long, value_enum, default_value_t = Precision::Auto, help_heading = "Runtime")]
    pub precision: Precision,

    /// CPU threads for libtorch (0: all cores)
    #[arg(long, default_value_t = 0, value_name = "N", help_heading = "Runtime")]
    pub threads: usize,

    /// Positions that go through the LM head at a time for log-probs and
    /// entropy (0: about 256 MB of float32 logits a chunk, e.g. 441 positions at
    /// a 151,936-token vocabulary); the logits of a whole micro-batch are never held
    #[arg(long, default_value_t = 0, value_name = "N", help_heading = "Runtime")]
    pub logprob_chunk_tokens: usize,

    /// Activation checkpointing: keep only each block's input during the
    /// forward and recompute the block in the backward (less memory, ~1 more forward)
    #[arg(long, help_heading = "Runtime")]
    pub gradient_checkpointing: bool,

    /// Seed for shuffling and libtorch's generators
    #[arg(long, default_value_t = 42, help_heading = "Runtime")]
    pub seed: u64,

    /// Append one JSON line of metrics per optimizer step to FILE
    #[arg(long, value_name = "FILE", help_heading = "Runtime")]
    pub metrics: Option<PathBuf>,

    /// Data-parallel processes on this machine: `arl-train` starts itself N
    /// times under `mpirun` (shared memory and loopback only). Under a
    /// launcher of your own (`mpirun -n N arl-train …`, across machines) leave
    /// it at 1 or give the same N. Each rank trains on a token-balanced share
    /// of every global batch; the update equals one process on the whole batch
    #[arg(long, default_value_t = 1, value_name = "N", help_heading = "Distributed")]
    pub nproc: usize,

    /// Seconds a rank waits in a collective (gradient all-reduce, broadcast,
    /// barrier) for the slowest rank before the whole job is aborted with the
    /// missing ranks named (0: wait forever); must exceed rank 0's checkpoint
    /// save time
    #[arg(long, default_value_t = 600.0, value_name = "SECS", help_heading = "Distributed")]
    pub collective_timeout: f64,

    /// Size of one gradient all-reduce bucket in MiB (float32); also the
    /// bucket of ZeRO's reduce-scatter and all-gather
    #[arg(long, default_value_t = 25.0, value_name = "MB", help_heading = "Distributed")]
    pub allreduce_bucket_mb: f64,

    /// Shard the optimizer over the ranks (ZeRO, as DeepSpeed's stages): 1
    /// keeps each rank's AdamW moments (and fp32 masters) for 1/N of the
    /// parameters' elements only, updates those and all-gathers the updated
    /// parameters; 2 also replaces the gradient all-reduce by a
    /// reduce-scatter, so a rank receives the summed gradients of its share
    /// only (less traffic). 0: every rank holds the whole state. Same update
    /// as one process; checkpoints are whole, and resume with any number of
    /// ranks. Needs 2 or more ranks
    #[arg(long, visible_alias = "zero", default_value_t = 0, value_name = "STAGE",
          value_parser = clap::value_parser!(u8).range(0..=2), help_heading = "Distributed")]
    pub zero_stage: u8,

    #[command(flatten)]
    pub critic: CriticArgs,

    #[command(flatten)]
    pub lora: LoraArgs,

    #[command(flatten)]
    pub input: InputArgs,
}

/// LoRA (`--lora-rank`): see `arl_model::lora`.
#[derive(Debug, Clone, ClapArgs)]
pub struct LoraArgs {
    /// Train a LoRA adapter of rank R instead of the model's weights (0: off).
    /// The base weights are frozen (no gradients, no optimizer state); A is
    /// drawn as PEFT does (uniform ±1/√in), B is zero, so the first step's
    /// policy is exactly the base's. `--save` then writes the adapter alone in
    /// PEFT's format (`adapter_config.json` naming `--model` as the base,
    /// `adapter_model.safetensors`, trainer state, tokenizer files); `--model`
    /// may be such a directory to continue training it (its own rank and
    /// targets; `--lora-*` flags, if given, must agree). `arl-train merge`
    /// folds an adapter into its base. With `--train-critic` the critic gets
    /// an adapter of the same shape too (its value head trains in full; saved
    /// as `value_head.safetensors` beside the critic's adapter)
    #[arg(long, default_value_t = 0, value_name = "R", help_heading = "LoRA")]
    pub lora_rank: usize,

    /// Scaling numerator: the adapter adds (ALPHA / R)·B·A·x
    #[arg(long, default_value_t = 16.0, value_name = "ALPHA", help_heading = "LoRA")]
    pub lora_alpha: f64,

    /// Dropout on the adapter's input while training (not with
    /// `--gradient-checkpointing`)
    #[arg(long, default_value_t = 0.0, value_name = "P", help_heading = "LoRA")]
    pub lora_dropout: f64,

    /// Projections that get an adapter, by their checkpoint names
    /// (`q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj`), or
    /// `all-linear` (all of them)
    #[arg(long, default_value = "all-linear", value_name = "NAMES", help_heading = "LoRA")]
    pub lora_targets: String,
}

/// PPO's learned critic (`--train-critic`): see `arl_train::critic`.
#[derive(Debug, Clone, ClapArgs)]
pub struct CriticArgs {
    /// Also train the critic, one optimizer step per policy step on the same
    /// records: ½·max((V−R)², (clip(V, V_old±EPS)−R)²) on trainable tokens
    /// (`loss_mask` 1), token mean, against `returns`, with V_old the records'
    /// `values`. Adds `value_loss`, `value_clipfrac` and `value_explained_var`
    /// (1 − Var(R−V_old)/Var(R)) to the metrics. The critic is saved to
    /// `--critic-save` (with its AdamW state) before the policy is saved
    #[arg(long, requires = "critic_save", help_heading = "Critic (PPO)")]
    pub train_critic: bool,

    /// The critic to train: a critic checkpoint, or a policy checkpoint
    /// (its weights with a zero value head); default: `--model`
    #[arg(long, value_name = "DIR", help_heading = "Critic (PPO)")]
    pub critic: Option<PathBuf>,

    /// Where to write the trained critic (replaced atomically)
    #[arg(long, value_name = "DIR", help_heading = "Critic (PPO)")]
    pub critic_save: Option<PathBuf>,

    /// The critic's learning rate (constant; its other AdamW settings and the
    /// gradient clipping are the policy's)
    #[arg(long, default_value_t = 1e-5, value_name = "LR", help_heading = "Critic (PPO)")]
    pub critic_lr: f64,

    /// Clip range of the value: V is clipped to V_old ± EPS in the loss (off by default)
    #[arg(long, value_name = "EPS", help_heading = "Critic (PPO)")]
    pub value_clip: Option<f64>,
}

#[derive(Debug, Clone, ClapArgs)]
pub struct InitArgs {
    /// Model config (HF `config.json` keys: model_type, vocab_size, hidden_size, …)
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Directory whose tokenizer files are copied into the model
    #[arg(long, value_name = "DIR")]
    pub tokenizer: PathBuf,
    /// Output model directory (written atomically)
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Seed of the random initialisation
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Tensor dtype of the written weights (float32, bfloat16, float16)
    #[arg(long, default_value = "float32", value_name = "DTYPE")]
    pub dtype: String,
}

#[derive(Debug, Clone, ClapArgs)]
pub struct MakeTokenizerArgs {
    /// Output directory
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Chat template: Qwen2.5's (tool signatures in the system turn) or a
    /// compact one (`Tools: name, …`; same call and result format), which keeps
    /// character-level sequences of models trained from scratch short
    #[arg(long, value_enum, default_value = "qwen")]
    pub template: arl_chat::tokenizer_build::Template,
}

#[derive(Debug, Clone, ClapArgs)]
pub struct LogprobsArgs {
    /// Model whose log-probs are written
    #[arg(long, value_name = "DIR")]
    pub model: PathBuf,
    /// Sampling temperature applied to the logits
    #[arg(long, default_value_t = 1.0, value_name = "T")]
    pub temperature: f64,
    /// Token budget of one forward batch
    #[arg(long, default_value_t = 8192, value_name = "TOKENS")]
    pub max_tokens_per_micro_batch: usize,
    /// Positions through the LM head at a time (0: about 256 MB of float32 logits a chunk)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub logprob_chunk_tokens: usize,
    /// Run every sample's prompt on its own (by default samples that share
    /// their prompt run it once: the same values)
    #[arg(long)]
    pub no_shared_prefix: bool,
    /// `cpu`, `cuda` or `cuda:N`
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// CPU threads for libtorch (0: all cores)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Clone, ClapArgs)]
pub struct ValuesArgs {
    /// The critic: a critic checkpoint (`arl-train --train-critic
    /// --critic-save`), or a policy checkpoint (its weights with a zero value
    /// head, so every value is 0)
    #[arg(long, value_name = "DIR")]
    pub critic: PathBuf,
    /// Token budget of one forward batch
    #[arg(long, default_value_t = 8192, value_name = "TOKENS")]
    pub max_tokens_per_micro_batch: usize,
    /// Run every sample's prompt on its own (by default samples that share
    /// their prompt run it once: the same values)
    #[arg(long)]
    pub no_shared_prefix: bool,
    /// `cpu`, `cuda` or `cuda:N`
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// CPU threads for libtorch (0: all cores)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
    #[command(flatten)]
    pub input: InputArgs,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        Some(Command::MakeTokenizer(a)) => {
            arl_chat::tokenizer_build::write(&a.out, a.template)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(Command::Init(a)) => arl_train::run::init(&a.config()?),
        Some(Command::Logprobs(a)) => arl_train::score::logprobs(&a.config()?),
        Some(Command::Values(a)) => arl_train::critic::values(&a.config()?),
        Some(Command::Merge(a)) => arl_train::run::merge(&a.config()?),
        Some(Command::Render(a)) => arl_train::chat_render::render(&RenderConfig {
            model: a.model,
            threads: a.threads,
            input: a.input.spec()?,
            output: a.output.spec(),
        }),
        Some(Command::Convert(a)) => {
            let s = arl_gguf::convert(&a.gguf, &a.out)?;
            let types: Vec<String> = s.source_types.iter().map(|(t, n)| format!("{t} {n}")).collect();
            eprintln!(
                "{TOOL} convert: {} ({} model, {} tensors: {}; {:.1}M parameters{}) -> {}",
                a.gguf.display(),
                s.architecture,
                s.tensors,
                types.join(", "),
                s.parameters as f64 / 1e6,
                if s.tied_embeddings { ", tied embeddings" } else { "" },
                a.out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        None => {
            let cfg = args.train.config()?;
            match arl_dist::respawn(cfg.nproc, TOOL)? {
                Some(code) => Ok(code),
                None => arl_train::run::train(&cfg),
            }
        }
    }
}

fn device(s: &str) -> Result<DeviceSpec> {
    DeviceSpec::parse(s).map_err(usage)
}

fn dtype(s: &str) -> Result<tch::Kind> {
    arl_model::weights::parse_kind(s).map_err(|e| usage(e.to_string()))
}

/// `5GB`, `500MB`, `64KB` or a number of bytes.
fn parse_size(s: &str) -> Result<u64> {
    let t = s.trim().to_ascii_uppercase();
    let (num, mul) = if let Some(x) = t.strip_suffix("GB") {
        (x, 1u64 << 30)
    } else if let Some(x) = t.strip_suffix("MB") {
        (x, 1 << 20)
    } else if let Some(x) = t.strip_suffix("KB") {
        (x, 1 << 10)
    } else {
        (t.as_str(), 1)
    };
    let v: f64 = num.trim().parse().map_err(|_| usage(format!("`{s}`: expected a size like 5GB or 500MB")))?;
    Ok((v * mul as f64) as u64)
}

impl TrainArgs {
    /// The run, with every flag combination checked.
    fn config(&self) -> Result<TrainConfig> {
        let model = self.model.clone().ok_or_else(|| usage("`--model DIR` is required for training"))?;
        if self.eps_clip_c.is_some_and(|c| c <= 1.0) {
            return Err(usage("`--eps-clip-c` must be greater than 1"));
        }
        if self.global_batch_size == Some(0) || self.max_tokens_per_micro_batch == 0 || self.temperature <= 0.0 {
            return Err(usage(
                "`--global-batch-size`, `--max-tokens-per-micro-batch` and `--temperature` must be positive",
            ));
        }
        if self.max_steps == Some(0) {
            return Err(usage("`--max-steps` must be at least 1"));
        }
        let c = &self.critic;
        if c.train_critic && self.loss != LossKind::Rl {
            return Err(usage("`--train-critic` needs `--loss rl`"));
        }
        // Each rank would fit its own shard and only rank 0's critic be saved.
        if c.train_critic && self.nproc > 1 {
            return Err(usage(
                "`--train-critic` runs in one process only (the critic is not data-parallel yet); drop `--nproc`",
            ));
        }
        let save_dtype = match self.save_dtype.as_str() {
            "auto" => None,
            s => Some(dtype(s)?),
        };
        let l = &self.lora;
        let lora = match l.lora_rank {
            0 => None,
            r => Some(
                arl_model::LoraConfig::new(r, l.lora_alpha, l.lora_dropout, &l.lora_targets)
                    .map_err(|e| usage(format!("{e:#}")))?,
            ),
        };
        if lora.as_ref().is_some_and(|l| l.dropout > 0.0) && self.gradient_checkpointing {
            return Err(usage(
                "`--lora-dropout` with `--gradient-checkpointing`: the recomputed blocks would draw other dropout masks",
            ));
        }
        Ok(TrainConfig {
            model,
            save: self.save.clone(),
            save_interval: self.save_interval,
            keep_last: self.keep_last,
            resume: self.resume,
            save_dtype,
            max_shard_bytes: parse_size(&self.max_shard_size)?,
            loss: self.loss,
            policy_loss: self.policy_loss,
            eps_clip: self.eps_clip,
            eps_clip_high: self.eps_clip_high.unwrap_or(self.eps_clip),
            eps_clip_c: self.eps_clip_c,
            recompute_old_logprobs: self.recompute_old_logprobs,
            temperature: self.temperature,
            ref_model: self.ref_model.clone(),
            kl_loss_coef: self.kl_loss_coef,
            kl_loss_type: self.kl_loss_type,
            entropy_coef: self.entropy_coef,
            tis_clip: self.tis_clip,
            opsm_delta: self.opsm_delta,
            loss_agg: self.loss_agg,
            loss_agg_horizon: self.loss_agg_horizon,
            global_batch_size: self.global_batch_size,
            max_tokens_per_micro_batch: self.max_tokens_per_micro_batch,
            packing: !self.no_packing,
            shared_prefix: !self.no_shared_prefix,
            epochs: self.epochs,
            shuffle: self.shuffle,
            lr: self.lr,
            min_lr: self.min_lr,
            lr_warmup_steps: self.lr_warmup_steps,
            lr_schedule: self.lr_schedule,
            max_steps: self.max_steps,
            lr_decay_steps: self.lr_decay_steps,
            weight_decay: self.weight_decay,
            adam_beta1: self.adam_beta1,
            adam_beta2: self.adam_beta2,
            adam_eps: self.adam_eps,
            clip_grad: self.clip_grad,
            device: device(&self.device)?,
            precision: self.precision,
            threads: self.threads,
            gradient_checkpointing: self.gradient_checkpointing,
            logprob_chunk_tokens: self.logprob_chunk_tokens,
            seed: self.seed,
            metrics: self.metrics.clone(),
            nproc: self.nproc,
            collective_timeout: self.collective_timeout,
            allreduce_bucket_mb: self.allreduce_bucket_mb,
            zero_stage: self.zero_stage,
            critic: CriticConfig {
                train: c.train_critic,
                critic: c.critic.clone(),
                save: c.critic_save.clone(),
                lr: c.critic_lr,
                value_clip: c.value_clip,
                lora: lora.clone(),
            },
            lora,
            input: self.input.spec()?,
        })
    }
}

impl InitArgs {
    fn config(&self) -> Result<InitConfig> {
        Ok(InitConfig {
            config: self.config.clone(),
            tokenizer: self.tokenizer.clone(),
            out: self.out.clone(),
            seed: self.seed,
            dtype: dtype(&self.dtype)?,
        })
    }
}

impl MergeArgs {
    fn config(&self) -> Result<MergeConfig> {
        let dtype = match self.dtype.as_str() {
            "auto" => None,
            s => Some(dtype(s)?),
        };
        Ok(MergeConfig { adapter: self.model.clone(), base: self.base.clone(), out: self.out.clone(), dtype })
    }
}

impl LogprobsArgs {
    fn config(&self) -> Result<ScoreConfig> {
        if self.temperature <= 0.0 || self.max_tokens_per_micro_batch == 0 {
            return Err(usage("`--temperature` and `--max-tokens-per-micro-batch` must be positive"));
        }
        Ok(ScoreConfig {
            model: self.model.clone(),
            temperature: self.temperature,
            max_tokens_per_micro_batch: self.max_tokens_per_micro_batch,
            logprob_chunk_tokens: self.logprob_chunk_tokens,
            shared_prefix: !self.no_shared_prefix,
            device: device(&self.device)?,
            threads: self.threads,
            input: self.input.spec()?,
            output: self.output.spec(),
        })
    }
}

impl ValuesArgs {
    fn config(&self) -> Result<ScoreConfig> {
        if self.max_tokens_per_micro_batch == 0 {
            return Err(usage("`--max-tokens-per-micro-batch` must be positive"));
        }
        Ok(ScoreConfig {
            model: self.critic.clone(),
            temperature: 1.0,
            max_tokens_per_micro_batch: self.max_tokens_per_micro_batch,
            logprob_chunk_tokens: 0,
            shared_prefix: !self.no_shared_prefix,
            device: device(&self.device)?,
            threads: self.threads,
            input: self.input.spec()?,
            output: self.output.spec(),
        })
    }
}

fn main() -> std::process::ExitCode {
    arl_core::cli::bounded_omp_spin_by_default();
    // Tensors of 1 MiB and more in their own mappings: the heap otherwise
    // keeps a step's freed activations in pieces (see the function).
    arl_core::alloc::map_large_allocations(1 << 20);
    arl_core::cli::main(TOOL, run)
}
