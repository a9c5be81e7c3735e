//! The pre-tokenizers of GPT-2-style tokenizers run here ([`Words`]): their
//! split patterns on the `regex` crate where they can be ([`Split`]), and
//! each word's ids in a cache.
use super::decode::byte_level_chars;
use anyhow::Result;
use std::collections::HashMap;
use std::sync::Mutex;

/// The pre-tokenizers of GPT-2-style tokenizers, run here instead of through
/// the crate's per-character bookkeeping: a regex split keeping every match
/// and every gap as a word (`Split` with `Isolated`, or `ByteLevel`'s own
/// regex), then, for byte-level ones, each byte as its character of GPT-2's
/// alphabet; each word then goes to the crate's model as in its pipeline.
/// Taken without a normalizer or with one of the Unicode normal forms (Qwen's
/// NFC), run through the crate on each piece, as its pipeline does, unless
/// the piece is ASCII, which they leave as it is; never with added tokens
/// matched after normalisation (see [`Words::from_pre_tokenizer`]).
pub(super) struct Words {
    split: Split,
    normalizer: Option<tokenizers::NormalizerWrapper>,
    byte_chars: Option<Vec<char>>,
    /// Each word's ids as the model gave them: prompts repeat most of their
    /// words, and the crate's model builds a token (with its text) per id
    /// each time, its own cache notwithstanding.
    cache: Mutex<WordCache>,
}

#[derive(Default)]
struct WordCache {
    ids: HashMap<Box<str>, Box<[u32]>, foldhash::fast::RandomState>,
    bytes: usize,
}

/// Most bytes (word text and ids) the word cache holds before it starts over.
const WORD_CACHE_BYTES: usize = 16 << 20;

/// `ByteLevel`'s split pattern (`use_regex: true`), GPT-2's.
const GPT2_SPLIT: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Qwen2's and Qwen3's `Split` pattern.
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's (Qwen2's with numbers in threes).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// The alternatives that end those three patterns, the only look-around in them.
const WS_TAIL: &str = r"|\s+(?!\S)|\s+";

/// A split pattern's matcher. The three common patterns above run on the
/// `regex` crate's automata (the `fancy_regex` backtracking that their
/// look-ahead needs was most of the cost of encoding a prompt): their tail
/// `\s+(?!\S)|\s+` becomes `\s+`, and a match that took that alternative —
/// a run of white space (for Qwen's and Llama's, one without a line break,
/// which `\s*[\r\n]+` takes first) — gives back its last character when a
/// non-space follows and the run is longer than one, as the look-ahead's
/// backtracking does. Other patterns go through `fancy_regex` as written.
/// The test `the_common_split_patterns_match_as_fancy_regex_does` compares both.
enum Split {
    Fancy(fancy_regex::Regex),
    Plain { re: regex::Regex, newline_alternative: bool },
}

impl Split {
    fn new(pattern: &str) -> Option<Split> {
        if [GPT2_SPLIT, QWEN2_SPLIT, LLAMA3_SPLIT].contains(&pattern) {
            let head = pattern.strip_suffix(WS_TAIL).expect("the common patterns end in WS_TAIL");
            if let Ok(re) = regex::Regex::new(&format!(r"{head}|\s+")) {
                return Some(Split::Plain { re, newline_alternative: pattern != GPT2_SPLIT });
            }
        }
        fancy_regex::Regex::new(pattern).ok().map(Split::Fancy)
    }

    /// Calls `f` with each match's byte range, left to right.
    fn each(&self, text: &str, mut f: impl FnMut(usize, usize) -> Result<()>) -> Result<()> {
        match self {
            // As the crate's split: a regex error ends the matching, the rest is one word.
            Split::Fancy(re) => {
                for m in re.find_iter(text).map_while(|m| m.ok()) {
                    f(m.start(), m.end())?;
                }
            }
            Split::Plain { re, newline_alternative } => {
                let mut at = 0;
                while let Some(m) = re.find_at(text, at) {
                    let (start, mut end) = (m.start(), m.end());
                    let run = &text[start..end];
                    if end < text.len()
                        && run.chars().all(char::is_whitespace)
                        && !(*newline_alternative && run.contains(['\r', '\n']))
                    {
                        if let Some((last, _)) = run.char_indices().last().filter(|(i, _)| *i > 0) {
                            end = start + last;
                        }
                    }
                    f(start, end)?;
                    at = end;
                }
            }
        }
        Ok(())
    }
}

