//! Conventions every arl binary shares (docs/DESIGN.md §11): the common flags,
//! the error format, exit codes, broken pipes, progress bars, atomic outputs
//! and the bad-record policy (`--on-error`, `--rejects`).
//!
//! A binary is `fn main() -> ExitCode { cli::main::<Args>("arl-x", run) }`.
use crate::columnar::{ParquetSource, PassThrough};
pub use crate::error::{data, hint, usage, DataError, Hinted, UsageError};
use crate::io::{AtomicFile, BadRecord, Format, Pos, RecordReader, RecordWriter};
use crate::record::Record;
use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

/// Exit codes, the same for every binary.
pub mod exit {
    /// Success (also when a downstream reader closed the pipe).
    pub const OK: u8 = 0;
    /// Runtime failure (I/O, server, sandbox, internal error).
    pub const FAILURE: u8 = 1;
    /// Usage error (bad flags).
    pub const USAGE: u8 = 2;
    /// Bad input data (sysexits' EX_DATAERR).
    pub const DATA: u8 = 65;
}

/// The man-page section on exit codes, shared by every binary.
pub const EXIT_CODES_HELP: &str = "\
Exit codes: 0 success (also when a downstream reader closes the pipe); \
1 runtime failure; 2 usage error; 65 bad input data.";

fn color_enabled() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal()
}

/// Whether output to stdout may carry ANSI colour.
pub fn stdout_color() -> bool {
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<parquet::errors::ParquetError>().is_some_and(|p| p.to_string().contains("Broken pipe"))
    })
}

/// The exit code an error maps to.
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    if is_broken_pipe(e) {
        return exit::OK;
    }
    // `.context(DataError(..))` wraps the cause: found by downcasting, not in the chain.
    if e.downcast_ref::<DataError>().is_some() {
        return exit::DATA;
    }
    for c in e.chain() {
        if c.is::<UsageError>() {
            return exit::USAGE;
        }
        if c.is::<DataError>() || c.is::<BadRecord>() {
            return exit::DATA;
        }
        if let Some(h) = c.downcast_ref::<Hinted>() {
            return exit_code_of(&h.error);
        }
    }
    exit::FAILURE
}

/// Prints `tool: error: <what>`, indented `caused by:` lines, and a `hint:`.
pub fn report(tool: &str, e: &anyhow::Error) {
    let (red, yellow, reset) = if color_enabled() { ("\x1b[1;31m", "\x1b[1;33m", "\x1b[0m") } else { ("", "", "") };
    let mut err = std::io::stderr().lock();
    let mut hint = None;
    let mut chain = e.chain();
    if let Some(top) = chain.next() {
        let _ = writeln!(err, "{tool}: {red}error{reset}: {top}");
    }
    for c in e.chain() {
        if let Some(h) = c.downcast_ref::<Hinted>() {
            hint = Some(h.hint.clone());
        }
    }
    let mut last = e.to_string();
    for c in chain {
        let s = c.to_string();
        // Hinted wraps an error and repeats its text; don't print it twice.
        if s != last {
            let _ = writeln!(err, "  caused by: {s}");
        }
        last = s;
    }
    if let Some(h) = hint {
        let _ = writeln!(err, "{yellow}hint{reset}: {h}");
    }
}

/// Whether an environment variable is set to something other than empty or `0`.
pub fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

/// Prints a warning line on stderr.
pub fn warn(tool: &str, msg: impl std::fmt::Display) {
    let (y, reset) = if color_enabled() { ("\x1b[1;33m", "\x1b[0m") } else { ("", "") };
    eprintln!("{tool}: {y}warning{reset}: {msg}");
}

/// Bounds how long libtorch's OpenMP threads (libgomp) spin-wait between
/// parallel regions, unless the user set `OMP_WAIT_POLICY` or
/// `GOMP_SPINCOUNT`. libgomp's default spin (300,000 iterations) slowed the
/// binaries down 5-50x as soon as another process competed for the cores (a
/// trainer next to a server, a test suite), and never spinning
/// (`OMP_WAIT_POLICY=PASSIVE`) costs up to 2.8x on small models when the
/// cores are free; a spin of 1,000 iterations (libgomp's own value when it
/// knows the cores are oversubscribed) was close to passive under contention
/// and close to the default when idle (docs/install.md, OpenMP threads). libgomp
/// reads the variables once, in its own initialiser before `main`, so the
/// libtorch binaries call this first thing: it re-executes the program with
/// `GOMP_SPINCOUNT` set (same pid, arguments and descriptors). When exec fails
/// the program goes on with libgomp's default.
pub fn bounded_omp_spin_by_default() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os("OMP_WAIT_POLICY").is_some() || std::env::var_os("GOMP_SPINCOUNT").is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let mut args = std::env::args_os();
    let mut cmd = std::process::Command::new(exe);
    if let Some(argv0) = args.next() {
        cmd.arg0(argv0);
    }
    // `exec` returns only on failure.
    let _ = cmd.args(args).env("GOMP_SPINCOUNT", "1000").exec();
}

