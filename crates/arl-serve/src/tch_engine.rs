//! The libtorch engine: the shared decoder of `arl_model` (the one `arl-train`
//! trains), with one slot of a shared KV cache per sequence and batched decode steps. Rows are
//! `log_softmax(logits.float() / T)`, the formula `arl-train` uses to score the
//! same tokens, so server and trainer log-probs agree.
use super::engine::{Engine, Prefill, SeqId};
use super::prefix::{Key, PrefixIndex};
use anyhow::{anyhow, Context, Result};
use arl_model::{onednn, CpuMatmul, DecodeMatmul, KvCache, Model};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use tch::{Device, Kind, Tensor};

pub struct TchEngine {
    model: Model,
    cache: KvCache,
    slots: HashMap<SeqId, usize>,
    /// The prefix cache's bookkeeping: which slot holds which tokens.
    prefix: PrefixIndex,
    /// Bumped by every weight update: a slot filled before it is stale.
    version: u64,
    /// Per sequence: the prompt tokens its prefill took from the cache.
    cached: HashMap<SeqId, usize>,
    /// The adapter id ([`Model::load_adapter`]) of each sequence that has one.
    lora: HashMap<SeqId, u32>,
    vocab: usize,
    context: usize,
    device: Device,
}

/// `auto` is float32 on CPU (exact log-probs) and the checkpoint's dtype
/// (bfloat16 when unsaid) on CUDA.
pub fn parse_dtype(s: &str, device: Device, model_dir: &Path) -> Result<Kind> {
    let from_config = || {
        let v: serde_json::Value =
            std::fs::read_to_string(model_dir.join("config.json")).ok().and_then(|t| serde_json::from_str(&t).ok())?;
        let d = v.get("torch_dtype").or_else(|| v.get("dtype"))?.as_str()?.to_string();
        Some(d)
    };
    Ok(match s {
        "auto" if device == Device::Cpu => Kind::Float,
        "auto" => match from_config().as_deref() {
            Some("float16") => Kind::Half,
            Some("float32") => Kind::Float,
            _ => Kind::BFloat16,
        },
        "float32" | "fp32" => Kind::Float,
        "bfloat16" | "bf16" => Kind::BFloat16,
        "float16" | "fp16" | "half" => Kind::Half,
        _ => anyhow::bail!("unknown dtype `{s}` (auto, float32, bfloat16, float16)"),
    })
}

/// `--cpu-matmul`: `None` is `auto`.
pub fn parse_cpu_matmul(s: &str) -> Result<Option<CpuMatmul>> {
    Ok(match s {
        "auto" => None,
        "onednn" => Some(CpuMatmul::OneDnn),
        "blas" => Some(CpuMatmul::Blas),
        _ => anyhow::bail!("unknown `--cpu-matmul` `{s}` (auto, onednn, blas)"),
    })
}

/// How many finished sequences' caches are kept for reuse by default
/// (`--prefix-cache-slots`); they only take slots no running sequence needs.
pub const DEFAULT_PREFIX_SLOTS: usize = 64;

/// oneDNN must be this much faster than BLAS for `auto` to take it.
const ONEDNN_MARGIN: f64 = 1.1;

