//! The piecewise encode ([`Pieces`]): a text cut at its added tokens, each
//! piece between them encoded on its own (through [`Words`] where the
//! pre-tokenizer is a common one) and kept in a cache once seen twice; and
//! the checks that say where this equals the whole-text encode.
use super::split::Words;
use anyhow::Result;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// The first step of the `tokenizers` pipeline done here: a text is cut at
/// the added tokens matched before normalisation (leftmost-longest, as the
/// crate does), and each piece between them is encoded on its own, through
/// the crate, exactly as the whole-text encode treats it. Pieces seen twice
/// keep their ids in a cache: a rollout renders the same system turn (with
/// its tool definitions) and the same turn headers for every prompt, and
/// encoding them was the larger part of the cost of preparing a prompt.
pub(super) struct Pieces {
    matcher: aho_corasick::AhoCorasick,
    /// Pattern index → the added token's id.
    ids: Vec<u32>,
    /// The pre-tokenizer run here, where it is one of the common ones.
    pub(super) words: Option<Words>,
    cache: Mutex<PieceCache>,
}

#[derive(Default)]
struct PieceCache {
    /// Hashes of the pieces seen once: a piece is cached on its second sighting.
    seen: HashSet<u64>,
    ids: HashMap<Box<str>, Box<[u32]>>,
    bytes: usize,
}

/// Most bytes (piece text and ids) the piece cache holds before it starts over.
const PIECE_CACHE_BYTES: usize = 64 << 20;
/// Most hashes of once-seen pieces remembered before that set starts over.
const PIECE_SEEN_MAX: usize = 1 << 20;

impl Pieces {
    /// `None` where encoding the pieces one by one could differ from encoding
    /// the whole text: truncation or padding configured, special tokens not
    /// split (`encode_special_tokens`), an added token matched before
    /// normalisation with `single_word`/`lstrip`/`rstrip`, BPE dropout, or a
    /// pre-tokenizer outside the known position-independent ones (Metaspace
    /// with `prepend_scheme: first` treats the text's first piece differently).
    pub(super) fn build(inner: &tokenizers::Tokenizer) -> Option<Pieces> {
        if inner.get_truncation().is_some() || inner.get_padding().is_some() || inner.get_encode_special_tokens() {
            return None;
        }
        if let tokenizers::ModelWrapper::BPE(b) = inner.get_model() {
            if b.dropout.is_some_and(|d| d > 0.0) {
                return None;
            }
        }
        let pre_tokenizer = match inner.get_pre_tokenizer() {
            Some(pt) => Some(serde_json::to_value(pt).ok()?),
            None => None,
        };
        if pre_tokenizer.as_ref().is_some_and(|pt| !position_independent(pt)) {
            return None;
        }
        let mut tokens: Vec<(String, u32)> = Vec::new();
        let mut normalized_tokens = false;
        for (id, t) in inner.get_added_tokens_decoder() {
            if t.normalized {
                normalized_tokens = true;
                continue; // matched inside the pieces, after normalisation, by the crate
            }
            if t.single_word || t.lstrip || t.rstrip {
                return None;
            }
            tokens.push((t.content, id));
        }
        tokens.sort_by_key(|t| t.1);
        let matcher = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(tokens.iter().map(|t| t.0.as_str()))
            .ok()?;
        let normalizer = match inner.get_normalizer() {
            None => Some(None),
            Some(n) if unicode_normal_form(&serde_json::to_value(n).ok()?) => Some(Some(n.clone())),
            Some(_) => None,
        };
        let words = match (&pre_tokenizer, normalizer) {
            (Some(pt), Some(n)) if !normalized_tokens => Words::from_pre_tokenizer(pt, n),
            _ => None,
        };
        Some(Pieces { matcher, ids: tokens.iter().map(|t| t.1).collect(), words, cache: Mutex::default() })
    }

