//! The trainer's option enums (no libtorch needed, so `--help` and the man
//! page are complete in every build).
use clap::ValueEnum;

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
