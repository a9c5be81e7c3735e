//! The matrix products of a decode step on the CPU: `y = x·Wᵀ + b` for up
//! to [`MAX_ROWS`] rows of `x` (one per sequence in the batch), with `W`
//! [out, in] stored in float32 or in bf16.
//!
//! At one to eight rows a projection is a matrix-vector product: every
//! weight is read once and used for a few multiply-adds, so the time is the
//! bytes of `W` over the memory bandwidth. libtorch sends it to MKL's
//! `sgemv`, which on this project's 2-core Xeon streamed SmolLM2-135M's
//! weights at about 18 GB/s of the 25 GB/s the machine reads, behind an
//! OpenMP fork and join per call. Here the output columns are split over
//! [`spin_pool`](crate::spin_pool)'s threads. Each computes tiles of a few
//! output columns for a few rows at once (up to 8 rows × 3 columns with
//! AVX-512, 4 × 2 with AVX2) from one pass over those weight rows.
//!
//! A batch of 9 to 64 rows is no longer bound by memory but by the
//! multiply-adds. libtorch hands it to MKL's `sgemm`, which copies ("packs")
//! the whole weight matrix on every call: a fifth of a 64-request decode
//! step's time in a profile of SmolLM2-135M. Here the weights are read where
//! they are. Blocks of 64 weight rows stay in L2 while the rows of `x` pass
//! over them in groups, 6 rows × 4 columns to a tile on AVX-512, and rows
//! longer than 1,024 are summed in spans of 512 so that a group's span of
//! `x` and a tile's span of weights share L1.
//!
//! With bf16 weights the bytes halve. A bf16 number is the upper half of a
//! float32, so each is widened exactly (a 16-bit shift) and multiplied and
//! summed in float32: the result is the float32 product with the weights
//! rounded to bf16, up to the order of the sums — no bf16 activations.
//! AVX-512, else AVX2 and FMA, when the CPU has them (checked once), plain
//! loops otherwise.
use crate::spin_pool::{Pool, SyncPtr};
use tch::{Device, Kind, Tensor};

/// Most rows of `x` a call takes; larger ones (a prefill) go to libtorch's GEMM.
pub const MAX_ROWS: i64 = 64;

/// Multiply-adds below which one thread does the whole product.
const PARALLEL_WORK: usize = 1 << 16;

/// Output columns (weight rows) per block: the block's weights stay in
/// cache while each group of rows of `x` passes over them.
const BLOCK: usize = 64;

/// Columns of `x` (and of the weights) a span of a long row takes at more
/// than 8 rows: 6 rows of `x` and a tile's 4 weight rows, 24 KiB in float32,
/// stay in a 48 KiB L1 while the span is summed.
const SPAN: usize = 512;

/// Columns `k0..k1` of the rows; `first`: the span that starts the sums
/// (writes `y`, adds the bias), the others add to `y`.
#[derive(Clone, Copy)]
pub(crate) struct Span {
    k0: usize,
    k1: usize,
    first: bool,
}

/// How a decode step's products (at most [`MAX_ROWS`] rows) multiply on the
/// CPU in a float32 model ([`Model::set_decode_matmul`](crate::Model::set_decode_matmul)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeMatmul {
    /// libtorch's `linear` (MKL's `sgemv`/`sgemm` in the PyPI build).
    Blas,
    /// [`linear`] on the float32 weights: the same values up to the order
    /// of the sums.
    Float32,
    /// [`linear`] on bf16 copies of the weights (half the bytes a decode
    /// step streams; a second copy, half the float32 size, kept beside the
    /// float32 weights that larger batches and weight updates use).
    Bf16,
}

impl DecodeMatmul {
    /// What [`linear`] reads for the weight `w` in this way: `w` itself
    /// (Float32), a bf16 copy (Bf16), nothing (Blas: libtorch multiplies).
    pub(crate) fn weight(self, w: &Tensor) -> Option<Tensor> {
        match self {
            DecodeMatmul::Blas => None,
            DecodeMatmul::Float32 => Some(w.shallow_clone()),
            DecodeMatmul::Bf16 => Some(to_bf16(w)),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DecodeMatmul::Blas => "blas",
            DecodeMatmul::Float32 => "float32",
            DecodeMatmul::Bf16 => "bf16",
        }
    }
}

