//! SFT demonstrations (`messages`): rendered with the model's chat template
//! (arl's one renderer, [`arl_chat::template`]) and tokenized, with the tokens
//! of the assistant turns marked, so only they are trained; and `arl-train
//! render`, which writes them into the records once.
use crate::config::{RenderConfig, TOOL};
use anyhow::{anyhow, bail, Context, Result};
use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer::Tokenizer;
use arl_core::cli;
use arl_core::record::Record;
use rayon::prelude::*;
use serde_json::Value;
use std::path::Path;
use std::process::ExitCode;

/// One rendered demonstration: ids, and which of them are trained.
pub struct Rendered {
    pub ids: Vec<u32>,
    pub trained: Vec<bool>,
}

/// Renders and tokenizes a demonstration; a token is trained when it starts
/// inside an assistant turn's span ([`ChatTemplate::assistant_spans`]).
pub fn tokenize(
    template: &ChatTemplate,
    tok: &Tokenizer,
    messages: &[Value],
    tools: Option<&[Value]>,
) -> Result<Rendered> {
    let (text, spans) = template.assistant_spans(messages, tools)?;
    if spans.is_empty() {
        bail!("no assistant message to train on");
    }
    let enc = tok.inner.encode(text.as_str(), false).map_err(|e| anyhow!("tokenizing: {e}"))?;
    let trained =
        enc.get_offsets().iter().map(|&(s, e)| e > s && spans.iter().any(|&(a, b)| s >= a && s < b)).collect();
    Ok(Rendered { ids: enc.get_ids().to_vec(), trained })
}

/// The model's tokenizer and chat template (or why it has none: said for
/// each record with `messages`), to render `messages` for SFT.
pub fn tokenizer_of(model_dir: &Path) -> Result<Option<(Tokenizer, Result<ChatTemplate, String>)>> {
    if !model_dir.join("tokenizer.json").exists() {
        // An adapter without tokenizer files (as PEFT may save one): its base's.
        if arl_model::lora::is_adapter(model_dir) {
            return tokenizer_of(&arl_model::lora::base_of(model_dir)?);
        }
        return Ok(None);
    }
    let t = Tokenizer::load(model_dir)?;
    let template = ChatTemplate::from_tokenizer(&t).map_err(|e| format!("{e:#}"));
    Ok(Some((t, template)))
}

/// Renders a record's `messages` (with its `tools`, else `metadata.tools`) into a
/// record of the fields training reads: `tokens`, `prompt_len` (the tokens
/// before the first trained one, at least 1: the first token has no
/// prediction) and `loss_mask` over the rest (1 on assistant tokens). The
/// error names the field.
pub fn render_record(
    r: &Record,
    tok: Option<&(Tokenizer, Result<ChatTemplate, String>)>,
) -> std::result::Result<Record, String> {
    let (tok, renderer) = tok.ok_or("field `messages`: the model has no tokenizer to render them")?;
    let renderer = renderer.as_ref().map_err(|e| format!("field `messages`: {e}"))?;
    let msgs = r
        .messages
        .as_ref()
        .ok_or("field `messages`: missing (nothing to render)")?
        .as_array()
        .ok_or("field `messages`: expected a list of chat messages")?;
    // The record's `tools` field, else `metadata.tools` (arl-tasks' SFT demonstrations).
    let tools = match &r.tools {
        Some(t) => Some(arl_chat::tools::tool_objects(t).map_err(|e| format!("field `tools`: {e}"))?),
        None => r.metadata.as_ref().and_then(|m| m.get("tools")).and_then(Value::as_array).cloned(),
    };
    let rd = tokenize(renderer, tok, msgs, tools.as_deref()).map_err(|e| format!("field `messages`: {e:#}"))?;
    let first = rd.trained.iter().position(|&x| x).ok_or("field `messages`: no assistant tokens")?.max(1);
    let prompt_len = u32::try_from(first).map_err(|_| format!("field `messages`: {first} prompt tokens"))?;
    Ok(Record {
        loss_mask: Some(rd.trained[first..].iter().map(|&x| u8::from(x)).collect()),
        tokens: Some(rd.ids),
        prompt_len: Some(prompt_len),
        ..Record::default()
    })
}

/// `arl-train render`: every record's `messages` rendered and tokenized
/// once, into `tokens`, `prompt_len` and `loss_mask` (the other fields kept),
/// so that runs over the same demonstrations — an SFT run resumed stretch by
/// stretch, several runs of a sweep — read tokens instead of rendering again.
/// Records that have `tokens` already pass through unchanged (training reads
/// their tokens, not their messages). Rendering runs on `threads` threads (0:
/// all cores), a reader batch at a time, in input order.
pub fn render(cfg: &RenderConfig) -> Result<ExitCode> {
    let tok = tokenizer_of(&cfg.model)?;
    match &tok {
        None => {
            return Err(cli::usage(format!("`--model {}` has no tokenizer.json to render with", cfg.model.display())))
        }
        Some((_, Err(why))) => return Err(cli::usage(format!("`--model {}`: {why}", cfg.model.display()))),
        Some(_) => {}
    }
    let pool = rayon::ThreadPoolBuilder::new().num_threads(cfg.threads).build().context("starting threads")?;
    let render_into = |r: &mut Record| {
        if r.tokens.is_none() {
            let t = render_record(r, tok.as_ref())?;
            (r.tokens, r.prompt_len, r.loss_mask) = (t.tokens, t.prompt_len, t.loss_mask);
        }
        Ok(true)
    };
    cli::map_record_batches(TOOL, &cfg.input, &cfg.output, |batch| {
        pool.install(|| batch.par_iter_mut().map(|(_, r)| render_into(r)).collect())
    })
}
