//! RMSNorm, the norm of every block, of the final hidden states and (Qwen3)
//! of q and k.
use tch::nn::{self, Init};
use tch::{Kind, Tensor};

/// RMSNorm computed in float32 and cast back, as HF's `Qwen2RMSNorm`.
pub(super) struct RmsNorm {
    pub(super) w: Tensor,
    pub(super) eps: f64,
}

impl RmsNorm {
    pub(super) fn new(p: nn::Path, dim: usize, eps: f64) -> RmsNorm {
        RmsNorm { w: p.var("weight", &[dim as i64], Init::Const(1.0)), eps }
    }
    pub(super) fn forward(&self, x: &Tensor) -> Tensor {
        let kind = x.kind();
        // (Conversions only when needed: each op costs a dispatch on tiny batches.)
        let xf = if kind == Kind::Float { x.shallow_clone() } else { x.to_kind(Kind::Float) };
        let var = xf.square().mean_dim(-1, true, Kind::Float);
        let y = xf * (var + self.eps).rsqrt();
        let y = if kind == Kind::Float { y } else { y.to_kind(kind) };
        &self.w * y
    }
}
