//! `tokenizer.json` of a BPE model read into the crate's `Tokenizer` as the
//! crate's own deserialisation builds it (`TokenizerBuilder`, then the added
//! tokens through `add_tokens`, in file order), without the detours that make
//! most of its cost on a 150k vocabulary: the model buffered as generic
//! content, then as a `serde_json::Value`, then read again. Equal by test
//! (`fast_load_builds_the_crates_tokenizer`, and the real Qwen3 tokenizer in
//! `tests/real_tokenizer.rs`).
use super::decode::{ByteTable, TokenBytes};
use serde::de::{Deserializer, Error, SeqAccess, Visitor};
use serde::Deserialize;
use tokenizers::models::bpe::{BpeBuilder, Vocab};
use tokenizers::{
    AddedToken, DecoderWrapper, ModelWrapper, NormalizerWrapper, PaddingParams, PostProcessorWrapper,
    PreTokenizerWrapper, TokenizerBuilder, TruncationParams,
};

#[derive(Deserialize)]
struct File {
    version: Option<String>,
    #[serde(default)]
    truncation: Option<TruncationParams>,
    #[serde(default)]
    padding: Option<PaddingParams>,
    #[serde(default)]
    added_tokens: Vec<Added>,
    #[serde(default)]
    normalizer: Option<NormalizerWrapper>,
    #[serde(default)]
    pre_tokenizer: Option<PreTokenizerWrapper>,
    #[serde(default)]
    post_processor: Option<PostProcessorWrapper>,
    #[serde(default)]
    decoder: Option<DecoderWrapper>,
    model: Bpe,
}

/// The crate requires `id` and then gives the tokens ids in file order
/// after the model's (warning where they differ), as `add_tokens` does here.
#[derive(Deserialize)]
struct Added {
    #[allow(dead_code)]
    id: u32,
    content: String,
    single_word: bool,
    lstrip: bool,
    rstrip: bool,
    normalized: bool,
    special: bool,
}

#[derive(Deserialize)]
struct Bpe {
    #[serde(rename = "type")]
    kind: String,
    dropout: Option<f32>,
    unk_token: Option<String>,
    continuing_subword_prefix: Option<String>,
    end_of_word_suffix: Option<String>,
    fuse_unk: Option<bool>,
    byte_fallback: Option<bool>,
    ignore_merges: Option<bool>,
    vocab: Vocab,
    merges: Merges,
}

/// Merges as pairs (`[["Ġ", "t"], …]`) or as lines (`["Ġ t", …]`, with
/// `#version` lines skipped), all of one form, as the crate reads them.
struct Merges(Vec<(String, String)>);

enum Merge {
    Pair(String, String),
    Line(String),
}

