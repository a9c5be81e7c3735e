//! One optimizer step of the policy: the global batch (or this rank's share
//! of it) in micro-batches, each one's token losses (SFT, or PPO/GSPO with
//! KL, entropy, TIS and OPSM), gradients summed over ranks, clipped, applied;
//! and the step's statistics, as the metrics line reports them.
use super::batch::Batch;
use super::config::{LossKind, TrainConfig, TOOL};
use super::loss::{self, PolicyLoss};
use super::micro::{micro_batches, Batching};
use super::optim::AdamW;
use super::Sample;
use anyhow::{Context, Result};
use arl_core::cli;
use arl_dist::{grads::GradSync, zero::Zero, Collective};
use arl_model::{EntropyMode, HeadOptions, Model, TokenScores};
use serde_json::{json, Value};
use tch::{Kind, Tensor};

/// Sums of per-token metrics over a step (divided by tokens at the end).
#[derive(Default)]
pub(crate) struct StepStats {
    pub loss: f64,
    pub pg_loss: f64,
    pub kl_loss: f64,
    pub entropy: f64,
    pub clipped: f64,
    pub approx_kl: f64,
    pub ratio_min: f64,
    pub ratio_max: f64,
    pub tis: f64,
    pub mismatch_k3: f64,
    pub mismatch_max: f64,
    pub mismatch_tokens: f64,
    pub opsm_dropped: f64,
    pub tokens: f64,
    pub all_tokens: usize,
    /// Seconds in the gradient all-reduce (data parallel; at ZeRO stage 2
    /// the reduce-scatter).
    pub allreduce_s: f64,
    /// Seconds in ZeRO's all-gather of the updated parameters.
    pub allgather_s: f64,
}

impl StepStats {
    /// The statistics summed over the ranks (all but the integer
    /// `all_tokens`): the one list [`StepStats::reduce`] packs and unpacks,
    /// so that a new sum is added here only.
    fn sums_mut(&mut self) -> [&mut f64; 11] {
        [
            &mut self.loss,
            &mut self.pg_loss,
            &mut self.kl_loss,
            &mut self.entropy,
            &mut self.clipped,
            &mut self.approx_kl,
            &mut self.tis,
            &mut self.mismatch_k3,
            &mut self.mismatch_tokens,
            &mut self.opsm_dropped,
            &mut self.tokens,
        ]
    }

    /// Sums (and maxima) over the ranks: afterwards every rank holds the
    /// global batch's statistics.
    fn reduce(&mut self, comm: &dyn Collective) {
        let mut sums: Vec<f64> = self.sums_mut().map(|v| *v).into_iter().chain([self.all_tokens as f64]).collect();
        let mut maxes = [-self.ratio_min, self.ratio_max, self.mismatch_max];
        arl_dist::grads::reduce_stats(comm, &mut sums, &mut maxes);
        self.all_tokens = sums.pop().expect("the token count") as usize;
        for (v, sum) in self.sums_mut().into_iter().zip(sums) {
            *v = sum;
        }
        (self.ratio_min, self.ratio_max, self.mismatch_max) = (-maxes[0], maxes[1], maxes[2]);
    }

    /// Adds the step's RL and data-parallel metrics to the metrics line `m`
    /// (which has the loss, entropy and token counts already).
    pub(crate) fn add_metrics(&self, m: &mut Value, args: &TrainConfig, world: usize) {
        let tk = self.tokens.max(1.0);
        if world > 1 {
            m["allreduce_s"] = json!(self.allreduce_s);
        }
        if args.zero_stage > 0 {
            m["allgather_s"] = json!(self.allgather_s);
        }
        if args.loss == LossKind::Rl {
            let extra = json!({
                "pg_loss": self.pg_loss / tk, "kl_loss": self.kl_loss / tk, "clipfrac": self.clipped / tk,
                "approx_kl": self.approx_kl / tk, "ratio_min": self.ratio_min, "ratio_max": self.ratio_max,
                "opsm_dropped_seqs": self.opsm_dropped,
            });
            for (k, v) in extra.as_object().expect("object") {
                m[k] = v.clone();
            }
            if args.tis_clip.is_some() {
                m["tis_weight_mean"] = json!(self.tis / tk);
            }
        }
        if self.mismatch_tokens > 0.0 {
            m["mismatch_kl"] = json!(self.mismatch_k3 / self.mismatch_tokens);
            m["mismatch_max_abs"] = json!(self.mismatch_max);
        }
    }
}

fn masked_sum(x: &Tensor, mask: &Tensor) -> f64 {
    (x.detach() * mask).sum(Kind::Float).double_value(&[])
}

