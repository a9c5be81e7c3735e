//! `arl-train`: trains a Hugging Face decoder (Qwen2/Qwen2.5, Qwen3, Llama 3)
//! on trajectory records with RL losses or SFT, on libtorch. Also makes the
//! test tokenizer (`make-tokenizer`), random models (`init`), reference
//! log-probs (`logprobs`) and PPO critic values (`values`); trains the critic
//! alongside the policy with `--train-critic`. See `arl::train` and `arl::model`.
use crate::cli::{self, InputArgs, OutputArgs};
use crate::train::options::{KlType, LossAgg, PolicyLoss, Schedule};
use clap::{Args as ClapArgs, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

pub const TOOL: &str = "arl-train";

/// Train a Hugging Face decoder on trajectory records (RL losses or SFT).
///
/// Reads records (JSONL or Parquet) with `tokens`, `prompt_len`, `loss_mask`,
/// `advantages` and `rollout_log_probs` (or chat `messages` for SFT), trains
/// `--model` and writes the result to `--save` as a Hugging Face checkpoint
/// (sharded safetensors, config.json, generation_config.json, tokenizer files)
/// that appears whole or not at all. Per-step metrics go to `--metrics`.
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
}

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
    /// bf16 on CUDA, fp32 on CPU.
    Auto,
    /// Everything in float32.
    Fp32,
    /// bf16 weights and activations with float32 master weights and optimizer state.
    Bf16,
    /// Automatic mixed precision: float32 weights, matrix multiplies in bf16 under libtorch autocast (CUDA or CPU).
    Amp,
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

    /// Token budget of one micro-batch (batch × padded length); a longer
    /// sequence goes alone
    #[arg(long, default_value_t = 8192, value_name = "TOKENS", help_heading = "Batching")]
    pub max_tokens_per_micro_batch: usize,

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

    /// Size of one gradient all-reduce bucket in MiB (float32)
    #[arg(long, default_value_t = 25.0, value_name = "MB", help_heading = "Distributed")]
    pub allreduce_bucket_mb: f64,

    #[command(flatten)]
    pub critic: CriticArgs,

    #[command(flatten)]
    pub input: InputArgs,
}

/// PPO's learned critic (`--train-critic`): see `arl::train::critic`.
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
    pub template: crate::tokenizer_build::Template,
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

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        Some(Command::MakeTokenizer(a)) => {
            crate::tokenizer_build::write(&a.out, a.template)?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "torch")]
        Some(Command::Init(a)) => crate::train::run::init(&a),
        #[cfg(feature = "torch")]
        Some(Command::Logprobs(a)) => crate::train::run::logprobs(&a),
        #[cfg(feature = "torch")]
        Some(Command::Values(a)) => crate::train::critic::values(&a),
        #[cfg(feature = "torch")]
        None => match crate::dist::respawn(args.train.nproc, TOOL)? {
            Some(code) => Ok(code),
            None => crate::train::run::train(&args.train),
        },
        #[cfg(not(feature = "torch"))]
        _ => {
            Err(cli::usage("this arl-train was built without libtorch (feature `torch`); only `make-tokenizer` works"))
        }
    }
}
