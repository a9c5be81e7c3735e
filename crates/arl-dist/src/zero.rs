//! Sharded optimizer state (ZeRO stages 1 and 2, Rajbhandari et al.,
//! arXiv:1910.02054): the parameters, in a fixed order, are one flat space of
//! elements cut into buckets of at most `bucket` elements; every bucket is
//! split into `world` equal, contiguous parts, and rank r owns part r of every
//! bucket. A rank keeps optimizer state (and, at stage 2, reduced gradients)
//! for what it owns only, updates that, and the updated values are
//! all-gathered bucket by bucket.
//!
//! Owning a part of every bucket (not a range of whole tensors) keeps the
//! shards equal to one element per bucket, whatever the tensors' sizes (an
//! embedding of 151,936 × 896 would otherwise be one rank's whole share),
//! and bounds the host staging buffer of a collective to one bucket.
use super::Collective;
use std::ops::Range;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

/// A contiguous run of one parameter's elements (in its flattened order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Index of the parameter in the list the partition was made from.
    pub param: usize,
    pub start: usize,
    pub len: usize,
}

/// Which elements of the flat parameter space each rank owns.
#[derive(Debug, Clone)]
pub struct Partition {
    /// Flat offset of each parameter, and the total at the end.
    offsets: Vec<usize>,
    world: usize,
    bucket: usize,
}

impl Partition {
    /// `numels`: each parameter's element count, in the order every rank uses.
    pub fn new(numels: &[usize], world: usize, bucket: usize) -> Partition {
        let mut offsets = Vec::with_capacity(numels.len() + 1);
        let mut at = 0;
        for &n in numels {
            offsets.push(at);
            at += n;
        }
        offsets.push(at);
        Partition { offsets, world: world.max(1), bucket: bucket.max(1) }
    }

    pub fn total(&self) -> usize {
        *self.offsets.last().expect("offsets end with the total")
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// The buckets, as ranges of the flat space.
    pub fn buckets(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let (total, b) = (self.total(), self.bucket);
        (0..total.div_ceil(b)).map(move |k| k * b..((k + 1) * b).min(total))
    }

    /// Each rank's element count in `bucket`, in rank order.
    pub fn counts(&self, bucket: &Range<usize>) -> Vec<usize> {
        (0..self.world).map(|r| self.part(bucket, r).len()).collect()
    }

    /// Rank `r`'s part of `bucket` (flat range).
    pub fn part(&self, bucket: &Range<usize>, r: usize) -> Range<usize> {
        let (n, w) = (bucket.len(), self.world);
        bucket.start + r * n / w..bucket.start + (r + 1) * n / w
    }

    /// The pieces of parameters that make up the flat range `flat`, in order.
    pub fn pieces(&self, flat: Range<usize>) -> Vec<Segment> {
        let mut out = vec![];
        if flat.is_empty() {
            return out;
        }
        // The parameter holding `flat.start` (the last offset ≤ it).
        let first = self.offsets.partition_point(|&o| o <= flat.start) - 1;
        for p in first..self.offsets.len() - 1 {
            let (lo, hi) = (self.offsets[p], self.offsets[p + 1]);
            if lo >= flat.end {
                break;
            }
            let (a, b) = (lo.max(flat.start), hi.min(flat.end));
            if a < b {
                out.push(Segment { param: p, start: a - lo, len: b - a });
            }
        }
        out
    }

    /// Everything rank `r` owns, bucket by bucket: the order of its flat
    /// shard of optimizer state.
    pub fn owned(&self, r: usize) -> Vec<Segment> {
        self.buckets().flat_map(|b| self.pieces(self.part(&b, r))).collect()
    }

    /// Elements rank `r` owns.
    pub fn owned_elements(&self, r: usize) -> usize {
        self.buckets().map(|b| self.part(&b, r).len()).sum()
    }
}

/// A tensor's elements as a flat view (the tensors here are parameters and
/// their gradients, which libtorch keeps contiguous).
fn flat(t: &Tensor) -> Tensor {
    t.view([-1])
}

/// Copies the pieces of `tensors` that make up `range` into `buf` (float32, CPU).
fn stage(part: &Partition, range: Range<usize>, tensors: &[Tensor], buf: &Tensor, buf_at: usize) {
    let mut at = buf_at as i64;
    for s in part.pieces(range) {
        let src = flat(&tensors[s.param]).narrow(0, s.start as i64, s.len as i64);
        let mut dst = buf.narrow(0, at, s.len as i64);
        dst.copy_(&src.to_kind(Kind::Float).to_device(Device::Cpu));
        at += s.len as i64;
    }
}

/// The reverse of [`stage`]: `buf`'s elements back into the tensors' pieces.
fn unstage(part: &Partition, range: Range<usize>, tensors: &[Tensor], buf: &Tensor, buf_at: usize) {
    let mut at = buf_at as i64;
    for s in part.pieces(range) {
        let mut dst = flat(&tensors[s.param]).narrow(0, s.start as i64, s.len as i64);
        let src = buf.narrow(0, at, s.len as i64);
        dst.copy_(&src.to_kind(dst.kind()).to_device(dst.device()));
        at += s.len as i64;
    }
}

/// A float32 CPU tensor's elements as a mutable slice.
///
/// # Safety
/// `t` must be a contiguous float32 CPU tensor that nothing else reads or
/// writes while the slice lives.
unsafe fn slice_of(t: &mut Tensor) -> &mut [f32] {
    std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, t.numel())
}

