//! The GGUF container (ggml's `docs/gguf.md`, versions 2 and 3): the magic
//! `GGUF`, a version, the tensor and key/value counts, typed key/value
//! metadata, one info per tensor (name, dimensions, type, offset), then the
//! tensor data from the next multiple of `general.alignment` (32 by default).
//! Everything little-endian. The header is parsed whole and checked against
//! the file's length before any tensor is read, so a truncated file is
//! refused before anything is written.
use crate::quant::GgmlType;
use anyhow::Result;
use arl_core::error::data;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 4] = b"GGUF";
/// Most entries an array of metadata may hold (a vocabulary has ~150k–260k).
const MAX_ARRAY: u64 = 1 << 24;
/// Longest string (a chat template is a few kB; a token a few bytes).
const MAX_STRING: u64 = 1 << 24;

/// A metadata value with its GGUF type.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Value>),
}

impl Value {
    /// Any integer type that fits, as `u64`.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// One tensor's entry in the header.
#[derive(Debug, Clone)]
pub struct TensorInfo {
    pub name: String,
    /// ggml order: `dims[0]` is the innermost (contiguous) dimension, so a
    /// PyTorch `[out, in]` weight has `dims == [in, out]`.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// From the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// The shape in PyTorch order (outermost first).
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    pub fn n_bytes(&self) -> u64 {
        self.ty.bytes_for(self.n_elements())
    }
}

/// A parsed GGUF header; tensor data is read on demand with [`Gguf::read_tensor`].
#[derive(Debug)]
pub struct Gguf {
    pub path: PathBuf,
    pub version: u32,
    /// In file order.
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset of the data section.
    pub data_start: u64,
    pub file_len: u64,
}

/// Reads the header through a counting reader, so errors can say where.
struct Cursor<R> {
    inner: R,
    pos: u64,
    path: PathBuf,
}

impl<R: Read> Cursor<R> {
    fn bad(&self, what: impl std::fmt::Display) -> anyhow::Error {
        data(format!("`{}`: not a valid GGUF file: {what} (at byte {})", self.path.display(), self.pos))
    }

    fn bytes<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.inner.read_exact(&mut b).map_err(|_| self.bad(format_args!("truncated while reading {what}")))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        if len > MAX_STRING {
            return Err(self.bad(format_args!("{what}: a string of {len} bytes")));
        }
        let mut buf = vec![0u8; len as usize];
        self.inner.read_exact(&mut buf).map_err(|_| self.bad(format_args!("truncated while reading {what}")))?;
        self.pos += len;
        String::from_utf8(buf).map_err(|_| self.bad(format_args!("{what} is not UTF-8")))
    }

    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.bytes::<1>(key)?[0]),
            1 => Value::I8(self.bytes::<1>(key)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.bytes(key)?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes(key)?)),
            4 => Value::U32(self.u32(key)?),
            5 => Value::I32(i32::from_le_bytes(self.bytes(key)?)),
            6 => Value::F32(f32::from_le_bytes(self.bytes(key)?)),
            7 => match self.bytes::<1>(key)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(self.bad(format_args!("`{key}`: bool byte {b}"))),
            },
            8 => Value::Str(self.string(key)?),
            9 => {
                if depth > 0 {
                    return Err(self.bad(format_args!("`{key}`: arrays nested deeper than two")));
                }
                let elem = self.u32(key)?;
                let n = self.u64(key)?;
                if n > MAX_ARRAY {
                    return Err(self.bad(format_args!("`{key}`: an array of {n} entries")));
                }
                let mut v = Vec::with_capacity(n.min(1 << 20) as usize);
                for _ in 0..n {
                    v.push(self.value(elem, key, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64(key)?),
            11 => Value::I64(i64::from_le_bytes(self.bytes(key)?)),
            12 => Value::F64(f64::from_le_bytes(self.bytes(key)?)),
            t => return Err(self.bad(format_args!("`{key}`: unknown metadata value type {t}"))),
        })
    }
}

