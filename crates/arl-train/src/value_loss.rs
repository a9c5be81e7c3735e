//! The critic's loss and its diagnostics: PPO's clipped value loss and the
//! explained variance of the returns. The scalar forms (no libtorch) are the
//! definitions the tensor form is tested against.
//!
//! Value loss (PPO, Schulman et al. 2017; the form of verl's
//! `compute_value_loss` and OpenRLHF's `ValueLoss`):
//! `½ · max((V − R)², (clip(V, V_old − ε, V_old + ε) − R)²)` per token, where
//! V is the critic's value now, V_old its value when the rollout was scored
//! (the records' `values`) and R the return (`returns`). Without ε it is
//! `½ (V − R)²`. A token counts as clipped when the clipped term is the larger.

/// The value loss of one token and whether its clipped term was taken.
pub fn token_value_loss(v: f64, v_old: f64, ret: f64, clip: Option<f64>) -> (f64, bool) {
    let plain = (v - ret).powi(2);
    match clip {
        None => (0.5 * plain, false),
        Some(eps) => {
            let vc = v.clamp(v_old - eps, v_old + eps);
            let clipped = (vc - ret).powi(2);
            (0.5 * plain.max(clipped), clipped > plain)
        }
    }
}

/// Explained variance `1 − Var(R − V) / Var(R)` over the tokens whose mask is
/// non-zero (population variances); `None` when there are fewer than two
/// such tokens or the returns do not vary. 1 is a perfect critic, 0 one no
/// better than a constant, below 0 a worse one.
pub fn explained_variance(values: &[f32], returns: &[f32], mask: &[f32]) -> Option<f64> {
    let mut n = 0.0;
    let (mut sr, mut srr, mut sd, mut sdd) = (0.0, 0.0, 0.0, 0.0);
    for ((&v, &r), &m) in values.iter().zip(returns).zip(mask) {
        if m > 0.0 {
            let (v, r) = (f64::from(v), f64::from(r));
            n += 1.0;
            sr += r;
            srr += r * r;
            sd += r - v;
            sdd += (r - v) * (r - v);
        }
    }
    if n < 2.0 {
        return None;
    }
    let var_r = srr / n - (sr / n).powi(2);
    let var_d = sdd / n - (sd / n).powi(2);
    (var_r > 1e-12).then(|| 1.0 - var_d / var_r)
}

