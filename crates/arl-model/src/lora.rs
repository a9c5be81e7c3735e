//! LoRA adapters in PEFT's on-disk format: `adapter_config.json` and
//! `adapter_model.safetensors`, tensors named as PEFT names them
//! (`base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight`, A
//! `[r, in]`, B `[out, r]`), so `peft.PeftModel.from_pretrained` loads what
//! arl writes and arl loads what PEFT writes. A linear layer with an adapter
//! computes `W·x + s·B·A·x` with `s = alpha / r` (`alpha / √r` with
//! rsLoRA). The model side is in `net/adapters.rs` ([`crate::Model::add_lora`],
//! [`crate::Model::load_adapter`]).
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The projections an adapter can target, by their names in the checkpoint;
/// `all-linear` is all of them (the LM head excepted, as in PEFT).
pub const ALL_LINEAR: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];
pub const ADAPTER_CONFIG: &str = "adapter_config.json";
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";

/// An adapter's shape and scaling.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f64,
    /// Dropout on the adapter's input while training (PEFT's `lora_dropout`).
    pub dropout: f64,
    /// Target projections, in [`ALL_LINEAR`]'s order.
    pub targets: Vec<String>,
    /// rsLoRA scaling `alpha / √r` instead of `alpha / r`.
    pub rslora: bool,
}

impl LoraConfig {
    /// Checks the values; `targets` as [`LoraConfig::parse_targets`] reads them.
    pub fn new(rank: usize, alpha: f64, dropout: f64, targets: &str) -> Result<LoraConfig> {
        let c = LoraConfig { rank, alpha, dropout, targets: Self::parse_targets(targets)?, rslora: false };
        c.validate()?;
        Ok(c)
    }

    fn validate(&self) -> Result<()> {
        if self.rank == 0 {
            bail!("the LoRA rank must be at least 1");
        }
        if !(self.alpha.is_finite() && self.alpha > 0.0) {
            bail!("lora alpha must be a positive number, not {}", self.alpha);
        }
        if !(0.0..1.0).contains(&self.dropout) {
            bail!("lora dropout must be in [0, 1), not {}", self.dropout);
        }
        if self.targets.is_empty() {
            bail!("no LoRA target modules");
        }
        Ok(())
    }

    /// `q_proj,v_proj` (any of [`ALL_LINEAR`], comma-separated) or
    /// `all-linear`; returned in [`ALL_LINEAR`]'s order, without repeats.
    pub fn parse_targets(s: &str) -> Result<Vec<String>> {
        let s = s.trim();
        if s == "all-linear" || s == "all" {
            return Ok(ALL_LINEAR.iter().map(|t| t.to_string()).collect());
        }
        let mut want = Vec::new();
        for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            if !ALL_LINEAR.contains(&t) {
                bail!("unknown LoRA target `{t}` (one of {}, or all-linear)", ALL_LINEAR.join(", "));
            }
            want.push(t);
        }
        Ok(ALL_LINEAR.iter().filter(|t| want.contains(t)).map(|t| t.to_string()).collect())
    }

    /// The factor of B·A.
    pub fn scale(&self) -> f64 {
        if self.rslora {
            self.alpha / (self.rank as f64).sqrt()
        } else {
            self.alpha / self.rank as f64
        }
    }

    /// `adapter_config.json` as PEFT writes it for a causal LM.
    pub fn to_json(&self, base: &str) -> Value {
        json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": base,
            "r": self.rank,
            "lora_alpha": self.alpha,
            "lora_dropout": self.dropout,
            "target_modules": self.targets,
            "bias": "none",
            "fan_in_fan_out": false,
            "use_rslora": self.rslora,
            "use_dora": false,
            "init_lora_weights": true,
            "inference_mode": true,
            "modules_to_save": null,
            "layers_to_transform": null,
            "rank_pattern": {},
            "alpha_pattern": {},
            "revision": null,
        })
    }

    /// Reads an `adapter_config.json`, refusing what arl cannot apply
    /// exactly (DoRA, biases, per-module ranks, extra trained modules…).
    /// Returns the config and `base_model_name_or_path`.
    pub fn from_json(v: &Value) -> Result<(LoraConfig, Option<String>)> {
        let get = |k: &str| v.get(k).filter(|x| !x.is_null());
        match get("peft_type").and_then(Value::as_str) {
            Some("LORA") => {}
            Some(other) => bail!("`peft_type` is `{other}`: only LORA adapters are supported"),
            None => bail!("`peft_type` is missing (not a PEFT adapter config)"),
        }
        let rank = get("r").and_then(Value::as_u64).context("`r` (the rank) is missing or not an integer")? as usize;
        let alpha = get("lora_alpha").and_then(Value::as_f64).unwrap_or(8.0);
        let dropout = get("lora_dropout").and_then(Value::as_f64).unwrap_or(0.0);
        let rslora = get("use_rslora").and_then(Value::as_bool).unwrap_or(false);
        let unsupported = |k: &str, why: &str| -> Result<()> {
            let set = match get(k) {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(Value::String(s)) => s != "none",
                Some(Value::Object(o)) => !o.is_empty(),
                Some(Value::Array(a)) => !a.is_empty(),
                Some(_) => true,
            };
            if set {
                bail!("`{k}` is set: {why} is not supported");
            }
            Ok(())
        };
        unsupported("use_dora", "DoRA")?;
        unsupported("fan_in_fan_out", "a transposed (Conv1D) base layer")?;
        unsupported("bias", "training biases with the adapter")?;
        unsupported("lora_bias", "a bias on lora_B")?;
        unsupported("rank_pattern", "a rank per module")?;
        unsupported("alpha_pattern", "an alpha per module")?;
        unsupported("modules_to_save", "fully trained extra modules")?;
        unsupported("layers_to_transform", "an adapter on some layers only")?;
        let targets = match get("target_modules") {
            Some(Value::String(s)) if s == "all-linear" => ALL_LINEAR.iter().map(|t| t.to_string()).collect(),
            Some(Value::String(s)) => bail!("`target_modules` is the pattern `{s}`: give a list of module names"),
            Some(Value::Array(a)) => {
                let names: Vec<&str> =
                    a.iter().map(|x| x.as_str().context("`target_modules`: not a string")).collect::<Result<_>>()?;
                Self::parse_targets(&names.join(","))?
            }
            _ => bail!("`target_modules` is missing"),
        };
        let c = LoraConfig { rank, alpha, dropout, targets, rslora };
        c.validate()?;
        let base = get("base_model_name_or_path").and_then(Value::as_str).map(str::to_string);
        Ok((c, base))
    }
}

