//! Continuous batching: one thread owns the engine and loops over
//! "take commands → admit waiting requests (prefill) → one decode step for every
//! running sequence". New requests join between decode steps; each sequence
//! has its own KV cache; finished or aborted ones leave at once. Weight
//! updates wait for running requests (or abort them, `abort_all_requests`), as
//! SGLang's writer lock does.
//!
//! LoRA adapters ([`LoraTable`]) load and unload at once, between steps:
//! a request takes the version of its adapter that is loaded when the
//! scheduler receives it, and keeps it to its end, also when the adapter is
//! replaced or unloaded meanwhile (SGLang lets such requests finish too); an
//! old version leaves the engine when its last request ends.
use super::engine::{Engine, Prefill, SeqId};
use super::sampling::{self, Knobs};
use crate::metrics::Metrics;
use arl_chat::tokenizer::Tokenizer;
use arl_core::rng::{self, Rng};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// Validated sampling parameters of one sequence.
#[derive(Debug, Clone)]
pub struct Params {
    pub knobs: Knobs,
    pub max_new_tokens: usize,
    pub min_new_tokens: usize,
    pub stop: Vec<String>,
    pub stop_token_ids: Vec<u32>,
    pub ignore_eos: bool,
    pub no_stop_trim: bool,
    pub skip_special_tokens: bool,
    pub seed: Option<u64>,
}

/// One sequence to generate.
#[derive(Debug)]
pub struct Job {
    pub rid: String,
    pub input_ids: Vec<u32>,
    pub params: Params,
    pub return_logprob: bool,
    /// Resolved: in `0..input_ids.len()`.
    pub logprob_start_len: usize,
    pub top_logprobs_num: usize,
    /// Index among the samples of its prompt (seeds differ per sample).
    pub sample_index: u64,
    /// Position in the request's expanded batch; sent back with every update.
    pub index: usize,
    /// Send every token as it comes (streaming); otherwise one update at the end.
    pub stream: bool,
    pub tx: mpsc::UnboundedSender<(usize, Update)>,
    /// When the request arrived (time to first token and end-to-end latency
    /// in `/metrics` count from here).
    pub arrived: Instant,
    /// The LoRA adapter asked for, by name (`lora_path`); `None`: the base model.
    pub lora: Option<String>,
    /// The version of that adapter the sequence runs with, pinned by the
    /// scheduler when it receives the job (`None` from the HTTP layer).
    pub adapter: Option<Arc<LoraVersion>>,
}

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
    fn collect(&mut self, engine: &mut dyn Engine) {
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

/// The version a job's updates report: its adapter's, else the server's.
fn version_of(job: &Job, base: &str) -> String {
    job.adapter.as_ref().map_or_else(|| base.to_string(), |a| a.info.weight_version.clone())
}

#[derive(Debug, Clone, PartialEq)]
pub enum Finish {
    /// EOS or a stop token id.
    StopToken(u32),
    StopStr(String),
    Length(usize),
    Abort {
        message: String,
        status_code: Option<u16>,
        err_type: Option<String>,
    },
}

impl Finish {
    /// SGLang's `finish_reason` JSON.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Finish::StopToken(t) => json!({"type": "stop", "matched": t}),
            Finish::StopStr(s) => json!({"type": "stop", "matched": s}),
            Finish::Length(n) => json!({"type": "length", "length": n}),
            Finish::Abort { message, status_code, err_type } => {
                json!({"type": "abort", "message": message, "status_code": status_code, "err_type": err_type})
            }
        }
    }
}

/// One generated token with its log-prob and, when asked, the top entries of its row.
#[derive(Debug, Clone)]
pub struct TokenOut {
    pub id: u32,
    pub logprob: f32,
    pub top: Vec<(u32, f32)>,
}

/// Log-probs over the prompt, `input_ids[logprob_start_len..]` (first entry `None`).
#[derive(Debug, Clone)]
pub struct InputLogprobs {
    pub ids: Vec<u32>,
    pub logprobs: Vec<Option<f32>>,
    pub top: Vec<Option<Vec<(u32, f32)>>>,
}

