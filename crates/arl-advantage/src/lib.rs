//! The maths of `arl-advantage`: group baselines (GRPO, Dr.GRPO, RLOO,
//! REINFORCE++-baseline), discounted returns (REINFORCE++), GAE (a reverse
//! scan and slime's chunked triangular-matrix form), the KL estimators used
//! for reward shaping, and masked batch whitening.
//!
//! Everything here works on plain slices so it can be tested by hand and
//! benchmarked without any I/O. Per-token slices are one entry per response
//! token; `mask` is the record's `loss_mask` (1 = trained, 0 = tool output).
//! Shapes and constants follow slime's `slime/utils/ppo_utils.py` and verl's
//! `verl/trainer/ppo/core_algos.py`, whose numbers these functions must match.

/// GRPO's epsilon in `(r - mean) / (std + eps)` (verl `compute_grpo_outcome_advantage`).
pub const GRPO_EPS: f64 = 1e-6;
/// Whitening epsilon in `(x - mean) * rsqrt(var + eps)` (verl `masked_whiten`, slime `distributed_masked_whiten`).
pub const WHITEN_EPS: f64 = 1e-8;
/// `low_var_kl` is k3 clamped to this bound (slime/verl `compute_approx_kl`).
pub const LOW_VAR_KL_BOUND: f32 = 10.0;

/// How the per-token KL between the rollout policy and the reference is estimated
/// (Schulman, "Approximating KL divergence", 2020; names as in slime/verl).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KlEstimator {
    /// `log p - log p_ref`
    K1,
    /// `(log p - log p_ref)^2 / 2`
    K2,
    /// `exp(log p_ref - log p) - 1 - (log p_ref - log p)`
    K3,
    /// k3 clamped to ±10
    #[value(name = "low_var_kl")]
    LowVarKl,
}

/// One token's KL estimate from the policy's log-prob `lp` and the reference's `ref_lp`.
#[inline]
pub fn kl_token(est: KlEstimator, lp: f32, ref_lp: f32) -> f32 {
    let log_ratio = lp - ref_lp;
    match est {
        KlEstimator::K1 => log_ratio,
        KlEstimator::K2 => 0.5 * log_ratio * log_ratio,
        KlEstimator::K3 | KlEstimator::LowVarKl => {
            // slime: log_ratio = -log_ratio; kl = exp(log_ratio) - 1 - log_ratio
            let r = -log_ratio;
            let k = r.exp() - 1.0 - r;
            if est == KlEstimator::LowVarKl {
                k.clamp(-LOW_VAR_KL_BOUND, LOW_VAR_KL_BOUND)
            } else {
                k
            }
        }
    }
}

/// Per-token reward `-kl_coef · KL` on trained tokens, 0 on tool tokens.
/// With `kl_coef == 0` (or no log-probs) this is all zeros.
pub fn kl_penalty(
    est: KlEstimator,
    kl_coef: f32,
    lp: Option<&[f32]>,
    ref_lp: Option<&[f32]>,
    mask: &[u8],
    out: &mut Vec<f32>,
) {
    out.clear();
    out.resize(mask.len(), 0.0);
    if kl_coef == 0.0 {
        return;
    }
    if let (Some(lp), Some(rl)) = (lp, ref_lp) {
        for i in 0..mask.len() {
            if mask[i] != 0 {
                out[i] = -kl_coef * kl_token(est, lp[i], rl[i]);
            }
        }
    }
}

/// Unbiased (Bessel) standard deviation and mean of a group's rewards; std is 0 for n < 2.
pub fn mean_std(rewards: &[f64]) -> (f64, f64) {
    let n = rewards.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = rewards.iter().sum::<f64>() / n as f64;
    if n < 2 {
        return (mean, 0.0);
    }
    let ss: f64 = rewards.iter().map(|r| (r - mean) * (r - mean)).sum();
    (mean, (ss / (n - 1) as f64).sqrt())
}

/// Whether every reward is the same: such a group carries no signal, and its
/// advantages must be exactly 0 rather than the rounding error of its mean
/// divided by 1e-6.
fn constant(rewards: &[f64]) -> bool {
    rewards.windows(2).all(|w| w[0] == w[1])
}

