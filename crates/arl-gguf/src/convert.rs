//! A GGUF model as an ordinary Hugging Face model directory: float32
//! `model.safetensors` with transformers' tensor names, `config.json`,
//! `generation_config.json`, the tokenizer files and `chat_template.jinja`.
//!
//! llama.cpp's converter reorders the rows of Llama's query and key
//! projections (each head's two rotary halves interleaved, for its rope
//! kernel); they are put back in transformers' order here. Qwen2/Qwen3 files
//! are not reordered by llama.cpp and are copied as they are.
//!
//! The directory is written under a temporary name next to `out` and renamed
//! into place when complete: a failure leaves nothing behind.
use crate::quant::GgmlType;
use crate::reader::{Gguf, TensorInfo, Value};
use crate::vocab::hf_tokenizer;
use anyhow::{Context, Result};
use arl_core::error::{data, usage};
use serde_json::{json, Map, Value as Json};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// What [`convert`] wrote.
#[derive(Debug)]
pub struct Summary {
    pub architecture: String,
    pub tensors: usize,
    pub parameters: u64,
    /// Tensors per source type, e.g. `Q4_1: 210`.
    pub source_types: BTreeMap<String, usize>,
    pub tied_embeddings: bool,
}

/// The architectures arl converts, as `general.architecture` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arch {
    Llama,
    Qwen2,
    Qwen3,
}

struct Tensor<'a> {
    hf_name: String,
    info: &'a TensorInfo,
    /// Undo llama.cpp's rotary row order with this many heads.
    unpermute_heads: Option<u64>,
}

fn meta_u64(g: &Gguf, key: &str) -> Result<u64> {
    g.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| data(format!("`{}`: metadata `{key}` is missing or not an integer", g.path.display())))
}

fn meta_f64(g: &Gguf, key: &str) -> Option<f64> {
    g.get(key).and_then(Value::as_f64)
}

/// Converts the GGUF at `gguf` into a new Hugging Face directory `out`.
pub fn convert(gguf: &Path, out: &Path) -> Result<Summary> {
    if out.exists() && std::fs::read_dir(out).map(|mut d| d.next().is_some()).unwrap_or(true) {
        return Err(usage(format!("`{}` exists and is not empty: choose a new directory", out.display())));
    }
    let g = Gguf::open(gguf)?;
    let path = gguf.display();
    let arch_name = g.get("general.architecture").and_then(Value::as_str).unwrap_or("").to_string();
    let arch = match arch_name.as_str() {
        "llama" => Arch::Llama,
        "qwen2" => Arch::Qwen2,
        "qwen3" => Arch::Qwen3,
        other => {
            return Err(data(format!(
                "`{path}`: architecture `{other}` (general.architecture) is not supported (llama, qwen2, qwen3)"
            )))
        }
    };
    let a = &arch_name;
    let layers = meta_u64(&g, &format!("{a}.block_count"))?;
    let hidden = meta_u64(&g, &format!("{a}.embedding_length"))?;
    let heads = meta_u64(&g, &format!("{a}.attention.head_count"))?;
    let kv_heads = g.get(&format!("{a}.attention.head_count_kv")).and_then(Value::as_u64).unwrap_or(heads);
    if heads == 0 || kv_heads == 0 || heads % kv_heads != 0 {
        return Err(data(format!("`{path}`: {heads} attention heads and {kv_heads} key/value heads")));
    }
    let head_dim = g.get(&format!("{a}.attention.key_length")).and_then(Value::as_u64).unwrap_or(hidden / heads);
    if g.tensor("rope_freqs.weight").is_some() {
        return Err(data(format!(
            "`{path}`: `rope_freqs.weight` (Llama 3.1-style rope scaling) is not supported by the converter yet"
        )));
    }
    let tok = hf_tokenizer(&g)?;
    let vocab = tok.tokenizer_json["model"]["vocab"].as_object().map_or(0, Map::len);
    let tensors = map_tensors(&g, arch, layers, heads, kv_heads)?;
    let embed = g.tensor("token_embd.weight").expect("map_tensors checked it");
    let vocab_size = embed.dims.get(1).copied().unwrap_or(0);
    if (vocab as u64) > vocab_size {
        return Err(data(format!("`{path}`: {vocab} tokens but an embedding of {vocab_size} rows")));
    }
    let tied = g.tensor("output.weight").is_none();
    let intermediate = meta_u64(&g, &format!("{a}.feed_forward_length"))?;
    let (model_type, class) = match arch {
        Arch::Llama => ("llama", "LlamaForCausalLM"),
        Arch::Qwen2 => ("qwen2", "Qwen2ForCausalLM"),
        Arch::Qwen3 => ("qwen3", "Qwen3ForCausalLM"),
    };
    let mut config = json!({
        "architectures": [class],
        "model_type": model_type,
        "vocab_size": vocab_size,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": meta_f64(&g, &format!("{a}.attention.layer_norm_rms_epsilon")).unwrap_or(1e-6) as f32 as f64,
        "rope_theta": meta_f64(&g, &format!("{a}.rope.freq_base")).unwrap_or(10_000.0),
        "max_position_embeddings": g.get(&format!("{a}.context_length")).and_then(Value::as_u64).unwrap_or(4096),
        "tie_word_embeddings": tied,
        "attention_bias": arch == Arch::Qwen2,
        "torch_dtype": "float32",
        "bos_token_id": tok.bos_id,
        "eos_token_id": tok.eos_ids.first(),
    });
    if let Some(p) = tok.pad_id {
        config["pad_token_id"] = json!(p);
    }
    match g.get(&format!("{a}.rope.scaling.type")).and_then(Value::as_str) {
        None | Some("none") => {}
        Some("linear") => {
            let factor = meta_f64(&g, &format!("{a}.rope.scaling.factor")).unwrap_or(1.0);
            config["rope_scaling"] = json!({"rope_type": "linear", "factor": factor});
        }
        Some(other) => return Err(data(format!("`{path}`: rope scaling `{other}` is not supported (linear)"))),
    }
    let mut generation = json!({"bos_token_id": tok.bos_id, "do_sample": true});
    generation["eos_token_id"] = match tok.eos_ids.as_slice() {
        [one] => json!(one),
        many => json!(many),
    };
    if let Some(p) = tok.pad_id {
        generation["pad_token_id"] = json!(p);
    }

    // Everything is written into a temporary sibling, then renamed.
    let parent = out.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).with_context(|| format!("cannot create `{}`", parent.display()))?;
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.tmp-", out.file_name().and_then(|n| n.to_str()).unwrap_or("model")))
        .tempdir_in(parent)
        .with_context(|| format!("cannot create a directory in `{}`", parent.display()))?;
    let dir = tmp.path();
    write_json(&dir.join("config.json"), &config)?;
    write_json(&dir.join("generation_config.json"), &generation)?;
    write_json(&dir.join("tokenizer.json"), &tok.tokenizer_json)?;
    write_json(&dir.join("tokenizer_config.json"), &tok.tokenizer_config)?;
    if let Some(t) = &tok.chat_template {
        std::fs::write(dir.join("chat_template.jinja"), t)?;
    }
    let parameters = write_safetensors(&g, &tensors, &dir.join("model.safetensors"))?;
    let tmp_path = tmp.keep();
    if out.exists() {
        std::fs::remove_dir(out).with_context(|| format!("cannot replace `{}`", out.display()))?;
    }
    std::fs::rename(&tmp_path, out).with_context(|| format!("cannot rename the result to `{}`", out.display()))?;
    let mut source_types = BTreeMap::new();
    for t in &tensors {
        *source_types.entry(format!("{:?}", t.info.ty)).or_insert(0) += 1;
    }
    Ok(Summary { architecture: arch_name, tensors: tensors.len(), parameters, source_types, tied_embeddings: tied })
}

