//! RL and SFT losses on response-aligned tensors.
//!
//! Every function takes [B,T] tensors where row b is one sequence and `mask`
//! (float 0/1) marks its trainable tokens; losses are per token ([B,T]) and
//! reduced by [`agg_sum`] / [`agg_denominator`], so that gradient
//! accumulation over micro-batches equals one pass over the global batch.
use tch::{Kind, Tensor};

pub use super::config::{KlType, LossAgg, PolicyLoss};

/// PPO clipped surrogate per token (Schulman et al. 2017), with clip-higher
/// (DAPO, arXiv:2503.14476: `eps_high` ≠ `eps_low`) and dual clip (Ye et al.
/// 2020, arXiv:1912.09729: for A < 0 the loss is capped at −A·c).
/// Returns (loss [B,T], clipped [B,T] as float 0/1, ratio [B,T]).
pub fn ppo_token_loss(
    logp: &Tensor,
    old_logp: &Tensor,
    adv: &Tensor,
    eps_low: f64,
    eps_high: f64,
    dual_clip: Option<f64>,
) -> (Tensor, Tensor, Tensor) {
    // Clamp the log-ratio as verl does, so one wild token cannot overflow exp.
    let ratio = (logp - old_logp).clamp(-20.0, 20.0).exp();
    clipped_surrogate(ratio, adv, eps_low, eps_high, dual_clip)
}

fn clipped_surrogate(
    ratio: Tensor,
    adv: &Tensor,
    eps_low: f64,
    eps_high: f64,
    dual_clip: Option<f64>,
) -> (Tensor, Tensor, Tensor) {
    let l1 = -adv * &ratio;
    let l2 = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high);
    let clipped = l2.gt_tensor(&l1).to_kind(Kind::Float);
    let mut loss = l1.maximum(&l2);
    if let Some(c) = dual_clip {
        let cap = -adv * c;
        let dual = loss.minimum(&cap);
        let neg = adv.lt(0.0);
        loss = loss.where_self(&neg.logical_not(), &dual);
    }
    (loss, clipped, ratio)
}

/// GSPO (Zheng et al. 2025, arXiv:2507.18071) in verl's form: each token's
/// ratio has the value of the sequence ratio s = exp(mean_t(log π − log π_old))
/// and the gradient of s · ∇log π_t (`sg[s] · π_t / sg[π_t]`), then the usual
/// clipped surrogate (GSPO's clip range is typically ~3e-4 / 4e-4).
pub fn gspo_token_loss(
    logp: &Tensor,
    old_logp: &Tensor,
    adv: &Tensor,
    mask: &Tensor,
    eps_low: f64,
    eps_high: f64,
) -> (Tensor, Tensor, Tensor) {
    let n = mask.sum_dim_intlist([-1i64].as_slice(), true, Kind::Float).clamp_min(1.0);
    let seq_lr = ((logp - old_logp) * mask).sum_dim_intlist([-1i64].as_slice(), true, Kind::Float) / n;
    let log_ratio = (logp - logp.detach() + seq_lr.detach()).clamp_max(10.0);
    clipped_surrogate(log_ratio.exp(), adv, eps_low, eps_high, None)
}

/// Per-token KL estimate of π from π_ref (http://joschu.net/blog/kl-approx.html).
pub fn kl_penalty(logp: &Tensor, ref_logp: &Tensor, ty: KlType) -> Tensor {
    let d = logp - ref_logp;
    match ty {
        KlType::K1 => d,
        KlType::K2 => d.square() * 0.5,
        KlType::K3 | KlType::LowVarKl => {
            let k = -&d; // log π_ref − log π
            let v = k.exp() - k - 1.0;
            if ty == KlType::LowVarKl {
                v.clamp(-10.0, 10.0)
            } else {
                v
            }
        }
    }
}

