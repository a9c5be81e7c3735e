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
use crate::columnar::{ParquetSource, PassThrough};
use crate::record::{FieldError, Record};
use crate::schema;
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::arrow::ProjectionMask;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use rayon::prelude::*;
use std::fs::File;
use std::io::{self, BufRead, BufReader, BufWriter, Read, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
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

/// Lines parsed per batch at most; larger batches are parsed in parallel.
const JSONL_BATCH_LINES: usize = 1024;
const PARALLEL_MIN_BYTES: usize = 256 * 1024;

impl RecordReader {
    /// Opens a path, or stdin for `-`.
    pub fn open(path: &Path) -> Result<RecordReader> {
        RecordReader::open_projected(path, None)
    }

    /// Opens a path (or stdin for `-`); a Parquet input is read by the named
    /// columns only (`None`: all), its records carrying their
    /// [`Record::source_row`] so that a [`crate::columnar::PassThrough`]
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
            Inner::Jsonl { rd, line, done } => {
                if *done {
                    return Ok(None);
                }
                let mut lines: Vec<(u64, Vec<u8>)> = Vec::new();
                let mut bytes = 0usize;
                loop {
                    let mut buf = Vec::new();
                    let n = rd.read_until(b'\n', &mut buf).with_context(|| format!("cannot read `{}`", self.source))?;
                    if n == 0 {
                        *done = true;
                        break;
                    }
                    *line += 1;
                    bytes += n;
                    if buf.iter().all(|b| b.is_ascii_whitespace()) {
                        // Blank lines are not records.
                    } else {
                        if buf.last() == Some(&b'\n') {
                            buf.pop();
                            if buf.last() == Some(&b'\r') {
                                buf.pop();
                            }
                        }
                        lines.push((*line, buf));
                    }
                    if lines.len() >= JSONL_BATCH_LINES {
                        break;
                    }
                    // Stop when no complete line is buffered: never block a pipe for more.
                    if memchr::memchr(b'\n', rd.buffer()).is_none() {
                        break;
                    }
                }
                if lines.is_empty() {
                    return if *done { Ok(None) } else { Ok(Some(Vec::new())) };
                }
                let source = self.source.clone();
                let parse = |(ln, raw): (u64, Vec<u8>)| -> Item {
                    let pos = Pos { source: source.clone(), index: ln, is_row: false };
                    match Record::from_json_slice(&raw) {
                        Ok(r) => Ok((pos, r)),
                        Err(error) => Err(BadRecord { pos, error, raw }),
                    }
                };
                let items: Vec<Item> = if bytes >= PARALLEL_MIN_BYTES && lines.len() > 1 {
                    lines.into_par_iter().map(parse).collect()
                } else {
                    lines.into_iter().map(parse).collect()
                };
                Ok(Some(items))
            }
            Inner::Parquet { src, mask, next } => {
                if *next >= src.num_row_groups() {
                    return Ok(None);
                }
                let take = rayon::current_num_threads().clamp(1, 4).min(src.num_row_groups() - *next);
                let todo: Vec<usize> = (*next..*next + take).collect();
                *next += take;
                let parts: Vec<Result<Vec<Item>>> =
                    todo.par_iter().map(|&rg| read_row_group(src, rg, mask.as_ref())).collect();
                let mut items = Vec::new();
                for p in parts {
                    items.extend(p?);
                }
                Ok(Some(items))
            }
        }
    }
}

/// Decodes one row group into items (rows numbered from its first row).
/// With a projection, each record carries its [`Record::source_row`], and a
/// row that cannot be read is rendered whole for the rejects file.
fn read_row_group(src: &ParquetSource, rg: usize, mask: Option<&ProjectionMask>) -> Result<Vec<Item>> {
    let projected = mask.is_some();
    let batches = src.read(rg, mask.cloned().unwrap_or_else(ProjectionMask::all))?;
    let source = src.name.clone();
    let mut row = src.row_group(rg).0;
    let mut items = Vec::new();
    for batch in batches {
        let rows = schema::from_batch(&batch).map_err(|e| crate::error::data(format!("`{source}`: {e}")))?;
        for (i, r) in rows.into_iter().enumerate() {
            let index = row + i as u64;
            let pos = Pos { source: source.clone(), index, is_row: true };
            items.push(match r {
                Ok(mut r) => {
                    if projected {
                        r.source_row = Some(index);
                    }
                    Ok((pos, r))
                }
                Err(error) => {
                    let raw = if projected {
                        let (b, i) = src.whole_row(index)?;
                        row_json(&b, i)
                    } else {
                        row_json(&batch, i)
                    };
                    Err(BadRecord { pos, error, raw })
                }
            });
        }
        row += batch.num_rows() as u64;
    }
    Ok(items)
}

