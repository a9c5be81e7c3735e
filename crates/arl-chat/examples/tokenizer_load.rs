//! What `scripts/bench/tokenizer-load.sh` times: a model directory's
//! tokenizer and chat template loaded, one chat prompt rendered, encoded and
//! decoded, the way `arl-rollout` and `arl-serve` do before their first
//! request: `arl` through [`Tokenizer::load`], `crate` through the
//! `tokenizers` crate's own reading ([`Tokenizer::load_generic`]).
//!
//!   tokenizer_load arl|crate DIR
// The allocator of arl's binaries (mimalloc, set in arl-core).
extern crate arl_core;

use arl_chat::template::ChatTemplate;
use arl_chat::tokenizer::Tokenizer;
use std::path::Path;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, dir] = args.as_slice() else { anyhow::bail!("usage: tokenizer_load arl|crate DIR") };
    let tok = match mode.as_str() {
        "arl" => Tokenizer::load(Path::new(dir))?,
        "crate" => Tokenizer::load_generic(Path::new(dir))?,
        _ => anyhow::bail!("mode: arl or crate"),
    };
    let template = ChatTemplate::from_tokenizer(&tok)?;
    let messages = [
        serde_json::json!({"role": "system", "content": "You are a helpful assistant."}),
        serde_json::json!({"role": "user", "content": "What is 12 + 35? Answer with just the number, then explain: 中文 too."}),
    ];
    let text = template.render(&messages, None, true)?;
    let ids = tok.encode(&text)?;
    anyhow::ensure!(tok.decode(&ids) == text, "the prompt does not decode back");
    println!("{}", ids.len());
    Ok(())
}
