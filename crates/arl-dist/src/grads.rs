//! Tensors through a [`Collective`] (libtorch): gradients all-reduced
//! in a few large flat float32 buckets (as PyTorch DDP's `bucket_cap_mb`),
//! and parameters broadcast from rank 0.
//!
//! Buckets are staged in host memory because the engine works on host
//! buffers; on CUDA that is a device↔host copy per bucket.
use super::{Collective, ReduceOp};
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// Gradient buckets over a fixed, ordered list of parameters (every rank
/// must pass the same list: `Model::named_parameters` is sorted by name).
pub struct GradSync {
    params: Vec<Tensor>,
    /// Ranges of `params`, each at most `bucket_bytes` of float32 (a larger
    /// tensor is a bucket alone).
    buckets: Vec<std::ops::Range<usize>>,
}

impl GradSync {
    pub fn new(params: Vec<Tensor>, bucket_bytes: usize) -> GradSync {
        let cap = (bucket_bytes / 4).max(1);
        let mut buckets = vec![];
        let (mut start, mut numel) = (0, 0usize);
        for (i, p) in params.iter().enumerate() {
            let n = p.numel();
            if i > start && numel + n > cap {
                buckets.push(start..i);
                start = i;
                numel = 0;
            }
            numel += n;
        }
        if start < params.len() {
            buckets.push(start..params.len());
        }
        GradSync { params, buckets }
    }

    pub fn buckets(&self) -> usize {
        self.buckets.len()
    }

    /// Gives every parameter a (zero) gradient, so that a rank whose share of
    /// a batch is empty still contributes its zeros to every bucket.
    pub fn define_grads(&self) {
        let zero = self.params.iter().map(|p| p.sum(Kind::Float) * 0.0).fold(None::<Tensor>, |acc, x| match acc {
            None => Some(x),
            Some(a) => Some(a + x),
        });
        if let Some(z) = zero {
            z.backward();
        }
    }

    /// Sums the gradients over ranks, in place. Returns the seconds spent in
    /// the engine's all-reduce (not in flattening).
    pub fn all_reduce(&self, comm: &dyn Collective) -> f64 {
        let mut secs = 0.0;
        let nb = self.buckets.len();
        for (b, range) in self.buckets.iter().enumerate() {
            let grads: Vec<Tensor> = self.params[range.clone()].iter().map(|p| p.grad()).collect();
            let flat = tch::no_grad(|| {
                let parts: Vec<Tensor> = grads
                    .iter()
                    .map(|g| g.detach().to_kind(Kind::Float).to_device(Device::Cpu).reshape([-1]))
                    .collect();
                Tensor::cat(&parts, 0).contiguous()
            });
            let n = flat.numel();
            // SAFETY: `flat` is a contiguous float32 CPU tensor of `n`
            // elements that nothing else references during the call.
            let buf = unsafe { std::slice::from_raw_parts_mut(flat.data_ptr() as *mut f32, n) };
            let t0 = Instant::now();
            comm.all_reduce_sum_f32(buf, &format!("all-reduce of the gradients (bucket {}/{nb})", b + 1));
            secs += t0.elapsed().as_secs_f64();
            tch::no_grad(|| {
                let mut off = 0i64;
                for g in &grads {
                    let k = g.numel() as i64;
                    let mut dst = g.shallow_clone();
                    let src = flat.narrow(0, off, k).view(g.size().as_slice()).to_device(g.device());
                    dst.copy_(&src);
                    off += k;
                }
            });
        }
        secs
    }

    /// Copies rank 0's parameter values to every rank.
    pub fn broadcast_params(&self, comm: &dyn Collective) {
        for range in &self.buckets {
            let ps = &self.params[range.clone()];
            let flat = tch::no_grad(|| {
                let parts: Vec<Tensor> =
                    ps.iter().map(|p| p.detach().to_kind(Kind::Float).to_device(Device::Cpu).reshape([-1])).collect();
                Tensor::cat(&parts, 0).contiguous()
            });
            let bytes = flat.numel() * 4;
            // SAFETY: as in `all_reduce`, viewed as bytes.
            let buf = unsafe { std::slice::from_raw_parts_mut(flat.data_ptr() as *mut u8, bytes) };
            comm.broadcast(buf, 0, "broadcast of the parameters from rank 0");
            tch::no_grad(|| {
                let mut off = 0i64;
                for p in ps {
                    let k = p.numel() as i64;
                    let mut dst = p.shallow_clone();
                    let src = flat.narrow(0, off, k).view(p.size().as_slice()).to_kind(p.kind()).to_device(p.device());
                    dst.copy_(&src);
                    off += k;
                }
            });
        }
    }
}

/// Sums f64 statistics over ranks and takes the maximum of others, in one
/// call each (`sums` and `maxes` are replaced by the global values).
pub fn reduce_stats(comm: &dyn Collective, sums: &mut [f64], maxes: &mut [f64]) {
    comm.all_reduce_f64(sums, ReduceOp::Sum, "all-reduce of the step's statistics");
    comm.all_reduce_f64(maxes, ReduceOp::Max, "all-reduce of the step's extremes");
}
