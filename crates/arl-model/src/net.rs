//! The decoder network, its KV cache, and checkpoint loading/saving.
use super::amp::{AmpDtype, Autocast};
use super::config::ModelConfig;
use super::lora::{self, LoraConfig};
use super::onednn::{self, CpuMatmul};
use super::weights;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use tch::nn::{self, Init};
use tch::{Device, Kind, Tensor};

struct Linear {
    w: Tensor,
    b: Option<Tensor>,
    /// `w` in oneDNN's layout, for inference on the CPU
    /// ([`Model::set_cpu_matmul`]); `None`: libtorch's `linear`.
    packed: Option<Tensor>,
    /// LoRA adapters on this layer, by adapter id (0: the attached one,
    /// [`Model::add_lora`]; others: served ones, [`Model::load_adapter`]).
    lora: Vec<LoraPair>,
}

/// One adapter's matrices on one layer: A [r, in], B [out, r], and `s`.
struct LoraPair {
    id: u32,
    a: Tensor,
    b: Tensor,
    scale: f64,
}

/// Which adapter a forward applies to which rows.
#[derive(Clone, Copy)]
enum Sel<'a> {
    /// The base weights only.
    Off,
    /// Adapter `id` on every row, with dropout on its input (training).
    All { id: u32, dropout: f64 },
    /// Adapter `id` on the batch rows (dim 0) `idx`, per group; rows in no
    /// group get the base.
    Rows(&'a [(u32, Tensor)]),
}

impl Linear {
    fn new(p: nn::Path, in_dim: usize, out_dim: usize, bias: bool, std: f64) -> Linear {
        let w = p.var("weight", &[out_dim as i64, in_dim as i64], Init::Randn { mean: 0.0, stdev: std });
        let b = bias.then(|| p.var("bias", &[out_dim as i64], Init::Const(0.0)));
        Linear { w, b, packed: None, lora: vec![] }
    }
    fn forward(&self, x: &Tensor, sel: Sel<'_>) -> Tensor {
        let y = match self.packed.as_ref().and_then(|p| onednn::linear(x, p, self.b.as_ref())) {
            Some(y) => y,
            None => x.linear(&self.w, self.b.as_ref()),
        };
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
    fn fused_delta(parts: &[&Linear], x: &Tensor, sel: Sel<'_>) -> Option<Tensor> {
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
    fn fuse(parts: &mut [&mut Linear]) -> Option<Linear> {
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
            Some(Linear { w, b, packed: None, lora: vec![] })
        })
    }
}

/// RMSNorm computed in float32 and cast back, as HF's `Qwen2RMSNorm`.
struct RmsNorm {
    w: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn new(p: nn::Path, dim: usize, eps: f64) -> RmsNorm {
        RmsNorm { w: p.var("weight", &[dim as i64], Init::Const(1.0)), eps }
    }
    fn forward(&self, x: &Tensor) -> Tensor {
        let kind = x.kind();
        // (Conversions only when needed: each op costs a dispatch on tiny batches.)
        let xf = if kind == Kind::Float { x.shallow_clone() } else { x.to_kind(Kind::Float) };
        let var = xf.square().mean_dim(-1, true, Kind::Float);
        let y = xf * (var + self.eps).rsqrt();
        let y = if kind == Kind::Float { y } else { y.to_kind(kind) };
        &self.w * y
    }
}

struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    /// q, k and v in one matrix (inference, [`Model::fuse_projections`]).
    qkv_proj: Option<Linear>,
    o_proj: Linear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    n_heads: i64,
    n_kv: i64,
    head_dim: i64,
}

/// HF's `x·cos + rotate_half(x)·sin`, rotate_half being (x1, x2) → (−x2, x1)
/// over the two halves of the last dim. `sin` comes signed, (−sin₁, sin₂)
/// (see [`Model::rope`]), so rotate_half is one roll: (−x2)·sin₁ = x2·(−sin₁)
/// exactly, the same values in fewer ops.
fn apply_rope(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
    let d = x.size()[x.dim() - 1];
    x * cos + x.roll([d / 2], [-1]) * sin
}