/// What a request's channel receives: new tokens, once the prompt log-probs,
/// and at the end the finish reason.
#[derive(Debug, Clone)]
pub struct Update {
    pub tokens: Vec<TokenOut>,
    pub input: Option<InputLogprobs>,
    pub finish: Option<Finish>,
    pub weight_version: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseMode {
    /// Abort running and queued requests (SGLang's default).
    Abort,
    /// Keep them, with their caches, and resume on `/continue_generation`.
    InPlace,
}

#[derive(Debug)]
pub struct UpdateResult {
    pub success: bool,
    pub message: String,
    pub num_paused_requests: usize,
}

pub enum Cmd {
    Generate(Job),
    /// `rid` matches exactly or as the prefix of a batch item (`{rid}_{i}`).
    Abort {
        rid: Option<String>,
        all: bool,
    },
    Pause {
        mode: PauseMode,
        reply: oneshot::Sender<()>,
    },
    Continue {
        reply: oneshot::Sender<()>,
    },
    Update {
        path: PathBuf,
        version: Option<String>,
        abort_all: bool,
        reply: oneshot::Sender<UpdateResult>,
    },
    /// Answers whether the (nonexistent) prefix cache could be flushed: only when idle.
    Flush {
        reply: oneshot::Sender<bool>,
    },
    /// Loads (or replaces) a LoRA adapter (`/load_lora_adapter`).
    LoadLora {
        name: String,
        path: String,
        version: Option<String>,
        reply: oneshot::Sender<LoraResult>,
    },
    /// Unloads a LoRA adapter (`/unload_lora_adapter`).
    UnloadLora {
        name: String,
        reply: oneshot::Sender<LoraResult>,
    },
}

/// How a LoRA load or unload went; `info`: what was loaded.
#[derive(Debug, Clone)]
pub struct LoraResult {
    pub success: bool,
    pub error: Option<String>,
    pub info: Option<AdapterInfo>,
}

/// State the HTTP layer reads without asking the scheduler thread. With
/// several data-parallel replicas ([`Dispatcher`]) each scheduler has its
/// own (its weight version is that of the weights it runs) and the HTTP
/// layer reads the front one, whose counts are the replicas' sums.
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

