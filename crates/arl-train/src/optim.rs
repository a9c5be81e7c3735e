//! AdamW with state that can be saved and restored (tch's optimizer state is
//! not reachable from Rust), fp32 master weights for low-precision models,
//! gradient clipping, and the learning-rate schedule.
use anyhow::{bail, Context, Result};
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
    /// fp32 copy when `param` is lower precision.
    master: Option<Tensor>,
    exp_avg: Tensor,
    exp_avg_sq: Tensor,
    decay: bool,
}

/// AdamW (Loshchilov & Hutter, arXiv:1711.05101) as torch.optim.AdamW:
/// p ← p·(1 − lr·wd); m, v EMAs; p ← p − lr·m̂/(√v̂ + eps). No decay on
/// biases and norm weights (1-D tensors), as verl/OpenRLHF configure it.
pub struct AdamW {
    pub cfg: AdamWConfig,
    params: Vec<ParamState>,
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
                ParamState { decay: param.dim() > 1, exp_avg: z(), exp_avg_sq: z(), master, name, param }
            })
            .collect();
        AdamW { cfg, params, step: 0 }
    }

    pub fn zero_grad(&mut self) {
        for p in &mut self.params {
            let mut g = p.param.grad();
            if g.defined() {
                let _ = g.zero_();
            }
        }
    }

    /// Global L2 norm of the gradients; scales them to `max_norm` when above
    /// (torch's `clip_grad_norm_`). Returns the norm before clipping.
    pub fn clip_grad_norm(&mut self, max_norm: f64) -> f64 {
        let sq: Vec<Tensor> = self
            .params
            .iter()
            .filter_map(|p| {
                let g = p.param.grad();
                g.defined().then(|| g.to_kind(Kind::Float).square().sum(Kind::Float))
            })
            .collect();
        if sq.is_empty() {
            return 0.0;
        }
        let norm = Tensor::stack(&sq, 0).sum(Kind::Float).sqrt().double_value(&[]);
        if max_norm > 0.0 && norm.is_finite() {
            let coef = max_norm / (norm + 1e-6);
            if coef < 1.0 {
                tch::no_grad(|| {
                    for p in &self.params {
                        let mut g = p.param.grad();
                        if g.defined() {
                            let _ = g.g_mul_scalar_(coef);
                        }
                    }
                });
            }
        }
        norm
    }

    pub fn step(&mut self, lr: f64) {
        self.step += 1;
        let AdamWConfig { beta1, beta2, eps, weight_decay } = self.cfg;
        let bc1 = 1.0 - beta1.powi(self.step as i32);
        let bc2 = 1.0 - beta2.powi(self.step as i32);
        tch::no_grad(|| {
            for p in &mut self.params {
                let g = p.param.grad();
                if !g.defined() {
                    continue;
                }
                let g = g.to_kind(Kind::Float);
                let mut w = match &p.master {
                    Some(m) => m.shallow_clone(),
                    None => p.param.shallow_clone(),
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
                    let mut dst = p.param.shallow_clone();
                    dst.copy_(&w.to_kind(dst.kind()));
                }
            }
        });
    }

    /// Saves m, v (and fp32 masters) as safetensors.
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut map = BTreeMap::new();
        for p in &self.params {
            map.insert(format!("exp_avg.{}", p.name), p.exp_avg.shallow_clone());
            map.insert(format!("exp_avg_sq.{}", p.name), p.exp_avg_sq.shallow_clone());
            if let Some(m) = &p.master {
                map.insert(format!("master.{}", p.name), m.shallow_clone());
            }
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let tmp = tempfile::tempdir_in(dir)?;
        weights::write_sharded(tmp.path(), &map, Kind::Float, u64::MAX)?;
        std::fs::rename(tmp.path().join("model.safetensors"), path)
            .with_context(|| format!("writing `{}`", path.display()))?;
        Ok(())
    }

    /// Restores the state written by [`AdamW::save`]; shapes must match.
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
                p.exp_avg = found[&format!("exp_avg.{}", p.name)].to_device(dev);
                p.exp_avg_sq = found[&format!("exp_avg_sq.{}", p.name)].to_device(dev);
                if let (Some(m), Some(src)) = (&mut p.master, found.get(&format!("master.{}", p.name))) {
                    *m = src.to_device(dev);
                    let mut dst = p.param.shallow_clone();
                    dst.copy_(&m.to_kind(dst.kind()));
                }
            }
        });
        self.step = step;
        Ok(())
    }
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
