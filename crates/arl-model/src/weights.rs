//! Hugging Face safetensors checkpoints: strict reading (single file or
//! sharded with `model.safetensors.index.json`) and deterministic sharded
//! writing.
use anyhow::{bail, Context, Result};
use safetensors::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use tch::{Kind, Tensor};

/// The safetensors files of a model directory: the shards named by the index
/// when there is one, else `model.safetensors`, else every `*.safetensors`.
pub fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let text = std::fs::read_to_string(&index).with_context(|| format!("cannot read `{}`", index.display()))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("`{}`: invalid JSON", index.display()))?;
        let map = v
            .get("weight_map")
            .and_then(|m| m.as_object())
            .with_context(|| format!("`{}`: no `weight_map` object", index.display()))?;
        let mut files: Vec<String> = map.values().filter_map(|f| f.as_str().map(str::to_string)).collect();
        files.sort();
        files.dedup();
        return Ok(files.into_iter().map(|f| dir.join(f)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read model directory `{}`", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no *.safetensors in `{}`", dir.display());
    }
    Ok(files)
}

fn kind_of(d: Dtype) -> Result<Kind> {
    Ok(match d {
        Dtype::F32 => Kind::Float,
        Dtype::BF16 => Kind::BFloat16,
        Dtype::F16 => Kind::Half,
        Dtype::F64 => Kind::Double,
        Dtype::I64 => Kind::Int64,
        Dtype::I32 => Kind::Int,
        other => bail!("tensor dtype {other:?} is not supported"),
    })
}

fn dtype_of(k: Kind) -> Result<Dtype> {
    Ok(match k {
        Kind::Float => Dtype::F32,
        Kind::BFloat16 => Dtype::BF16,
        Kind::Half => Dtype::F16,
        Kind::Double => Dtype::F64,
        other => bail!("cannot write tensors of kind {other:?}"),
    })
}

/// The name HF writes for a dtype (`torch_dtype` in config.json).
pub fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::BFloat16 => "bfloat16",
        Kind::Half => "float16",
        Kind::Double => "float64",
        _ => "float32",
    }
}

pub fn parse_kind(name: &str) -> Result<Kind> {
    Ok(match name {
        "float32" | "fp32" | "f32" => Kind::Float,
        "bfloat16" | "bf16" => Kind::BFloat16,
        "float16" | "fp16" | "f16" | "half" => Kind::Half,
        other => bail!("unknown dtype `{other}` (float32, bfloat16, float16)"),
    })
}

/// One tensor of a safetensors file, from its header: where its bytes are.
#[derive(Debug, Clone)]
pub struct Entry {
    pub file: PathBuf,
    pub kind: Kind,
    pub shape: Vec<i64>,
    /// Absolute byte range in the file.
    pub start: u64,
    pub end: u64,
}

/// Every tensor of the checkpoint's files, from their headers only (no
/// tensor data is read): dtype, shape and byte range, each range checked
/// against the file's length and the shape's size.
pub fn index_all(dir: &Path) -> Result<HashMap<String, Entry>> {
    let mut out = HashMap::new();
    for f in weight_files(dir)? {
        out.extend(index_file(&f)?);
    }
    Ok(out)
}

/// [`index_all`] for one file.
pub fn index_file(f: &Path) -> Result<HashMap<String, Entry>> {
    use std::io::Read;
    let bad = |why: String| anyhow::anyhow!("`{}`: not a safetensors file ({why})", f.display());
    let mut file = std::fs::File::open(f).with_context(|| format!("cannot read `{}`", f.display()))?;
    let len = file.metadata()?.len();
    let mut n = [0u8; 8];
    file.read_exact(&mut n).map_err(|_| bad("shorter than its header".into()))?;
    let n = u64::from_le_bytes(n);
    if n > 100 << 20 || 8 + n > len {
        return Err(bad(format!("header of {n} bytes in a file of {len}")));
    }
    let mut header = vec![0u8; n as usize];
    file.read_exact(&mut header).map_err(|_| bad("truncated header".into()))?;
    let v: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| bad(format!("header: {e}")))?;
    let base = 8 + n;
    let mut out = HashMap::new();
    for (name, t) in v {
        if name == "__metadata__" {
            continue;
        }
        let dtype: Dtype = serde_json::from_value(t["dtype"].clone()).map_err(|e| bad(format!("`{name}`: {e}")))?;
        let kind = kind_of(dtype).with_context(|| format!("`{}`: tensor `{name}`", f.display()))?;
        let shape: Vec<i64> =
            serde_json::from_value(t["shape"].clone()).map_err(|e| bad(format!("`{name}`: shape: {e}")))?;
        let off: [u64; 2] =
            serde_json::from_value(t["data_offsets"].clone()).map_err(|e| bad(format!("`{name}`: offsets: {e}")))?;
        let numel: i64 = shape.iter().product();
        let want = numel as u64 * kind.elt_size_in_bytes() as u64;
        if shape.iter().any(|&d| d < 0) || off[1] < off[0] || off[1] - off[0] != want || base + off[1] > len {
            return Err(bad(format!(
                "tensor `{name}`: bytes {}..{} for shape {shape:?} (file of {len} bytes)",
                off[0], off[1]
            )));
        }
        out.insert(name, Entry { file: f.to_path_buf(), kind, shape, start: base + off[0], end: base + off[1] });
    }
    Ok(out)
}

