//! How a forward over a micro-batch is laid out ([`Layout`]: padded rows, or
//! the rows packed into one without padding) and run: the [`Plan`] of its
//! input, positions, attention and scored rows; [`Model::features_in`].
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
}

/// A scored forward, laid out ([`Model::plan`]).
pub(super) struct Plan {
    /// [B, T] (padded) or [1, N] (packed).
    pub(super) input: Tensor,
    /// Positions for RoPE: [T, 1] or [N, 1].
    pub(super) pos: Tensor,
    /// Packed: each sample's length, in order.
    pub(super) segments: Option<Vec<i64>>,
    /// Scored positions: their rows among the hidden states (padded: of
    /// [B·(T−1)]; packed: of [N]), next tokens, and slots in [B·(T−1)].
    pub(super) rows: Tensor,
    pub(super) targets: Tensor,
    pub(super) slots: Tensor,
    pub(super) b: i64,
    pub(super) t: i64,
}

impl Plan {
    /// Causal self-attention of a step's q, k, v [B, T, ·, hd]: the whole
    /// rows (padded), or each packed sample on its own.
    pub(super) fn attend(&self, a: &Attention, q: Tensor, k: Tensor, v: Tensor) -> Tensor {
        let Some(lens) = &self.segments else { return Block::train_attn(a, q, k, v) };
        if lens.len() == 1 {
            return Block::train_attn(a, q, k, v);
        }
        let (qs, ks, vs) = (q.split_with_sizes(lens, 1), k.split_with_sizes(lens, 1), v.split_with_sizes(lens, 1));
        let outs: Vec<Tensor> =
            qs.into_iter().zip(ks).zip(vs).map(|((q, k), v)| Block::train_attn(a, q, k, v)).collect();
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
                    segments: None,
                    // Hidden rows [B·(T−1)] (the last position predicts nothing).
                    rows: slots.shallow_clone(),
                    targets: ids.narrow(1, 1, t - 1).reshape([-1]).index_select(0, &slots),
                    slots,
                    b,
                    t,
                }
            }
            Layout::Packed(lens) => {
                assert_eq!(lens.len() as i64, b, "one length per row");
                assert!(lens.iter().all(|&l| l >= 1 && l as i64 <= t), "lengths within the rows");
                let need: Option<Vec<f32>> = needed.map(|m| {
                    Vec::<f32>::try_from(&m.to_device(Device::Cpu).to_kind(Kind::Float).reshape([-1])).expect("mask")
                });
                let ids_cpu = Vec::<i64>::try_from(&ids.to_device(Device::Cpu).reshape([-1])).expect("ids");
                let (mut flat, mut pos, mut rows, mut targets, mut slots) = (vec![], vec![], vec![], vec![], vec![]);
                for (i, &l) in lens.iter().enumerate() {
                    let row = &ids_cpu[i * t as usize..i * t as usize + l];
                    let off = flat.len() as i64;
                    for j in 0..l.saturating_sub(1) {
                        let slot = i * (t as usize - 1) + j;
                        if need.as_ref().is_none_or(|n| n[slot] != 0.0) {
                            rows.push(off + j as i64);
                            targets.push(row[j + 1]);
                            slots.push(slot as i64);
                        }
                    }
                    flat.extend_from_slice(row);
                    pos.extend(0..l as i64);
                }
                let n = flat.len() as i64;
                let at = |v: &[i64]| Tensor::from_slice(v).to_device(dev);
                Plan {
                    input: at(&flat).view([1, n]),
                    pos: at(&pos).unsqueeze(-1),
                    segments: Some(lens.iter().map(|&l| l as i64).collect()),
                    rows: at(&rows),
                    targets: at(&targets),
                    slots: at(&slots),
                    b,
                    t,
                }
            }
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
        let h = match p.segments {
            None => self.norm.forward(&x.narrow(1, 0, p.t - 1)),
            Some(_) => self.norm.forward(x),
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
        let Layout::Packed(lens) = layout else { return h };
        let (b, t) = (p.b, p.t);
        let idx: Vec<i64> =
            lens.iter().enumerate().flat_map(|(i, &l)| (0..l as i64).map(move |j| i as i64 * t + j)).collect();
        let width = h.size()[2];
        Tensor::zeros([b * t, width], (h.kind(), self.device))
            .index_copy(0, &Tensor::from_slice(&idx).to_device(self.device), &h.view([-1, width]))
            .view([b, t, width])
    }
}
