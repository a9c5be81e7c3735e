//! Request parsing: SGLang's `SamplingParams` with its defaults and checks,
//! and a `/generate` body validated and expanded into items.

use super::AppState;
use crate::sampling::Knobs;
use crate::scheduler::Params;
use arl_chat::tokenizer::Tokenizer;
use serde_json::{Map, Value};

/// Tokenises prompt text the way SGLang does (`tokenizer.encode`, special tokens added).
pub fn encode(tok: &Tokenizer, s: &str) -> Result<Vec<u32>, String> {
    tok.inner.encode(s, true).map(|e| e.get_ids().to_vec()).map_err(|e| format!("cannot tokenize the prompt: {e}"))
}

pub(super) fn field<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    m.get(k).filter(|v| !v.is_null())
}

pub(super) fn as_f32(m: &Map<String, Value>, k: &str, default: f32) -> Result<f32, String> {
    match field(m, k) {
        None => Ok(default),
        Some(v) => v.as_f64().map(|x| x as f32).ok_or_else(|| format!("`{k}` must be a number, got {v}")),
    }
}

pub(super) fn as_int(m: &Map<String, Value>, k: &str, default: i64) -> Result<i64, String> {
    match field(m, k) {
        None => Ok(default),
        Some(v) => v.as_i64().ok_or_else(|| format!("`{k}` must be an integer, got {v}")),
    }
}

pub(super) fn as_bool(m: &Map<String, Value>, k: &str, default: bool) -> Result<bool, String> {
    match field(m, k) {
        None => Ok(default),
        Some(v) => v.as_bool().ok_or_else(|| format!("`{k}` must be true or false, got {v}")),
    }
}

pub(super) fn token_id(v: &Value, what: &str, vocab: usize) -> Result<u32, String> {
    match v.as_u64() {
        Some(x) if (x as usize) < vocab => Ok(x as u32),
        Some(x) => Err(format!("{what}: token id {x} is out of the vocabulary (size {vocab})")),
        None => Err(format!("{what}: expected a token id (non-negative integer), got {v}")),
    }
}

/// SGLang's `SamplingParams` with its defaults and checks; returns the params and `n`.
pub fn parse_sampling(v: Option<&Value>, vocab: usize) -> Result<(Params, usize), String> {
    let empty = Map::new();
    let m = match v {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(other) => return Err(format!("`sampling_params` must be an object, got {other}")),
    };
    let max_new_tokens = as_int(m, "max_new_tokens", 128)?;
    if max_new_tokens < 0 {
        return Err(format!("max_new_tokens must be at least 0, got {max_new_tokens}"));
    }
    let min_new_tokens = as_int(m, "min_new_tokens", 0)?;
    if min_new_tokens < 0 || min_new_tokens > max_new_tokens {
        return Err(format!("min_new_tokens must be in [0, max_new_tokens], got {min_new_tokens}"));
    }
    let temperature = as_f32(m, "temperature", 1.0)?;
    if !(temperature >= 0.0 && temperature.is_finite()) {
        return Err(format!("temperature must be non-negative, got {temperature}"));
    }
    let top_p = as_f32(m, "top_p", 1.0)?;
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(format!("top_p must be in (0, 1], got {top_p}"));
    }
    let top_k = as_int(m, "top_k", -1)?;
    if top_k < -1 || top_k == 0 {
        return Err(format!("top_k must be -1 (disable), or at least 1, got {top_k}"));
    }
    let min_p = as_f32(m, "min_p", 0.0)?;
    if !(0.0..=1.0).contains(&min_p) {
        return Err(format!("min_p must be in [0, 1], got {min_p}"));
    }
    let n = as_int(m, "n", 1)?;
    if n < 1 {
        return Err(format!("n must be at least 1, got {n}"));
    }
    for (k, neutral) in [("frequency_penalty", 0.0), ("presence_penalty", 0.0), ("repetition_penalty", 1.0)] {
        let x = as_f32(m, k, neutral)?;
        if x != neutral {
            return Err(format!("`{k}` is not supported by arl-serve (only the neutral value {neutral})"));
        }
    }
    for k in ["json_schema", "regex", "ebnf", "structural_tag", "stop_regex", "custom_params"] {
        if field(m, k).is_some() {
            return Err(format!("`{k}` is not supported by arl-serve"));
        }
    }
    if field(m, "logit_bias").is_some_and(|v| v.as_object().is_none_or(|o| !o.is_empty())) {
        return Err("`logit_bias` is not supported by arl-serve".into());
    }
    let stop = match field(m, "stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_str().map(str::to_string).ok_or_else(|| format!("`stop` must hold strings, got {x}")))
            .collect::<Result<_, _>>()?,
        Some(v) => return Err(format!("`stop` must be a string or a list of strings, got {v}")),
    };
    let stop_token_ids = match field(m, "stop_token_ids") {
        None => Vec::new(),
        Some(Value::Array(a)) => a.iter().map(|x| token_id(x, "stop_token_ids", vocab)).collect::<Result<_, _>>()?,
        Some(v) => return Err(format!("`stop_token_ids` must be a list of token ids, got {v}")),
    };
    let seed = match field(m, "sampling_seed") {
        None => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| format!("`sampling_seed` must be an integer, got {v}"))? as u64),
    };
    Ok((
        Params {
            knobs: Knobs { temperature, top_p, top_k, min_p },
            max_new_tokens: max_new_tokens as usize,
            min_new_tokens: min_new_tokens as usize,
            stop,
            stop_token_ids,
            ignore_eos: as_bool(m, "ignore_eos", false)?,
            no_stop_trim: as_bool(m, "no_stop_trim", false)?,
            skip_special_tokens: as_bool(m, "skip_special_tokens", true)?,
            seed,
        },
        n as usize,
    ))
}

