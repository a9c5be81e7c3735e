//! Rows dropped from an encoded column chunk page by page: the pages that
//! hold none of the dropped rows are copied as they are (compressed, with
//! their headers), and only the pages that hold one are decoded, their kept
//! rows encoded again as new pages in their place.
//!
//! A filter drops a few groups from most row groups; re-encoding a whole
//! per-token column chunk for them spends most of the tool's time in zstd.
//! The input's offset index says where each page starts and which row it
//! starts with (pages begin on row boundaries where it exists); each page's
//! header gives its value count and sizes, which the new chunk's metadata
//! sums. A chunk without an offset index, with statistics (whose null count
//! would have to be recounted), or whose headers and offset index disagree is
//! not spliced: the caller decodes and encodes it whole, and a corrupt chunk
//! fails there as it would have. Only lists of primitives are spliced. Every
//! page of a spliced chunk is decompressed and its rows counted from its
//! repetition levels (the offset index's first rows are not taken on trust:
//! a wrong one would move values to other rows); its values are not decoded,
//! so a page whose values are corrupt but whose levels are not reaches the
//! output as it was, and its first reader fails on it, as for a whole chunk
//! copied.
use super::ParquetSource;
use anyhow::Result;
use arrow::datatypes::Schema;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReaderBuilder, RowSelection, RowSelector};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{ColumnChunkMetaData, PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader};
use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::reader::ChunkReader;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use thrift::{page_head, PageHead, Thrift};

mod thrift;

/// Pages copied and pages encoded again by splicing, over the process (read
/// by the tests).
pub static PAGES_COPIED: AtomicU64 = AtomicU64::new(0);
pub static PAGES_ENCODED: AtomicU64 = AtomicU64::new(0);

/// A column chunk with some rows dropped, as bytes starting at offset 0 and
/// the close result whose offsets point into them.
pub(crate) struct Spliced {
    pub bytes: Bytes,
    pub close: ColumnCloseResult,
}

/// One page of a chunk: where it is (relative to the chunk's start), its
/// first row and what its header says.
struct Page {
    off: usize,
    size: usize,
    first_row: usize,
    head: PageHead,
}

/// Column chunk `col` of row group `rg` of `src` with the rows `keep` (one
/// flag per row of the row group) only; `None` when the chunk cannot be
/// spliced (see the module documentation) and must be re-encoded.
/// `page_bytes`: the data page size limit of the pages encoded again.
pub(crate) fn splice_chunk(
    src: &ParquetSource,
    rg: usize,
    col: usize,
    keep: &[bool],
    page_bytes: usize,
) -> Result<Option<Spliced>> {
    let md = src.meta.metadata();
    let Some(oi) = md.page_index().and_then(|p| p.offset_index(rg, col)) else { return Ok(None) };
    let c = md.row_group(rg).column(col);
    let rows = keep.len();
    if c.statistics().is_some() || oi.page_locations().is_empty() || rows != md.row_group(rg).num_rows() as usize {
        return Ok(None);
    }
    let start = c.dictionary_page_offset().unwrap_or_else(|| c.data_page_offset());
    let (Ok(start), Ok(len)) = (u64::try_from(start), usize::try_from(c.compressed_size())) else { return Ok(None) };
    let buf = src.chunks.get_bytes(start, len)?;
    let Some((dict_len, dict_unc, pages)) = pages_of(&buf, start, c, oi.page_locations(), rows) else {
        return Ok(None);
    };
    let plan = Plan::new(keep, pages);
    let tiny = if plan.runs.is_empty() { None } else { Some(encode_runs(src, rg, col, c, page_bytes, &plan)?) };
    assemble(c, &buf, (dict_len, dict_unc), &plan, tiny.as_ref()).map(Some)
}

/// Which pages of a chunk hold a dropped row, and where the kept rows land.
struct Plan<'a> {
    /// One flag per row of the row group: whether it is kept.
    keep: &'a [bool],
    pages: Vec<Page>,
    /// Per page: whether it holds a dropped row.
    hit: Vec<bool>,
    /// Pages holding a dropped row, in runs of consecutive ones: page index
    /// ranges [a, b).
    runs: Vec<(usize, usize)>,
    /// Rows before each row that are kept: where a row lands in the output.
    kept_before: Vec<usize>,
}

