//! `config.json` of a Hugging Face decoder (Qwen2/Qwen2.5, Qwen3, Llama 3), with
//! the HF key names and serde defaults (as in candle's `qwen2.rs`/`llama.rs`).
//!
//! Both rope dialects are read: the classic `rope_theta` + `rope_scaling` keys
//! and transformers 5's `rope_parameters`. Keys arl does not use are kept in
//! [`ModelConfig::extra`] and written back unchanged.
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::Path;

fn default_eps() -> f64 {
    1e-6
}
fn default_theta() -> f64 {
    10_000.0
}
fn default_max_pos() -> usize {
    32_768
}
fn default_init_range() -> f64 {
    0.02
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architectures: Option<Vec<String>>,
    /// `qwen2`, `qwen3` or `llama`.
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Grouped-query attention; defaults to `num_attention_heads` (plain MHA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_key_value_heads: Option<usize>,
    /// Defaults to `hidden_size / num_attention_heads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_dim: Option<usize>,
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_theta: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<Value>,
    /// transformers ≥ 5: `{"rope_type": "default", "rope_theta": …, …}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_parameters: Option<Value>,
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Bias on q/k/v projections; Qwen2 has it without saying so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_bias: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bos_token_id: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eos_token_id: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_token_id: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub torch_dtype: Option<String>,
    /// transformers ≥ 5 spells `torch_dtype` as `dtype`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dtype: Option<String>,
    #[serde(default = "default_init_range")]
    pub initializer_range: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden_act: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The model families arl implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Qwen2,
    Qwen3,
    Llama,
}

/// How RoPE frequencies are computed (HF `ROPE_INIT_FUNCTIONS`).
#[derive(Debug, Clone, PartialEq)]
pub enum RopeScaling {
    Default,
    /// Positions divided by `factor`.
    Linear {
        factor: f64,
    },
    /// Llama 3.1's frequency-dependent scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: f64,
    },
}

