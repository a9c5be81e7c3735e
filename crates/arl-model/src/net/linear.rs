//! The linear layer of every projection, with the LoRA adapters on it
//! ([`LoraPair`]) and [`Sel`], which adapter a forward applies to which rows;
//! fused projections for inference ([`Linear::fuse`]).
use crate::{gemv, onednn};
use tch::nn::{self, Init};
use tch::Tensor;

pub(super) struct Linear {
    pub(super) w: Tensor,
    pub(super) b: Option<Tensor>,
    /// `w` in oneDNN's layout, for inference on the CPU
    /// ([`Model::set_cpu_matmul`](super::Model::set_cpu_matmul)); `None`:
    /// libtorch's `linear`.
    pub(super) packed: Option<Tensor>,
    /// The weight decode-sized products read through [`gemv`] (`w` itself,
    /// or a bf16 copy; [`Model::set_decode_matmul`](super::Model::set_decode_matmul));
    /// `None`: libtorch's.
    pub(super) small: Option<Tensor>,
    /// LoRA adapters on this layer, by adapter id (0: the attached one,
    /// [`Model::add_lora`](super::Model::add_lora); others: served ones,
    /// [`Model::load_adapter`](super::Model::load_adapter)).
    pub(super) lora: Vec<LoraPair>,
}

/// One adapter's matrices on one layer: A [r, in], B [out, r], and `s`.
pub(super) struct LoraPair {
    pub(super) id: u32,
    pub(super) a: Tensor,
    pub(super) b: Tensor,
    pub(super) scale: f64,
}

/// Which adapter a forward applies to which rows.
#[derive(Clone, Copy)]
pub(super) enum Sel<'a> {
    /// The base weights only.
    Off,
    /// Adapter `id` on every row, with dropout on its input (training).
    All { id: u32, dropout: f64 },
    /// Adapter `id` on the batch rows (dim 0) `idx`, per group; rows in no
    /// group get the base.
    Rows(&'a [(u32, Tensor)]),
}

impl Linear {
    pub(super) fn new(p: nn::Path, in_dim: usize, out_dim: usize, bias: bool, std: f64) -> Linear {
        let w = p.var("weight", &[out_dim as i64, in_dim as i64], Init::Randn { mean: 0.0, stdev: std });
        let b = bias.then(|| p.var("bias", &[out_dim as i64], Init::Const(0.0)));
        Linear { w, b, packed: None, small: None, lora: vec![] }
    }
    pub(super) fn forward(&self, x: &Tensor, sel: Sel<'_>) -> Tensor {
        let small = || self.small.as_ref().and_then(|w| gemv::linear(x, w, self.b.as_ref()));
        let packed = || self.packed.as_ref().and_then(|p| onednn::linear(x, p, self.b.as_ref()));
        let y = small().or_else(packed).unwrap_or_else(|| x.linear(&self.w, self.b.as_ref()));
        match self.lora_delta(x, sel) {
            Some(d) => y + d,
            None => y,
        }
    }

    fn pair(&self, id: u32) -> Option<&LoraPair> {
        self.lora.iter().find(|p| p.id == id)
    }

    /// The adapters' term `s·B·A·x` for the rows `sel` gives them, shaped
    /// like this layer's output; `None` when no selected adapter is on it.
    fn lora_delta(&self, x: &Tensor, sel: Sel<'_>) -> Option<Tensor> {
        if self.lora.is_empty() {
            return None;
        }
        let apply = |p: &LoraPair, x: &Tensor| x.linear::<Tensor>(&p.a, None).linear::<Tensor>(&p.b, None) * p.scale;
        match sel {
            Sel::Off => None,
            Sel::All { id, dropout } => {
                let p = self.pair(id)?;
                Some(if dropout > 0.0 { apply(p, &x.dropout(dropout, true)) } else { apply(p, x) })
            }
            Sel::Rows(groups) => {
                let mut out: Option<Tensor> = None;
                for (id, idx) in groups {
                    let Some(p) = self.pair(*id) else { continue };
                    let d = apply(p, &x.index_select(0, idx));
                    let base = out.take().unwrap_or_else(|| {
                        let mut shape = x.size();
                        *shape.last_mut().expect("rank ≥ 1") = p.b.size()[0];
                        Tensor::zeros(shape, (d.kind(), d.device()))
                    });
                    out = Some(base.index_add(0, idx, &d));
                }
                out
            }
        }
    }

    /// The adapters' term of `parts` side by side, for their fused layer
    /// ([`Linear::fuse`]): zeros for parts without one; `None` if none has.
    pub(super) fn fused_delta(parts: &[&Linear], x: &Tensor, sel: Sel<'_>) -> Option<Tensor> {
        let ds: Vec<Option<Tensor>> = parts.iter().map(|p| p.lora_delta(x, sel)).collect();
        let like = ds.iter().flatten().next()?;
        let cols = |d: &Option<Tensor>, p: &Linear| match d {
            Some(d) => d.shallow_clone(),
            None => {
                let mut shape = like.size();
                *shape.last_mut().expect("rank ≥ 1") = p.w.size()[0];
                Tensor::zeros(shape, (like.kind(), like.device()))
            }
        };
        let all: Vec<Tensor> = ds.iter().zip(parts).map(|(d, p)| cols(d, p)).collect();
        Some(Tensor::cat(&all, -1))
    }

    /// One linear layer computing `parts` side by side (their outputs
    /// concatenated), whose weights (and biases) the parts' own become views
    /// of: loading weights into the parts in place (`Model::reload`) updates
    /// it too. Without gradients.
    /// `None` when some parts have a bias and others not.
    pub(super) fn fuse(parts: &mut [&mut Linear]) -> Option<Linear> {
        if parts.iter().any(|p| p.b.is_some() != parts[0].b.is_some()) {
            return None;
        }
        tch::no_grad(|| {
            let w = Tensor::cat(&parts.iter().map(|p| &p.w).collect::<Vec<_>>(), 0);
            let b = parts.iter().map(|p| p.b.as_ref()).collect::<Option<Vec<_>>>().map(|bs| Tensor::cat(&bs, 0));
            let mut at = 0;
            for p in parts.iter_mut() {
                let n = p.w.size()[0];
                p.w.set_data(&w.narrow(0, at, n));
                if let (Some(pb), Some(b)) = (p.b.as_mut(), b.as_ref()) {
                    pb.set_data(&b.narrow(0, at, n));
                }
                at += n;
            }
            Some(Linear { w, b, packed: None, small: None, lora: vec![] })
        })
    }
}