/// GRPO: `(r - mean) / (std + 1e-6)` with the Bessel std over the group, or
/// `r - mean` with `no_std` (Dr.GRPO, Liu et al. 2025). A group of one gets 0.
pub fn grpo(rewards: &[f64], no_std: bool) -> Vec<f64> {
    if rewards.len() < 2 || constant(rewards) {
        return vec![0.0; rewards.len()];
    }
    let (mean, std) = mean_std(rewards);
    rewards.iter().map(|r| if no_std { r - mean } else { (r - mean) / (std + GRPO_EPS) }).collect()
}

/// RLOO (Ahmadian et al. 2024): `r_i - mean of the other samples`. A group of one gets 0.
pub fn rloo(rewards: &[f64]) -> Vec<f64> {
    let n = rewards.len();
    if n < 2 || constant(rewards) {
        return vec![0.0; n];
    }
    let sum: f64 = rewards.iter().sum();
    rewards.iter().map(|r| r - (sum - r) / (n - 1) as f64).collect()
}

/// REINFORCE++-baseline's group baseline: `r - mean` (slime subtracts the group
/// mean in the rollout, then `get_reinforce_plus_plus_baseline_advantages`).
pub fn group_mean_baseline(rewards: &[f64]) -> Vec<f64> {
    if constant(rewards) {
        return vec![0.0; rewards.len()];
    }
    let (mean, _) = mean_std(rewards);
    rewards.iter().map(|r| r - mean).collect()
}

/// REINFORCE++ discounted returns (slime `get_reinforce_plus_plus_returns`):
/// `token_rewards` (already `-kl_coef·KL·mask`) plus `reward` on the last
/// trained token (the last token when none is trained), then
/// `G_t = r_t + γ G_{t+1}` over every response position: tool tokens carry
/// zero reward but still take a discount step.
pub fn reinforce_pp_returns(token_rewards: &mut [f32], mask: &[u8], reward: f32, gamma: f32) {
    let n = token_rewards.len();
    if n == 0 {
        return;
    }
    let last = mask.iter().rposition(|&m| m != 0).unwrap_or(n - 1);
    token_rewards[last] += reward;
    let mut running = 0.0f32;
    for t in (0..n).rev() {
        running = token_rewards[t] + gamma * running;
        token_rewards[t] = running;
    }
}

/// GAE (Schulman et al. 2016) by a reverse scan, slime's `get_advantages_and_returns`:
/// `δ_t = r_t + γ V_{t+1} - V_t` (with `V_L = 0`), `A_t = δ_t + γλ A_{t+1}`.
/// `rewards` and `values` have one entry per response token; `adv` receives A.
pub fn gae(rewards: &[f32], values: &[f32], gamma: f32, lambda: f32, adv: &mut [f32]) {
    let n = rewards.len();
    debug_assert!(values.len() == n && adv.len() == n);
    if n == 0 {
        return;
    }
    // δ first, in a loop without a carried dependency so it vectorises; then
    // the scan itself is one multiply-add per token.
    for t in 0..n - 1 {
        adv[t] = rewards[t] + gamma * values[t + 1] - values[t];
    }
    adv[n - 1] = rewards[n - 1] - values[n - 1];
    let w = gamma * lambda;
    let mut last = 0.0f32;
    for a in adv.iter_mut().rev() {
        last = *a + w * last;
        *a = last;
    }
}

