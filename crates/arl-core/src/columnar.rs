//! Parquet by columns: a tool reads only the columns it needs, and the
//! columns it does not change reach its output without being decoded.
//!
//! * [`ParquetSource`] is an open Parquet input: a regular file read with
//!   positioned reads (only the column chunks asked for are ever read, so
//!   memory is bounded by a row group, not the file), or bytes in memory for a
//!   pipe. It reads row groups with a projection, and tells whether the file's
//!   columns are exactly the ones arl writes ([`ParquetSource::passes_through`]).
//! * [`PassThrough`] writes a tool's output from the records the tool
//!   produced out of a projected read (each carrying its
//!   [`Record::source_row`]). The columns the tool sets are encoded from the
//!   records; every other column comes from the input: where an output row
//!   group is exactly an input row group (same rows, same order), its encoded
//!   column chunks are copied byte for byte (no decoding, no encoding);
//!   where an output row group is an input row group with rows dropped (a
//!   filter's), the per-token columns are [spliced](splice): the pages that
//!   hold no dropped row are copied as they are, only the others decoded and
//!   encoded again; otherwise (rows reordered, drawn from several row groups)
//!   the input row groups involved are decoded and the rows `interleave`d as
//!   Arrow arrays, then encoded.
//!
//! A column chunk copied without decoding is not checked: Parquet pages
//! written by arl (and by most writers) carry no checksum, so a corrupt chunk
//! in a column the tool never reads reaches the output as it was, and the
//! first reader of that column fails on it (cleanly: exit 65 naming the file
//! and row, as for any corrupt Parquet).
use crate::error::DataError;
use crate::record::Record;
use crate::schema;
use anyhow::{Context, Result};
use arrow::array::{Array, ArrayRef};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowRowGroupWriterFactory};
use parquet::arrow::{ArrowSchemaConverter, ProjectionMask};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::writer::SerializedFileWriter;
use rayon::prelude::*;
use std::collections::VecDeque;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

mod splice;
pub use splice::{PAGES_COPIED, PAGES_ENCODED};

/// Rows per Parquet row group written (and per Arrow batch written).
pub const PARQUET_ROW_GROUP: usize = 4096;

/// The data page size of the per-token list columns arl writes: small
/// enough that a filter's dropped rows leave most pages of a row group
/// untouched (they are copied, not encoded again), large enough that zstd
/// compresses as well as with the default 1 MiB pages.
pub const LIST_PAGE_BYTES: usize = 256 << 10;

/// Records added to a pass-through writer between two looks for ready row
/// groups (what it holds back at most beyond them).
const SCAN_EVERY: usize = 256;

/// Rows per Arrow batch when decoding.
const BATCH_ROWS: usize = 1024;

/// The bytes of a Parquet input: a file read with `pread` (threads read
/// different chunks at once without sharing a file offset), or memory.
#[derive(Clone)]
pub enum Chunks {
    File(Arc<File>, u64),
    Mem(Bytes),
}

impl Length for Chunks {
    fn len(&self) -> u64 {
        match self {
            Chunks::File(_, n) => *n,
            Chunks::Mem(b) => b.len() as u64,
        }
    }
}

/// A sequential reader over [`Chunks`] from an offset (a file is read in
/// blocks of 1 MiB: copying a column chunk reads it sequentially).
pub enum ChunkRead {
    File(std::io::BufReader<Pread>),
    Mem(bytes::buf::Reader<Bytes>),
}

/// Positioned reads from a shared file.
pub struct Pread {
    f: Arc<File>,
    pos: u64,
}

impl Read for Pread {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.f.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Read for ChunkRead {
    /// A read past the end of the data is an error, not `Ok(0)`: the parquet
    /// crate's page-header parser skips unknown Thrift fields with
    /// `io::copy`, which takes `Ok(0)` for a skip done, so a malformed header
    /// declaring a list of 2³¹ eight-byte elements past the end would spin
    /// through all of them (tens of seconds for a 7 KB file, found by
    /// fuzzing); every legitimate read of a column chunk stays inside it.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = match self {
            ChunkRead::File(r) => r.read(buf)?,
            ChunkRead::Mem(r) => r.read(buf)?,
        };
        if n == 0 && !buf.is_empty() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "read past the end of the Parquet data",
            ));
        }
        Ok(n)
    }
}

