//! JSONL reading: the next batch of lines already buffered, parsed into
//! items (in parallel when the batch is large).
use super::{BadRecord, Item, Pos};
use crate::record::Record;
use anyhow::{Context, Result};
use rayon::prelude::*;
use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

/// Lines parsed per batch at most; larger batches are parsed in parallel.
const JSONL_BATCH_LINES: usize = 1024;
const PARALLEL_MIN_BYTES: usize = 256 * 1024;

/// The next batch of JSONL items from `rd`, whose last line read was `line`
/// (`done` once the input has ended): the complete lines already buffered,
/// at most [`JSONL_BATCH_LINES`], so that a pipe is never blocked on. Blank
/// lines are skipped. `Ok(None)` at the end; `Ok(Some(empty))` when nothing
/// but blank lines came.
pub(super) fn read_batch(
    rd: &mut BufReader<Box<dyn Read + Send>>,
    line: &mut u64,
    done: &mut bool,
    source: &Arc<str>,
) -> Result<Option<Vec<Item>>> {
    if *done {
        return Ok(None);
    }
    let mut lines: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut bytes = 0usize;
    loop {
        let mut buf = Vec::new();
        let n = rd.read_until(b'\n', &mut buf).with_context(|| format!("cannot read `{source}`"))?;
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
    let source = source.clone();
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
