//! Where a writer's bytes go: the [`Sink`] trait, and standard output
//! ([`StdoutSink`]); [`super::AtomicFile`] is the file sink.
use anyhow::Result;
use std::io::{self, BufWriter, Write};

/// A byte destination that can be finalised: stdout is flushed, an
/// [`super::AtomicFile`] is fsynced and renamed into place.
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