/// The weights of one product.
#[derive(Clone, Copy)]
pub enum Weights<'a> {
    F32(&'a [f32]),
    /// bf16 bit patterns (the upper 16 bits of a float32).
    Bf16(&'a [u16]),
}

/// `x·wᵀ + b` when `x` is float32 on the CPU with at most [`MAX_ROWS`] rows
/// and `w` [out, in] is float32 or bf16 (contiguous, on the CPU); `None`
/// otherwise (the caller multiplies with libtorch). `x` [..., in] → [..., out]
/// float32. `b` float32 [out].
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Option<Tensor> {
    if x.device() != Device::Cpu || x.kind() != Kind::Float || w.device() != Device::Cpu || !w.is_contiguous() {
        return None;
    }
    let (n, k) = w.size2().ok()?;
    let mut shape = x.size();
    if *shape.last()? != k || k == 0 || n == 0 {
        return None;
    }
    let m = x.numel() as i64 / k;
    if m == 0 || m > MAX_ROWS || b.is_some_and(|b| b.kind() != Kind::Float || b.numel() as i64 != n) {
        return None;
    }
    let x = x.contiguous();
    let b = b.map(Tensor::contiguous);
    let y = Tensor::empty([m, n], (Kind::Float, Device::Cpu));
    let (mu, nu, ku) = (m as usize, n as usize, k as usize);
    // SAFETY: float32 / bf16 CPU tensors, contiguous (made or checked so
    // above), of the sizes read; `y` is fresh and written only here.
    unsafe {
        let xs = std::slice::from_raw_parts(x.data_ptr() as *const f32, mu * ku);
        let ws = match w.kind() {
            Kind::Float => Weights::F32(std::slice::from_raw_parts(w.data_ptr() as *const f32, nu * ku)),
            Kind::BFloat16 => Weights::Bf16(std::slice::from_raw_parts(w.data_ptr() as *const u16, nu * ku)),
            _ => return None,
        };
        let bs = b.as_ref().map(|b| std::slice::from_raw_parts(b.data_ptr() as *const f32, nu));
        let ys = std::slice::from_raw_parts_mut(y.data_ptr() as *mut f32, mu * nu);
        product(xs, mu, ku, ws, nu, bs, ys, tch::get_num_threads().max(1) as usize);
    }
    *shape.last_mut()? = n;
    Some(y.view(shape.as_slice()))
}

/// `y` [m, n] = `x` [m, k] · `w` [n, k]ᵀ (+ `b` [n]), all row-major, the
/// output columns split over up to `threads` threads of the pool.
#[allow(clippy::too_many_arguments)]
pub fn product(
    x: &[f32],
    m: usize,
    k: usize,
    w: Weights<'_>,
    n: usize,
    b: Option<&[f32]>,
    y: &mut [f32],
    threads: usize,
) {
    assert!(x.len() == m * k && y.len() == m * n && b.is_none_or(|b| b.len() == n));
    assert!(match w {
        Weights::F32(w) => w.len() == n * k,
        Weights::Bf16(w) => w.len() == n * k,
    });
    // (The pool starts on first use: a product that never splits starts none.)
    let threads = if m * n * k < PARALLEL_WORK || threads <= 1 { 1 } else { threads.min(Pool::global().width()) };
    // Column ranges in whole blocks of 8, as even as that allows.
    let per = n.div_ceil(threads).div_ceil(8) * 8;
    let parts = n.div_ceil(per);
    let out = SyncPtr::new(y.as_mut_ptr());
    let job = |p: usize| {
        let (j0, j1) = (p * per, ((p + 1) * per).min(n));
        // SAFETY: each part writes columns j0..j1 of `y` only, disjoint
        // from the others'; `y` outlives the call (`run` waits for all).
        unsafe { columns(x, m, k, w, n, b, out.get(), j0, j1) };
    };
    if parts <= 1 {
        job(0);
    } else {
        Pool::global().run(parts, &job);
    }
}

/// Columns `j0..j1` of the product into `y` (row stride `n`).
#[allow(clippy::too_many_arguments)]
unsafe fn columns(
    x: &[f32],
    m: usize,
    k: usize,
    w: Weights<'_>,
    n: usize,
    b: Option<&[f32]>,
    y: *mut f32,
    j0: usize,
    j1: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = isa() {
        let bias = b.map_or(std::ptr::null(), <[f32]>::as_ptr);
        // Groups of rows as even as the tile height allows; a batch of more
        // than 8 with AVX-512 in tiles 6 high (4 weight rows fit beside).
        let most = match isa {
            Isa::Avx512 if m > avx512::ROWS => 6,
            Isa::Avx512 => avx512::ROWS,
            Isa::Avx2 => avx2::ROWS,
        };
        let groups = m.div_ceil(most);
        let mut jb = j0;
        while jb < j1 {
            let je = (jb + BLOCK).min(j1);
            // A long row is taken in spans, the sums carried in `y`, so that
            // a span of the rows of `x` and of a tile's weights share L1.
            let mut k0 = 0;
            while k0 < k {
                let k1 = if m > 8 && k - k0 > 2 * SPAN { k0 + SPAN } else { k };
                let span = Span { k0, k1, first: k0 == 0 };
                let mut i0 = 0;
                for g in 0..groups {
                    let rows = m / groups + usize::from(g < m % groups);
                    let xp = x.as_ptr().add(i0 * k);
                    let yp = y.add(i0 * n);
                    let (bf16, wp) = match w {
                        Weights::F32(w) => (false, w.as_ptr().cast::<u8>()),
                        Weights::Bf16(w) => (true, w.as_ptr().cast::<u8>()),
                    };
                    match (isa, bf16) {
                        (Isa::Avx512, false) => avx512::block::<false>(xp, rows, k, span, wp, bias, yp, n, jb, je),
                        (Isa::Avx512, true) => avx512::block::<true>(xp, rows, k, span, wp, bias, yp, n, jb, je),
                        (Isa::Avx2, false) => avx2::block::<false>(xp, rows, k, span, wp, bias, yp, n, jb, je),
                        (Isa::Avx2, true) => avx2::block::<true>(xp, rows, k, span, wp, bias, yp, n, jb, je),
                    }
                    i0 += rows;
                }
                k0 = k1;
            }
            jb = je;
        }
        return;
    }
    plain(x, m, k, w, n, b, y, j0, j1)
}

/// [`columns`] without vector instructions.
#[allow(clippy::too_many_arguments)]
unsafe fn plain(
    x: &[f32],
    m: usize,
    k: usize,
    w: Weights<'_>,
    n: usize,
    b: Option<&[f32]>,
    y: *mut f32,
    j0: usize,
    j1: usize,
) {
    for i in 0..m {
        let xr = &x[i * k..(i + 1) * k];
        for j in j0..j1 {
            let mut s = 0f32;
            for (q, &xv) in xr.iter().enumerate() {
                s += xv * weight(w, j * k + q);
            }
            *y.add(i * n + j) = s + b.map_or(0.0, |b| b[j]);
        }
    }
}

/// Weight `at` as float32.
fn weight(w: Weights<'_>, at: usize) -> f32 {
    match w {
        Weights::F32(w) => w[at],
        Weights::Bf16(w) => f32::from_bits(u32::from(w[at]) << 16),
    }
}

#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
enum Isa {
    Avx512,
    Avx2,
}

/// The widest vector kernel this CPU runs (checked once); `None`: the plain
/// loops. `ARL_GEMV_ISA=avx2` caps it (to compare the two).
#[cfg(target_arch = "x86_64")]
fn isa() -> Option<Isa> {
    use std::arch::is_x86_feature_detected as has;
    static ISA: std::sync::OnceLock<Option<Isa>> = std::sync::OnceLock::new();
    *ISA.get_or_init(|| {
        let cap = std::env::var("ARL_GEMV_ISA").unwrap_or_default();
        if has!("avx512f") && cap != "avx2" && cap != "none" {
            Some(Isa::Avx512)
        } else if has!("avx2") && has!("fma") && cap != "none" {
            Some(Isa::Avx2)
        } else {
            None
        }
    })
}

/// Float32 weights rounded to bf16 (nearest, ties to even), as bit patterns
/// for [`Weights::Bf16`]; what libtorch's `to_kind(BFloat16)` gives.
pub fn to_bf16(w: &Tensor) -> Tensor {
    tch::no_grad(|| w.to_kind(Kind::BFloat16).contiguous())
}

/// The vector kernel of one instruction set: `block` (rows 1-4 of `x`
/// against weight rows `jb..je`) over `tile`s of M rows × R output columns,
/// from the module's `zero`, `loadx`, `loadw`, `fma`, `hsum` and lane count
/// `L`. While a tile reads its R weight rows it prefetches the next tile's
/// (a bf16 row costs more instructions per cache line than the out-of-order
/// window hides, and the hardware prefetcher alone left a core at half its
/// float32 bandwidth).
#[cfg(target_arch = "x86_64")]
macro_rules! kernel {
    ($feat:literal, $($rows:pat => ($tm:literal, $tr:literal)),+) => {
        /// Rows `0..rows` (1 to `ROWS`) of `x` (row stride `k`) against weight
        /// rows `jb..je`: tiles of M rows × R output columns (the shapes that
        /// fit the instruction set's registers), then one column at a time
        /// for what is left.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $feat)]
        pub(super) unsafe fn block<const BF16: bool>(
            x: *const f32,
            rows: usize,
            k: usize,
            span: super::Span,
            w: *const u8,
            bias: *const f32,
            y: *mut f32,
            n: usize,
            jb: usize,
            je: usize,
        ) {
            let mut j = jb;
            macro_rules! run {
                ($m:literal, $r:literal) => {{
                    while j + $r <= je {
                        tile::<BF16, $m, $r>(x, k, span, w, bias, y, n, j);
                        j += $r;
                    }
                    while j < je {
                        tile::<BF16, $m, 1>(x, k, span, w, bias, y, n, j);
                        j += 1;
                    }
                }};
            }
            match rows {
                $($rows => run!($tm, $tr),)+
            }
        }

        #[inline]
        unsafe fn scalar<const BF16: bool>(w: *const u8, at: usize) -> f32 {
            if BF16 {
                f32::from_bits(u32::from(*w.cast::<u16>().add(at)) << 16)
            } else {
                *w.cast::<f32>().add(at)
            }
        }

        /// Output columns `j..j+R` of rows `0..M`.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn tile<const BF16: bool, const M: usize, const R: usize>(
            x: *const f32,
            k: usize,
            span: super::Span,
            w: *const u8,
            bias: *const f32,
            y: *mut f32,
            n: usize,
            j: usize,
        ) {
            let super::Span { k0, k1, first } = span;
            let size = if BF16 { 2 } else { 4 };
            let mut acc = [[zero(); M]; R];
            let kv = k0 + (k1 - k0) / L * L;
            let mut p = k0;
            while p < kv {
                let mut xv = [zero(); M];
                for (i, v) in xv.iter_mut().enumerate() {
                    *v = loadx(x.add(i * k + p));
                }
                for (r, a) in acc.iter_mut().enumerate() {
                    let at = (j + r) * k + p;
                    if (p * size) % 64 == 0 {
                        // The same place in the next tile's rows.
                        _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add((at + R * k) * size).cast());
                    }
                    let wv = loadw::<BF16>(w, at);
                    for (ai, &xi) in a.iter_mut().zip(&xv) {
                        *ai = fma(xi, wv, *ai);
                    }
                }
                p += L;
            }
            for (r, a) in acc.iter().enumerate() {
                for (i, &v) in a.iter().enumerate() {
                    let mut s = hsum(v);
                    for q in kv..k1 {
                        s += *x.add(i * k + q) * scalar::<BF16>(w, (j + r) * k + q);
                    }
                    let out = y.add(i * n + j + r);
                    if !first {
                        *out += s;
                    } else if !bias.is_null() {
                        *out = s + *bias.add(j + r);
                    } else {
                        *out = s;
                    }
                }
            }
        }
    };
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    const L: usize = 8;

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn zero() -> __m256 {
        _mm256_setzero_ps()
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn loadx(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }

    /// Eight weights from `w` (float32, or bf16 widened) at element `at`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn loadw<const BF16: bool>(w: *const u8, at: usize) -> __m256 {
        if BF16 {
            let h = _mm_loadu_si128(w.cast::<u16>().add(at).cast());
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
        } else {
            _mm256_loadu_ps(w.cast::<f32>().add(at))
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// Most rows of `x` one `block` call takes (16 vector registers).
    pub(super) const ROWS: usize = 4;
    kernel!("avx2,fma", 1 => (1, 4), 2 => (2, 4), 3 => (3, 2), _ => (4, 2));
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;
    const L: usize = 16;

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn loadx(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }

    /// Sixteen weights from `w` (float32, or bf16 widened) at element `at`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn loadw<const BF16: bool>(w: *const u8, at: usize) -> __m512 {
        if BF16 {
            let h = _mm256_loadu_si256(w.cast::<u16>().add(at).cast());
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h)))
        } else {
            _mm512_loadu_ps(w.cast::<f32>().add(at))
        }
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn hsum(v: __m512) -> f32 {
        _mm512_reduce_add_ps(v)
    }

    /// Most rows of `x` one `block` call takes (32 vector registers: up to
    /// 24 accumulators and the weights they share).
    pub(super) const ROWS: usize = 8;
    kernel!(
        "avx512f",
        1 => (1, 4),
        2 => (2, 4),
        3 => (3, 4),
        4 => (4, 4),
        5 => (5, 4),
        6 => (6, 4),
        7 => (7, 3),
        _ => (8, 3)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        f64::try_from((a - b).abs().max()).unwrap()
    }

    #[test]
    fn matches_libtorch_in_float32_and_with_bf16_weights() {
        tch::manual_seed(11);
        let cpu = (Kind::Float, Device::Cpu);
        // Shapes with and without a k tail (k % 8), odd column counts, row
        // counts from 1 to MAX_ROWS, batch dims, biases; sizes above and
        // below the threaded threshold.
        for (rows, k, n, bias) in [
            (1, 576, 3072, false),
            (3, 64, 40, true),
            (8, 100, 257, true),
            (5, 7, 9, false),
            (2, 1536, 576, true),
            // A batch: even row groups, and long rows summed in spans (k
            // over 2·SPAN, with a tail).
            (64, 1100, 70, true),
            (37, 1539, 33, false),
            (13, 576, 130, false),
        ] {
            let x = Tensor::randn([rows, k], cpu);
            let w = Tensor::randn([n, k], cpu);
            let b = bias.then(|| Tensor::randn([n], cpu));
            let want = x.linear(&w, b.as_ref());
            let got = linear(&x, &w, b.as_ref()).expect("a decode-sized product");
            // Float32 sums in another order: a few ulp of the row's magnitude.
            let tol = 1e-5 * (k as f64).sqrt() * 4.0;
            assert!(max_diff(&got, &want) < tol, "f32 {rows}×{k}×{n}: {}", max_diff(&got, &want));
            // bf16 weights: exactly the float32 product of the rounded weights.
            let w16 = to_bf16(&w);
            let want16 = x.linear(&w16.to_kind(Kind::Float), b.as_ref());
            let got16 = linear(&x, &w16, b.as_ref()).expect("bf16 weights");
            assert!(max_diff(&got16, &want16) < tol, "bf16 {rows}×{k}×{n}: {}", max_diff(&got16, &want16));
        }
        let x = Tensor::randn([2, 1, 3, 48], cpu);
        let w = Tensor::randn([16, 48], cpu);
        let got = linear(&x, &w, None).expect("6 rows");
        assert_eq!(got.size(), [2, 1, 3, 16]);
        assert!(max_diff(&got, &x.linear::<Tensor>(&w, None)) < 1e-4);
        // Not ours: too many rows, another kind, a shape that does not fit.
        assert!(linear(&Tensor::randn([65, 48], cpu), &w, None).is_none());
        assert!(linear(&Tensor::randn([2, 48], (Kind::Double, Device::Cpu)), &w, None).is_none());
        assert!(linear(&Tensor::randn([2, 47], cpu), &w, None).is_none());
    }

    #[test]
    fn the_plain_loops_agree_with_the_vector_kernel() {
        tch::manual_seed(5);
        let (m, k, n) = (3usize, 37usize, 21usize);
        let rand = |len: usize| Vec::<f32>::try_from(Tensor::randn([len as i64], (Kind::Float, Device::Cpu))).unwrap();
        let (x, b) = (rand(m * k), rand(n));
        let w: Vec<u16> = rand(n * k).iter().map(|v| (v.to_bits() >> 16) as u16).collect();
        let (mut fast, mut slow) = (vec![0f32; m * n], vec![0f32; m * n]);
        product(&x, m, k, Weights::Bf16(&w), n, Some(&b), &mut fast, 1);
        // SAFETY: `slow` is m × n.
        unsafe { plain(&x, m, k, Weights::Bf16(&w), n, Some(&b), slow.as_mut_ptr(), 0, n) };
        for (i, (f, s)) in fast.iter().zip(&slow).enumerate() {
            assert!((f - s).abs() < 1e-4, "element {i}: {f} vs {s}");
        }
    }
}

