//! Checkpoints: strict loading of a HF directory (single or sharded
//! safetensors, or a PEFT adapter on its base) and saving one.
use super::Model;
use crate::config::ModelConfig;
use crate::lora;
use crate::weights;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::Path;
use tch::{Device, Kind, Tensor};

/// How a checkpoint is written.
#[derive(Debug, Clone)]
pub struct SaveOptions {
    /// Tensor dtype in the files.
    pub kind: Kind,
    /// Largest shard, in bytes (HF's `max_shard_size`).
    pub max_shard_bytes: u64,
}

impl Default for SaveOptions {
    fn default() -> Self {
        SaveOptions { kind: Kind::Float, max_shard_bytes: 5 << 30 }
    }
}

impl Model {
    /// Strict load of a HF directory (single or sharded safetensors): every
    /// tensor the model has must be there with its shape, and nothing else.
    /// A LoRA adapter directory (PEFT's `adapter_config.json`) loads its base
    /// model (`base_model_name_or_path`) with the adapter attached
    /// ([`Model::load_lora`]).
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<Model> {
        if lora::is_adapter(dir) {
            let base = lora::base_of(dir)?;
            let mut model = Model::load(&base, device, kind)?;
            model.load_lora(dir)?;
            return Ok(model);
        }
        let config = ModelConfig::from_file(&dir.join("config.json"))?;
        let mut model = tch::no_grad(|| Model::new(config, device, kind))?;
        model.reload(dir).with_context(|| format!("loading `{}`", dir.display()))?;
        model.source = Some(std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()));
        Ok(model)
    }

    /// Re-loads weights in place from a checkpoint of the same shape. Every
    /// tensor is read and checked before any is copied: on error nothing changes.
    pub fn reload(&mut self, dir: &Path) -> Result<()> {
        // Headers only first: every tensor is checked before any is read, and
        // each one is then read straight into its parameter (no copy of the
        // whole checkpoint in memory).
        let mut src = weights::index_all(dir)?;
        let vars = self.vs.variables();
        // Not parameters: HF may store rotary buffers; a tied head may be saved too.
        src.retain(|k, _| !k.ends_with("rotary_emb.inv_freq"));
        if self.config.tie_word_embeddings {
            src.remove("lm_head.weight");
        }
        let mut names: Vec<&String> = vars.keys().collect();
        names.sort();
        for name in &names {
            let want = vars[*name].size();
            match src.get(*name) {
                None => bail!("tensor `{name}` is missing from the checkpoint (model expects shape {want:?})"),
                Some(e) if e.shape != want => {
                    bail!("tensor `{name}`: checkpoint has shape {:?}, model expects {want:?}", e.shape)
                }
                Some(_) => {}
            }
        }
        let mut extra: Vec<&String> = src.keys().filter(|k| !vars.contains_key(*k)).collect();
        if !extra.is_empty() {
            extra.sort();
            bail!(
                "checkpoint has tensors the model does not: {}",
                extra.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
            );
        }
        // In file order, one open file at a time.
        let mut order: Vec<(&String, &weights::Entry)> = src.iter().collect();
        order.sort_by(|a, b| (&a.1.file, a.1.start).cmp(&(&b.1.file, b.1.start)));
        tch::no_grad(|| -> Result<()> {
            let mut open: Option<(std::path::PathBuf, std::fs::File)> = None;
            for (name, e) in order {
                if open.as_ref().is_none_or(|(p, _)| p != &e.file) {
                    let f =
                        std::fs::File::open(&e.file).with_context(|| format!("cannot read `{}`", e.file.display()))?;
                    open = Some((e.file.clone(), f));
                }
                let (_, f) = open.as_mut().expect("opened");
                weights::read_into(f, e, &vars[name])?;
            }
            Ok(())
        })?;
        // The packed copies follow the weights.
        if self.has_copies() {
            self.repack();
        }
        Ok(())
    }

    /// Named parameters in sorted order (lm_head absent when tied).
    pub fn named_parameters(&self) -> BTreeMap<String, Tensor> {
        self.vs.variables().into_iter().collect()
    }

    /// Writes `config.json`, `generation_config.json` and the weights into
    /// `dir` (which must exist) — or, with an adapter attached, the adapter
    /// alone in PEFT's format (`adapter_config.json` naming the base
    /// directory, `adapter_model.safetensors` in the adapter's own dtype).
    /// The caller makes the directory atomic.
    pub fn save(&self, dir: &Path, opts: &SaveOptions) -> Result<()> {
        if let Some(a) = &self.attached {
            let base = self.source.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            let cfg = serde_json::to_string_pretty(&a.cfg.to_json(&base))? + "\n";
            std::fs::write(dir.join(lora::ADAPTER_CONFIG), cfg).context("writing adapter_config.json")?;
            let params = self.trainable_parameters();
            return weights::write_file(&dir.join(lora::ADAPTER_WEIGHTS), &params, self.kind());
        }
        let params = self.named_parameters();
        weights::write_sharded(dir, &params, opts.kind, opts.max_shard_bytes)?;
        let cfg = self.config.to_checkpoint_json(weights::kind_name(opts.kind))?;
        std::fs::write(dir.join("config.json"), cfg).context("writing config.json")?;
        let mut gen = serde_json::Map::new();
        if let Some(b) = &self.config.bos_token_id {
            gen.insert("bos_token_id".into(), b.clone());
        }
        if let Some(e) = &self.config.eos_token_id {
            gen.insert("eos_token_id".into(), e.clone());
        }
        if let Some(p) = &self.config.pad_token_id {
            gen.insert("pad_token_id".into(), p.clone());
        }
        std::fs::write(dir.join("generation_config.json"), serde_json::to_string_pretty(&gen)? + "\n")
            .context("writing generation_config.json")?;
        Ok(())
    }
}