/// Runs a binary: parses arguments (usage errors exit 2), runs, reports errors.
///
/// `tool --generate-docs DIR` (a hidden first argument, for `make docs` and
/// packagers) writes the binary's man pages and shell completions under
/// `DIR/man` and `DIR/completions` instead (see [`crate::docs`]).
pub fn main<A: Parser>(tool: &str, run: fn(A) -> Result<ExitCode>) -> ExitCode {
    let mut argv = std::env::args_os().skip(1);
    if argv.next().is_some_and(|a| a == "--generate-docs") {
        let root = argv.next().map_or_else(|| PathBuf::from("."), PathBuf::from);
        return match crate::docs::write(&A::command(), &root) {
            Ok(n) => {
                eprintln!("{tool}: {n} documentation files written under `{}`", root.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                report(tool, &e);
                ExitCode::from(exit::FAILURE)
            }
        };
    }
    let args = match A::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { exit::OK };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(args) {
        Ok(code) => code,
        Err(e) => {
            let code = exit_code_of(&e);
            if code != exit::OK {
                report(tool, &e);
            }
            ExitCode::from(code)
        }
    }
}

/// What to do with a record that cannot be read or processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum OnError {
    /// Stop with an error naming the record; write no output file.
    #[default]
    Fail,
    /// Keep going; put every bad record in the `--rejects` file.
    Skip,
}

/// Where a tool reads its records from, and what it does with bad ones
/// (`-i`, `--on-error`, `--rejects`, `--quiet`, checked together by
/// [`crate::args::InputArgs::spec`]).
#[derive(Debug, Clone, Default)]
pub struct InputSpec {
    /// The input files in turn; `-` is stdin.
    pub paths: Vec<PathBuf>,
    pub on_error: OnError,
    /// Where bad records go (only with [`OnError::Skip`], which needs it).
    pub rejects: Option<PathBuf>,
    /// No progress bar and no summary on stderr.
    pub quiet: bool,
}

impl InputSpec {
    /// Reads stdin, failing on the first bad record.
    pub fn stdin() -> InputSpec {
        InputSpec { paths: vec![PathBuf::from("-")], ..Default::default() }
    }
}

/// Where a tool writes its records, and in which format.
#[derive(Debug, Clone)]
pub struct OutputSpec {
    /// The output file (written atomically); `None` is stdout.
    pub path: Option<PathBuf>,
    pub format: Format,
}

impl OutputSpec {
    /// JSONL on stdout.
    pub fn stdout() -> OutputSpec {
        OutputSpec { path: None, format: Format::Jsonl }
    }

    /// Opens the destination. Nothing appears at the path until [`RecordWriter::finish`].
    pub fn open(&self) -> Result<RecordWriter> {
        match &self.path {
            Some(p) => RecordWriter::new(Box::new(AtomicFile::create(p)?), self.format, false),
            None => RecordWriter::new(Box::new(crate::io::StdoutSink::new()), self.format, false),
        }
    }
}

/// A progress bar on stderr, hidden unless stderr is a terminal and not `--quiet`.
pub fn progress(quiet: bool, len: Option<u64>, what: &str) -> ProgressBar {
    let visible = !quiet && std::io::stderr().is_terminal();
    let pb = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    if !visible {
        pb.set_draw_target(ProgressDrawTarget::hidden());
        return pb;
    }
    let tmpl = if len.is_some() {
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg} ({per_sec})"
    } else {
        "{spinner} [{elapsed_precise}] {pos} {msg} ({per_sec})"
    };
    pb.set_style(ProgressStyle::with_template(tmpl).unwrap_or_else(|_| ProgressStyle::default_bar()));
    pb.set_message(what.to_string());
    pb
}

