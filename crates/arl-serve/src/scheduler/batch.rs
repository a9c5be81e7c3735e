//! The batching loop: [`Scheduler`] owns an engine and, between decode
//! steps, takes commands, admits waiting requests (prefill) and decodes one
//! token of every running sequence.
use super::lora::{not_loaded, AdapterInfo, LoraTable};
use super::messages::{Cmd, Finish, InputLogprobs, Job, LoraResult, Params, PauseMode, TokenOut, Update, UpdateResult};
use super::shared::Shared;
use crate::engine::{Engine, Prefill, SeqId};
use crate::sampling;
use arl_chat::tokenizer::Tokenizer;
use arl_core::rng::{self, Rng};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// The version a job's updates report: its adapter's, else the server's.
fn version_of(job: &Job, base: &str) -> String {
    job.adapter.as_ref().map_or_else(|| base.to_string(), |a| a.info.weight_version.clone())
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
    /// Prompt tokens its prefill took from the prefix cache.
    cached: usize,
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
            cached: self.cached,
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
                cached: 0,
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
        let used: usize = self.running.iter().map(|s| s.job.item.input_ids.len() + s.out.len()).sum();
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
        let (rid, prompt_tokens, e2e_s) = (job.item.rid.as_str(), job.item.input_ids.len(), e2e.as_secs_f64());
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
                if let Some(name) = &job.item.lora {
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
                let idle = self.running.is_empty() && self.waiting.is_empty();
                if idle {
                    self.engine.flush_cache();
                }
                let _ = reply.send(idle);
            }
        }
        self.publish();
    }

    fn abort_where(&mut self, hit: impl Fn(&str) -> bool, message: &str) {
        let version = self.version();
        let finish = Finish::Abort { message: message.into(), status_code: None, err_type: None };
        let mut keep = VecDeque::new();
        for job in std::mem::take(&mut self.waiting) {
            if hit(&job.item.rid) {
                self.ended(&job, 0, Some(&finish));
                let _ = job.tx.send((
                    job.index,
                    Update {
                        tokens: vec![],
                        cached: 0,
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
            if hit(&self.running[i].job.item.rid) {
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
        tracing::error!(rid = job.item.rid.as_str(), "prefill failed: {e:#}");
        self.ended(job, 0, Some(&internal(e)));
        let _ = job.tx.send((
            job.index,
            Update {
                tokens: vec![],
                cached: 0,
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
                let l = job.item.input_ids.len().max(longest);
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
            let l = job.item.input_ids.len();
            if job.item.return_logprob {
                job.item.logprob_start_len.min(l - 1)
            } else {
                l - 1
            }
        };
        let items: Vec<Prefill<'_>> = batch
            .iter()
            .map(|(id, job)| Prefill {
                seq: *id,
                ids: &job.item.input_ids,
                temperature: temp_of(&job.item.params),
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
            let l = job.item.input_ids.len();
            let from_row = from_row(&job);
            let row = |pos: usize| &rows[(pos - from_row) * v..(pos - from_row + 1) * v];
            let input = job.item.return_logprob.then(|| {
                let start = job.item.logprob_start_len.min(l - 1);
                let mut lps = vec![None];
                let mut top = vec![None];
                for i in start + 1..l {
                    let r = row(i - 1);
                    lps.push(Some(r[job.item.input_ids[i] as usize]));
                    top.push((job.item.top_logprobs_num > 0).then(|| topk(r, job.item.top_logprobs_num)));
                }
                InputLogprobs { ids: job.item.input_ids[start..].to_vec(), logprobs: lps, top }
            });
            let seed = match job.item.params.seed {
                Some(s) => rng::mix(&[s, job.item.sample_index]),
                None => rng::mix(&[self.seed, id]),
            };
            let max_stop_chars = job.item.params.stop.iter().map(|s| s.chars().count()).max().unwrap_or(0);
            let mut seq = Seq {
                id,
                job,
                out: Vec::new(),
                rng: Rng::new(seed),
                max_stop_chars,
                unsent: Vec::new(),
                unsent_input: None,
                last_token: Instant::now(),
                cached: self.engine.cached_tokens(id),
            };
            self.shared.metrics.cached(seq.cached);
            if seq.job.item.params.max_new_tokens == 0 {
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
        let temps: Vec<f32> = self.running.iter().map(|s| temp_of(&s.job.item.params)).collect();
        let v = self.engine.vocab_size();
        let version = self.version();
        let rows = match self.engine.decode(&ids, &last, &temps) {
            Ok(r) => r,
            Err(e) => {
                for mut s in std::mem::take(&mut self.running) {
                    self.engine.release(s.id);
                    tracing::error!(rid = s.job.item.rid.as_str(), "decode failed: {e:#}");
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
        let p = &seq.job.item.params;
        let banned: Vec<u32> = if seq.out.len() < p.min_new_tokens {
            self.eos.iter().chain(&p.stop_token_ids).copied().collect()
        } else {
            Vec::new()
        };
        let id = sampling::sample(row, &p.knobs, &banned, &mut seq.rng) as u32;
        let top = if seq.job.item.top_logprobs_num > 0 { topk(row, seq.job.item.top_logprobs_num) } else { Vec::new() };
        let tok = TokenOut { id, logprob: row[id as usize], top };
        seq.out.push(id);
        let n = seq.out.len();
        let finish = if n >= p.max_new_tokens {
            Some(Finish::Length(p.max_new_tokens))
        } else if !p.ignore_eos && (self.eos.contains(&id) || p.stop_token_ids.contains(&id)) {
            Some(Finish::StopToken(id))
        } else if let Some(s) = self.stop_string(seq) {
            Some(Finish::StopStr(s))
        } else if seq.job.item.input_ids.len() + n >= self.engine.context_len() {
            Some(Finish::Length(n))
        } else {
            None
        };
        (tok, finish)
    }

    fn stop_string(&self, seq: &Seq) -> Option<String> {
        let p = &seq.job.item.params;
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
