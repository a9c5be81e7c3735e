//! Decode-step attention on the CPU in float32: one new query per sequence
//! against its own slot of the KV cache, read in place.
//!
//! libtorch's CPU SDPA is a flash-attention kernel built for long query
//! blocks: at decode time (one query row per head) it makes two small MKL
//! GEMM calls per (sequence, head) and per layer, and their setup cost was
//! half of `arl-serve`'s decode step on small models. Here each (sequence,
//! head) is a dot product per cached position, a softmax and a weighted sum
//! of the values — the same formula (`softmax(q·kᵀ/√d)·v`) in float32, with
//! no padding to the longest sequence and no mask. Tested against SDPA
//! (`matches_sdpa`). The exponential is a Cephes-style polynomial (within
//! 2.5e-7 relative, about 2 ulp in float32), so that its loop vectorises.
//! With several intra-op threads the sequences are split between them.
use crate::spin_pool::{Pool, SyncPtr};
use tch::{Device, Kind, Tensor};

/// `q` [B,1,nh,hd] (any strides) for the sequences in cache slots `slots`,
/// each attending to its first `lens[i]` positions of `k`, `v`
/// [slots, nkv, cap, hd] (contiguous; kv head g serves query heads
/// g·rep..(g+1)·rep). Returns [B,1,nh·hd] float32, what o_proj reads.
/// Callers: CPU, float32, one query per sequence.
pub fn decode_attention(q: &Tensor, k: &Tensor, v: &Tensor, slots: &[usize], lens: &[usize]) -> Tensor {
    let (b, t, nh, hd) = q.size4().expect("q [B,1,nh,hd]");
    let (ns, nkv, cap, hd2) = k.size4().expect("cache [S,nkv,cap,hd]");
    assert!(
        t == 1 && hd == hd2 && v.size() == k.size(),
        "decode attention shapes: q {:?}, k {:?}, v {:?}",
        q.size(),
        k.size(),
        v.size()
    );
    assert!(q.device() == Device::Cpu && q.kind() == Kind::Float && k.kind() == Kind::Float && v.kind() == Kind::Float);
    assert!(k.is_contiguous() && v.is_contiguous(), "the cache is contiguous");
    assert!(slots.len() == b as usize && lens.len() == b as usize && nh % nkv == 0);
    assert!(slots.iter().zip(lens).all(|(&s, &l)| (s as i64) < ns && l as i64 <= cap && l > 0));
    let q = q.contiguous();
    let dims =
        Dims { nh: nh as usize, rep: (nh / nkv) as usize, nkv: nkv as usize, cap: cap as usize, hd: hd as usize };
    let n = (ns * nkv * cap * hd) as usize;
    // SAFETY: float32 CPU tensors, contiguous (asserted above; `q` made so),
    // alive for this call, and nothing writes them while we read.
    let (qs, ks, vs) = unsafe {
        (
            std::slice::from_raw_parts(q.data_ptr() as *const f32, (b * nh * hd) as usize),
            std::slice::from_raw_parts(k.data_ptr() as *const f32, n),
            std::slice::from_raw_parts(v.data_ptr() as *const f32, n),
        )
    };
    let mut out = vec![0f32; (b * nh * hd) as usize];
    attend(qs, ks, vs, slots, lens, &dims, &mut out);
    Tensor::from_slice(&out).view([b, 1, nh * hd])
}

/// [`decode_attention`] on slices: `qs` [B,nh,hd], `ks`, `vs` the cache
/// [slots, nkv, cap, hd], `out` [B,nh·hd]. The sequences split over as many
/// threads as libtorch's intra-op setting when there is enough to do
/// (handing a part to the pool's spinning thread costs about a microsecond).
pub(crate) fn attend(qs: &[f32], ks: &[f32], vs: &[f32], slots: &[usize], lens: &[usize], d: &Dims, out: &mut [f32]) {
    assert!(qs.len() == slots.len() * d.nh * d.hd && out.len() == qs.len() && ks.len() == vs.len());
    assert!(slots.len() == lens.len() && d.nh == d.rep * d.nkv);
    assert!(slots.iter().zip(lens).all(|(&s, &l)| (s + 1) * d.nkv * d.cap * d.hd <= ks.len() && l <= d.cap && l > 0));
    let work: usize = lens.iter().sum::<usize>() * d.nh * d.hd;
    let threads = if work < PARALLEL_WORK { 1 } else { tch::get_num_threads().max(1) as usize };
    run_split(qs, ks, vs, slots, lens, d, out, threads);
}