#[cfg(test)]
mod speed {
    use super::*;

    /// Streams 240 MB of weights through `product` (not a check: prints
    /// GB/s). `cargo test --release -p arl-model gemv_speed -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn gemv_speed() {
        let (k, n, mats) = match std::env::var("GEMV_CACHED") {
            Ok(_) => (576usize, 256usize, 1usize),
            Err(_) => (576usize, 3072usize, 30usize),
        };
        let w32: Vec<Vec<f32>> = (0..mats).map(|i| vec![0.001 * (i + 1) as f32; n * k]).collect();
        let w16: Vec<Vec<u16>> =
            (0..mats).map(|i| vec![((0.001 * (i + 1) as f32).to_bits() >> 16) as u16; n * k]).collect();
        let x = vec![1f32; 8 * k];
        let mut y = vec![0f32; 8 * n];
        for threads in [1, 2] {
            for m in [1, 4, 8] {
                for bf16 in [false, true] {
                    let mut best = f64::INFINITY;
                    for _ in 0..5 {
                        let t0 = std::time::Instant::now();
                        for i in 0..mats * (if mats == 1 { 300 } else { 1 }) {
                            let i = i % mats;
                            let w = if bf16 { Weights::Bf16(&w16[i]) } else { Weights::F32(&w32[i]) };
                            product(&x[..m * k], m, k, w, n, None, &mut y[..m * n], threads);
                        }
                        best = best.min(t0.elapsed().as_secs_f64());
                    }
                    let bytes = (mats * n * k * if bf16 { 2 } else { 4 }) as f64 * if mats == 1 { 300.0 } else { 1.0 };
                    println!(
                        "threads {threads} rows {m} bf16 {bf16}: {:.1} GB/s ({:.2} ms)",
                        bytes / best / 1e9,
                        best * 1e3
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod rate {
    use super::*;

    /// GFLOP/s of [`product`] (float32 and bf16 weights) beside libtorch's
    /// `linear` at a batch's shapes (SmolLM2-135M's MLP and LM head), 9 to
    /// 64 rows, 2 threads, weights in cache (not a check: prints). `cargo
    /// test --release -p arl-model gemm_rate -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn gemm_rate() {
        let best = |f: &mut dyn FnMut()| {
            (0..25)
                .map(|_| {
                    let t0 = std::time::Instant::now();
                    f();
                    t0.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        for (k, n) in [(576usize, 1536usize), (1536, 576), (576, 49152)] {
            for m in [8usize, 16, 32, 64] {
                let x = Tensor::randn([m as i64, k as i64], (Kind::Float, Device::Cpu));
                let w = Tensor::randn([n as i64, k as i64], (Kind::Float, Device::Cpu));
                let xs = Vec::<f32>::try_from(&x.view([-1])).unwrap();
                let w32 = Vec::<f32>::try_from(&w.view([-1])).unwrap();
                let w16: Vec<u16> = w32.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
                let mut y = vec![0f32; m * n];
                let torch = best(&mut || drop(x.linear::<Tensor>(&w, None)));
                let f32s = best(&mut || product(&xs, m, k, Weights::F32(&w32), n, None, &mut y, 2));
                let bf16s = best(&mut || product(&xs, m, k, Weights::Bf16(&w16), n, None, &mut y, 2));
                let g = (2 * m * n * k) as f64 / 1e9;
                println!(
                    "[{m}×{k}]·[{k}×{n}] GFLOP/s: libtorch {:.0}, float32 {:.0}, bf16 weights {:.0}",
                    g / torch,
                    g / f32s,
                    g / bf16s
                );
            }
        }
    }
}