/// A per-prompt field that may be given once or as a list (one per prompt).
pub(super) fn per_prompt<'a>(
    m: &'a Map<String, Value>,
    k: &str,
    batch: Option<usize>,
) -> Result<Vec<Option<&'a Value>>, String> {
    let count = batch.unwrap_or(1);
    match field(m, k) {
        None => Ok(vec![None; count]),
        Some(Value::Array(a)) if batch.is_some() && k != "stop" => {
            if a.len() != count {
                return Err(format!("`{k}` has {} entries for a batch of {count}", a.len()));
            }
            Ok(a.iter().map(Some).collect())
        }
        Some(v) => Ok(vec![Some(v); count]),
    }
}

/// One expanded item of a `/generate` request (the scheduler's type: a
/// [`crate::scheduler::Job`] is an item on its way).
pub use crate::scheduler::Item;

/// `lora_path` of a request, one entry per prompt: a name (or null) for
/// all, or a list with one name or null per prompt of a batch. Every name
/// must be a loaded adapter (400 naming the first that is not).
pub(super) fn lora_paths(
    st: &AppState,
    m: &Map<String, Value>,
    prompts: usize,
    batched: bool,
) -> Result<Vec<Option<String>>, String> {
    let one = |v: &Value| -> Result<Option<String>, String> {
        match v {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            v => Err(format!("`lora_path` must be an adapter name, null, or a list of them, got {v}")),
        }
    };
    let names: Vec<Option<String>> = match field(m, "lora_path") {
        None => vec![None; prompts],
        Some(Value::Array(a)) => {
            if a.len() != prompts {
                let what = if batched { "a batch of" } else { "a request of" };
                return Err(format!("`lora_path` has {} entries for {what} {prompts} prompt(s)", a.len()));
            }
            a.iter().map(one).collect::<Result<_, _>>()?
        }
        Some(v) => vec![one(v)?; prompts],
    };
    if let Some(bad) = names.iter().flatten().find(|n| !st.shared.has_adapter(n)) {
        return Err(crate::scheduler::not_loaded(bad, &st.shared.adapters().into_keys().collect::<Vec<_>>()));
    }
    Ok(names)
}

