//! Self-attention: the q, k, v and o projections, RoPE, and GQA. The
//! family-specific parts are here: Qwen3's RMSNorm of q and k (`q_norm`,
//! `k_norm`), and the biases the config asks for (Qwen2's on q, k and v).
use super::linear::{Linear, Sel};
use super::norm::RmsNorm;
use crate::config::ModelConfig;
use tch::{nn, Tensor};

pub(super) struct Attention {
    pub(super) q_proj: Linear,
    pub(super) k_proj: Linear,
    pub(super) v_proj: Linear,
    /// q, k and v in one matrix (inference,
    /// [`Model::fuse_projections`](super::Model::fuse_projections)).
    pub(super) qkv_proj: Option<Linear>,
    pub(super) o_proj: Linear,
    pub(super) q_norm: Option<RmsNorm>,
    pub(super) k_norm: Option<RmsNorm>,
    n_heads: i64,
    n_kv: i64,
    head_dim: i64,
}

/// HF's `x·cos + rotate_half(x)·sin`, rotate_half being (x1, x2) → (−x2, x1)
/// over the two halves of the last dim. `sin` comes signed, (−sin₁, sin₂)
/// (see [`Model::rope`](super::Model::rope)), so rotate_half is one roll:
/// (−x2)·sin₁ = x2·(−sin₁) exactly, the same values in fewer ops.
pub(super) fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let d = x.size()[x.dim() - 1];
    x * cos + x.roll([d / 2], [-1]) * sin
}

impl Attention {
    pub(super) fn new(cfg: &ModelConfig, p: nn::Path) -> Attention {
        let (h, hd, nh, nkv) = (cfg.hidden_size, cfg.head_dim(), cfg.num_attention_heads, cfg.kv_heads());
        let std = cfg.initializer_range;
        let qk_norm = cfg.model_type == "qwen3";
        Attention {
            q_proj: Linear::new(&p / "q_proj", h, nh * hd, cfg.qkv_bias(), std),
            k_proj: Linear::new(&p / "k_proj", h, nkv * hd, cfg.qkv_bias(), std),
            v_proj: Linear::new(&p / "v_proj", h, nkv * hd, cfg.qkv_bias(), std),
            qkv_proj: None,
            o_proj: Linear::new(&p / "o_proj", nh * hd, h, cfg.o_bias(), std),
            q_norm: qk_norm.then(|| RmsNorm::new(&p / "q_norm", hd, cfg.rms_norm_eps)),
            k_norm: qk_norm.then(|| RmsNorm::new(&p / "k_norm", hd, cfg.rms_norm_eps)),
            n_heads: nh as i64,
            n_kv: nkv as i64,
            head_dim: hd as i64,
        }
    }

    /// q [B,T,nh,hd] and k, v [B,T,nkv,hd] (not transposed), RoPE applied to
    /// q and k; `cos`, `sin` broadcast as [.., T, 1, hd]. With the fused
    /// projection (and no q/k norm) q and k get their RoPE in one go.
    pub(super) fn qkv(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, sel: Sel<'_>) -> (Tensor, Tensor, Tensor) {
        let (b, t, _) = x.size3().expect("[B,T,H]");
        let (nh, nkv, hd) = (self.n_heads, self.n_kv, self.head_dim);
        let fused = |f: &Linear| {
            let y = f.forward(x, Sel::Off);
            match Linear::fused_delta(&[&self.q_proj, &self.k_proj, &self.v_proj], x, sel) {
                Some(d) => y + d,
                None => y,
            }
        };
        if let (Some(f), None) = (&self.qkv_proj, &self.q_norm) {
            let y = fused(f).view([b, t, nh + 2 * nkv, hd]);
            let qk = apply_rope(&y.narrow(2, 0, nh + nkv), cos, sin);
            return (qk.narrow(2, 0, nh), qk.narrow(2, nh, nkv), y.narrow(2, nh + nkv, nkv));
        }
        let (q, k, v) = match &self.qkv_proj {
            Some(f) => {
                let y = fused(f);
                let (nq, nk) = (nh * hd, nkv * hd);
                (y.narrow(-1, 0, nq), y.narrow(-1, nq, nk), y.narrow(-1, nq + nk, nk))
            }
            None => (self.q_proj.forward(x, sel), self.k_proj.forward(x, sel), self.v_proj.forward(x, sel)),
        };
        let mut q = q.view([b, t, nh, hd]);
        let mut k = k.view([b, t, nkv, hd]);
        let v = v.view([b, t, nkv, hd]);
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = qn.forward(&q);
            k = kn.forward(&k);
        }
        (apply_rope(&q, cos, sin), apply_rope(&k, cos, sin), v)
    }

    /// Attention of q [B,nh,T,hd] over k, v [B,nkv,L,hd] → [B,T,nh·hd], what
    /// o_proj reads. GQA:
    /// without a mask (training) the kv heads are repeated as HF's
    /// `repeat_kv`; with a mask (the cached path) the `rep` query heads of a
    /// kv head are folded into its query rows instead, `[B,nkv,rep·T,hd]`
    /// against the kv heads as they are — the same dot products, without
    /// copying the cache `rep` times. The mask comes folded the same way:
    /// [B,1,rep·T,L], additive (see
    /// [`Model::extend_with`](super::Model::extend_with)).
    pub(super) fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, causal: bool) -> Tensor {
        let rep = self.n_heads / self.n_kv;
        let (b, _, t, _) = q.size4().expect("[B,nh,T,hd]");
        let a = match mask {
            Some(m) if rep > 1 => {
                let qf = q.reshape([b, self.n_kv, rep * t, self.head_dim]);
                Tensor::scaled_dot_product_attention(&qf, k, v, Some(m), 0.0, false, None, false).view([
                    b,
                    self.n_heads,
                    t,
                    self.head_dim,
                ])
            }
            _ => {
                let (k, v) = if rep > 1 {
                    (repeat_kv(k, rep), repeat_kv(v, rep))
                } else {
                    (k.shallow_clone(), v.shallow_clone())
                };
                Tensor::scaled_dot_product_attention(q, &k, &v, mask, 0.0, causal && mask.is_none(), None, false)
            }
        };
        a.transpose(1, 2).reshape([b, t, self.n_heads * self.head_dim])
    }
}

fn repeat_kv(x: &Tensor, rep: i64) -> Tensor {
    let (b, n, t, d) = x.size4().expect("[B,nkv,T,hd]");
    x.unsqueeze(2).expand([b, n, rep, t, d], false).reshape([b, n * rep, t, d])
}
