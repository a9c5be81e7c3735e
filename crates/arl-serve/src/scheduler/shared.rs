//! [`Shared`]: the state the HTTP layer reads without asking a scheduler
//! thread (counts, weight version, loaded adapters).
use super::lora::AdapterInfo;
use crate::metrics::Metrics;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// State the HTTP layer reads without asking the scheduler thread. With
/// several data-parallel replicas ([`Dispatcher`](super::Dispatcher)) each
/// scheduler has its own (its weight version is that of the weights it runs)
/// and the HTTP layer reads the front one, whose counts are the replicas' sums.
#[derive(Debug)]
pub struct Shared {
    pub weight_version: Mutex<String>,
    pub model_path: Mutex<String>,
    pub running: AtomicUsize,
    pub waiting: AtomicUsize,
    /// Tokens held by running sequences (prompt and generated).
    pub used_tokens: AtomicUsize,
    pub paused: std::sync::atomic::AtomicBool,
    /// `Generate` commands this scheduler has taken in (the dispatcher's
    /// measure of what it sent that the replica has not counted yet).
    pub received: AtomicUsize,
    /// The replicas' own states; empty with one scheduler (then this is its state).
    pub replicas: Vec<Arc<Shared>>,
    /// Counters and histograms of `/metrics`, one set for all replicas.
    pub metrics: Arc<Metrics>,
    /// The LoRA adapters new requests can ask for, by name (what
    /// `/get_model_info` reports and `lora_path` is checked against).
    pub adapters: Mutex<BTreeMap<String, AdapterInfo>>,
}

impl Shared {
    pub fn new(weight_version: &str, model_path: &str, replicas: Vec<Arc<Shared>>, metrics: Arc<Metrics>) -> Shared {
        Shared {
            weight_version: Mutex::new(weight_version.to_string()),
            model_path: Mutex::new(model_path.to_string()),
            running: AtomicUsize::new(0),
            waiting: AtomicUsize::new(0),
            used_tokens: AtomicUsize::new(0),
            metrics,
            paused: std::sync::atomic::AtomicBool::new(false),
            received: AtomicUsize::new(0),
            replicas,
            adapters: Mutex::new(BTreeMap::new()),
        }
    }

    fn sum(&self, f: impl Fn(&Shared) -> usize) -> usize {
        if self.replicas.is_empty() {
            f(self)
        } else {
            self.replicas.iter().map(|r| f(r)).sum()
        }
    }

    /// Sequences being decoded (all replicas).
    pub fn running(&self) -> usize {
        self.sum(|s| s.running.load(Ordering::Relaxed))
    }

    /// Requests queued (all replicas).
    pub fn waiting(&self) -> usize {
        self.sum(|s| s.waiting.load(Ordering::Relaxed))
    }

    /// Tokens held by running sequences (all replicas).
    pub fn used_tokens(&self) -> usize {
        self.sum(|s| s.used_tokens.load(Ordering::Relaxed))
    }

    /// Whether generation is paused (`/pause_generation`; any replica).
    pub fn paused(&self) -> bool {
        self.sum(|s| s.paused.load(Ordering::Relaxed) as usize) > 0
    }

    pub fn version(&self) -> String {
        self.weight_version.lock().map(|v| v.clone()).unwrap_or_default()
    }

    pub fn model_path(&self) -> String {
        self.model_path.lock().map(|p| p.clone()).unwrap_or_default()
    }

    /// The loaded adapters, by name.
    pub fn adapters(&self) -> BTreeMap<String, AdapterInfo> {
        self.adapters.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Whether requests can ask for adapter `name`.
    pub fn has_adapter(&self, name: &str) -> bool {
        self.adapters.lock().is_ok_and(|a| a.contains_key(name))
    }

    pub(super) fn set_adapter(&self, name: &str, info: Option<AdapterInfo>) {
        if let Ok(mut a) = self.adapters.lock() {
            match info {
                Some(i) => a.insert(name.to_string(), i),
                None => a.remove(name),
            };
        }
    }

    /// Sets the weight version here and in every replica (`/update_weight_version`).
    pub fn set_version(&self, v: &str) {
        for s in std::iter::once(self).chain(self.replicas.iter().map(|r| &**r)) {
            if let Ok(mut w) = s.weight_version.lock() {
                *w = v.to_string();
            }
        }
    }
}