impl ChunkReader for Chunks {
    type T = ChunkRead;

    fn get_read(&self, start: u64) -> parquet::errors::Result<ChunkRead> {
        match self {
            Chunks::File(f, _) => {
                Ok(ChunkRead::File(std::io::BufReader::with_capacity(1 << 20, Pread { f: f.clone(), pos: start })))
            }
            Chunks::Mem(b) => {
                let start = usize::try_from(start).ok().filter(|&s| s <= b.len()).ok_or_else(|| {
                    parquet::errors::ParquetError::EOF(format!("offset {start} is past the end ({} bytes)", b.len()))
                })?;
                Ok(ChunkRead::Mem(bytes::Buf::reader(b.slice(start..))))
            }
        }
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let end = start.checked_add(length as u64).filter(|&e| e <= self.len()).ok_or_else(|| {
            parquet::errors::ParquetError::EOF(format!(
                "{length} bytes at offset {start} are past the end ({} bytes)",
                self.len()
            ))
        })?;
        match self {
            Chunks::File(f, _) => {
                let mut buf = vec![0u8; length];
                f.read_exact_at(&mut buf, start)?;
                Ok(Bytes::from(buf))
            }
            Chunks::Mem(b) => Ok(b.slice(start as usize..end as usize)),
        }
    }
}

/// An open Parquet input.
pub struct ParquetSource {
    pub name: Arc<str>,
    chunks: Chunks,
    meta: ArrowReaderMetadata,
    /// (first row, rows) of each row group.
    row_groups: Vec<(u64, usize)>,
    passes_through: bool,
    /// The last row group decoded whole (rejects and `interleave` read rows
    /// near each other).
    cache: Mutex<Option<(usize, RecordBatch)>>,
}

impl ParquetSource {
    /// Opens Parquet held in memory (a pipe's whole content).
    pub fn from_bytes(name: &str, bytes: Bytes) -> Result<ParquetSource> {
        ParquetSource::new(name, Chunks::Mem(bytes))
    }

    /// Opens a regular file without reading it: column chunks are read when
    /// asked for.
    pub fn from_file(path: &Path, f: File) -> Result<ParquetSource> {
        let name = path.display().to_string();
        let len = f.metadata().with_context(|| format!("cannot read `{name}`"))?.len();
        ParquetSource::new(&name, Chunks::File(Arc::new(f), len))
    }

    fn new(name: &str, chunks: Chunks) -> Result<ParquetSource> {
        let meta = guard(name, || {
            // The offset index (where each page starts, and its first row), where the
            // file has one: pages that keep all their rows are copied by it. A
            // corrupt one is left out (the data is read as without one).
            let opts =
                ArrowReaderOptions::new().with_offset_index_policy(parquet::file::metadata::PageIndexPolicy::Optional);
            ArrowReaderMetadata::load(&chunks, opts)
                .or_else(|_| ArrowReaderMetadata::load(&chunks, ArrowReaderOptions::new()))
                .with_context(|| DataError(format!("`{name}`: not a readable Parquet file")))
        })?;
        let mut row_groups = Vec::new();
        let mut first = 0u64;
        for rg in meta.metadata().row_groups() {
            let n = usize::try_from(rg.num_rows())
                .map_err(|_| crate::error::data(format!("`{name}`: a row group has {} rows", rg.num_rows())))?;
            row_groups.push((first, n));
            first += n as u64;
        }
        let passes_through = same_columns_as_arl(&meta);
        Ok(ParquetSource { name: name.into(), chunks, meta, row_groups, passes_through, cache: Mutex::new(None) })
    }

    /// Whether the file's columns are exactly arl's (names, types, order):
    /// then its column chunks can be copied into an arl output unchanged.
    pub fn passes_through(&self) -> bool {
        self.passes_through
    }

    pub fn schema(&self) -> &SchemaRef {
        self.meta.schema()
    }

    pub fn num_row_groups(&self) -> usize {
        self.row_groups.len()
    }

    /// (first row, rows) of row group `rg`.
    pub fn row_group(&self, rg: usize) -> (u64, usize) {
        self.row_groups[rg]
    }

    /// The row group holding `row`.
    pub fn row_group_of(&self, row: u64) -> Option<usize> {
        let i = self.row_groups.partition_point(|&(first, _)| first <= row);
        (i > 0 && row < self.row_groups[i - 1].0 + self.row_groups[i - 1].1 as u64).then(|| i - 1)
    }

