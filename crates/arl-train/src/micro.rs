//! The micro-batches of a step or a scoring pass, and how each one runs
//! ([`Batching`]): padded rows, packed rows, or packed rows with each
//! group's shared prefix (a GRPO group's prompt) through the model once
//! ([`arl_model::Layout::Grouped`]).
use super::{pack, pack_tokens, Sample};
use arl_model::{Layout, PrefixRun};
use std::collections::HashMap;

/// How the samples of a micro-batch run through the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batching {
    /// Right-padded to the longest; the budget counts the padding.
    Padded,
    /// Concatenated without padding; the budget counts real tokens.
    Packed,
    /// Packed, the samples that share their prompt kept together and their
    /// common prefix run once; the budget counts the positions that run.
    SharedPrefix,
}

/// One micro-batch: sample indices and, for [`Batching::SharedPrefix`],
/// their runs (consecutive samples that share a prefix) in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicroBatch {
    pub items: Vec<usize>,
    pub runs: Vec<PrefixRun>,
}

impl MicroBatch {
    /// The model layout of this micro-batch's samples, whose lengths are
    /// `lens` (in `items`' order).
    pub fn layout<'a>(&'a self, batching: Batching, lens: &'a [usize]) -> Layout<'a> {
        match batching {
            Batching::Padded => Layout::Padded,
            Batching::Packed => Layout::Packed(lens),
            Batching::SharedPrefix => Layout::Grouped { lens, runs: &self.runs },
        }
    }

    /// Positions the model runs for it under [`Batching::SharedPrefix`].
    pub fn positions(&self, lens: &[usize]) -> usize {
        let mut at = 0;
        let mut total = 0;
        for r in &self.runs {
            total += r.prefix + lens[at..at + r.rows].iter().map(|l| l - r.prefix).sum::<usize>();
            at += r.rows;
        }
        total
    }
}

/// The micro-batches of the samples `order` (`sample(i)` gives sample i),
/// within `budget` tokens each: [`pack`] (padded; the caller orders by
/// length), [`pack_tokens`] (packed), or for [`Batching::SharedPrefix`]
/// the samples grouped by their prompt tokens, a group split where its
/// prefix plus its responses pass the budget, the parts packed first-fit
/// decreasing by the positions they run; each part's prefix is its samples'
/// longest common prefix (at most one short of the shortest), none for a
/// part of one. A sample longer than the budget goes alone.
pub fn micro_batches<'s>(
    batching: Batching,
    order: &[usize],
    sample: impl Fn(usize) -> &'s Sample,
    budget: usize,
) -> Vec<MicroBatch> {
    let lens: HashMap<usize, usize> = order.iter().map(|&i| (i, sample(i).tokens.len())).collect();
    let dense: Vec<usize> = order.iter().map(|i| lens[i]).collect();
    let positions: Vec<usize> = (0..order.len()).collect();
    let plain = |bins: Vec<Vec<usize>>| {
        bins.into_iter()
            .map(|b| {
                let items: Vec<usize> = b.iter().map(|&k| order[k]).collect();
                let runs = items.iter().map(|_| PrefixRun { rows: 1, prefix: 0 }).collect();
                MicroBatch { items, runs }
            })
            .collect()
    };
    match batching {
        Batching::Padded => return plain(pack(&positions, &dense, budget)),
        Batching::Packed => return plain(pack_tokens(&positions, &dense, budget)),
        Batching::SharedPrefix => {}
    }
    let groups = by_prompt(order, &sample);
    // Parts within the budget, each with its prefix and cost: a sample joins
    // the current part while the part's positions stay within the budget.
    let mut parts: Vec<(Vec<usize>, usize, usize)> = vec![];
    for g in groups {
        let mut cur: Vec<usize> = vec![];
        let (mut lcp, mut shortest, mut total) = (0, 0, 0);
        for i in g {
            let t = &sample(i).tokens;
            let (l, s, n) = match cur.first() {
                None => (t.len(), t.len(), t.len()),
                Some(&f) => {
                    let common = sample(f).tokens.iter().zip(t).take_while(|(a, b)| a == b).count();
                    (lcp.min(common), shortest.min(t.len()), total + t.len())
                }
            };
            let rows = cur.len() + 1;
            let prefix = if rows == 1 { 0 } else { l.min(s - 1) };
            if !cur.is_empty() && n - prefix * (rows - 1) > budget {
                parts.push(part(std::mem::take(&mut cur), &sample));
                (lcp, shortest, total) = (t.len(), t.len(), t.len());
            } else {
                (lcp, shortest, total) = (l, s, n);
            }
            cur.push(i);
        }
        if !cur.is_empty() {
            parts.push(part(cur, &sample));
        }
    }
    let costs: Vec<usize> = parts.iter().map(|p| p.2).collect();
    let part_order: Vec<usize> = (0..parts.len()).collect();
    pack_tokens(&part_order, &costs, budget)
        .into_iter()
        .map(|bin| {
            let mut mb = MicroBatch { items: vec![], runs: vec![] };
            for k in bin {
                let (items, prefix, _) = &parts[k];
                mb.runs.push(PrefixRun { rows: items.len(), prefix: *prefix });
                mb.items.extend_from_slice(items);
            }
            mb
        })
        .collect()
}