    fn set_adapter(&self, name: &str, info: Option<AdapterInfo>) {
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

struct Seq {
    id: SeqId,
    job: Job,
    out: Vec<u32>,
    rng: Rng,
    max_stop_chars: usize,
    /// Not yet sent (a non-streaming job hears once, when it ends).
    unsent: Vec<TokenOut>,
    unsent_input: Option<InputLogprobs>,
    /// When its latest token was sampled (inter-token latency).
    last_token: Instant,
}

impl Seq {
    /// Hands a new token (and the prompt log-probs, once) to the request: at
    /// once when streaming or finished, else kept for the final update.
    /// Answers false when the request is gone.
    fn emit(
        &mut self,
        tok: Option<TokenOut>,
        input: Option<InputLogprobs>,
        finish: Option<Finish>,
        version: &str,
    ) -> bool {
        self.unsent.extend(tok);
        if input.is_some() {
            self.unsent_input = input;
        }
        if !self.job.stream && finish.is_none() {
            return !self.job.tx.is_closed();
        }
        let u = Update {
            tokens: std::mem::take(&mut self.unsent),
            input: self.unsent_input.take(),
            finish,
            weight_version: version_of(&self.job, version),
        };
        self.job.tx.send((self.job.index, u)).is_ok()
    }
}

pub struct Scheduler {
    engine: Box<dyn Engine>,
    tok: Arc<Tokenizer>,
    eos: Vec<u32>,
    shared: Arc<Shared>,
    rx: crossbeam_channel::Receiver<Cmd>,
    waiting: VecDeque<Job>,
    running: Vec<Seq>,
    paused: bool,
    pending_update: Option<(PathBuf, Option<String>, oneshot::Sender<UpdateResult>)>,
    max_running: usize,
    max_prefill_tokens: usize,
    seed: u64,
    counter: u64,
    /// Log each request as it ends at `info` (else `debug`).
    log_requests: bool,
    lora: LoraTable,
}

fn temp_of(p: &Params) -> f32 {
    // Greedy reports log-probs of the unscaled distribution, like SGLang
    // (temperature 0 is run as temperature 1 with top_k = 1).
    if p.knobs.temperature <= 0.0 {
        1.0
    } else {
        p.knobs.temperature
    }
}

impl Scheduler {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        engine: Box<dyn Engine>,
        tok: Arc<Tokenizer>,
        eos: Vec<u32>,
        shared: Arc<Shared>,
        rx: crossbeam_channel::Receiver<Cmd>,
        max_running: usize,
        max_prefill_tokens: usize,
        seed: u64,
        log_requests: bool,
    ) -> Scheduler {
        Scheduler {
            log_requests,
            engine,
            tok,
            eos,
            shared,
            rx,
            waiting: VecDeque::new(),
            running: Vec::new(),
            paused: false,
            pending_update: None,
            max_running: max_running.max(1),
            max_prefill_tokens: max_prefill_tokens.max(1),
            seed,
            counter: 0,
            lora: LoraTable::default(),
        }
    }

    /// Loads a LoRA adapter (`--lora-paths` at start, `/load_lora_adapter`)
    /// and publishes it in this scheduler's state.
    pub fn load_lora(&mut self, name: &str, dir: &str, version: Option<String>) -> anyhow::Result<AdapterInfo> {
        let info = self.lora.load(&mut *self.engine, name, dir, version)?;
        self.shared.set_adapter(name, Some(info.clone()));
        tracing::info!(adapter = name, path = dir, version = info.weight_version.as_str(), "LoRA adapter loaded");
        Ok(info)
    }

    /// Ends a job that cannot run, with `message` and HTTP `status` (400:
    /// the client's mistake).
    fn reject(&self, job: &Job, message: String, status: u16) {
        let finish = Finish::Abort {
            message,
            status_code: Some(status),
            err_type: Some(if status == 400 { "BadRequestError" } else { "InternalServerError" }.into()),
        };
        self.ended(job, 0, Some(&finish));
        let _ = job.tx.send((
            job.index,
            Update {
                tokens: vec![],
                input: None,
                finish: Some(finish),
                weight_version: version_of(job, &self.version()),
            },
        ));
    }

    fn version(&self) -> String {
        self.shared.version()
    }

    fn publish(&self) {
        self.shared.running.store(self.running.len(), Ordering::Relaxed);
        self.shared.waiting.store(self.waiting.len(), Ordering::Relaxed);
        let used: usize = self.running.iter().map(|s| s.job.input_ids.len() + s.out.len()).sum();
        self.shared.used_tokens.store(used, Ordering::Relaxed);
        self.shared.paused.store(self.paused, Ordering::Relaxed);
    }

    /// A sequence ended with `generated` tokens: finished, aborted, failed
    /// (`finish`), or its client left (`None`). Counted in `/metrics`; logged
    /// at `debug` (`info` with `--log-requests`).
    fn ended(&self, job: &Job, generated: usize, finish: Option<&Finish>) {
        let how = match finish {
            Some(Finish::StopToken(_) | Finish::StopStr(_)) => "stop",
            Some(Finish::Length(_)) => "length",
            Some(Finish::Abort { .. }) => "abort",
            None => "client gone",
        };
        let e2e = job.arrived.elapsed();
        self.shared.metrics.finished(e2e, matches!(how, "abort" | "client gone"));
        let (rid, prompt_tokens, e2e_s) = (job.rid.as_str(), job.input_ids.len(), e2e.as_secs_f64());
        if self.log_requests {
            tracing::info!(rid, prompt_tokens, generated, finish = how, e2e_s, "request ended");
        } else {
            tracing::debug!(rid, prompt_tokens, generated, finish = how, e2e_s, "request ended");
        }
    }

    /// Runs until every command sender is gone.
    pub fn run(mut self) {
        loop {
            let idle =
                self.paused || (self.running.is_empty() && (self.waiting.is_empty() || self.pending_update.is_some()));
            if idle && self.pending_update.is_none() {
                match self.rx.recv() {
                    Ok(c) => self.handle(c),
                    Err(_) => return,
                }
            }
            while let Ok(c) = self.rx.try_recv() {
                self.handle(c);
            }
            if self.pending_update.is_some() && (self.running.is_empty() || self.paused) {
                self.apply_update();
            }
            if !self.paused && self.pending_update.is_none() {
                self.admit();
            }
            if !self.paused && !self.running.is_empty() {
                self.decode();
            }
            self.lora.collect(&mut *self.engine);
            self.publish();
        }
    }

    fn handle(&mut self, c: Cmd) {
        match c {
            Cmd::Generate(mut job) => {
                self.shared.received.fetch_add(1, Ordering::Relaxed);
                if let Some(name) = &job.lora {
                    match self.lora.get(name) {
                        Some(v) => job.adapter = Some(v.clone()),
                        None => {
                            let loaded = self.lora.names();
                            let msg = not_loaded(name, &loaded);
                            self.reject(&job, msg, 400);
                            return;
                        }
                    }
                }
                self.waiting.push_back(job);
                self.publish();
            }
            Cmd::LoadLora { name, path, version, reply } => {
                let r = match self.load_lora(&name, &path, version) {
                    Ok(info) => LoraResult { success: true, error: None, info: Some(info) },
                    Err(e) => {
                        tracing::warn!(adapter = name.as_str(), path = path.as_str(), "LoRA adapter not loaded: {e:#}");
                        LoraResult { success: false, error: Some(format!("{e:#}")), info: None }
                    }
                };
                let _ = reply.send(r);
            }
            Cmd::UnloadLora { name, reply } => {
                let r = if self.lora.unload(&mut *self.engine, &name) {
                    self.shared.set_adapter(&name, None);
                    tracing::info!(adapter = name.as_str(), "LoRA adapter unloaded");
                    LoraResult { success: true, error: None, info: None }
                } else {
                    LoraResult { success: false, error: Some(not_loaded(&name, &self.lora.names())), info: None }
                };
                let _ = reply.send(r);
            }
            Cmd::Abort { rid, all } => {
                let hit = |r: &str| {
                    all || rid.as_deref().is_some_and(|x| {
                        !x.is_empty() && (r == x || r.strip_prefix(x).is_some_and(|t| t.starts_with('_')))
                    })
                };
                self.abort_where(hit, "Aborted by /abort_request.");
            }
            Cmd::Pause { mode, reply } => {
                if mode == PauseMode::Abort {
                    self.abort_where(|_| true, "Aborted by /pause_generation.");
                }
                self.paused = true;
                let _ = reply.send(());
            }
            Cmd::Continue { reply } => {
                self.paused = false;
                let _ = reply.send(());
            }
            Cmd::Update { path, version, abort_all, reply } => {
                if abort_all {
                    self.abort_where(|_| true, "Aborted by a weight update (abort_all_requests).");
                }
                if let Some((_, _, old)) = self.pending_update.take() {
                    let _ = old.send(UpdateResult {
                        success: false,
                        message: "Superseded by a later weight update.".into(),
                        num_paused_requests: 0,
                    });
                }
                self.pending_update = Some((path, version, reply));
            }
            Cmd::Flush { reply } => {
                let _ = reply.send(self.running.is_empty() && self.waiting.is_empty());
            }
        }
        self.publish();
    }

    fn abort_where(&mut self, hit: impl Fn(&str) -> bool, message: &str) {
        let version = self.version();
        let finish = Finish::Abort { message: message.into(), status_code: None, err_type: None };
        let mut keep = VecDeque::new();
        for job in std::mem::take(&mut self.waiting) {
            if hit(&job.rid) {
                self.ended(&job, 0, Some(&finish));
                let _ = job.tx.send((
                    job.index,
                    Update {
                        tokens: vec![],
                        input: None,
                        finish: Some(finish.clone()),
                        weight_version: version_of(&job, &version),
                    },
                ));
            } else {
                keep.push_back(job);
            }
        }
        self.waiting = keep;
        let mut i = 0;
        while i < self.running.len() {
            if hit(&self.running[i].job.rid) {
                let mut s = self.running.swap_remove(i);
                self.engine.release(s.id);
                self.ended(&s.job, s.out.len(), Some(&finish));
                s.emit(None, None, Some(finish.clone()), &version);
            } else {
                i += 1;
            }
        }
    }

    fn apply_update(&mut self) {
        let Some((path, version, reply)) = self.pending_update.take() else { return };
        let num_paused = if self.paused { self.running.len() + self.waiting.len() } else { 0 };
        let result = match self.engine.reload(&path) {
            Ok(()) => {
                if let Ok(mut p) = self.shared.model_path.lock() {
                    *p = path.display().to_string();
                }
                let mut message = "Succeeded to update model weights.".to_string();
                if let Some(v) = version {
                    if let Ok(mut w) = self.shared.weight_version.lock() {
                        *w = v.clone();
                    }
                    message.push_str(&format!(" Weight version updated to {v}."));
                }
                tracing::info!(path = %path.display(), "{message}");
                UpdateResult { success: true, message, num_paused_requests: num_paused }
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "weight update failed: {e:#}");
                UpdateResult {
                    success: false,
                    message: format!("Failed to get weights iterator: {} ({e:#}).", path.display()),
                    num_paused_requests: num_paused,
                }
            }
        };
        let _ = reply.send(result);
    }

