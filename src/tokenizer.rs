//! A model directory's tokenizer (`tokenizer.json` through the HF `tokenizers`
//! crate) and the parts of `tokenizer_config.json` arl needs.
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

pub struct Tokenizer {
    pub dir: PathBuf,
    pub inner: tokenizers::Tokenizer,
    /// `tokenizer_config.json`, when present.
    pub config: Option<serde_json::Value>,
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
        Ok(Tokenizer { dir, inner, config })
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self.inner.encode(text, false).map_err(|e| anyhow::anyhow!("tokenizing: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Decodes ids to text, keeping special tokens (so `<|im_end|>` stays visible).
    pub fn decode(&self, ids: &[u32]) -> String {
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