/// The per-token value loss and clip indicator (1.0 where the clipped term
/// was taken) of tensors of one shape; gradients flow into `values` only.
pub fn value_loss(
    values: &tch::Tensor,
    old: &tch::Tensor,
    returns: &tch::Tensor,
    clip: Option<f64>,
) -> (tch::Tensor, tch::Tensor) {
    let plain = (values - returns).square();
    match clip {
        None => {
            let zero = plain.zeros_like();
            (plain * 0.5, zero)
        }
        Some(eps) => {
            let lo = old - eps;
            let hi = old + eps;
            let vc = values.clamp_tensor(Some(&lo), Some(&hi));
            let clipped = (vc - returns).square();
            let taken = clipped.gt_tensor(&plain).to_kind(tch::Kind::Float);
            (plain.maximum(&clipped) * 0.5, taken)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_loss_by_hand() {
        // V beyond R on the far side of the band: the unclipped term is larger.
        // (1 − 0)² = 1; clip(1, 0.3, 0.7) = 0.7 → 0.49; ½ · 1 = 0.5.
        assert_eq!(token_value_loss(1.0, 0.5, 0.0, Some(0.2)), (0.5, false));
        // V moved 0.4 toward R = 2 but the band allows 0.2: clip(0.9, 0.3, 0.7) = 0.7,
        // (0.7 − 2)² = 1.69 > (0.9 − 2)² = 1.21 → ½ · 1.69, clipped.
        let (l, c) = token_value_loss(0.9, 0.5, 2.0, Some(0.2));
        assert!((l - 0.845).abs() < 1e-12 && c, "{l} {c}");
        // Inside the band the two terms are equal: not clipped.
        assert_eq!(token_value_loss(0.5, 0.5, 1.0, Some(0.2)), (0.125, false));
        // No clipping: ½ (V − R)².
        assert_eq!(token_value_loss(0.9, 0.5, 2.0, None).0, 0.5 * 1.1f64.powi(2));
    }

    #[test]
    fn explained_variance_by_hand() {
        // R = 1, 2, 3 (Var 2/3); V = 1, 2, 2 → R − V = 0, 0, 1 (Var 2/9) → 1 − 1/3.
        let ev = explained_variance(&[1.0, 2.0, 2.0], &[1.0, 2.0, 3.0], &[1.0; 3]).unwrap();
        assert!((ev - 2.0 / 3.0).abs() < 1e-9, "{ev}");
        // The masked token (V far off) does not count.
        let ev = explained_variance(&[1.0, 2.0, 2.0, 99.0], &[1.0, 2.0, 3.0, 0.0], &[1.0, 1.0, 1.0, 0.0]).unwrap();
        assert!((ev - 2.0 / 3.0).abs() < 1e-9, "{ev}");
        // A perfect critic, a constant one, and returns that do not vary.
        assert_eq!(explained_variance(&[1.0, 3.0], &[1.0, 3.0], &[1.0; 2]), Some(1.0));
        assert_eq!(explained_variance(&[5.0, 5.0], &[1.0, 3.0], &[1.0; 2]), Some(0.0));
        assert_eq!(explained_variance(&[0.0, 1.0], &[2.0, 2.0], &[1.0; 2]), None);
        assert_eq!(explained_variance(&[0.0], &[2.0], &[1.0]), None);
    }

    #[test]
    fn tensor_loss_matches_hand_values_and_gradients() {
        use tch::{Kind, Tensor};
        let v = Tensor::from_slice(&[1.0f32, 0.9, 0.5, -0.3]).set_requires_grad(true);
        let old = Tensor::from_slice(&[0.5f32, 0.5, 0.5, 0.0]);
        let ret = Tensor::from_slice(&[0.0f32, 2.0, 1.0, 1.0]);
        let (loss, clipped) = value_loss(&v, &old, &ret, Some(0.2));
        let l = Vec::<f32>::try_from(&loss).unwrap();
        // Token 4: (−0.3 − 1)² = 1.69; clip(−0.3, −0.2, 0.2) = −0.2 → 1.44; ½ · 1.69.
        let want = [0.5, 0.845, 0.125, 0.845];
        for (a, b) in l.iter().zip(want) {
            assert!((f64::from(*a) - b).abs() < 1e-6, "{l:?}");
        }
        assert_eq!(Vec::<f32>::try_from(&clipped).unwrap(), vec![0.0, 1.0, 0.0, 0.0]);
        // Gradients: V − R where the unclipped term is taken, 0 where the
        // clipped value (constant in V) is.
        loss.sum(Kind::Float).backward();
        let g = Vec::<f32>::try_from(&v.grad()).unwrap();
        let want = [1.0, 0.0, -0.5, -1.3];
        for (a, b) in g.iter().zip(want) {
            assert!((f64::from(*a) - b).abs() < 1e-6, "{g:?}");
        }
        for (i, (vv, oo, rr)) in
            [(1.0, 0.5, 0.0), (0.9, 0.5, 2.0), (0.5, 0.5, 1.0), (-0.3, 0.0, 1.0)].into_iter().enumerate()
        {
            let (s, c) = token_value_loss(vv, oo, rr, Some(0.2));
            assert!((f64::from(l[i]) - s).abs() < 1e-6 && (c == (i == 1)), "token {i}");
        }
        // Without a clip range: ½ (V − R)², nothing clipped.
        let (loss, clipped) = value_loss(&v.detach(), &old, &ret, None);
        let l = Vec::<f32>::try_from(&loss).unwrap();
        assert!((l[1] - 0.605).abs() < 1e-6 && clipped.sum(Kind::Float).double_value(&[]) == 0.0, "{l:?}");
    }
}
