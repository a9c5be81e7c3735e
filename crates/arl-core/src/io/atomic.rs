//! Files that appear whole or not at all ([`AtomicFile`]), and the cleanup
//! of the temporaries that killed writers left behind.
use super::Sink;
use anyhow::{Context, Result};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file that appears whole or not at all: written under a temporary name in
/// the same directory, then fsynced and renamed over the target on commit.
/// Dropped without commit (an error, a panic), it removes the temporary.
/// A target that exists and is not a regular file (`/dev/null`, a FIFO) is
/// written in place: renaming over it would replace the device with a file.
pub struct AtomicFile {
    /// Empty when writing in place.
    tmp: PathBuf,
    dest: PathBuf,
    file: BufWriter<File>,
    committed: bool,
    /// Bytes handed to the file, and how far write-back has been started.
    written: u64,
    kicked: u64,
}

/// Write-back of a large output is started every this many bytes, so that
/// the disk writes while the tool computes and the final fsync has little
/// left to wait for.
const WRITEBACK_EVERY: u64 = 32 << 20;

impl AtomicFile {
    pub fn create(dest: &Path) -> Result<AtomicFile> {
        if let Ok(m) = std::fs::metadata(dest) {
            if !m.is_file() && !m.is_dir() {
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(dest)
                    .with_context(|| format!("cannot open `{}`", dest.display()))?;
                return Ok(AtomicFile {
                    tmp: PathBuf::new(),
                    dest: dest.to_path_buf(),
                    file: BufWriter::with_capacity(1 << 16, f),
                    committed: false,
                    written: 0,
                    kicked: 0,
                });
            }
        }
        let dir = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = dest.file_name().with_context(|| format!("`{}` is not a file path", dest.display()))?;
        remove_stale_temps(&dir, &format!(".{}.tmp.", name.to_string_lossy()));
        let tmp = dir.join(format!(".{}.tmp.{}", name.to_string_lossy(), std::process::id()));
        let f = File::create(&tmp).with_context(|| format!("cannot create `{}`", tmp.display()))?;
        Ok(AtomicFile {
            tmp,
            dest: dest.to_path_buf(),
            file: BufWriter::with_capacity(1 << 20, f),
            committed: false,
            written: 0,
            kicked: 0,
        })
    }

    pub fn path(&self) -> &Path {
        &self.dest
    }

    /// Flushes, fsyncs and renames the file into place (and fsyncs the directory).
    pub fn finish(mut self) -> Result<()> {
        let ctx = || format!("cannot write `{}`", self.dest.display());
        self.file.flush().with_context(ctx)?;
        if self.tmp.as_os_str().is_empty() {
            self.committed = true;
            return Ok(());
        }
        self.file.get_ref().sync_all().with_context(ctx)?;
        std::fs::rename(&self.tmp, &self.dest)
            .with_context(|| format!("cannot rename `{}` to `{}`", self.tmp.display(), self.dest.display()))?;
        self.committed = true;
        if let Some(dir) = self.dest.parent() {
            let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if !self.tmp.as_os_str().is_empty() && self.written - self.kicked >= WRITEBACK_EVERY {
            // What reached the file (not what the buffer still holds).
            let upto = self.written - self.file.buffer().len() as u64;
            if upto > self.kicked {
                use std::os::fd::AsRawFd;
                // SAFETY: a valid descriptor and range; this only starts
                // write-back (it neither waits nor changes the file).
                unsafe {
                    libc::sync_file_range(
                        self.file.get_ref().as_raw_fd(),
                        self.kicked as libc::off64_t,
                        (upto - self.kicked) as libc::off64_t,
                        libc::SYNC_FILE_RANGE_WRITE,
                    );
                }
                self.kicked = upto;
            }
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Sink for AtomicFile {
    fn commit(self: Box<Self>) -> Result<()> {
        (*self).finish()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.committed && !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Whether process `pid` exists (it may belong to another user).
pub fn pid_alive(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(p, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes what killed writers left in `dir`: entries named `PREFIX<pid>…`
/// (a temporary file or directory of an atomic write) whose process is gone.
/// A `kill -9` skips every destructor, so without this each crash during a
/// write would leave its temporary behind (a whole checkpoint, for
/// `arl-train`). Entries of live processes, or without a pid, are kept.
/// Pids are this host's: two hosts writing the same name on a shared
/// filesystem could remove each other's temporaries (they would also race
/// for the name itself).
pub fn remove_stale_temps(dir: &Path, prefix: &str) {
    for p in dead_writers(dir, prefix) {
        let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
    }
}

/// The entries of `dir` named `PREFIX<pid>…` whose process is gone.
pub fn dead_writers(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else { return false };
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().is_ok_and(|pid| pid != std::process::id() && !pid_alive(pid))
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_temps_of_dead_writers_are_removed_and_live_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        // 999999999 is above any Linux pid_max: that writer is gone.
        let dead = d.path().join(".out.jsonl.tmp.999999999");
        let own = d.path().join(format!(".out.jsonl.tmp.{}", std::process::id()));
        let init = d.path().join(".out.jsonl.tmp.1");
        let dead_dir = d.path().join(".out.jsonl.tmp.999999998-x");
        let other = d.path().join(".other.tmp.999999999");
        for p in [&dead, &own, &init, &other] {
            std::fs::write(p, b"x").unwrap();
        }
        std::fs::create_dir(&dead_dir).unwrap();
        std::fs::write(dead_dir.join("f"), b"x").unwrap();
        remove_stale_temps(d.path(), ".out.jsonl.tmp.");
        assert!(!dead.exists() && !dead_dir.exists());
        assert!(own.exists() && init.exists() && other.exists());
    }

    #[test]
    fn atomic_file_writes_into_a_fifo_instead_of_replacing_it() {
        use std::os::unix::fs::FileTypeExt;
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let reader = {
            let p = fifo.clone();
            std::thread::spawn(move || std::fs::read(p).unwrap())
        };
        let mut f = AtomicFile::create(&fifo).unwrap();
        f.write_all(b"{}\n").unwrap();
        f.finish().unwrap();
        assert_eq!(reader.join().unwrap(), b"{}\n");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced by a file");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1, "no temporary left");
    }

    #[test]
    fn atomic_file_appears_only_when_finished() {
        let d = tempfile::tempdir().unwrap();
        let dest = d.path().join("out.jsonl");
        let mut f = AtomicFile::create(&dest).unwrap();
        f.write_all(b"{}\n").unwrap();
        assert!(!dest.exists());
        f.finish().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"{}\n");
        let left: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }
}