    fn fail(&mut self, job: &Job, e: &anyhow::Error) {
        tracing::error!(rid = job.rid.as_str(), "prefill failed: {e:#}");
        self.ended(job, 0, Some(&internal(e)));
        let _ = job.tx.send((
            job.index,
            Update {
                tokens: vec![],
                input: None,
                finish: Some(internal(e)),
                weight_version: version_of(job, &self.version()),
            },
        ));
    }

    /// Admits waiting requests up to `max_running`, prefilling them together:
    /// one batched forward per group of at most `max_prefill_tokens` padded
    /// prompt tokens (a longer prompt goes alone).
    fn admit(&mut self) {
        loop {
            let mut batch: Vec<(SeqId, Job)> = Vec::new();
            let mut longest = 0;
            while self.running.len() + batch.len() < self.max_running {
                let Some(job) = self.waiting.front() else { break };
                if job.tx.is_closed() {
                    self.waiting.pop_front();
                    continue;
                }
                let l = job.input_ids.len().max(longest);
                if !batch.is_empty() && (batch.len() + 1) * l > self.max_prefill_tokens {
                    break;
                }
                longest = l;
                let Some(job) = self.waiting.pop_front() else { break };
                self.counter += 1;
                batch.push((self.counter, job));
            }
            if batch.is_empty() {
                return;
            }
            self.prefill(batch);
        }
    }