    /// The projection onto the named top-level columns the file has (names it
    /// lacks are left out: those fields read as absent).
    pub fn projection(&self, names: &[&str]) -> ProjectionMask {
        let idx: Vec<usize> = self
            .schema()
            .fields()
            .iter()
            .enumerate()
            .filter(|(_, f)| names.contains(&f.name().as_str()))
            .map(|(i, _)| i)
            .collect();
        ProjectionMask::roots(self.meta.parquet_schema(), idx)
    }

    /// Decodes row group `rg`, the columns of `mask` only, as batches of
    /// `BATCH_ROWS` rows.
    pub fn read(&self, rg: usize, mask: ProjectionMask) -> Result<Vec<RecordBatch>> {
        self.read_batched(rg, mask, BATCH_ROWS)
    }

    fn read_batched(&self, rg: usize, mask: ProjectionMask, batch_rows: usize) -> Result<Vec<RecordBatch>> {
        guard(&self.name, || {
            let rd = ParquetRecordBatchReaderBuilder::new_with_metadata(self.chunks.clone(), self.meta.clone())
                .with_row_groups(vec![rg])
                .with_projection(mask)
                .with_batch_size(batch_rows)
                .build()
                .with_context(|| DataError(format!("`{}`: cannot read Parquet row group {rg}", self.name)))?;
            let mut row = self.row_groups[rg].0;
            let mut out = Vec::new();
            for b in rd {
                let b =
                    b.with_context(|| DataError(format!("`{}`: corrupt Parquet data near row {row}", self.name)))?;
                row += b.num_rows() as u64;
                out.push(b);
            }
            Ok(out)
        })
    }

    /// Row group `rg`, every column, as one batch (cached: the last one read).
    pub fn read_whole(&self, rg: usize) -> Result<RecordBatch> {
        if let Some((g, b)) = &*self.cache.lock().expect("cache lock") {
            if *g == rg {
                return Ok(b.clone());
            }
        }
        let batches = self.read_batched(rg, ProjectionMask::all(), self.row_groups[rg].1.max(1))?;
        let b = match <[RecordBatch; 1]>::try_from(batches) {
            Ok([one]) => one,
            Err(many) => arrow::compute::concat_batches(self.schema(), &many)?,
        };
        *self.cache.lock().expect("cache lock") = Some((rg, b.clone()));
        Ok(b)
    }

    /// Row `row` with every column (for a rejects file).
    pub fn whole_row(&self, row: u64) -> Result<(RecordBatch, usize)> {
        let rg = self.row_group_of(row).with_context(|| format!("`{}` has no row {row}", self.name))?;
        Ok((self.read_whole(rg)?, (row - self.row_groups[rg].0) as usize))
    }

    /// The whole record at `row` (every column decoded), for a rejects file.
    pub fn whole_record(&self, row: u64) -> Result<Record> {
        let (b, i) = self.whole_row(row)?;
        let one = b.slice(i, 1);
        let rows = schema::from_batch(&one).map_err(|e| crate::error::data(format!("`{}`: {e}", self.name)))?;
        match rows.into_iter().next() {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => Err(crate::error::data(format!("`{}`: row {row}: {e}", self.name))),
            None => Err(crate::error::data(format!("`{}` has no row {row}", self.name))),
        }
    }

    /// The encoded bytes of column `name` in row group `rg` (as stored:
    /// compressed pages with their headers).
    pub fn column_chunk_bytes(&self, rg: usize, name: &str) -> Result<Bytes> {
        let col = self.schema().index_of(name)?;
        let c = self.meta.metadata().row_group(rg).column(col);
        let start = c.dictionary_page_offset().unwrap_or_else(|| c.data_page_offset());
        Ok(self.chunks.get_bytes(start as u64, c.compressed_size() as usize)?)
    }

    /// The file's key-value metadata.
    pub fn key_value(&self, key: &str) -> Option<String> {
        let kv = self.meta.metadata().file_metadata().key_value_metadata()?;
        kv.iter().find(|k| k.key == key).and_then(|k| k.value.clone())
    }