/// [`gae`] fused with everything around it, in one reverse pass: the
/// per-token rewards (`token_rewards`, e.g. the KL penalty; none means 0),
/// `reward` on the last response token, the scan, `returns = A + V`, and the
/// mask (0 on untrained tokens in both outputs). The same operations in the
/// same order as [`gae`] followed by masking, so the results are identical.
#[allow(clippy::too_many_arguments)]
pub fn gae_masked(
    token_rewards: Option<&[f32]>,
    reward: f32,
    values: &[f32],
    mask: &[u8],
    gamma: f32,
    lambda: f32,
    adv: &mut [f32],
    ret: &mut [f32],
) {
    match token_rewards {
        Some(k) => gae_masked_by(|t| k[t], reward, values, mask, gamma, lambda, adv, ret),
        None => gae_masked_by(|_| 0.0, reward, values, mask, gamma, lambda, adv, ret),
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn gae_masked_by(
    token_reward: impl Fn(usize) -> f32,
    reward: f32,
    values: &[f32],
    mask: &[u8],
    gamma: f32,
    lambda: f32,
    adv: &mut [f32],
    ret: &mut [f32],
) {
    let n = mask.len();
    assert!(values.len() == n && adv.len() == n && ret.len() == n);
    if n == 0 {
        return;
    }
    let w = gamma * lambda;
    let keep = |m: u8, x: f32| if m != 0 { x } else { 0.0 };
    let t = n - 1;
    let mut last = (token_reward(t) + reward) - values[t];
    adv[t] = keep(mask[t], last);
    ret[t] = keep(mask[t], last + values[t]);
    for t in (0..n - 1).rev() {
        let delta = token_reward(t) + gamma * values[t + 1] - values[t];
        last = delta + w * last;
        adv[t] = keep(mask[t], last);
        ret[t] = keep(mask[t], last + values[t]);
    }
}

/// The `chunk × chunk` upper-triangular matrix `T[i][j] = (γλ)^(j-i)` for
/// `j ≥ i` and the powers `(γλ)^(chunk-i)` that carry the next block's first
/// advantage into this block: the form of slime's chunked GAE, where each block
/// is a matrix-vector product instead of a serial scan.
pub struct ChunkedGae {
    chunk: usize,
    tri: Vec<f32>,
    /// `pow[k] = w^k` for k in 0..=chunk.
    pow: Vec<f32>,
}

impl ChunkedGae {
    pub fn new(gamma: f32, lambda: f32, chunk: usize) -> ChunkedGae {
        let chunk = chunk.max(1);
        let w = (gamma as f64) * (lambda as f64);
        let pow: Vec<f32> = (0..=chunk).map(|k| w.powi(k as i32) as f32).collect();
        let mut tri = vec![0.0f32; chunk * chunk];
        for i in 0..chunk {
            for j in i..chunk {
                tri[i * chunk + j] = pow[j - i];
            }
        }
        ChunkedGae { chunk, tri, pow }
    }

    /// Same contract as [`gae`]: `adv` receives the advantages.
    pub fn run(&self, rewards: &[f32], values: &[f32], gamma: f32, adv: &mut [f32]) {
        let n = rewards.len();
        if n == 0 {
            return;
        }
        let mut delta = vec![0.0f32; n];
        for t in 0..n - 1 {
            delta[t] = rewards[t] + gamma * values[t + 1] - values[t];
        }
        delta[n - 1] = rewards[n - 1] - values[n - 1];
        let c = self.chunk;
        let mut carry = 0.0f32; // A at the first token of the following block
        let mut end = n;
        while end > 0 {
            let start = end.saturating_sub(c);
            let len = end - start;
            let d = &delta[start..end];
            for i in 0..len {
                let row = &self.tri[i * c + i..i * c + len];
                let s: f32 = row.iter().zip(&d[i..]).map(|(a, b)| a * b).sum();
                adv[start + i] = s + self.pow[len - i] * carry;
            }
            carry = adv[start];
            end = start;
        }
    }
}

/// Masked mean and unbiased variance over many sequences (verl `masked_mean`,
/// `masked_var(unbiased=True)`), accumulated in f64.
#[derive(Debug, Default, Clone, Copy)]
pub struct MaskedMoments {
    pub count: f64,
    pub sum: f64,
    pub sum_sq: f64,
}

impl MaskedMoments {
    pub fn add(&mut self, x: &[f32], mask: &[u8]) {
        let (mut s, mut q, mut c) = (0.0f64, 0.0f64, 0.0f64);
        for (v, m) in x.iter().zip(mask) {
            if *m != 0 {
                let v = *v as f64;
                s += v;
                q += v * v;
                c += 1.0;
            }
        }
        self.sum += s;
        self.sum_sq += q;
        self.count += c;
    }

    pub fn merge(mut self, o: MaskedMoments) -> MaskedMoments {
        self.count += o.count;
        self.sum += o.sum;
        self.sum_sq += o.sum_sq;
        self
    }

    pub fn mean(&self) -> f64 {
        if self.count > 0.0 {
            self.sum / self.count
        } else {
            0.0
        }
    }

    /// Unbiased variance; 0 with fewer than two masked tokens.
    pub fn var(&self) -> f64 {
        if self.count < 2.0 {
            return 0.0;
        }
        let mean = self.mean();
        let biased = (self.sum_sq / self.count - mean * mean).max(0.0);
        biased * self.count / (self.count - 1.0)
    }

    /// The whitening `(x - mean) * rsqrt(var + 1e-8)` as (shift, scale).
    pub fn whitener(&self) -> (f32, f32) {
        (self.mean() as f32, (1.0 / (self.var() + WHITEN_EPS).sqrt()) as f32)
    }
}

/// Applies a whitener to the trained tokens and writes 0 on the others.
pub fn whiten_masked(x: &mut [f32], mask: &[u8], (mean, scale): (f32, f32)) {
    for (v, m) in x.iter_mut().zip(mask) {
        *v = if *m != 0 { (*v - mean) * scale } else { 0.0 };
    }
}

/// Writes 0 wherever the mask is 0.
pub fn apply_mask(x: &mut [f32], mask: &[u8]) {
    for (v, m) in x.iter_mut().zip(mask) {
        if *m == 0 {
            *v = 0.0;
        }
    }
}

/// `scalar` on every trained token, 0 elsewhere.
pub fn broadcast(scalar: f32, mask: &[u8]) -> Vec<f32> {
    mask.iter().map(|&m| if m != 0 { scalar } else { 0.0 }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arl_core::rng::Rng;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * (1.0 + b.abs())
    }

    #[track_caller]
    fn assert_vec(got: &[f32], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(close(*g as f64, *w, tol), "entry {i}: got {g}, want {w} ({got:?})");
        }
    }

    #[test]
    fn grpo_by_hand() {
        // rewards 1,0,0,1: mean 0.5, Bessel std sqrt(1/3)=0.57735
        let a = grpo(&[1.0, 0.0, 0.0, 1.0], false);
        let s = (1.0f64 / 3.0).sqrt() + 1e-6;
        assert!(close(a[0], 0.5 / s, 1e-12) && close(a[1], -0.5 / s, 1e-12));
        // uneven group of 3: rewards 2,0,1: mean 1, std 1
        let a = grpo(&[2.0, 0.0, 1.0], false);
        assert!(close(a[0], 1.0 / (1.0 + 1e-6), 1e-12) && a[2] == 0.0);
        // Dr.GRPO: no division
        assert_eq!(grpo(&[2.0, 0.0, 1.0], true), vec![1.0, -1.0, 0.0]);
        // all equal → 0, singleton → 0
        assert_eq!(grpo(&[0.7, 0.7, 0.7], false), vec![0.0; 3]);
        assert_eq!(grpo(&[5.0], false), vec![0.0]);
    }

    #[test]
    fn rloo_by_hand() {
        // 1 - (0+0+1)/3 = 2/3 ; 0 - 2/3 = -2/3
        let a = rloo(&[1.0, 0.0, 0.0, 1.0]);
        assert!(close(a[0], 2.0 / 3.0, 1e-12) && close(a[1], -2.0 / 3.0, 1e-12));
        assert_eq!(rloo(&[3.0, 1.0]), vec![2.0, -2.0]);
        assert_eq!(rloo(&[4.0]), vec![0.0]);
        assert_eq!(rloo(&[1.0, 1.0, 1.0]), vec![0.0; 3]);
    }

    #[test]
    fn kl_estimators_by_hand() {
        // lp = -1, ref = -2: log_ratio = 1
        assert_eq!(kl_token(KlEstimator::K1, -1.0, -2.0), 1.0);
        assert_eq!(kl_token(KlEstimator::K2, -1.0, -2.0), 0.5);
        // k3: r = -1: e^-1 - 1 + 1 = 0.367879
        assert!(close(kl_token(KlEstimator::K3, -1.0, -2.0) as f64, (-1f64).exp(), 1e-6));
        // lp = -20, ref = 0: r = 20, k3 = e^20 - 21 (huge), low_var_kl clamps to 10
        assert!(kl_token(KlEstimator::K3, -20.0, 0.0) > 1e8);
        assert_eq!(kl_token(KlEstimator::LowVarKl, -20.0, 0.0), 10.0);
        assert_eq!(kl_token(KlEstimator::LowVarKl, -1.0, -2.0), kl_token(KlEstimator::K3, -1.0, -2.0));
        // masked tokens get no penalty
        let mut out = Vec::new();
        kl_penalty(KlEstimator::K1, 0.1, Some(&[-1.0, -1.0, -3.0]), Some(&[-2.0, -5.0, -1.0]), &[1, 0, 1], &mut out);
        assert_vec(&out, &[-0.1, 0.0, 0.2], 1e-6);
    }

    #[test]
    fn reinforce_pp_by_hand() {
        // mask 1 1 0 1 0: reward on index 3 (last trained), γ = 0.5, token rewards -0.1 on index 0
        let mut r = vec![-0.1, 0.0, 0.0, 0.0, 0.0];
        reinforce_pp_returns(&mut r, &[1, 1, 0, 1, 0], 1.0, 0.5);
        // G4 = 0; G3 = 1; G2 = 0.5; G1 = 0.25; G0 = -0.1 + 0.125
        assert_vec(&r, &[0.025, 0.25, 0.5, 1.0, 0.0], 1e-6);
        // no trained token: reward on the last token
        let mut r = vec![0.0, 0.0];
        reinforce_pp_returns(&mut r, &[0, 0], 2.0, 1.0);
        assert_vec(&r, &[2.0, 2.0], 0.0);
    }

    #[test]
    fn gae_by_hand() {
        // r = [0, 0, 1], V = [0.5, 0.2, 0.4], γ = 0.9, λ = 0.8
        // δ2 = 1 - 0.4 = 0.6; δ1 = 0 + 0.9*0.4 - 0.2 = 0.16; δ0 = 0.9*0.2 - 0.5 = -0.32
        // A2 = 0.6; A1 = 0.16 + 0.72*0.6 = 0.592; A0 = -0.32 + 0.72*0.592 = 0.10624
        let mut a = vec![0.0; 3];
        gae(&[0.0, 0.0, 1.0], &[0.5, 0.2, 0.4], 0.9, 0.8, &mut a);
        assert_vec(&a, &[0.10624, 0.592, 0.6], 1e-6);
        let ch = ChunkedGae::new(0.9, 0.8, 2);
        let mut b = vec![0.0; 3];
        ch.run(&[0.0, 0.0, 1.0], &[0.5, 0.2, 0.4], 0.9, &mut b);
        assert_vec(&b, &[0.10624, 0.592, 0.6], 1e-6);
        // γ = λ = 1 with V = 0: A_t = sum of future rewards
        let mut a = vec![0.0; 3];
        gae(&[1.0, 2.0, 3.0], &[0.0; 3], 1.0, 1.0, &mut a);
        assert_vec(&a, &[6.0, 5.0, 3.0], 0.0);
    }

    #[test]
    fn whitening_by_hand() {
        // trained values 1, 3 (the 100 is masked): mean 2, unbiased var 2
        let mut m = MaskedMoments::default();
        m.add(&[1.0, 100.0, 3.0], &[1, 0, 1]);
        assert_eq!(m.mean(), 2.0);
        assert!(close(m.var(), 2.0, 1e-12));
        let mut x = vec![1.0, 100.0, 3.0];
        whiten_masked(&mut x, &[1, 0, 1], m.whitener());
        let s = 1.0 / (2.0f64 + 1e-8).sqrt();
        assert_vec(&x, &[-s, 0.0, s], 1e-6);
    }

    #[test]
    fn property_group_advantages_sum_to_zero() {
        let mut rng = Rng::new(7);
        for _ in 0..2000 {
            let n = 1 + rng.below(16) as usize;
            let binary = rng.bool(0.5);
            let r: Vec<f64> =
                (0..n).map(|_| if binary { rng.below(2) as f64 } else { rng.f64() * 10.0 - 5.0 }).collect();
            for (name, a) in [
                ("grpo", grpo(&r, false)),
                ("drgrpo", grpo(&r, true)),
                ("rloo", rloo(&r)),
                ("rpp-b", group_mean_baseline(&r)),
            ] {
                let s: f64 = a.iter().sum();
                let scale = a.iter().map(|x| x.abs()).fold(1.0, f64::max);
                assert!(s.abs() <= 1e-9 * scale * n as f64, "{name} {r:?} → {a:?} sums to {s}");
            }
        }
    }

    #[test]
    fn property_fused_gae_equals_vanilla_then_mask() {
        let mut rng = Rng::new(11);
        for _ in 0..200 {
            let n = rng.below(300) as usize;
            let v: Vec<f32> = (0..n).map(|_| rng.f64() as f32 * 2.0 - 1.0).collect();
            let k: Vec<f32> = (0..n).map(|_| rng.f64() as f32 * 0.1).collect();
            let mask: Vec<u8> = (0..n).map(|_| rng.bool(0.7) as u8).collect();
            let (gamma, lambda, reward) = (0.9 + rng.f64() as f32 * 0.1, rng.f64() as f32, rng.f64() as f32);
            for kr in [None, Some(&k[..])] {
                let mut r: Vec<f32> = kr.map_or(vec![0.0; n], |k| k.to_vec());
                if let Some(l) = r.last_mut() {
                    *l += reward;
                }
                let mut want = vec![0.0; n];
                gae(&r, &v, gamma, lambda, &mut want);
                let mut want_ret: Vec<f32> = want.iter().zip(&v).map(|(a, v)| a + v).collect();
                apply_mask(&mut want, &mask);
                apply_mask(&mut want_ret, &mask);
                let (mut a, mut ret) = (vec![9.0; n], vec![9.0; n]);
                gae_masked(kr, reward, &v, &mask, gamma, lambda, &mut a, &mut ret);
                assert_eq!(a, want);
                assert_eq!(ret, want_ret);
            }
        }
    }

    #[test]
    fn property_chunked_gae_equals_vanilla() {
        let mut rng = Rng::new(11);
        for _ in 0..300 {
            let n = rng.below(700) as usize;
            let gamma = [1.0, 0.99, 0.9][rng.below(3) as usize];
            let lambda = [1.0, 0.95, 0.5][rng.below(3) as usize];
            let chunk = [1, 3, 64, 128, 1000][rng.below(5) as usize];
            let r: Vec<f32> = (0..n).map(|_| if rng.bool(0.1) { rng.f64() as f32 - 0.5 } else { 0.0 }).collect();
            let v: Vec<f32> = (0..n).map(|_| rng.f64() as f32).collect();
            let mut a = vec![0.0; n];
            let mut b = vec![0.0; n];
            gae(&r, &v, gamma, lambda, &mut a);
            ChunkedGae::new(gamma, lambda, chunk).run(&r, &v, gamma, &mut b);
            for i in 0..n {
                assert!(
                    (a[i] - b[i]).abs() <= 1e-5 * (1.0 + a[i].abs()),
                    "n {n} chunk {chunk} i {i}: {} vs {}",
                    a[i],
                    b[i]
                );
            }
        }
    }

    #[test]
    fn property_masked_tokens_zero() {
        let mut rng = Rng::new(3);
        for _ in 0..500 {
            let n = 1 + rng.below(50) as usize;
            let mask: Vec<u8> = (0..n).map(|_| rng.bool(0.7) as u8).collect();
            let mut x: Vec<f32> = (0..n).map(|_| rng.f64() as f32).collect();
            let mut m = MaskedMoments::default();
            m.add(&x, &mask);
            whiten_masked(&mut x, &mask, m.whitener());
            let b = broadcast(rng.f64() as f32, &mask);
            for i in 0..n {
                if mask[i] == 0 {
                    assert_eq!(x[i], 0.0);
                    assert_eq!(b[i], 0.0);
                }
            }
        }
    }
}
