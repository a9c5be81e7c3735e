//! Micro-batches on the device, shared by the policy trainer and the critic:
//! right-padded ids and attention masks, per-response-token lists aligned to
//! next-token positions, and scoring samples under a model (old-policy and
//! reference log-probs, `arl-train logprobs`) through the chunked LM head.
use super::micro::{micro_batches, shard_groups, Batching};
use super::Sample;
use arl_dist::Collective;
use arl_model::{EntropyMode, HeadOptions, Model};
use tch::{Device, Tensor};

/// ids and attention mask [B, T] of right-padded samples, and T (at least 2).
pub(crate) fn padded(samples: &[&Sample], device: Device) -> (Tensor, Tensor, usize) {
    let t = samples.iter().map(|s| s.tokens.len()).max().unwrap_or(1).max(2);
    let b = samples.len();
    let mut ids = vec![0i64; b * t];
    let mut attn = vec![0i64; b * t];
    for (i, s) in samples.iter().enumerate() {
        ids[i * t..i * t + s.tokens.len()].copy_from_slice(&s.tokens);
        attn[i * t..i * t + s.tokens.len()].iter_mut().for_each(|x| *x = 1);
    }
    let shape = [b as i64, t as i64];
    (Tensor::from_slice(&ids).view(shape).to_device(device), Tensor::from_slice(&attn).view(shape).to_device(device), t)
}

/// A per-response-token list of every sample as a response-aligned [B, T−1]
/// tensor (position p predicts token p+1; 0 at prompt and padding
/// positions), or `None` when a sample has no such list.
pub(crate) fn aligned(
    samples: &[&Sample],
    t: usize,
    device: Device,
    get: impl Fn(&Sample) -> Option<&[f32]>,
) -> Option<Tensor> {
    let mut out = vec![0f32; samples.len() * (t - 1)];
    for (b, s) in samples.iter().enumerate() {
        let v = get(s)?;
        let base = b * (t - 1) + s.prompt_len - 1;
        out[base..base + v.len()].copy_from_slice(v);
    }
    Some(Tensor::from_slice(&out).view([samples.len() as i64, t as i64 - 1]).to_device(device))
}

/// 1 at each sample's response positions of a response-aligned [B, T−1]
/// layout (position p predicts token p+1), 0 elsewhere.
pub(crate) fn response_positions(samples: &[&Sample], t: usize, device: Device) -> Tensor {
    let mut out = vec![0f32; samples.len() * (t - 1)];
    for (b, s) in samples.iter().enumerate() {
        let base = b * (t - 1) + s.prompt_len - 1;
        out[base..base + s.response_len()].fill(1.0);
    }
    Tensor::from_slice(&out).view([samples.len() as i64, t as i64 - 1]).to_device(device)
}

/// A padded micro-batch of the policy trainer on the device; response-aligned
/// tensors are [B, T−1].
pub(crate) struct Batch {
    pub ids: Tensor,
    pub mask: Tensor,
    pub adv: Tensor,
    /// The old policy's log-probs: recomputed, else the rollout's.
    pub old: Option<Tensor>,
    pub rollout: Option<Tensor>,
    pub reference: Option<Tensor>,
    /// Non-pad tokens, for tokens/s.
    pub tokens: usize,
    /// Each sample's length (for the packed layouts).
    pub lens: Vec<usize>,
}

impl Batch {
    pub(crate) fn new(samples: &[&Sample], device: Device) -> Batch {
        let (ids, _, t) = padded(samples, device);
        let list = |get: fn(&Sample) -> Option<&[f32]>| aligned(samples, t, device, get);
        Batch {
            ids,
            mask: list(|s| Some(&s.loss_mask)).expect("always present"),
            adv: list(|s| Some(&s.advantages)).expect("always present"),
            old: list(|s| s.old_log_probs.as_deref().or(s.rollout_log_probs.as_deref())),
            rollout: list(|s| s.rollout_log_probs.as_deref()),
            reference: list(|s| s.ref_log_probs.as_deref()),
            tokens: samples.iter().map(|s| s.tokens.len()).sum(),
            lens: samples.iter().map(|s| s.tokens.len()).collect(),
        }
    }
}

/// How [`score`] runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScoreOptions {
    pub temperature: f64,
    /// Positions through the LM head at a time (0: automatic).
    pub chunk_tokens: usize,
    /// How the micro-batches run (and what `budget` counts).
    pub batching: Batching,
}

/// Response-token log-probs of every sample under `model` (no gradient),
/// the LM head in chunks over the response positions only.
pub(crate) fn score(model: &Model, samples: &[&Sample], budget: usize, o: &ScoreOptions) -> Vec<Vec<f32>> {
    let order: Vec<usize> = (0..samples.len()).collect();
    let mut out = vec![vec![]; samples.len()];
    let head = HeadOptions { temperature: o.temperature, chunk_tokens: o.chunk_tokens, entropy: EntropyMode::Off };
    for mb in micro_batches(o.batching, &order, |i| samples[i], budget) {
        let group: Vec<&Sample> = mb.items.iter().map(|&i| samples[i]).collect();
        let (ids, _, t) = padded(&group, model.device());
        let needed = response_positions(&group, t, model.device());
        let glens: Vec<usize> = group.iter().map(|s| s.tokens.len()).collect();
        let lp =
            model.token_scores(&ids, Some(&needed), mb.layout(o.batching, &glens), &head).logp.to_device(Device::Cpu);
        for (b, &i) in mb.items.iter().enumerate() {
            let s = samples[i];
            let row = lp.get(b as i64).narrow(0, s.prompt_len as i64 - 1, s.response_len() as i64);
            out[i] = Vec::<f32>::try_from(&row).unwrap_or_default();
        }
    }
    out
}

/// [`score`] with the samples split among the ranks of `comm`; every rank
/// gets every sample's log-probs (each rank fills its own, zeros elsewhere,
/// then one all-reduce sums them: exact).
pub(crate) fn score_shared(
    model: &Model,
    samples: &[&Sample],
    budget: usize,
    o: &ScoreOptions,
    comm: &dyn Collective,
) -> Vec<Vec<f32>> {
    if comm.size() == 1 {
        return score(model, samples, budget, o);
    }
    let lens: Vec<usize> = samples.iter().map(|s| s.tokens.len()).collect();
    let all: Vec<usize> = (0..samples.len()).collect();
    let mine = match o.batching {
        Batching::SharedPrefix => shard_groups(&all, |i| samples[i], comm.size()),
        _ => arl_dist::shard(&all, &lens, comm.size()),
    }
    .swap_remove(comm.rank());
    let group: Vec<&Sample> = mine.iter().map(|&i| samples[i]).collect();
    let lps = score(model, &group, budget, o);
    let mut offsets = Vec::with_capacity(samples.len() + 1);
    offsets.push(0);
    for s in samples {
        offsets.push(offsets.last().unwrap() + s.response_len());
    }
    let mut flat = vec![0f32; *offsets.last().unwrap()];
    for (&i, lp) in mine.iter().zip(lps) {
        flat[offsets[i]..offsets[i] + lp.len()].copy_from_slice(&lp);
    }
    comm.all_reduce_sum_f32(&mut flat, "all-reduce of the scored log-probs");
    (0..samples.len()).map(|i| flat[offsets[i]..offsets[i + 1]].to_vec()).collect()
}