    /// The encoded column chunk `col` of row group `rg`, as the writer takes it.
    fn chunk(&self, rg: usize, col: usize) -> ColumnCloseResult {
        let md = self.meta.metadata();
        let r = md.row_group(rg);
        let c = r.column(col).clone();
        ColumnCloseResult {
            bytes_written: c.compressed_size() as u64,
            rows_written: r.num_rows() as u64,
            metadata: c,
            bloom_filter: None,
            column_index: None,
            // Kept (its offsets moved to the output's): the next tool can splice by it too.
            offset_index: md.page_index().and_then(|p| p.offset_index(rg, col)).cloned(),
        }
    }
}

/// Whether the Parquet columns of `meta` are exactly those arl writes.
fn same_columns_as_arl(meta: &ArrowReaderMetadata) -> bool {
    let Ok(ours) = ArrowSchemaConverter::new().convert(&schema::schema()) else { return false };
    let theirs = meta.parquet_schema();
    let arrow_same = meta.schema().fields().len() == schema::schema().fields().len()
        && meta
            .schema()
            .fields()
            .iter()
            .zip(schema::schema().fields())
            .all(|(a, b)| a.name() == b.name() && a.data_type() == b.data_type());
    arrow_same
        && theirs.num_columns() == ours.num_columns()
        && (0..ours.num_columns()).all(|i| theirs.column(i).as_ref() == ours.column(i).as_ref())
}

/// Runs Parquet decoding with a panic in the decoder turned into an error:
/// arrow/parquet assert on some corrupt files (found by fuzzing,
/// fuzz/fuzz_targets/parquet_reader.rs), which would abort the whole tool.
pub(crate) fn guard<T>(source: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    thread_local!(static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) });
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    // The panic becomes an error message: keep the default hook from also
    // printing it (with a backtrace) for panics inside a guard.
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !GUARDED.with(|g| g.get()) {
                previous(info);
            }
        }));
    });
    let was = GUARDED.with(|g| g.replace(true));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    GUARDED.with(|g| g.set(was));
    match result {
        Ok(r) => r,
        Err(p) => {
            let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
            Err(crate::error::data(format!(
                "`{source}`: corrupt Parquet data (the decoder failed: {})",
                msg.as_deref().unwrap_or("panic")
            )))
        }
    }
}

/// Encodes the columns `which` (indices into arl's schema) of `batch`, in
/// parallel, as the column chunks of row group `rg`.
pub(crate) fn encode_columns(
    factory: &ArrowRowGroupWriterFactory,
    rg: usize,
    batch: &RecordBatch,
    which: &[usize],
) -> Result<Vec<(usize, ArrowColumnChunk)>> {
    encode_arrays(factory, rg, which.iter().map(|&i| (i, batch.column(i).clone())).collect())
}

/// Encodes `cols` (index in arl's schema, array), in parallel, as column
/// chunks of row group `rg`.
fn encode_arrays(
    factory: &ArrowRowGroupWriterFactory,
    rg: usize,
    cols: Vec<(usize, ArrayRef)>,
) -> Result<Vec<(usize, ArrowColumnChunk)>> {
    let mut writers: Vec<_> = factory.create_column_writers(rg)?.into_iter().map(Some).collect();
    // Every field of arl's schema is one Parquet leaf (lists of primitives).
    let fields = schema::schema();
    debug_assert_eq!(writers.len(), fields.fields().len());
    let mut jobs = Vec::with_capacity(cols.len());
    for (i, a) in cols {
        let leaves = compute_leaves(fields.field(i), &a)?;
        let w = writers.get_mut(i).and_then(Option::take).context("one writer per column")?;
        jobs.push((i, w, leaves));
    }
    jobs.into_par_iter()
        .map(|(i, mut w, leaves)| {
            for leaf in &leaves {
                w.write(leaf)?;
            }
            Ok((i, w.close()?))
        })
        .collect::<parquet::errors::Result<Vec<_>>>()
        .map_err(Into::into)
}

/// The writing half of a projected read: see the module documentation.
pub struct PassThrough {
    src: Arc<ParquetSource>,
    /// Indices (in arl's schema) of the columns the tool sets.
    writes: Vec<usize>,
    /// Records waiting for their row group, in output order.
    pending: VecDeque<Record>,
    /// Row groups ready to be written.
    queue: Vec<Out>,
    /// Records are looked at for row groups again only once `pending` has
    /// this many (a scan per record would be quadratic in a row group).
    scan_at: usize,
}

