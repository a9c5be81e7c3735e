//! Where groups go (docs/DESIGN.md §11): stdout as JSONL, flushed whenever no other
//! completed group is waiting to be written ([`Output::flush`]: a group is out
//! as soon as it completes, and under load groups share a write); or a file,
//! written as JSONL to `NAME.partial` (flushed per group, so a killed run
//! loses at most the group being written) and turned into NAME — renamed, or
//! converted to Parquet — only when the run completes. `--resume` keeps the
//! complete groups of `NAME.partial` (a torn last line or an unfinished group
//! is dropped) and reports their `prompt_id`s so they are not sampled again.
use anyhow::{Context, Result};
use arl_core::cli::OutputSpec;
use arl_core::io::{Format, RecordWriter};
use arl_core::record::Record;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

pub struct Output {
    kind: Kind,
    /// `prompt_id`s already complete (from `--resume`).
    pub done: HashSet<String>,
}

enum Kind {
    Stdout(RecordWriter),
    File { partial: PathBuf, dest: PathBuf, format: Format, w: BufWriter<File>, buf: Vec<u8> },
}

pub fn partial_path(dest: &Path) -> PathBuf {
    let mut s = dest.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

/// The unit a record is written in: its `prompt_id`, or in arena mode the
/// task's id (`<task>:x` and `<task>:o` are written together).
fn unit_of(id: &str, arena: bool) -> String {
    if arena {
        if let Some(t) = arl_env::arena::SEATS.iter().find_map(|s| id.strip_suffix(&format!(":{s}"))) {
            return t.to_string();
        }
    }
    id.to_string()
}

/// Reads the complete units (n records each) of a JSONL or Parquet file.
fn complete_groups(path: &Path, n: u32, arena: bool) -> Result<(Vec<Vec<u8>>, HashSet<String>)> {
    let mut lines: Vec<(String, Vec<u8>)> = Vec::new();
    let is_parquet = {
        let mut magic = [0u8; 4];
        let mut f = File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?;
        std::io::Read::read(&mut f, &mut magic).unwrap_or(0) == 4 && &magic == arl_core::io::PARQUET_MAGIC
    };
    if is_parquet {
        for r in arl_core::io::read_all(path)? {
            let mut b = Vec::new();
            r.to_json_vec(&mut b);
            lines.push((unit_of(r.prompt_id.as_deref().unwrap_or_default(), arena), b));
        }
    } else {
        let rd = BufReader::new(File::open(path).with_context(|| format!("cannot open `{}`", path.display()))?);
        for line in rd.split(b'\n') {
            let line = line.with_context(|| format!("reading `{}`", path.display()))?;
            // A torn last line (killed mid-write) does not parse: stop there.
            let Ok(r) = Record::from_json_slice(&line) else { break };
            lines.push((unit_of(r.prompt_id.as_deref().unwrap_or_default(), arena), line));
        }
    }
    let mut count: HashMap<&str, u32> = HashMap::new();
    for (id, _) in &lines {
        *count.entry(id.as_str()).or_default() += 1;
    }
    let done: HashSet<String> = count.iter().filter(|(_, &c)| c == n).map(|(id, _)| id.to_string()).collect();
    let kept = lines.into_iter().filter(|(id, _)| done.contains(id)).map(|(_, l)| l).collect();
    Ok((kept, done))
}

impl Output {
    /// `n`: records per unit (a group; in `arena` mode a task's games, both
    /// seats, keyed by the task's id in `done`).
    pub fn open(args: &OutputSpec, dest: Option<&Path>, resume: bool, n: u32, arena: bool) -> Result<Output> {
        let Some(dest) = dest else {
            return Ok(Output { kind: Kind::Stdout(args.open()?), done: HashSet::new() });
        };
        let partial = partial_path(dest);
        let mut done = HashSet::new();
        let mut kept = Vec::new();
        if resume {
            let src = if partial.exists() {
                Some(partial.clone())
            } else if dest.exists() {
                Some(dest.to_path_buf())
            } else {
                None
            };
            if let Some(src) = src {
                (kept, done) = complete_groups(&src, n, arena)?;
            }
        } else if partial.exists() {
            return Err(arl_core::cli::hint(
                arl_core::cli::usage(format!("`{}` exists: an earlier run did not finish", partial.display())),
                "add `--resume` to continue it, or delete the file",
            ));
        }
        // Rewrite the partial file with only complete groups, atomically.
        let tmp = partial.with_extension("partial.tmp");
        {
            let mut w =
                BufWriter::new(File::create(&tmp).with_context(|| format!("cannot create `{}`", tmp.display()))?);
            for l in &kept {
                w.write_all(l)?;
                w.write_all(b"\n")?;
            }
            w.flush()?;
            w.get_ref().sync_all()?;
        }
        std::fs::rename(&tmp, &partial).with_context(|| format!("cannot create `{}`", partial.display()))?;
        let f = std::fs::OpenOptions::new()
            .append(true)
            .open(&partial)
            .with_context(|| format!("cannot open `{}`", partial.display()))?;
        Ok(Output {
            kind: Kind::File {
                partial,
                dest: dest.to_path_buf(),
                format: args.format,
                w: BufWriter::with_capacity(1 << 20, f),
                buf: Vec::new(),
            },
            done,
        })
    }

    /// Writes one complete group: to `NAME.partial` in one write, flushed; to
    /// stdout buffered (see [`Output::flush`]).
    pub fn write_group(&mut self, recs: &[Record]) -> Result<()> {
        match &mut self.kind {
            Kind::Stdout(w) => {
                for r in recs {
                    w.write(r)?;
                }
                Ok(())
            }
            Kind::File { w, buf, partial, .. } => {
                buf.clear();
                for r in recs {
                    r.to_json_vec(buf);
                    buf.push(b'\n');
                }
                // One write per group: a kill leaves at most a torn last group.
                w.write_all(buf).and_then(|_| w.flush()).with_context(|| format!("writing `{}`", partial.display()))
            }
        }
    }

    /// Sends the groups written to stdout so far on (one write for however
    /// many there are; nothing when there are none).
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.kind {
            Kind::Stdout(w) => w.flush(),
            Kind::File { .. } => Ok(()),
        }
    }

    /// The run is complete: NAME appears (renamed, or converted to Parquet).
    pub fn finish(self) -> Result<()> {
        match self.kind {
            Kind::Stdout(w) => w.finish(),
            Kind::File { partial, dest, format, mut w, .. } => {
                w.flush()?;
                w.get_ref().sync_all()?;
                drop(w);
                // A device or FIFO (`-o /dev/null`) is written into, never renamed over.
                let special = std::fs::metadata(&dest).is_ok_and(|m| !m.is_file() && !m.is_dir());
                match format {
                    Format::Jsonl if special => {
                        let mut f = std::fs::OpenOptions::new()
                            .write(true)
                            .open(&dest)
                            .with_context(|| format!("cannot open `{}`", dest.display()))?;
                        std::io::copy(&mut File::open(&partial)?, &mut f)
                            .with_context(|| format!("cannot write `{}`", dest.display()))?;
                        std::fs::remove_file(&partial)?;
                    }
                    Format::Jsonl => std::fs::rename(&partial, &dest)
                        .with_context(|| format!("cannot rename `{}` to `{}`", partial.display(), dest.display()))?,
                    Format::Parquet => {
                        let recs = arl_core::io::read_all(&partial)?;
                        let f = arl_core::io::AtomicFile::create(&dest)?;
                        let mut out = RecordWriter::new(Box::new(f), Format::Parquet, false)?;
                        out.write_all(recs)?;
                        out.finish()?;
                        std::fs::remove_file(&partial)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// The run failed: keep `NAME.partial` for `--resume`.
    pub fn abandon(self) -> Result<()> {
        match self.kind {
            Kind::Stdout(w) => w.finish(),
            Kind::File { mut w, .. } => Ok(w.flush()?),
        }
    }
}