pub struct GenerateRequest {
    pub items: Vec<Item>,
    pub batched: bool,
    pub stream: bool,
    pub return_text_in_logprobs: bool,
}

/// Validates a `/generate` body and expands it prompt-major (`[p0.s0, p0.s1, …, p1.s0, …]`).
///
/// One check per request field, in the order of SGLang's `GenerateReqInput`,
/// so the two can be read side by side (`parse_prompts` and `request_ids`
/// hold the checks of the prompt and of `rid`).
pub fn parse_generate(st: &AppState, m: &Map<String, Value>) -> Result<GenerateRequest, String> {
    let vocab = st.cfg.vocab_size;
    let (prompts, batched) = parse_prompts(st, m)?;
    let b = batched.then_some(prompts.len());
    let sps: Vec<Option<&Value>> = match field(m, "sampling_params") {
        Some(Value::Array(a)) => {
            if a.len() != prompts.len() {
                return Err(format!("`sampling_params` has {} entries for {} prompts", a.len(), prompts.len()));
            }
            a.iter().map(Some).collect()
        }
        other => vec![other; prompts.len()],
    };
    let parsed: Vec<(Params, usize)> = sps.into_iter().map(|v| parse_sampling(v, vocab)).collect::<Result<_, _>>()?;
    let n = parsed[0].1;
    if parsed.iter().any(|p| p.1 != n) {
        return Err("all entries of `sampling_params` must have the same `n`".into());
    }
    let loras = lora_paths(st, m, prompts.len(), batched)?;
    let rl = per_prompt(m, "return_logprob", b)?;
    let ls = per_prompt(m, "logprob_start_len", b)?;
    let tn = per_prompt(m, "top_logprobs_num", b)?;
    let total = prompts.len() * n;
    let rids = request_ids(st, m, prompts.len(), n)?;
    let mut items = Vec::with_capacity(total);
    for (p, ids) in prompts.into_iter().enumerate() {
        let return_logprob = match rl[p] {
            None => false,
            Some(v) => v.as_bool().ok_or_else(|| format!("`return_logprob` must be true or false, got {v}"))?,
        };
        let start = match ls[p] {
            None => -1,
            Some(v) => v.as_i64().ok_or_else(|| format!("`logprob_start_len` must be an integer, got {v}"))?,
        };
        if start < -1 || start >= ids.len() as i64 {
            return Err(format!(
                "logprob_start_len ({start}) must be -1 or in [0, {}) for a prompt of {} tokens",
                ids.len(),
                ids.len()
            ));
        }
        let top = match tn[p] {
            None => 0,
            Some(v) => {
                v.as_u64().ok_or_else(|| format!("`top_logprobs_num` must be a non-negative integer, got {v}"))?
                    as usize
            }
        };
        // -1 means "only the output": SGLang then starts at the last prompt token.
        let start = if start < 0 { ids.len() - 1 } else { start as usize };
        for s in 0..n {
            items.push(Item {
                rid: rids[p * n + s].clone(),
                input_ids: ids.clone(),
                params: parsed[p].0.clone(),
                return_logprob,
                logprob_start_len: start,
                top_logprobs_num: top.min(vocab),
                sample_index: s as u64,
                lora: loras[p].clone(),
            });
        }
    }
    Ok(GenerateRequest {
        items,
        batched: batched || n > 1,
        stream: as_bool(m, "stream", false)?,
        return_text_in_logprobs: as_bool(m, "return_text_in_logprobs", false)?,
    })
}

