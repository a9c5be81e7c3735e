//! One decoder layer: pre-norm attention and MLP, each added to the residual.
use super::attention::Attention;
use super::linear::Sel;
use super::mlp::Mlp;
use super::norm::RmsNorm;
use crate::config::ModelConfig;
use tch::{nn, Tensor};

pub(super) struct Block {
    pub(super) input_layernorm: RmsNorm,
    pub(super) self_attn: Attention,
    pub(super) post_attention_layernorm: RmsNorm,
    pub(super) mlp: Mlp,
}

impl Block {
    pub(super) fn new(cfg: &ModelConfig, p: nn::Path) -> Block {
        Block {
            input_layernorm: RmsNorm::new(&p / "input_layernorm", cfg.hidden_size, cfg.rms_norm_eps),
            self_attn: Attention::new(cfg, &p / "self_attn"),
            post_attention_layernorm: RmsNorm::new(&p / "post_attention_layernorm", cfg.hidden_size, cfg.rms_norm_eps),
            mlp: Mlp::new(cfg, &p / "mlp"),
        }
    }

    /// One block; `attn` turns this step's q [B,T,nh,hd] and k, v
    /// [B,T,nkv,hd] into the attention output [B,T,nh·hd] ([`Block::train_attn`]
    /// for training; through the cache for inference).
    pub(super) fn forward(
        &self,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        sel: Sel<'_>,
        attn: impl FnOnce(&Attention, Tensor, Tensor, Tensor) -> Tensor,
    ) -> Tensor {
        let h = self.input_layernorm.forward(x);
        let (q, k, v) = self.self_attn.qkv(&h, cos, sin, sel);
        let a = attn(&self.self_attn, q, k, v);
        let x = x + self.self_attn.o_proj.forward(&a, sel);
        let h = self.post_attention_layernorm.forward(&x);
        &x + self.mlp.forward(&h, sel)
    }

    /// Causal self-attention of the step's own q, k, v (training and
    /// scoring), without a padding mask: padding is on the right, so under
    /// the causal mask a real query only ever sees real keys and a padded
    /// query's output is never used; a plain causal attention gives the real
    /// positions the same values as a key-padding mask would, and lets SDPA
    /// take its fused causal kernel (about 2× faster on CPU).
    pub(super) fn train_attn(a: &Attention, q: Tensor, k: Tensor, v: Tensor) -> Tensor {
        a.attend(&q.transpose(1, 2), &k.transpose(1, 2), &v.transpose(1, 2), None, true)
    }
}