impl PassThrough {
    /// `writes`: the fields the tool sets (taken from its records); every
    /// other column comes from `src`, which must [pass through](ParquetSource::passes_through).
    pub fn new(src: Arc<ParquetSource>, writes: &[&str]) -> Result<PassThrough> {
        anyhow::ensure!(src.passes_through(), "`{}`: its columns are not arl's; read it whole", src.name);
        let fields = schema::schema();
        let mut idx = Vec::new();
        for w in writes {
            idx.push(fields.index_of(w).with_context(|| format!("`{w}` is not a field of the record"))?);
        }
        idx.sort_unstable();
        // Row groups are decoded and encoded in buffers of the same sizes
        // again and again: reuse them rather than have the kernel zero fresh
        // pages each time (the memory held stays that of a few row groups).
        crate::alloc::keep_freed_memory();
        Ok(PassThrough { src, writes: idx, pending: VecDeque::new(), queue: Vec::new(), scan_at: 0 })
    }

    /// Queues a record (read by a projected read of this writer's source).
    pub fn push(&mut self, r: Record) -> Result<()> {
        anyhow::ensure!(
            r.source_row.is_some(),
            "internal: a record without its source row reached a pass-through writer"
        );
        self.pending.push_back(r);
        Ok(())
    }

    /// The row groups ready to be written: records are held until they make
    /// up a whole input row group (copied), or until it is clear that they
    /// cannot (written by rows, at most `PARQUET_ROW_GROUP` per
    /// row group). `last`: the input has ended; write everything.
    fn ready(&mut self, last: bool) -> Vec<Out> {
        let mut out = Vec::new();
        while let Some(front) = self.pending.front() {
            let row = front.source_row.expect("checked on push");
            let is_start =
                |src: &ParquetSource, row: u64| src.row_group_of(row).is_some_and(|g| src.row_group(g).0 == row);
            if let Some(g) = self.src.row_group_of(row) {
                let (first, n) = self.src.row_group(g);
                if row == first {
                    let run = self
                        .pending
                        .iter()
                        .take(n)
                        .enumerate()
                        .take_while(|(k, r)| r.source_row == Some(first + *k as u64))
                        .count();
                    if run == n {
                        out.push(Out::Copy(g, self.pending.drain(..n).collect()));
                        continue;
                    }
                    if run == self.pending.len() && !last {
                        break;
                    }
                }
            }
            // Rows: up to the next row that starts a row group (which may be
            // copied whole), or, while the rows are in order, to the next
            // input row group (a filter's rows of one row group are spliced).
            let g0 = self.src.row_group_of(row);
            let mut in_order = true;
            let mut k = 1;
            while k < self.pending.len()
                && k < PARQUET_ROW_GROUP
                && !self.pending[k].source_row.is_some_and(|r| is_start(&self.src, r))
            {
                let (prev, next) = (self.pending[k - 1].source_row, self.pending[k].source_row);
                in_order &= next > prev;
                if in_order && next.and_then(|r| self.src.row_group_of(r)) != g0 {
                    break;
                }
                k += 1;
            }
            if k == self.pending.len() && k < PARQUET_ROW_GROUP && !last {
                break;
            }
            out.push(Out::Rows(self.pending.drain(..k).collect()));
        }
        out
    }