/// The collectives of a sharded optimizer over a fixed list of parameters
/// (every rank passes the same list in the same order).
pub struct Zero {
    params: Vec<Tensor>,
    pub partition: Partition,
    rank: usize,
}

impl Zero {
    pub fn new(params: Vec<Tensor>, world: usize, rank: usize, bucket_bytes: usize) -> Zero {
        let numels: Vec<usize> = params.iter().map(|p| p.numel()).collect();
        Zero { partition: Partition::new(&numels, world, (bucket_bytes / 4).max(1)), params, rank }
    }

    /// What this rank owns.
    pub fn owned(&self) -> Vec<Segment> {
        self.partition.owned(self.rank)
    }

    /// Stage 2: sums the gradients over ranks, each rank receiving only its
    /// own parts, written into its own pieces of the gradient tensors (the
    /// rest of them is left as this rank computed it, and unused). Returns
    /// the seconds spent in the engine.
    pub fn reduce_scatter_grads(&self, comm: &dyn Collective) -> f64 {
        let grads: Vec<Tensor> = self.params.iter().map(|p| p.grad()).collect();
        let buckets: Vec<Range<usize>> = self.partition.buckets().collect();
        let mut secs = 0.0;
        for (k, b) in buckets.iter().enumerate() {
            let mut buf = Tensor::zeros([b.len() as i64], (Kind::Float, Device::Cpu));
            tch::no_grad(|| stage(&self.partition, b.clone(), &grads, &buf, 0));
            let counts = self.partition.counts(b);
            let t0 = Instant::now();
            // SAFETY: `buf` is a fresh contiguous float32 CPU tensor.
            let s = unsafe { slice_of(&mut buf) };
            let what = format!("reduce-scatter of the gradients (bucket {}/{})", k + 1, buckets.len());
            comm.reduce_scatter_f32(s, &counts, &what);
            secs += t0.elapsed().as_secs_f64();
            let mine = self.partition.part(b, self.rank);
            tch::no_grad(|| unstage(&self.partition, mine.clone(), &grads, &buf, mine.start - b.start));
        }
        secs
    }

    /// After each rank has updated what it owns: every rank gets every
    /// rank's updated parameters. Returns the seconds spent in the engine.
    pub fn all_gather_params(&self, comm: &dyn Collective) -> f64 {
        let buckets: Vec<Range<usize>> = self.partition.buckets().collect();
        let mut secs = 0.0;
        for (k, b) in buckets.iter().enumerate() {
            let mut buf = Tensor::zeros([b.len() as i64], (Kind::Float, Device::Cpu));
            let mine = self.partition.part(b, self.rank);
            tch::no_grad(|| stage(&self.partition, mine.clone(), &self.params, &buf, mine.start - b.start));
            let t0 = Instant::now();
            // SAFETY: as in `reduce_scatter_grads`.
            let s = unsafe { slice_of(&mut buf) };
            let what = format!("all-gather of the updated parameters (bucket {}/{})", k + 1, buckets.len());
            comm.all_gather_f32(s, &self.partition.counts(b), &what);
            secs += t0.elapsed().as_secs_f64();
            tch::no_grad(|| {
                for r in (0..self.partition.world()).filter(|&r| r != self.rank) {
                    let theirs = self.partition.part(b, r);
                    unstage(&self.partition, theirs.clone(), &self.params, &buf, theirs.start - b.start);
                }
            });
        }
        secs
    }