/// [`arl_dist::shard`] for [`Batching::SharedPrefix`]: the samples `chunk`
/// of a global batch split among `world` ranks by the positions they run,
/// a group kept on one rank where there are at least two groups a rank
/// (else each group split in `world` parts, so that no rank idles), longest
/// first to the least loaded rank; each rank's list keeps `chunk`'s order.
pub fn shard_groups<'s>(chunk: &[usize], sample: impl Fn(usize) -> &'s Sample, world: usize) -> Vec<Vec<usize>> {
    let world = world.max(1);
    let groups = by_prompt(chunk, &sample);
    let units: Vec<(Vec<usize>, usize, usize)> = if groups.len() >= 2 * world {
        groups.into_iter().map(|g| part(g, &sample)).collect()
    } else {
        groups
            .into_iter()
            .flat_map(|g| {
                let size = g.len().div_ceil(world);
                g.chunks(size).map(|c| c.to_vec()).collect::<Vec<_>>()
            })
            .map(|g| part(g, &sample))
            .collect()
    };
    let mut by_cost: Vec<usize> = (0..units.len()).collect();
    by_cost.sort_by(|&a, &b| units[b].2.cmp(&units[a].2).then(a.cmp(&b)));
    let mut load = vec![0usize; world];
    let mut owner: HashMap<usize, usize> = HashMap::new();
    for u in by_cost {
        let r = (0..world).min_by_key(|&r| (load[r], r)).expect("world ≥ 1");
        load[r] += units[u].2;
        owner.extend(units[u].0.iter().map(|&i| (i, r)));
    }
    let mut out = vec![vec![]; world];
    for &i in chunk {
        out[owner[&i]].push(i);
    }
    out
}

/// The samples `order` grouped by their prompt tokens, groups in order of
/// first appearance, each in `order`'s order.
fn by_prompt<'s>(order: &[usize], sample: &impl Fn(usize) -> &'s Sample) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = vec![];
    let mut index: HashMap<&[i64], usize> = HashMap::new();
    for &i in order {
        let s = sample(i);
        let g = *index.entry(&s.tokens[..s.prompt_len]).or_insert_with(|| {
            groups.push(vec![]);
            groups.len() - 1
        });
        groups[g].push(i);
    }
    groups
}