/// Cached positions × query heads × head size below which one thread does it all.
const PARALLEL_WORK: usize = 1 << 15;

/// [`run`] with the sequences split into `threads` runs of consecutive
/// sequences, one per part of a [`Pool`] job (the first on this thread):
/// the pool's threads stay alive between layers, where a scoped thread per
/// layer cost its start and, on a machine with as many busy threads as
/// cores, a wait for one.
#[allow(clippy::too_many_arguments)]
fn run_split(
    qs: &[f32],
    ks: &[f32],
    vs: &[f32],
    slots: &[usize],
    lens: &[usize],
    d: &Dims,
    out: &mut [f32],
    threads: usize,
) {
    let b = slots.len();
    let threads = threads.clamp(1, b.max(1));
    if threads == 1 {
        return run(qs, ks, vs, slots, lens, d, out);
    }
    let pool = Pool::global();
    let threads = threads.min(pool.width());
    let per = b.div_ceil(threads);
    let row = d.nh * d.hd;
    let dst = SyncPtr::new(out.as_mut_ptr());
    pool.run(b.div_ceil(per), &|p| {
        let (s, e) = (p * per, ((p + 1) * per).min(b));
        // SAFETY: part p writes rows s..e of `out` only, disjoint from the
        // others'; `out` outlives the job (`run` waits for every part).
        let oc = unsafe { std::slice::from_raw_parts_mut(dst.get().add(s * row), (e - s) * row) };
        run(&qs[s * row..e * row], ks, vs, &slots[s..e], &lens[s..e], d, oc);
    });
}

/// Query heads, query heads per kv head, kv heads, the cache's capacity
/// (positions per slot) and the head size.
pub(crate) struct Dims {
    pub(crate) nh: usize,
    pub(crate) rep: usize,
    pub(crate) nkv: usize,
    pub(crate) cap: usize,
    pub(crate) hd: usize,
}

fn run(qs: &[f32], ks: &[f32], vs: &[f32], slots: &[usize], lens: &[usize], d: &Dims, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked).
        unsafe {
            match d.hd {
                8 => return avx::heads::<1, 4>(qs, ks, vs, slots, lens, d, out),
                16 => return avx::heads::<2, 4>(qs, ks, vs, slots, lens, d, out),
                32 => return avx::heads::<4, 2>(qs, ks, vs, slots, lens, d, out),
                64 => return avx::heads::<8, 1>(qs, ks, vs, slots, lens, d, out),
                128 => return avx::heads::<16, 1>(qs, ks, vs, slots, lens, d, out),
                _ => {}
            }
        }
    }
    heads(qs, ks, vs, slots, lens, d, out)
}

/// Exponentiates `s` in place after subtracting its max; answers 1 / their
/// sum. (Max and sum in 8 lanes: a float reduction in one accumulator waits
/// on the previous add at every element.)
#[inline(always)]
fn softmax_unnormalised(s: &mut [f32]) -> f32 {
    let mut mx = [f32::NEG_INFINITY; 8];
    let chunks = s.chunks_exact(8);
    let mut m = chunks.remainder().iter().copied().fold(f32::NEG_INFINITY, f32::max);
    for c in chunks {
        for j in 0..8 {
            mx[j] = mx[j].max(c[j]);
        }
    }
    m = mx.iter().copied().fold(m, f32::max);
    for sp in s.iter_mut() {
        *sp = exp(*sp - m);
    }
    let mut acc = [0f32; 8];
    let chunks = s.chunks_exact(8);
    let rest: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for j in 0..8 {
            acc[j] += c[j];
        }
    }
    1.0 / (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + rest)
}

/// Every (sequence, query head), any head size, plain Rust.
fn heads(qs: &[f32], ks: &[f32], vs: &[f32], slots: &[usize], lens: &[usize], d: &Dims, out: &mut [f32]) {
    let hd = d.hd;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut scores = vec![0f32; lens.iter().copied().max().unwrap_or(0)];
    for (i, (&slot, &len)) in slots.iter().zip(lens).enumerate() {
        for h in 0..d.nh {
            let base = (slot * d.nkv + h / d.rep) * d.cap * hd;
            let (keys, values) = (&ks[base..base + len * hd], &vs[base..base + len * hd]);
            let row = (i * d.nh + h) * hd..(i * d.nh + h + 1) * hd;
            let s = &mut scores[..len];
            for (sp, kp) in s.iter_mut().zip(keys.chunks_exact(hd)) {
                *sp = dot(&qs[row.clone()], kp) * scale;
            }
            let inv = softmax_unnormalised(s);
            let o = &mut out[row];
            for (&w, vp) in s.iter().zip(values.chunks_exact(hd)) {
                for (od, &vd) in o.iter_mut().zip(vp) {
                    *od += w * vd;
                }
            }
            for od in o.iter_mut() {
                *od *= inv;
            }
        }
    }
}

