//! A GGUF's vocabulary (`tokenizer.ggml.*`) as the Hugging Face files a model
//! directory carries: `tokenizer.json` (a byte-level BPE model with the
//! pre-tokenizer that `tokenizer.ggml.pre` names, as llama.cpp splits text
//! for it), `tokenizer_config.json` (special tokens) and the chat template.
//!
//! Pre-tokenizers, by llama.cpp's pre-type (its `llama-vocab.cpp`):
//! * `smollm`, `starcoder`, `refact`, `command-r`, `codeshell`, `exaone`,
//!   `minerva-7b`: every digit is its own piece (`\p{N}`), then GPT-2's split;
//! * `gpt-2`, `phi-2`, `roberta-bpe`, `mpt`, `olmo`, `jais`, `default`: GPT-2's split;
//! * `llama3`, `llama-v3`, `llama-bpe`, `falcon3`, `pixtral`, `dbrx`,
//!   `smaug-bpe`: Llama 3's split (numbers in threes);
//! * `qwen2`, `deepseek-r1-qwen`, `megrez`, `stablelm2`: Qwen2's split (single digits).
//!
//! The regexes are written as the `tokenizers` library's hub files spell
//! them (case-insensitive contractions, `\s+(?!\S)|\s+`), so arl's tokenizer
//! takes its fast path on them. Token types (1 normal, 2 unknown, 3 control,
//! 4 user-defined, 5 unused, 6 byte): control and user-defined tokens become
//! added tokens, control ones special.
use crate::reader::{Gguf, Value};
use anyhow::Result;
use arl_core::error::data;
use serde_json::{json, Map, Value as Json};
use std::collections::HashSet;

const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// How a pre-type splits text before BPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PreSplit {
    DigitsThenGpt2,
    Gpt2,
    Llama3,
    Qwen2,
}

fn pre_split(pre: &str) -> Option<PreSplit> {
    Some(match pre {
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            PreSplit::DigitsThenGpt2
        }
        "gpt-2" | "phi-2" | "roberta-bpe" | "mpt" | "olmo" | "jais" | "default" => PreSplit::Gpt2,
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral" | "dbrx" | "smaug-bpe" => PreSplit::Llama3,
        "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" => PreSplit::Qwen2,
        _ => return None,
    })
}

const SUPPORTED_PRE: &str = "smollm, starcoder, refact, command-r, codeshell, exaone, minerva-7b, gpt-2, phi-2, \
     roberta-bpe, mpt, olmo, jais, default, llama3, llama-v3, llama-bpe, falcon3, pixtral, dbrx, smaug-bpe, qwen2, \
     deepseek-r1-qwen, megrez, stablelm2";

fn byte_level(use_regex: bool) -> Json {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex})
}

fn split(pattern: &str) -> Json {
    json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false})
}

/// The Hugging Face tokenizer files of a GGUF's vocabulary.
pub struct HfTokenizer {
    pub tokenizer_json: Json,
    pub tokenizer_config: Json,
    pub chat_template: Option<String>,
    pub bos_id: Option<u64>,
    /// End-of-sequence ids for generation: `eos_token_id`, then `eot_token_id`
    /// and `eom_token_id` where they differ.
    pub eos_ids: Vec<u64>,
    pub pad_id: Option<u64>,
}

fn strings<'a>(g: &'a Gguf, key: &str) -> Result<Vec<&'a str>> {
    let bad = || data(format!("`{}`: `{key}` is missing or not an array of strings", g.path.display()));
    g.get(key).and_then(Value::as_array).ok_or_else(bad)?.iter().map(|v| v.as_str().ok_or_else(bad)).collect()
}