/// Sets every engine's CPU matmul path: `want` (`None`: measured, see
/// `--cpu-matmul`), reporting the choice through `log`. Answers what was
/// chosen: `blas`, `onednn`, or `none` for models that are not float32 on
/// the CPU (where the setting does nothing). `onednn` asked for where it
/// cannot run is an error.
pub fn choose_cpu_matmul(
    engines: &mut [TchEngine],
    want: Option<CpuMatmul>,
    mut log: impl FnMut(String),
) -> Result<&'static str> {
    let Some(first) = engines.first() else { return Ok("none") };
    if first.device != Device::Cpu || first.model.kind() != Kind::Float {
        if want == Some(CpuMatmul::OneDnn) {
            anyhow::bail!("`--cpu-matmul onednn` is for float32 models on the CPU");
        }
        return Ok("none");
    }
    let chosen = match want {
        Some(m) => m,
        None if !onednn::available() => {
            log("CPU matmul: BLAS (this libtorch cannot run oneDNN linears)".into());
            CpuMatmul::Blas
        }
        None => {
            // The widest projection (gate and up side by side) at a decode batch of 32.
            let cfg = &first.model.config;
            let (inner, out) = (cfg.hidden_size as i64, 2 * cfg.intermediate_size as i64);
            let (blas, dnn) = onednn::calibrate(32, inner, out);
            let pick = if dnn >= ONEDNN_MARGIN * blas { CpuMatmul::OneDnn } else { CpuMatmul::Blas };
            log(format!(
                "CPU matmul: {} (measured at [32×{inner}]·[{inner}×{out}]: oneDNN {dnn:.0} GFLOP/s, BLAS {blas:.0}; \
                 --cpu-matmul to choose)",
                if pick == CpuMatmul::OneDnn { "oneDNN" } else { "BLAS" }
            ));
            pick
        }
    };
    for e in engines.iter_mut() {
        e.model.set_cpu_matmul(chosen)?;
    }
    Ok(match chosen {
        CpuMatmul::OneDnn => "onednn",
        CpuMatmul::Blas => "blas",
    })
}

/// `--decode-matmul`: `None` is `auto`.
pub fn parse_decode_matmul(s: &str) -> Result<Option<DecodeMatmul>> {
    Ok(match s {
        "auto" => None,
        "blas" => Some(DecodeMatmul::Blas),
        "float32" | "fp32" => Some(DecodeMatmul::Float32),
        "bf16" | "bfloat16" => Some(DecodeMatmul::Bf16),
        _ => anyhow::bail!("unknown `--decode-matmul` `{s}` (auto, blas, float32, bf16)"),
    })
}

/// A way must be this much faster than the one before it in
/// [`choose_decode_matmul`]'s order for `auto` to take it.
const DECODE_MARGIN: f64 = 1.05;

/// Sets every engine's decode matrix products (`--decode-matmul`): `want`,
/// or (`None`) the fastest measured one — a real decode step of the model at
/// 1, 8 and 32 sequences, each way in turn — among libtorch's BLAS, arl's
/// float32 kernel and, when `bf16_ok` (`--dtype auto`), arl's kernel on bf16
/// copies of the weights. Logs the measurements and the choice through `log`
/// and answers it (`none` for models that are not float32 on the CPU).
pub fn choose_decode_matmul(
    engines: &mut [TchEngine],
    want: Option<DecodeMatmul>,
    bf16_ok: bool,
    mut log: impl FnMut(String),
) -> Result<&'static str> {
    let Some(first) = engines.first_mut() else { return Ok("none") };
    if first.device != Device::Cpu || first.model.kind() != Kind::Float {
        if want.is_some_and(|w| w != DecodeMatmul::Blas) {
            anyhow::bail!("`--decode-matmul` float32 and bf16 are for float32 models on the CPU");
        }
        return Ok("none");
    }
    let chosen = match want {
        Some(d) => d,
        None => {
            let mut ways = vec![DecodeMatmul::Blas, DecodeMatmul::Float32];
            if bf16_ok {
                ways.push(DecodeMatmul::Bf16);
            }
            // (way, ms at 1, 8 and 32 rows); the score sums the three
            // relative to BLAS.
            let mut timed = Vec::new();
            for &d in &ways {
                first.model.set_decode_matmul(d)?;
                let ms =
                    [(1, 4), (8, 3), (32, 2)].map(|(rows, steps)| first.model.decode_step_seconds(rows, steps) * 1e3);
                timed.push((d, ms));
            }
            let base = timed[0].1;
            let score = |(_, ms): &(DecodeMatmul, [f64; 3])| ms.iter().zip(&base).map(|(t, b)| t / b).sum::<f64>();
            let mut pick = timed[0];
            for t in &timed[1..] {
                if score(t) * DECODE_MARGIN < score(&pick) {
                    pick = *t;
                }
            }
            let shown: Vec<String> =
                timed.iter().map(|(d, [a, b, c])| format!("{} {a:.1}/{b:.1}/{c:.1}", d.name())).collect();
            log(format!(
                "decode matmul: {} (a decode step at 1/8/32 sequences, ms: {}; --decode-matmul to choose{})",
                pick.0.name(),
                shown.join(", "),
                if bf16_ok { "" } else { "; bf16 is tried under --dtype auto only" }
            ));
            pick.0
        }
    };
    for e in engines.iter_mut() {
        e.model.set_decode_matmul(chosen)?;
    }
    Ok(chosen.name())
}

fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        anyhow!("{what} failed: {msg}")
    })
}

fn to_vec(t: &Tensor) -> Result<Vec<f32>> {
    let flat = t.to_device(Device::Cpu).contiguous().view([-1]);
    Vec::<f32>::try_from(&flat).map_err(|e| anyhow!("copying log-probs: {e}"))
}

impl TchEngine {
    pub fn load(dir: &Path, device: Device, kind: Kind) -> Result<TchEngine> {
        let mut model = Model::load(dir, device, kind).with_context(|| format!("loading model `{}`", dir.display()))?;
        model.fuse_projections();
        let vocab = model.config.vocab_size;
        let context = model.config.max_position_embeddings;
        let cache = model.new_cache();
        Ok(TchEngine {
            model,
            cache,
            slots: HashMap::new(),
            prefix: PrefixIndex::new(DEFAULT_PREFIX_SLOTS),
            version: 0,
            cached: HashMap::new(),
            lora: HashMap::new(),
            vocab,
            context,
            device,
        })
    }

    /// At most `slots` finished sequences' caches are kept for reuse (0: no
    /// prefix cache; `--disable-radix-cache`).
    pub fn set_prefix_cache(&mut self, slots: usize) {
        for s in self.prefix.flush() {
            self.cache.free(s);
        }
        self.prefix.capacity = slots;
    }

    /// A free slot: a retained one is given up (least recently used first)
    /// before the cache grows.
    fn alloc_slot(&mut self) -> usize {
        if !self.cache.has_free() {
            if let Some(s) = self.prefix.evict_one() {
                self.cache.free(s);
            }
        }
        self.cache.alloc()
    }

    /// Frees `slots` (given up by the prefix cache).
    fn free_slots(&mut self, slots: Vec<usize>) {
        for s in slots {
            self.cache.free(s);
        }
    }

    /// Number of parameters of the model.
    pub fn parameters(&self) -> i64 {
        self.model.named_parameters().values().map(|t| t.numel() as i64).sum()
    }
}

