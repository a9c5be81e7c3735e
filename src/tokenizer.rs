//! A model directory's tokenizer (`tokenizer.json` through the HF `tokenizers`
//! crate) and the parts of `tokenizer_config.json` arl needs.
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub struct Tokenizer {
    pub dir: PathBuf,
    pub inner: tokenizers::Tokenizer,
    /// `tokenizer_config.json`, when present.
    pub config: Option<serde_json::Value>,
    /// Each id's bytes, for [`Tokenizer::decode`] without the generic chain
    /// (built on first use; `None` inside for decoders without a fast path).
    fast_decode: std::sync::OnceLock<Option<Vec<Option<Box<[u8]>>>>>,
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

impl Tokenizer {
    /// Loads `DIR/tokenizer.json` (and `DIR/tokenizer_config.json` if present);
    /// `path` may also name the `tokenizer.json` file itself.
    pub fn load(path: &Path) -> Result<Tokenizer> {
        let (dir, file) = if path.is_dir() {
            (path.to_path_buf(), path.join("tokenizer.json"))
        } else {
            (path.parent().unwrap_or(Path::new(".")).to_path_buf(), path.to_path_buf())
        };
        let inner = tokenizers::Tokenizer::from_file(&file)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("cannot load tokenizer `{}`", file.display()))?;
        let cfg_path = dir.join("tokenizer_config.json");
        let config = if cfg_path.exists() {
            let text = std::fs::read_to_string(&cfg_path).with_context(|| format!("cannot read `{}`", cfg_path.display()))?;
            Some(serde_json::from_str(&text).with_context(|| format!("`{}`: invalid JSON", cfg_path.display()))?)
        } else {
            None
        };
        Ok(Tokenizer { dir, inner, config, fast_decode: std::sync::OnceLock::new() })
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
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
                    if let Some(Some(b)) = table.get(id as usize) {
                        bytes.extend_from_slice(b);
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
    /// — `Fuse` (a token's text as is) and `ByteLevel` (each character
    /// mapped back to its byte by GPT-2's byte↔character table; a token with a
    /// character outside it keeps its UTF-8 bytes), then lossy UTF-8 over the
    /// whole — each id's bytes. Decoding is then a table lookup per id, not
    /// a string per token through the generic chain (a tenth of
    /// `arl-rollout`'s CPU, `scripts/bench/rollout.sh`).
    fn id_bytes(&self) -> Option<Vec<Option<Box<[u8]>>>> {
        use tokenizers::DecoderWrapper;
        let byte_level = match self.inner.get_decoder()? {
            DecoderWrapper::Fuse(_) => false,
            DecoderWrapper::ByteLevel(_) => true,
            _ => return None,
        };
        let char_byte: HashMap<char, u8> = byte_level_chars().into_iter().enumerate().map(|(b, c)| (c, b as u8)).collect();
        let n = self.inner.get_vocab_size(true);
        let mut table = Vec::with_capacity(n);
        for id in 0..n as u32 {
            table.push(self.inner.id_to_token(id).map(|t| {
                if byte_level {
                    if let Some(b) = t.chars().map(|c| char_byte.get(&c).copied()).collect::<Option<Vec<u8>>>() {
                        return b.into_boxed_slice();
                    }
                }
                t.into_bytes().into_boxed_slice()
            }));
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
        let mut rng = crate::rng::Rng::new(seed);
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
        let tok = Tokenizer::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/tiny-model")).unwrap();
        assert!(matches!(tok.inner.get_decoder(), Some(tokenizers::DecoderWrapper::Fuse(_))));
        check_against_generic(&tok, 1);
        assert!(tok.fast_decode.get().unwrap().is_some(), "the fast path was taken");
    }

    #[test]
    fn fast_decode_equals_the_generic_one_for_byte_level() {
        // A byte-level BPE vocabulary (every byte's character), merged tokens,
        // a token with a character outside the byte alphabet, added tokens.
        let chars = byte_level_chars();
        let json = crate::tokenizer_build::byte_level_bpe_json(&["ĠĠ", "Ãł", "中", "a中"], &[(260, "<|im_end|>", true), (261, "<tool_call>", false)]);
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("tokenizer.json"), json.to_string()).unwrap();
        let tok = Tokenizer::load(d.path()).unwrap();
        check_against_generic(&tok, 2);
        // Split multi-byte characters become U+FFFD in both.
        let e9 = [chars[0xe4] as u32, chars[0xb8] as u32];
        let ids: Vec<u32> = e9.iter().map(|c| tok.token_to_id(&char::from_u32(*c).unwrap().to_string()).unwrap()).collect();
        assert_eq!(tok.decode(&ids), tok.decode_generic(&ids));
        assert!(tok.fast_decode.get().unwrap().is_some(), "the fast path was taken");
    }
}
