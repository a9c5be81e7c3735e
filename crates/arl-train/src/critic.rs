//! PPO's learned critic: the policy's decoder (`model::Model`) with a scalar
//! value head, `value_head.weight` [1, hidden] and `value_head.bias` [1],
//! reading the last hidden state after the final norm. A critic checkpoint is
//! a Hugging Face model directory like the policy's, with those two tensors
//! added and `"arl_critic": {…}` in its config.json (an inference server
//! refuses it: it has tensors a decoder does not).
//!
//! With LoRA (`--train-critic` with `--lora-rank`), the critic is a LoRA
//! adapter on the policy's base plus the value head, both trained: its
//! directory is the adapter in PEFT's format with the head in
//! `value_head.safetensors` beside it.
//!
//! A policy checkpoint is also accepted wherever a critic is: the critic
//! starts from the policy's weights with a zero value head (V ≡ 0 until it is
//! trained), so `arl-train values` and `arl-train --train-critic` given the
//! same policy directory see the same critic, with no seed involved.
//!
//! Values are response-aligned like log-probs: the value of response token i
//! is read at the position that predicts it (`prompt_len − 1 + i`), i.e. the
//! value of the state before the token was generated. `arl-advantage
//! --estimator gae` takes δ_i = r_i + γ V_{i+1} − V_i with V after the last
//! token 0 and the reward on the last token.
use super::batch::{aligned, padded};
use super::checkpoint;
use super::micro::{micro_batches, Batching};
use super::optim::{AdamW, AdamWConfig};
use super::value_loss::{explained_variance, value_loss};
use super::Sample;
use crate::config::{CriticConfig, ScoreConfig, TOOL};
use anyhow::{bail, Context, Result};
use arl_model::{Layout, Model, ModelConfig, SaveOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use tch::nn::Init;
use tch::{Device, Kind, Tensor};

/// The config.json key that marks a critic checkpoint.
pub const MARKER: &str = "arl_critic";
/// The value head's tensor prefix.
pub const HEAD: &str = "value_head";
/// The value head of a LoRA critic, next to its adapter.
pub const HEAD_FILE: &str = "value_head.safetensors";

pub struct Critic {
    pub model: Model,
    w: Tensor,
    b: Tensor,
}

/// Whether `dir` is a critic: a config.json that marks one, or a LoRA
/// adapter with its value head.
pub fn is_critic(dir: &Path) -> Result<bool> {
    if arl_model::lora::is_adapter(dir) {
        return Ok(dir.join(HEAD_FILE).is_file());
    }
    Ok(ModelConfig::from_file(&dir.join("config.json"))?.extra.contains_key(MARKER))
}

impl Critic {
    /// Loads a critic checkpoint, or starts one from a policy checkpoint
    /// (zero value head). Loading is as strict as the policy's.
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Critic> {
        Critic::load_with(dir, device, kind, None)
    }

    /// [`Critic::load`], with a fresh LoRA adapter attached when `lora` is
    /// given and `dir` holds none (the value head stays trainable).
    pub fn load_with(dir: &Path, device: Device, kind: Kind, lora: Option<&arl_model::LoraConfig>) -> Result<Critic> {
        if arl_model::lora::is_adapter(dir) {
            // A LoRA critic (adapter + value_head.safetensors), or a LoRA
            // policy (its adapter, a zero head).
            let mut model = super::load_model(dir, device, kind)?;
            let (w, b) = Critic::new_head(&mut model, kind);
            let head = dir.join(HEAD_FILE);
            if head.is_file() {
                let t = arl_model::weights::read_file(&head)?;
                let hidden = model.config.hidden_size as i64;
                for (name, var, shape) in [("value_head.weight", &w, vec![1, hidden]), ("value_head.bias", &b, vec![1])]
                {
                    let src = t.get(name).with_context(|| format!("`{}` has no `{name}`", head.display()))?;
                    if src.size() != shape {
                        bail!("`{}`: `{name}` has shape {:?}, this critic needs {shape:?}", head.display(), src.size());
                    }
                    tch::no_grad(|| var.shallow_clone().f_copy_(&src.to_kind(kind).to_device(device)))?;
                }
            } else {
                model.config.extra.insert(MARKER.into(), json!({"initialised_from": dir.display().to_string()}));
            }
            return Ok(Critic { model, w, b });
        }
        let mut c = Critic::load_full(dir, device, kind)?;
        if let Some(cfg) = lora {
            if is_critic(dir)? {
                bail!(
                    "`{}` is a full critic checkpoint: a LoRA critic starts from the policy's checkpoint (drop --critic)",
                    dir.display()
                );
            }
            c.model.add_lora(cfg)?;
            // add_lora froze every tensor of the model: the head trains.
            c.w = c.w.set_requires_grad(true);
            c.b = c.b.set_requires_grad(true);
        }
        Ok(c)
    }

    /// The value head's tensors, zero and trainable, among the model's
    /// variables (in its kind).
    fn new_head(model: &mut Model, kind: Kind) -> (Tensor, Tensor) {
        let hidden = model.config.hidden_size as i64;
        let (w, b) = tch::no_grad(|| {
            let root = model.vs.root();
            let p = &root / HEAD;
            (p.var("weight", &[1, hidden], Init::Const(0.0)), p.var("bias", &[1], Init::Const(0.0)))
        });
        if kind != Kind::Float {
            model.vs.set_kind(kind);
        }
        (w, b)
    }

    /// A full critic checkpoint, or a policy checkpoint with a zero head.
    fn load_full(dir: &Path, device: Device, kind: Kind) -> Result<Critic> {
        let critic = is_critic(dir)?;
        let mut model = if critic {
            let config = ModelConfig::from_file(&dir.join("config.json"))?;
            tch::no_grad(|| Model::new(config, device, kind))?
        } else {
            Model::load(dir, device, kind)?
        };
        let (w, b) = Critic::new_head(&mut model, kind);
        if critic {
            model.reload(dir).with_context(|| format!("loading the critic `{}`", dir.display()))?;
        } else {
            model.config.extra.insert(
                MARKER.into(),
                json!({"value_head": ["value_head.weight", "value_head.bias"], "initialised_from": dir.display().to_string()}),
            );
        }
        Ok(Critic { model, w, b })
    }

    /// Values [B, T] (float32) of every position of `ids` [B, T] (right
    /// padding), the rows run in `layout` (packed: 0 at padding).
    pub fn values(&self, ids: &Tensor, layout: Layout<'_>) -> Tensor {
        let h = self.model.features_in(ids, layout);
        h.linear(&self.w, Some(&self.b)).squeeze_dim(-1).to_kind(Kind::Float)
    }

    /// Writes the critic (weights, marked config, tokenizer files of
    /// `tokenizer_dir`; with LoRA, the adapter and `value_head.safetensors`)
    /// to `dest` atomically; `extra` may add files.
    pub fn save(
        &self,
        dest: &Path,
        opts: &SaveOptions,
        tokenizer_dir: &Path,
        extra: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<()> {
        let lora = self.model.lora_config().is_some();
        checkpoint::save(&self.model, dest, opts, tokenizer_dir, |dir| {
            if lora {
                let head: std::collections::BTreeMap<String, Tensor> = [
                    ("value_head.weight".to_string(), self.w.shallow_clone()),
                    ("value_head.bias".to_string(), self.b.shallow_clone()),
                ]
                .into();
                arl_model::weights::write_file(&dir.join(HEAD_FILE), &head, Kind::Float)?;
            }
            extra(dir)
        })
    }

    /// What trains: every parameter, or with LoRA the adapter and the head.
    pub fn trainable_parameters(&self) -> std::collections::BTreeMap<String, Tensor> {
        let mut p = self.model.trainable_parameters();
        if self.model.lora_config().is_some() {
            p.insert("value_head.weight".into(), self.w.shallow_clone());
            p.insert("value_head.bias".into(), self.b.shallow_clone());
        }
        p
    }

    /// Response-token values of every sample (no gradient), one per
    /// response token, in micro-batches of `budget` run as `batching` says.
    pub fn score(&self, samples: &[&Sample], budget: usize, batching: Batching) -> Vec<Vec<f32>> {
        let order: Vec<usize> = (0..samples.len()).collect();
        let mut out = vec![vec![]; samples.len()];
        tch::no_grad(|| {
            for mb in micro_batches(batching, &order, |i| samples[i], budget) {
                let group: Vec<&Sample> = mb.items.iter().map(|&i| samples[i]).collect();
                let (ids, _, _) = padded(&group, self.model.device());
                let glens: Vec<usize> = group.iter().map(|s| s.tokens.len()).collect();
                let v = self.values(&ids, mb.layout(batching, &glens)).to_device(Device::Cpu);
                for (b, &i) in mb.items.iter().enumerate() {
                    let s = samples[i];
                    let row = v.get(b as i64).narrow(0, s.prompt_len as i64 - 1, s.response_len() as i64);
                    out[i] = Vec::<f32>::try_from(&row).unwrap_or_default();
                }
            }
        });
        out
    }
}

/// What `--train-critic` reads from a record: `returns`, and `values` (V_old)
/// when values are clipped. `Err` names the missing field.
pub fn check_sample(s: &Sample, value_clip: Option<f64>) -> Result<(), String> {
    if s.returns.is_none() {
        return Err(
            "field `returns`: missing; `--train-critic` needs them (run `arl-advantage --estimator gae`)".into()
        );
    }
    if s.values.is_none() && value_clip.is_some() {
        return Err(
            "field `values`: missing; `--value-clip` needs the values the rollout was scored with (`arl-train values`)"
                .into(),
        );
    }
    Ok(())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct CriticState {
    step: u64,
}

/// `--train-critic`: the critic, its own AdamW, and one value-loss step per
/// policy step on the same global batch.
pub struct CriticTrainer {
    critic: Critic,
    opt: AdamW,
    lr: f64,
    clip: Option<f64>,
    clip_grad: f64,
    budget: usize,
    /// How the micro-batches run (as the policy's).
    batching: Batching,
    dest: PathBuf,
}

impl CriticTrainer {
    /// Loads `--critic` (default: the policy `model_dir`); continues its
    /// AdamW moments when it is a critic checkpoint with trainer state.
    pub fn new(
        a: &CriticConfig,
        model_dir: &Path,
        opt_cfg: AdamWConfig,
        clip_grad: f64,
        budget: usize,
        batching: Batching,
        device: Device,
        kind: Kind,
    ) -> Result<CriticTrainer> {
        let src = a.critic.clone().unwrap_or_else(|| model_dir.to_path_buf());
        let dest = a.save.clone().context("`--train-critic` needs `--critic-save DIR`")?;
        let critic = Critic::load_with(&src, device, kind, a.lora.as_ref())?;
        let mut opt = AdamW::new(critic.trainable_parameters(), opt_cfg);
        let state = src.join("trainer_state").join("critic.json");
        if is_critic(&src)? && state.exists() {
            let text = std::fs::read_to_string(&state).with_context(|| format!("reading `{}`", state.display()))?;
            let st: CriticState = serde_json::from_str(&text).with_context(|| format!("`{}`", state.display()))?;
            opt.load(&src.join("trainer_state").join("optimizer.safetensors"), st.step)?;
        }
        Ok(CriticTrainer { critic, opt, lr: a.lr, clip: a.value_clip, clip_grad, budget, batching, dest })
    }

    /// One critic optimizer step on the samples `chunk`, token-mean of the
    /// value loss over their trainable tokens. Returns the step's metrics:
    /// `value_loss` (before the update), `value_clipfrac`,
    /// `value_explained_var` (of the records' `values`, i.e. the critic the
    /// rollout was scored with, against `returns`), `value_mean`,
    /// `return_mean`, `value_grad_norm`, `critic_lr`.
    pub fn step(&mut self, samples: &[Sample], chunk: &[usize], lens: &[usize]) -> Result<Value> {
        let device = self.critic.model.device();
        let tokens: f64 = chunk.iter().map(|&i| samples[i].loss_mask.iter().map(|&x| f64::from(x)).sum::<f64>()).sum();
        let denom = tokens.max(1.0);
        let (mut loss_sum, mut clip_sum, mut v_sum) = (0.0, 0.0, 0.0);
        self.opt.zero_grad();
        let mut by_len = chunk.to_vec();
        by_len.sort_by_key(|&i| lens[i]);
        let order = if self.batching == Batching::Padded { &by_len } else { chunk };
        for mb in micro_batches(self.batching, order, |i| &samples[i], self.budget) {
            let group: Vec<&Sample> = mb.items.iter().map(|&i| &samples[i]).collect();
            let (ids, _, t) = padded(&group, device);
            let glens: Vec<usize> = group.iter().map(|s| s.tokens.len()).collect();
            let layout = mb.layout(self.batching, &glens);
            let mask = aligned(&group, t, device, |s| Some(&s.loss_mask)).expect("always present");
            let ret = aligned(&group, t, device, |s| s.returns.as_deref()).expect("checked by check_sample");
            let v = self.critic.values(&ids, layout).narrow(1, 0, t as i64 - 1);
            let old = match self.clip {
                Some(_) => aligned(&group, t, device, |s| s.values.as_deref()).expect("checked by check_sample"),
                None => v.detach(),
            };
            let (loss, clipped) = value_loss(&v, &old, &ret, self.clip);
            let masked = &loss * &mask;
            loss_sum += masked.detach().sum(Kind::Float).double_value(&[]);
            clip_sum += (&clipped * &mask).sum(Kind::Float).double_value(&[]);
            v_sum += (v.detach() * &mask).sum(Kind::Float).double_value(&[]);
            (masked.sum(Kind::Float) / denom).backward();
        }
        let norm = self.opt.clip_grad_norm(self.clip_grad, None);
        if norm.is_finite() {
            self.opt.step(self.lr);
        } else {
            arl_core::cli::warn(TOOL, format!("critic gradient norm is {norm}; step skipped"));
            self.opt.step += 1;
        }
        let (mut vs, mut rs, mut ms) = (vec![], vec![], vec![]);
        for &i in chunk {
            let s = &samples[i];
            if let (Some(v), Some(r)) = (&s.values, &s.returns) {
                vs.extend_from_slice(v);
                rs.extend_from_slice(r);
                ms.extend_from_slice(&s.loss_mask);
            }
        }
        let ret_sum: f64 = chunk
            .iter()
            .map(|&i| {
                let s = &samples[i];
                let r = s.returns.as_deref().unwrap_or(&[]);
                r.iter().zip(&s.loss_mask).map(|(&r, &m)| f64::from(r) * f64::from(m)).sum::<f64>()
            })
            .sum();
        Ok(json!({
            "value_loss": loss_sum / denom,
            "value_clipfrac": clip_sum / denom,
            "value_explained_var": explained_variance(&vs, &rs, &ms),
            "value_mean": v_sum / denom,
            "return_mean": ret_sum / denom,
            "value_grad_norm": norm,
            "critic_lr": self.lr,
        }))
    }

    /// Writes the critic and its optimizer state to `--critic-save` atomically.
    pub fn save(&self, opts: &SaveOptions, tokenizer_dir: &Path) -> Result<()> {
        let state = CriticState { step: self.opt.step };
        self.critic.save(&self.dest, opts, tokenizer_dir, |dir| {
            let sdir = dir.join("trainer_state");
            std::fs::create_dir_all(&sdir)?;
            self.opt.save(&sdir.join("optimizer.safetensors"))?;
            std::fs::write(sdir.join("critic.json"), serde_json::to_string_pretty(&state)? + "\n")?;
            Ok(())
        })
    }
}

/// `arl-train values`: writes `values` into every record, streaming.
pub fn values(a: &ScoreConfig) -> Result<std::process::ExitCode> {
    let device = a.device.resolve(None)?;
    super::set_threads(a.threads);
    let critic = Critic::load(&a.model, device, Kind::Float).map_err(|e| {
        if arl_model::lora::is_adapter(&a.model) {
            arl_core::cli::data(format!("{e:#}"))
        } else {
            e
        }
    })?;
    super::score::annotate(
        &a.input,
        &a.output,
        |refs| critic.score(refs, a.max_tokens_per_micro_batch, a.batching()),
        |r, v| r.values = Some(v),
    )
}