/// A part of a group: its samples, their shared prefix (the longest common
/// one, below the shortest's length; 0 for one sample) and the positions it runs.
fn part<'s>(items: Vec<usize>, sample: &impl Fn(usize) -> &'s Sample) -> (Vec<usize>, usize, usize) {
    let rows: Vec<&[i64]> = items.iter().map(|&i| sample(i).tokens.as_slice()).collect();
    let total: usize = rows.iter().map(|r| r.len()).sum();
    if rows.len() == 1 {
        return (items, 0, total);
    }
    let shortest = rows.iter().map(|r| r.len()).min().unwrap_or(1);
    let mut prefix = 0;
    while prefix + 1 < shortest && rows.iter().all(|r| r[prefix] == rows[0][prefix]) {
        prefix += 1;
    }
    let cost = total - prefix * (rows.len() - 1);
    (items, prefix, cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(tokens: Vec<i64>, prompt_len: usize) -> Sample {
        let n = tokens.len() - prompt_len;
        Sample {
            tokens,
            prompt_len,
            loss_mask: vec![1.0; n],
            advantages: vec![0.0; n],
            rollout_log_probs: None,
            ref_log_probs: None,
            old_log_probs: None,
            values: None,
            returns: None,
        }
    }

    #[test]
    fn shared_prefix_batches_keep_groups_together_within_the_budget() {
        let mut rng = arl_core::rng::Rng::new(9);
        for _ in 0..200 {
            let groups = rng.range(1, 6) as usize;
            let mut samples = vec![];
            for g in 0..groups {
                let p = rng.range(1, 30) as usize;
                let prompt: Vec<i64> = (0..p).map(|j| (g * 1000 + j) as i64).collect();
                for _ in 0..rng.range(1, 9) {
                    let r = rng.range(0, 20) as usize;
                    let mut t = prompt.clone();
                    t.extend((0..r).map(|_| rng.range(0, 3)));
                    samples.push(sample(t, p));
                }
            }
            // Shuffle so that a group's samples are not adjacent.
            let mut order: Vec<usize> = (0..samples.len()).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, rng.range(0, i as i64) as usize);
            }
            let budget = rng.range(10, 200) as usize;
            let mbs = micro_batches(Batching::SharedPrefix, &order, |i| &samples[i], budget);
            let mut seen: Vec<usize> = mbs.iter().flat_map(|m| m.items.clone()).collect();
            seen.sort();
            assert_eq!(seen, (0..samples.len()).collect::<Vec<_>>(), "every sample once");
            for mb in &mbs {
                let lens: Vec<usize> = mb.items.iter().map(|&i| samples[i].tokens.len()).collect();
                let cost = mb.positions(&lens);
                assert!(cost <= budget || mb.runs.len() == 1, "over budget: {cost} > {budget}");
                assert_eq!(mb.runs.iter().map(|r| r.rows).sum::<usize>(), mb.items.len());
                let mut at = 0;
                for r in &mb.runs {
                    let rows: Vec<&Sample> = mb.items[at..at + r.rows].iter().map(|&i| &samples[i]).collect();
                    at += r.rows;
                    assert!(rows.iter().all(|s| s.tokens.len() > r.prefix), "a prefix shorter than each row");
                    assert!(rows.iter().all(|s| s.tokens[..r.prefix] == rows[0].tokens[..r.prefix]));
                    if r.rows > 1 {
                        assert!(r.prefix >= rows[0].prompt_len.min(lens_min(&rows) - 1), "the whole prompt shared");
                    }
                }
            }
        }
    }

    fn lens_min(rows: &[&Sample]) -> usize {
        rows.iter().map(|s| s.tokens.len()).min().unwrap()
    }

    #[test]
    fn group_shards_cover_the_batch_and_keep_groups_whole_when_there_are_enough() {
        let samples: Vec<Sample> = (0..24)
            .map(|k| {
                let mut t: Vec<i64> = (0..10).map(|j| (k / 4) * 100 + j).collect();
                t.extend((0..(k % 4 + 1)).map(|j| j + 7));
                sample(t, 10)
            })
            .collect();
        let chunk: Vec<usize> = (0..24).rev().collect();
        for world in [1, 2, 3, 4, 8] {
            let shards = shard_groups(&chunk, |i| &samples[i], world);
            assert_eq!(shards.len(), world);
            let mut all: Vec<usize> = shards.concat();
            all.sort();
            assert_eq!(all, (0..24).collect::<Vec<_>>());
            assert!(shards.iter().all(|s| !s.is_empty()), "world {world}: a rank idles");
            for s in &shards {
                assert!(s.windows(2).all(|w| w[0] > w[1]), "the chunk's order");
                if world <= 3 {
                    for &i in s {
                        assert!(s.iter().filter(|&&j| j / 4 == i / 4).count() == 4, "group of {i} split");
                    }
                }
            }
        }
    }

    #[test]
    fn a_group_of_eight_runs_its_prompt_once() {
        let prompt: Vec<i64> = (0..400).collect();
        let samples: Vec<Sample> = (0..8)
            .map(|k| {
                let mut t = prompt.clone();
                t.extend((0..64).map(|j| 1000 + k * 64 + j));
                sample(t, 400)
            })
            .collect();
        let order: Vec<usize> = (0..8).collect();
        let mbs = micro_batches(Batching::SharedPrefix, &order, |i| &samples[i], 8192);
        assert_eq!(mbs, vec![MicroBatch { items: order.clone(), runs: vec![PrefixRun { rows: 8, prefix: 400 }] }]);
        assert_eq!(mbs[0].positions(&[464; 8]), 400 + 8 * 64);
        // A budget below the group's positions splits it, each part with its prompt.
        let mbs = micro_batches(Batching::SharedPrefix, &order, |i| &samples[i], 700);
        assert!(mbs.iter().all(|m| m.runs.iter().all(|r| r.prefix == 400 || r.rows == 1)));
        assert!(mbs.iter().all(|m| m.positions(&vec![464; m.items.len()]) <= 700));
    }
}