/// Per-token entropy of softmax(logits / temperature): logsumexp(l) − Σ p·l.
pub fn entropy(logits: &Tensor, temperature: f64) -> Tensor {
    let l = logits.to_kind(Kind::Float);
    let l = if temperature != 1.0 { l / temperature } else { l };
    let p = l.softmax(-1, Kind::Float);
    l.logsumexp([-1i64].as_slice(), false) - (p * &l).sum_dim_intlist([-1i64].as_slice(), false, Kind::Float)
}

/// Truncated importance sampling weights (Yao et al. 2025, "Your efficient RL
/// framework secretly brings you off-policy RL training"):
/// min(exp(log π_old − log π_rollout), clip), no gradient.
pub fn tis_weights(old_logp: &Tensor, rollout_logp: &Tensor, clip: f64) -> Tensor {
    (old_logp - rollout_logp).clamp(-20.0, 20.0).exp().clamp_max(clip).detach()
}

/// Off-policy sequence masking (slime's OPSM): a sequence with negative
/// advantage whose mean over trainable tokens of (log π_behaviour − log π)
/// exceeds `delta` is dropped. Returns a [B,1] float keep-mask (1 keep, 0 drop).
pub fn opsm_keep(logp: &Tensor, behaviour_logp: &Tensor, adv: &Tensor, mask: &Tensor, delta: f64) -> Tensor {
    let dim = [-1i64];
    let n = mask.sum_dim_intlist(dim.as_slice(), true, Kind::Float).clamp_min(1.0);
    let kl = ((behaviour_logp - logp.detach()) * mask).sum_dim_intlist(dim.as_slice(), true, Kind::Float) / &n;
    let seq_adv = (adv * mask).sum_dim_intlist(dim.as_slice(), true, Kind::Float) / n;
    let drop = seq_adv.lt(0.0).logical_and(&kl.gt(delta));
    drop.logical_not().to_kind(Kind::Float)
}

/// The numerator of an aggregation over this micro-batch: divide the sum over
/// all micro-batches by [`agg_denominator`] of the whole global batch.
pub fn agg_sum(loss: &Tensor, mask: &Tensor, mode: LossAgg, horizon: f64) -> Tensor {
    let dim = [-1i64];
    let tok_sum = (loss * mask).sum_dim_intlist(dim.as_slice(), false, Kind::Float);
    match mode {
        LossAgg::TokenMean | LossAgg::SeqMeanTokenSum => tok_sum.sum(Kind::Float),
        LossAgg::SeqMeanTokenMean => {
            let n = mask.sum_dim_intlist(dim.as_slice(), false, Kind::Float).clamp_min(1.0);
            (tok_sum / n).sum(Kind::Float)
        }
        LossAgg::SeqMeanTokenSumNorm => tok_sum.sum(Kind::Float) / horizon,
    }
}

/// What the summed loss is divided by: trainable tokens (token-mean) or
/// sequences that have at least one trainable token (the seq-mean modes).
pub fn agg_denominator(mode: LossAgg, tokens: f64, seqs: f64) -> f64 {
    match mode {
        LossAgg::TokenMean => tokens.max(1.0),
        _ => seqs.max(1.0),
    }
}