impl<'a> Plan<'a> {
    fn new(keep: &'a [bool], pages: Vec<Page>) -> Plan<'a> {
        let rows = keep.len();
        let end_of = |i: usize| pages.get(i + 1).map_or(rows, |p| p.first_row);
        let hit: Vec<bool> = (0..pages.len()).map(|i| keep[pages[i].first_row..end_of(i)].contains(&false)).collect();
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (i, &h) in hit.iter().enumerate() {
            match runs.last_mut() {
                Some((_, b)) if h && *b == i => *b = i + 1,
                _ if h => runs.push((i, i + 1)),
                _ => {}
            }
        }
        let mut kept_before = Vec::with_capacity(rows + 1);
        kept_before.push(0usize);
        for &k in keep {
            kept_before.push(kept_before.last().copied().unwrap_or(0) + usize::from(k));
        }
        Plan { keep, pages, hit, runs, kept_before }
    }

    /// The row after page `i`'s last.
    fn end_of(&self, i: usize) -> usize {
        self.pages.get(i + 1).map_or(self.keep.len(), |p| p.first_row)
    }

    /// The kept rows of the runs, as a row selection of the row group.
    fn selection(&self) -> RowSelection {
        let mut sel = Vec::new();
        let mut push = |select: bool, n: usize| match sel.last_mut() {
            Some(RowSelector { row_count, skip }) if *skip != select => *row_count += n,
            _ if n > 0 => sel.push(if select { RowSelector::select(n) } else { RowSelector::skip(n) }),
            _ => {}
        };
        let mut at = 0;
        for &(a, b) in &self.runs {
            push(false, self.pages[a].first_row - at);
            for &k in &self.keep[self.pages[a].first_row..self.end_of(b - 1)] {
                push(k, 1);
            }
            at = self.end_of(b - 1);
        }
        push(false, self.keep.len() - at);
        RowSelection::from(sel)
    }
}

/// The kept rows of the plan's runs, decoded (only the runs' pages are read:
/// the offset index lets the reader skip the others), then encoded again,
/// one row group of a scratch file per run that keeps a row; the scratch
/// file and its metadata.
fn encode_runs(
    src: &ParquetSource,
    rg: usize,
    col: usize,
    c: &ColumnChunkMetaData,
    page_bytes: usize,
    plan: &Plan,
) -> Result<(Bytes, ParquetMetaData)> {
    let (rows, pages, kept_before) = (plan.keep.len(), &plan.pages, &plan.kept_before);
    let arrays = super::guard(&src.name, || {
        let rd = ParquetRecordBatchReaderBuilder::new_with_metadata(src.chunks.clone(), src.meta.clone())
            .with_row_groups(vec![rg])
            .with_projection(ProjectionMask::roots(src.meta.parquet_schema(), [col]))
            .with_row_selection(plan.selection())
            .with_batch_size(rows.max(1))
            .build()?;
        let mut out = Vec::new();
        for b in rd {
            let b = b.map_err(|e| {
                crate::error::data(format!("`{}`: corrupt Parquet data in row group {rg}: {e}", src.name))
            })?;
            out.push(b.column(0).clone());
        }
        Ok(out)
    })?;
    let refs: Vec<&dyn arrow::array::Array> = arrays.iter().map(|a| a.as_ref()).collect();
    let kept = if refs.is_empty() {
        arrow::array::new_empty_array(src.schema().field(col).data_type())
    } else {
        arrow::compute::concat(&refs)?
    };
    let schema = Arc::new(Schema::new(vec![src.schema().field(col).clone()]));
    let props = WriterProperties::builder()
        .set_compression(c.compression())
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_data_page_size_limit(page_bytes)
        .set_max_row_group_row_count(None)
        .build();
    let mut file = Vec::new();
    let mut w = ArrowWriter::try_new(&mut file, schema.clone(), Some(props))?;
    let mut off = 0;
    let mut sizes = Vec::new();
    for &(a, b) in &plan.runs {
        let n = kept_before[plan.end_of(b - 1)] - kept_before[pages[a].first_row];
        anyhow::ensure!(off + n <= kept.len(), "internal: the runs' rows were not all decoded");
        if n > 0 {
            w.write(&RecordBatch::try_new(schema.clone(), vec![kept.slice(off, n)])?)?;
            w.flush()?;
            sizes.push(n as i64);
        }
        off += n;
    }
    anyhow::ensure!(off == kept.len(), "internal: more rows decoded than the runs keep");
    w.close()?;
    let file = Bytes::from(file);
    let meta =
        ParquetMetaDataReader::new().with_offset_index_policy(PageIndexPolicy::Required).parse_and_finish(&file)?;
    let written: Vec<i64> = meta.row_groups().iter().map(|g| g.num_rows()).collect();
    anyhow::ensure!(written == sizes, "internal: re-encoded runs of {sizes:?} rows came out as {written:?}");
    Ok((file, meta))
}

/// The new chunk of `c` (whose bytes are `buf`, the dictionary page's length
/// and uncompressed size `dict`): the dictionary page, then the pages in
/// order, those without a dropped row copied from `buf` and each run's in
/// their place from `tiny` (see [`encode_runs`]).
fn assemble(
    c: &ColumnChunkMetaData,
    buf: &Bytes,
    (dict_len, dict_unc): (usize, usize),
    plan: &Plan,
    tiny: Option<&(Bytes, ParquetMetaData)>,
) -> Result<Spliced> {
    let (rows, pages, hit, kept_before) = (plan.keep.len(), &plan.pages, &plan.hit, &plan.kept_before);
    let mut out = Vec::with_capacity(buf.len());
    out.extend_from_slice(&buf[..dict_len]);
    let mut locs = Vec::new();
    let mut num_values = 0u64;
    let mut unc = dict_unc as i64;
    let mut encodings = *c.encodings_mask();
    let (mut copied, mut encoded) = (0u64, 0u64);
    let mut tiny_rg = 0;
    let mut i = 0;
    while i < pages.len() {
        if !hit[i] {
            let p = &pages[i];
            locs.push(PageLocation {
                offset: out.len() as i64,
                compressed_page_size: p.size as i32,
                first_row_index: kept_before[p.first_row] as i64,
            });
            out.extend_from_slice(&buf[p.off..p.off + p.size]);
            num_values += p.head.num_values;
            unc += (p.head.header_len + p.head.uncompressed) as i64;
            copied += 1;
            i += 1;
            continue;
        }
        let &(a, b) = plan.runs.iter().find(|r| r.0 == i).expect("a hit page starts or continues a run");
        let first = kept_before[pages[a].first_row];
        if kept_before[plan.end_of(b - 1)] > first {
            let (file, meta) = tiny.expect("runs were encoded");
            let tc = meta.row_group(tiny_rg).column(0);
            anyhow::ensure!(tc.dictionary_page_offset().is_none(), "internal: a dictionary in re-encoded pages");
            let ts = tc.data_page_offset();
            let base = out.len() as i64;
            let tl = meta
                .page_index()
                .and_then(|p| p.offset_index(tiny_rg, 0))
                .ok_or_else(|| anyhow::anyhow!("internal: re-encoded pages without an offset index"))?;
            for l in tl.page_locations() {
                locs.push(PageLocation {
                    offset: l.offset - ts + base,
                    compressed_page_size: l.compressed_page_size,
                    first_row_index: l.first_row_index + first as i64,
                });
            }
            encoded += tl.page_locations().len() as u64;
            out.extend_from_slice(&file[ts as usize..(ts + tc.compressed_size()) as usize]);
            num_values += tc.num_values() as u64;
            unc += tc.uncompressed_size();
            for e in tc.encodings() {
                encodings.insert(e);
            }
            tiny_rg += 1;
        }
        i = b;
    }
    let kept_rows = kept_before[rows];
    let metadata = ColumnChunkMetaData::builder(c.column_descr_ptr())
        .set_compression_codec(c.compression_codec())
        .set_encodings_mask(encodings)
        .set_total_compressed_size(out.len() as i64)
        .set_total_uncompressed_size(unc)
        .set_num_values(num_values as i64)
        .set_data_page_offset(dict_len as i64)
        .set_dictionary_page_offset((dict_len > 0).then_some(0))
        .build()?;
    PAGES_COPIED.fetch_add(copied, Ordering::Relaxed);
    PAGES_ENCODED.fetch_add(encoded, Ordering::Relaxed);
    let bytes = Bytes::from(out);
    Ok(Spliced {
        close: ColumnCloseResult {
            bytes_written: bytes.len() as u64,
            rows_written: kept_rows as u64,
            metadata,
            bloom_filter: None,
            column_index: None,
            offset_index: Some(OffsetIndexMetaData { page_locations: locs, unencoded_byte_array_data_bytes: None }),
        },
        bytes,
    })
}

/// The dictionary page's length and uncompressed size (header included) and
/// the data pages of chunk `buf` (read from file offset `start`), checked
/// against each other: the offset index's pages tile the chunk after the
/// dictionary, each header's sizes fill its page, rows start at 0 and rise,
/// and the values and uncompressed sizes add up to the chunk's metadata.
fn pages_of(
    buf: &Bytes,
    start: u64,
    c: &ColumnChunkMetaData,
    locs: &[PageLocation],
    rows: usize,
) -> Option<(usize, usize, Vec<Page>)> {
    let rel = |off: i64| usize::try_from(u64::try_from(off).ok()?.checked_sub(start)?).ok().filter(|&o| o <= buf.len());
    let first = rel(locs[0].offset)?;
    let (dict_len, dict_unc) = match c.dictionary_page_offset() {
        Some(_) => {
            let h = page_head(&buf[..first])?;
            (h.kind == 2 && h.header_len + h.compressed == first).then_some((first, h.header_len + h.uncompressed))?
        }
        None if first == 0 => (0, 0),
        None => return None,
    };
    let mut pages: Vec<Page> = Vec::with_capacity(locs.len());
    let mut at = first;
    for l in locs {
        let off = rel(l.offset)?;
        let size = usize::try_from(l.compressed_page_size).ok()?;
        let first_row = usize::try_from(l.first_row_index).ok()?;
        let end = off.checked_add(size).filter(|&e| e <= buf.len())?;
        let rows_rise = pages.last().map_or(first_row == 0, |p| first_row > p.first_row);
        if off != at || !rows_rise || first_row >= rows {
            return None;
        }
        let head = page_head(&buf[off..end])?;
        if !matches!(head.kind, 0 | 3) || head.header_len + head.compressed != size {
            return None;
        }
        pages.push(Page { off, size, first_row, head });
        at = end;
    }
    let values: u64 = pages.iter().map(|p| p.head.num_values).sum();
    let unc: usize = dict_unc + pages.iter().map(|p| p.head.header_len + p.head.uncompressed).sum::<usize>();
    if at != buf.len() || values != c.num_values() as u64 || unc as i64 != c.uncompressed_size() {
        return None;
    }
    // The offset index's first rows are not taken on trust: each page is
    // decompressed and its rows counted from its repetition levels.
    let counted = rows_per_page(buf, start, c, rows)?;
    let ends = pages.iter().skip(1).map(|p| p.first_row).chain([rows]);
    let agree = counted.len() == pages.len()
        && pages.iter().zip(ends).zip(&counted).all(|((p, end), &n)| end - p.first_row == n);
    agree.then_some((dict_len, dict_unc, pages))
}

/// The rows of each data page of chunk `buf` (read from file offset
/// `start`) of a column repeated once (a list of primitives), counted from
/// the pages themselves; `None` if a page cannot be read or counted.
fn rows_per_page(buf: &Bytes, start: u64, c: &ColumnChunkMetaData, rows: usize) -> Option<Vec<usize>> {
    use parquet::basic::Encoding;
    use parquet::column::page::{Page, PageReader};
    if c.column_descr().max_rep_level() != 1 {
        return None;
    }
    let rebase = |off: i64| off - start as i64;
    let meta = ColumnChunkMetaData::builder(c.column_descr_ptr())
        .set_compression_codec(c.compression_codec())
        .set_encodings_mask(*c.encodings_mask())
        .set_total_compressed_size(c.compressed_size())
        .set_total_uncompressed_size(c.uncompressed_size())
        .set_num_values(c.num_values())
        .set_data_page_offset(rebase(c.data_page_offset()))
        .set_dictionary_page_offset(c.dictionary_page_offset().map(rebase))
        .build()
        .ok()?;
    let count = || -> Result<Option<Vec<usize>>> {
        let chunks = Arc::new(super::Chunks::Mem(buf.clone()));
        let mut rd = parquet::file::serialized_reader::SerializedPageReader::new(chunks, &meta, rows, None)?;
        let mut out = Vec::new();
        while let Some(page) = rd.get_next_page()? {
            let n = match page {
                Page::DictionaryPage { .. } => continue,
                Page::DataPageV2 { num_rows, .. } => Some(num_rows as usize),
                Page::DataPage { buf, num_values, rep_level_encoding: Encoding::RLE, .. } => {
                    rows_in_v1_page(&buf, num_values as usize)
                }
                Page::DataPage { .. } => None,
            };
            let Some(n) = n else { return Ok(None) };
            out.push(n);
        }
        Ok(Some(out))
    };
    // A decoder that fails or panics on a corrupt page: not spliced (the
    // caller's decoding then reports it).
    super::guard("", count).ok().flatten()
}

/// The rows of a v1 data page of a column whose maximum repetition level is
/// 1: the zeros among the first `num_values` repetition levels, which lead
/// the page (a 4-byte length, then the RLE / bit-packed hybrid of width 1).
fn rows_in_v1_page(page: &[u8], num_values: usize) -> Option<usize> {
    let len = usize::try_from(u32::from_le_bytes(page.get(..4)?.try_into().ok()?)).ok()?;
    let mut t = Thrift { b: page.get(4..4usize.checked_add(len)?)?, p: 0 };
    let (mut seen, mut zeros) = (0usize, 0usize);
    while seen < num_values {
        let h = t.varint()?;
        let n = usize::try_from(h >> 1).ok()?;
        if h & 1 == 0 {
            // A run of one value (a byte at width 1), repeated `n` times.
            let n = n.min(num_values - seen);
            match t.byte()? {
                0 => zeros += n,
                1 => {}
                _ => return None,
            }
            seen += n;
        } else {
            // `n` groups of 8 bit-packed values, the first in the lowest bit.
            let end = t.p.checked_add(n).filter(|&e| e <= t.b.len())?;
            for &byte in &t.b[t.p..end] {
                let k = (num_values - seen).min(8);
                if k == 0 {
                    break;
                }
                let mask = if k == 8 { 0xff } else { (1u8 << k) - 1 };
                zeros += k - (byte & mask).count_ones() as usize;
                seen += k;
            }
            t.p = end;
        }
    }
    Some(zeros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::columnar::PassThrough;
    use crate::io::{read_all, AtomicFile, RecordWriter};
    use crate::record::Record;
    use crate::rng::Rng;
    use crate::schema;
    use parquet::arrow::arrow_reader::ArrowReaderOptions;

    /// Records with lists of 0..40 items (some absent) and three row groups
    /// of pages of a few dozen rows, as another writer might lay them out.
    fn input(path: &std::path::Path, offset_index: bool) -> Vec<Record> {
        let mut rng = Rng::new(3);
        let recs: Vec<Record> = (0..2500u32)
            .map(|i| {
                let n = rng.below(40) as usize;
                Record {
                    prompt_id: Some(format!("p{}", i / 8)),
                    tokens: Some((0..n as u32 + 2).map(|k| k * 7 + i).collect()),
                    prompt_len: Some(2),
                    loss_mask: Some(vec![1; n]),
                    rollout_log_probs: Some((0..n).map(|k| -(k as f32) / 8.0 - i as f32).collect()),
                    values: (i % 7 != 3).then(|| (0..n).map(|k| k as f32 + 0.5).collect()),
                    reward: Some((i % 3) as f32),
                    ..Default::default()
                }
            })
            .collect();
        let props = WriterProperties::builder()
            .set_data_page_size_limit(1024)
            .set_write_batch_size(64)
            .set_max_row_group_row_count(Some(1000))
            .set_offset_index_disabled(!offset_index)
            .set_statistics_enabled(EnabledStatistics::None)
            .build();
        let f = std::fs::File::create(path).unwrap();
        let mut w = ArrowWriter::try_new(f, schema::schema(), Some(props)).unwrap();
        w.write(&schema::to_batch(&recs)).unwrap();
        w.close().unwrap();
        recs
    }

    /// Keeps `keep(row)` of `path` through a pass-through writer (as
    /// `arl-filter` does) into `out`; returns the kept rows.
    fn filter(path: &std::path::Path, out: &std::path::Path, keep: impl Fn(u64) -> bool) -> Vec<u64> {
        let f = std::fs::File::open(path).unwrap();
        let src = Arc::new(ParquetSource::from_file(path, f).unwrap());
        let n: u64 = (0..src.num_row_groups()).map(|g| src.row_group(g).1 as u64).sum();
        let pt = PassThrough::new(src, &[]).unwrap();
        let mut w = RecordWriter::pass_through(Box::new(AtomicFile::create(out).unwrap()), pt).unwrap();
        let rows: Vec<u64> = (0..n).filter(|&r| keep(r)).collect();
        for &r in &rows {
            w.write_owned(Record { source_row: Some(r), ..Default::default() }).unwrap();
        }
        w.finish().unwrap();
        rows
    }

    fn json(recs: &[Record]) -> Vec<Vec<u8>> {
        recs.iter()
            .map(|r| {
                let mut b = Vec::new();
                r.to_json_vec(&mut b);
                b
            })
            .collect()
    }

    #[test]
    fn a_filter_copies_the_pages_it_keeps_whole_and_the_output_reads_by_its_offset_index() {
        let d = tempfile::tempdir().unwrap();
        let inp = d.path().join("in.parquet");
        let recs = input(&inp, true);
        // Single rows, a row group's first and last rows, a run spanning
        // several pages, and the whole last part of a row group.
        let dropped = |r: u64| r % 97 == 5 || r == 1000 || r == 1999 || (1200..1330).contains(&r) || r >= 2460;
        let (copied, encoded) = (PAGES_COPIED.load(Ordering::Relaxed), PAGES_ENCODED.load(Ordering::Relaxed));
        let out = d.path().join("out.parquet");
        let rows = filter(&inp, &out, |r| !dropped(r));
        let want: Vec<Record> = rows.iter().map(|&r| recs[r as usize].clone()).collect();
        assert_eq!(json(&read_all(&out).unwrap()), json(&want));
        let (copied, encoded) =
            (PAGES_COPIED.load(Ordering::Relaxed) - copied, PAGES_ENCODED.load(Ordering::Relaxed) - encoded);
        assert!(copied > 20 && encoded > 10, "pages copied {copied}, encoded again {encoded}");

        // Every output chunk's metadata agrees with its pages' headers (values,
        // sizes) and its offset index tiles it.
        let f = std::fs::File::open(&out).unwrap();
        let opts = ArrowReaderOptions::new().with_offset_index_policy(PageIndexPolicy::Required);
        let meta = parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&f, opts).unwrap();
        let md = meta.metadata();
        for g in 0..md.num_row_groups() {
            for c in md.row_group(g).columns().iter().enumerate().filter(|(_, c)| c.statistics().is_none()) {
                let (i, c) = c;
                let start = c.dictionary_page_offset().unwrap_or_else(|| c.data_page_offset()) as u64;
                let buf = f.get_bytes(start, c.compressed_size() as usize).unwrap();
                let locs = md.page_index().and_then(|p| p.offset_index(g, i)).unwrap().page_locations();
                let rows = md.row_group(g).num_rows() as usize;
                assert!(pages_of(&buf, start, c, locs, rows).is_some(), "row group {g} column {i}");
            }
        }
        // An offset index that moves a page's first row by one is not trusted.
        let fi = std::fs::File::open(&inp).unwrap();
        let opts = ArrowReaderOptions::new().with_offset_index_policy(PageIndexPolicy::Required);
        let mi = parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&fi, opts.clone()).unwrap();
        let c = mi.metadata().row_group(0).column(5);
        let start = c.dictionary_page_offset().unwrap_or_else(|| c.data_page_offset()) as u64;
        let buf = fi.get_bytes(start, c.compressed_size() as usize).unwrap();
        let mut locs = mi.metadata().page_index().and_then(|p| p.offset_index(0, 5)).unwrap().page_locations().clone();
        assert!(pages_of(&buf, start, c, &locs, 1000).is_some());
        locs[4].first_row_index += 1;
        assert!(pages_of(&buf, start, c, &locs, 1000).is_none());
        // Rows picked by the offset index (pages skipped) are the right ones.
        let sel = RowSelection::from(vec![
            RowSelector::skip(300),
            RowSelector::select(3),
            RowSelector::skip(900),
            RowSelector::select(200),
            RowSelector::skip(700),
            RowSelector::select(40),
        ]);
        let rd = ParquetRecordBatchReaderBuilder::new_with_metadata(f, meta).with_row_selection(sel).build().unwrap();
        let got: Vec<Record> = rd.flat_map(|b| schema::from_batch(&b.unwrap()).unwrap()).map(|r| r.unwrap()).collect();
        let picked: Vec<Record> =
            [300..303, 1203..1403, 2103..2143].into_iter().flatten().map(|i| want[i].clone()).collect();
        assert_eq!(json(&got), json(&picked));

        // Whole pages dropped (of `tokens`, column 5): their run has no row
        // left to encode again.
        let f = std::fs::File::open(&inp).unwrap();
        let opts = ArrowReaderOptions::new().with_offset_index_policy(PageIndexPolicy::Required);
        let meta = parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&f, opts).unwrap();
        assert_eq!(meta.schema().field(5).name(), "tokens");
        let locs = meta.metadata().page_index().and_then(|p| p.offset_index(0, 5)).unwrap().page_locations();
        let (a, b) = (locs[3].first_row_index as u64, locs[5].first_row_index as u64);
        let out3 = d.path().join("out3.parquet");
        let rows = filter(&inp, &out3, |r| !(a..b).contains(&r));
        let want3: Vec<Record> = rows.iter().map(|&r| recs[r as usize].clone()).collect();
        assert_eq!(json(&read_all(&out3).unwrap()), json(&want3));

