//! How a forward over a micro-batch is laid out ([`Layout`]: padded rows,
//! the rows packed into one without padding, or packed with each group's
//! shared prefix once) and run: the [`Plan`] of its input, positions,
//! attention and scored rows; [`Model::features_in`].
use super::attention::Attention;
use super::block::Block;
use super::linear::Sel;
use super::Model;
use tch::{Device, Kind, Tensor};

/// How a micro-batch of right-padded rows [B, T] runs through the model.
#[derive(Debug, Clone, Copy)]
pub enum Layout<'a> {
    /// As given: B rows of T positions, padding included (padding on the
    /// right never reaches a real position under the causal mask).
    Padded,
    /// The first `lens[i]` tokens of each row i, concatenated into one row
    /// without padding: positions restart at 0 for each sample and attention
    /// never crosses a sample boundary (one causal attention call per
    /// sample, no [N, N] mask). The same values as `Padded`, without the
    /// padding's compute and memory.
    Packed(&'a [usize]),
    /// Packed, in runs of consecutive rows that share a prefix (a GRPO
    /// group's prompt): each run's prefix goes through the model once, and
    /// each row's own tokens attend to the prefix's keys and values and
    /// causally to their own. The same values as `Packed` (the prefix's
    /// gradient from every row adds up once), at about `P + Σ(lᵢ − P)`
    /// positions of work per run instead of `Σ lᵢ`. `runs` covers the rows
    /// in order; a run's prefix must be shorter than each of its rows and
    /// equal in all of them (asserted).
    Grouped { lens: &'a [usize], runs: &'a [PrefixRun] },
}

/// A run of [`Layout::Grouped`]: `rows` consecutive rows whose first
/// `prefix` tokens are the same (0: no sharing, the rows as in `Packed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixRun {
    pub rows: usize,
    pub prefix: usize,
}

/// How a plan's positions attend.
pub(super) enum Attn {
    /// Causally within each row of [B, T] (padded).
    Rows,
    /// Causally within each segment of the one packed row, in order.
    Segments(Vec<i64>),
    /// The segments of one packed row, in order: a prefix attends causally
    /// to itself; a row's own part to its run's prefix (`Some`: the
    /// segment's index and its mask [1, 1, rep·R, P+R]) and causally to itself.
    Shared(Vec<(i64, Option<(usize, Tensor)>)>),
}

/// A scored forward, laid out ([`Model::plan`]).
pub(super) struct Plan {
    /// [B, T] (padded) or [1, N] (packed).
    pub(super) input: Tensor,
    /// Positions for RoPE: [T, 1] or [N, 1].
    pub(super) pos: Tensor,
    pub(super) attn: Attn,
    /// Scored positions: their rows among the hidden states (padded: of
    /// [B·(T−1)]; packed: of [N]), next tokens, and slots in [B·(T−1)].
    pub(super) rows: Tensor,
    pub(super) targets: Tensor,
    pub(super) slots: Tensor,
    /// Packed: where position j of row i is in the packed row, row by row.
    pub(super) place: Vec<i64>,
    pub(super) b: i64,
    pub(super) t: i64,
}

impl Plan {
    /// Self-attention of a step's q, k, v [B, T, ·, hd] as the plan lays
    /// it out ([`Attn`]).
    pub(super) fn attend(&self, a: &Attention, q: Tensor, k: Tensor, v: Tensor) -> Tensor {
        let segs: Vec<i64> = match &self.attn {
            Attn::Rows => return Block::train_attn(a, q, k, v),
            Attn::Segments(lens) if lens.len() == 1 => return Block::train_attn(a, q, k, v),
            Attn::Segments(lens) => lens.clone(),
            Attn::Shared(segs) => segs.iter().map(|(l, _)| *l).collect(),
        };
        let (qs, ks, vs) = (q.split_with_sizes(&segs, 1), k.split_with_sizes(&segs, 1), v.split_with_sizes(&segs, 1));
        let outs: Vec<Tensor> = (0..segs.len())
            .map(|i| match &self.attn {
                Attn::Shared(s) => match &s[i].1 {
                    Some((at, mask)) => {
                        let wide = |x: &[Tensor]| Tensor::cat(&[&x[*at], &x[i]], 1).transpose(1, 2);
                        a.attend(&qs[i].transpose(1, 2), &wide(&ks), &wide(&vs), Some(mask), false)
                    }
                    None => Block::train_attn(a, qs[i].shallow_clone(), ks[i].shallow_clone(), vs[i].shallow_clone()),
                },
                _ => Block::train_attn(a, qs[i].shallow_clone(), ks[i].shallow_clone(), vs[i].shallow_clone()),
            })
            .collect();
        Tensor::cat(&outs, 1)
    }
}

