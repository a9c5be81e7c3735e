//! Parquet reading and writing: decoding row groups into items (a few at a
//! time, in parallel), the writer's row-group encoder ([`ParquetOut`]) and
//! the properties arl writes with.
use super::{BadRecord, Item, Pos, Sink, PARQUET_ROW_GROUP};
use crate::columnar::ParquetSource;
use crate::record::Record;
use crate::schema;
use anyhow::{Context, Result};
use parquet::arrow::arrow_writer::{ArrowColumnChunk, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::arrow::ProjectionMask;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use rayon::prelude::*;

/// The next batch of items of `src` from row group `next` on: a few row
/// groups decoded in parallel, in file order. `Ok(None)` at the end.
pub(super) fn read_batch(
    src: &ParquetSource,
    mask: Option<&ProjectionMask>,
    next: &mut usize,
) -> Result<Option<Vec<Item>>> {
    if *next >= src.num_row_groups() {
        return Ok(None);
    }
    let take = rayon::current_num_threads().clamp(1, 4).min(src.num_row_groups() - *next);
    let todo: Vec<usize> = (*next..*next + take).collect();
    *next += take;
    let parts: Vec<Result<Vec<Item>>> = todo.par_iter().map(|&rg| read_row_group(src, rg, mask)).collect();
    let mut items = Vec::new();
    for p in parts {
        items.extend(p?);
    }
    Ok(Some(items))
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

/// The Parquet side of a [`super::RecordWriter`]: row groups are encoded (Arrow
/// leaves → compressed column chunks) in parallel, over row groups and over
/// the columns of each, then appended to the file in order. The bytes are the
/// same as a sequential `ArrowWriter` would write with the same properties.
pub(super) struct ParquetOut {
    pub(super) file: SerializedFileWriter<Box<dyn Sink>>,
    pub(super) factory: ArrowRowGroupWriterFactory,
    pub(super) next_rg: usize,
}

impl ParquetOut {
    pub(super) fn new(out: Box<dyn Sink>, props: WriterProperties) -> Result<ParquetOut> {
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
    pub(super) fn write_rows(&mut self, rows: &[Record]) -> Result<()> {
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

    pub(super) fn into_inner(self) -> Result<Box<dyn Sink>> {
        Ok(self.file.into_inner()?)
    }
}

/// How arl writes Parquet: zstd level 1, row groups of [`PARQUET_ROW_GROUP`]
/// rows, the schema version in the key-value metadata, chunk statistics only.
pub(super) fn parquet_props() -> WriterProperties {
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