impl Engine for TchEngine {
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn context_len(&self) -> usize {
        self.context
    }
    fn prefill(&mut self, seq: SeqId, ids: &[u32], temperature: f32, from_row: usize) -> Result<Vec<f32>> {
        let item = Prefill { seq, ids, temperature, from_row, lora: None };
        Ok(self.prefill_many(&[item])?.pop().unwrap_or_default())
    }
    fn prefill_many(&mut self, items: &[Prefill<'_>]) -> Result<Vec<Vec<f32>>> {
        let _g = tch::no_grad_guard();
        let lora: Vec<Option<u32>> = items
            .iter()
            .map(|p| match p.lora {
                None => Ok(None),
                Some(k) => self.model.adapter_id(k).map(Some).ok_or_else(|| anyhow!("no LoRA adapter `{k}` loaded")),
            })
            .collect::<Result<_>>()?;
        for (p, l) in items.iter().zip(&lora) {
            if let Some(id) = l {
                self.lora.insert(p.seq, *id);
            }
        }
        // Slots: a sequence already running continues after what it holds.
        let fresh: Vec<bool> = items.iter().map(|p| !self.slots.contains_key(&p.seq)).collect();
        let mut slots = Vec::with_capacity(items.len());
        for p in items {
            let slot = match self.slots.get(&p.seq) {
                Some(&s) => s,
                None => self.alloc_slot(),
            };
            self.slots.insert(p.seq, slot);
            slots.push(slot);
        }
        let plan = self.plan_reuse(items, &lora, &fresh);
        // The leaders (reusing at most a cached prefix) run first, then the
        // items that copy a leader's prompt: one batched forward each.
        let mut rows: Vec<Option<Vec<f32>>> = vec![None; items.len()];
        for phase in [false, true] {
            let idx: Vec<usize> = (0..items.len()).filter(|&i| plan[i].follows.is_some() == phase).collect();
            if idx.is_empty() {
                continue;
            }
            for &i in &idx {
                let r = &plan[i];
                if let Some(src) = r.follows.map(|j| slots[j]).or(r.source) {
                    self.cache.copy_prefix(src, slots[i], r.reuse);
                }
            }
            let out = self.forward(items, &idx, &slots, &lora, &plan)?;
            for (i, r) in idx.into_iter().zip(out) {
                rows[i] = Some(r);
            }
        }
        let version = self.version;
        for (i, p) in items.iter().enumerate() {
            let reuse = plan[i].reuse;
            if fresh[i] {
                self.prefix.start(slots[i], p.ids.to_vec(), Key { lora: lora[i], version });
                self.prefix.count(p.ids.len(), reuse);
            } else {
                self.prefix.extend(slots[i], p.ids);
            }
            self.cached.insert(p.seq, reuse);
        }
        Ok(rows.into_iter().map(Option::unwrap_or_default).collect())
    }
    fn decode(&mut self, seqs: &[SeqId], last: &[u32], temperatures: &[f32]) -> Result<Vec<f32>> {
        let _g = tch::no_grad_guard();
        let slots: Vec<usize> = seqs
            .iter()
            .map(|s| self.slots.get(s).copied().ok_or_else(|| anyhow!("no KV cache for sequence {s}")))
            .collect::<Result<_>>()?;
        let last: Vec<i64> = last.iter().map(|&i| i as i64).collect();
        // One adapter (or the base) per sequence; empty when all run the base.
        let lora: Vec<Option<u32>> =
            if self.lora.is_empty() { Vec::new() } else { seqs.iter().map(|s| self.lora.get(s).copied()).collect() };
        for (&slot, &t) in slots.iter().zip(last.iter()) {
            self.prefix.extend(slot, &[t as u32]);
        }
        let (model, cache, device) = (&self.model, &mut self.cache, self.device);
        let lp = guarded("decode step", || {
            let logits = if lora.iter().any(Option::is_some) {
                let chunks: Vec<&[i64]> = last.iter().map(std::slice::from_ref).collect();
                model.extend_with(cache, &slots, &chunks, &vec![0..1; last.len()], &lora)
            } else {
                model.decode_step(cache, &slots, &last)
            };
            // (Greedy and T = 1 batches skip the division: one op less per step.)
            if temperatures.iter().all(|&t| t == 1.0) {
                return logits.log_softmax(-1, Kind::Float);
            }
            let t = Tensor::from_slice(temperatures).to_device(device).view([-1, 1]);
            (logits.to_kind(Kind::Float) / t).log_softmax(-1, Kind::Float)
        })?;
        to_vec(&lp)
    }
    fn release(&mut self, seq: SeqId) {
        if let Some(slot) = self.slots.remove(&seq) {
            let free = self.prefix.release(slot, self.version);
            self.free_slots(free);
        }
        self.lora.remove(&seq);
        self.cached.remove(&seq);
    }
    fn reload(&mut self, dir: &Path) -> Result<()> {
        arl_core::model_dir::check_checkpoint(dir)?;
        // Whatever happens, the weights may have changed: no slot filled
        // before this point is a source again.
        self.version += 1;
        let current = self.version;
        let stale = self.prefix.drop_where(|k| k.version != current);
        self.free_slots(stale);
        let model = &mut self.model;
        guarded("reload", || model.reload(dir))??;
        Ok(())
    }
    fn load_adapter(&mut self, key: &str, dir: &Path) -> Result<()> {
        anyhow::ensure!(self.model.adapter_id(key).is_none(), "adapter key `{key}` is in use");
        let model = &mut self.model;
        guarded("loading the adapter", || model.load_adapter(key, dir))??;
        Ok(())
    }
    fn unload_adapter(&mut self, key: &str) {
        if let Some(id) = self.model.adapter_id(key) {
            // Its id may be given to the next adapter loaded.
            let gone = self.prefix.drop_where(|k| k.lora == Some(id));
            self.free_slots(gone);
        }
        self.model.unload_adapter(key);
    }
    fn cached_tokens(&self, seq: SeqId) -> usize {
        self.cached.get(&seq).copied().unwrap_or(0)
    }
    fn flush_cache(&mut self) {
        let all = self.prefix.flush();
        self.free_slots(all);
    }
}

/// How one item of a prefill reuses KV: `reuse` positions copied from the
/// cache's `source` slot or from batch item `follows` (after it has run).
#[derive(Debug, Clone, Copy, Default)]
struct Reuse {
    reuse: usize,
    source: Option<usize>,
    follows: Option<usize>,
}

impl TchEngine {
    /// For each item of a prefill, the longest prefix to copy rather than
    /// compute: from a running or retained sequence of the same adapter and
    /// weight version, or from an earlier item of this batch (a group's
    /// samples share their prompt). Never the rows asked for (`from_row..`),
    /// and never the last position (its logits are the answer).
    fn plan_reuse(&mut self, items: &[Prefill<'_>], lora: &[Option<u32>], fresh: &[bool]) -> Vec<Reuse> {
        let mut plan = vec![Reuse::default(); items.len()];
        if !self.prefix.enabled() {
            return plan;
        }
        for (i, p) in items.iter().enumerate() {
            if !fresh[i] || p.ids.len() < 2 {
                continue;
            }
            let limit = p.from_row.min(p.ids.len() - 1);
            let key = Key { lora: lora[i], version: self.version };
            let mut best = Reuse::default();
            if let Some(h) = self.prefix.lookup(p.ids, key) {
                best = Reuse { reuse: h.len.min(limit), source: Some(h.slot), follows: None };
            }
            for j in (0..i).filter(|&j| fresh[j] && plan[j].follows.is_none() && lora[j] == lora[i]) {
                let n = items[j].ids.iter().zip(p.ids).take_while(|(a, b)| a == b).count().min(limit);
                if n > best.reuse {
                    best = Reuse { reuse: n, source: None, follows: Some(j) };
                }
            }
            plan[i] = best;
        }
        plan
    }

    /// One batched forward of the items `idx` (each after its reused
    /// prefix), answering each one's rows `from_row..` as log-probs.
    fn forward(
        &mut self,
        items: &[Prefill<'_>],
        idx: &[usize],
        slots: &[usize],
        lora: &[Option<u32>],
        plan: &[Reuse],
    ) -> Result<Vec<Vec<f32>>> {
        let ids: Vec<Vec<i64>> =
            idx.iter().map(|&i| items[i].ids[plan[i].reuse..].iter().map(|&t| t as i64).collect()).collect();
        let chunks: Vec<&[i64]> = ids.iter().map(Vec::as_slice).collect();
        let keep: Vec<std::ops::Range<usize>> =
            idx.iter().map(|&i| (items[i].from_row - plan[i].reuse)..(items[i].ids.len() - plan[i].reuse)).collect();
        let sel: Vec<usize> = idx.iter().map(|&i| slots[i]).collect();
        let lora: Vec<Option<u32>> =
            if idx.iter().any(|&i| lora[i].is_some()) { idx.iter().map(|&i| lora[i]).collect() } else { Vec::new() };
        // One temperature per returned row.
        let temps: Vec<f32> = idx
            .iter()
            .flat_map(|&i| std::iter::repeat_n(items[i].temperature, items[i].ids.len() - items[i].from_row))
            .collect();
        let (model, cache, device) = (&self.model, &mut self.cache, self.device);
        let lp = guarded("prefill", || {
            let logits = model.extend_with(cache, &sel, &chunks, &keep, &lora);
            let t = Tensor::from_slice(&temps).to_device(device).view([-1, 1]);
            (logits.to_kind(Kind::Float) / t).log_softmax(-1, Kind::Float)
        })?;
        let flat = to_vec(&lp)?;
        let mut out = Vec::with_capacity(idx.len());
        let mut at = 0;
        for &i in idx {
            let n = (items[i].ids.len() - items[i].from_row) * self.vocab;
            out.push(flat[at..at + n].to_vec());
            at += n;
        }
        Ok(out)
    }
}
