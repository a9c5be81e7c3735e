//! The libtorch engine: the shared decoder of `arl_model` (the one `arl-train`
//! trains), with one slot of a shared KV cache per sequence and batched decode steps. Rows are
//! `log_softmax(logits.float() / T)`, the formula `arl-train` uses to score the
//! same tokens, so server and trainer log-probs agree.
use super::engine::{Engine, Prefill, SeqId};
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
        Ok(TchEngine { model, cache, slots: HashMap::new(), lora: HashMap::new(), vocab, context, device })
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
        let _g = tch::no_grad_guard();
        let ids: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
        let (model, cache) = (&self.model, &mut self.cache);
        let slot = *self.slots.entry(seq).or_insert_with(|| cache.alloc());
        let lp = guarded("prefill", || {
            let logits = model.prefill(cache, slot, &ids);
            let rows = logits.narrow(0, from_row as i64, (ids.len() - from_row) as i64);
            (rows.to_kind(Kind::Float) / temperature as f64).log_softmax(-1, Kind::Float)
        })?;
        to_vec(&lp)
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
        let lora = if lora.iter().any(Option::is_some) { lora } else { Vec::new() };
        let ids: Vec<Vec<i64>> = items.iter().map(|p| p.ids.iter().map(|&i| i as i64).collect()).collect();
        let (model, cache, device, vocab) = (&self.model, &mut self.cache, self.device, self.vocab);
        let slots: Vec<usize> =
            items.iter().map(|p| *self.slots.entry(p.seq).or_insert_with(|| cache.alloc())).collect();
        let chunks: Vec<&[i64]> = ids.iter().map(Vec::as_slice).collect();
        let keep: Vec<std::ops::Range<usize>> = items.iter().map(|p| p.from_row..p.ids.len()).collect();
        // One temperature per returned row.
        let temps: Vec<f32> =
            items.iter().flat_map(|p| std::iter::repeat_n(p.temperature, p.ids.len() - p.from_row)).collect();
        let lp = guarded("prefill", || {
            let logits = model.extend_with(cache, &slots, &chunks, &keep, &lora);
            let t = Tensor::from_slice(&temps).to_device(device).view([-1, 1]);
            (logits.to_kind(Kind::Float) / t).log_softmax(-1, Kind::Float)
        })?;
        let flat = to_vec(&lp)?;
        let mut out = Vec::with_capacity(items.len());
        let mut at = 0;
        for p in items {
            let n = (p.ids.len() - p.from_row) * vocab;
            out.push(flat[at..at + n].to_vec());
            at += n;
        }
        Ok(out)
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
            self.cache.free(slot);
        }
        self.lora.remove(&seq);
    }
    fn reload(&mut self, dir: &Path) -> Result<()> {
        arl_core::model_dir::check_checkpoint(dir)?;
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
        self.model.unload_adapter(key);
    }
}
