//! A model directory's tokenizer (`tokenizer.json` through the HF `tokenizers`
//! crate) and the parts of `tokenizer_config.json` arl needs.
use anyhow::{Context, Result};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// See [`Tokenizer::fast_paths`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FastPaths {
    pub piecewise: bool,
    pub own_split: bool,
    pub byte_table: bool,
}

pub struct Tokenizer {
    pub dir: PathBuf,
    pub inner: tokenizers::Tokenizer,
    /// `tokenizer_config.json`, when present.
    pub config: Option<serde_json::Value>,
    /// Each id's bytes, for [`Tokenizer::decode`] without the generic chain
    /// (built while loading a BPE tokenizer, else on first use; `None` inside
    /// for decoders without a fast path).
    fast_decode: OnceLock<Option<ByteTable>>,
    /// How [`Tokenizer::encode`] splits a text into pieces it may encode one
    /// by one (built on first use; `None` inside where that would change the ids).
    pieces: OnceLock<Option<Pieces>>,
}

/// The first step of the `tokenizers` pipeline done here: a text is cut at
/// the added tokens matched before normalisation (leftmost-longest, as the
/// crate does), and each piece between them is encoded on its own, through
/// the crate, exactly as the whole-text encode treats it. Pieces seen twice
/// keep their ids in a cache: a rollout renders the same system turn (with
/// its tool definitions) and the same turn headers for every prompt, and
/// encoding them was the larger part of the cost of preparing a prompt.
struct Pieces {
    matcher: aho_corasick::AhoCorasick,
    /// Pattern index → the added token's id.
    ids: Vec<u32>,
    /// The pre-tokenizer run here, where it is one of the common ones.
    words: Option<Words>,
    cache: Mutex<PieceCache>,
}

/// The pre-tokenizers of GPT-2-style tokenizers, run here instead of through
/// the crate's per-character bookkeeping: a regex split keeping every match
/// and every gap as a word (`Split` with `Isolated`, or `ByteLevel`'s own
/// regex), then, for byte-level ones, each byte as its character of GPT-2's
/// alphabet; each word then goes to the crate's model as in its pipeline.
/// Taken without a normalizer or with one of the Unicode normal forms (Qwen's
/// NFC), run through the crate on each piece, as its pipeline does, unless
/// the piece is ASCII, which they leave as it is; never with added tokens
/// matched after normalisation (see [`Words::from_pre_tokenizer`]).
struct Words {
    split: Split,
    normalizer: Option<tokenizers::NormalizerWrapper>,
    byte_chars: Option<Vec<char>>,
    /// Each word's ids as the model gave them: prompts repeat most of their
    /// words, and the crate's model builds a token (with its text) per id
    /// each time, its own cache notwithstanding.
    cache: Mutex<WordCache>,
}

/// Each id's bytes, one after another: id `i`'s are
/// `bytes[spans[i].0..][..spans[i].1]`; an id without a token has none.
struct ByteTable {
    bytes: Vec<u8>,
    spans: Vec<(u32, u32)>,
}

/// How a decoder turns a token's text into bytes, where it does so token by
/// token: `Fuse` as is, `ByteLevel` each character back to its byte by GPT-2's
/// table (a token with a character outside it keeps its UTF-8 bytes).
#[derive(Clone, Copy)]
struct TokenBytes {
    byte_level: bool,
    /// GPT-2's alphabet is U+0000–U+0143: a character's byte by its code point.
    char_byte: [Option<u8>; 0x144],
}

impl TokenBytes {
    fn of(decoder: Option<&tokenizers::DecoderWrapper>) -> Option<TokenBytes> {
        use tokenizers::DecoderWrapper;
        let byte_level = match decoder? {
            DecoderWrapper::Fuse(_) => false,
            DecoderWrapper::ByteLevel(_) => true,
            _ => return None,
        };
        let mut char_byte = [None; 0x144];
        for (b, c) in byte_level_chars().into_iter().enumerate() {
            char_byte[c as usize] = Some(b as u8);
        }
        Some(TokenBytes { byte_level, char_byte })
    }

