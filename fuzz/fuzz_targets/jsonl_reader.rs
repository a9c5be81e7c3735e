//! Any bytes through `RecordReader` (format detected from content, so inputs
//! that start with `PAR1` reach the Parquet path too): every batch is drained
//! until the end or an error; a panic, hang or runaway allocation is a bug.
//! Each record read must survive a write/read round trip unchanged.
#![no_main]
use arl_core::record::Record;
#[path = "../common/quiet_panics.rs"]
mod common;
use common::quiet_panics;
use libfuzzer_sys::fuzz_target;
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    quiet_panics();
    let Ok(mut rd) = arl_core::io::RecordReader::from_reader(Box::new(Cursor::new(data.to_vec())), "fuzz") else {
        return;
    };
    while let Ok(Some(batch)) = rd.next_batch() {
        for item in batch {
            match item {
                Ok((pos, rec)) => {
                    let _ = pos.to_string();
                    let _ = rec.response_tokens();
                    let _ = rec.trainable_tokens();
                    let mut line = Vec::new();
                    rec.to_json_vec(&mut line);
                    let back = Record::from_json_slice(&line)
                        .unwrap_or_else(|e| panic!("a record read does not read back from its own JSON: {e}"));
                    assert!(back == rec, "a record changed in a JSON round trip");
                }
                // Rejects carry their position and error: render them as the tools do.
                Err(bad) => {
                    let _ = bad.to_string();
                }
            }
        }
    }
});