impl<'de> Deserialize<'de> for Merge {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Merge, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Merge;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a merge: a pair of strings or a string")
            }
            fn visit_str<E: Error>(self, v: &str) -> Result<Merge, E> {
                Ok(Merge::Line(v.to_string()))
            }
            fn visit_string<E: Error>(self, v: String) -> Result<Merge, E> {
                Ok(Merge::Line(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Merge, A::Error> {
                let a: String = seq.next_element()?.ok_or_else(|| A::Error::invalid_length(0, &self))?;
                let b: String = seq.next_element()?.ok_or_else(|| A::Error::invalid_length(1, &self))?;
                if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                    return Err(A::Error::invalid_length(3, &self));
                }
                Ok(Merge::Pair(a, b))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Merges {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Merges, D::Error> {
        let list = Vec::<Merge>::deserialize(d)?;
        let lines = list.iter().filter(|m| matches!(m, Merge::Line(_))).count();
        if lines > 0 && lines < list.len() {
            return Err(D::Error::custom("merges mix pairs and lines"));
        }
        let mut out = Vec::with_capacity(list.len());
        for (rank, m) in
            list.into_iter().filter(|m| !matches!(m, Merge::Line(l) if l.starts_with("#version"))).enumerate()
        {
            out.push(match m {
                Merge::Pair(a, b) => (a, b),
                Merge::Line(l) => {
                    let mut parts = l.split(' ');
                    match (parts.next(), parts.next(), parts.next()) {
                        (Some(a), Some(b), None) => (a.to_string(), b.to_string()),
                        _ => return Err(D::Error::custom(format!("merge {} is not two tokens", rank + 1))),
                    }
                }
            });
        }
        Ok(Merges(out))
    }
}

/// The tokenizer, or `None` where the file is not a BPE tokenizer as
/// this reading knows it (the crate then reads it, or says why not).
pub(super) fn bpe(bytes: &[u8]) -> Option<(tokenizers::Tokenizer, Option<ByteTable>)> {
    let f: File = serde_json::from_slice(bytes).ok()?;
    if f.version.as_deref().is_some_and(|v| v != "1.0") || f.model.kind != "BPE" {
        return None;
    }
    let m = f.model;
    // The decode table from the vocabulary at hand (the crate's per-id
    // lookups cost as much as the rest of the load); the added tokens,
    // which take precedence in the crate's decode, after them.
    let how = TokenBytes::of(f.decoder.as_ref());
    let mut table = how.as_ref().map(|how| {
        let n = m.vocab.values().max().map_or(0, |&i| i as usize + 1);
        ByteTable::new(n, m.vocab.iter().map(|(t, &i)| (t.as_str(), i)), how)
    });
    let mut b = BpeBuilder::new().vocab_and_merges(m.vocab, m.merges.0);
    if let Some(d) = m.dropout {
        b = b.dropout(d);
    }
    if let Some(u) = m.unk_token {
        b = b.unk_token(u);
    }
    if let Some(p) = m.continuing_subword_prefix {
        b = b.continuing_subword_prefix(p);
    }
    if let Some(s) = m.end_of_word_suffix {
        b = b.end_of_word_suffix(s);
    }
    if let Some(x) = m.fuse_unk {
        b = b.fuse_unk(x);
    }
    if let Some(x) = m.byte_fallback {
        b = b.byte_fallback(x);
    }
    if let Some(x) = m.ignore_merges {
        b = b.ignore_merges(x);
    }
    let model = ModelWrapper::BPE(b.build().ok()?);
    let mut t = TokenizerBuilder::new()
        .with_model(model)
        .with_normalizer(f.normalizer)
        .with_pre_tokenizer(f.pre_tokenizer)
        .with_post_processor(f.post_processor)
        .with_decoder(f.decoder)
        .with_truncation(f.truncation)
        .with_padding(f.padding)
        .build()
        .ok()?;
    let added = f.added_tokens.into_iter().map(|a| AddedToken {
        content: a.content,
        single_word: a.single_word,
        lstrip: a.lstrip,
        rstrip: a.rstrip,
        normalized: a.normalized,
        special: a.special,
    });
    t.add_tokens(added).ok()?;
    let t: tokenizers::Tokenizer = t.into();
    if let (Some(table), Some(how)) = (table.as_mut(), how.as_ref()) {
        for (id, a) in t.get_added_tokens_decoder() {
            table.set(id, &a.content, how);
        }
        table.spans.resize(table.spans.len().max(t.get_vocab_size(true)), (0, 0));
    }
    Some((t, table))
}

#[cfg(test)]
mod tests {
    use crate::tokenizer::fast_load;
    use std::path::Path;

    #[test]
    fn fast_load_builds_the_crates_tokenizer() {
        // Merges as lines (with a `#version` line) and as pairs, added tokens
        // with every flag, a normalizer, padding; and what the fast reading
        // leaves to the crate (a WordLevel model, mixed merge forms).
        let mut lines = crate::tokenizer_build::byte_level_bpe_json(
            &["Ġt", "he", "Ġthe"],
            &[(259, "<|im_end|>", true), (260, "<tool_call>", false)],
        );
        lines["model"]["merges"] = serde_json::json!(["#version: 0.2", "Ġ t", "h e", "Ġt he"]);
        lines["added_tokens"][1]["lstrip"] = serde_json::json!(true);
        lines["added_tokens"][1]["normalized"] = serde_json::json!(true);
        lines["normalizer"] = serde_json::json!({"type": "NFC"});
        let mut pairs = lines.clone();
        pairs["model"]["merges"] = serde_json::json!([["Ġ", "t"], ["h", "e"], ["Ġt", "he"]]);
        pairs["padding"] = serde_json::json!({"strategy": "BatchLongest", "direction": "Right", "pad_to_multiple_of": null,
            "pad_id": 0, "pad_type_id": 0, "pad_token": "<|im_end|>"});
        let mut mixed = lines.clone();
        mixed["model"]["merges"] = serde_json::json!(["Ġ t", ["h", "e"]]);
        let tiny =
            std::fs::read(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/tiny-model/tokenizer.json")))
                .unwrap();
        for (bytes, fast) in [
            (lines.to_string().into_bytes(), true),
            (pairs.to_string().into_bytes(), true),
            (mixed.to_string().into_bytes(), false),
            (tiny, false),
        ] {
            let crate_way = tokenizers::Tokenizer::from_bytes(&bytes).ok();
            match fast_load::bpe(&bytes) {
                Some((t, table)) => {
                    assert!(fast);
                    assert_eq!(t.to_string(false).unwrap(), crate_way.unwrap().to_string(false).unwrap());
                    assert!(table.is_some(), "a ByteLevel decoder has a table");
                }
                None => assert!(!fast),
            }
        }
    }
}