        // Without an offset index nothing is spliced, and the result is the same.
        let bare = d.path().join("bare.parquet");
        input(&bare, false);
        let (copied, out2) = (PAGES_COPIED.load(Ordering::Relaxed), d.path().join("out2.parquet"));
        filter(&bare, &out2, |r| !dropped(r));
        assert_eq!(json(&read_all(&out2).unwrap()), json(&want));
        assert_eq!(PAGES_COPIED.load(Ordering::Relaxed), copied);
    }

    #[test]
    fn rows_are_counted_from_repetition_levels() {
        // Levels 0 1 1 | 0 0 1 1 1 1 1 (bit-packed group, then an RLE run of
        // five 1s), then the next page's bytes, which are not read.
        let levels = [0x03, 0b1110_0110, 0x0a, 0x01];
        let mut page = (levels.len() as u32).to_le_bytes().to_vec();
        page.extend(levels);
        page.extend([0xff; 8]);
        assert_eq!(rows_in_v1_page(&page, 10), Some(3));
        assert_eq!(rows_in_v1_page(&page, 5), Some(3), "the padding of the group is not counted");
        assert_eq!(rows_in_v1_page(&page, 14), None, "fewer levels than values");
        assert_eq!(rows_in_v1_page(&[0x02, 0, 0, 0, 0x02, 0x05], 1), None, "a level above 1");
    }
}
