//! The trainer behind `arl-train`, a library over validated configurations
//! (`config`): records → samples and micro-batch packing (here), padded
//! batches and scoring (`batch`), losses (`loss`, `value_loss`), one
//! optimizer step (`step`), micro-batches and their layout (`micro`), AdamW and schedules (`optim`), atomic
//! checkpoints and the resume state (`checkpoint`), the training run, `init`
//! (`run`), scoring records for `logprobs` and `values` (`score`), PPO's
//! critic (`critic`), and SFT's tokenisation
//! of `messages` through the one chat renderer (`chat_render`).
mod batch;
pub mod chat_render;
pub mod checkpoint;
pub mod config;
pub mod critic;
pub mod loss;
pub mod micro;
pub mod optim;
pub mod run;
pub mod score;
mod step;
pub mod value_loss;

use arl_core::record::Record;

/// libtorch's intra-op threads: `n`, or every core when 0.
/// [`arl_model::Model::load`], with what is wrong with a LoRA adapter
/// directory (shapes of another base, a config arl cannot apply) as bad
/// input (exit 65).
pub fn load_model(dir: &std::path::Path, device: tch::Device, kind: tch::Kind) -> anyhow::Result<arl_model::Model> {
    let adapter = arl_model::lora::is_adapter(dir);
    arl_model::Model::load(dir, device, kind)
        .map_err(|e| if adapter { arl_core::cli::data(format!("{e:#}")) } else { e })
}

pub fn set_threads(n: usize) {
    let n = if n == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { n };
    tch::set_num_threads(n as i32);
}

/// One training sequence, response-aligned lists one entry per response token.
#[derive(Debug, Clone)]
pub struct Sample {
    pub tokens: Vec<i64>,
    pub prompt_len: usize,
    pub loss_mask: Vec<f32>,
    pub advantages: Vec<f32>,
    pub rollout_log_probs: Option<Vec<f32>>,
    pub ref_log_probs: Option<Vec<f32>>,
    /// Old-policy log-probs when recomputed by the trainer.
    pub old_log_probs: Option<Vec<f32>>,
    /// The critic's values at rollout time and the GAE returns (`--train-critic`).
    pub values: Option<Vec<f32>>,
    pub returns: Option<Vec<f32>>,
}

impl Sample {
    pub fn response_len(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }
}

/// What a sample needs from its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// `advantages` required.
    Rl,
    /// Cross-entropy: no advantages.
    Sft,
    /// Scoring only (`arl-train logprobs`).
    Score,
}

/// The sample of a token record; `Err` names the field that is wrong.
pub fn sample_of(r: &Record, need: Need) -> Result<Sample, String> {
    let tokens = r.tokens.as_ref().ok_or("field `tokens`: missing")?;
    let prompt_len = r.prompt_len.ok_or("field `prompt_len`: missing")? as usize;
    if prompt_len == 0 || prompt_len > tokens.len() {
        return Err(format!(
            "field `prompt_len`: {prompt_len} must be in 1..={} (the first token has no prediction)",
            tokens.len()
        ));
    }
    let n = tokens.len() - prompt_len;
    let list = |name: &str, v: &Option<Vec<f32>>| -> Result<Option<Vec<f32>>, String> {
        match v {
            Some(x) if x.len() != n => Err(format!("field `{name}`: {} entries for {n} response tokens", x.len())),
            Some(x) => Ok(Some(x.clone())),
            None => Ok(None),
        }
    };
    let loss_mask = match &r.loss_mask {
        Some(m) if m.len() != n => {
            return Err(format!("field `loss_mask`: {} entries for {n} response tokens", m.len()))
        }
        Some(m) => m.iter().map(|&x| f32::from(x)).collect(),
        None => vec![1.0; n],
    };
    let advantages = match (need, list("advantages", &r.advantages)?) {
        (_, Some(a)) => a,
        (Need::Rl, None) => {
            return Err("field `advantages`: missing (run `arl-advantage` first, or use `--loss sft`)".into())
        }
        (_, None) => vec![0.0; n],
    };
    Ok(Sample {
        tokens: tokens.iter().map(|&t| i64::from(t)).collect(),
        prompt_len,
        loss_mask,
        advantages,
        rollout_log_probs: list("rollout_log_probs", &r.rollout_log_probs)?,
        ref_log_probs: list("ref_log_probs", &r.ref_log_probs)?,
        old_log_probs: None,
        values: list("values", &r.values)?,
        returns: list("returns", &r.returns)?,
    })
}