    fn prefill(&mut self, batch: Vec<(SeqId, Job)>) {
        let from_row = |job: &Job| {
            let l = job.input_ids.len();
            if job.return_logprob {
                job.logprob_start_len.min(l - 1)
            } else {
                l - 1
            }
        };
        let items: Vec<Prefill<'_>> = batch
            .iter()
            .map(|(id, job)| Prefill {
                seq: *id,
                ids: &job.input_ids,
                temperature: temp_of(&job.params),
                from_row: from_row(job),
                lora: job.adapter.as_ref().map(|a| a.key.as_str()),
            })
            .collect();
        let all_rows = match self.engine.prefill_many(&items) {
            Ok(r) => r,
            Err(e) => {
                for (id, job) in &batch {
                    self.engine.release(*id);
                    self.fail(job, &e);
                }
                return;
            }
        };
        let v = self.engine.vocab_size();
        let version = self.version();
        for ((id, job), rows) in batch.into_iter().zip(all_rows) {
            let l = job.input_ids.len();
            let from_row = from_row(&job);
            let row = |pos: usize| &rows[(pos - from_row) * v..(pos - from_row + 1) * v];
            let input = job.return_logprob.then(|| {
                let start = job.logprob_start_len.min(l - 1);
                let mut lps = vec![None];
                let mut top = vec![None];
                for i in start + 1..l {
                    let r = row(i - 1);
                    lps.push(Some(r[job.input_ids[i] as usize]));
                    top.push((job.top_logprobs_num > 0).then(|| topk(r, job.top_logprobs_num)));
                }
                InputLogprobs { ids: job.input_ids[start..].to_vec(), logprobs: lps, top }
            });
            let seed = match job.params.seed {
                Some(s) => rng::mix(&[s, job.sample_index]),
                None => rng::mix(&[self.seed, id]),
            };
            let max_stop_chars = job.params.stop.iter().map(|s| s.chars().count()).max().unwrap_or(0);
            let mut seq = Seq {
                id,
                job,
                out: Vec::new(),
                rng: Rng::new(seed),
                max_stop_chars,
                unsent: Vec::new(),
                unsent_input: None,
                last_token: Instant::now(),
            };
            if seq.job.params.max_new_tokens == 0 {
                self.engine.release(id);
                self.shared.metrics.prompt_tokens.fetch_add(l as u64, Ordering::Relaxed);
                self.ended(&seq.job, 0, Some(&Finish::Length(0)));
                seq.emit(None, input, Some(Finish::Length(0)), &version);
                continue;
            }
            let last = row(l - 1).to_vec();
            let (tok, finish) = self.step(&mut seq, &last);
            seq.last_token = Instant::now();
            self.shared.metrics.first_token(l, seq.job.arrived.elapsed());
            let ended = finish.clone();
            let alive = seq.emit(Some(tok), input, finish, &version);
            if ended.is_some() || !alive {
                self.ended(&seq.job, seq.out.len(), ended.as_ref());
                self.engine.release(id);
            } else {
                self.running.push(seq);
            }
        }
    }