/// AVX2 + FMA, head size `8·C`: the query and the output row in `C`
/// registers each; the scores of 8 positions at a time, their 8 sums
/// reduced together (hadd) rather than one horizontal sum per position; the
/// values summed in `U` interleaved sets of accumulators (independent FMA
/// chains instead of one that waits on itself).
#[cfg(target_arch = "x86_64")]
mod avx {
    use super::{softmax_unnormalised, Dims};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn heads<const C: usize, const U: usize>(
        qs: &[f32],
        ks: &[f32],
        vs: &[f32],
        slots: &[usize],
        lens: &[usize],
        d: &Dims,
        out: &mut [f32],
    ) {
        let hd = 8 * C;
        debug_assert_eq!(hd, d.hd);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut scores = vec![0f32; lens.iter().copied().max().unwrap_or(0)];
        for (i, (&slot, &len)) in slots.iter().zip(lens).enumerate() {
            for h in 0..d.nh {
                let base = (slot * d.nkv + h / d.rep) * d.cap * hd;
                let (keys, values) = (&ks[base..base + len * hd], &vs[base..base + len * hd]);
                let row = (i * d.nh + h) * hd;
                let qrow = &qs[row..row + hd];
                let q: [__m256; C] = std::array::from_fn(|c| _mm256_loadu_ps(qrow[8 * c..].as_ptr()));
                let dot = |kp: &[f32]| {
                    let mut acc = _mm256_setzero_ps();
                    for c in 0..C {
                        acc = _mm256_fmadd_ps(q[c], _mm256_loadu_ps(kp[8 * c..8 * c + 8].as_ptr()), acc);
                    }
                    acc
                };
                let s = &mut scores[..len];
                let mut p = 0;
                while p + 8 <= len {
                    let blk = &keys[p * hd..(p + 8) * hd];
                    let a: [__m256; 8] = std::array::from_fn(|j| dot(&blk[j * hd..(j + 1) * hd]));
                    let u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
                    let u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
                    let sums =
                        _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
                    _mm256_storeu_ps(s[p..p + 8].as_mut_ptr(), _mm256_mul_ps(sums, _mm256_set1_ps(scale)));
                    p += 8;
                }
                for (j, sp) in s.iter_mut().enumerate().skip(p) {
                    *sp = hsum(dot(&keys[j * hd..(j + 1) * hd])) * scale;
                }
                let inv = softmax_unnormalised(s);
                let mut o = [[_mm256_setzero_ps(); C]; U];
                let mut p = 0;
                while p + U <= len {
                    for u in 0..U {
                        let w = _mm256_set1_ps(s[p + u]);
                        let vp = &values[(p + u) * hd..(p + u + 1) * hd];
                        for c in 0..C {
                            o[u][c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp[8 * c..8 * c + 8].as_ptr()), o[u][c]);
                        }
                    }
                    p += U;
                }
                for j in p..len {
                    let w = _mm256_set1_ps(s[j]);
                    let vp = &values[j * hd..(j + 1) * hd];
                    for c in 0..C {
                        o[0][c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp[8 * c..8 * c + 8].as_ptr()), o[0][c]);
                    }
                }
                let o: [__m256; C] = std::array::from_fn(|c| (1..U).fold(o[0][c], |a, u| _mm256_add_ps(a, o[u][c])));
                let dst = &mut out[row..row + hd];
                for c in 0..C {
                    _mm256_storeu_ps(dst[8 * c..8 * c + 8].as_mut_ptr(), _mm256_mul_ps(o[c], _mm256_set1_ps(inv)));
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }
}

/// Dot product in 8 partial sums (so the loop vectorises).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ar.iter().zip(br) {
        s += x * y;
    }
    s
}