    /// Writes what is ready to `file`: the row groups are encoded in
    /// parallel (rebuilt ones decoded in parallel too), then appended in order.
    pub(crate) fn write<W: std::io::Write + Send>(
        &mut self,
        file: &mut SerializedFileWriter<W>,
        factory: &ArrowRowGroupWriterFactory,
        next_rg: &mut usize,
        last: bool,
    ) -> Result<()> {
        if !last && self.pending.len() < self.scan_at {
            return Ok(());
        }
        let ready = self.ready(last);
        self.scan_at = self.pending.len() + SCAN_EVERY;
        self.queue.extend(ready);
        // Several row groups at a time, so that they are built in parallel.
        if self.queue.is_empty() || (!last && self.queue.len() < rayon::current_num_threads().max(2)) {
            return Ok(());
        }
        let outs = std::mem::take(&mut self.queue);
        let first = *next_rg;
        let encoded: Vec<(Option<usize>, Vec<(usize, Chunk)>)> = outs
            .into_par_iter()
            .enumerate()
            .map(|(k, o)| match o {
                Out::Copy(g, recs) => {
                    let batch = schema::to_batch(&recs);
                    Ok((Some(g), encoded(encode_columns(factory, first + k, &batch, &self.writes)?)))
                }
                Out::Rows(recs) => {
                    if let Some(g) = self.one_group_in_order(&recs) {
                        return Ok((None, self.spliced(factory, first + k, g, &recs)?));
                    }
                    let batch = self.rows_batch(&recs)?;
                    let all: Vec<usize> = (0..batch.num_columns()).collect();
                    Ok((None, encoded(encode_columns(factory, first + k, &batch, &all)?)))
                }
            })
            .collect::<Result<_>>()?;
        let columns = schema::schema().fields().len();
        for (copy, chunks) in encoded {
            let mut new = chunks.into_iter().peekable();
            let mut w = file.next_row_group()?;
            for col in 0..columns {
                match (new.peek(), copy) {
                    (Some((i, _)), _) if *i == col => match new.next().expect("peeked").1 {
                        Chunk::Encoded(c) => c.append_to_row_group(&mut w)?,
                        Chunk::Spliced(s) => w.append_column(&s.bytes, s.close)?,
                    },
                    (_, Some(g)) => w
                        .append_column(&self.src.chunks, self.src.chunk(g, col))
                        .with_context(|| format!("copying column {col} of row group {g} of `{}`", self.src.name))?,
                    (_, None) => anyhow::bail!("internal: column {col} of a rebuilt row group was not encoded"),
                }
            }
            w.close()?;
            *next_rg += 1;
        }
        Ok(())
    }

    /// The input row group all of `recs` come from, in order (a filter's
    /// rows), where the file has an offset index to splice its chunks by.
    fn one_group_in_order(&self, recs: &[Record]) -> Option<usize> {
        self.src.meta.metadata().page_index().filter(|p| p.has_offset_indexes())?;
        let rows: Vec<u64> = recs.iter().map(|r| r.source_row).collect::<Option<_>>()?;
        let g = self.src.row_group_of(*rows.first()?)?;
        let (first, n) = self.src.row_group(g);
        (rows.windows(2).all(|w| w[0] < w[1]) && *rows.last()? < first + n as u64).then_some(g)
    }

    /// The column chunks of row group `rg` holding `recs`, the rows of input
    /// row group `g` in order: the tool's columns encoded from the records,
    /// the per-token columns spliced from the input's pages, the rest (and
    /// any chunk that cannot be spliced) decoded, filtered and encoded.
    fn spliced(
        &self,
        factory: &ArrowRowGroupWriterFactory,
        rg: usize,
        g: usize,
        recs: &[Record],
    ) -> Result<Vec<(usize, Chunk)>> {
        let (first, n) = self.src.row_group(g);
        let mut keep = vec![false; n];
        for r in recs {
            keep[(r.source_row.expect("checked on push") - first) as usize] = true;
        }
        let fields = schema::schema();
        let lists: Vec<usize> = (0..fields.fields().len())
            .filter(|c| !self.writes.contains(c))
            .filter(|&c| {
                crate::record::FIELDS.iter().any(|(name, kind)| {
                    name == fields.field(c).name()
                        && matches!(
                            kind,
                            crate::record::FieldKind::ListU32
                                | crate::record::FieldKind::ListU8
                                | crate::record::FieldKind::ListF32
                        )
                })
            })
            .collect();
        let spliced: Vec<(usize, Option<splice::Spliced>)> = lists
            .par_iter()
            .map(|&c| Ok((c, splice::splice_chunk(&self.src, g, c, &keep, LIST_PAGE_BYTES)?)))
            .collect::<Result<_>>()?;
        let done: Vec<usize> = spliced.iter().filter(|(_, s)| s.is_some()).map(|(c, _)| *c).collect();
        let rest: Vec<usize> =
            (0..fields.fields().len()).filter(|c| !self.writes.contains(c) && !done.contains(c)).collect();
        let mut cols: Vec<(usize, ArrayRef)> = Vec::new();
        if !self.writes.is_empty() {
            let ours = schema::to_batch(recs);
            cols.extend(self.writes.iter().map(|&c| (c, ours.column(c).clone())));
        }
        if !rest.is_empty() {
            let mask = ProjectionMask::roots(self.src.meta.parquet_schema(), rest.iter().copied());
            let batches = self.read_batched_checked(g, mask, n)?;
            let b = match <[RecordBatch; 1]>::try_from(batches) {
                Ok([one]) => one,
                Err(many) => arrow::compute::concat_batches(&many[0].schema(), &many)?,
            };
            let keep = arrow::array::BooleanArray::from(keep);
            let filtered: Vec<(usize, ArrayRef)> = rest
                .par_iter()
                .enumerate()
                .map(|(k, &c)| Ok((c, arrow::compute::filter(b.column(k), &keep)?)))
                .collect::<Result<_>>()?;
            cols.extend(filtered);
        }
        let mut out = encoded(encode_arrays(factory, rg, cols)?);
        out.extend(spliced.into_iter().filter_map(|(c, s)| Some((c, Chunk::Spliced(s?)))));
        out.sort_by_key(|(c, _)| *c);
        Ok(out)
    }