    fn decode(&mut self) {
        let ids: Vec<SeqId> = self.running.iter().map(|s| s.id).collect();
        let last: Vec<u32> = self.running.iter().map(|s| *s.out.last().unwrap_or(&0)).collect();
        let temps: Vec<f32> = self.running.iter().map(|s| temp_of(&s.job.params)).collect();
        let v = self.engine.vocab_size();
        let version = self.version();
        let rows = match self.engine.decode(&ids, &last, &temps) {
            Ok(r) => r,
            Err(e) => {
                for mut s in std::mem::take(&mut self.running) {
                    self.engine.release(s.id);
                    tracing::error!(rid = s.job.rid.as_str(), "decode failed: {e:#}");
                    self.ended(&s.job, s.out.len(), Some(&internal(&e)));
                    s.emit(None, None, Some(internal(&e)), &version);
                }
                return;
            }
        };
        let mut running = std::mem::take(&mut self.running);
        let mut keep = Vec::with_capacity(running.len());
        for (i, mut seq) in running.drain(..).enumerate() {
            let (tok, finish) = self.step(&mut seq, &rows[i * v..(i + 1) * v]);
            let now = Instant::now();
            self.shared.metrics.next_token(now - seq.last_token);
            seq.last_token = now;
            let ended = finish.clone();
            let alive = seq.emit(Some(tok), None, finish, &version);
            if ended.is_some() || !alive {
                self.ended(&seq.job, seq.out.len(), ended.as_ref());
                self.engine.release(seq.id);
            } else {
                keep.push(seq);
            }
        }
        self.running = keep;
    }

    /// Picks the next token of `seq` from its row and decides whether it finished
    /// (SGLang's order: length first, then EOS / stop ids, then stop strings).
    fn step(&self, seq: &mut Seq, row: &[f32]) -> (TokenOut, Option<Finish>) {
        let p = &seq.job.params;
        let banned: Vec<u32> = if seq.out.len() < p.min_new_tokens {
            self.eos.iter().chain(&p.stop_token_ids).copied().collect()
        } else {
            Vec::new()
        };
        let id = sampling::sample(row, &p.knobs, &banned, &mut seq.rng) as u32;
        let top = if seq.job.top_logprobs_num > 0 { topk(row, seq.job.top_logprobs_num) } else { Vec::new() };
        let tok = TokenOut { id, logprob: row[id as usize], top };
        seq.out.push(id);
        let n = seq.out.len();
        let finish = if n >= p.max_new_tokens {
            Some(Finish::Length(p.max_new_tokens))
        } else if !p.ignore_eos && (self.eos.contains(&id) || p.stop_token_ids.contains(&id)) {
            Some(Finish::StopToken(id))
        } else if let Some(s) = self.stop_string(seq) {
            Some(Finish::StopStr(s))
        } else if seq.job.input_ids.len() + n >= self.engine.context_len() {
            Some(Finish::Length(n))
        } else {
            None
        };
        (tok, finish)
    }

    fn stop_string(&self, seq: &Seq) -> Option<String> {
        let p = &seq.job.params;
        if p.stop.is_empty() {
            return None;
        }
        // A token holds at least a byte of text, a char at most 4 bytes: this tail
        // is long enough to contain any stop string that ends in the newest token.
        let tail = 4 * seq.max_stop_chars + 8;
        let ids = &seq.out[seq.out.len().saturating_sub(tail)..];
        let text = self.tok.inner.decode(ids, p.skip_special_tokens).unwrap_or_default();
        p.stop.iter().find(|s| !s.is_empty() && text.contains(s.as_str())).cloned()
    }
}

/// Data parallelism (SGLang's `--dp-size`): several schedulers, each with
/// its own engine (its own copy of the weights and KV cache, on its own core
/// or GPU), behind one command channel. A new sequence goes to the replica
/// with the fewest sequences running, queued or on their way; aborts go to
/// every replica; pause, continue, flush and weight updates go to every
/// replica and answer once all have (an update succeeds only when every
/// replica's does; the front version changes then). Each replica applies an
/// update when its own running sequences are done, and stamps what it
/// generates with the version of the weights it ran. LoRA loads and unloads
/// go to every replica too; a load succeeds when every replica's does (a new
/// adapter that some replica could not load is unloaded from the others).
pub struct Dispatcher {
    rx: crossbeam_channel::Receiver<Cmd>,
    txs: Vec<crossbeam_channel::Sender<Cmd>>,
    front: Arc<Shared>,
    sent: Vec<usize>,
}