/// A Parquet row rendered as a JSON object (for the rejects file).
fn row_json(batch: &arrow::record_batch::RecordBatch, row: usize) -> Vec<u8> {
    let mut m = serde_json::Map::new();
    for (i, f) in batch.schema().fields().iter().enumerate() {
        m.insert(f.name().clone(), schema::array_value_to_json(batch.column(i), row));
    }
    serde_json::to_vec(&serde_json::Value::Object(m)).unwrap_or_default()
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

/// A sink of records: JSONL streamed record by record, or Parquet by row group.
pub struct RecordWriter {
    kind: WriterKind,
    count: u64,
}

enum WriterKind {
    Jsonl {
        out: Box<dyn Sink>,
        buf: Vec<u8>,
        flush_each: bool,
    },
    Parquet {
        w: ParquetOut,
        rows: Vec<Record>,
    },
    /// Records from a projected read: see [`PassThrough`].
    PassThrough {
        w: ParquetOut,
        pt: Box<PassThrough>,
    },
}

/// The Parquet side of a [`RecordWriter`]: row groups are encoded (Arrow
/// leaves → compressed column chunks) in parallel, over row groups and over
/// the columns of each, then appended to the file in order. The bytes are the
/// same as a sequential `ArrowWriter` would write with the same properties.
struct ParquetOut {
    file: SerializedFileWriter<Box<dyn Sink>>,
    factory: ArrowRowGroupWriterFactory,
    next_rg: usize,
}

impl ParquetOut {
    fn new(out: Box<dyn Sink>, props: WriterProperties) -> Result<ParquetOut> {
        // ArrowWriter embeds the Arrow schema in the key-value metadata; its
        // lower-level halves then let the columns be encoded on many threads.
        let w = ArrowWriter::try_new(out, schema::schema(), Some(props)).context("creating Parquet writer")?;
        let (file, factory) = w.into_serialized_writer().context("creating Parquet writer")?;
        Ok(ParquetOut { file, factory, next_rg: 0 })
    }

    /// Encodes one row group's records into its column chunks (columns in parallel).
    fn encode(factory: &ArrowRowGroupWriterFactory, rg: usize, rows: &[Record]) -> Result<Vec<ArrowColumnChunk>> {
        let batch = schema::to_batch(rows);
        let all: Vec<usize> = (0..batch.num_columns()).collect();
        Ok(crate::columnar::encode_columns(factory, rg, &batch, &all)?.into_iter().map(|(_, c)| c).collect())
    }

    /// Writes `rows` as row groups of [`PARQUET_ROW_GROUP`] (the last one may be short).
    fn write_rows(&mut self, rows: &[Record]) -> Result<()> {
        let first = self.next_rg;
        let factory = &self.factory;
        let groups: Vec<Vec<ArrowColumnChunk>> = rows
            .par_chunks(PARQUET_ROW_GROUP)
            .enumerate()
            .map(|(i, c)| Self::encode(factory, first + i, c))
            .collect::<Result<_>>()?;
        for chunks in groups {
            let mut rg = self.file.next_row_group()?;
            for c in chunks {
                c.append_to_row_group(&mut rg)?;
            }
            rg.close()?;
            self.next_rg += 1;
        }
        Ok(())
    }

    fn into_inner(self) -> Result<Box<dyn Sink>> {
        Ok(self.file.into_inner()?)
    }
}

/// A byte destination that can be finalised: stdout is flushed, an
/// [`AtomicFile`] is fsynced and renamed into place.
pub trait Sink: Write + Send {
    fn commit(self: Box<Self>) -> Result<()>;
}

/// Standard output, buffered; the tool flushes it after each batch so records stream.
pub struct StdoutSink(BufWriter<io::Stdout>);

impl StdoutSink {
    pub fn new() -> StdoutSink {
        StdoutSink(BufWriter::with_capacity(1 << 16, io::stdout()))
    }
}

impl Default for StdoutSink {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for StdoutSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl Sink for StdoutSink {
    fn commit(mut self: Box<Self>) -> Result<()> {
        self.0.flush()?;
        Ok(())
    }
}

impl Sink for Vec<u8> {
    fn commit(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

pub use crate::columnar::PARQUET_ROW_GROUP;

impl RecordWriter {
    /// Wraps a byte stream. `flush_each` flushes after every record (for pipes,
    /// so the next stage sees records as they are produced).
    pub fn new(out: Box<dyn Sink>, format: Format, flush_each: bool) -> Result<RecordWriter> {
        let kind = match format {
            Format::Jsonl => WriterKind::Jsonl { out, buf: Vec::with_capacity(1 << 16), flush_each },
            Format::Parquet => WriterKind::Parquet {
                w: ParquetOut::new(out, parquet_props())?,
                rows: Vec::with_capacity(PARQUET_ROW_GROUP),
            },
        };
        Ok(RecordWriter { kind, count: 0 })
    }

    /// A Parquet writer for the records of a projected read of `pt`'s
    /// source: the columns the tool did not read come from that source.
    pub fn pass_through(out: Box<dyn Sink>, pt: PassThrough) -> Result<RecordWriter> {
        let w = ParquetOut::new(out, parquet_props())?;
        Ok(RecordWriter { kind: WriterKind::PassThrough { w, pt: Box::new(pt) }, count: 0 })
    }

    pub fn write(&mut self, r: &Record) -> Result<()> {
        if let WriterKind::PassThrough { .. } = self.kind {
            return self.write_owned(r.clone());
        }
        self.count += 1;
        match &mut self.kind {
            WriterKind::Jsonl { out, buf, flush_each } => {
                buf.clear();
                r.to_json_vec(buf);
                buf.push(b'\n');
                out.write_all(buf)?;
                if *flush_each {
                    out.flush()?;
                }
            }
            WriterKind::Parquet { w, rows } => {
                rows.push(r.clone());
                if rows.len() >= PARQUET_ROW_GROUP {
                    w.write_rows(rows)?;
                    rows.clear();
                }
            }
            WriterKind::PassThrough { .. } => unreachable!("handled above"),
        }
        Ok(())
    }

    /// Writes an owned record (avoids a clone for Parquet).
    pub fn write_owned(&mut self, r: Record) -> Result<()> {
        match &mut self.kind {
            WriterKind::Parquet { w, rows } => {
                self.count += 1;
                rows.push(r);
                if rows.len() >= PARQUET_ROW_GROUP {
                    w.write_rows(rows)?;
                    rows.clear();
                }
                Ok(())
            }
            WriterKind::PassThrough { w, pt } => {
                self.count += 1;
                pt.push(r)?;
                pt.write(&mut w.file, &w.factory, &mut w.next_rg, false)
            }
            _ => self.write(&r),
        }
    }

    /// Writes many records; Parquet batches are converted in parallel.
    pub fn write_all(&mut self, recs: Vec<Record>) -> Result<()> {
        match &mut self.kind {
            WriterKind::Jsonl { out, flush_each, .. } if recs.len() > 64 => {
                self.count += recs.len() as u64;
                let chunks: Vec<Vec<u8>> = recs
                    .par_chunks(256)
                    .map(|c| {
                        let mut b = Vec::with_capacity(c.len() * 1024);
                        for r in c {
                            r.to_json_vec(&mut b);
                            b.push(b'\n');
                        }
                        b
                    })
                    .collect();
                for c in chunks {
                    out.write_all(&c)?;
                }
                if *flush_each {
                    out.flush()?;
                }
                Ok(())
            }
            WriterKind::Parquet { w, rows } => {
                self.count += recs.len() as u64;
                rows.extend(recs);
                if rows.len() >= PARQUET_ROW_GROUP {
                    let full = rows.len() / PARQUET_ROW_GROUP * PARQUET_ROW_GROUP;
                    w.write_rows(&rows[..full])?;
                    rows.drain(..full);
                }
                Ok(())
            }
            WriterKind::PassThrough { w, pt } => {
                self.count += recs.len() as u64;
                for r in recs {
                    pt.push(r)?;
                }
                pt.write(&mut w.file, &w.factory, &mut w.next_rg, false)
            }
            _ => {
                for r in recs {
                    self.write_owned(r)?;
                }
                Ok(())
            }
        }
    }

    pub fn flush(&mut self) -> Result<()> {
        match &mut self.kind {
            WriterKind::Jsonl { out, .. } => out.flush()?,
            WriterKind::Parquet { .. } | WriterKind::PassThrough { .. } => {}
        }
        Ok(())
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Flushes everything, writes the Parquet footer, and commits the sink
    /// (for a file: the whole file appears under its name only now).
    pub fn finish(self) -> Result<()> {
        let out = match self.kind {
            WriterKind::Jsonl { out, .. } => out,
            WriterKind::Parquet { mut w, rows } => {
                if !rows.is_empty() {
                    w.write_rows(&rows)?;
                }
                w.into_inner()?
            }
            WriterKind::PassThrough { mut w, mut pt } => {
                pt.write(&mut w.file, &w.factory, &mut w.next_rg, true)?;
                w.into_inner()?
            }
        };
        out.commit()
    }
}

/// How arl writes Parquet: zstd level 1, row groups of [`PARQUET_ROW_GROUP`]
/// rows, the schema version in the key-value metadata, chunk statistics only.
fn parquet_props() -> WriterProperties {
    let mut props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).expect("valid level")))
        // Page-level statistics of per-token columns cost time and help no reader.
        .set_statistics_enabled(parquet::file::properties::EnabledStatistics::Chunk)
        .set_max_row_group_row_count(Some(PARQUET_ROW_GROUP))
        .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
            schema::SCHEMA_VERSION_KEY.to_string(),
            schema::SCHEMA_VERSION.to_string(),
        )]));
    // Per-token numbers are high-cardinality: a dictionary attempt is
    // wasted work, and their min/max helps no reader's pruning. Their pages
    // are smaller than the default, so that a filter copies most of them.
    for (name, kind) in crate::record::FIELDS {
        use crate::record::FieldKind as K;
        if matches!(kind, K::ListU32 | K::ListU8 | K::ListF32) {
            let path = parquet::schema::types::ColumnPath::from(vec![
                name.to_string(),
                "list".to_string(),
                "item".to_string(),
            ]);
            props = props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_data_page_size_limit(path.clone(), crate::columnar::LIST_PAGE_BYTES)
                .set_column_statistics_enabled(path, parquet::file::properties::EnabledStatistics::None);
        }
    }
    props.build()
}