    /// Appends `token`'s bytes to `out`.
    fn push(&self, token: &str, out: &mut Vec<u8>) {
        let start = out.len();
        if self.byte_level
            && token.chars().all(|c| self.char_byte.get(c as usize).copied().flatten().map(|b| out.push(b)).is_some())
        {
            return;
        }
        out.truncate(start);
        out.extend_from_slice(token.as_bytes());
    }
}

impl ByteTable {
    /// From `(token, id)` pairs; a later pair for the same id wins.
    fn new<'a>(n: usize, tokens: impl Iterator<Item = (&'a str, u32)>, how: &TokenBytes) -> ByteTable {
        let mut t = ByteTable { bytes: Vec::new(), spans: vec![(0, 0); n] };
        for (token, id) in tokens {
            t.set(id, token, how);
        }
        t
    }

    fn set(&mut self, id: u32, token: &str, how: &TokenBytes) {
        let id = id as usize;
        if id >= self.spans.len() {
            self.spans.resize(id + 1, (0, 0));
        }
        let start = self.bytes.len();
        how.push(token, &mut self.bytes);
        self.spans[id] = (start as u32, (self.bytes.len() - start) as u32);
    }
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
    fn from_pre_tokenizer(pt: &serde_json::Value, normalizer: Option<tokenizers::NormalizerWrapper>) -> Option<Words> {
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

    fn encode(&self, model: &tokenizers::ModelWrapper, piece: &str, out: &mut Vec<u32>) -> Result<()> {
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
    fn build(inner: &tokenizers::Tokenizer) -> Option<Pieces> {
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

    fn encode(&self, inner: &tokenizers::Tokenizer, text: &str) -> Result<Vec<u32>> {
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

/// End-of-sequence ids of model directory `dir`, as transformers' generation
/// stops: `eos_token_id` of `config.json` and of `generation_config.json`
/// (an id or a list, e.g. Llama 3.1's `[128001, 128008, 128009]`), and the
/// id of `tok`'s `eos_token`; sorted, without repeats. A file that is not
/// JSON, or whose `eos_token_id` is neither, is an error naming it.
pub fn eos_ids(dir: &Path, tok: &Tokenizer) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    for f in ["config.json", "generation_config.json"] {
        let p = dir.join(f);
        let Ok(text) = std::fs::read_to_string(&p) else { continue };
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("`{}`: invalid JSON", p.display()))?;
        let id = |x: &serde_json::Value| x.as_u64().and_then(|i| u32::try_from(i).ok());
        match v.get("eos_token_id") {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::Array(a)) => {
                for x in a {
                    ids.push(id(x).with_context(|| {
                        format!("`{}`: field `eos_token_id`: expected token ids, got {x}", p.display())
                    })?);
                }
            }
            Some(x) => ids.push(id(x).with_context(|| {
                format!("`{}`: field `eos_token_id`: expected a token id or a list of them, got {x}", p.display())
            })?),
        }
    }
    if let Some(id) = tok.config_str("eos_token").and_then(|t| tok.token_to_id(&t)) {
        ids.push(id);
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// GPT-2's byte-level alphabet: the character standing for each byte
/// (printable Latin-1 bytes stand for themselves, the others for 256 + n in
/// byte order).
pub fn byte_level_chars() -> Vec<char> {
    let keeps = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut next = 256;
    (0..256u32)
        .map(|b| {
            let c = if keeps(b) {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(c).expect("a valid char")
        })
        .collect()
}

/// `tokenizer.json` of a BPE model read into the crate's `Tokenizer` as the
/// crate's own deserialisation builds it (`TokenizerBuilder`, then the added
/// tokens through `add_tokens`, in file order), without the detours that make
/// most of its cost on a 150k vocabulary: the model buffered as generic
/// content, then as a `serde_json::Value`, then read again. Equal by test
/// (`fast_load_builds_the_crates_tokenizer`, and the real Qwen3 tokenizer in
/// `tests/real_tokenizer.rs`).
mod fast_load {
    use super::{ByteTable, TokenBytes};
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
    pub fn bpe(bytes: &[u8]) -> Option<(tokenizers::Tokenizer, Option<ByteTable>)> {
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
}

impl Tokenizer {
    /// Loads `DIR/tokenizer.json` (and `DIR/tokenizer_config.json` if present);
    /// `path` may also name the `tokenizer.json` file itself.
    pub fn load(path: &Path) -> Result<Tokenizer> {
        Tokenizer::load_with(path, true)
    }

    /// [`Tokenizer::load`] through the `tokenizers` crate's own reading of
    /// `tokenizer.json`, the decode table left to the first decode: what
    /// `load` equals, and the baseline of `scripts/bench/tokenizer-load.sh`.
    pub fn load_generic(path: &Path) -> Result<Tokenizer> {
        Tokenizer::load_with(path, false)
    }

    fn load_with(path: &Path, fast: bool) -> Result<Tokenizer> {
        let (dir, file) = if path.is_dir() {
            (path.to_path_buf(), path.join("tokenizer.json"))
        } else {
            (path.parent().unwrap_or(Path::new(".")).to_path_buf(), path.to_path_buf())
        };
        let bytes = std::fs::read(&file).with_context(|| format!("cannot read tokenizer `{}`", file.display()))?;
        // A BPE tokenizer.json is read here (what the crate makes of it, a
        // third of the time); anything else, or anything this reading refuses,
        // goes to the crate, which says what is wrong.
        let fast_decode = OnceLock::new();
        let inner = match fast.then(|| fast_load::bpe(&bytes)).flatten() {
            Some((t, table)) => {
                if let Some(table) = table {
                    let _ = fast_decode.set(Some(table));
                }
                t
            }
            None => tokenizers::Tokenizer::from_bytes(&bytes)
                .map_err(|e| anyhow::anyhow!("{e}"))
                .with_context(|| format!("cannot load tokenizer `{}`", file.display()))?,
        };
        let cfg_path = dir.join("tokenizer_config.json");
        let config = if cfg_path.exists() {
            let text =
                std::fs::read_to_string(&cfg_path).with_context(|| format!("cannot read `{}`", cfg_path.display()))?;
            Some(serde_json::from_str(&text).with_context(|| format!("`{}`: invalid JSON", cfg_path.display()))?)
        } else {
            None
        };
        Ok(Tokenizer { dir, inner, config, fast_decode, pieces: OnceLock::new() })
    }

    /// Encodes text without the post-processor's special tokens (a rendered
    /// chat template already has them); added tokens in the text are matched.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self.pieces.get_or_init(|| Pieces::build(&self.inner)) {
            Some(p) => p.encode(&self.inner, text),
            None => self.encode_generic(text),
        }
    }

    /// Which of arl's own paths this tokenizer takes (after a first encode
    /// and decode): the piecewise encode with its cache, arl's pre-tokenizer
    /// split with its word cache, the byte-table decode.
    pub fn fast_paths(&self) -> FastPaths {
        let pieces = self.pieces.get().and_then(Option::as_ref);
        FastPaths {
            piecewise: pieces.is_some(),
            own_split: pieces.is_some_and(|p| p.words.is_some()),
            byte_table: self.fast_decode.get().is_some_and(Option::is_some),
        }
    }

    /// The `tokenizers` crate's encode of the whole text (what [`Tokenizer::encode`] equals).
    pub fn encode_generic(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text, keeping special tokens (so `<|im_end|>` stays visible).
    pub fn decode(&self, ids: &[u32]) -> String {
        match self.fast_decode.get_or_init(|| self.id_bytes()) {
            Some(table) => {
                let mut bytes = Vec::with_capacity(ids.len() * 4);
                for &id in ids {
                    // Unknown ids are skipped, as the generic decode does.
                    if let Some(&(start, len)) = table.spans.get(id as usize) {
                        bytes.extend_from_slice(&table.bytes[start as usize..][..len as usize]);
                    }
                }
                match String::from_utf8(bytes) {
                    Ok(s) => s,
                    Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
                }
            }
            None => self.decode_generic(ids),
        }
    }

    /// The `tokenizers` crate's own decode (what [`Tokenizer::decode`] equals).
    pub fn decode_generic(&self, ids: &[u32]) -> String {
        self.inner.decode(ids, false).unwrap_or_else(|e| format!("<undecodable: {e}>"))
    }

    /// For the decoders whose output is the concatenation of per-token bytes
    /// ([`TokenBytes`]), then lossy UTF-8 over the whole, each id's bytes.
    /// Decoding is then a table lookup per id, not a string per token through
    /// the generic chain (a tenth of `arl-rollout`'s CPU, `scripts/bench/rollout.sh`).
    fn id_bytes(&self) -> Option<ByteTable> {
        let how = TokenBytes::of(self.inner.get_decoder())?;
        let n = self.inner.get_vocab_size(true);
        let mut table = ByteTable { bytes: Vec::new(), spans: vec![(0, 0); n] };
        for id in 0..n as u32 {
            if let Some(t) = self.inner.id_to_token(id) {
                table.set(id, &t, &how);
            }
        }
        Some(table)
    }

    pub fn token_to_id(&self, tok: &str) -> Option<u32> {
        self.inner.token_to_id(tok)
    }

    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.id_to_token(id)
    }

    /// A string entry of `tokenizer_config.json` (plain or `{"content": …}`).
    pub fn config_str(&self, key: &str) -> Option<String> {
        let v = self.config.as_ref()?.get(key)?;
        match v {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_against_generic(tok: &Tokenizer, seed: u64) {
        let n = tok.inner.get_vocab_size(true) as u64;
        let mut rng = arl_core::rng::Rng::new(seed);
        for len in [0, 1, 2, 3, 7, 40, 200] {
            for _ in 0..50 {
                // Some ids past the vocabulary: skipped by both.
                let ids: Vec<u32> = (0..len).map(|_| (rng.next_u64() % (n + 3)) as u32).collect();
                assert_eq!(tok.decode(&ids), tok.decode_generic(&ids), "ids {ids:?}");
            }
        }
    }

    #[test]
    fn fast_decode_equals_the_generic_one_for_fuse() {
        let tok =
            Tokenizer::load(&Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("testdata/tiny-model"))
                .unwrap();
        assert!(matches!(tok.inner.get_decoder(), Some(tokenizers::DecoderWrapper::Fuse(_))));
        check_against_generic(&tok, 1);
        assert!(tok.fast_decode.get().unwrap().is_some(), "the fast path was taken");
    }

    #[test]
    fn fast_decode_equals_the_generic_one_for_byte_level() {
        // A byte-level BPE vocabulary (every byte's character), merged tokens,
        // a token with a character outside the byte alphabet, added tokens.
        let chars = byte_level_chars();
        let json = crate::tokenizer_build::byte_level_bpe_json(
            &["ĠĠ", "Ãł", "中", "a中"],
            &[(260, "<|im_end|>", true), (261, "<tool_call>", false)],
        );
        let (_d, tok) = load_json(&json);
        check_against_generic(&tok, 2);
        // Split multi-byte characters become U+FFFD in both.
        let e9 = [chars[0xe4] as u32, chars[0xb8] as u32];
        let ids: Vec<u32> =
            e9.iter().map(|c| tok.token_to_id(&char::from_u32(*c).unwrap().to_string()).unwrap()).collect();
        assert_eq!(tok.decode(&ids), tok.decode_generic(&ids));
        assert!(tok.fast_decode.get().unwrap().is_some(), "the fast path was taken");
    }

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

    fn load_json(json: &serde_json::Value) -> (tempfile::TempDir, Tokenizer) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("tokenizer.json"), json.to_string()).unwrap();
        let tok = Tokenizer::load(d.path()).unwrap();
        (d, tok)
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