impl Dispatcher {
    /// `front.replicas[i]` is the state of the scheduler reading `txs[i]`.
    pub fn new(
        rx: crossbeam_channel::Receiver<Cmd>,
        txs: Vec<crossbeam_channel::Sender<Cmd>>,
        front: Arc<Shared>,
    ) -> Dispatcher {
        assert_eq!(txs.len(), front.replicas.len(), "one state per replica");
        let sent = vec![0; txs.len()];
        Dispatcher { rx, txs, front, sent }
    }

    /// The replica with the least work: running + queued + sent but not yet taken in.
    fn least_loaded(&self) -> usize {
        let load = |i: usize| {
            let r = &self.front.replicas[i];
            let unseen = self.sent[i].saturating_sub(r.received.load(Ordering::Relaxed));
            r.running.load(Ordering::Relaxed) + r.waiting.load(Ordering::Relaxed) + unseen
        };
        (0..self.txs.len()).min_by_key(|&i| (load(i), i)).unwrap_or(0)
    }

    /// Sends `make(reply)` to every replica and hands their answers, once all
    /// are in, to `done` (on its own thread: aborts and new requests keep
    /// flowing meanwhile, as they do to a single scheduler with an update pending).
    fn fan_out<T: Send + 'static>(
        &self,
        make: impl Fn(oneshot::Sender<T>) -> Cmd,
        done: impl FnOnce(Vec<Option<T>>) + Send + 'static,
    ) {
        let rxs: Vec<oneshot::Receiver<T>> = self
            .txs
            .iter()
            .map(|tx| {
                let (t, r) = oneshot::channel();
                let _ = tx.send(make(t));
                r
            })
            .collect();
        let spawned = std::thread::Builder::new()
            .name("arl-dp-reply".into())
            .spawn(move || done(rxs.into_iter().map(|r| r.blocking_recv().ok()).collect()));
        if let Err(e) = spawned {
            eprintln!("arl-serve: cannot start a thread to collect the replicas' answers: {e}");
        }
    }

    /// Runs until every command sender is gone.
    pub fn run(mut self) {
        while let Ok(c) = self.rx.recv() {
            match c {
                Cmd::Generate(job) => {
                    let i = self.least_loaded();
                    self.sent[i] += 1;
                    let _ = self.txs[i].send(Cmd::Generate(job));
                }
                Cmd::Abort { rid, all } => {
                    for tx in &self.txs {
                        let _ = tx.send(Cmd::Abort { rid: rid.clone(), all });
                    }
                }
                Cmd::Pause { mode, reply } => self.fan_out(
                    |r| Cmd::Pause { mode, reply: r },
                    move |_| {
                        let _ = reply.send(());
                    },
                ),
                Cmd::Continue { reply } => self.fan_out(
                    |r| Cmd::Continue { reply: r },
                    move |_| {
                        let _ = reply.send(());
                    },
                ),
                Cmd::Flush { reply } => self.fan_out(
                    |r| Cmd::Flush { reply: r },
                    move |all: Vec<Option<bool>>| {
                        let _ = reply.send(all.iter().all(|a| *a == Some(true)));
                    },
                ),
                Cmd::LoadLora { name, path, version, reply } => {
                    let front = self.front.clone();
                    let txs = self.txs.clone();
                    let is_new = !front.adapters().contains_key(&name);
                    let n = name.clone();
                    self.fan_out(
                        |r| Cmd::LoadLora {
                            name: name.clone(),
                            path: path.clone(),
                            version: version.clone(),
                            reply: r,
                        },
                        move |all: Vec<Option<LoraResult>>| {
                            let Some(mut error) = replica_failures(&all) else {
                                let info = all.into_iter().flatten().find_map(|r| r.info);
                                front.set_adapter(&n, info.clone());
                                let _ = reply.send(LoraResult { success: true, error: None, info });
                                return;
                            };
                            let loaded: Vec<usize> =
                                (0..all.len()).filter(|&i| all[i].as_ref().is_some_and(|r| r.success)).collect();
                            if is_new {
                                // Back to no adapter of that name anywhere.
                                for &i in &loaded {
                                    let (t, _r) = oneshot::channel();
                                    let _ = txs[i].send(Cmd::UnloadLora { name: n.clone(), reply: t });
                                }
                            } else if !loaded.is_empty() {
                                error.push_str(&format!(
                                    " ({} of {} replicas did load the new version; the others serve the old one)",
                                    loaded.len(),
                                    all.len()
                                ));
                            }
                            let _ = reply.send(LoraResult { success: false, error: Some(error), info: None });
                        },
                    );
                }
                Cmd::UnloadLora { name, reply } => {
                    let front = self.front.clone();
                    let n = name.clone();
                    self.fan_out(
                        |r| Cmd::UnloadLora { name: name.clone(), reply: r },
                        move |all: Vec<Option<LoraResult>>| {
                            front.set_adapter(&n, None);
                            let error = replica_failures(&all);
                            let _ = reply.send(LoraResult { success: error.is_none(), error, info: None });
                        },
                    );
                }
                Cmd::Update { path, version, abort_all, reply } => {
                    let front = self.front.clone();
                    let (p, v) = (path.clone(), version.clone());
                    self.fan_out(
                        |r| Cmd::Update { path: path.clone(), version: version.clone(), abort_all, reply: r },
                        move |all: Vec<Option<UpdateResult>>| {
                            let paused = all.iter().flatten().map(|r| r.num_paused_requests).sum();
                            let failed: Vec<String> = all
                                .iter()
                                .enumerate()
                                .filter_map(|(i, r)| match r {
                                    Some(r) if r.success => None,
                                    Some(r) => Some(format!("replica {i}: {}", r.message)),
                                    None => Some(format!("replica {i}: its scheduler stopped")),
                                })
                                .collect();
                            let result = if failed.is_empty() {
                                if let Ok(mut m) = front.model_path.lock() {
                                    *m = p.display().to_string();
                                }
                                if let Some(v) = &v {
                                    if let Ok(mut w) = front.weight_version.lock() {
                                        *w = v.clone();
                                    }
                                }
                                let message = all.into_iter().flatten().next().map(|r| r.message).unwrap_or_default();
                                UpdateResult { success: true, message, num_paused_requests: paused }
                            } else {
                                let updated = all.iter().filter(|r| r.as_ref().is_some_and(|r| r.success)).count();
                                let mut message = failed.join("; ");
                                if updated > 0 {
                                    message.push_str(&format!(
                                        " ({updated} of {} replicas did load the new weights; the server reports the old version until an update succeeds on all)",
                                        all.len()
                                    ));
                                }
                                UpdateResult { success: false, message, num_paused_requests: paused }
                            };
                            let _ = reply.send(result);
                        },
                    );
                }
            }
        }
    }
}

