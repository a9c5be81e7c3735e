//! The MLP of a block: SwiGLU, `down(silu(gate(x)) · up(x))`.
use super::linear::{Linear, Sel};
use crate::config::ModelConfig;
use tch::{nn, Tensor};

pub(super) struct Mlp {
    pub(super) gate_proj: Linear,
    pub(super) up_proj: Linear,
    /// gate and up in one matrix (inference,
    /// [`Model::fuse_projections`](super::Model::fuse_projections)).
    pub(super) gate_up_proj: Option<Linear>,
    pub(super) down_proj: Linear,
}

impl Mlp {
    pub(super) fn new(cfg: &ModelConfig, p: nn::Path) -> Mlp {
        let (h, i, std) = (cfg.hidden_size, cfg.intermediate_size, cfg.initializer_range);
        Mlp {
            gate_proj: Linear::new(&p / "gate_proj", h, i, false, std),
            up_proj: Linear::new(&p / "up_proj", h, i, false, std),
            gate_up_proj: None,
            down_proj: Linear::new(&p / "down_proj", i, h, false, std),
        }
    }
    pub(super) fn forward(&self, x: &Tensor, sel: Sel<'_>) -> Tensor {
        let h = match &self.gate_up_proj {
            Some(f) => {
                let y = f.forward(x, Sel::Off);
                let y = match Linear::fused_delta(&[&self.gate_proj, &self.up_proj], x, sel) {
                    Some(d) => y + d,
                    None => y,
                };
                let i = y.size()[y.dim() - 1] / 2;
                y.narrow(-1, 0, i).silu() * y.narrow(-1, i, i)
            }
            None => self.gate_proj.forward(x, sel).silu() * self.up_proj.forward(x, sel),
        };
        self.down_proj.forward(&h, sel)
    }
}