fn masked_minmax(x: &Tensor, mask: &Tensor) -> (f64, f64) {
    let sel = x.detach().masked_select(&mask.gt(0.0));
    if sel.numel() == 0 {
        return (f64::NAN, f64::NAN);
    }
    (sel.min().double_value(&[]), sel.max().double_value(&[]))
}

/// How a micro-batch's summed token losses become the step's loss: divided by
/// a denominator counted over the whole global batch (all ranks), so that
/// accumulating over micro-batches and ranks equals one big batch.
struct Aggregation {
    denom: f64,
    horizon: f64,
}

/// How a data-parallel step reaches the other ranks.
pub(crate) struct DataParallel<'a> {
    pub comm: &'a dyn Collective,
    /// The gradient all-reduce (stages 0 and 1) and the parameters' first broadcast.
    pub sync: GradSync,
    /// ZeRO's collectives (`--zero-stage` 1 or 2); the optimizer is then sharded.
    pub zero: Option<Zero>,
}

/// One optimizer step over the samples `chunk`: the global batch, or with
/// `dp` (data parallel) this rank's share of it, whose gradients are summed
/// over the ranks before the update. Returns the gradient norm and the stats.
#[allow(clippy::too_many_arguments)]
pub(crate) fn train_step(
    model: &mut Model,
    opt: &mut AdamW,
    args: &TrainConfig,
    samples: &[Sample],
    chunk: &[usize],
    lens: &[usize],
    lr: f64,
    dp: Option<&DataParallel>,
) -> Result<(f64, StepStats)> {
    // Global denominators: counted over the whole global batch, never
    // averaged per rank.
    let mut counts = [
        chunk.iter().map(|&i| samples[i].loss_mask.iter().map(|&x| x as f64).sum::<f64>()).sum(),
        chunk.iter().filter(|&&i| samples[i].loss_mask.iter().any(|&x| x > 0.0)).count() as f64,
    ];
    let mut longest = [chunk.iter().map(|&i| samples[i].response_len()).max().unwrap_or(1) as f64];
    if let Some(dp) = dp {
        arl_dist::grads::reduce_stats(dp.comm, &mut counts, &mut longest);
    }
    let [tokens, seqs] = counts;
    let agg = Aggregation {
        denom: loss::agg_denominator(args.loss_agg, tokens, seqs),
        horizon: args.loss_agg_horizon.unwrap_or(longest[0]).max(1.0),
    };
    let mut s = StepStats { ratio_min: f64::INFINITY, ratio_max: f64::NEG_INFINITY, ..Default::default() };
    opt.zero_grad();
    // Micro-batches of similar lengths waste less on padding; the step's
    // gradient does not depend on how its samples are grouped.
    let rl = args.loss == LossKind::Rl;
    let head = HeadOptions {
        temperature: args.temperature,
        chunk_tokens: args.logprob_chunk_tokens,
        entropy: if rl && args.entropy_coef != 0.0 { EntropyMode::Grad } else { EntropyMode::Value },
    };
    let batching = args.batching();
    let mut by_len = chunk.to_vec();
    by_len.sort_by_key(|&i| lens[i]);
    let order = if batching == Batching::Padded { &by_len } else { chunk };
    for mb in micro_batches(batching, order, |i| &samples[i], args.max_tokens_per_micro_batch) {
        let group: Vec<&Sample> = mb.items.iter().map(|&i| &samples[i]).collect();
        let batch = Batch::new(&group, model.device());
        s.all_tokens += batch.tokens;
        // Log-probs and entropy through the chunked LM head, at the response
        // positions only (every loss and statistic reads them through the
        // loss mask; other positions read 0).
        let needed = batch.mask.gt(0.0);
        let layout = mb.layout(batching, &batch.lens);
        model.forward_backward_lean(
            &batch.ids,
            Some(&needed),
            layout,
            &head,
            args.gradient_checkpointing,
            |scores| micro_batch_loss(args, &batch, scores, &agg, &mut s),
        )?;
    }
    if let Some(dp) = dp {
        // Sum over ranks: each rank's loss was already divided by the global
        // denominator. Afterwards every rank holds the same gradients (at
        // ZeRO stage 2: the summed gradients of its own share), so the
        // clipping norm below is the global one.
        s.allreduce_s = match &dp.zero {
            Some(z) if args.zero_stage == 2 => z.reduce_scatter_grads(dp.comm),
            _ => dp.sync.all_reduce(dp.comm),
        };
        s.reduce(dp.comm);
    }
    let norm = opt.clip_grad_norm(args.clip_grad, dp.map(|d| d.comm));
    if norm.is_finite() {
        opt.step(lr);
        // Sharded: each rank updated its share; every rank gets all of them.
        if let Some((dp, z)) = dp.and_then(|d| d.zero.as_ref().map(|z| (d, z))) {
            s.allgather_s = z.all_gather_params(dp.comm);
        }
    } else {
        cli::warn(TOOL, format!("gradient norm is {norm}; step skipped"));
        opt.step += 1;
    }
    Ok((norm, s))
}

