//! A decode step of a float32 model on the CPU in plain loops over the
//! weights and the cache, with no libtorch operator between them.
//!
//! A step at one sequence is a few hundred small operations (per layer two
//! norms, the projections, RoPE, two cache stores, the attention, SwiGLU,
//! two residual adds). Through libtorch each is a dispatch, a tensor and an
//! allocation: on SmolLM2-135M (30 layers) about a third of a one-request
//! step was that, beside the products themselves. Here the products go
//! through [`gemv`] on the weights [`Model::set_decode_matmul`] chose (the
//! float32 ones or their bf16 copies), the attention through
//! [`decode_attn`], and the rest are loops over rows of a few hundred
//! floats, in float32, with the formulas of the libtorch path
//! ([`RmsNorm`], `apply_rope`, SwiGLU): the same values up to the order of
//! the sums (`native_matches_libtorch`).
use super::cache::KvCache;
use super::linear::Linear;
use super::norm::RmsNorm;
use super::Model;
use crate::decode_attn::{self, Dims};
use crate::gemv::{self, DecodeMatmul, Weights};
use tch::{Device, Kind, Tensor};

/// A CPU float32 tensor's values (panics on another kind, device or a
/// non-contiguous layout). SAFETY (caller): nothing writes `t` while the
/// slice lives.
unsafe fn floats(t: &Tensor) -> &[f32] {
    assert!(
        t.kind() == Kind::Float && t.is_contiguous() && t.device() == Device::Cpu,
        "a contiguous CPU float32 tensor"
    );
    std::slice::from_raw_parts(t.data_ptr() as *const f32, t.numel())
}

/// The weights [`gemv`] reads for `w` (float32 or bf16). SAFETY: as [`floats`].
unsafe fn weights(w: &Tensor) -> Weights<'_> {
    match w.kind() {
        Kind::BFloat16 => {
            assert!(w.is_contiguous() && w.device() == Device::Cpu, "contiguous CPU bf16 weights");
            Weights::Bf16(std::slice::from_raw_parts(w.data_ptr() as *const u16, w.numel()))
        }
        _ => Weights::F32(floats(w)),
    }
}

/// `y` [m, out] = `x` [m, in] through `l`'s decode weights and bias.
fn project(l: &Linear, x: &[f32], m: usize, y: &mut Vec<f32>) {
    let w = l.small.as_ref().expect("decode weights (checked by native_ok)");
    let (n, k) = w.size2().expect("[out, in]");
    let (n, k) = (n as usize, k as usize);
    y.resize(m * n, 0.0);
    // SAFETY: the model's own CPU tensors (float32, or the bf16 copies),
    // contiguous as made, not written during a forward.
    unsafe {
        let b = l.b.as_ref().map(|b| floats(b));
        gemv::product(x, m, k, weights(w), n, b, y, threads());
    }
}

fn threads() -> usize {
    tch::get_num_threads().max(1) as usize
}

/// `out` = RMSNorm of each `dim`-long row of `x`, as [`RmsNorm::forward`]
/// in float32: `w · x / √(mean(x²) + eps)`.
fn rms_norm(n: &RmsNorm, x: &[f32], dim: usize, out: &mut Vec<f32>) {
    // SAFETY: as in `project`.
    let w = unsafe { floats(&n.w) };
    out.resize(x.len(), 0.0);
    for (xr, or) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let ss: f32 = sum_squares(xr);
        let r = 1.0 / (ss / dim as f32 + n.eps as f32).sqrt();
        for ((o, &v), &g) in or.iter_mut().zip(xr).zip(w) {
            *o = g * (v * r);
        }
    }
}

