//! SFT demonstrations (`messages`): rendered with the model's chat template
//! (arl's one renderer, [`arl_chat::template`]) and tokenized, with the tokens
//! of the assistant turns marked, so only they are trained.
use anyhow::{anyhow, bail, Result};
use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer::Tokenizer;
use serde_json::Value;

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
