//! Reading and writing trajectory records as JSONL and Parquet.
//!
//! * Readers detect the format from content (`PAR1` magic), for files and
//!   stdin alike, and stream: JSONL is parsed in batches of the lines already
//!   buffered (so a pipe delivers each record as soon as it is written, while
//!   a file is parsed in parallel chunks); Parquet is read one row group batch
//!   at a time. Each item carries its position (line or row) so errors can
//!   name it, and a bad line is kept verbatim for a rejects file.
//! * Writers stream too: JSONL writes each record as it comes; Parquet
//!   buffers one row group. File outputs are atomic ([`AtomicFile`]).
//!
//! This module holds what both formats share (the format, an item's
//! position, a bad record) and the whole-file helpers; the rest lives in
//! `reader` ([`RecordReader`]), `writer` ([`RecordWriter`]), `jsonl` and
//! `parquet` (each format's half of both), `sink` ([`Sink`], [`StdoutSink`])
//! and `atomic` ([`AtomicFile`], stale temporaries).
mod atomic;
mod jsonl;
mod parquet;
mod reader;
mod sink;
mod writer;

pub use crate::columnar::PARQUET_ROW_GROUP;
pub use atomic::{dead_writers, pid_alive, remove_stale_temps, AtomicFile};
pub use reader::RecordReader;
pub use sink::{Sink, StdoutSink};
pub use writer::RecordWriter;

use crate::record::{FieldError, Record};
use anyhow::{bail, Result};
use std::path::Path;
use std::sync::Arc;

/// On-disk / on-pipe format of a record stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Jsonl,
    Parquet,
}

impl Format {
    /// The format a path's extension implies (`.parquet`/`.pq` → Parquet, else JSONL).
    pub fn from_path(p: &Path) -> Format {
        match p.extension().and_then(|e| e.to_str()) {
            Some("parquet") | Some("pq") => Format::Parquet,
            _ => Format::Jsonl,
        }
    }
}

pub const PARQUET_MAGIC: &[u8; 4] = b"PAR1";

/// Where a record came from: a source name and a 1-based line (JSONL) or 0-based row (Parquet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pos {
    pub source: Arc<str>,
    pub index: u64,
    pub is_row: bool,
}

impl std::fmt::Display for Pos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_row {
            write!(f, "`{}`: row {}", self.source, self.index)
        } else {
            write!(f, "`{}:{}`", self.source, self.index)
        }
    }
}

/// A record that could not be read: where, why, and the original bytes (JSONL)
/// or the row as JSON (Parquet), for a rejects file.
#[derive(Debug, Clone)]
pub struct BadRecord {
    pub pos: Pos,
    pub error: FieldError,
    pub raw: Vec<u8>,
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.pos, self.error)
    }
}

impl std::error::Error for BadRecord {}

/// One item of a record stream.
pub type Item = std::result::Result<(Pos, Record), BadRecord>;

/// Reads every record of a file (tests and small inputs); stops at the first bad one.
pub fn read_all(path: &Path) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    for it in RecordReader::open(path)? {
        match it? {
            Ok((_, r)) => out.push(r),
            Err(bad) => bail!("{bad}"),
        }
    }
    Ok(out)
}

/// Writes records to a path atomically, in the format its extension implies.
pub fn write_all(path: &Path, recs: &[Record]) -> Result<()> {
    let f = AtomicFile::create(path)?;
    let mut w = RecordWriter::new(Box::new(f), Format::from_path(path), false)?;
    for r in recs {
        w.write(r)?;
    }
    w.finish()
}