    /// Row group `g`'s columns of `mask` as batches, at least one.
    fn read_batched_checked(&self, g: usize, mask: ProjectionMask, n: usize) -> Result<Vec<RecordBatch>> {
        let batches = self.src.read_batched(g, mask, n.max(1))?;
        anyhow::ensure!(!batches.is_empty(), "`{}`: row group {g} has no rows to read", self.src.name);
        Ok(batches)
    }

    /// The full-schema batch of `recs`: the tool's columns from the records,
    /// the others taken from the decoded input rows.
    fn rows_batch(&self, recs: &[Record]) -> Result<RecordBatch> {
        let ours = schema::to_batch(recs);
        // The input row groups involved, decoded (in parallel), and where each row sits.
        let mut groups: Vec<usize> = Vec::new();
        let mut at: Vec<(usize, usize)> = Vec::with_capacity(recs.len());
        for r in recs {
            let row = r.source_row.expect("checked on push");
            let g = self.src.row_group_of(row).with_context(|| format!("`{}` has no row {row}", self.src.name))?;
            let k = match groups.iter().position(|&x| x == g) {
                Some(k) => k,
                None => {
                    groups.push(g);
                    groups.len() - 1
                }
            };
            at.push((k, (row - self.src.row_group(g).0) as usize));
        }
        let decoded: Vec<RecordBatch> = if groups.len() == 1 {
            vec![self.src.read_whole(groups[0])?]
        } else {
            groups.par_iter().map(|&g| self.src.read_whole(g)).collect::<Result<_>>()?
        };
        // Rows of one row group in order (a filter's): a boolean mask.
        let keep = (decoded.len() == 1 && at.windows(2).all(|w| w[0].1 < w[1].1)).then(|| {
            let mut m = vec![false; decoded[0].num_rows()];
            for &(_, i) in &at {
                m[i] = true;
            }
            arrow::array::BooleanArray::from(m)
        });
        let cols: Vec<ArrayRef> = (0..ours.num_columns())
            .into_par_iter()
            .map(|c| -> Result<ArrayRef> {
                if self.writes.contains(&c) {
                    return Ok(ours.column(c).clone());
                }
                if let Some(keep) = &keep {
                    return Ok(arrow::compute::filter(decoded[0].column(c), keep)?);
                }
                let arrays: Vec<&dyn Array> = decoded.iter().map(|b| b.column(c).as_ref()).collect();
                Ok(arrow::compute::interleave(&arrays, &at)?)
            })
            .collect::<Result<_>>()?;
        Ok(RecordBatch::try_new(schema::schema(), cols)?)
    }
}

/// A column chunk ready to append: encoded here, or spliced from the input's.
enum Chunk {
    Encoded(ArrowColumnChunk),
    Spliced(splice::Spliced),
}

fn encoded(chunks: Vec<(usize, ArrowColumnChunk)>) -> Vec<(usize, Chunk)> {
    chunks.into_iter().map(|(i, c)| (i, Chunk::Encoded(c))).collect()
}

enum Out {
    /// Input row group `g`, all its rows in order: its chunks are copied.
    Copy(usize, Vec<Record>),
    /// Rows from anywhere: decoded, taken, encoded.
    Rows(Vec<Record>),
}
