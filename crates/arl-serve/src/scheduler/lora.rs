//! LoRA adapters of one scheduler: what the server reports about one
//! ([`AdapterInfo`]), a loaded version of one ([`LoraVersion`]), and the
//! table of the versions served and still in use ([`LoraTable`]).
use crate::engine::Engine;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What the server reports about a loaded adapter.
#[derive(Debug, Clone)]
pub struct AdapterInfo {
    /// The directory as `--lora-paths` or `/load_lora_adapter` gave it.
    pub path: String,
    /// Reported as `meta_info.weight_version` by the requests that run it.
    pub weight_version: String,
    pub config: Option<arl_model::LoraConfig>,
}

impl AdapterInfo {
    /// `{"path", "weight_version", "r", "lora_alpha", "target_modules"}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({"path": self.path, "weight_version": self.weight_version});
        if let Some(c) = &self.config {
            v["r"] = c.rank.into();
            v["lora_alpha"] = c.alpha.into();
            v["use_rslora"] = c.rslora.into();
            v["target_modules"] = c.targets.clone().into();
        }
        v
    }
}

/// One loaded version of an adapter: the engine knows it by `key`. Jobs
/// hold it (an `Arc`) while they wait and run.
#[derive(Debug)]
pub struct LoraVersion {
    pub name: String,
    pub key: String,
    pub info: AdapterInfo,
}

/// A scheduler's adapters: the version each name serves now, and replaced
/// or unloaded versions that requests still run with (dropped from the
/// engine when the last of them ends).
#[derive(Debug, Default)]
pub struct LoraTable {
    current: BTreeMap<String, Arc<LoraVersion>>,
    retired: Vec<Arc<LoraVersion>>,
    /// Loads so far (engine keys are `NAME#N`).
    loads: u64,
    /// Loads per name (the default version of the next one).
    per_name: HashMap<String, u64>,
}

impl LoraTable {
    /// Loads `dir` as the new version of `name` (the one new requests get);
    /// `version` defaults to how many times `name` was loaded (`1`, `2`, …).
    /// On error nothing changes.
    pub fn load(
        &mut self,
        engine: &mut dyn Engine,
        name: &str,
        dir: &str,
        version: Option<String>,
    ) -> anyhow::Result<AdapterInfo> {
        anyhow::ensure!(!name.is_empty(), "the adapter name is empty");
        self.loads += 1;
        let key = format!("{name}#{}", self.loads);
        engine.load_adapter(&key, std::path::Path::new(dir))?;
        let n = self.per_name.entry(name.to_string()).or_default();
        *n += 1;
        let info = AdapterInfo {
            path: dir.to_string(),
            weight_version: version.unwrap_or_else(|| n.to_string()),
            config: arl_model::lora::read_config(std::path::Path::new(dir)).ok().map(|c| c.0),
        };
        let v = Arc::new(LoraVersion { name: name.to_string(), key, info: info.clone() });
        if let Some(old) = self.current.insert(name.to_string(), v) {
            self.retired.push(old);
        }
        self.collect(engine);
        Ok(info)
    }

    /// New requests can no longer ask for `name`; false when it is not loaded.
    pub fn unload(&mut self, engine: &mut dyn Engine, name: &str) -> bool {
        let Some(old) = self.current.remove(name) else { return false };
        self.retired.push(old);
        self.collect(engine);
        true
    }

    /// The version new requests for `name` get.
    pub fn get(&self, name: &str) -> Option<&Arc<LoraVersion>> {
        self.current.get(name)
    }

    /// The served names, in order.
    pub fn names(&self) -> Vec<String> {
        self.current.keys().cloned().collect()
    }

    /// Drops from the engine the retired versions no request holds any more.
    pub(super) fn collect(&mut self, engine: &mut dyn Engine) {
        self.retired.retain(|v| {
            if Arc::strong_count(v) > 1 {
                return true;
            }
            engine.unload_adapter(&v.key);
            tracing::debug!(adapter = v.name.as_str(), key = v.key.as_str(), "old adapter version dropped");
            false
        });
    }
}

/// The 400 message of a request for an adapter that is not loaded.
pub fn not_loaded(name: &str, loaded: &[String]) -> String {
    let list = if loaded.is_empty() { "none".to_string() } else { loaded.join(", ") };
    format!("LoRA adapter `{name}` is not loaded (loaded adapters: {list})")
}
