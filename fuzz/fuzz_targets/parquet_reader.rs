//! Parquet files through `RecordReader` (the corpus holds real files written
//! by `RecordWriter`; libFuzzer mutates them). The seeds were made from the
//! JSONL seeds with `arl-filter -i X.jsonl -o X.parquet` (and `head -N
//! testdata/sample-trajectories.jsonl | arl-filter -o sampleN.parquet`). Inputs that do not start with
//! `PAR1` get the magic prepended, so every run exercises the Parquet path:
//! footer, metadata, row groups, pages, and the Arrow → `Record` conversion.
#![no_main]
#[path = "../common/quiet_panics.rs"]
mod common;
use common::quiet_panics;
use libfuzzer_sys::fuzz_target;
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    quiet_panics();
    let bytes = if data.starts_with(b"PAR1") {
        data.to_vec()
    } else {
        let mut v = b"PAR1".to_vec();
        v.extend_from_slice(data);
        v
    };
    let Ok(mut rd) = arl_core::io::RecordReader::from_reader(Box::new(Cursor::new(bytes)), "fuzz") else { return };
    assert_eq!(rd.format(), arl_core::io::Format::Parquet);
    while let Ok(Some(batch)) = rd.next_batch() {
        for item in batch {
            match item {
                Ok((_, rec)) => {
                    // Decoded records must re-serialise.
                    let _ = serde_json::to_string(&rec);
                }
                Err(bad) => {
                    let _ = bad.to_string();
                }
            }
        }
    }
});