/// A file that appears whole or not at all: written under a temporary name in
/// the same directory, then fsynced and renamed over the target on commit.
/// Dropped without commit (an error, a panic), it removes the temporary.
/// A target that exists and is not a regular file (`/dev/null`, a FIFO) is
/// written in place: renaming over it would replace the device with a file.
pub struct AtomicFile {
    /// Empty when writing in place.
    tmp: PathBuf,
    dest: PathBuf,
    file: BufWriter<File>,
    committed: bool,
    /// Bytes handed to the file, and how far write-back has been started.
    written: u64,
    kicked: u64,
}

/// Write-back of a large output is started every this many bytes, so that
/// the disk writes while the tool computes and the final fsync has little
/// left to wait for.
const WRITEBACK_EVERY: u64 = 32 << 20;

impl AtomicFile {
    pub fn create(dest: &Path) -> Result<AtomicFile> {
        if let Ok(m) = std::fs::metadata(dest) {
            if !m.is_file() && !m.is_dir() {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(dest)
                    .with_context(|| format!("cannot open `{}`", dest.display()))?;
                return Ok(AtomicFile {
                    tmp: PathBuf::new(),
                    dest: dest.to_path_buf(),
                    file: BufWriter::with_capacity(1 << 16, f),
                    committed: false,
                    written: 0,
                    kicked: 0,
                });
            }
        }
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = dest.file_name().with_context(|| format!("`{}` is not a file path", dest.display()))?;
        remove_stale_temps(&dir, &format!(".{}.tmp.", name.to_string_lossy()));
        let tmp = dir.join(format!(".{}.tmp.{}", name.to_string_lossy(), std::process::id()));
        let f = File::create(&tmp).with_context(|| format!("cannot create `{}`", tmp.display()))?;
        Ok(AtomicFile {
            tmp,
            dest: dest.to_path_buf(),
            file: BufWriter::with_capacity(1 << 20, f),
            committed: false,
            written: 0,
            kicked: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dest
    }

    /// Flushes, fsyncs and renames the file into place (and fsyncs the directory).
    pub fn finish(mut self) -> Result<()> {
        let ctx = || format!("cannot write `{}`", self.dest.display());
        self.file.flush().with_context(ctx)?;
        if self.tmp.as_os_str().is_empty() {
            self.committed = true;
            return Ok(());
        }
        self.file.get_ref().sync_all().with_context(ctx)?;
        std::fs::rename(&self.tmp, &self.dest)
            .with_context(|| format!("cannot rename `{}` to `{}`", self.tmp.display(), self.dest.display()))?;
        self.committed = true;
        if let Some(dir) = self.dest.parent() {
            let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if !self.tmp.as_os_str().is_empty() && self.written - self.kicked >= WRITEBACK_EVERY {
            // What reached the file (not what the buffer still holds).
            let upto = self.written - self.file.buffer().len() as u64;
            if upto > self.kicked {
                use std::os::fd::AsRawFd;
                // SAFETY: a valid descriptor and range; this only starts
                // write-back (it neither waits nor changes the file).
                unsafe {
                    libc::sync_file_range(
                        self.file.get_ref().as_raw_fd(),
                        self.kicked as libc::off64_t,
                        (upto - self.kicked) as libc::off64_t,
                        libc::SYNC_FILE_RANGE_WRITE,
                    );
                }
                self.kicked = upto;
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Sink for AtomicFile {
    fn commit(self: Box<Self>) -> Result<()> {
        (*self).finish()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed && !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Whether process `pid` exists (it may belong to another user).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(p, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes what killed writers left in `dir`: entries named `PREFIX<pid>…`
/// (a temporary file or directory of an atomic write) whose process is gone.
/// A `kill -9` skips every destructor, so without this each crash during a
/// write would leave its temporary behind (a whole checkpoint, for
/// `arl-train`). Entries of live processes, or without a pid, are kept.
/// Pids are this host's: two hosts writing the same name on a shared
/// filesystem could remove each other's temporaries (they would also race
/// for the name itself).
pub fn remove_stale_temps(dir: &Path, prefix: &str) {
    for p in dead_writers(dir, prefix) {
        let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
    }
}

/// The entries of `dir` named `PREFIX<pid>…` whose process is gone.
pub fn dead_writers(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else { return false };
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().is_ok_and(|pid| pid != std::process::id() && !pid_alive(pid))
        })
        .map(|e| e.path())
        .collect()
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_temps_of_dead_writers_are_removed_and_live_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        // 999999999 is above any Linux pid_max: that writer is gone.
        let dead = d.path().join(".out.jsonl.tmp.999999999");
        let own = d.path().join(format!(".out.jsonl.tmp.{}", std::process::id()));
        let init = d.path().join(".out.jsonl.tmp.1");
        let dead_dir = d.path().join(".out.jsonl.tmp.999999998-x");
        let other = d.path().join(".other.tmp.999999999");
        for p in [&dead, &own, &init, &other] {
            std::fs::write(p, b"x").unwrap();
        }
        std::fs::create_dir(&dead_dir).unwrap();
        std::fs::write(dead_dir.join("f"), b"x").unwrap();
        remove_stale_temps(d.path(), ".out.jsonl.tmp.");
        assert!(!dead.exists() && !dead_dir.exists());
        assert!(own.exists() && init.exists() && other.exists());
    }

    #[test]
    fn atomic_file_writes_into_a_fifo_instead_of_replacing_it() {
        use std::os::unix::fs::FileTypeExt;
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = {
            let p = fifo.clone();
            std::thread::spawn(move || std::fs::read(p).unwrap())
        };
        let mut f = AtomicFile::create(&fifo).unwrap();
        f.write_all(b"{}\n").unwrap();
        f.finish().unwrap();
        assert_eq!(reader.join().unwrap(), b"{}\n");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced by a file");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1, "no temporary left");
    }

    #[test]
    fn atomic_file_appears_only_when_finished() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("out.jsonl");
        let mut f = AtomicFile::create(&dest).unwrap();
        f.write_all(b"{}\n").unwrap();
        assert!(!dest.exists());
        f.finish().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"{}\n");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }
}