    pub(super) fn encode(&self, inner: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::with_capacity(text.len() / 2 + 4);
        let mut at = 0;
        for m in self.matcher.find_iter(text) {
            self.piece(inner, &text[at..m.start()], &mut out)?;
            out.push(self.ids[m.pattern().as_usize()]);
            at = m.end();
        }
        self.piece(inner, &text[at..], &mut out)?;
        Ok(out)
    }

    fn piece(&self, inner: &tokenizers::Tokenizer, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        if piece.is_empty() {
            return Ok(());
        }
        let hash = {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(ids) = cache.ids.get(piece) {
                out.extend_from_slice(ids);
                return Ok(());
            }
            let hash = {
                use std::hash::Hasher;
                let mut h = std::collections::hash_map::DefaultHasher::new();
                h.write(piece.as_bytes());
                h.finish()
            };
            if cache.seen.len() >= PIECE_SEEN_MAX {
                cache.seen.clear();
            }
            (!cache.seen.insert(hash)).then_some(hash)
        };
        let start = out.len();
        match &self.words {
            Some(w) => w.encode(inner.get_model(), piece, out)?,
            None => out.extend_from_slice(
                inner.encode(piece, false).map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?.get_ids(),
            ),
        }
        let ids = &out[start..];
        if hash.is_some() {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            let size = piece.len() + 4 * ids.len() + 64;
            if cache.bytes + size > PIECE_CACHE_BYTES {
                cache.ids.clear();
                cache.bytes = 0;
            }
            cache.bytes += size;
            cache.ids.insert(piece.into(), ids.into());
        }
        Ok(())
    }
}

/// Whether a serialised normalizer is one of Unicode's normal forms (or a
/// sequence of them): a piece's normal form is the crate's, and an ASCII
/// text is its own.
fn unicode_normal_form(n: &serde_json::Value) -> bool {
    match n.get("type").and_then(|t| t.as_str()) {
        Some("NFC" | "NFD" | "NFKC" | "NFKD") => true,
        Some("Sequence") => {
            n.get("normalizers").and_then(|l| l.as_array()).is_some_and(|l| l.iter().all(unicode_normal_form))
        }
        _ => false,
    }
}

