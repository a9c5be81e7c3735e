//! A Hugging Face model directory as the tools exchange it: `config.json`
//! and safetensors weights, one file or sharded with an index. Checked before
//! a server is asked to load one (`arl-sync`, `arl-serve`'s weight updates).
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// Checks a checkpoint directory is complete before any server is touched:
/// `config.json` parses, and either every shard named in
/// `model.safetensors.index.json` exists or `model.safetensors` does.
pub fn check_checkpoint(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        bail!("checkpoint `{}` is not a directory", dir.display());
    }
    let cfg = dir.join("config.json");
    let text = std::fs::read_to_string(&cfg).with_context(|| format!("cannot read `{}`", cfg.display()))?;
    serde_json::from_str::<Value>(&text).with_context(|| format!("`{}`: invalid JSON", cfg.display()))?;
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).with_context(|| format!("cannot read `{}`", index.display()))?;
        let v: Value = serde_json::from_str(&text).with_context(|| format!("`{}`: invalid JSON", index.display()))?;
        let map = v
            .get("weight_map")
            .and_then(Value::as_object)
            .with_context(|| format!("`{}`: no `weight_map` object", index.display()))?;
        let shards: BTreeSet<&str> = map.values().filter_map(Value::as_str).collect();
        if shards.is_empty() {
            bail!("`{}`: `weight_map` names no shard", index.display());
        }
        let missing: Vec<&str> = shards.iter().copied().filter(|s| !dir.join(s).is_file()).collect();
        if !missing.is_empty() {
            bail!(
                "checkpoint `{}` is incomplete: {} of {} shards missing (`{}`)",
                dir.display(),
                missing.len(),
                shards.len(),
                missing.join("`, `")
            );
        }
    } else if !dir.join("model.safetensors").is_file() {
        bail!("checkpoint `{}` has neither `model.safetensors` nor `model.safetensors.index.json`", dir.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_completeness() {
        let d = tempfile::tempdir().unwrap();
        assert!(check_checkpoint(d.path()).is_err(), "no config");
        std::fs::write(d.path().join("config.json"), "{}").unwrap();
        let e = check_checkpoint(d.path()).unwrap_err().to_string();
        assert!(e.contains("neither"), "{e}");
        std::fs::write(
            d.path().join("model.safetensors.index.json"),
            r#"{"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}"#,
        )
        .unwrap();
        std::fs::write(d.path().join("model-00001-of-00002.safetensors"), "x").unwrap();
        let e = check_checkpoint(d.path()).unwrap_err().to_string();
        assert!(e.contains("1 of 2 shards missing") && e.contains("model-00002-of-00002"), "{e}");
        std::fs::write(d.path().join("model-00002-of-00002.safetensors"), "x").unwrap();
        check_checkpoint(d.path()).unwrap();
    }
}
