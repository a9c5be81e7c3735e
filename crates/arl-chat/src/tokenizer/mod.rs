//! A model directory's tokenizer (`tokenizer.json` through the HF `tokenizers`
//! crate) and the parts of `tokenizer_config.json` arl needs.
//!
//! This module holds [`Tokenizer`] (loading, encode, decode, the config) and
//! [`eos_ids`]; arl's own paths, which give what the crate's would, live
//! beside it: `fast_load` (a BPE `tokenizer.json` read without the crate's
//! detours), `pieces` (the piecewise encode and its cache), `split` (the
//! GPT-2-style pre-tokenizers and their word cache) and `decode` (each id's
//! bytes, for decoding by table).
mod decode;
mod fast_load;
mod pieces;
mod split;

pub use decode::byte_level_chars;

use anyhow::{Context, Result};
use decode::ByteTable;
use pieces::Pieces;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

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
        match self.fast_decode.get_or_init(|| ByteTable::of_tokenizer(&self.inner)) {
            Some(table) => table.decode(ids),
            None => self.decode_generic(ids),
        }
    }

    /// The `tokenizers` crate's own decode (what [`Tokenizer::decode`] equals).
    pub fn decode_generic(&self, ids: &[u32]) -> String {
        self.inner.decode(ids, false).unwrap_or_else(|e| format!("<undecodable: {e}>"))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A tokenizer loaded from `json` written as a model directory's
    /// `tokenizer.json` (the directory, returned with it, lives as long).
    pub(super) fn load_json(json: &serde_json::Value) -> (tempfile::TempDir, Tokenizer) {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("tokenizer.json"), json.to_string()).unwrap();
        let tok = Tokenizer::load(d.path()).unwrap();
        (d, tok)
    }
}
