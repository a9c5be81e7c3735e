//! What the scheduler needs from a model: per-sequence KV caches, a prefill,
//! one batched decode step, an in-place weight reload, and LoRA adapters
//! loaded and dropped by key (a sequence runs with the adapter its prefill
//! named, through its decode steps). Rows come back as
//! log-probabilities `log_softmax(logits.float() / T)` (T = 1 for greedy), one
//! row of `vocab_size` per position.
//!
//! Two implementations: the libtorch one over the shared `arl_model`
//! (`tch_engine`), and [`ScriptedEngine`], a test double that
//! answers scripted completions.
use anyhow::{bail, Context, Result};
use arl_chat::tokenizer::Tokenizer;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// Identity of a sequence (its KV cache) inside an engine.
pub type SeqId = u64;

/// One item of [`Engine::prefill_many`]: the arguments of [`Engine::prefill`].
#[derive(Debug, Clone, Copy)]
pub struct Prefill<'a> {
    pub seq: SeqId,
    pub ids: &'a [u32],
    pub temperature: f32,
    pub from_row: usize,
    /// The key of the LoRA adapter ([`Engine::load_adapter`]) the sequence
    /// runs with, from its prefill to its release; `None`: the base model.
    pub lora: Option<&'a str>,
}

pub trait Engine: Send {
    /// Number of columns of each returned row.
    fn vocab_size(&self) -> usize;
    /// Positions the model can attend over (prompt + completion).
    fn context_len(&self) -> usize;
    /// Runs `ids` after what the sequence's cache holds (creating it when new)
    /// and returns the rows of positions `from_row..ids.len()`, flattened.
    fn prefill(&mut self, seq: SeqId, ids: &[u32], temperature: f32, from_row: usize) -> Result<Vec<f32>>;
    /// Several fresh prefills at once (one batched forward where the engine
    /// can, sequences of different adapters and of the base together);
    /// answers one flattened block of rows per item, in order. The default
    /// runs them one by one, ignoring `lora` (for engines whose adapters
    /// change nothing, as the test double's).
    fn prefill_many(&mut self, items: &[Prefill<'_>]) -> Result<Vec<Vec<f32>>> {
        items.iter().map(|p| self.prefill(p.seq, p.ids, p.temperature, p.from_row)).collect()
    }
    /// One decode step for every sequence in `seqs` at once, `last[i]` being its
    /// newest token; returns one row per sequence, flattened.
    fn decode(&mut self, seqs: &[SeqId], last: &[u32], temperatures: &[f32]) -> Result<Vec<f32>>;
    /// Frees a sequence's cache.
    fn release(&mut self, seq: SeqId);
    /// Loads the weights of `dir` in place; on error the old weights stay.
    fn reload(&mut self, dir: &Path) -> Result<()>;
    /// Loads the LoRA adapter in `dir` (PEFT's layout) under `key`, a key not
    /// in use; on error nothing changes.
    fn load_adapter(&mut self, key: &str, dir: &Path) -> Result<()>;
    /// Drops the adapter of `key` (no sequence runs with it any more).
    fn unload_adapter(&mut self, key: &str);
    /// Prompt tokens that the prefill of `seq` took from the prefix cache.
    fn cached_tokens(&self, _seq: SeqId) -> usize {
        0
    }
    /// Empties the prefix cache (`/flush_cache`).
    fn flush_cache(&mut self) {}
}

/// End-of-sequence ids of a model directory ([`arl_chat::tokenizer::eos_ids`]:
/// `eos_token_id` of `config.json` and `generation_config.json`, an id or a
/// list, and the tokenizer's `eos_token`).
pub fn eos_ids(dir: &Path, tok: &Tokenizer) -> Result<Vec<u32>> {
    arl_chat::tokenizer::eos_ids(dir, tok)
}

/// `max_position_embeddings` of `config.json` (default 32768).
pub fn context_len_of(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.get("max_position_embeddings").and_then(Value::as_u64))
        .map_or(32768, |n| n as usize)
}

/// One scripted completion: used when `when` occurs in the prompt text (the
/// entry whose `when` occurs latest wins), or in file order when no entry matches.
/// `token_delay_ms` makes a decode step holding this completion take that long,
/// for tests that need requests in flight (aborts, timeouts, routing).
#[derive(Debug, Clone, serde::Deserialize)]
pub struct Script {
    #[serde(default)]
    pub when: Option<String>,
    pub completion: String,
    #[serde(default)]
    pub token_delay_ms: u64,
}

/// Test double: answers scripted completions (tokenised with the model's
/// tokenizer, then EOS) instead of running a model. Each row puts log-prob 0
/// on the scripted token and -100 elsewhere, so sampling at any temperature
/// follows the script and `ignore_eos`/stop rules behave as with a model.
pub struct ScriptedEngine {
    tok: Arc<Tokenizer>,
    scripts: Vec<Script>,
    vocab: usize,
    context: usize,
    eos: u32,
    next_fallback: usize,
    /// Per sequence: planned tokens and how many positions were consumed.
    seqs: HashMap<SeqId, (Vec<u32>, usize)>,
    /// Per sequence: its script's `token_delay_ms`.
    delays: HashMap<SeqId, u64>,
    /// Keys of the loaded adapters (which change nothing in the answers).
    adapters: std::collections::HashSet<String>,
}

