//! Inference matrix multiplies through oneDNN (libtorch's `mkldnn_linear`)
//! instead of the BLAS libtorch was built with.
//!
//! The PyPI libtorch calls MKL's `sgemm` for a float32 `linear` on the CPU.
//! MKL picks its kernels by CPU vendor: on AMD processors it runs its AVX2
//! code even where the core has full-width AVX-512 (Zen 5), and stops at
//! half of the machine's float32 rate. oneDNN, in the same libtorch, picks
//! its kernels by instruction set. Measured on this project's 2-core AMD EPYC
//! (one thread, float32): `[32×576]·[576×3072]ᵀ` 90 GFLOP/s through MKL, 180
//! through oneDNN; `[32×576]·[576×49152]ᵀ` (SmolLM2's LM head) 60 against
//! 127. On other processors the two are close, and below about 4 rows
//! oneDNN's call and layout conversions cost more than they save — hence a
//! measured choice ([`calibrate`]) and a row threshold.
//!
//! The weight is converted once into oneDNN's layout (a second copy of the
//! matrix: [`pack`]); the activations go in and come out as ordinary dense
//! tensors, so nothing else in the model changes. Inference only: the
//! packed weight carries no gradient.
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// Below this many rows a packed linear takes the BLAS path.
pub const MIN_ROWS: i64 = 4;

/// How the inference linears multiply on the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuMatmul {
    /// libtorch's `linear` (MKL's `sgemm` in the PyPI build).
    Blas,
    /// oneDNN with weights packed once ([`pack`]).
    OneDnn,
}

/// Whether this libtorch can run oneDNN linears (it was built with it, and
/// a tiny one runs and gives the dense answer).
pub fn available() -> bool {
    let probe = || -> Result<bool, tch::TchError> {
        let x = Tensor::f_arange(12, (Kind::Float, Device::Cpu))?.f_view([4, 3])?;
        let w = Tensor::f_arange(6, (Kind::Float, Device::Cpu))?.f_view([2, 3])?;
        let got =
            x.f_to_mkldnn(None)?.f_mkldnn_linear(&w.f_to_mkldnn(None)?, None::<Tensor>)?.f_to_dense(None, false)?;
        let want = x.f_linear::<Tensor>(&w, None)?;
        got.f_allclose(&want, 1e-5, 1e-5, false)
    };
    tch::no_grad(|| std::panic::catch_unwind(probe).ok().and_then(Result::ok).unwrap_or(false))
}

/// `w` [out, in] (float32, CPU) in oneDNN's layout, for [`linear`].
pub fn pack(w: &Tensor) -> Tensor {
    tch::no_grad(|| w.contiguous().g_to_mkldnn(None))
}

/// `x·wᵀ + b` with the packed weight `packed` (from [`pack`]) when `x` is
/// float32 on the CPU with at least [`MIN_ROWS`] rows; `None` otherwise
/// (the caller multiplies densely). `x` [..., in] → [..., out], dense.
pub fn linear(x: &Tensor, packed: &Tensor, b: Option<&Tensor>) -> Option<Tensor> {
    if x.kind() != Kind::Float || x.device() != Device::Cpu {
        return None;
    }
    let mut shape = x.size();
    let inner = *shape.last()?;
    let rows = if inner == 0 { 0 } else { x.numel() as i64 / inner };
    if rows < MIN_ROWS {
        return None;
    }
    let y = x.reshape([rows, inner]).contiguous().g_to_mkldnn(None).mkldnn_linear(packed, b).to_dense(None, false);
    *shape.last_mut()? = y.size()[1];
    Some(y.view(shape.as_slice()))
}

/// Float32 rates (GFLOP/s: BLAS, oneDNN) of a `[rows × in]·[in × out]ᵀ`
/// multiply on this machine with the current thread setting, the best of a
/// few rounds of each (after a warm-up call).
pub fn calibrate(rows: i64, inner: i64, out: i64) -> (f64, f64) {
    tch::no_grad(|| {
        let x = Tensor::randn([rows, inner], (Kind::Float, Device::Cpu));
        let w = Tensor::randn([out, inner], (Kind::Float, Device::Cpu));
        let packed = pack(&w);
        let flops = 2.0 * (rows * inner * out) as f64;
        let best = |f: &dyn Fn() -> Tensor| {
            drop(f());
            let mut t = f64::INFINITY;
            for _ in 0..5 {
                let t0 = Instant::now();
                drop(f());
                t = t.min(t0.elapsed().as_secs_f64());
            }
            flops / t / 1e9
        };
        let blas = best(&|| x.linear::<Tensor>(&w, None));
        let dnn = best(&|| linear(&x, &packed, None).expect("rows ≥ MIN_ROWS"));
        (blas, dnn)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_linear_matches_dense() {
        // The project's libtorch (the PyPI wheel) is built with oneDNN.
        assert!(available(), "this libtorch cannot run oneDNN linears");
        tch::manual_seed(3);
        for (shape, bias) in [(vec![5i64, 7, 48], true), (vec![33, 48], false), (vec![1, 4, 48], true)] {
            let x = Tensor::randn(shape.as_slice(), (Kind::Float, Device::Cpu));
            let w = Tensor::randn([40, 48], (Kind::Float, Device::Cpu));
            let b = bias.then(|| Tensor::randn([40], (Kind::Float, Device::Cpu)));
            let got = linear(&x, &pack(&w), b.as_ref()).expect("enough rows");
            let want = x.linear(&w, b.as_ref());
            assert_eq!(got.size(), want.size());
            let diff = f64::try_from((got - want).abs().max()).unwrap();
            assert!(diff < 1e-4, "shape {shape:?}, bias {bias}: max difference {diff}");
        }
        // Too few rows, another kind: the caller's dense path.
        let w = pack(&Tensor::randn([40, 48], (Kind::Float, Device::Cpu)));
        assert!(linear(&Tensor::randn([3, 48], (Kind::Float, Device::Cpu)), &w, None).is_none());
        assert!(linear(&Tensor::randn([8, 48], (Kind::Double, Device::Cpu)), &w, None).is_none());
    }
}