/// Groups sample indices (in the given order) into micro-batches whose padded
/// size (count × longest) stays within `budget` tokens; a sequence longer
/// than the budget goes alone.
pub fn pack(order: &[usize], lens: &[usize], budget: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![];
    let mut cur: Vec<usize> = vec![];
    let mut longest = 0;
    for &i in order {
        let l = lens[i];
        let new_longest = longest.max(l);
        if !cur.is_empty() && (cur.len() + 1) * new_longest > budget {
            out.push(std::mem::take(&mut cur));
            longest = 0;
        }
        longest = longest.max(l);
        cur.push(i);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Micro-batches of samples concatenated without padding
/// ([`arl_model::Layout::Packed`]): longest first, each into the first
/// micro-batch whose total stays within `budget` tokens (first-fit
/// decreasing); a sample longer than the budget goes alone. Within a
/// micro-batch the samples keep their order in `order`.
pub fn pack_tokens(order: &[usize], lens: &[usize], budget: usize) -> Vec<Vec<usize>> {
    let mut by_len: Vec<usize> = order.to_vec();
    by_len.sort_by_key(|&i| std::cmp::Reverse(lens[i]));
    let mut bins: Vec<(usize, Vec<usize>)> = vec![];
    for i in by_len {
        match bins.iter_mut().find(|(used, _)| used + lens[i] <= budget) {
            Some((used, items)) => {
                *used += lens[i];
                items.push(i);
            }
            None => bins.push((lens[i], vec![i])),
        }
    }
    let rank: std::collections::HashMap<usize, usize> = order.iter().enumerate().map(|(r, &i)| (i, r)).collect();
    bins.into_iter()
        .map(|(_, mut items)| {
            items.sort_by_key(|i| rank[i]);
            items
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_packing_fills_the_budget_longest_first() {
        let mut rng = arl_core::rng::Rng::new(5);
        for _ in 0..200 {
            let n = rng.range(1, 40) as usize;
            let lens: Vec<usize> = (0..n).map(|_| rng.range(1, 80) as usize).collect();
            let budget = rng.range(20, 200) as usize;
            let order: Vec<usize> = (0..n).collect();
            let bins = pack_tokens(&order, &lens, budget);
            let mut seen: Vec<usize> = bins.iter().flatten().copied().collect();
            seen.sort();
            assert_eq!(seen, order, "every sample exactly once");
            for b in &bins {
                let total: usize = b.iter().map(|&i| lens[i]).sum();
                assert!(total <= budget || b.len() == 1, "over budget: {total} > {budget}");
                assert!(b.windows(2).all(|w| w[0] < w[1]), "input order kept");
            }
            // First-fit decreasing never needs more than 11/9 OPT + 1 bins; the
            // lower bound on OPT is the total over the budget.
            let total: usize = lens.iter().map(|&l| l.min(budget)).sum();
            let alone = lens.iter().filter(|&&l| l > budget).count();
            assert!(bins.len() <= alone + (11 * total.div_ceil(budget)).div_ceil(9) + 1);
        }
    }

    #[test]
    fn packing_respects_the_budget() {
        let mut rng = arl_core::rng::Rng::new(3);
        for _ in 0..200 {
            let n = rng.range(1, 30) as usize;
            let lens: Vec<usize> = (0..n).map(|_| rng.range(1, 50) as usize).collect();
            let budget = rng.range(1, 200) as usize;
            let order: Vec<usize> = (0..n).collect();
            let mbs = pack(&order, &lens, budget);
            let flat: Vec<usize> = mbs.iter().flatten().copied().collect();
            assert_eq!(flat, order, "every sample once, in order");
            for mb in &mbs {
                let longest = mb.iter().map(|&i| lens[i]).max().unwrap();
                assert!(mb.len() == 1 || mb.len() * longest <= budget, "{mb:?} {lens:?} {budget}");
            }
        }
    }

    #[test]
    fn sample_checks_lengths() {
        let mut r = Record { tokens: Some(vec![1, 2, 3, 4]), prompt_len: Some(2), ..Default::default() };
        assert!(sample_of(&r, Need::Rl).unwrap_err().contains("advantages"));
        r.advantages = Some(vec![1.0, 1.0]);
        r.loss_mask = Some(vec![1, 0, 1]);
        assert!(sample_of(&r, Need::Rl).unwrap_err().contains("loss_mask"));
        r.loss_mask = Some(vec![1, 0]);
        let s = sample_of(&r, Need::Rl).unwrap();
        assert_eq!((s.response_len(), s.loss_mask.clone()), (2, vec![1.0, 0.0]));
        r.prompt_len = Some(0);
        assert!(sample_of(&r, Need::Sft).unwrap_err().contains("prompt_len"));
    }
}