/// Reads every input in turn and applies the bad-record policy: with `fail` the
/// first bad record is an error (exit 65); with `skip` it goes to the rejects
/// file and the stream goes on. Records come in batches so tools can stream.
pub struct Input {
    paths: Vec<PathBuf>,
    next_path: usize,
    reader: Option<RecordReader>,
    /// Read only these columns of Parquet inputs (see [`Input::open_projected`]).
    columns: Option<Vec<&'static str>>,
    /// The Parquet inputs read with a projection, by name: a rejected record
    /// is written whole, so its other columns are read back from here.
    projected: Vec<Arc<ParquetSource>>,
    policy: OnError,
    rejects: Option<Rejects>,
    pub read: u64,
    quiet: bool,
}

/// The rejects file: bad records, written atomically when the run ends.
pub struct Rejects {
    w: AtomicFile,
    pub count: u64,
}

impl Rejects {
    pub fn create(path: &Path) -> Result<Rejects> {
        Ok(Rejects { w: AtomicFile::create(path)?, count: 0 })
    }

    /// Stores a bad input line (verbatim) or row.
    pub fn put_raw(&mut self, raw: &[u8]) -> Result<()> {
        self.count += 1;
        self.w.write_all(raw)?;
        self.w.write_all(b"\n")?;
        Ok(())
    }

    /// Stores a record that was read fine but could not be processed.
    pub fn put_record(&mut self, r: &Record) -> Result<()> {
        let mut buf = Vec::new();
        r.to_json_vec(&mut buf);
        self.put_raw(&buf)
    }

    pub fn finish(self) -> Result<()> {
        self.w.finish()
    }
}

impl Input {
    pub fn open(spec: &InputSpec) -> Result<Input> {
        let paths = if spec.paths.is_empty() { vec![PathBuf::from("-")] } else { spec.paths.clone() };
        let rejects = match (&spec.rejects, spec.on_error) {
            (Some(p), OnError::Skip) => Some(Rejects::create(p)?),
            (None, OnError::Skip) => {
                return Err(usage("`--on-error skip` needs `--rejects FILE`, so that no bad record is lost"))
            }
            _ => None,
        };
        Ok(Input {
            paths,
            next_path: 0,
            reader: None,
            columns: None,
            projected: Vec::new(),
            policy: spec.on_error,
            rejects,
            read: 0,
            quiet: spec.quiet,
        })
    }

