//! [`RecordWriter`]: a sink of records, JSONL streamed record by record or
//! Parquet by row group (whole records, or a projected read's records with
//! the other columns passed through from their source).
use super::parquet::{parquet_props, ParquetOut};
use super::{Format, Sink, PARQUET_ROW_GROUP};
use crate::columnar::PassThrough;
use crate::record::Record;
use anyhow::Result;
use rayon::prelude::*;
use std::io::Write;

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