impl Model {
    /// What a scored forward runs: the model's input row(s), positions,
    /// attention, and where each scored position's hidden state, target and
    /// output slot are. `needed` [B, T−1] (non-zero: score; `None`: all).
    pub(super) fn plan(&self, ids: &Tensor, needed: Option<&Tensor>, layout: Layout<'_>) -> Plan {
        let dev = self.device;
        let (b, t) = ids.size2().expect("ids [B,T]");
        match layout {
            Layout::Padded => {
                let slots = match needed {
                    Some(m) => m.to_device(dev).reshape([-1]).ne(0.0).nonzero().squeeze_dim(-1),
                    None => Tensor::arange(b * (t - 1), (Kind::Int64, dev)),
                };
                Plan {
                    input: ids.shallow_clone(),
                    pos: Tensor::arange(t, (Kind::Int64, dev)).unsqueeze(-1),
                    attn: Attn::Rows,
                    place: vec![],
                    // Hidden rows [B·(T−1)] (the last position predicts nothing).
                    rows: slots.shallow_clone(),
                    targets: ids.narrow(1, 1, t - 1).reshape([-1]).index_select(0, &slots),
                    slots,
                    b,
                    t,
                }
            }
            Layout::Packed(lens) => self.plan_packed(ids, needed, lens, None),
            Layout::Grouped { lens, runs } => self.plan_packed(ids, needed, lens, Some(runs)),
        }
    }

    /// The plan of `Packed` (`runs` = `None`: every row alone) or `Grouped`
    /// rows: one row of every run's prefix once and each row's own tokens.
    fn plan_packed(&self, ids: &Tensor, needed: Option<&Tensor>, lens: &[usize], runs: Option<&[PrefixRun]>) -> Plan {
        let dev = self.device;
        let (b, t) = ids.size2().expect("ids [B,T]");
        assert_eq!(lens.len() as i64, b, "one length per row");
        assert!(lens.iter().all(|&l| l >= 1 && l as i64 <= t), "lengths within the rows");
        let alone = vec![PrefixRun { rows: 1, prefix: 0 }; lens.len()];
        let run_list = runs.unwrap_or(&alone);
        assert_eq!(run_list.iter().map(|r| r.rows).sum::<usize>(), lens.len(), "the runs cover the rows");
        let need: Option<Vec<f32>> = needed
            .map(|m| Vec::<f32>::try_from(&m.to_device(Device::Cpu).to_kind(Kind::Float).reshape([-1])).expect("mask"));
        let ids_cpu = Vec::<i64>::try_from(&ids.to_device(Device::Cpu).reshape([-1])).expect("ids");
        let rep = (self.config.num_attention_heads / self.config.kv_heads()) as i64;
        let tu = t as usize;
        let (mut flat, mut pos, mut rows, mut targets, mut slots) = (vec![], vec![], vec![], vec![], vec![]);
        let (mut place, mut segs) = (Vec::with_capacity(lens.iter().sum()), vec![]);
        let mut first = 0;
        for run in run_list {
            let p = run.prefix;
            let head = &ids_cpu[first * tu..first * tu + p.min(lens[first])];
            let (pre_off, pre_seg) = (flat.len(), segs.len());
            if p > 0 {
                flat.extend_from_slice(head);
                pos.extend(0..p as i64);
                segs.push((p as i64, None));
            }
            for i in first..first + run.rows {
                let l = lens[i];
                let row = &ids_cpu[i * tu..i * tu + l];
                assert!(p < l && row[..p] == *head, "row {i} shares its run's prefix of {p} tokens and has more");
                let own = flat.len();
                let at = |j: usize| (if j < p { pre_off + j } else { own + j - p }) as i64;
                for j in 0..l - 1 {
                    let slot = i * (tu - 1) + j;
                    if need.as_ref().is_none_or(|n| n[slot] != 0.0) {
                        rows.push(at(j));
                        targets.push(row[j + 1]);
                        slots.push(slot as i64);
                    }
                }
                place.extend((0..l).map(at));
                flat.extend_from_slice(&row[p..]);
                pos.extend(p as i64..l as i64);
                let r = (l - p) as i64;
                let mask = (p > 0).then(|| {
                    // Row q sees the whole prefix and its own past.
                    let ones = |m, n| Tensor::ones([m, n], (Kind::Bool, dev));
                    let allowed = Tensor::cat(&[ones(r, p as i64), ones(r, r).tril(0)], 1);
                    (pre_seg, allowed.repeat([rep, 1]).view([1, 1, rep * r, p as i64 + r]))
                });
                segs.push((r, mask));
            }
            first += run.rows;
        }
        let n = flat.len() as i64;
        let at = |v: &[i64]| Tensor::from_slice(v).to_device(dev);
        Plan {
            input: at(&flat).view([1, n]),
            pos: at(&pos).unsqueeze(-1),
            attn: match runs {
                None => Attn::Segments(lens.iter().map(|&l| l as i64).collect()),
                Some(_) => Attn::Shared(segs),
            },
            rows: at(&rows),
            targets: at(&targets),
            slots: at(&slots),
            place,
            b,
            t,
        }
    }

