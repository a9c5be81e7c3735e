//! Token selection from one row of log-probabilities.
//!
//! The row the engine hands over is already `log_softmax(logits / T)` (T = 1
//! for greedy), so the log-prob reported for the chosen token is that of the
//! temperature-scaled distribution *before* top-k/top-p truncation — what a
//! trainer recomputes from the same weights (SGLang reports the same quantity).
//! Truncation only changes which token is drawn.
use arl_core::rng::Rng;

/// The sampling knobs that decide the next token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knobs {
    /// 0 = greedy.
    pub temperature: f32,
    /// In (0, 1].
    pub top_p: f32,
    /// -1 (or 0) = whole vocabulary.
    pub top_k: i64,
    /// In [0, 1]: drop tokens whose probability is below `min_p × p_max`.
    pub min_p: f32,
}

impl Knobs {
    pub fn greedy(&self) -> bool {
        self.temperature <= 0.0 || self.top_k == 1
    }
}

/// Index of the largest entry (the lowest index among ties, like `torch.argmax` on CPU).
pub fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    let mut bv = f32::NEG_INFINITY;
    for (i, &v) in row.iter().enumerate() {
        if v > bv {
            bv = v;
            best = i;
        }
    }
    best
}

/// The `k` largest entries as `(index, value)`, largest first (ties: lower index first).
pub fn top_k(row: &[f32], k: usize) -> Vec<(usize, f32)> {
    let k = k.min(row.len());
    if k == 0 {
        return Vec::new();
    }
    let cmp = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let mut idx: Vec<(usize, f32)> = row.iter().copied().enumerate().collect();
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, cmp);
        idx.truncate(k);
    }
    idx.sort_unstable_by(cmp);
    idx
}

