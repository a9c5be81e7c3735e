//! The [`Model`]: embedding, blocks, final norm and LM head, built with
//! `new(cfg, path)` so that variable paths are the safetensors keys; the
//! plain forward of training and scoring, RoPE, autocast, and the layouts
//! for inference (fused projections, oneDNN-packed weights).
use super::adapters::{Attached, Served};
use super::block::Block;
use super::linear::Linear;
use super::norm::RmsNorm;
use crate::amp::{AmpDtype, Autocast};
use crate::config::ModelConfig;
use crate::gemv::{self, DecodeMatmul};
use crate::onednn::{self, CpuMatmul};
use anyhow::{bail, Result};
use std::collections::BTreeMap;
use tch::nn::{self, Init};
use tch::{Device, Kind, Tensor};

pub struct Model {
    pub config: ModelConfig,
    pub vs: nn::VarStore,
    pub(super) embed_tokens: Tensor,
    pub(super) layers: Vec<Block>,
    pub(super) norm: RmsNorm,
    pub(super) lm_head: Option<Tensor>,
    /// The LM head's matrix in oneDNN's layout ([`Model::set_cpu_matmul`]).
    pub(super) head_packed: Option<Tensor>,
    pub(super) cpu_matmul: CpuMatmul,
    /// The LM head's weight for decode-sized products ([`Model::set_decode_matmul`]).
    pub(super) head_small: Option<Tensor>,
    pub(super) decode_matmul: DecodeMatmul,
    /// Whether a decode step takes [`Model::decode_native`] when it can.
    pub(super) native_decode: bool,
    pub(super) inv_freq: Tensor,
    pub(super) device: Device,
    /// Autocast for the training and scoring forwards ([`Model::set_amp`]).
    pub(super) amp: Option<AmpDtype>,
    /// The directory the base weights came from ([`Model::load`]).
    pub(super) source: Option<std::path::PathBuf>,
    /// The adapter every training and scoring forward applies (id 0).
    pub(super) attached: Option<Attached>,
    /// Adapters loaded by name for serving ([`Model::load_adapter`]).
    pub(super) served: BTreeMap<String, Served>,
    pub(super) next_adapter: u32,
}