/// Builds the tokenizer files from `g`'s metadata.
pub fn hf_tokenizer(g: &Gguf) -> Result<HfTokenizer> {
    let path = g.path.display();
    let model = g.get("tokenizer.ggml.model").and_then(Value::as_str).unwrap_or("");
    if model != "gpt2" {
        return Err(data(format!(
            "`{path}`: tokenizer model `{model}` is not supported (arl converts byte-level BPE vocabularies, `gpt2`; \
             SentencePiece `llama` vocabularies are not converted yet)"
        )));
    }
    let pre_name = g.get("tokenizer.ggml.pre").and_then(Value::as_str).unwrap_or("default");
    let pre = pre_split(pre_name).ok_or_else(|| {
        data(format!("`{path}`: pre-tokenizer `{pre_name}` (tokenizer.ggml.pre) is not supported ({SUPPORTED_PRE})"))
    })?;
    let tokens = strings(g, "tokenizer.ggml.tokens")?;
    let merges = strings(g, "tokenizer.ggml.merges")?;
    let types: Vec<i64> = match g.get("tokenizer.ggml.token_type").and_then(Value::as_array) {
        Some(a) => a.iter().map(|v| v.as_i64().unwrap_or(1)).collect(),
        None => vec![1; tokens.len()],
    };
    if types.len() != tokens.len() {
        return Err(data(format!(
            "`{path}`: {} token types for {} tokens (tokenizer.ggml.token_type)",
            types.len(),
            tokens.len()
        )));
    }
    let id = |key: &str| -> Result<Option<u64>> {
        match g.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(i) if (i as usize) < tokens.len() => Ok(Some(i)),
                _ => Err(data(format!("`{path}`: `{key}` is not a token id below {}", tokens.len()))),
            },
        }
    };
    let (bos, eos, pad, unk) = (
        id("tokenizer.ggml.bos_token_id")?,
        id("tokenizer.ggml.eos_token_id")?,
        id("tokenizer.ggml.padding_token_id")?,
        id("tokenizer.ggml.unknown_token_id")?,
    );
    let mut eos_ids: Vec<u64> = eos.into_iter().collect();
    for key in ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"] {
        if let Some(i) = id(key)? {
            if !eos_ids.contains(&i) {
                eos_ids.push(i);
            }
        }
    }
    let add_bos = g.get("tokenizer.ggml.add_bos_token").and_then(Value::as_bool).unwrap_or(false);

    let mut vocab = Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    let mut added_decoder = Map::new();
    for (i, (&tok, &ty)) in tokens.iter().zip(&types).enumerate() {
        // A few vocabularies repeat a token (padding entries): the first id keeps it, as in HF's files.
        if !vocab.contains_key(tok) {
            vocab.insert(tok.to_string(), json!(i));
        }
        if ty == 3 || ty == 4 {
            let entry = json!({
                "id": i, "content": tok, "single_word": false, "lstrip": false, "rstrip": false,
                "normalized": false, "special": ty == 3,
            });
            let mut decoder_entry = entry.clone();
            decoder_entry.as_object_mut().expect("an object").remove("id");
            added_decoder.insert(i.to_string(), decoder_entry);
            added.push(entry);
        }
    }
    let merges: Vec<Json> = merges
        .iter()
        .map(|m| {
            let (a, b) = m
                .split_once(' ')
                .ok_or_else(|| data(format!("`{path}`: merge `{m}` is not two tokens separated by a space")))?;
            Ok(json!([a, b]))
        })
        .collect::<Result<_>>()?;
    let ignore_merges = matches!(pre_name, "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral");
    let pre_tokenizer = match pre {
        PreSplit::DigitsThenGpt2 => json!({"type": "Sequence", "pretokenizers": [split(r"\p{N}"), byte_level(true)]}),
        PreSplit::Gpt2 => byte_level(true),
        PreSplit::Llama3 => json!({"type": "Sequence", "pretokenizers": [split(LLAMA3_SPLIT), byte_level(false)]}),
        PreSplit::Qwen2 => json!({"type": "Sequence", "pretokenizers": [split(QWEN2_SPLIT), byte_level(false)]}),
    };
    let byte_post = json!({"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true});
    let post_processor = match bos.filter(|_| add_bos) {
        Some(b) => {
            let t = tokens[b as usize];
            json!({
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": t, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": t, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": t, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {t: {"id": t, "ids": [b], "tokens": [t]}},
            })
        }
        None => byte_post,
    };
    let tokenizer_json = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": ignore_merges,
            "vocab": vocab, "merges": merges,
        },
    });
    let name = |i: Option<u64>| i.map(|i| json!(tokens[i as usize])).unwrap_or(Json::Null);
    let max_len = g
        .get(&format!("{}.context_length", g.get("general.architecture").and_then(Value::as_str).unwrap_or("")))
        .and_then(Value::as_u64);
    let mut config = json!({
        "add_bos_token": add_bos,
        "add_eos_token": false,
        "added_tokens_decoder": added_decoder,
        "bos_token": name(bos),
        "clean_up_tokenization_spaces": false,
        "eos_token": name(eos),
        "model_max_length": max_len,
        "pad_token": name(pad),
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": name(unk),
    });
    // `additional_special_tokens`: the special added tokens other than bos/eos/pad/unk.
    let named: HashSet<u64> = [bos, eos, pad, unk].into_iter().flatten().collect();
    let extra: Vec<&str> = types
        .iter()
        .enumerate()
        .filter(|(i, &t)| t == 3 && !named.contains(&(*i as u64)))
        .map(|(i, _)| tokens[i])
        .collect();
    if !extra.is_empty() {
        config["additional_special_tokens"] = json!(extra);
    }
    let chat_template = g.get("tokenizer.chat_template").and_then(Value::as_str).map(str::to_string);
    Ok(HfTokenizer { tokenizer_json, tokenizer_config: config, chat_template, bos_id: bos, eos_ids, pad_id: pad })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pre_type_named_in_the_help_maps() {
        for name in SUPPORTED_PRE.split(", ") {
            assert!(pre_split(name.trim()).is_some(), "{name}");
        }
        assert_eq!(pre_split("smollm"), Some(PreSplit::DigitsThenGpt2));
        assert_eq!(pre_split("deepseek-r1-qwen"), Some(PreSplit::Qwen2));
        assert_eq!(pre_split("tekken"), None);
    }
}