impl Gguf {
    /// Parses the header of `path` and checks every tensor lies inside the file.
    pub fn open(path: &Path) -> Result<Gguf> {
        let file = File::open(path).map_err(|e| anyhow::anyhow!("cannot open `{}`: {e}", path.display()))?;
        let file_len = file.metadata()?.len();
        let mut c = Cursor { inner: BufReader::with_capacity(1 << 20, file), pos: 0, path: path.to_path_buf() };
        let magic: [u8; 4] = c.bytes("the magic")?;
        if &magic != MAGIC {
            return Err(c.bad(format_args!("wrong magic {:?} (expected \"GGUF\")", String::from_utf8_lossy(&magic))));
        }
        let version = c.u32("the version")?;
        if !(2..=3).contains(&version) {
            return Err(c.bad(format_args!("version {version} is not supported (2 or 3)")));
        }
        let n_tensors = c.u64("the tensor count")?;
        let n_kv = c.u64("the metadata count")?;
        if n_tensors > 1 << 20 || n_kv > 1 << 20 {
            return Err(c.bad(format_args!("{n_tensors} tensors and {n_kv} metadata entries")));
        }
        let mut metadata = Vec::with_capacity(n_kv as usize);
        for _ in 0..n_kv {
            let key = c.string("a metadata key")?;
            let ty = c.u32(&key)?;
            let v = c.value(ty, &key, 0)?;
            metadata.push((key, v));
        }
        let mut tensors = Vec::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            let name = c.string("a tensor name")?;
            let n_dims = c.u32(&name)?;
            if n_dims == 0 || n_dims > 4 {
                return Err(c.bad(format_args!("tensor `{name}` has {n_dims} dimensions")));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                dims.push(c.u64(&name)?);
            }
            let code = c.u32(&name)?;
            let ty = GgmlType::from_code(code).ok_or_else(|| {
                c.bad(format_args!(
                    "tensor `{name}` has tensor type {code}, which arl cannot read (it reads {})",
                    GgmlType::SUPPORTED
                ))
            })?;
            let offset = c.u64(&name)?;
            let info = TensorInfo { name, dims, ty, offset };
            if info.dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).is_none_or(|n| n > 1 << 40) {
                return Err(c.bad(format_args!("tensor `{}` has dimensions {:?}", info.name, info.dims)));
            }
            if !info.n_elements().is_multiple_of(ty.block_len()) {
                return Err(c.bad(format_args!(
                    "tensor `{}`: {} elements is not a whole number of {:?} blocks",
                    info.name,
                    info.n_elements(),
                    ty
                )));
            }
            tensors.push(info);
        }
        let mut g = Gguf { path: path.to_path_buf(), version, metadata, tensors, data_start: 0, file_len };
        let align = match g.get("general.alignment") {
            None => 32,
            Some(v) => v
                .as_u64()
                .filter(|a| *a > 0 && a.is_power_of_two())
                .ok_or_else(|| data(format!("`{}`: `general.alignment` is not a power of two", path.display())))?,
        };
        g.data_start = c.pos.div_ceil(align) * align;
        for t in &g.tensors {
            let end = g.data_start.checked_add(t.offset).and_then(|s| s.checked_add(t.n_bytes()));
            if t.offset % align != 0 || end.is_none_or(|e| e > file_len) {
                return Err(data(format!(
                    "`{}`: truncated or corrupt: tensor `{}` ({:?}, {} bytes at data offset {}) ends past the file's {} bytes",
                    path.display(),
                    t.name,
                    t.ty,
                    t.n_bytes(),
                    t.offset,
                    file_len
                )));
            }
        }
        Ok(g)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw (still quantized) bytes of a tensor.
    pub fn read_tensor(&self, file: &mut File, t: &TensorInfo) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; t.n_bytes() as usize];
        file.seek(SeekFrom::Start(self.data_start + t.offset))?;
        file.read_exact(&mut buf)
            .map_err(|e| data(format!("`{}`: cannot read tensor `{}`: {e}", self.path.display(), t.name)))?;
        Ok(buf)
    }

    /// A tensor dequantized to float32, in ggml order.
    pub fn read_f32(&self, file: &mut File, t: &TensorInfo) -> Result<Vec<f32>> {
        let raw = self.read_tensor(file, t)?;
        Ok(t.ty.dequantize(&raw))
    }
}