/// Σ v², in 8 lanes (one accumulator would wait on each add).
fn sum_squares(x: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
    for c in chunks {
        for j in 0..8 {
            acc[j] += c[j] * c[j];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// RoPE on one head `x` in place: `x·cos + roll(x, hd/2)·sin`, the sin
/// signed as the table holds it (`apply_rope`).
fn rope(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = x.len() / 2;
    let (a, b) = x.split_at_mut(half);
    for i in 0..half {
        let (x1, x2) = (a[i], b[i]);
        a[i] = x1 * cos[i] + x2 * sin[i];
        b[i] = x2 * cos[half + i] + x1 * sin[half + i];
    }
}

impl Model {
    /// Turns [`Model::decode_native`] off (`false`) or back on, to compare
    /// it with the libtorch path (tests, benchmarks). On by default.
    pub fn set_native_decode(&mut self, on: bool) {
        self.native_decode = on;
    }

    /// Whether a decode step takes [`Model::decode_native`]: a float32 model
    /// on the CPU with arl's decode products chosen and built, no adapter
    /// attached. (A step of more than [`gemv::MAX_ROWS`] sequences runs in
    /// parts.)
    pub(super) fn native_ok(&self) -> bool {
        self.native_decode
            && self.device == Device::Cpu
            && self.kind() == Kind::Float
            && self.decode_matmul != DecodeMatmul::Blas
            && self.attached.is_none()
            && self.head_small.is_some()
    }

    /// One decode step (`last[i]` after what slot `slots[i]` holds) in plain
    /// loops (see the module docs): appends to each slot and returns the
    /// logits [B, V] float32. `None` (nothing done) when a token id is out of
    /// the vocabulary: the libtorch path then raises its own error.
    pub(super) fn decode_native(&self, cache: &mut KvCache, slots: &[usize], last: &[i64]) -> Option<Tensor> {
        let cfg = &self.config;
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        let (nh, nkv, hd) = (cfg.num_attention_heads, cfg.kv_heads(), cfg.head_dim());
        if last.iter().any(|&t| t < 0 || t as usize >= v) {
            return None;
        }
        let b = slots.len();
        assert!(b as i64 <= gemv::MAX_ROWS, "a native step takes at most {} sequences", gemv::MAX_ROWS);
        let pos: Vec<usize> = slots.iter().map(|&s| cache.lens[s]).collect();
        let lens_after: Vec<usize> = pos.iter().map(|p| p + 1).collect();
        let need = lens_after.iter().copied().max().unwrap_or(1);
        cache.reserve(need);
        let (cos_t, sin_t) = self.rope_table(cache, need, Kind::Float);
        let cap = cache.k.first().map_or(0, |t| t.size()[2] as usize);
        let dims = Dims { nh, rep: nh / nkv, nkv, cap, hd };
        // SAFETY: the embedding, norms, rope table are this model's (or its
        // cache's) contiguous float32 CPU tensors, read only here.
        let (embed, cos, sin) = unsafe { (floats(&self.embed_tokens), floats(&cos_t), floats(&sin_t)) };
        let mut x: Vec<f32> =
            last.iter().flat_map(|&t| &embed[t as usize * h..(t as usize + 1) * h]).copied().collect();
        let (mut hb, mut y, mut q, mut k, mut vv, mut att, mut o) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), vec![0f32; b * nh * hd], Vec::new());
        // Scratch: the q/k norms' output, the separate gate projection's.
        let (mut t, mut gate) = (Vec::new(), Vec::new());
        let (nq, nk) = (nh * hd, nkv * hd);
        for (l, layer) in self.layers.iter().enumerate() {
            let a = &layer.self_attn;
            rms_norm(&layer.input_layernorm, &x, h, &mut hb);
            match &a.qkv_proj {
                Some(f) => {
                    project(f, &hb, b, &mut y);
                    let w = nq + 2 * nk;
                    q.clear();
                    k.clear();
                    vv.clear();
                    for r in y.chunks_exact(w) {
                        q.extend_from_slice(&r[..nq]);
                        k.extend_from_slice(&r[nq..nq + nk]);
                        vv.extend_from_slice(&r[nq + nk..]);
                    }
                }
                None => {
                    project(&a.q_proj, &hb, b, &mut q);
                    project(&a.k_proj, &hb, b, &mut k);
                    project(&a.v_proj, &hb, b, &mut vv);
                }
            }
            if let (Some(qn), Some(kn)) = (&a.q_norm, &a.k_norm) {
                rms_norm(qn, &q, hd, &mut t);
                std::mem::swap(&mut q, &mut t);
                rms_norm(kn, &k, hd, &mut t);
                std::mem::swap(&mut k, &mut t);
            }
            for (i, &p) in pos.iter().enumerate() {
                let (c, s) = (&cos[p * hd..(p + 1) * hd], &sin[p * hd..(p + 1) * hd]);
                q[i * nq..(i + 1) * nq].chunks_exact_mut(hd).for_each(|x| rope(x, c, s));
                k[i * nk..(i + 1) * nk].chunks_exact_mut(hd).for_each(|x| rope(x, c, s));
            }
            let (kc, vc) = (&cache.k[l], &cache.v[l]);
            assert!(kc.is_contiguous() && vc.is_contiguous() && kc.kind() == Kind::Float);
            let n = kc.numel();
            // SAFETY: the cache's own contiguous float32 CPU tensors of
            // `n` elements, [slots, nkv, cap, hd]; this step is their only
            // user (`&mut KvCache`), and each write is inside (the slot
            // exists, `pos < cap` after `reserve`).
            let (ks, vs) = unsafe {
                (
                    std::slice::from_raw_parts_mut(kc.data_ptr() as *mut f32, n),
                    std::slice::from_raw_parts_mut(vc.data_ptr() as *mut f32, n),
                )
            };
            for (i, (&s, &p)) in slots.iter().zip(&pos).enumerate() {
                for g in 0..nkv {
                    let at = ((s * nkv + g) * cap + p) * hd;
                    let from = i * nk + g * hd;
                    ks[at..at + hd].copy_from_slice(&k[from..from + hd]);
                    vs[at..at + hd].copy_from_slice(&vv[from..from + hd]);
                }
            }
            decode_attn::attend(&q, ks, vs, slots, &lens_after, &dims, &mut att);
            project(&a.o_proj, &att, b, &mut o);
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
            rms_norm(&layer.post_attention_layernorm, &x, h, &mut hb);
            let m = &layer.mlp;
            let act = match &m.gate_up_proj {
                Some(f) => {
                    project(f, &hb, b, &mut y);
                    let i = y.len() / b / 2;
                    y.chunks_exact(2 * i).flat_map(|r| r[..i].iter().zip(&r[i..]).map(|(&g, &u)| silu(g) * u)).collect()
                }
                None => {
                    project(&m.gate_proj, &hb, b, &mut gate);
                    project(&m.up_proj, &hb, b, &mut y);
                    gate.iter().zip(&y).map(|(&g, &u)| silu(g) * u).collect::<Vec<f32>>()
                }
            };
            project(&m.down_proj, &act, b, &mut o);
            x.iter_mut().zip(&o).for_each(|(x, o)| *x += o);
        }
        for (&s, len) in slots.iter().zip(lens_after) {
            cache.lens[s] = len;
        }
        rms_norm(&self.norm, &x, h, &mut hb);
        let head = self.head_small.as_ref().expect("checked by native_ok");
        let logits = Tensor::empty([b as i64, v as i64], (Kind::Float, Device::Cpu));
        // SAFETY: `logits` is fresh, contiguous float32 [b, v], written only
        // here; the head's weights as in `project`.
        unsafe {
            let out = std::slice::from_raw_parts_mut(logits.data_ptr() as *mut f32, b * v);
            gemv::product(&hb, b, h, weights(head), v, None, out, threads());
        }
        Some(logits)
    }
}

/// `x·σ(x)`, as libtorch's `silu`.
fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}