    /// Embedding and every block of a plan's input (before the final norm);
    /// `blocks`: keep each block's input (for checkpointing) and run without
    /// a graph.
    pub(super) fn plan_trunk(
        &self,
        p: &Plan,
        keep_inputs: bool,
        sel: Sel<'_>,
    ) -> (Tensor, Option<Vec<Tensor>>, (Tensor, Tensor)) {
        let mut x = if keep_inputs { tch::no_grad(|| self.embed(&p.input)) } else { self.embed(&p.input) };
        let (cos, sin) = self.rope(&p.pos, x.kind());
        let mut inputs = keep_inputs.then(|| Vec::with_capacity(self.layers.len()));
        for layer in &self.layers {
            if let Some(v) = inputs.as_mut() {
                v.push(x.shallow_clone());
                x = tch::no_grad(|| layer.forward(&x, &cos, &sin, sel, |a, q, k, v| p.attend(a, q, k, v)));
            } else {
                x = layer.forward(&x, &cos, &sin, sel, |a, q, k, v| p.attend(a, q, k, v));
            }
        }
        (x, inputs, (cos, sin))
    }

    /// The plan's scored hidden rows [M, H] after the final norm, with a graph from `x`.
    pub(super) fn plan_rows(&self, p: &Plan, x: &Tensor) -> Tensor {
        let h = match p.attn {
            Attn::Rows => self.norm.forward(&x.narrow(1, 0, p.t - 1)),
            _ => self.norm.forward(x),
        };
        let width = h.size()[h.dim() - 1];
        h.reshape([-1, width]).index_select(0, &p.rows)
    }

    /// Scores of the plan's positions spread over [B, T−1] (0 elsewhere).
    pub(super) fn spread(&self, v: &Tensor, p: &Plan) -> Tensor {
        Tensor::zeros([p.b * (p.t - 1)], (Kind::Float, self.device)).index_copy(0, &p.slots, v).view([p.b, p.t - 1])
    }

    /// [`Model::features`] of right-padded `ids` [B, T] run in `layout`:
    /// [B, T, H], padded positions 0 when packed.
    pub fn features_in(&self, ids: &Tensor, layout: Layout<'_>) -> Tensor {
        let _amp = self.autocast();
        let ids = ids.to_device(self.device);
        let p = self.plan(&ids, None, layout);
        let (x, _, _) = self.plan_trunk(&p, false, self.train_sel(false));
        let h = self.norm.forward(&x);
        let lens = match layout {
            Layout::Padded => return h,
            Layout::Packed(lens) | Layout::Grouped { lens, .. } => lens,
        };
        let (b, t) = (p.b, p.t);
        let idx: Vec<i64> =
            lens.iter().enumerate().flat_map(|(i, &l)| (0..l as i64).map(move |j| i as i64 * t + j)).collect();
        let width = h.size()[2];
        let at = |v: &[i64]| Tensor::from_slice(v).to_device(self.device);
        Tensor::zeros([b * t, width], (h.kind(), self.device))
            .index_copy(0, &at(&idx), &h.view([-1, width]).index_select(0, &at(&p.place)))
            .view([b, t, width])
    }
}
