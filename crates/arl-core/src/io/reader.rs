//! [`RecordReader`]: a stream of records from a path, stdin or any byte
//! stream, its format detected from content; each format's batches come
//! from `jsonl` and `parquet`.
use super::{Format, Item, PARQUET_MAGIC};
use crate::columnar::ParquetSource;
use anyhow::{Context, Result};
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// A source of records in either format.
pub struct RecordReader {
    inner: Inner,
    source: Arc<str>,
    pending: std::collections::VecDeque<Item>,
}

enum Inner {
    Jsonl {
        rd: BufReader<Box<dyn Read + Send>>,
        line: u64,
        done: bool,
    },
    /// Row groups are decoded a few at a time, in parallel, in file order;
    /// with a projection, only those columns.
    Parquet {
        src: Arc<ParquetSource>,
        mask: Option<ProjectionMask>,
        next: usize,
    },
}

impl RecordReader {
    /// Opens a path, or stdin for `-`.
    pub fn open(path: &Path) -> Result<RecordReader> {
        RecordReader::open_projected(path, None)
    }

    /// Opens a path (or stdin for `-`); a Parquet input is read by the named
    /// columns only (`None`: all), its records carrying their
    /// [`crate::Record::source_row`] so that a [`crate::columnar::PassThrough`]
    /// writer can add the others back. JSONL is always read whole.
    pub fn open_projected(path: &Path, columns: Option<&[&str]>) -> Result<RecordReader> {
        if path == Path::new("-") {
            return RecordReader::detect(Box::new(io::stdin()), "<stdin>", columns);
        }
        let mut f = File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
        let regular = f.metadata().is_ok_and(|m| m.is_file());
        if regular {
            let mut magic = [0u8; 4];
            let n = f.read_at(&mut magic, 0).with_context(|| format!("cannot read `{}`", path.display()))?;
            if n == 4 && &magic == PARQUET_MAGIC {
                // Random access to the file: only the column chunks asked for are read.
                let src = ParquetSource::from_file(path, f)?;
                return Ok(RecordReader::parquet(Arc::new(src), columns));
            }
            f.seek(io::SeekFrom::Start(0)).with_context(|| format!("cannot read `{}`", path.display()))?;
        }
        RecordReader::detect(Box::new(f), &path.display().to_string(), columns)
    }

    /// Reads from any byte stream, detecting the format from its first bytes.
    pub fn from_reader(rd: Box<dyn Read + Send>, source: &str) -> Result<RecordReader> {
        RecordReader::detect(rd, source, None)
    }

    fn detect(rd: Box<dyn Read + Send>, source: &str, columns: Option<&[&str]>) -> Result<RecordReader> {
        let mut br = BufReader::with_capacity(1 << 20, rd);
        let head = loop {
            match br.fill_buf() {
                Ok(b) => break b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot read `{source}`")),
            }
        };
        let is_parquet = head.len() >= 4 && &head[..4] == PARQUET_MAGIC;
        if !is_parquet {
            return Ok(RecordReader {
                inner: Inner::Jsonl { rd: br, line: 0, done: false },
                source: source.into(),
                pending: Default::default(),
            });
        }
        // Parquet needs random access to its footer: read the stream into memory.
        let mut buf = Vec::new();
        br.read_to_end(&mut buf).with_context(|| format!("cannot read `{source}`"))?;
        let src = ParquetSource::from_bytes(source, Bytes::from(buf))?;
        Ok(RecordReader::parquet(Arc::new(src), columns))
    }

    fn parquet(src: Arc<ParquetSource>, columns: Option<&[&str]>) -> RecordReader {
        let mask = columns.map(|c| src.projection(c));
        RecordReader {
            source: src.name.clone(),
            inner: Inner::Parquet { src, mask, next: 0 },
            pending: Default::default(),
        }
    }

    /// The Parquet input, when this reads one.
    pub fn parquet_source(&self) -> Option<&Arc<ParquetSource>> {
        match &self.inner {
            Inner::Parquet { src, .. } => Some(src),
            Inner::Jsonl { .. } => None,
        }
    }

    /// This reader without its projection: every column, whole records.
    pub fn whole(mut self) -> RecordReader {
        if let Inner::Parquet { mask, .. } = &mut self.inner {
            *mask = None;
        }
        self
    }

    /// Whether a projection is in force (records carry their source row).
    pub fn is_projected(&self) -> bool {
        matches!(&self.inner, Inner::Parquet { mask: Some(_), .. })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    pub fn format(&self) -> Format {
        match self.inner {
            Inner::Jsonl { .. } => Format::Jsonl,
            Inner::Parquet { .. } => Format::Parquet,
        }
    }

    /// The next batch of items (already-available input only, so pipes stream).
    /// `Ok(None)` at the end; `Err` for an I/O failure, which ends the stream.
    pub fn next_batch(&mut self) -> Result<Option<Vec<Item>>> {
        if !self.pending.is_empty() {
            return Ok(Some(self.pending.drain(..).collect()));
        }
        match &mut self.inner {
            Inner::Jsonl { rd, line, done } => super::jsonl::read_batch(rd, line, done, &self.source),
            Inner::Parquet { src, mask, next } => super::parquet::read_batch(src, mask.as_ref(), next),
        }
    }
}

impl Iterator for RecordReader {
    type Item = Result<Item>;
    fn next(&mut self) -> Option<Result<Item>> {
        loop {
            if let Some(it) = self.pending.pop_front() {
                return Some(Ok(it));
            }
            match self.next_batch() {
                Ok(Some(b)) => self.pending.extend(b),
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