/// Whether a serialised pre-tokenizer treats every piece of a text alike,
/// wherever the piece stands in the text.
fn position_independent(pt: &serde_json::Value) -> bool {
    let Some(kind) = pt.get("type").and_then(|t| t.as_str()) else { return false };
    match kind {
        "Sequence" => {
            pt.get("pretokenizers").and_then(|l| l.as_array()).is_some_and(|l| l.iter().all(position_independent))
        }
        "Metaspace" => pt.get("prepend_scheme").and_then(|p| p.as_str()).is_some_and(|p| p != "first"),
        "ByteLevel" | "Split" | "Digits" | "Punctuation" | "Whitespace" | "WhitespaceSplit" | "BertPreTokenizer"
        | "UnicodeScripts" | "CharDelimiterSplit" => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use crate::tokenizer::tests::load_json;
    use crate::tokenizer::Tokenizer;
    use std::path::Path;

    /// Texts made of template pieces, added tokens (whole and cut), words,
    /// spaces, newlines and non-ASCII, encoded twice (the second time from
    /// the piece cache) and by the generic whole-text encode.
    fn check_encode_against_generic(tok: &Tokenizer, seed: u64) {
        const PARTS: &[&str] = &[
            "<|im_start|>",
            "<|im_end|>",
            "<tool_call>",
            "</tool_call>",
            "<|im",
            "_end|>",
            "user",
            "assistant\n",
            "\n",
            "\n\n",
            " ",
            "  ",
            "the",
            " the",
            "The",
            "hello",
            " world",
            "中文",
            "é",
            "e\u{301}",
            "{\"name\": \"calc\", \"arguments\": {\"x\": 12}}",
            "123",
            "'s",
            "\t",
            "!?",
            "x",
        ];
        let mut rng = arl_core::rng::Rng::new(seed);
        for _ in 0..400 {
            let k = (rng.next_u64() % 12) as usize;
            let text: String = (0..k).map(|_| PARTS[(rng.next_u64() % PARTS.len() as u64) as usize]).collect();
            let want = tok.encode_generic(&text).unwrap();
            assert_eq!(tok.encode(&text).unwrap(), want, "text {text:?}");
            assert_eq!(tok.encode(&text).unwrap(), want, "text {text:?}, from the cache");
        }
    }

    #[test]
    fn piecewise_encode_equals_the_whole_text_encode() {
        // Byte-level BPE with merges, special and plain added tokens matched
        // before normalisation: GPT-2's pre-tokenizer (ByteLevel with its
        // regex), then Qwen's (its Split regex, then ByteLevel), Qwen's with
        // NFC (its own), and with a normalizer or an added token matched after
        // normalisation that arl leaves to the crate.
        let mut gpt2 = crate::tokenizer_build::byte_level_bpe_json(
            &["Ġt", "he", "Ġthe", "ĠĠ", "Ċ", "ĊĊ"],
            &[
                (262, "<|im_start|>", true),
                (263, "<|im_end|>", true),
                (264, "<tool_call>", false),
                (265, "</tool_call>", false),
            ],
        );
        gpt2["model"]["merges"] = serde_json::json!(["Ġ t", "h e", "Ġt he", "Ġ Ġ", "Ċ Ċ"]);
        let mut qwen = gpt2.clone();
        qwen["pre_tokenizer"] = serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]});
        // Qwen's own: NFC, done by the crate per piece before arl's split.
        let mut qwen_nfc = qwen.clone();
        qwen_nfc["normalizer"] = serde_json::json!({"type": "NFC"});
        let mut qwen_lower = qwen.clone();
        qwen_lower["normalizer"] = serde_json::json!({"type": "Lowercase"});
        let mut qwen_nfc_added = qwen_nfc.clone();
        qwen_nfc_added["added_tokens"].as_array_mut().unwrap().push(serde_json::json!(
            {"id": 266, "content": "hello", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false}));
        for (json, own_words) in
            [(gpt2, true), (qwen, true), (qwen_nfc, true), (qwen_lower, false), (qwen_nfc_added, false)]
        {
            let (_d, tok) = load_json(&json);
            check_encode_against_generic(&tok, 3);
            let pieces = tok.pieces.get().unwrap().as_ref().expect("the piecewise path was taken");
            assert_eq!(pieces.words.is_some(), own_words, "{} {}", json["normalizer"], json["pre_tokenizer"]);
            // The merges and the added tokens are in play.
            assert_eq!(tok.encode(" the<|im_end|>").unwrap(), vec![258, tok.token_to_id("<|im_end|>").unwrap()]);
        }

        // The tiny test model's (WordLevel, a Split per character).
        let tiny =
            Tokenizer::load(&Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("testdata/tiny-model"))
                .unwrap();
        check_encode_against_generic(&tiny, 4);
        assert!(tiny.pieces.get().unwrap().as_ref().is_some_and(|p| p.words.is_some()));
    }

    #[test]
    fn piecewise_encode_is_not_used_where_it_could_differ() {
        let base = crate::tokenizer_build::byte_level_bpe_json(&[], &[(256, "<|im_end|>", true)]);
        let mut metaspace_first = base.clone();
        metaspace_first["pre_tokenizer"] =
            serde_json::json!({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true});
        let mut lstrip = base.clone();
        lstrip["added_tokens"][0]["lstrip"] = serde_json::json!(true);
        let mut truncated = base.clone();
        truncated["truncation"] =
            serde_json::json!({"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 0});
        for json in [metaspace_first, lstrip, truncated] {
            let (_d, tok) = load_json(&json);
            check_encode_against_generic(&tok, 5);
            assert!(tok.pieces.get().unwrap().is_none(), "{}", json);
        }
    }
}