/// Draws a token from `row` (log-probs). `banned` tokens (e.g. EOS before
/// `min_new_tokens`) are never chosen unless nothing else is left.
pub fn sample(row: &[f32], knobs: &Knobs, banned: &[u32], rng: &mut Rng) -> usize {
    let allowed = |i: usize| !banned.contains(&(i as u32));
    if knobs.greedy() {
        if banned.is_empty() {
            return argmax(row);
        }
        let mut best = None;
        for (i, &v) in row.iter().enumerate() {
            if allowed(i) && best.is_none_or(|(_, bv)| v > bv) {
                best = Some((i, v));
            }
        }
        return best.map_or_else(|| argmax(row), |(i, _)| i);
    }
    let v = row.len();
    let k_limit = if knobs.top_k > 0 { (knobs.top_k as usize).min(v) } else { v };
    let need_truncation = k_limit < v || knobs.top_p < 1.0 || knobs.min_p > 0.0;
    if !need_truncation {
        // Inverse CDF over the whole row: O(V), no sort.
        let total: f64 = row.iter().enumerate().filter(|&(i, _)| allowed(i)).map(|(_, &l)| (l as f64).exp()).sum();
        if total > 0.0 {
            let mut u = rng.f64() * total;
            let mut last = None;
            for (i, &l) in row.iter().enumerate() {
                if !allowed(i) {
                    continue;
                }
                let p = (l as f64).exp();
                if p > 0.0 {
                    last = Some(i);
                }
                if u < p {
                    return i;
                }
                u -= p;
            }
            if let Some(i) = last {
                return i;
            }
        }
        return argmax(row);
    }
    // Candidates: the top `k_limit`, found by doubling a prefix until it holds
    // `top_p` of the mass, so a top-p draw rarely sorts the whole vocabulary.
    let mut k = k_limit.min(256);
    let cands = loop {
        let c = top_k(row, k);
        let mass: f64 = c.iter().map(|&(_, l)| (l as f64).exp()).sum();
        if k >= k_limit || mass >= knobs.top_p as f64 {
            break c;
        }
        k = (k * 4).min(k_limit);
    };
    let cands: Vec<(usize, f32)> = cands.into_iter().filter(|&(i, _)| allowed(i)).collect();
    if cands.is_empty() {
        return argmax(row);
    }
    let pmax = (cands[0].1 as f64).exp();
    let mut kept = Vec::with_capacity(cands.len());
    let mut cum = 0.0;
    for &(i, l) in &cands {
        let p = (l as f64).exp();
        // Keep the smallest prefix whose mass reaches top_p (SGLang/HF top-p rule:
        // a token is dropped when the mass before it already reaches top_p).
        if !kept.is_empty() && cum >= knobs.top_p as f64 {
            break;
        }
        if knobs.min_p > 0.0 && p < knobs.min_p as f64 * pmax {
            break;
        }
        kept.push((i, p));
        cum += p;
    }
    let total: f64 = kept.iter().map(|&(_, p)| p).sum();
    let mut u = rng.f64() * total;
    for &(i, p) in &kept {
        if u < p {
            return i;
        }
        u -= p;
    }
    kept[kept.len() - 1].0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logsoftmax(x: &[f32]) -> Vec<f32> {
        let m = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let s: f32 = x.iter().map(|v| (v - m).exp()).sum();
        x.iter().map(|v| v - m - s.ln()).collect()
    }

    #[test]
    fn greedy_is_argmax_and_respects_bans() {
        let row = logsoftmax(&[0.1, 3.0, 2.0, -1.0]);
        let k = Knobs { temperature: 0.0, top_p: 1.0, top_k: -1, min_p: 0.0 };
        let mut r = Rng::new(1);
        assert_eq!(sample(&row, &k, &[], &mut r), 1);
        assert_eq!(sample(&row, &k, &[1], &mut r), 2);
    }

    #[test]
    fn top_k_and_top_p_stay_inside_their_sets() {
        let mut rng = Rng::new(9);
        for trial in 0..200u64 {
            let mut g = Rng::new(trial);
            let n = 2 + g.below(50) as usize;
            let row = logsoftmax(&(0..n).map(|_| (g.f64() * 6.0 - 3.0) as f32).collect::<Vec<_>>());
            let k = 1 + g.below(n as u64) as i64;
            let knobs = Knobs { temperature: 1.0, top_p: 1.0, top_k: k, min_p: 0.0 };
            let allowed: Vec<usize> = top_k(&row, k as usize).into_iter().map(|x| x.0).collect();
            let t = sample(&row, &knobs, &[], &mut rng);
            assert!(allowed.contains(&t), "top-k {k}: {t} not in {allowed:?}");
            let p = 0.05 + 0.9 * g.f64() as f32;
            let knobs = Knobs { temperature: 1.0, top_p: p, top_k: -1, min_p: 0.0 };
            let sorted = top_k(&row, n);
            let mut cum = 0.0f64;
            let mut nucleus = Vec::new();
            for (i, l) in sorted {
                if !nucleus.is_empty() && cum >= p as f64 {
                    break;
                }
                nucleus.push(i);
                cum += (l as f64).exp();
            }
            let t = sample(&row, &knobs, &[], &mut rng);
            assert!(nucleus.contains(&t), "top-p {p}: {t} not in {nucleus:?}");
        }
    }

    #[test]
    fn full_distribution_frequencies_match() {
        let row = logsoftmax(&[0.0, 1.0, 2.0]);
        let knobs = Knobs { temperature: 1.0, top_p: 1.0, top_k: -1, min_p: 0.0 };
        let mut rng = Rng::new(3);
        let mut counts = [0u32; 3];
        let n = 30_000;
        for _ in 0..n {
            counts[sample(&row, &knobs, &[], &mut rng)] += 1;
        }
        for i in 0..3 {
            let want = (row[i] as f64).exp();
            let got = counts[i] as f64 / n as f64;
            assert!((want - got).abs() < 0.015, "token {i}: {got} vs {want}");
        }
    }
}