fn write_json(path: &Path, v: &Json) -> Result<()> {
    let mut text = serde_json::to_string_pretty(v)?;
    text.push('\n');
    std::fs::write(path, text).with_context(|| format!("cannot write `{}`", path.display()))
}

/// transformers' name of every tensor of the file, checking nothing is left over.
fn map_tensors(g: &Gguf, arch: Arch, layers: u64, heads: u64, kv_heads: u64) -> Result<Vec<Tensor<'_>>> {
    let mut out = Vec::new();
    let mut used = std::collections::HashSet::new();
    let mut take = |gguf_name: &str, hf_name: String, required: bool, unpermute_heads: Option<u64>| -> Result<()> {
        match g.tensor(gguf_name) {
            Some(info) => {
                used.insert(gguf_name.to_string());
                out.push(Tensor { hf_name, info, unpermute_heads });
                Ok(())
            }
            None if required => Err(data(format!("`{}`: tensor `{gguf_name}` is missing", g.path.display()))),
            None => Ok(()),
        }
    };
    take("token_embd.weight", "model.embed_tokens.weight".into(), true, None)?;
    let llama = arch == Arch::Llama;
    for i in 0..layers {
        let b = format!("blk.{i}");
        let l = format!("model.layers.{i}");
        take(&format!("{b}.attn_norm.weight"), format!("{l}.input_layernorm.weight"), true, None)?;
        take(&format!("{b}.attn_q.weight"), format!("{l}.self_attn.q_proj.weight"), true, llama.then_some(heads))?;
        take(&format!("{b}.attn_k.weight"), format!("{l}.self_attn.k_proj.weight"), true, llama.then_some(kv_heads))?;
        take(&format!("{b}.attn_v.weight"), format!("{l}.self_attn.v_proj.weight"), true, None)?;
        for p in ["q", "k", "v"] {
            // Qwen2's biases; a Llama file with biases is refused below (left over).
            if arch == Arch::Qwen2 {
                take(&format!("{b}.attn_{p}.bias"), format!("{l}.self_attn.{p}_proj.bias"), true, None)?;
            }
        }
        if arch == Arch::Qwen3 {
            take(&format!("{b}.attn_q_norm.weight"), format!("{l}.self_attn.q_norm.weight"), true, None)?;
            take(&format!("{b}.attn_k_norm.weight"), format!("{l}.self_attn.k_norm.weight"), true, None)?;
        }
        take(&format!("{b}.attn_output.weight"), format!("{l}.self_attn.o_proj.weight"), true, None)?;
        take(&format!("{b}.ffn_norm.weight"), format!("{l}.post_attention_layernorm.weight"), true, None)?;
        take(&format!("{b}.ffn_gate.weight"), format!("{l}.mlp.gate_proj.weight"), true, None)?;
        take(&format!("{b}.ffn_up.weight"), format!("{l}.mlp.up_proj.weight"), true, None)?;
        take(&format!("{b}.ffn_down.weight"), format!("{l}.mlp.down_proj.weight"), true, None)?;
    }
    take("output_norm.weight", "model.norm.weight".into(), true, None)?;
    take("output.weight", "lm_head.weight".into(), false, None)?;
    if let Some(extra) = g.tensors.iter().find(|t| !used.contains(&t.name)) {
        return Err(data(format!(
            "`{}`: tensor `{}` has no place in a {arch:?} model (is the file of another architecture?)",
            g.path.display(),
            extra.name
        )));
    }
    Ok(out)
}

