//! `arl-train convert` on GGUF files: every tensor type against transformers'
//! own loading of the same file, bad files refused, and the tokenizers built
//! from GGUF vocabularies against the reference tokenizations llama.cpp
//! ships (made with the `tokenizers` library).
use arl_chat::tokenizer::Tokenizer;
use arl_testkit::common::{require_python, root, run, tmpdir};
use arl_testkit::real::real;
use std::path::Path;
use std::process::Command;

fn python(args: &[&str]) -> std::process::Output {
    let out = Command::new(require_python()).args(args).output().expect("python");
    assert!(
        out.status.success(),
        "python {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn script(name: &str) -> String {
    root().join("scripts/real").join(name).display().to_string()
}

/// A tiny random Llama GGUF holding every tensor type arl reads.
fn tiny_gguf(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("tiny.gguf");
    python(&[&script("make_gguf.py"), p.to_str().unwrap()]);
    p
}

#[test]
fn every_tensor_type_dequantizes_bit_for_bit_as_transformers_does() {
    let dir = tmpdir();
    let gguf = tiny_gguf(dir.path());
    let out = dir.path().join("hf");
    let r = run("arl-train", &["convert", gguf.to_str().unwrap(), "--out", out.to_str().unwrap()], b"").ok();
    for t in ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F32"] {
        assert!(r.stderr.contains(&format!("{t} ")), "{t} not in the file: {}", r.stderr);
    }
    let cmp = python(&[&script("compare_gguf.py"), gguf.to_str().unwrap(), out.to_str().unwrap()]);
    let report: serde_json::Value =
        serde_json::from_slice(cmp.stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap()).unwrap();
    assert_eq!(report["bit_identical"], 21, "{report}");
    // The converted directory is complete: the tokenizer loads and the template is there.
    let tok = Tokenizer::load(&out).unwrap();
    assert_eq!(tok.encode("<|im_start|> the").unwrap().len(), 2, "a control token and a merged word");
    assert!(out.join("chat_template.jinja").exists());
}

#[test]
fn smollm2_weights_equal_transformers_dequantization() {
    let gguf = real("gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    let dir = real("SmolLM2-135M-Instruct");
    let cmp = python(&[&script("compare_gguf.py"), gguf.to_str().unwrap(), dir.to_str().unwrap()]);
    let last = cmp.stdout.split(|&b| b == b'\n').rfind(|l| !l.is_empty()).unwrap();
    let report: serde_json::Value = serde_json::from_slice(last).unwrap();
    // 272 tensors in the file, and transformers' tied lm_head.
    assert_eq!(report["bit_identical"], 273, "{report}");
}

/// Offset of the u32 type code of tensor `name` in a GGUF header.
fn type_field(bytes: &[u8], name: &str) -> usize {
    let at = bytes.windows(name.len()).position(|w| w == name.as_bytes()).expect("tensor name in the header");
    let n_dims_at = at + name.len();
    let n_dims = u32::from_le_bytes(bytes[n_dims_at..n_dims_at + 4].try_into().unwrap()) as usize;
    n_dims_at + 4 + 8 * n_dims
}

#[test]
fn bad_gguf_files_exit_65_naming_the_file_and_write_nothing() {
    let dir = tmpdir();
    let gguf = tiny_gguf(dir.path());
    let good = std::fs::read(&gguf).unwrap();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated.gguf", good[..good.len() - 1000].to_vec(), "truncated"),
        ("header-cut.gguf", good[..200].to_vec(), "truncated"),
        ("magic.gguf", [b"GGML".as_slice(), &good[4..]].concat(), "wrong magic"),
        (
            "type.gguf",
            {
                let mut b = good.clone();
                let at = type_field(&b, "blk.0.attn_q.weight");
                b[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
                b
            },
            "tensor type 99",
        ),
        (
            "version.gguf",
            {
                let mut b = good.clone();
                b[4..8].copy_from_slice(&9u32.to_le_bytes());
                b
            },
            "version 9",
        ),
    ];
    for (name, bytes, what) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let out = dir.path().join(format!("{name}.out"));
        let r = run("arl-train", &["convert", p.to_str().unwrap(), "--out", out.to_str().unwrap()], b"");
        assert_eq!(r.code, 65, "{name}: {}", r.stderr);
        assert!(r.stderr.contains(name) && r.stderr.contains(what), "{name}: {}", r.stderr);
        assert!(!out.exists(), "{name}: wrote {}", out.display());
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary directories left: {leftovers:?}");
    // An existing non-empty output directory is a usage error, and is left alone.
    let out = dir.path().join("taken");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep"), "x").unwrap();
    let r = run("arl-train", &["convert", gguf.to_str().unwrap(), "--out", out.to_str().unwrap()], b"");
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(out.join("keep").exists());
}

/// llama.cpp's `.inp` file: texts separated by `\n__ggml_vocab_test__\n`.
fn reference_cases(vocab: &str) -> Vec<(String, Vec<u32>)> {
    let inp = std::fs::read_to_string(real(&format!("llama.cpp/vocab/ggml-vocab-{vocab}.gguf.inp"))).unwrap();
    let out = std::fs::read_to_string(real(&format!("llama.cpp/vocab/ggml-vocab-{vocab}.gguf.out"))).unwrap();
    let mut texts: Vec<String> = inp.split("\n__ggml_vocab_test__\n").map(str::to_string).collect();
    if texts.last().is_some_and(|t| t.is_empty()) {
        texts.pop();
    }
    let ids: Vec<Vec<u32>> = out.lines().map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect()).collect();
    assert_eq!(texts.len(), ids.len(), "{vocab}: {} texts, {} id lines", texts.len(), ids.len());
    texts.into_iter().zip(ids).collect()
}

/// A tokenizer directory built from a GGUF vocabulary file.
fn tokenizer_from_gguf(gguf: &Path, dir: &Path) -> Tokenizer {
    let g = arl_gguf::Gguf::open(gguf).unwrap();
    let t = arl_gguf::vocab::hf_tokenizer(&g).unwrap();
    std::fs::write(dir.join("tokenizer.json"), t.tokenizer_json.to_string()).unwrap();
    std::fs::write(dir.join("tokenizer_config.json"), t.tokenizer_config.to_string()).unwrap();
    Tokenizer::load(dir).unwrap()
}

#[test]
fn llama_cpp_reference_tokenizations_pass() {
    // deepseek-r1-qwen ships ids but no vocabulary file: its vocabulary and
    // pre-tokenizer are Qwen2's (llama.cpp maps both names to one pre-type),
    // so Qwen2's file tokenizes its texts.
    for (vocab, file) in
        [("qwen2", "qwen2"), ("gpt-2", "gpt-2"), ("llama-bpe", "llama-bpe"), ("deepseek-r1-qwen", "qwen2")]
    {
        let dir = tmpdir();
        let tok = tokenizer_from_gguf(&real(&format!("llama.cpp/vocab/ggml-vocab-{file}.gguf")), dir.path());
        let cases = reference_cases(vocab);
        assert!(cases.len() > 30, "{vocab}: {} cases", cases.len());
        for (text, want) in &cases {
            let got = tok.encode(text).unwrap();
            assert_eq!(&got, want, "{vocab}: {text:?}");
            assert_eq!(tok.encode_generic(text).unwrap(), got, "{vocab}: the crate's own encode differs on {text:?}");
            // Byte-level: decoding gives the text back.
            assert_eq!(&tok.decode(&got), text, "{vocab}: decode of {text:?}");
        }
    }
}