    /// Like [`Input::open`], but Parquet inputs are read by `columns` only
    /// (fields outside them read as absent; JSONL is read whole): for tools
    /// that only look at records. A rejected record is still written whole.
    pub fn open_projected(spec: &InputSpec, columns: &[&'static str]) -> Result<Input> {
        let mut inp = Input::open(spec)?;
        inp.columns = Some(columns.to_vec());
        Ok(inp)
    }

    /// Opens the input and the output of a tool that reads the fields
    /// `reads` and sets the fields `writes`. When the input is one Parquet
    /// file with arl's columns and the output is Parquet, only `reads` are
    /// decoded and the output's other columns come from the input
    /// ([`PassThrough`]: copied undecoded where whole row groups keep their
    /// rows); otherwise records are read and written whole.
    pub fn open_columns(
        spec: &InputSpec,
        output: &OutputSpec,
        reads: &[&'static str],
        writes: &[&str],
    ) -> Result<(Input, RecordWriter)> {
        let mut inp = Input::open(spec)?;
        if inp.paths.len() == 1 && output.format == Format::Parquet && !env_flag("ARL_NO_PASS_THROUGH") {
            let rd = RecordReader::open_projected(&inp.paths[0], Some(reads))?;
            // The reader is kept either way: a pipe cannot be opened twice.
            inp.next_path = 1;
            if let Some(src) = rd.parquet_source().filter(|s| s.passes_through()).cloned() {
                inp.reader = Some(rd);
                inp.columns = Some(reads.to_vec());
                inp.projected.push(src.clone());
                let pt = PassThrough::new(src, writes)?;
                let out = match &output.path {
                    Some(p) => RecordWriter::pass_through(Box::new(AtomicFile::create(p)?), pt)?,
                    None => RecordWriter::pass_through(Box::new(crate::io::StdoutSink::new()), pt)?,
                };
                return Ok((inp, out));
            }
            inp.reader = Some(rd.whole());
        }
        let out = output.open()?;
        Ok((inp, out))
    }

    /// The next batch of good records with their positions; `None` at the end.
    pub fn next_batch(&mut self) -> Result<Option<Vec<(Pos, Record)>>> {
        loop {
            if self.reader.is_none() {
                if self.next_path >= self.paths.len() {
                    return Ok(None);
                }
                let p = &self.paths[self.next_path];
                self.next_path += 1;
                let rd = RecordReader::open_projected(p, self.columns.as_deref())?;
                if rd.is_projected() {
                    self.projected.extend(rd.parquet_source().cloned());
                }
                self.reader = Some(rd);
            }
            let rd = self.reader.as_mut().expect("set above");
            match rd.next_batch()? {
                None => {
                    self.reader = None;
                    continue;
                }
                Some(items) => {
                    let mut good = Vec::with_capacity(items.len());
                    for it in items {
                        self.read += 1;
                        match it {
                            Ok(x) => good.push(x),
                            Err(bad) => self.bad_input(bad)?,
                        }
                    }
                    return Ok(Some(good));
                }
            }
        }
    }

    fn bad_input(&mut self, bad: BadRecord) -> Result<()> {
        match (&self.policy, &mut self.rejects) {
            (OnError::Skip, Some(r)) => r.put_raw(&bad.raw),
            _ => Err(anyhow::Error::new(bad)),
        }
    }

    /// A record that was read but cannot be processed (e.g. a field it needs is
    /// missing): an error under `fail`, a reject under `skip`.
    pub fn reject(&mut self, pos: &Pos, rec: &Record, why: impl std::fmt::Display) -> Result<()> {
        match (&self.policy, &mut self.rejects) {
            (OnError::Skip, Some(r)) => {
                // A record from a projected read lacks the columns not read.
                let src = rec
                    .source_row
                    .and_then(|row| self.projected.iter().find(|s| s.name == pos.source).map(|s| (s.clone(), row)));
                match src {
                    Some((s, row)) => r.put_record(&s.whole_record(row)?),
                    None => r.put_record(rec),
                }
            }
            _ => Err(data(format!("{pos}: {why}"))),
        }
    }

    pub fn rejected(&self) -> u64 {
        self.rejects.as_ref().map_or(0, |r| r.count)
    }

    /// Every record at once (for tools that need the whole batch).
    pub fn read_all(&mut self) -> Result<Vec<(Pos, Record)>> {
        let mut out = Vec::new();
        while let Some(b) = self.next_batch()? {
            out.extend(b);
        }
        Ok(out)
    }

    /// Commits the rejects file and prints the summary line (unless quiet).
    pub fn finish(self, tool: &str, written: u64) -> Result<()> {
        let rejected = self.rejected();
        if let Some(r) = self.rejects {
            let path = r.w.path().display().to_string();
            r.finish()?;
            if !self.quiet && rejected > 0 {
                eprintln!("{tool}: {} records read, {written} written, {rejected} rejected to `{path}`", self.read);
            }
        }
        Ok(())
    }
}

/// The common form of a per-record tool: read, map, write, a reader batch
/// at a time (so the work can be done on several threads, or as one tensor
/// batch). `f` returns one verdict per record of the batch, in its order:
/// `Ok(true)` write, `Ok(false)` drop, `Err` reject.
pub fn map_record_batches(
    tool: &str,
    input: &InputSpec,
    output: &OutputSpec,
    mut f: impl FnMut(&mut [(Pos, Record)]) -> Vec<std::result::Result<bool, String>>,
) -> Result<ExitCode> {
    let mut inp = Input::open(input)?;
    let mut out = output.open()?;
    let pb = progress(input.quiet, None, "records");
    while let Some(mut batch) = inp.next_batch()? {
        let verdicts = f(&mut batch);
        assert_eq!(verdicts.len(), batch.len(), "map_record_batches: one verdict per record");
        for ((pos, r), verdict) in batch.into_iter().zip(verdicts) {
            match verdict {
                Ok(true) => out.write_owned(r)?,
                Ok(false) => {}
                Err(why) => inp.reject(&pos, &r, why)?,
            }
            pb.inc(1);
        }
        out.flush()?;
    }
    pb.finish_and_clear();
    let written = out.count();
    out.finish().context("writing output")?;
    inp.finish(tool, written)?;
    Ok(ExitCode::SUCCESS)
}
