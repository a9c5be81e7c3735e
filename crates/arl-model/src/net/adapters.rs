//! LoRA adapters on the model: the attached one that training updates
//! (PEFT's format on disk), merging it, and the adapters served by name
//! alongside the base; which adapter a forward applies ([`Sel`]).
use super::linear::{Linear, LoraPair, Sel};
use super::Model;
use crate::lora::{self, LoraConfig};
use crate::weights;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use tch::nn::{self, Init};
use tch::{Device, Kind, Tensor};

/// The attached adapter: its config and its (trainable) tensors, by PEFT name.
pub(super) struct Attached {
    pub(super) cfg: LoraConfig,
    pub(super) vs: nn::VarStore,
}

/// A served adapter.
pub(super) struct Served {
    id: u32,
    cfg: LoraConfig,
    dir: std::path::PathBuf,
}

impl Model {
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
        if self.has_copies() {
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
    pub(super) fn train_sel(&self, training: bool) -> Sel<'static> {
        match &self.attached {
            Some(a) => Sel::All { id: 0, dropout: if training { a.cfg.dropout } else { 0.0 } },
            None => Sel::Off,
        }
    }

    /// The `n` rows of [`Model::extend_with`] grouped by adapter (`lora[i]`,
    /// else the attached one; no groups when `lora` names none), and the
    /// adapter's id when all `n` rows are on one.
    pub(super) fn adapter_rows(&self, lora: &[Option<u32>], n: usize) -> (Vec<(u32, Tensor)>, Option<u32>) {
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
            [(id, rows)] if rows.len() == n => Some(*id),
            _ => None,
        };
        let groups =
            groups.into_iter().map(|(id, rows)| (id, Tensor::from_slice(&rows).to_device(self.device))).collect();
        (groups, whole)
    }
}
