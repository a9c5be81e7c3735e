//! Parquet files through `RecordReader` (the corpus holds real files written
//! by `RecordWriter`; libFuzzer mutates them). The seeds were made from the
//! JSONL seeds with `arl-filter -i X.jsonl -o X.parquet` (and `head -N
//! testdata/sample-trajectories.jsonl | arl-filter -o sampleN.parquet`). Inputs that do not start with
//! `PAR1` get the magic prepended, so every run exercises the Parquet path:
//! footer, metadata, row groups, pages, and the Arrow → `Record` conversion.
//!
//! A file with arl's columns then goes through a pass-through writer that
//! drops every third row, as `arl-filter` does (its row groups spliced page
//! by page): no panic, and where the input read whole and the output was
//! written, the output's records are exactly the kept input records.
#![no_main]
#[path = "../common/quiet_panics.rs"]
mod common;
use arl_core::io::{RecordReader, RecordWriter, Sink};
use common::quiet_panics;
use libfuzzer_sys::fuzz_target;
use std::io::{Cursor, Write};
use std::sync::{Arc, Mutex};

/// An output in memory.
struct Mem(Arc<Mutex<Vec<u8>>>);

impl Write for Mem {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Sink for Mem {
    fn commit(self: Box<Self>) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Every record of `rd` as JSON, `None` if any is bad or the file fails.
fn all_json(rd: &mut RecordReader) -> Option<Vec<String>> {
    let mut out = Vec::new();
    loop {
        match rd.next_batch() {
            Ok(Some(batch)) => {
                for item in batch {
                    out.push(serde_json::to_string(&item.ok()?.1).ok()?);
                }
            }
            Ok(None) => return Some(out),
            Err(_) => return None,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    quiet_panics();
    let bytes = if data.starts_with(b"PAR1") {
        data.to_vec()
    } else {
        let mut v = b"PAR1".to_vec();
        v.extend_from_slice(data);
        v
    };
    let Ok(mut rd) = RecordReader::from_reader(Box::new(Cursor::new(bytes)), "fuzz") else { return };
    assert_eq!(rd.format(), arl_core::io::Format::Parquet);
    let src = rd.parquet_source().filter(|s| s.passes_through()).cloned();
    let mut whole = Some(Vec::new());
    loop {
        let batch = match rd.next_batch() {
            Ok(Some(batch)) => batch,
            Ok(None) => break,
            Err(_) => {
                whole = None;
                break;
            }
        };
        for item in batch {
            match item {
                Ok((_, rec)) => {
                    // Decoded records must re-serialise.
                    let json = serde_json::to_string(&rec);
                    match (&mut whole, json) {
                        (Some(w), Ok(j)) => w.push(j),
                        _ => whole = None,
                    }
                }
                Err(bad) => {
                    let _ = bad.to_string();
                    whole = None;
                }
            }
        }
    }
    let Some(src) = src else { return };
    let rows: u64 = (0..src.num_row_groups()).map(|g| src.row_group(g).1 as u64).sum();
    let Ok(pt) = arl_core::columnar::PassThrough::new(src, &[]) else { return };
    let out = Arc::new(Mutex::new(Vec::new()));
    let Ok(mut w) = RecordWriter::pass_through(Box::new(Mem(out.clone())), pt) else { return };
    let kept = |r: u64| r % 3 != 2;
    for r in (0..rows.min(1 << 16)).filter(|&r| kept(r)) {
        let rec = arl_core::Record { source_row: Some(r), ..Default::default() };
        if w.write_owned(rec).is_err() {
            return;
        }
    }
    if w.finish().is_err() {
        return;
    }
    let bytes = std::mem::take(&mut *out.lock().unwrap());
    let Ok(mut back) = RecordReader::from_reader(Box::new(Cursor::new(bytes)), "out") else { return };
    if let (Some(input), Some(output)) = (whole, all_json(&mut back)) {
        if rows <= 1 << 16 && input.len() as u64 == rows {
            let want: Vec<&String> = input.iter().enumerate().filter(|(i, _)| kept(*i as u64)).map(|(_, j)| j).collect();
            let got: Vec<&String> = output.iter().collect();
            assert!(got == want, "the pass-through output's records differ from the kept input records");
        }
    }
});