impl ScriptedEngine {
    pub fn load(file: &Path, model_dir: &Path, tok: Arc<Tokenizer>) -> Result<ScriptedEngine> {
        let text = std::fs::read_to_string(file).with_context(|| format!("cannot read `{}`", file.display()))?;
        let mut scripts = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let s: Script = serde_json::from_str(line).with_context(|| {
                format!("`{}` line {}: expected {{\"completion\": …, \"when\"?: …}}", file.display(), i + 1)
            })?;
            scripts.push(s);
        }
        if scripts.is_empty() {
            bail!("`{}` holds no scripted completion", file.display());
        }
        let eos = *eos_ids(model_dir, &tok)?.first().context("the model declares no `eos_token_id`")?;
        let vocab = tok.inner.get_vocab_size(true).max(eos as usize + 1);
        Ok(ScriptedEngine {
            context: context_len_of(model_dir),
            tok,
            scripts,
            vocab,
            eos,
            next_fallback: 0,
            seqs: HashMap::new(),
            delays: HashMap::new(),
            adapters: Default::default(),
        })
    }

    fn plan_for(&mut self, prompt: &str) -> Result<(Vec<u32>, u64)> {
        let mut best: Option<(usize, usize)> = None;
        for (i, s) in self.scripts.iter().enumerate() {
            if let Some(w) = &s.when {
                if let Some(pos) = prompt.rfind(w.as_str()) {
                    if best.is_none_or(|(bp, _)| pos > bp) {
                        best = Some((pos, i));
                    }
                }
            }
        }
        let idx = match best {
            Some((_, i)) => i,
            None => {
                let plain: Vec<usize> = (0..self.scripts.len()).filter(|&i| self.scripts[i].when.is_none()).collect();
                let pool = if plain.is_empty() { (0..self.scripts.len()).collect() } else { plain };
                let i = pool[self.next_fallback % pool.len()];
                self.next_fallback += 1;
                i
            }
        };
        let mut ids = self.tok.encode(&self.scripts[idx].completion)?;
        ids.push(self.eos);
        Ok((ids, self.scripts[idx].token_delay_ms))
    }

    fn row(&self, seq: SeqId, out: &mut Vec<f32>) {
        let start = out.len();
        out.resize(start + self.vocab, -100.0);
        let tok = self.seqs.get(&seq).map_or(self.eos, |(plan, pos)| plan.get(*pos).copied().unwrap_or(self.eos));
        out[start + tok as usize] = 0.0;
    }
}

impl Engine for ScriptedEngine {
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn context_len(&self) -> usize {
        self.context
    }
    fn prefill(&mut self, seq: SeqId, ids: &[u32], _t: f32, from_row: usize) -> Result<Vec<f32>> {
        if !self.seqs.contains_key(&seq) {
            let prompt = self.tok.decode(ids);
            let (plan, delay) = self.plan_for(&prompt)?;
            self.seqs.insert(seq, (plan, 0));
            if delay > 0 {
                self.delays.insert(seq, delay);
            }
        } else if let Some(s) = self.seqs.get_mut(&seq) {
            s.1 += ids.len();
        }
        let mut out = Vec::with_capacity((ids.len() - from_row) * self.vocab);
        // Prompt positions: the script says nothing about them; only the last
        // row (the first completion token) matters.
        for _ in from_row..ids.len() {
            self.row(seq, &mut out);
        }
        Ok(out)
    }
    fn decode(&mut self, seqs: &[SeqId], _last: &[u32], _t: &[f32]) -> Result<Vec<f32>> {
        let delay = seqs.iter().filter_map(|s| self.delays.get(s)).max().copied().unwrap_or(0);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_millis(delay));
        }
        let mut out = Vec::with_capacity(seqs.len() * self.vocab);
        for &s in seqs {
            if let Some(st) = self.seqs.get_mut(&s) {
                st.1 += 1;
            }
            self.row(s, &mut out);
        }
        Ok(out)
    }
    fn release(&mut self, seq: SeqId) {
        self.seqs.remove(&seq);
        self.delays.remove(&seq);
    }
    fn reload(&mut self, dir: &Path) -> Result<()> {
        // The double has no weights; it checks what a real load would need.
        arl_core::model_dir::check_checkpoint(dir)
    }
    fn load_adapter(&mut self, key: &str, dir: &Path) -> Result<()> {
        // As for `reload`: the files a real load reads, not their shapes.
        arl_model::lora::read_config(dir)?;
        let w = dir.join(arl_model::lora::ADAPTER_WEIGHTS);
        if !w.is_file() {
            bail!("`{}` is missing", w.display());
        }
        self.adapters.insert(key.to_string());
        Ok(())
    }
    fn unload_adapter(&mut self, key: &str) {
        self.adapters.remove(key);
    }
}