/// The prompts of a `/generate` body (`text` or `input_ids`, one or a
/// batch) as token ids, and whether it is a batch; each prompt non-empty and
/// shorter than the context. Refuses the fields arl-serve does not support.
fn parse_prompts(st: &AppState, m: &Map<String, Value>) -> Result<(Vec<Vec<u32>>, bool), String> {
    let vocab = st.cfg.vocab_size;
    let given: Vec<&str> =
        ["text", "input_ids", "input_embeds"].into_iter().filter(|k| field(m, k).is_some()).collect();
    if given.len() != 1 {
        return Err("Either text, input_ids or input_embeds should be provided.".into());
    }
    for k in ["image_data", "audio_data", "video_data", "session_params", "custom_logit_processor", "token_ids_logprob"]
    {
        if field(m, k).is_some() {
            return Err(format!("`{k}` is not supported by arl-serve"));
        }
    }
    let (prompts, batched): (Vec<Vec<u32>>, bool) = match (given[0], &m[given[0]]) {
        ("input_embeds", _) => return Err("`input_embeds` is not supported by arl-serve".into()),
        ("text", Value::String(s)) => (vec![encode(&st.tok, s)?], false),
        ("text", Value::Array(a)) => {
            let mut out = Vec::new();
            for t in a {
                let s = t.as_str().ok_or_else(|| format!("`text` must be a string or a list of strings, got {t}"))?;
                out.push(encode(&st.tok, s)?);
            }
            (out, true)
        }
        ("text", v) => return Err(format!("`text` must be a string or a list of strings, got {v}")),
        (_, Value::Array(a)) if a.iter().all(Value::is_array) && !a.is_empty() => {
            let mut out = Vec::new();
            for (i, p) in a.iter().enumerate() {
                let ids: Vec<u32> = p
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|x| token_id(x, &format!("input_ids[{i}]"), vocab))
                    .collect::<Result<_, _>>()?;
                out.push(ids);
            }
            (out, true)
        }
        (_, Value::Array(a)) => {
            (vec![a.iter().map(|x| token_id(x, "input_ids", vocab)).collect::<Result<_, _>>()?], false)
        }
        (_, v) => return Err(format!("`input_ids` must be a list of token ids or a list of such lists, got {v}")),
    };
    if batched && prompts.is_empty() {
        return Err("the batch is empty".into());
    }
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(if batched {
                format!("input_ids cannot be empty (prompt {i}).")
            } else {
                "input_ids cannot be empty.".into()
            });
        }
        if p.len() >= st.cfg.context_len {
            return Err(format!(
                "The input ({} tokens) is longer than the model's context length ({} tokens).",
                p.len(),
                st.cfg.context_len
            ));
        }
    }
    Ok((prompts, batched))
}

/// The request ids of the `prompts * n` items: `rid` as given (one string,
/// suffixed `_i` per item of a batch, or one per prompt), else fresh ones.
fn request_ids(st: &AppState, m: &Map<String, Value>, prompts: usize, n: usize) -> Result<Vec<String>, String> {
    let total = prompts * n;
    match field(m, "rid") {
        None => Ok((0..total).map(|_| st.uuid_hex()).collect()),
        Some(Value::String(r)) if total == 1 => Ok(vec![r.clone()]),
        Some(Value::String(r)) if n == 1 => Ok((0..total).map(|i| format!("{r}_{i}")).collect()),
        Some(Value::String(_)) => Ok((0..total).map(|_| st.uuid_hex()).collect()),
        Some(Value::Array(a)) => {
            if a.len() != prompts {
                return Err(format!("`rid` has {} entries for a batch of {}", a.len(), prompts));
            }
            let rs: Vec<String> = a
                .iter()
                .map(|x| x.as_str().map(str::to_string).ok_or_else(|| format!("`rid` must hold strings, got {x}")))
                .collect::<Result<_, _>>()?;
            let mut seen = std::collections::HashSet::new();
            if let Some(d) = rs.iter().find(|r| !seen.insert(r.as_str())) {
                return Err(format!("duplicate rid `{d}` in the batch"));
            }
            if n == 1 {
                Ok(rs)
            } else {
                Ok((0..total).map(|_| st.uuid_hex()).collect())
            }
        }
        Some(v) => Err(format!("`rid` must be a string or a list of strings, got {v}")),
    }
}