/// Whether `dir` holds an adapter (an `adapter_config.json`).
pub fn is_adapter(dir: &Path) -> bool {
    dir.join(ADAPTER_CONFIG).is_file()
}

/// The config of the adapter in `dir` and its `base_model_name_or_path`.
pub fn read_config(dir: &Path) -> Result<(LoraConfig, Option<String>)> {
    let p = dir.join(ADAPTER_CONFIG);
    let text = std::fs::read_to_string(&p).with_context(|| format!("cannot read `{}`", p.display()))?;
    let v: Value = serde_json::from_str(&text).with_context(|| format!("`{}`: not JSON", p.display()))?;
    LoraConfig::from_json(&v).with_context(|| format!("`{}`", p.display()))
}

/// The base model directory the adapter in `dir` names: its
/// `base_model_name_or_path` as written when absolute; a relative one is
/// looked up next to the adapter, then from the working directory.
pub fn base_of(dir: &Path) -> Result<PathBuf> {
    let (_, base) = read_config(dir)?;
    let base = base.with_context(|| {
        format!("`{}` names no base model (`base_model_name_or_path`)", dir.join(ADAPTER_CONFIG).display())
    })?;
    let p = PathBuf::from(&base);
    let found = if p.is_absolute() {
        Some(p)
    } else {
        [dir.join(&p), p.clone()].into_iter().find(|c| c.join("config.json").is_file())
    };
    match found {
        Some(b) if b.join("config.json").is_file() => Ok(b),
        _ => bail!(
            "the base model of adapter `{}`, `{base}`, is not a model directory here (no config.json); \
             give the base with --model and the adapter separately",
            dir.display()
        ),
    }
}

/// Which block part a target lives in (`self_attn` or `mlp`).
pub(crate) fn parent_of(module: &str) -> &'static str {
    match module {
        "gate_proj" | "up_proj" | "down_proj" => "mlp",
        _ => "self_attn",
    }
}

/// PEFT's key of a layer's adapter matrix, `ab` being `A` or `B`.
pub(crate) fn key(layer: usize, module: &str, ab: char) -> String {
    format!("base_model.model.model.layers.{layer}.{}.{module}.lora_{ab}.weight", parent_of(module))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_in_order_and_refuse_unknown() {
        assert_eq!(LoraConfig::parse_targets("v_proj, q_proj,v_proj").unwrap(), vec!["q_proj", "v_proj"]);
        assert_eq!(LoraConfig::parse_targets("all-linear").unwrap().len(), 7);
        let e = LoraConfig::parse_targets("q_proj,lm_head").unwrap_err().to_string();
        assert!(e.contains("unknown LoRA target `lm_head`"), "{e}");
    }

    #[test]
    fn config_round_trips_and_refuses_what_it_cannot_apply() {
        let c = LoraConfig::new(8, 16.0, 0.05, "q_proj,v_proj").unwrap();
        assert_eq!(c.scale(), 2.0);
        let (back, base) = LoraConfig::from_json(&c.to_json("/m")).unwrap();
        assert_eq!((back, base.as_deref()), (c.clone(), Some("/m")));
        let mut v = c.to_json("/m");
        v["use_dora"] = json!(true);
        assert!(LoraConfig::from_json(&v).unwrap_err().to_string().contains("DoRA"));
        let mut v = c.to_json("/m");
        v["rank_pattern"] = json!({"q_proj": 4});
        assert!(LoraConfig::from_json(&v).unwrap_err().to_string().contains("rank per module"));
        let mut v = c.to_json("/m");
        v["peft_type"] = json!("IA3");
        assert!(LoraConfig::from_json(&v).is_err());
        assert!(LoraConfig::new(0, 16.0, 0.0, "q_proj").is_err());
        let mut v = c.to_json("/m");
        v["use_rslora"] = json!(true);
        assert_eq!(LoraConfig::from_json(&v).unwrap().0.scale(), 16.0 / 8f64.sqrt());
    }
}