/// Why a LoRA load or unload failed on some replicas: `None` when it did
/// not; the error once when every replica failed alike, else `replica i:
/// error` for each that failed.
fn replica_failures(all: &[Option<LoraResult>]) -> Option<String> {
    let errors: Vec<(usize, String)> = all
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Some(r) if r.success => None,
            Some(r) => Some((i, r.error.clone().unwrap_or_default())),
            None => Some((i, "its scheduler stopped".into())),
        })
        .collect();
    if errors.is_empty() {
        return None;
    }
    if errors.len() == all.len() && errors.iter().all(|e| e.1 == errors[0].1) {
        return Some(errors[0].1.clone());
    }
    Some(errors.iter().map(|(i, e)| format!("replica {i}: {e}")).collect::<Vec<_>>().join("; "))
}

/// The 400 message of a request for an adapter that is not loaded.
pub fn not_loaded(name: &str, loaded: &[String]) -> String {
    let list = if loaded.is_empty() { "none".to_string() } else { loaded.join(", ") };
    format!("LoRA adapter `{name}` is not loaded (loaded adapters: {list})")
}

fn internal(e: &anyhow::Error) -> Finish {
    Finish::Abort {
        message: format!("internal error: {e:#}"),
        status_code: Some(500),
        err_type: Some("InternalServerError".into()),
    }
}

fn topk(row: &[f32], k: usize) -> Vec<(u32, f32)> {
    sampling::top_k(row, k).into_iter().map(|(i, l)| (i as u32, l)).collect()
}