/// Rows of a `[rows, cols]` projection in transformers' order from llama.cpp's:
/// within each head, llama.cpp row `2i + h` holds transformers' row `h·d/2 + i`.
fn unpermute_rows(w: &[f32], rows: usize, cols: usize, heads: usize) -> Result<Vec<f32>> {
    if heads == 0 || !rows.is_multiple_of(heads) || !(rows / heads).is_multiple_of(2) {
        anyhow::bail!("{rows} rows cannot be split into {heads} heads of an even size");
    }
    let d = rows / heads;
    let mut out = vec![0f32; w.len()];
    for h in 0..heads {
        for half in 0..2 {
            for i in 0..d / 2 {
                let dst = h * d + half * (d / 2) + i;
                let src = h * d + 2 * i + half;
                out[dst * cols..(dst + 1) * cols].copy_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    Ok(out)
}

/// Writes every tensor as float32 into one safetensors file (header: the
/// JSON table of names, dtypes, shapes and byte ranges, padded to 8 bytes).
fn write_safetensors(g: &Gguf, tensors: &[Tensor<'_>], path: &Path) -> Result<u64> {
    let mut header = Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut at = 0u64;
    for t in tensors {
        let n = t.info.n_elements() * 4;
        header
            .insert(t.hf_name.clone(), json!({"dtype": "F32", "shape": t.info.shape(), "data_offsets": [at, at + n]}));
        at += n;
    }
    let mut head = serde_json::to_vec(&Json::Object(header))?;
    while head.len() % 8 != 0 {
        head.push(b' ');
    }
    let mut w = BufWriter::with_capacity(1 << 20, File::create(path)?);
    w.write_all(&(head.len() as u64).to_le_bytes())?;
    w.write_all(&head)?;
    let mut src = File::open(&g.path)?;
    let mut parameters = 0;
    for t in tensors {
        let mut values = g.read_f32(&mut src, t.info)?;
        if let Some(heads) = t.unpermute_heads {
            let shape = t.info.shape();
            if shape.len() != 2 {
                return Err(data(format!("`{}`: `{}` is not a matrix", g.path.display(), t.info.name)));
            }
            values = unpermute_rows(&values, shape[0] as usize, shape[1] as usize, heads as usize)
                .map_err(|e| data(format!("`{}`: `{}`: {e}", g.path.display(), t.info.name)))?;
        }
        parameters += values.len() as u64;
        let mut bytes = Vec::with_capacity(values.len() * 4);
        for v in &values {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        w.write_all(&bytes)?;
    }
    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    debug_assert!(tensors.iter().all(|t| t.info.ty != GgmlType::F32 || t.info.n_bytes() > 0));
    Ok(parameters)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_llama_cpp_row_order() {
        // llama.cpp: w.reshape(heads, 2, d/2, cols).swapaxes(1, 2) — build that order, then undo it.
        let (heads, d, cols) = (3usize, 4usize, 2usize);
        let rows = heads * d;
        let hf: Vec<f32> = (0..rows * cols).map(|x| x as f32).collect();
        let mut permuted = vec![0f32; hf.len()];
        for h in 0..heads {
            for i in 0..d / 2 {
                for half in 0..2 {
                    let src = h * d + half * (d / 2) + i;
                    let dst = h * d + 2 * i + half;
                    permuted[dst * cols..(dst + 1) * cols].copy_from_slice(&hf[src * cols..(src + 1) * cols]);
                }
            }
        }
        assert_ne!(permuted, hf);
        assert_eq!(unpermute_rows(&permuted, rows, cols, heads).unwrap(), hf);
        assert!(unpermute_rows(&permuted, rows, cols, 5).is_err());
    }
}