/// Reads entry `e`'s bytes into `dest` (same shape), converting the dtype
/// and device as needed: straight into `dest`'s memory when it is a
/// contiguous CPU tensor of the file's dtype, else through one temporary of
/// this tensor's size.
pub fn read_into(file: &mut std::fs::File, e: &Entry, dest: &Tensor) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(e.start))?;
    let n = (e.end - e.start) as usize;
    let direct = dest.device() == tch::Device::Cpu && dest.kind() == e.kind && dest.is_contiguous();
    let tmp = if direct { None } else { Some(Tensor::empty(e.shape.as_slice(), (e.kind, tch::Device::Cpu))) };
    let target = tmp.as_ref().unwrap_or(dest);
    assert_eq!(target.numel() * e.kind.elt_size_in_bytes(), n, "shape checked by the caller");
    if n > 0 {
        // SAFETY: `target` is a contiguous CPU tensor of exactly `n` bytes
        // that nothing else reads or writes during this call.
        let buf = unsafe { std::slice::from_raw_parts_mut(target.data_ptr() as *mut u8, n) };
        file.read_exact(buf).with_context(|| format!("reading `{}`", e.file.display()))?;
    }
    if let Some(t) = tmp {
        let mut d = dest.shallow_clone();
        d.f_copy_(&t)?;
    }
    Ok(())
}

/// Reads every tensor of the checkpoint onto the CPU, in its stored dtype.
pub fn read_all(dir: &Path) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    for f in weight_files(dir)? {
        out.extend(read_file(&f)?);
    }
    Ok(out)
}

/// Every tensor of one safetensors file, on the CPU, in its stored dtype.
pub fn read_file(f: &Path) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    let bytes = std::fs::read(f).with_context(|| format!("cannot read `{}`", f.display()))?;
    let st = SafeTensors::deserialize(&bytes).with_context(|| format!("`{}`: not a safetensors file", f.display()))?;
    for (name, view) in st.tensors() {
        let kind = kind_of(view.dtype()).with_context(|| format!("`{}`: tensor `{name}`", f.display()))?;
        let shape: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
        let t = Tensor::f_from_data_size(view.data(), &shape, kind)
            .with_context(|| format!("`{}`: tensor `{name}`", f.display()))?;
        out.insert(name, t);
    }
    Ok(out)
}

/// Writes `tensors` (sorted by name) into one safetensors file in `kind`.
pub fn write_file(path: &Path, tensors: &BTreeMap<String, Tensor>, kind: Kind) -> Result<()> {
    let raws = tensors
        .iter()
        .map(|(k, t)| Ok((k.as_str(), to_raw(t, kind).with_context(|| format!("tensor `{k}`"))?)))
        .collect::<Result<Vec<_>>>()?;
    let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
    let items: Vec<(&str, &Raw)> = raws.iter().map(|(k, r)| (*k, r)).collect();
    safetensors::serialize_to_file(items, Some(meta), path).with_context(|| format!("writing `{}`", path.display()))
}

struct Raw {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Raw {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn to_raw(t: &Tensor, kind: Kind) -> Result<Raw> {
    let t = t.detach().to_device(tch::Device::Cpu).to_kind(kind).contiguous();
    let numel = t.numel();
    let mut data = vec![0u8; numel * kind.elt_size_in_bytes()];
    t.f_copy_data_u8(&mut data, numel)?;
    Ok(Raw { dtype: dtype_of(kind)?, shape: t.size().iter().map(|&d| d as usize).collect(), data })
}

/// Writes `tensors` into `dir` as HF does: `model.safetensors` when it fits in
/// one shard, else `model-0000i-of-0000n.safetensors` plus the index. Names
/// are written in sorted order, so the same tensors give the same bytes.
pub fn write_sharded(
    dir: &Path,
    tensors: &BTreeMap<String, Tensor>,
    kind: Kind,
    max_shard_bytes: u64,
) -> Result<Vec<PathBuf>> {
    let mut shards: Vec<Vec<(&String, Raw)>> = vec![vec![]];
    let mut size = 0u64;
    let mut total = 0u64;
    for (name, t) in tensors {
        let raw = to_raw(t, kind).with_context(|| format!("tensor `{name}`"))?;
        let n = raw.data.len() as u64;
        if size > 0 && size + n > max_shard_bytes {
            shards.push(vec![]);
            size = 0;
        }
        size += n;
        total += n;
        shards.last_mut().expect("non-empty").push((name, raw));
    }
    let n = shards.len();
    let meta: HashMap<String, String> = [("format".to_string(), "pt".to_string())].into();
    let mut files = vec![];
    let mut weight_map = serde_json::Map::new();
    for (i, shard) in shards.iter().enumerate() {
        let fname = if n == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{:05}.safetensors", i + 1, n)
        };
        let path = dir.join(&fname);
        let items: Vec<(&str, &Raw)> = shard.iter().map(|(k, r)| (k.as_str(), r)).collect();
        safetensors::serialize_to_file(items, Some(meta.clone()), &path)
            .with_context(|| format!("writing `{}`", path.display()))?;
        for (k, _) in shard {
            weight_map.insert((*k).clone(), fname.clone().into());
        }
        files.push(path);
    }
    if n > 1 {
        let index = serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        let path = dir.join("model.safetensors.index.json");
        std::fs::write(&path, serde_json::to_string_pretty(&index)? + "\n")
            .with_context(|| format!("writing `{}`", path.display()))?;
        files.push(path);
    }
    Ok(files)
}