impl Words {
    /// Exactly `ByteLevel {add_prefix_space: false, use_regex: true}`, a
    /// `Split {Regex, Isolated, invert: false}`, or that split followed by
    /// `ByteLevel {add_prefix_space: false, use_regex: false}` (Qwen's).
    pub(super) fn from_pre_tokenizer(
        pt: &serde_json::Value,
        normalizer: Option<tokenizers::NormalizerWrapper>,
    ) -> Option<Words> {
        let kind = |v: &serde_json::Value| v.get("type").and_then(|t| t.as_str()).map(str::to_string);
        let flag = |v: &serde_json::Value, k: &str| v.get(k).and_then(|b| b.as_bool());
        let byte_level = |v: &serde_json::Value, regex: bool| {
            kind(v).as_deref() == Some("ByteLevel")
                && flag(v, "add_prefix_space") == Some(false)
                && flag(v, "use_regex") == Some(regex)
        };
        let split = |v: &serde_json::Value| -> Option<String> {
            (kind(v).as_deref() == Some("Split")
                && v.get("behavior").and_then(|b| b.as_str()) == Some("Isolated")
                && flag(v, "invert") == Some(false))
            .then(|| v.pointer("/pattern/Regex").and_then(|r| r.as_str()).map(str::to_string))?
        };
        let (pattern, bytes) = if byte_level(pt, true) {
            (GPT2_SPLIT.to_string(), true)
        } else if let Some(p) = split(pt) {
            (p, false)
        } else if kind(pt).as_deref() == Some("Sequence") {
            match pt.get("pretokenizers").and_then(|l| l.as_array()).map(Vec::as_slice) {
                Some([first, second]) if byte_level(second, false) => (split(first)?, true),
                _ => return None,
            }
        } else {
            return None;
        };
        Some(Words {
            split: Split::new(&pattern)?,
            normalizer,
            byte_chars: bytes.then(byte_level_chars),
            cache: Mutex::default(),
        })
    }

    pub(super) fn encode(&self, model: &tokenizers::ModelWrapper, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        use tokenizers::{Model, Normalizer};
        let normalized;
        let piece = match &self.normalizer {
            Some(n) if !piece.is_ascii() => {
                let mut s = tokenizers::NormalizedString::from(piece);
                n.normalize(&mut s).map_err(|e| anyhow::anyhow!("normalizing: {e}"))?;
                normalized = s;
                normalized.get()
            }
            _ => piece,
        };
        // Another thread encoding holds the cache: this piece goes without it.
        let mut cache = self.cache.try_lock().ok();
        let mut word = |w: &str| -> Result<()> {
            if w.is_empty() {
                return Ok(());
            }
            if let Some(ids) = cache.as_ref().and_then(|c| c.ids.get(w)) {
                out.extend_from_slice(ids);
                return Ok(());
            }
            let tokens = match &self.byte_chars {
                Some(chars) => model.tokenize(&w.bytes().map(|b| chars[b as usize]).collect::<String>()),
                None => model.tokenize(w),
            };
            let start = out.len();
            out.extend(tokens.map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?.iter().map(|t| t.id));
            if let Some(c) = cache.as_mut() {
                let size = w.len() + 4 * (out.len() - start) + 48;
                if c.bytes + size > WORD_CACHE_BYTES {
                    c.ids.clear();
                    c.bytes = 0;
                }
                c.bytes += size;
                c.ids.insert(w.into(), out[start..].into());
            }
            Ok(())
        };
        let mut prev = 0;
        self.split.each(piece, |start, end| {
            word(&piece[prev..start])?;
            word(&piece[start..end])?;
            prev = end;
            Ok(())
        })?;
        word(&piece[prev..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_split_patterns_match_as_fancy_regex_does() {
        const PARTS: &[&str] = &[
            "a", "Z", "word", "é", "e\u{301}", "中文", "ǅ", "1", "42", "1234567", "٣", "½", "Ⅻ", " ", "  ", "   ",
            "\t", "\n", "\r\n", "\n\n", "\u{a0}", "\u{3000}", "\u{2028}", "\u{85}", "'", "'s", "'S", "'ll", "'LL",
            "'d", "!", "?!", "_", "-", "{\"", "😀", "\u{200b}", "\u{0}",
        ];
        let mut rng = arl_core::rng::Rng::new(9);
        for pattern in [GPT2_SPLIT, QWEN2_SPLIT, LLAMA3_SPLIT] {
            let plain = Split::new(pattern).unwrap();
            assert!(matches!(plain, Split::Plain { .. }), "{pattern}");
            let fancy = Split::Fancy(fancy_regex::Regex::new(pattern).unwrap());
            for _ in 0..5000 {
                let k = rng.below(14) as usize;
                let text: String = (0..k).map(|_| PARTS[rng.below(PARTS.len() as u64) as usize]).collect();
                let spans = |s: &Split| {
                    let mut v = Vec::new();
                    s.each(&text, |a, b| {
                        v.push((a, b));
                        Ok(())
                    })
                    .unwrap();
                    v
                };
                assert_eq!(spans(&plain), spans(&fancy), "{pattern} on {text:?}");
            }
        }
        assert!(matches!(Split::new(r"\s+(?!\S)|\w+").unwrap(), Split::Fancy(_)));
    }
}