impl ModelConfig {
    pub fn from_file(path: &Path) -> Result<ModelConfig> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read `{}`", path.display()))?;
        let cfg: ModelConfig =
            serde_json::from_str(&text).with_context(|| format!("`{}`: not a decoder config.json", path.display()))?;
        cfg.validate().with_context(|| format!("`{}`", path.display()))?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        self.family()?;
        if self.hidden_act.as_deref().is_some_and(|a| a != "silu") {
            bail!("hidden_act `{}` is not supported (only `silu`)", self.hidden_act.as_deref().unwrap_or(""));
        }
        if self.num_attention_heads == 0 || !self.num_attention_heads.is_multiple_of(self.kv_heads()) {
            bail!(
                "num_attention_heads ({}) must be a multiple of num_key_value_heads ({})",
                self.num_attention_heads,
                self.kv_heads()
            );
        }
        if !self.head_dim().is_multiple_of(2) {
            bail!("head_dim must be even for RoPE, got {}", self.head_dim());
        }
        self.rope()?;
        for key in ["mlp_bias", "use_sliding_window"] {
            if self.extra.get(key).and_then(Value::as_bool) == Some(true) {
                bail!("`{key}: true` is not supported");
            }
        }
        Ok(())
    }

    pub fn family(&self) -> Result<Family> {
        Ok(match self.model_type.as_str() {
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            "llama" => Family::Llama,
            other => bail!("model_type `{other}` is not supported (qwen2, qwen3, llama)"),
        })
    }

    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// q/k/v projections carry a bias: always for Qwen2, else `attention_bias`.
    pub fn qkv_bias(&self) -> bool {
        match self.family() {
            Ok(Family::Qwen2) => self.attention_bias.unwrap_or(true),
            _ => self.attention_bias.unwrap_or(false),
        }
    }

    /// The o_proj bias (`attention_bias` in Qwen3/Llama; never in Qwen2).
    pub fn o_bias(&self) -> bool {
        match self.family() {
            Ok(Family::Qwen2) => false,
            _ => self.attention_bias.unwrap_or(false),
        }
    }

    /// `rope_parameters` wins over the classic keys when both are present
    /// (transformers 5 reads it first).
    pub fn rope_theta(&self) -> f64 {
        self.rope_parameters
            .as_ref()
            .and_then(|p| p.get("rope_theta"))
            .and_then(Value::as_f64)
            .or(self.rope_theta)
            .unwrap_or_else(default_theta)
    }

    pub fn rope(&self) -> Result<RopeScaling> {
        let src = match (&self.rope_parameters, &self.rope_scaling) {
            (Some(p), _) => Some(p),
            (None, Some(Value::Null)) | (None, None) => None,
            (None, Some(s)) => Some(s),
        };
        let Some(p) = src else { return Ok(RopeScaling::Default) };
        let kind = p.get("rope_type").or_else(|| p.get("type")).and_then(Value::as_str).unwrap_or("default");
        let num = |k: &str| -> Result<f64> {
            p.get(k).and_then(Value::as_f64).with_context(|| format!("rope scaling `{kind}` needs a number `{k}`"))
        };
        Ok(match kind {
            "default" => RopeScaling::Default,
            "linear" => RopeScaling::Linear { factor: num("factor")? },
            "llama3" => RopeScaling::Llama3 {
                factor: num("factor")?,
                low_freq_factor: num("low_freq_factor")?,
                high_freq_factor: num("high_freq_factor")?,
                original_max_position_embeddings: num("original_max_position_embeddings")?,
            },
            other => bail!("rope type `{other}` is not supported (default, linear, llama3)"),
        })
    }

    /// RoPE inverse frequencies, one per pair of head dimensions (HF
    /// `_compute_default_rope_parameters` / `_compute_llama3_parameters`).
    pub fn inv_freq(&self) -> Result<Vec<f32>> {
        let d = self.head_dim();
        let theta = self.rope_theta();
        // HF computes base ** (arange(0, d, 2).float() / d) in float32.
        let base: Vec<f32> = (0..d / 2).map(|i| 1.0f32 / (theta as f32).powf((2 * i) as f32 / d as f32)).collect();
        Ok(match self.rope()? {
            RopeScaling::Default => base,
            RopeScaling::Linear { factor } => base.into_iter().map(|f| f / factor as f32).collect(),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                let (factor, lf, hf, old) = (
                    factor as f32,
                    low_freq_factor as f32,
                    high_freq_factor as f32,
                    original_max_position_embeddings as f32,
                );
                let low_wl = old / lf;
                let high_wl = old / hf;
                base.into_iter()
                    .map(|f| {
                        let wl = 2.0 * std::f32::consts::PI / f;
                        if wl > low_wl {
                            f / factor
                        } else if wl < high_wl {
                            f
                        } else {
                            let smooth = (old / wl - lf) / (hf - lf);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        })
    }

    /// The stored dtype name (`torch_dtype` or transformers 5's `dtype`).
    pub fn dtype_name(&self) -> Option<&str> {
        self.torch_dtype.as_deref().or(self.dtype.as_deref())
    }

    /// The config as written into a checkpoint: the classic rope keys are
    /// always present so older servers read the rope right; `rope_parameters`
    /// is kept when it was there.
    pub fn to_checkpoint_json(&self, dtype: &str) -> Result<String> {
        let mut c = self.clone();
        c.rope_theta = Some(self.rope_theta());
        if c.rope_scaling.is_none() {
            if let Some(p) = &self.rope_parameters {
                let kind = p.get("rope_type").and_then(Value::as_str).unwrap_or("default");
                if kind != "default" {
                    let mut m = p.as_object().cloned().unwrap_or_default();
                    m.remove("rope_theta");
                    c.rope_scaling = Some(Value::Object(m));
                }
            }
        }
        c.torch_dtype = Some(dtype.to_string());
        if c.dtype.is_some() {
            c.dtype = Some(dtype.to_string());
        }
        Ok(serde_json::to_string_pretty(&c)? + "\n")
    }

    /// `bos_token_id`/`eos_token_id` as lists (they may be an int or a list).
    pub fn token_ids(v: &Option<Value>) -> Vec<i64> {
        match v {
            Some(Value::Number(n)) => n.as_i64().into_iter().collect(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_i64).collect(),
            _ => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Value {
        serde_json::json!({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"num_key_value_heads":1})
    }

    #[test]
    fn both_rope_dialects_agree() {
        let mut a = base();
        a["rope_theta"] = 500000.0.into();
        a["rope_scaling"] = serde_json::json!({"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
            "high_freq_factor":4.0,"original_max_position_embeddings":8192});
        let mut b = base();
        b["rope_parameters"] = serde_json::json!({"rope_type":"llama3","rope_theta":500000.0,"factor":8.0,
            "low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192});
        let a: ModelConfig = serde_json::from_value(a).unwrap();
        let b: ModelConfig = serde_json::from_value(b).unwrap();
        assert_eq!(a.inv_freq().unwrap(), b.inv_freq().unwrap());
        assert_eq!(a.rope_theta(), 500000.0);
        // The written-back form carries the classic keys and reads the same.
        let back: ModelConfig = serde_json::from_str(&b.to_checkpoint_json("float32").unwrap()).unwrap();
        assert_eq!(back.rope_theta, Some(500000.0));
        assert!(back.rope_scaling.is_some());
        assert_eq!(back.inv_freq().unwrap(), a.inv_freq().unwrap());
    }

    #[test]
    fn defaults_and_bias() {
        let mut q = base();
        q["model_type"] = "qwen2".into();
        let q: ModelConfig = serde_json::from_value(q).unwrap();
        assert!(q.qkv_bias() && !q.o_bias());
        assert_eq!(q.head_dim(), 4);
        assert_eq!(q.kv_heads(), 1);
        assert!(!q.tie_word_embeddings);
        let mut bad = base();
        bad["model_type"] = "gpt2".into();
        let bad: ModelConfig = serde_json::from_value(bad).unwrap();
        assert!(bad.validate().unwrap_err().to_string().contains("gpt2"));
    }
}
