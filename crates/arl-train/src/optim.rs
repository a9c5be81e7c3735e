//! AdamW with state that can be saved and restored (tch's optimizer state is
//! not reachable from Rust), fp32 master weights for low-precision models,
//! gradient clipping, and the learning-rate schedule.
use anyhow::{bail, Context, Result};
use arl_dist::zero::{Segment, Zero};
use arl_dist::{Collective, ReduceOp};
use arl_model::weights;
use std::collections::BTreeMap;
use std::path::Path;
use tch::{Kind, Tensor};

pub use super::config::Schedule;

/// Learning rate at optimizer step `step` (0-based): linear warm-up from
/// lr/warmup to lr, then constant or half-cosine to `min_lr` (as Megatron's
/// `OptimizerParamScheduler`).
pub fn lr_at(step: u64, lr: f64, min_lr: f64, warmup: u64, decay_steps: u64, schedule: Schedule) -> f64 {
    if warmup > 0 && step < warmup {
        return lr * (step + 1) as f64 / warmup as f64;
    }
    match schedule {
        Schedule::Constant => lr,
        Schedule::Cosine => {
            let span = decay_steps.saturating_sub(warmup).max(1);
            let t = ((step - warmup) as f64 / span as f64).min(1.0);
            min_lr + (lr - min_lr) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos())
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

struct ParamState {
    name: String,
    param: Tensor,
    /// The elements of `param` (flattened) this state covers: all of them,
    /// or, sharded, one piece.
    piece: Option<(i64, i64)>,
    /// fp32 copy when `param` is lower precision.
    master: Option<Tensor>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    decay: bool,
}

impl ParamState {
    /// `t` (the parameter, its gradient, or a tensor of its shape) restricted
    /// to the elements this state covers: a view.
    fn piece_of(&self, t: &Tensor) -> Tensor {
        match self.piece {
            None => t.shallow_clone(),
            Some((start, len)) => t.view([-1]).narrow(0, start, len),
        }
    }
}

/// ZeRO: the flat shards of moments (and masters) of which every
/// [`ParamState`] holds a view, in [`arl_dist::zero::Zero::owned`] order.
struct Shard {
    /// Every parameter and its name, in the partition's order (a rank owns
    /// pieces of some only, but zeroes the gradients of all).
    names: Vec<String>,
    all: Vec<Tensor>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    master: Option<Tensor>,
}

/// AdamW (Loshchilov & Hutter, arXiv:1711.05101) as torch.optim.AdamW:
/// p ← p·(1 − lr·wd); m, v EMAs; p ← p − lr·m̂/(√v̂ + eps). No decay on
/// biases and norm weights (1-D tensors), as verl/OpenRLHF configure it.
///
/// Sharded ([`AdamW::sharded`], ZeRO stages 1 and 2), it keeps state for the
/// pieces of parameters this rank owns only and updates those; the caller
/// all-gathers the updated parameters.
pub struct AdamW {
    pub cfg: AdamWConfig,
    params: Vec<ParamState>,
    shard: Option<Shard>,
    /// Factor of the gradients in the next step (gradient clipping).
    grad_scale: f64,
    /// Optimizer steps taken (the bias-correction step).
    pub step: u64,
}

impl AdamW {
    pub fn new(named: BTreeMap<String, Tensor>, cfg: AdamWConfig) -> AdamW {
        let params = named
            .into_iter()
            .map(|(name, param)| {
                let master = (param.kind() != Kind::Float).then(|| param.detach().to_kind(Kind::Float));
                let z = || Tensor::zeros(param.size(), (Kind::Float, param.device()));
                ParamState { decay: param.dim() > 1, exp_avg: z(), exp_avg_sq: z(), master, name, param, piece: None }
            })
            .collect();
        AdamW { cfg, params, shard: None, grad_scale: 1.0, step: 0 }
    }

    /// State for the pieces `owned` of the parameters `named` (indexed in
    /// its order) only: this rank's shard.
    pub fn sharded(named: BTreeMap<String, Tensor>, cfg: AdamWConfig, owned: &[Segment]) -> AdamW {
        let named: Vec<(String, Tensor)> = named.into_iter().collect();
        let n: i64 = owned.iter().map(|s| s.len as i64).sum();
        let device = named.first().map_or(tch::Device::Cpu, |(_, p)| p.device());
        let low = named.iter().any(|(_, p)| p.kind() != Kind::Float);
        let shard = Shard {
            names: named.iter().map(|(n, _)| n.clone()).collect(),
            all: named.iter().map(|(_, p)| p.shallow_clone()).collect(),
            exp_avg: Tensor::zeros([n], (Kind::Float, device)),
            exp_avg_sq: Tensor::zeros([n], (Kind::Float, device)),
            master: low.then(|| Tensor::zeros([n], (Kind::Float, device))),
        };
        let mut at = 0i64;
        let params = owned
            .iter()
            .map(|s| {
                let (name, param) = &named[s.param];
                let (start, len) = (s.start as i64, s.len as i64);
                let view = |t: &Tensor| t.narrow(0, at, len);
                let st = ParamState {
                    name: name.clone(),
                    param: param.shallow_clone(),
                    piece: Some((start, len)),
                    master: shard.master.as_ref().filter(|_| param.kind() != Kind::Float).map(view),
                    exp_avg: view(&shard.exp_avg),
                    exp_avg_sq: view(&shard.exp_avg_sq),
                    decay: param.dim() > 1,
                };
                if let Some(m) = &st.master {
                    let mut m = m.shallow_clone();
                    tch::no_grad(|| m.copy_(&st.piece_of(&param.detach()).to_kind(Kind::Float)));
                }
                at += len;
                st
            })
            .collect();
        AdamW { cfg, params, shard: Some(shard), grad_scale: 1.0, step: 0 }
    }

    /// Bytes of optimizer state this process holds (moments and fp32 masters).
    pub fn state_bytes(&self) -> u64 {
        let bytes = |t: &Tensor| (t.numel() * 4) as u64;
        match &self.shard {
            Some(s) => bytes(&s.exp_avg) + bytes(&s.exp_avg_sq) + s.master.as_ref().map_or(0, bytes),
            None => self
                .params
                .iter()
                .map(|p| bytes(&p.exp_avg) + bytes(&p.exp_avg_sq) + p.master.as_ref().map_or(0, bytes))
                .sum(),
        }
    }

    pub fn zero_grad(&mut self) {
        let params: Vec<&Tensor> = match &self.shard {
            Some(s) => s.all.iter().collect(),
            None => self.params.iter().map(|p| &p.param).collect(),
        };
        for p in params {
            let mut g = p.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }

    /// Global L2 norm of the gradients; the next [`AdamW::step`] scales them
    /// to `max_norm` when above (torch's `clip_grad_norm_`). Returns the norm
    /// before clipping. Sharded, each rank sums the squares of its pieces and
    /// `comm` adds them up.
    pub fn clip_grad_norm(&mut self, max_norm: f64, comm: Option<&dyn Collective>) -> f64 {
        let sq: Vec<Tensor> = self
            .params
            .iter()
            .filter_map(|p| {
                let g = p.param.grad();
                g.defined().then(|| p.piece_of(&g).to_kind(Kind::Float).square().sum(Kind::Double))
            })
            .collect();
        let mut total = [if sq.is_empty() { 0.0 } else { Tensor::stack(&sq, 0).sum(Kind::Double).double_value(&[]) }];
        if let (Some(c), Some(_)) = (comm, &self.shard) {
            c.all_reduce_f64(&mut total, ReduceOp::Sum, "all-reduce of the gradient norm");
        }
        let norm = total[0].sqrt();
        self.grad_scale = 1.0;
        if max_norm > 0.0 && norm.is_finite() {
            let coef = max_norm / (norm + 1e-6);
            if coef < 1.0 {
                self.grad_scale = coef;
            }
        }
        norm
    }

    pub fn step(&mut self, lr: f64) {
        self.step += 1;
        let AdamWConfig { beta1, beta2, eps, weight_decay } = self.cfg;
        let bc1 = 1.0 - beta1.powi(self.step as i32);
        let bc2 = 1.0 - beta2.powi(self.step as i32);
        let scale = std::mem::replace(&mut self.grad_scale, 1.0);
        tch::no_grad(|| {
            for p in &mut self.params {
                let g = p.param.grad();
                if !g.defined() {
                    continue;
                }
                let mut g = p.piece_of(&g).to_kind(Kind::Float);
                if scale < 1.0 {
                    g = &g * scale;
                }
                let mut w = match &p.master {
                    Some(m) => m.shallow_clone(),
                    None => p.piece_of(&p.param),
                };
                if p.decay && weight_decay != 0.0 {
                    let _ = w.g_mul_scalar_(1.0 - lr * weight_decay);
                }
                let _ = p.exp_avg.lerp_(&g, 1.0 - beta1);
                let _ = p.exp_avg_sq.g_mul_scalar_(beta2);
                let _ = p.exp_avg_sq.addcmul_(&g, &(&g * (1.0 - beta2)));
                // w −= lr · (m / bc1) / (√v / √bc2 + eps), PyTorch's form; in
                // place, so that one parameter-sized temporary is alive at a
                // time (a 151,936 × 896 embedding is 545 MB).
                let mut denom = p.exp_avg_sq.sqrt();
                let _ = denom.g_mul_scalar_(1.0 / bc2.sqrt());
                let _ = denom.g_add_scalar_(eps);
                let _ = denom.g_mul_scalar_(-bc1 / lr);
                let _ = w.addcdiv_(&p.exp_avg, &denom);
                if p.master.is_some() {
                    let mut dst = p.piece_of(&p.param);
                    dst.copy_(&w.to_kind(dst.kind()));
                }
            }
        });
    }

    /// The state as whole tensors named as in `optimizer.safetensors`
    /// (`exp_avg.NAME`, `exp_avg_sq.NAME`, `master.NAME`). Sharded, every rank
    /// calls it (the shards are gathered through `zero`); the map comes back
    /// on rank 0 only.
    pub fn state(&self, zero: Option<(&dyn Collective, &Zero)>) -> Result<Option<BTreeMap<String, Tensor>>> {
        let mut map = BTreeMap::new();
        let Some(shard) = &self.shard else {
            for p in &self.params {
                map.insert(format!("exp_avg.{}", p.name), p.exp_avg.shallow_clone());
                map.insert(format!("exp_avg_sq.{}", p.name), p.exp_avg_sq.shallow_clone());
                if let Some(m) = &p.master {
                    map.insert(format!("master.{}", p.name), m.shallow_clone());
                }
            }
            return Ok(Some(map));
        };
        let Some((comm, zero)) = zero else {
            bail!("a sharded optimizer's state needs its collectives to be gathered")
        };
        let keep = comm.rank() == 0;
        let mut parts = vec![("exp_avg", &shard.exp_avg), ("exp_avg_sq", &shard.exp_avg_sq)];
        if let Some(m) = &shard.master {
            parts.push(("master", m));
        }
        for (key, own) in parts {
            if let Some(whole) =
                zero.gather(comm, own, keep, &format!("all-gather of the optimizer's {key} for a checkpoint"))
            {
                for (name, t) in shard.names.iter().zip(whole) {
                    map.insert(format!("{key}.{name}"), t);
                }
            }
        }
        Ok(keep.then_some(map))
    }

    /// Writes an unsharded optimizer's state (see [`save_state`]).
    pub fn save(&self, path: &Path) -> Result<()> {
        match self.state(None)? {
            Some(map) => save_state(&map, path),
            None => bail!("a sharded optimizer is saved through `state`"),
        }
    }

    /// Restores the state written by [`save_state`] (sharded or not, with
    /// any number of ranks); shapes must match.
    pub fn load(&mut self, path: &Path, step: u64) -> Result<()> {
        let bytes = std::fs::read(path).with_context(|| format!("cannot read `{}`", path.display()))?;
        let st = safetensors::SafeTensors::deserialize(&bytes).with_context(|| format!("`{}`", path.display()))?;
        let mut found = std::collections::HashMap::new();
        for (name, view) in st.tensors() {
            if view.dtype() != safetensors::Dtype::F32 {
                bail!("`{}`: tensor `{name}` is not float32", path.display());
            }
            let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
            found.insert(name, Tensor::f_from_data_size(view.data(), &shape, Kind::Float)?);
        }
        for p in &self.params {
            for key in [format!("exp_avg.{}", p.name), format!("exp_avg_sq.{}", p.name)] {
                match found.get(&key) {
                    None => bail!("`{}`: optimizer state `{key}` is missing", path.display()),
                    Some(t) if t.size() != p.param.size() => {
                        bail!(
                            "`{}`: `{key}` has shape {:?}, parameter has {:?}",
                            path.display(),
                            t.size(),
                            p.param.size()
                        )
                    }
                    _ => {}
                }
            }
        }
        tch::no_grad(|| {
            for p in &mut self.params {
                let dev = p.param.device();
                let m = p.piece_of(&found[&format!("exp_avg.{}", p.name)]).to_device(dev);
                let v = p.piece_of(&found[&format!("exp_avg_sq.{}", p.name)]).to_device(dev);
                p.exp_avg.copy_(&m);
                p.exp_avg_sq.copy_(&v);
                if let (Some(m), Some(t)) = (&p.master, found.get(&format!("master.{}", p.name))) {
                    let mut m = m.shallow_clone();
                    m.copy_(&p.piece_of(t).to_device(dev));
                    let mut dst = p.piece_of(&p.param);
                    dst.copy_(&m.to_kind(dst.kind()));
                }
            }
        });
        self.step = step;
        Ok(())
    }
}

/// Writes optimizer state (from [`AdamW::state`]) as safetensors, atomically.
pub fn save_state(map: &BTreeMap<String, Tensor>, path: &Path) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tempfile::tempdir_in(dir)?;
    weights::write_sharded(tmp.path(), map, Kind::Float, u64::MAX)?;
    std::fs::rename(tmp.path().join("model.safetensors"), path)
        .with_context(|| format!("writing `{}`", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_shapes() {
        assert_eq!(lr_at(0, 1.0, 0.0, 4, 10, Schedule::Constant), 0.25);
        assert_eq!(lr_at(3, 1.0, 0.0, 4, 10, Schedule::Constant), 1.0);
        assert_eq!(lr_at(9, 1.0, 0.0, 4, 10, Schedule::Constant), 1.0);
        assert!((lr_at(4, 1.0, 0.1, 4, 10, Schedule::Cosine) - 1.0).abs() < 1e-12);
        assert!((lr_at(7, 1.0, 0.1, 4, 10, Schedule::Cosine) - 0.55).abs() < 1e-12);
        assert!((lr_at(50, 1.0, 0.1, 4, 10, Schedule::Cosine) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn matches_hand_computed_adamw() {
        // One parameter, two steps, against the closed form.
        // 2-D, so weight decay applies (1-D tensors are norms/biases).
        let p = Tensor::from_slice(&[1.0f32, -2.0]).view([1, 2]).set_requires_grad(true);
        let mut opt = AdamW::new(
            [("w".to_string(), p.shallow_clone())].into(),
            AdamWConfig { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.1 },
        );
        let (mut w, mut m, mut v) = ([1.0f64, -2.0], [0.0f64; 2], [0.0f64; 2]);
        for step in 1..=2 {
            opt.zero_grad();
            let loss = (&p * &p).sum(Kind::Float) * 0.5; // grad = p
            loss.backward();
            opt.step(0.01);
            for i in 0..2 {
                let g = w[i];
                w[i] *= 1.0 - 0.01 * 0.1;
                m[i] = 0.9 * m[i] + 0.1 * g;
                v[i] = 0.999 * v[i] + 0.001 * g * g;
                let mh = m[i] / (1.0 - 0.9f64.powi(step));
                let vh = v[i] / (1.0 - 0.999f64.powi(step));
                w[i] -= 0.01 * mh / (vh.sqrt() + 1e-8);
            }
        }
        let got: Vec<f32> = Vec::try_from(&p.detach().flatten(0, -1)).unwrap();
        for i in 0..2 {
            assert!((got[i] as f64 - w[i]).abs() < 1e-6, "{got:?} vs {w:?}");
        }
    }
}