/// eˣ for x ≤ 0 (softmax after subtracting the max), Cephes' `expf`
/// scheme: x = n·ln2 + r, |r| ≤ ln2/2, eʳ = 1 + r + r²·p(r) with p of degree 5, then
/// 2ⁿ through the exponent bits. Branch-free (rounding by the 1.5·2²³
/// trick), so it vectorises; within 2.5e-7 relative (tested); x is
/// clamped at −87 (e⁻⁸⁷ ≈ 1.6e-38, nothing next to the max's 1).
#[inline(always)]
fn exp(x: f32) -> f32 {
    let x = x.max(-87.0);
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2²³
    let t = x * std::f32::consts::LOG2_E + ROUND;
    let n = t - ROUND;
    let r = x - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let p = 1.987_569_1e-4_f32;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 5e-1;
    let e = p * (r * r) + r + 1.0;
    let pow2 = f32::from_bits(((n as i32 + 127) as u32) << 23);
    e * pow2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_two_ulp_of_std() {
        let mut worst = 0f32;
        for i in 0..=200_000 {
            let x = -87.0 * i as f32 / 200_000.0;
            let (a, b) = (exp(x), x.exp());
            worst = worst.max((a - b).abs() / b);
        }
        assert!(worst < 2.5e-7, "relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-1e9) < 1e-37);
    }

    /// Split over threads, every sequence gets exactly what one thread gives it.
    #[test]
    fn threads_split_the_sequences_without_changing_them() {
        let d = Dims { nh: 4, rep: 2, nkv: 2, cap: 50, hd: 16 };
        let mut rng = arl_test_rng(11);
        let n = 7 * d.nkv * d.cap * d.hd;
        let (ks, vs): (Vec<f32>, Vec<f32>) = (0..n).map(|_| (rng(), rng())).unzip();
        let slots = [6usize, 0, 3, 2, 5];
        let lens = [50usize, 1, 33, 8, 20];
        let qs: Vec<f32> = (0..slots.len() * d.nh * d.hd).map(|_| rng()).collect();
        let mut one = vec![0f32; qs.len()];
        run_split(&qs, &ks, &vs, &slots, &lens, &d, &mut one, 1);
        for threads in [2, 3, 5, 9] {
            let mut split = vec![0f32; qs.len()];
            run_split(&qs, &ks, &vs, &slots, &lens, &d, &mut split, threads);
            assert_eq!(split, one, "{threads} threads");
        }
        assert!(one.iter().all(|x| x.is_finite()) && one.iter().any(|&x| x != 0.0));
    }

    /// Uniform in [-1, 1), from a seed (xorshift).
    fn arl_test_rng(seed: u64) -> impl FnMut() -> f32 {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }
    }

    #[test]
    fn matches_sdpa() {
        tch::manual_seed(7);
        // 3 sequences in slots 4, 0, 2 of a 5-slot cache of capacity 40, GQA 6 query heads on 2 kv heads, hd 16 and 12.
        for hd in [16i64, 12, 64] {
            let (nh, nkv, cap) = (6i64, 2i64, 40i64);
            let k = Tensor::randn([5, nkv, cap, hd], (Kind::Float, Device::Cpu));
            let v = Tensor::randn([5, nkv, cap, hd], (Kind::Float, Device::Cpu));
            let q = Tensor::randn([3, nh, 1, hd], (Kind::Float, Device::Cpu)) * 3.0;
            let slots = [4usize, 0, 2];
            let lens = [40usize, 1, 17];
            // q given as [B,1,nh,hd] through a transposed view, as the model hands it over.
            let got = decode_attention(&q.transpose(1, 2), &k, &v, &slots, &lens);
            for (i, (&s, &l)) in slots.iter().zip(&lens).enumerate() {
                let rep = nh / nkv;
                let kk = k.get(s as i64).narrow(1, 0, l as i64).repeat_interleave_self_int(rep, 0, None).unsqueeze(0);
                let vv = v.get(s as i64).narrow(1, 0, l as i64).repeat_interleave_self_int(rep, 0, None).unsqueeze(0);
                let want = Tensor::scaled_dot_product_attention(
                    &q.narrow(0, i as i64, 1),
                    &kk,
                    &vv,
                    None::<Tensor>,
                    0.0,
                    false,
                    None,
                    false,
                )
                .transpose(1, 2)
                .reshape([1, 1, nh * hd]);
                let diff = f64::try_from((got.narrow(0, i as i64, 1) - &want).abs().max()).unwrap();
                assert!(diff < 1e-5, "hd {hd}, sequence {i}: max difference {diff}");
            }
        }
    }
}