    /// Gathers a sharded per-element state (`own`: this rank's flat shard,
    /// float32, in [`Zero::owned`] order) into whole tensors shaped as the
    /// parameters — on the ranks with `keep` only (the others take part and
    /// get `None`).
    pub fn gather(&self, comm: &dyn Collective, own: &Tensor, keep: bool, what: &str) -> Option<Vec<Tensor>> {
        let whole: Vec<Tensor> = match keep {
            true => self.params.iter().map(|p| Tensor::zeros(p.size(), (Kind::Float, Device::Cpu))).collect(),
            false => vec![],
        };
        let own = own.to_device(Device::Cpu);
        let mut at = 0usize;
        for b in self.partition.buckets() {
            let mut buf = Tensor::zeros([b.len() as i64], (Kind::Float, Device::Cpu));
            let mine = self.partition.part(&b, self.rank);
            tch::no_grad(|| {
                let mut dst = buf.narrow(0, (mine.start - b.start) as i64, mine.len() as i64);
                dst.copy_(&own.narrow(0, at as i64, mine.len() as i64));
            });
            at += mine.len();
            // SAFETY: as in `reduce_scatter_grads`.
            let s = unsafe { slice_of(&mut buf) };
            comm.all_gather_f32(s, &self.partition.counts(&b), what);
            if keep {
                tch::no_grad(|| unstage(&self.partition, b.clone(), &whole, &buf, 0));
            }
        }
        keep.then_some(whole)
    }

    /// This rank's flat shard (float32) of whole per-parameter tensors.
    pub fn slice_own(&self, whole: &[&Tensor], device: Device) -> Tensor {
        let segs = self.owned();
        let n: usize = segs.iter().map(|s| s.len).sum();
        let out = Tensor::zeros([n as i64], (Kind::Float, device));
        let mut at = 0i64;
        tch::no_grad(|| {
            for s in segs {
                let src = whole[s.param].reshape([-1]).narrow(0, s.start as i64, s.len as i64);
                let mut dst = out.narrow(0, at, s.len as i64);
                dst.copy_(&src.to_kind(Kind::Float).to_device(device));
                at += s.len as i64;
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_element_is_owned_once_and_shards_are_equal() {
        let mut rng = arl_core::rng::Rng::new(5);
        for _ in 0..200 {
            let n = rng.range(1, 12) as usize;
            let numels: Vec<usize> = (0..n).map(|_| rng.range(1, 300) as usize).collect();
            let world = rng.range(1, 5) as usize;
            let bucket = rng.range(1, 500) as usize;
            let p = Partition::new(&numels, world, bucket);
            let mut seen: Vec<Vec<u8>> = numels.iter().map(|&k| vec![0; k]).collect();
            let mut sizes = vec![];
            for r in 0..world {
                let segs = p.owned(r);
                sizes.push(segs.iter().map(|s| s.len).sum::<usize>());
                assert_eq!(sizes[r], p.owned_elements(r));
                for s in segs {
                    for c in &mut seen[s.param][s.start..s.start + s.len] {
                        *c += 1;
                    }
                }
            }
            assert!(seen.iter().flatten().all(|&c| c == 1), "{numels:?} world {world} bucket {bucket}");
            // Equal to within one element per bucket.
            let buckets = p.buckets().count();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(hi - lo <= buckets, "{sizes:?} over {buckets} buckets");
        }
    }

    #[test]
    fn pieces_cross_parameter_boundaries() {
        let p = Partition::new(&[3, 0, 4, 2], 2, 100);
        assert_eq!(
            p.pieces(2..8),
            vec![
                Segment { param: 0, start: 2, len: 1 },
                Segment { param: 2, start: 0, len: 4 },
                Segment { param: 3, start: 0, len: 1 }
            ]
        );
        assert_eq!(p.owned(0), p.pieces(0..4));
        assert_eq!(p.owned(1), p.pieces(4..9));
    }
}
