//! SFT demonstrations (`messages`): rendered with the model's chat template
//! (arl's one renderer, [`arl_chat::template`]) and tokenized, with the tokens
//! of the assistant turns marked, so only they are trained; and `arl-train
//! render`, which writes them into the records once.
use crate::config::{RenderConfig, TOOL};
use anyhow::{anyhow, bail, Context, Result};
use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer::Tokenizer;
use arl_core::cli::{self, Input};
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

/// A demonstration as training reads it: `tokens`, `prompt_len` (the tokens
/// before the first trained one, at least 1: the first token has no
/// prediction) and `loss_mask` over the rest (1 on assistant tokens).
pub struct TokenRecord {
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    pub loss_mask: Vec<u8>,
}

/// Renders a record's `messages` (with `metadata.tools`, if any) into the
/// fields training reads; the error names the field.
pub fn render_record(
    r: &Record,
    tok: Option<&(Tokenizer, Result<ChatTemplate, String>)>,
) -> std::result::Result<TokenRecord, String> {
    let (tok, renderer) = tok.ok_or("field `messages`: the model has no tokenizer to render them")?;
    let renderer = renderer.as_ref().map_err(|e| format!("field `messages`: {e}"))?;
    let msgs = r
        .messages
        .as_ref()
        .ok_or("field `messages`: missing (nothing to render)")?
        .as_array()
        .ok_or("field `messages`: expected a list of chat messages")?;
    let tools = r.metadata.as_ref().and_then(|m| m.get("tools")).and_then(Value::as_array).map(Vec::as_slice);
    let rd = tokenize(renderer, tok, msgs, tools).map_err(|e| format!("field `messages`: {e:#}"))?;
    let first = rd.trained.iter().position(|&x| x).ok_or("field `messages`: no assistant tokens")?.max(1);
    Ok(TokenRecord {
        loss_mask: rd.trained[first..].iter().map(|&x| u8::from(x)).collect(),
        tokens: rd.ids,
        prompt_len: first,
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
    let threads = match cfg.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().context("starting threads")?;
    let mut inp = Input::open(&cfg.input)?;
    let mut out = cfg.output.open()?;
    let pb = cli::progress(cfg.input.quiet, None, "records");
    while let Some(batch) = inp.next_batch()? {
        let rendered: Vec<Option<std::result::Result<TokenRecord, String>>> = pool.install(|| {
            batch.par_iter().map(|(_, r)| r.tokens.is_none().then(|| render_record(r, tok.as_ref()))).collect()
        });
        for ((pos, mut r), res) in batch.into_iter().zip(rendered) {
            match res {
                None => {}
                Some(Ok(t)) => {
                    r.prompt_len = Some(u32::try_from(t.prompt_len).context("prompt_len")?);
                    r.loss_mask = Some(t.loss_mask);
                    r.tokens = Some(t.tokens);
                }
                Some(Err(why)) => {
                    inp.reject(&pos, &r, why)?;
                    continue;
                }
            }
            out.write_owned(r)?;
            pb.inc(1);
        }
        out.flush()?;
    }
    pb.finish_and_clear();
    let written = out.count();
    out.finish().context("writing output")?;
    inp.finish(TOOL, written)?;
    Ok(ExitCode::SUCCESS)
}