/// [`agg_sum`] / [`agg_denominator`] for a batch that is the whole global batch.
pub fn agg(loss: &Tensor, mask: &Tensor, mode: LossAgg, horizon: f64) -> Tensor {
    let tokens = mask.sum(Kind::Float).double_value(&[]);
    let seqs = mask.sum_dim_intlist([-1i64].as_slice(), false, Kind::Float).gt(0.0).sum(Kind::Float).double_value(&[]);
    agg_sum(loss, mask, mode, horizon) / agg_denominator(mode, tokens, seqs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(x: &[f32]) -> Tensor {
        Tensor::from_slice(x).view([1, x.len() as i64])
    }
    fn v(x: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(x.flatten(0, -1)).unwrap()
    }
    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn ppo_clip_and_clip_higher() {
        // ratios 1.5, 0.5, 1.1, 0.9 with advantages +1, +1, −1, −1.
        let old = t(&[0.0; 4]);
        let logp = t(&[1.5f32.ln(), 0.5f32.ln(), 1.1f32.ln(), 0.9f32.ln()]);
        let adv = t(&[1.0, 1.0, -1.0, -1.0]);
        let (loss, clipped, ratio) = ppo_token_loss(&logp, &old, &adv, 0.2, 0.2, None);
        close(&v(&ratio), &[1.5, 0.5, 1.1, 0.9]);
        // A>0: max(-r, -clip(r)) → −1.2 (clipped), −0.5; A<0: max(r, clip(r)) → 1.1, 0.9.
        close(&v(&loss), &[-1.2, -0.5, 1.1, 0.9]);
        close(&v(&clipped), &[1.0, 0.0, 0.0, 0.0]);
        // Clip-higher: eps_high 0.28 lets ratio 1.5 count up to 1.28.
        let (loss, _, _) = ppo_token_loss(&logp, &old, &adv, 0.2, 0.28, None);
        close(&v(&loss), &[-1.28, -0.5, 1.1, 0.9]);
        // A<0 with a low ratio: 0.5 → max(0.5, 0.8) = 0.8, clipped.
        let (loss, clipped, _) = ppo_token_loss(&t(&[0.5f32.ln()]), &t(&[0.0]), &t(&[-1.0]), 0.2, 0.2, None);
        close(&v(&loss), &[0.8]);
        close(&v(&clipped), &[1.0]);
    }

    #[test]
    fn dual_clip_caps_negative_advantages_only() {
        // ratio 5, A = −2: plain PPO gives max(10, 2.4) = 10; dual clip c=3 caps at 6.
        let logp = t(&[5f32.ln(), 5f32.ln()]);
        let old = t(&[0.0, 0.0]);
        let adv = t(&[-2.0, 2.0]);
        let (loss, _, _) = ppo_token_loss(&logp, &old, &adv, 0.2, 0.2, Some(3.0));
        // A>0 untouched: max(−10, −2.4) = −2.4.
        close(&v(&loss), &[6.0, -2.4]);
        let (loss, _, _) = ppo_token_loss(&logp, &old, &adv, 0.2, 0.2, None);
        close(&v(&loss), &[10.0, -2.4]);
    }

    #[test]
    fn gspo_uses_the_sequence_ratio() {
        // Token log-ratios 0.2 and −0.1 (a third token masked out): seq ratio exp(0.05).
        let logp = t(&[0.2, -0.1, 3.0]).set_requires_grad(true);
        let old = t(&[0.0, 0.0, 0.0]);
        let mask = t(&[1.0, 1.0, 0.0]);
        let adv = t(&[1.0, 1.0, 1.0]);
        let (loss, clipped, ratio) = gspo_token_loss(&logp, &old, &adv, &mask, 0.2, 0.2);
        let s = 0.05f32.exp();
        close(&v(&ratio.narrow(1, 0, 2)), &[s, s]);
        close(&v(&loss.narrow(1, 0, 2)), &[-s, -s]);
        close(&v(&clipped.narrow(1, 0, 2)), &[0.0, 0.0]);
        // d/dlogp_t of token-mean(−s·A) = −s/2 for each trainable token.
        agg(&loss, &mask, LossAgg::TokenMean, 1.0).backward();
        close(&v(&logp.grad()), &[-s / 2.0, -s / 2.0, 0.0]);
        // Sequence ratio 1.5 is clipped to 1.2 for A>0.
        let (loss, clipped, _) = gspo_token_loss(&t(&[1.5f32.ln()]), &t(&[0.0]), &t(&[1.0]), &t(&[1.0]), 0.2, 0.2);
        close(&v(&loss), &[-1.2]);
        close(&v(&clipped), &[1.0]);
    }

    #[test]
    fn kl_types() {
        let logp = t(&[-1.0, -2.0]);
        let refp = t(&[-1.5, -1.0]);
        close(&v(&kl_penalty(&logp, &refp, KlType::K1)), &[0.5, -1.0]);
        close(&v(&kl_penalty(&logp, &refp, KlType::K2)), &[0.125, 0.5]);
        // k3 with r = ref − logp: e^r − r − 1.
        let k3 = [(-0.5f32).exp() + 0.5 - 1.0, 1f32.exp() - 1.0 - 1.0];
        close(&v(&kl_penalty(&logp, &refp, KlType::K3)), &k3);
        close(&v(&kl_penalty(&logp, &refp, KlType::LowVarKl)), &k3);
        // low_var_kl clamps at 10; k3 does not.
        let big = kl_penalty(&t(&[-20.0]), &t(&[0.0]), KlType::K3);
        assert!(v(&big)[0] > 1e8);
        close(&v(&kl_penalty(&t(&[-20.0]), &t(&[0.0]), KlType::LowVarKl)), &[10.0]);
    }

    #[test]
    fn tis_and_opsm() {
        let old = t(&[0.0, 0.0, -1.0]);
        let rollout = t(&[-1.0, 0.5, -1.0]);
        // exp(1) clipped to 2, exp(−0.5), exp(0).
        close(&v(&tis_weights(&old, &rollout, 2.0)), &[2.0, (-0.5f32).exp(), 1.0]);
        // Two sequences, both with mean(behaviour − logp) = 0.5: only the one with A<0 is dropped.
        let logp = Tensor::from_slice(&[-1.0f32, -1.0, -1.0, -1.0]).view([2, 2]);
        let beh = Tensor::from_slice(&[-0.5f32, -0.5, -0.5, -0.5]).view([2, 2]);
        let adv = Tensor::from_slice(&[-1.0f32, -1.0, 1.0, 1.0]).view([2, 2]);
        let mask = Tensor::ones([2, 2], (Kind::Float, tch::Device::Cpu));
        close(&v(&opsm_keep(&logp, &beh, &adv, &mask, 0.4)), &[0.0, 1.0]);
        close(&v(&opsm_keep(&logp, &beh, &adv, &mask, 0.6)), &[1.0, 1.0]);
    }

    #[test]
    fn aggregations() {
        // Seq 0: losses 1, 2, 3 (all trainable); seq 1: 4, [5 masked], [6 masked].
        let loss = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).view([2, 3]);
        let mask = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 1.0, 0.0, 0.0]).view([2, 3]);
        let a = |m| agg(&loss, &mask, m, 4.0).double_value(&[]) as f32;
        close(&[a(LossAgg::TokenMean)], &[10.0 / 4.0]);
        close(&[a(LossAgg::SeqMeanTokenSum)], &[(6.0 + 4.0) / 2.0]);
        close(&[a(LossAgg::SeqMeanTokenMean)], &[(2.0 + 4.0) / 2.0]);
        close(&[a(LossAgg::SeqMeanTokenSumNorm)], &[(6.0 / 4.0 + 4.0 / 4.0) / 2.0]);
        // Split into two micro-batches, sums over the global denominator agree.
        for m in [LossAgg::TokenMean, LossAgg::SeqMeanTokenSum, LossAgg::SeqMeanTokenMean, LossAgg::SeqMeanTokenSumNorm]
        {
            let s: f64 =
                (0..2).map(|i| agg_sum(&loss.narrow(0, i, 1), &mask.narrow(0, i, 1), m, 4.0).double_value(&[])).sum();
            close(&[(s / agg_denominator(m, 4.0, 2.0)) as f32], &[a(m)]);
        }
    }

    #[test]
    fn entropy_of_uniform_and_peaked() {
        let l = Tensor::zeros([1, 4], (Kind::Float, tch::Device::Cpu));
        close(&v(&entropy(&l, 1.0)), &[4f32.ln()]);
        let l = Tensor::from_slice(&[0.0f32, 2f32.ln()]).view([1, 2]);
        // p = (1/3, 2/3).
        let h = -(1.0f32 / 3.0 * (1.0f32 / 3.0).ln() + 2.0 / 3.0 * (2.0f32 / 3.0).ln());
        close(&v(&entropy(&l, 1.0)), &[h]);
    }
}