impl Attention {
    fn new(cfg: &ModelConfig, p: nn::Path) -> Attention {
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
    fn qkv(&self, x: &Tensor, cos: &Tensor, sin: &Tensor, sel: Sel<'_>) -> (Tensor, Tensor, Tensor) {
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
    /// [B,1,rep·T,L], additive (see [`Model::extend`]).
    fn attend(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, causal: bool) -> Tensor {
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

struct Mlp {
    gate_proj: Linear,
    up_proj: Linear,
    /// gate and up in one matrix (inference, [`Model::fuse_projections`]).
    gate_up_proj: Option<Linear>,
    down_proj: Linear,
}

impl Mlp {
    fn new(cfg: &ModelConfig, p: nn::Path) -> Mlp {
        let (h, i, std) = (cfg.hidden_size, cfg.intermediate_size, cfg.initializer_range);
        Mlp {
            gate_proj: Linear::new(&p / "gate_proj", h, i, false, std),
            up_proj: Linear::new(&p / "up_proj", h, i, false, std),
            gate_up_proj: None,
            down_proj: Linear::new(&p / "down_proj", i, h, false, std),
        }
    }
    fn forward(&self, x: &Tensor, sel: Sel<'_>) -> Tensor {
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

struct Block {
    input_layernorm: RmsNorm,
    self_attn: Attention,
    post_attention_layernorm: RmsNorm,
    mlp: Mlp,
}

impl Block {
    fn new(cfg: &ModelConfig, p: nn::Path) -> Block {
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
    fn forward(
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
    fn train_attn(a: &Attention, q: Tensor, k: Tensor, v: Tensor) -> Tensor {
        a.attend(&q.transpose(1, 2), &k.transpose(1, 2), &v.transpose(1, 2), None, true)
    }
}

/// Key/value cache of many sequences at once, one *slot* each: for every
/// layer K and V are [slots, nkv, capacity, hd] (after RoPE, before GQA
/// repetition), slot i valid for its first `len(i)` positions. A decode step
/// writes every sequence's new key with one indexed store and reads the batch
/// with one gather (none when the slots are consecutive), instead of copying
/// each sequence's cache separately; capacity and slot count double when full.
pub struct KvCache {
    k: Vec<Tensor>,
    v: Vec<Tensor>,
    /// RoPE cos and signed sin of positions `0..rope_len`, [rope_len, hd]
    /// (grown on demand): a decode step looks its positions up.
    rope: Option<(Tensor, Tensor)>,
    rope_len: usize,
    lens: Vec<usize>,
    used: Vec<bool>,
    nkv: i64,
    hd: i64,
    kind: Kind,
    device: Device,
}

impl KvCache {
    /// Claims a free slot (the lowest, so running sequences stay packed).
    pub fn alloc(&mut self) -> usize {
        if let Some(i) = self.used.iter().position(|u| !u) {
            self.used[i] = true;
            self.lens[i] = 0;
            return i;
        }
        let old = self.used.len();
        let new = (old * 2).max(8);
        self.resize(new as i64, self.capacity());
        self.used.resize(new, false);
        self.lens.resize(new, 0);
        self.used[old] = true;
        old
    }

    /// Frees a slot.
    pub fn free(&mut self, slot: usize) {
        if let Some(u) = self.used.get_mut(slot) {
            *u = false;
            self.lens[slot] = 0;
        }
    }

    /// Valid positions of a slot.
    pub fn len(&self, slot: usize) -> usize {
        self.lens[slot]
    }

    /// Number of slots in use.
    pub fn active(&self) -> usize {
        self.used.iter().filter(|u| **u).count()
    }

    /// Forgets everything of a slot after its first `n` positions (prefix reuse).
    pub fn truncate(&mut self, slot: usize, n: usize) {
        self.lens[slot] = self.lens[slot].min(n);
    }

    fn capacity(&self) -> i64 {
        self.k.first().map_or(0, |t| t.size()[2])
    }

    fn resize(&mut self, slots: i64, cap: i64) {
        let (nkv, hd, kind, dev) = (self.nkv, self.hd, self.kind, self.device);
        let grow = |old: &Tensor| {
            let s = old.size();
            let t = Tensor::zeros([slots, nkv, cap, hd], (kind, dev));
            if s[0] > 0 && s[2] > 0 {
                t.narrow(0, 0, s[0]).narrow(2, 0, s[2]).copy_(old);
            }
            t
        };
        self.k = self.k.iter().map(grow).collect();
        self.v = self.v.iter().map(grow).collect();
    }

    /// Makes room for `need` positions in every slot.
    fn reserve(&mut self, need: usize) {
        let cap = self.capacity();
        if need as i64 > cap {
            let slots = self.used.len() as i64;
            self.resize(slots, (need as i64).max(cap * 2).max(64));
        }
    }
}

/// How a checkpoint is written.
#[derive(Debug, Clone)]
pub struct SaveOptions {
    /// Tensor dtype in the files.
    pub kind: Kind,
    /// Largest shard, in bytes (HF's `max_shard_size`).
    pub max_shard_bytes: u64,
}

impl Default for SaveOptions {
    fn default() -> Self {
        SaveOptions { kind: Kind::Float, max_shard_bytes: 5 << 30 }
    }
}

pub struct Model {
    pub config: ModelConfig,
    pub vs: nn::VarStore,
    embed_tokens: Tensor,
    layers: Vec<Block>,
    norm: RmsNorm,
    lm_head: Option<Tensor>,
    /// The LM head's matrix in oneDNN's layout ([`Model::set_cpu_matmul`]).
    head_packed: Option<Tensor>,
    cpu_matmul: CpuMatmul,
    inv_freq: Tensor,
    device: Device,
    /// Autocast for the training and scoring forwards ([`Model::set_amp`]).
    amp: Option<AmpDtype>,
    /// The directory the base weights came from ([`Model::load`]).
    source: Option<std::path::PathBuf>,
    /// The adapter every training and scoring forward applies (id 0).
    attached: Option<Attached>,
    /// Adapters loaded by name for serving ([`Model::load_adapter`]).
    served: BTreeMap<String, Served>,
    next_adapter: u32,
}

/// The attached adapter: its config and its (trainable) tensors, by PEFT name.
struct Attached {
    cfg: LoraConfig,
    vs: nn::VarStore,
}

/// A served adapter.
struct Served {
    id: u32,
    cfg: LoraConfig,
    dir: std::path::PathBuf,
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
            inv_freq,
            device,
            amp: None,
            source: None,
            attached: None,
            served: BTreeMap::new(),
            next_adapter: 1,
        })
    }

    /// Strict load of a HF directory (single or sharded safetensors): every
    /// tensor the model has must be there with its shape, and nothing else.
    /// A LoRA adapter directory (PEFT's `adapter_config.json`) loads its base
    /// model (`base_model_name_or_path`) with the adapter attached
    /// ([`Model::load_lora`]).
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Model> {
        if lora::is_adapter(dir) {
            let base = lora::base_of(dir)?;
            let mut model = Model::load(&base, device, kind)?;
            model.load_lora(dir)?;
            return Ok(model);
        }
        let config = ModelConfig::from_file(&dir.join("config.json"))?;
        let mut model = tch::no_grad(|| Model::new(config, device, kind))?;
        model.reload(dir).with_context(|| format!("loading `{}`", dir.display()))?;
        model.source = Some(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()));
        Ok(model)
    }

    /// Every linear layer an adapter can target, with its name, layer index
    /// and module name.
    fn targets_mut(&mut self) -> Vec<(usize, &'static str, &mut Linear)> {
        let mut out = Vec::new();
        for (i, layer) in self.layers.iter_mut().enumerate() {
            let a = &mut layer.self_attn;
            out.push((i, "q_proj", &mut a.q_proj));
            out.push((i, "k_proj", &mut a.k_proj));
            out.push((i, "v_proj", &mut a.v_proj));
            out.push((i, "o_proj", &mut a.o_proj));
            let m = &mut layer.mlp;
            out.push((i, "gate_proj", &mut m.gate_proj));
            out.push((i, "up_proj", &mut m.up_proj));
            out.push((i, "down_proj", &mut m.down_proj));
        }
        out
    }

    /// Attaches a fresh LoRA adapter and freezes the base weights: A drawn
    /// as PEFT does (`kaiming_uniform_(a=√5)`: uniform in ±1/√in, from tch's
    /// global generator), B zero — the model computes exactly what the base
    /// does until B moves. Its tensors ([`Model::trainable_parameters`]) are
    /// what training updates; every training and scoring forward applies it
    /// (with dropout in [`Model::forward_backward_lean`]).
    pub fn add_lora(&mut self, cfg: &LoraConfig) -> Result<()> {
        if self.attached.is_some() {
            bail!("the model already has a LoRA adapter attached");
        }
        let (device, kind) = (self.device, self.kind());
        let vs = nn::VarStore::new(device);
        let root = vs.root();
        let scale = cfg.scale();
        let r = cfg.rank as i64;
        for (i, module, lin) in self.targets_mut() {
            if !cfg.targets.iter().any(|t| t == module) {
                continue;
            }
            let (out_dim, in_dim) = lin.w.size2().expect("[out, in]");
            let path = &root / "base_model" / "model" / "model" / "layers" / i / lora::parent_of(module) / module;
            let bound = 1.0 / (in_dim as f64).sqrt();
            let a = (&path / "lora_A").var("weight", &[r, in_dim], Init::Uniform { lo: -bound, up: bound });
            let b = (&path / "lora_B").var("weight", &[out_dim, r], Init::Const(0.0));
            lin.lora.push(LoraPair { id: 0, a, b, scale });
        }
        let mut vs = vs;
        if kind != Kind::Float {
            vs.set_kind(kind);
        }
        self.vs.freeze();
        self.attached = Some(Attached { cfg: cfg.clone(), vs });
        Ok(())
    }

    /// Attaches the adapter saved in `dir` ([`Model::add_lora`] with its
    /// config, then its tensors, each checked against this model first).
    pub fn load_lora(&mut self, dir: &Path) -> Result<()> {
        let (cfg, _) = lora::read_config(dir)?;
        let src = self.read_adapter(dir, &cfg)?;
        self.add_lora(&cfg)?;
        let vars = self.attached.as_ref().expect("attached").vs.variables();
        tch::no_grad(|| -> Result<()> {
            for (name, var) in &vars {
                let mut var = var.shallow_clone();
                var.f_copy_(&src[name].to_kind(var.kind()).to_device(self.device))?;
            }
            Ok(())
        })
    }

    /// The tensors of the adapter in `dir`, checked against this model: every
    /// matrix `cfg` implies present with the shape this model needs, nothing else.
    fn read_adapter(&self, dir: &Path, cfg: &LoraConfig) -> Result<std::collections::HashMap<String, Tensor>> {
        let file = dir.join(lora::ADAPTER_WEIGHTS);
        // Headers first (everything is checked before any tensor is read),
        // then each tensor read straight into its own memory.
        let src = weights::index_file(&file)?;
        let ctx = || format!("adapter `{}`", dir.display());
        let r = cfg.rank as i64;
        let mut want = BTreeMap::new();
        for (i, layer) in self.layers.iter().enumerate() {
            let (a, m) = (&layer.self_attn, &layer.mlp);
            for (module, lin) in [
                ("q_proj", &a.q_proj),
                ("k_proj", &a.k_proj),
                ("v_proj", &a.v_proj),
                ("o_proj", &a.o_proj),
                ("gate_proj", &m.gate_proj),
                ("up_proj", &m.up_proj),
                ("down_proj", &m.down_proj),
            ] {
                if cfg.targets.iter().any(|t| t == module) {
                    let (out_dim, in_dim) = lin.w.size2().expect("[out, in]");
                    want.insert(lora::key(i, module, 'A'), vec![r, in_dim]);
                    want.insert(lora::key(i, module, 'B'), vec![out_dim, r]);
                }
            }
        }
        for (name, shape) in &want {
            match src.get(name) {
                None => bail!("{}: tensor `{name}` is missing (this base model needs shape {shape:?})", ctx()),
                Some(e) if &e.shape != shape => bail!(
                    "{}: tensor `{name}` has shape {:?}, this base model needs {shape:?} — an adapter of another base model?",
                    ctx(),
                    e.shape
                ),
                Some(_) => {}
            }
        }
        let mut extra: Vec<&String> = src.keys().filter(|k| !want.contains_key(*k)).collect();
        if !extra.is_empty() {
            extra.sort();
            let n = extra.len();
            extra.truncate(3);
            bail!(
                "{}: {n} tensor(s) this model has no place for, e.g. {} — an adapter of another base model, or more layers?",
                ctx(),
                extra.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
            );
        }
        let mut f = std::fs::File::open(&file).with_context(|| format!("cannot read `{}`", file.display()))?;
        let mut out = std::collections::HashMap::new();
        for (name, e) in src {
            let t = Tensor::empty(e.shape.as_slice(), (e.kind, Device::Cpu));
            weights::read_into(&mut f, &e, &t)?;
            out.insert(name, t);
        }
        Ok(out)
    }

    /// The attached adapter's config.
    pub fn lora_config(&self) -> Option<&LoraConfig> {
        self.attached.as_ref().map(|a| &a.cfg)
    }

    /// What training updates, by checkpoint name in sorted order: the
    /// attached adapter's matrices when there is one, else every parameter.
    pub fn trainable_parameters(&self) -> BTreeMap<String, Tensor> {
        match &self.attached {
            Some(a) => a.vs.variables().into_iter().collect(),
            None => self.named_parameters(),
        }
    }

    /// Folds the attached adapter into the base weights (`W + s·B·A`, in
    /// float32, cast back) and detaches it: what [`Model::save`] then writes
    /// is an ordinary checkpoint.
    pub fn merge_lora(&mut self) -> Result<()> {
        if self.attached.is_none() {
            bail!("no LoRA adapter to merge");
        }
        tch::no_grad(|| {
            for (_, _, lin) in self.targets_mut() {
                if let Some(p) = lin.lora.iter().find(|p| p.id == 0) {
                    let w = lin.w.to_kind(Kind::Float)
                        + p.b.to_kind(Kind::Float).matmul(&p.a.to_kind(Kind::Float)) * p.scale;
                    lin.w.copy_(&w.to_kind(lin.w.kind()));
                }
                lin.lora.retain(|p| p.id != 0);
            }
        });
        self.attached = None;
        if self.cpu_matmul == CpuMatmul::OneDnn {
            self.repack();
        }
        Ok(())
    }

    /// Loads the adapter in `dir` for serving under `name` (replacing an
    /// adapter of that name: a new version). Everything is read and checked
    /// against this model before anything changes: on error the model
    /// serves what it served. Returns its id for [`Model::extend_with`].
    pub fn load_adapter(&mut self, name: &str, dir: &Path) -> Result<u32> {
        let (cfg, _) = lora::read_config(dir)?;
        let src = self.read_adapter(dir, &cfg)?;
        let id = self.served.get(name).map_or(self.next_adapter, |s| s.id);
        let (device, kind) = (self.device, self.kind());
        let scale = cfg.scale();
        let mut tensors = BTreeMap::new();
        for (k, t) in src {
            tensors.insert(k, t.to_kind(kind).to_device(device));
        }
        for (i, module, lin) in self.targets_mut() {
            lin.lora.retain(|p| p.id != id);
            if cfg.targets.iter().any(|t| t == module) {
                let a = tensors.remove(&lora::key(i, module, 'A')).expect("checked");
                let b = tensors.remove(&lora::key(i, module, 'B')).expect("checked");
                lin.lora.push(LoraPair { id, a, b, scale });
            }
        }
        if id == self.next_adapter {
            self.next_adapter += 1;
        }
        self.served.insert(name.to_string(), Served { id, cfg, dir: dir.to_path_buf() });
        Ok(id)
    }

    /// Drops a served adapter; false when there is none of that name.
    pub fn unload_adapter(&mut self, name: &str) -> bool {
        let Some(s) = self.served.remove(name) else { return false };
        for (_, _, lin) in self.targets_mut() {
            lin.lora.retain(|p| p.id != s.id);
        }
        true
    }

    /// The id of a served adapter.
    pub fn adapter_id(&self, name: &str) -> Option<u32> {
        self.served.get(name).map(|s| s.id)
    }

    /// The served adapters: name, directory, config.
    pub fn adapters(&self) -> Vec<(String, std::path::PathBuf, LoraConfig)> {
        self.served.iter().map(|(n, s)| (n.clone(), s.dir.clone(), s.cfg.clone())).collect()
    }

    /// What the training and scoring forwards apply.
    fn train_sel(&self, training: bool) -> Sel<'static> {
        match &self.attached {
            Some(a) => Sel::All { id: 0, dropout: if training { a.cfg.dropout } else { 0.0 } },
            None => Sel::Off,
        }
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn kind(&self) -> Kind {
        self.embed_tokens.kind()
    }

    /// Re-loads weights in place from a checkpoint of the same shape. Every
    /// tensor is read and checked before any is copied: on error nothing changes.
    pub fn reload(&mut self, dir: &Path) -> Result<()> {
        // Headers only first: every tensor is checked before any is read, and
        // each one is then read straight into its parameter (no copy of the
        // whole checkpoint in memory).
        let mut src = weights::index_all(dir)?;
        let vars = self.vs.variables();
        // Not parameters: HF may store rotary buffers; a tied head may be saved too.
        src.retain(|k, _| !k.ends_with("rotary_emb.inv_freq"));
        if self.config.tie_word_embeddings {
            src.remove("lm_head.weight");
        }
        let mut names: Vec<&String> = vars.keys().collect();
        names.sort();
        for name in &names {
            let want = vars[*name].size();
            match src.get(*name) {
                None => bail!("tensor `{name}` is missing from the checkpoint (model expects shape {want:?})"),
                Some(e) if e.shape != want => {
                    bail!("tensor `{name}`: checkpoint has shape {:?}, model expects {want:?}", e.shape)
                }
                Some(_) => {}
            }
        }
        let mut extra: Vec<&String> = src.keys().filter(|k| !vars.contains_key(*k)).collect();
        if !extra.is_empty() {
            extra.sort();
            bail!(
                "checkpoint has tensors the model does not: {}",
                extra.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
            );
        }
        // In file order, one open file at a time.
        let mut order: Vec<(&String, &weights::Entry)> = src.iter().collect();
        order.sort_by(|a, b| (&a.1.file, a.1.start).cmp(&(&b.1.file, b.1.start)));
        tch::no_grad(|| -> Result<()> {
            let mut open: Option<(std::path::PathBuf, std::fs::File)> = None;
            for (name, e) in order {
                if open.as_ref().is_none_or(|(p, _)| p != &e.file) {
                    let f =
                        std::fs::File::open(&e.file).with_context(|| format!("cannot read `{}`", e.file.display()))?;
                    open = Some((e.file.clone(), f));
                }
                let (_, f) = open.as_mut().expect("opened");
                weights::read_into(f, e, &vars[name])?;
            }
            Ok(())
        })?;
        // The packed copies follow the weights.
        if self.cpu_matmul == CpuMatmul::OneDnn {
            self.repack();
        }
        Ok(())
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
        if self.cpu_matmul == CpuMatmul::OneDnn {
            self.repack();
        }
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
        self.repack();
        Ok(())
    }

    /// The current [`CpuMatmul`].
    pub fn cpu_matmul(&self) -> CpuMatmul {
        self.cpu_matmul
    }

    /// (Re)builds or drops the packed copies for `self.cpu_matmul`.
    fn repack(&mut self) {
        let on = self.cpu_matmul == CpuMatmul::OneDnn;
        let pack = |l: &mut Linear| l.packed = on.then(|| onednn::pack(&l.w));
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
        self.head_packed = on.then(|| onednn::pack(self.lm_head.as_ref().unwrap_or(&self.embed_tokens)));
    }

    /// Named parameters in sorted order (lm_head absent when tied).
    pub fn named_parameters(&self) -> BTreeMap<String, Tensor> {
        self.vs.variables().into_iter().collect()
    }

    /// Writes `config.json`, `generation_config.json` and the weights into
    /// `dir` (which must exist) — or, with an adapter attached, the adapter
    /// alone in PEFT's format (`adapter_config.json` naming the base
    /// directory, `adapter_model.safetensors` in the adapter's own dtype).
    /// The caller makes the directory atomic.
    pub fn save(&self, dir: &Path, opts: &SaveOptions) -> Result<()> {
        if let Some(a) = &self.attached {
            let base = self.source.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            let cfg = serde_json::to_string_pretty(&a.cfg.to_json(&base))? + "\n";
            std::fs::write(dir.join(lora::ADAPTER_CONFIG), cfg).context("writing adapter_config.json")?;
            let params = self.trainable_parameters();
            return weights::write_file(&dir.join(lora::ADAPTER_WEIGHTS), &params, self.kind());
        }
        let params = self.named_parameters();
        weights::write_sharded(dir, &params, opts.kind, opts.max_shard_bytes)?;
        let cfg = self.config.to_checkpoint_json(weights::kind_name(opts.kind))?;
        std::fs::write(dir.join("config.json"), cfg).context("writing config.json")?;
        let mut gen = serde_json::Map::new();
        if let Some(b) = &self.config.bos_token_id {
            gen.insert("bos_token_id".into(), b.clone());
        }
        if let Some(e) = &self.config.eos_token_id {
            gen.insert("eos_token_id".into(), e.clone());
        }
        if let Some(p) = &self.config.pad_token_id {
            gen.insert("pad_token_id".into(), p.clone());
        }
        std::fs::write(dir.join("generation_config.json"), serde_json::to_string_pretty(&gen)? + "\n")
            .context("writing generation_config.json")?;
        Ok(())
    }

    /// cos and signed sin (first half negated, as [`apply_rope`] wants) for the
    /// given positions (any shape P) → [P…, head_dim], in `kind`.
    fn rope(&self, pos: &Tensor, kind: Kind) -> (Tensor, Tensor) {
        let freqs = pos.to_kind(Kind::Float).unsqueeze(-1) * &self.inv_freq;
        let sin = freqs.sin();
        let cos = freqs.cos();
        (Tensor::cat(&[&cos, &cos], -1).to_kind(kind), Tensor::cat(&[&sin.neg(), &sin], -1).to_kind(kind))
    }

    fn head(&self, x: &Tensor) -> Tensor {
        let x = self.norm.forward(x);
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

    fn autocast(&self) -> Option<Autocast> {
        // set_amp checked that this device can.
        self.amp.map(|d| Autocast::enter(self.device, d).expect("autocast"))
    }

    fn embed(&self, ids: &Tensor) -> Tensor {
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

    /// The LM head's matrix [V, H] (the embedding when tied).
    fn head_weight(&self) -> &Tensor {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// Rows `h` [N, H] (after the final norm) → the float32 log-prob of
    /// `targets` [N] under `softmax(logits / temperature)`, and the entropy
    /// `logsumexp(l) − Σ p·l` when asked: the formulas of [`token_logprobs`]
    /// and the trainer's entropy, one row at a time. Differentiable.
    fn head_scores(&self, h: &Tensor, targets: &Tensor, temperature: f64, entropy: bool) -> (Tensor, Option<Tensor>) {
        let l = h.linear::<Tensor>(self.head_weight(), None).to_kind(Kind::Float);
        let l = if temperature != 1.0 { l / temperature } else { l };
        let lse = l.logsumexp([-1i64].as_slice(), false);
        let logp = l.gather(-1, &targets.unsqueeze(-1), false).squeeze_dim(-1) - &lse;
        let ent = entropy.then(|| {
            let p = l.softmax(-1, Kind::Float);
            &lse - (p * &l).sum_dim_intlist([-1i64].as_slice(), false, Kind::Float)
        });
        (logp, ent)
    }

    /// [`Model::head_scores`] of `rows` [N, H] in chunks of `chunk` rows,
    /// without gradient: never more than one chunk's logits alive.
    fn head_scores_chunked(&self, rows: &Tensor, targets: &Tensor, o: &HeadOptions) -> (Tensor, Option<Tensor>) {
        let n = rows.size()[0];
        let chunk = o.chunk_rows(self.config.vocab_size) as i64;
        let want_ent = o.entropy != EntropyMode::Off;
        tch::no_grad(|| {
            let (mut lps, mut ents) = (Vec::new(), Vec::new());
            let mut at = 0;
            while at < n {
                let m = chunk.min(n - at);
                let (lp, ent) =
                    self.head_scores(&rows.narrow(0, at, m), &targets.narrow(0, at, m), o.temperature, want_ent);
                lps.push(lp);
                ents.extend(ent);
                at += m;
            }
            let cat = |v: Vec<Tensor>| {
                if v.is_empty() {
                    Tensor::zeros([0], (Kind::Float, self.device))
                } else {
                    Tensor::cat(&v, 0)
                }
            };
            (cat(lps), want_ent.then(|| cat(ents)))
        })
    }

    /// What a scored forward runs: the model's input row(s), positions,
    /// attention, and where each scored position's hidden state, target and
    /// output slot are. `needed` [B, T−1] (non-zero: score; `None`: all).
    fn plan(&self, ids: &Tensor, needed: Option<&Tensor>, layout: Layout<'_>) -> Plan {
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
    fn plan_trunk(&self, p: &Plan, keep_inputs: bool, sel: Sel<'_>) -> (Tensor, Option<Vec<Tensor>>, (Tensor, Tensor)) {
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
    fn plan_rows(&self, p: &Plan, x: &Tensor) -> Tensor {
        let h = match p.segments {
            None => self.norm.forward(&x.narrow(1, 0, p.t - 1)),
            Some(_) => self.norm.forward(x),
        };
        let width = h.size()[h.dim() - 1];
        h.reshape([-1, width]).index_select(0, &p.rows)
    }

    /// Scores of the plan's positions spread over [B, T−1] (0 elsewhere).
    fn spread(&self, v: &Tensor, p: &Plan) -> Tensor {
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

    /// Per-token log-probs of each next token (and the entropy when asked),
    /// [B, T−1] float32 (position p scores token p+1), without gradient and
    /// without the logits of the whole batch: the LM head runs over
    /// `o.chunk_tokens` positions at a time. `ids` [B, T] right-padded;
    /// `needed` [B, T−1] (non-zero: score it) skips the rest (prompt,
    /// padding), which read 0. With [`Layout::Packed`] the rows run
    /// concatenated, without padding (see [`Layout`]).
    pub fn token_scores(
        &self,
        ids: &Tensor,
        needed: Option<&Tensor>,
        layout: Layout<'_>,
        o: &HeadOptions,
    ) -> TokenScores {
        tch::no_grad(|| {
            let _amp = self.autocast();
            let ids = ids.to_device(self.device);
            let p = self.plan(&ids, needed, layout);
            let (x, _, _) = self.plan_trunk(&p, false, self.train_sel(false));
            let rows = self.plan_rows(&p, &x);
            let (lp, ent) = self.head_scores_chunked(&rows, &p.targets, o);
            TokenScores { logp: self.spread(&lp, &p), entropy: ent.map(|e| self.spread(&e, &p)) }
        })
    }

    /// Forward, `loss_of(scores).backward()`, all gradients accumulated,
    /// without ever holding the logits of the whole micro-batch: the scores
    /// ([`Model::token_scores`]'s, here leaves that take the loss's gradient)
    /// are computed chunk by chunk without a graph; after the loss's
    /// backward, each chunk's logits are recomputed with a graph and
    /// back-propagated with their share of that gradient (∂(scores·g)/∂θ),
    /// into the hidden states and the head; then the hidden states' gradient
    /// goes back through the model — the gradients of the plain forward, for
    /// one more pass through the LM head. The entropy takes part in the
    /// gradient only with [`EntropyMode::Grad`]. With `checkpointed`
    /// (activation checkpointing), the forward keeps only each block's input
    /// and the backward recomputes one block at a time, back-propagating the
    /// incoming gradient g through it as ∂(out·g)/∂θ — the same gradients for
    /// about one more forward, with one block's activations alive.
    #[allow(clippy::too_many_arguments)]
    pub fn forward_backward_lean(
        &self,
        ids: &Tensor,
        needed: Option<&Tensor>,
        layout: Layout<'_>,
        o: &HeadOptions,
        checkpointed: bool,
        loss_of: impl FnOnce(&TokenScores) -> Result<Tensor>,
    ) -> Result<()> {
        let _amp = self.autocast();
        let sel = self.train_sel(true);
        if checkpointed && matches!(sel, Sel::All { dropout, .. } if dropout > 0.0) {
            bail!("LoRA dropout with gradient checkpointing: the recomputed blocks would draw other dropout masks");
        }
        let ids = ids.to_device(self.device);
        let p = self.plan(&ids, needed, layout);
        // The last hidden states: with the trunk's graph, or (checkpointed)
        // a leaf, each block's input kept.
        let (x, inputs, (cos, sin)) = self.plan_trunk(&p, checkpointed, sel);
        let x = if checkpointed { x.detach().set_requires_grad(true) } else { x };
        let rows = self.plan_rows(&p, &x);
        let rows_leaf = rows.detach().set_requires_grad(true);
        let (lp, ent) = self.head_scores_chunked(&rows_leaf, &p.targets, o);
        let lp = lp.set_requires_grad(true);
        let ent_grad = o.entropy == EntropyMode::Grad;
        let ent = ent.map(|e| e.set_requires_grad(ent_grad));
        let scores = TokenScores { logp: self.spread(&lp, &p), entropy: ent.as_ref().map(|e| self.spread(e, &p)) };
        loss_of(&scores)?.backward();
        let n = p.rows.size()[0];
        if n == 0 {
            return Ok(());
        }
        let grad_of = |v: &Tensor| {
            let g = v.grad();
            g.defined().then_some(g)
        };
        let (g_lp, g_ent) = (grad_of(&lp), ent.as_ref().filter(|_| ent_grad).and_then(grad_of));
        if g_lp.is_none() && g_ent.is_none() {
            return Ok(());
        }
        let chunk = o.chunk_rows(self.config.vocab_size) as i64;
        let mut at = 0;
        while at < n {
            let m = chunk.min(n - at);
            let (lpc, entc) = self.head_scores(
                &rows_leaf.narrow(0, at, m),
                &p.targets.narrow(0, at, m),
                o.temperature,
                g_ent.is_some(),
            );
            let mut terms = Vec::with_capacity(2);
            if let Some(g) = &g_lp {
                terms.push((lpc * g.narrow(0, at, m)).sum(Kind::Float));
            }
            if let (Some(g), Some(e)) = (&g_ent, entc) {
                terms.push((e * g.narrow(0, at, m)).sum(Kind::Float));
            }
            Tensor::stack(&terms, 0).sum(Kind::Float).backward();
            at += m;
        }
        (rows * rows_leaf.grad()).sum(Kind::Float).backward();
        if let Some(inputs) = inputs {
            let mut g = x.grad();
            for (layer, xin) in self.layers.iter().zip(inputs).rev() {
                let xin = xin.detach().set_requires_grad(true);
                let out = layer.forward(&xin, &cos, &sin, sel, |a, q, k, v| p.attend(a, q, k, v));
                (out * &g).sum(Kind::Float).backward();
                g = xin.grad();
            }
            // (A frozen embedding — LoRA — takes no gradient.)
            if self.embed_tokens.requires_grad() {
                (self.embed(&p.input) * g).sum(Kind::Float).backward();
            }
        }
        Ok(())
    }

    /// An empty cache for this model (slots are claimed with [`KvCache::alloc`]).
    pub fn new_cache(&self) -> KvCache {
        let n = self.layers.len();
        let (nkv, hd) = (self.config.kv_heads() as i64, self.config.head_dim() as i64);
        let empty = || Tensor::zeros([0, nkv, 0, hd], (self.kind(), self.device));
        KvCache {
            k: (0..n).map(|_| empty()).collect(),
            v: (0..n).map(|_| empty()).collect(),
            rope: None,
            rope_len: 0,
            lens: vec![],
            used: vec![],
            nkv,
            hd,
            kind: self.kind(),
            device: self.device,
        }
    }

    /// Runs `ids` after what `slot` of `cache` holds, for one sequence; returns
    /// logits [len(ids), V] (float32) and appends to the slot.
    pub fn prefill(&self, cache: &mut KvCache, slot: usize, ids: &[i64]) -> Tensor {
        // One sequence: a list of one range, as `extend` takes one per sequence.
        #[allow(clippy::single_range_in_vec_init)]
        self.extend(cache, &[slot], &[ids], &[0..ids.len()])
    }

    /// One decode step for several sequences at once: `last[i]` is the newest
    /// token of the sequence in `slots[i]`. Slots may differ in length (masked).
    /// Returns logits [B, V] (float32) and appends to each slot.
    pub fn decode_step(&self, cache: &mut KvCache, slots: &[usize], last: &[i64]) -> Tensor {
        assert_eq!(slots.len(), last.len(), "one token per slot");
        let chunks: Vec<&[i64]> = last.iter().map(std::slice::from_ref).collect();
        let keep = vec![0..1; last.len()];
        self.extend(cache, slots, &chunks, &keep)
    }

    /// One batched forward of several sequences through the cache: chunk `i`
    /// runs after what `slots[i]` holds (its own length), all chunks padded on
    /// the right to the longest and masked per row, so a batched prefill and a
    /// decode step (chunks of one token) are the same code. Appends every
    /// chunk to its slot and returns the logits (float32) of rows `keep[i]` of
    /// each chunk, concatenated: [Σ len(keep[i]), V]. Only those rows go
    /// through the LM head.
    pub fn extend(
        &self,
        cache: &mut KvCache,
        slots: &[usize],
        chunks: &[&[i64]],
        keep: &[std::ops::Range<usize>],
    ) -> Tensor {
        self.extend_with(cache, slots, chunks, keep, &[])
    }

    /// [`Model::extend`] with a served adapter per sequence: `lora[i]` (an id
    /// from [`Model::load_adapter`]) for chunk i; `None`, or `lora` empty:
    /// the base (with the attached adapter, if any). Sequences of different
    /// adapters and of the base run in the same batch: each adapter's term is
    /// computed for its own rows only.
    pub fn extend_with(
        &self,
        cache: &mut KvCache,
        slots: &[usize],
        chunks: &[&[i64]],
        keep: &[std::ops::Range<usize>],
        lora: &[Option<u32>],
    ) -> Tensor {
        assert!(
            !slots.is_empty() && slots.len() == chunks.len() && chunks.len() == keep.len(),
            "one chunk and one row range per slot"
        );
        assert!(lora.is_empty() || lora.len() == slots.len(), "one adapter (or none) per slot");
        // Rows by adapter: the attached one (id 0) for rows without a served one.
        let mut groups: Vec<(u32, Vec<i64>)> = Vec::new();
        if lora.iter().any(Option::is_some) {
            for (i, l) in lora.iter().enumerate() {
                let id = match l {
                    Some(id) => *id,
                    None if self.attached.is_some() => 0,
                    None => continue,
                };
                match groups.iter_mut().find(|g| g.0 == id) {
                    Some(g) => g.1.push(i as i64),
                    None => groups.push((id, vec![i as i64])),
                }
            }
        }
        // Every row on one adapter (a rollout's usual batch): no row selection.
        let whole = match groups.as_slice() {
            [(id, rows)] if rows.len() == slots.len() => Some(*id),
            _ => None,
        };
        let groups: Vec<(u32, Tensor)> =
            groups.into_iter().map(|(id, rows)| (id, Tensor::from_slice(&rows).to_device(self.device))).collect();
        let sel = match whole {
            Some(id) => Sel::All { id, dropout: 0.0 },
            None if groups.is_empty() => self.train_sel(false),
            None => Sel::Rows(&groups),
        };
        tch::no_grad(|| {
            let dev = self.device;
            let b = slots.len() as i64;
            let ns: Vec<i64> = chunks.iter().map(|c| c.len() as i64).collect();
            let nmax = *ns.iter().max().unwrap_or(&1);
            assert!(nmax > 0, "empty chunk");
            let p0: Vec<i64> = slots.iter().map(|&s| cache.lens[s] as i64).collect();
            let lmax = p0.iter().zip(&ns).map(|(p, n)| p + n).max().unwrap_or(1);
            cache.reserve(lmax as usize);
            let ragged = ns.iter().any(|&n| n != nmax);
            let mut ids = Vec::with_capacity((b * nmax) as usize);
            let mut pos = Vec::with_capacity((b * nmax) as usize);
            for (c, &p) in chunks.iter().zip(&p0) {
                ids.extend_from_slice(c);
                ids.resize(pos.len() + nmax as usize, 0);
                pos.extend((0..nmax).map(|j| p + j));
            }
            let ids = Tensor::from_slice(&ids).to_device(dev).view([b, nmax]);
            let mut x = self.embed(&ids);
            let pos_t = Tensor::from_slice(&pos).to_device(dev).view([b, nmax]);
            // [B,T,1,hd] (broadcasts over heads), from the cache's table.
            let need = pos.iter().max().map_or(1, |&p| p as usize + 1);
            if cache.rope_len < need {
                let n = need.max(2 * cache.rope_len).max(64);
                let (c, s) = self.rope(&Tensor::arange(n as i64, (Kind::Int64, dev)), x.kind());
                cache.rope = Some((c, s));
                cache.rope_len = n;
            }
            let (cos, sin) = {
                let (c, s) = cache.rope.as_ref().expect("rope table");
                let at = |t: &Tensor| t.index_select(0, &pos_t.view([-1])).view([b, nmax, 1, -1]);
                (at(c), at(s))
            };
            // Row i, query j (absolute p0_i + j) sees keys 0..=p0_i + j. A padded
            // query sees keys nobody wrote; its output is never read. Additive
            // (0 / −inf, what SDPA makes of a boolean mask), made once per call
            // in the GQA-folded layout `Attention::attend` wants: [B,1,rep·T,L].
            // A decode step on the CPU in float32 takes `decode_attn` instead,
            // which reads each sequence's own length and needs no mask (libtorch's
            // flash attention, built for long query blocks, was slower at one query
            // row per sequence, with one thread or several).
            let fast = nmax == 1 && dev == Device::Cpu && cache.kind == Kind::Float;
            let lens_after: Vec<usize> = p0.iter().map(|&p| p as usize + 1).collect();
            let mask = (!fast).then(|| {
                let rep = self.config.num_attention_heads as i64 / cache.nkv;
                let allowed =
                    Tensor::arange(lmax, (Kind::Int64, dev)).view([1, 1, lmax]).le_tensor(&pos_t.unsqueeze(-1));
                let allowed =
                    allowed.unsqueeze(1).expand([b, rep, nmax, lmax], false).reshape([b, 1, rep * nmax, lmax]);
                Tensor::zeros([b, 1, rep * nmax, lmax], (x.kind(), dev))
                    .masked_fill(&allowed.logical_not(), f64::NEG_INFINITY)
            });
            // Where each real token's key goes: (slot, position), and its row in [B*T].
            let (mut w_slot, mut w_pos, mut w_row) = (Vec::new(), Vec::new(), Vec::new());
            for (i, (&s, (&p, &n))) in slots.iter().zip(p0.iter().zip(&ns)).enumerate() {
                for j in 0..n {
                    w_slot.push(s as i64);
                    w_pos.push(p + j);
                    w_row.push(i as i64 * nmax + j);
                }
            }
            let w_idx = [
                Some(Tensor::from_slice(&w_slot).to_device(dev)),
                None,
                Some(Tensor::from_slice(&w_pos).to_device(dev)),
            ];
            let w_row = ragged.then(|| Tensor::from_slice(&w_row).to_device(dev));
            let slot_ids: Vec<i64> = slots.iter().map(|&s| s as i64).collect();
            let slot_t = Tensor::from_slice(&slot_ids).to_device(dev);
            // Consecutive slots are read as a view; others are gathered.
            let first = slot_ids[0];
            let consecutive = slot_ids.iter().enumerate().all(|(i, &s)| s == first + i as i64);
            let (nkv, hd) = (cache.nkv, cache.hd);
            for (l, layer) in self.layers.iter().enumerate() {
                let (kc, vc) = (&mut cache.k[l], &mut cache.v[l]);
                x = layer.forward(&x, &cos, &sin, sel, |attn, q, k, v| {
                    // k, v [B,T,nkv,hd] → one row [nkv,hd] per real token.
                    let rows = |t: &Tensor| {
                        let flat = t.reshape([b * nmax, nkv, hd]);
                        match &w_row {
                            Some(r) => flat.index_select(0, r),
                            None => flat,
                        }
                    };
                    let _ = kc.index_put_(&w_idx, &rows(&k), false);
                    let _ = vc.index_put_(&w_idx, &rows(&v), false);
                    if fast {
                        return super::decode_attn::decode_attention(&q, kc, vc, slots, &lens_after);
                    }
                    let read = |c: &Tensor| {
                        if consecutive {
                            c.narrow(0, first, b).narrow(2, 0, lmax)
                        } else {
                            c.narrow(2, 0, lmax).index_select(0, &slot_t)
                        }
                    };
                    attn.attend(&q.transpose(1, 2), &read(kc), &read(vc), mask.as_ref(), true)
                });
            }
            for (&s, &n) in slots.iter().zip(&ns) {
                cache.lens[s] += n as usize;
            }
            // Only the kept rows go through the final norm and the LM head.
            let all_rows = keep.iter().zip(&ns).all(|(r, &n)| r.start == 0 && r.end as i64 == n) && !ragged;
            let h = x.reshape([b * nmax, -1]);
            let h = if all_rows {
                h
            } else {
                let idx: Vec<i64> = keep
                    .iter()
                    .enumerate()
                    .flat_map(|(i, r)| r.clone().map(move |j| i as i64 * nmax + j as i64))
                    .collect();
                h.index_select(0, &Tensor::from_slice(&idx).to_device(dev))
            };
            self.head(&h)
        })
    }
}

/// Whether [`Model::token_scores`] and [`Model::forward_backward_lean`]
/// compute the entropy, and whether it takes part in the gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntropyMode {
    Off,
    /// Values only (for metrics).
    Value,
    /// Values, and its gradient flows (an entropy bonus in the loss).
    Grad,
}

/// How the LM head is scored.
#[derive(Debug, Clone, Copy)]
pub struct HeadOptions {
    /// Sampling temperature: scores are of `softmax(logits / temperature)`.
    pub temperature: f64,
    /// Positions through the LM head at a time; 0: [`HeadOptions::auto_chunk`].
    pub chunk_tokens: usize,
    pub entropy: EntropyMode,
}

impl HeadOptions {
    /// Positions per chunk when unsaid: about 64M float32 logits (256 MB) a
    /// chunk — 441 positions at Qwen's 151,936 entries, 1,365 at SmolLM2's
    /// 49,152 — at least 16.
    pub fn auto_chunk(vocab: usize) -> usize {
        ((1usize << 26) / vocab.max(1)).max(16)
    }

    fn chunk_rows(&self, vocab: usize) -> usize {
        if self.chunk_tokens == 0 {
            Self::auto_chunk(vocab)
        } else {
            self.chunk_tokens
        }
    }
}

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
struct Plan {
    /// [B, T] (padded) or [1, N] (packed).
    input: Tensor,
    /// Positions for RoPE: [T, 1] or [N, 1].
    pos: Tensor,
    /// Packed: each sample's length, in order.
    segments: Option<Vec<i64>>,
    /// Scored positions: their rows among the hidden states (padded: of
    /// [B·(T−1)]; packed: of [N]), next tokens, and slots in [B·(T−1)].
    rows: Tensor,
    targets: Tensor,
    slots: Tensor,
    b: i64,
    t: i64,
}

impl Plan {
    /// Causal self-attention of a step's q, k, v [B, T, ·, hd]: the whole
    /// rows (padded), or each packed sample on its own.
    fn attend(&self, a: &Attention, q: Tensor, k: Tensor, v: Tensor) -> Tensor {
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

/// Per-token scores of next tokens, [B, T−1] float32 (position p scores
/// token p+1; 0 where not scored).
pub struct TokenScores {
    pub logp: Tensor,
    pub entropy: Option<Tensor>,
}

/// Log-probability of each chosen token: `log_softmax(logits.float() / temperature)`
/// at `ids`. `logits` [..., V], `ids` [...] → [...] float32. Trainer and server
/// both use this, so their log-probs agree.
pub fn token_logprobs(logits: &Tensor, ids: &Tensor, temperature: f64) -> Tensor {
    let l = logits.to_kind(Kind::Float);
    let l = if temperature != 1.0 { l / temperature } else { l };
    let ids = ids.to_device(l.device()).to_kind(Kind::Int64).unsqueeze(-1);
    // gather − logsumexp: the same value as log_softmax without materialising it.
    l.gather(-1, &ids, false).squeeze_dim(-1) - l.logsumexp([-1i64].as_slice(), false)
}