impl Model {
    /// A model with freshly initialised weights (HF's `_init_weights`: normal
    /// with `initializer_range`, norms 1, biases 0), drawn from tch's global
    /// generator (seed it with `tch::manual_seed`).
    pub fn new(config: ModelConfig, device: Device, kind: Kind) -> Result<Model> {
        config.validate()?;
        let mut vs = nn::VarStore::new(device);
        let root = vs.root();
        let m = &root / "model";
        let std = config.initializer_range;
        let embed_tokens = (&m / "embed_tokens").var(
            "weight",
            &[config.vocab_size as i64, config.hidden_size as i64],
            Init::Randn { mean: 0.0, stdev: std },
        );
        let layers = (0..config.num_hidden_layers).map(|i| Block::new(&config, &m / "layers" / i)).collect();
        let norm = RmsNorm::new(&m / "norm", config.hidden_size, config.rms_norm_eps);
        let lm_head = (!config.tie_word_embeddings).then(|| {
            (&root / "lm_head").var(
                "weight",
                &[config.vocab_size as i64, config.hidden_size as i64],
                Init::Randn { mean: 0.0, stdev: std },
            )
        });
        let inv_freq = Tensor::from_slice(&config.inv_freq()?).to_device(device);
        if kind != Kind::Float {
            vs.set_kind(kind);
        }
        Ok(Model {
            config,
            vs,
            embed_tokens,
            layers,
            norm,
            lm_head,
            head_packed: None,
            cpu_matmul: CpuMatmul::Blas,
            head_small: None,
            decode_matmul: DecodeMatmul::Blas,
            // (ARL_NATIVE_DECODE=0: the libtorch path, for benchmarks.)
            native_decode: std::env::var("ARL_NATIVE_DECODE").map_or(true, |v| v != "0"),
            inv_freq,
            device,
            amp: None,
            source: None,
            attached: None,
            served: BTreeMap::new(),
            next_adapter: 1,
        })
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn kind(&self) -> Kind {
        self.embed_tokens.kind()
    }

    /// For inference (`arl-serve`): each block computes q, k, v with one
    /// matrix multiply and gate, up with another, instead of five — fewer,
    /// larger kernels per decode step, the same values. The per-projection
    /// parameters become views of the fused matrices, so [`Model::reload`]
    /// keeps both in step. Not for training (the fused matrices carry no
    /// gradient).
    pub fn fuse_projections(&mut self) {
        for layer in &mut self.layers {
            let a = &mut layer.self_attn;
            a.qkv_proj = Linear::fuse(&mut [&mut a.q_proj, &mut a.k_proj, &mut a.v_proj]);
            let m = &mut layer.mlp;
            m.gate_up_proj = Linear::fuse(&mut [&mut m.gate_proj, &mut m.up_proj]);
        }
        // The fused layers get their copies (nothing to build when both are off).
        self.repack();
    }

    /// How the inference linears multiply on the CPU (see [`onednn`]):
    /// [`CpuMatmul::OneDnn`] packs every projection the inference path uses
    /// (the fused ones after [`Model::fuse_projections`]) and the LM head into
    /// oneDNN's layout — a second copy of those weights — and keeps them in
    /// step with [`Model::reload`]; [`CpuMatmul::Blas`] drops the copies.
    /// Inference only (`no_grad`): the packed copies carry no gradient.
    /// Fails for OneDnn unless the model is float32 on the CPU and this
    /// libtorch runs oneDNN.
    pub fn set_cpu_matmul(&mut self, m: CpuMatmul) -> Result<()> {
        if m == CpuMatmul::OneDnn {
            if self.device != Device::Cpu || self.kind() != Kind::Float {
                bail!("oneDNN matrix multiplies are for float32 models on the CPU");
            }
            if !onednn::available() {
                bail!("this libtorch cannot run oneDNN linears");
            }
        }
        self.cpu_matmul = m;
        self.rebuild(true, false);
        Ok(())
    }

    /// The current [`CpuMatmul`].
    pub fn cpu_matmul(&self) -> CpuMatmul {
        self.cpu_matmul
    }

    /// How decode-sized products (at most [`gemv::MAX_ROWS`] rows) multiply
    /// on the CPU: [`DecodeMatmul::Float32`] and [`DecodeMatmul::Bf16`] send
    /// every projection the inference path uses and the LM head through
    /// [`gemv`] (Bf16 on bf16 copies, kept in step with [`Model::reload`]);
    /// [`DecodeMatmul::Blas`] through libtorch. Inference only. Fails unless
    /// the model is float32 on the CPU (Blas always works).
    pub fn set_decode_matmul(&mut self, d: DecodeMatmul) -> Result<()> {
        if d != DecodeMatmul::Blas && (self.device != Device::Cpu || self.kind() != Kind::Float) {
            bail!("arl's decode matrix products are for float32 models on the CPU");
        }
        self.decode_matmul = d;
        self.rebuild(false, true);
        Ok(())
    }

    /// The current [`DecodeMatmul`].
    pub fn decode_matmul(&self) -> DecodeMatmul {
        self.decode_matmul
    }

    /// Whether weight changes must rebuild copies ([`Model::repack`]).
    pub(super) fn has_copies(&self) -> bool {
        self.cpu_matmul == CpuMatmul::OneDnn || self.decode_matmul == DecodeMatmul::Bf16
    }

    /// (Re)builds or drops the oneDNN-packed copies for `self.cpu_matmul`
    /// and the decode weights for `self.decode_matmul` (after a weight change).
    pub(super) fn repack(&mut self) {
        self.rebuild(true, true);
    }

    /// [`Model::repack`] of the oneDNN copies (`onednn`), the decode weights
    /// (`decode`), or both: each setting rebuilds only its own.
    fn rebuild(&mut self, onednn: bool, decode: bool) {
        let on = self.cpu_matmul == CpuMatmul::OneDnn;
        let small = self.decode_matmul;
        let pack = |l: &mut Linear| {
            if onednn {
                l.packed = on.then(|| onednn::pack(&l.w));
            }
            if decode {
                l.small = small.weight(&l.w);
            }
        };
        for layer in &mut self.layers {
            let a = &mut layer.self_attn;
            match &mut a.qkv_proj {
                Some(f) => pack(f),
                None => {
                    pack(&mut a.q_proj);
                    pack(&mut a.k_proj);
                    pack(&mut a.v_proj);
                }
            }
            pack(&mut a.o_proj);
            let m = &mut layer.mlp;
            match &mut m.gate_up_proj {
                Some(f) => pack(f),
                None => {
                    pack(&mut m.gate_proj);
                    pack(&mut m.up_proj);
                }
            }
            pack(&mut m.down_proj);
        }
        let head = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        if onednn {
            self.head_packed = on.then(|| onednn::pack(head));
        }
        if decode {
            self.head_small = small.weight(head);
        }
    }

    /// cos and signed sin (first half negated, as
    /// [`apply_rope`](super::attention::apply_rope) wants) for the given
    /// positions (any shape P) → [P…, head_dim], in `kind`.
    pub(super) fn rope(&self, pos: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let freqs = pos.to_kind(Kind::Float).unsqueeze(-1) * &self.inv_freq;
        let sin = freqs.sin();
        let cos = freqs.cos();
        (Tensor::cat(&[&cos, &cos], -1).to_kind(kind), Tensor::cat(&[&sin.neg(), &sin], -1).to_kind(kind))
    }

    pub(super) fn head(&self, x: &Tensor) -> Tensor {
        let x = self.norm.forward(x);
        if let Some(y) = self.head_small.as_ref().and_then(|w| gemv::linear(&x, w, None)) {
            return y;
        }
        if let Some(y) = self.head_packed.as_ref().and_then(|p| onednn::linear(&x, p, None)) {
            return y;
        }
        let w = self.lm_head.as_ref().unwrap_or(&self.embed_tokens);
        x.linear::<Tensor>(w, None).to_kind(Kind::Float)
    }

    /// The last hidden states after the final norm, [B,T,H] in the model's
    /// kind: what the LM head (or a critic's value head) reads. Same inputs
    /// as [`Model::forward`].
    pub fn features(&self, ids: &Tensor, attention_mask: Option<&Tensor>) -> Tensor {
        let _amp = self.autocast();
        self.norm.forward(&self.trunk(ids, attention_mask))
    }

    /// Runs the training and scoring forwards ([`Model::forward`],
    /// [`Model::features`], [`Model::token_scores`], [`Model::forward_backward_lean`]) under
    /// libtorch autocast in `dtype` (`None`: off). The weights should be
    /// float32. Fails when libtorch cannot autocast on this device.
    pub fn set_amp(&mut self, dtype: Option<AmpDtype>) -> Result<()> {
        if let Some(d) = dtype {
            drop(Autocast::enter(self.device, d)?);
        }
        self.amp = dtype;
        Ok(())
    }

    pub(super) fn autocast(&self) -> Option<Autocast> {
        // set_amp checked that this device can.
        self.amp.map(|d| Autocast::enter(self.device, d).expect("autocast"))
    }

    pub(super) fn embed(&self, ids: &Tensor) -> Tensor {
        Tensor::embedding(&self.embed_tokens, ids, -1, false, false)
    }

    /// Training / scoring forward: `ids` [B,T] int64, `attention_mask` [B,T]
    /// (1 real, 0 pad; right padding) → logits [B,T,V] in float32.
    pub fn forward(&self, ids: &Tensor, attention_mask: Option<&Tensor>) -> Tensor {
        let _amp = self.autocast();
        self.head(&self.trunk(ids, attention_mask))
    }

    /// Embedding and every block, before the final norm.
    fn trunk(&self, ids: &Tensor, attention_mask: Option<&Tensor>) -> Tensor {
        let ids = ids.to_device(self.device);
        let (_, t) = ids.size2().expect("ids [B,T]");
        let _ = attention_mask; // see Block::train_attn
        let mut x = self.embed(&ids);
        let pos = Tensor::arange(t, (Kind::Int64, self.device)).unsqueeze(-1);
        let (cos, sin) = self.rope(&pos, x.kind());
        let sel = self.train_sel(false);
        for layer in &self.layers {
            x = layer.forward(&x, &cos, &sin, sel, Block::train_attn);
        }
        x
    }
}