/// The loss of one micro-batch from its log-probs and entropy [B, T−1] (to
/// call `backward` on), its statistics added to `s`.
fn micro_batch_loss(
    args: &TrainConfig,
    batch: &Batch,
    scores: &TokenScores,
    agg: &Aggregation,
    s: &mut StepStats,
) -> Result<Tensor> {
    let rl = args.loss == LossKind::Rl;
    let logp = &scores.logp;
    let mut mask = batch.mask.shallow_clone();
    if let Some(r) = &batch.rollout {
        let d = &logp.detach() - r; // log π_train − log π_rollout
        let k3 = d.exp() - &d - 1.0; // KL(rollout ‖ train) estimator on rollout samples
        s.mismatch_k3 += masked_sum(&k3, &mask);
        s.mismatch_tokens += mask.sum(Kind::Float).double_value(&[]);
        let (lo, hi) = masked_minmax(&d.abs(), &mask);
        if hi.is_finite() {
            s.mismatch_max = s.mismatch_max.max(hi.max(lo));
        }
    }
    let need_entropy_grad = rl && args.entropy_coef != 0.0;
    let ent = scores.entropy.as_ref().context("the entropy")?;
    let token_loss = if rl {
        let mut total = policy_loss(args, batch, logp, &mut mask, s)?;
        if need_entropy_grad {
            total -= ent * args.entropy_coef;
        }
        total
    } else {
        -logp
    };
    s.entropy += masked_sum(ent, &mask);
    s.tokens += mask.sum(Kind::Float).double_value(&[]);
    s.loss += masked_sum(&token_loss, &mask);
    Ok(loss::agg_sum(&token_loss, &mask, args.loss_agg, agg.horizon) / agg.denom)
}

/// The RL token losses [B, T−1]: PPO or GSPO on the old policy's log-probs,
/// weighted by TIS, with the KL penalty; OPSM drops sequences from `mask`.
fn policy_loss(
    args: &TrainConfig,
    batch: &Batch,
    logp: &Tensor,
    mask: &mut Tensor,
    s: &mut StepStats,
) -> Result<Tensor> {
    let old = batch.old.as_ref().context("old log-probs")?;
    if let Some(delta) = args.opsm_delta {
        let beh = batch.rollout.as_ref().unwrap_or(old);
        let keep = loss::opsm_keep(logp, beh, &batch.adv, mask, delta);
        let had = mask.sum_dim_intlist([-1i64].as_slice(), false, Kind::Float).gt(0.0).to_kind(Kind::Float);
        s.opsm_dropped += (had * (keep.squeeze_dim(-1) * -1.0 + 1.0)).sum(Kind::Float).double_value(&[]);
        *mask = &*mask * keep;
    }
    let (eps, eps_high) = (args.eps_clip, args.eps_clip_high);
    let (mut pg, clipped, ratio) = match args.policy_loss {
        PolicyLoss::Ppo => loss::ppo_token_loss(logp, old, &batch.adv, eps, eps_high, args.eps_clip_c),
        PolicyLoss::Gspo => loss::gspo_token_loss(logp, old, &batch.adv, mask, eps, eps_high),
    };
    if let Some(c) = args.tis_clip {
        let w = loss::tis_weights(old, batch.rollout.as_ref().context("rollout log-probs")?, c);
        s.tis += masked_sum(&w, mask);
        pg *= w;
    }
    s.pg_loss += masked_sum(&pg, mask);
    s.clipped += masked_sum(&clipped, mask);
    s.approx_kl += masked_sum(&(old - logp.detach()), mask);
    let (lo, hi) = masked_minmax(&ratio, mask);
    if lo.is_finite() {
        s.ratio_min = s.ratio_min.min(lo);
        s.ratio_max = s.ratio_max.max(hi);
    }
    let mut total = pg;
    if args.kl_loss_coef != 0.0 {
        let r = batch.reference.as_ref().context("reference log-probs")?;
        let kl = loss::kl_penalty(logp, r, args.kl_loss_type);
        s.kl_loss += masked_sum(&kl, mask);
        total += kl * args.kl_loss_coef;
    }
    Ok(total)
}
