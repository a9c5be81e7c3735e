//! The sandbox: runs untrusted (model-written) code and says how it ended.
//!
//! Two backends behind one small synchronous API, [`Sandbox::run`]:
//! - **local** (the default): a child process in fresh Linux namespaces (no
//!   network; own pid, mount, ipc, uts) made by bubblewrap, or by `unshare(2)`
//!   when bubblewrap is missing; rlimits; a per-sandbox unprivileged uid when
//!   running as root (so `RLIMIT_NPROC` binds per sandbox); a wall-clock timeout
//!   that kills the process group; an empty scratch directory; a read-only view
//!   of `/usr` and `/etc` and nothing of the host's home or project files; output
//!   capped with the middle cut out. The `unshare(2)` fallback has no pid
//!   namespace and no private root: it warns once on stderr, reports itself as
//!   degraded ([`Sandbox::report`]) and adds Landlock where the kernel has it.
//!   See [`local`].
//! - **remote**: the SandboxFusion HTTP API (`POST /run_code`). See [`remote`].
//!
//! [`Session`] keeps one Python interpreter alive across calls (notebook-like
//! state) for `arl-rollout --python-stateful`; local backend only.
//!
//! Everything here blocks; async callers use `tokio::task::spawn_blocking`.
pub mod local;
pub mod remote;
pub mod session;

use anyhow::Result;
use serde_json::{json, Value};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

pub use session::Session;

/// A language the sandbox can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Language {
    Python,
    Cpp,
    Bash,
}

impl Language {
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Cpp => "cpp",
            Language::Bash => "bash",
        }
    }
    pub fn parse(s: &str) -> Option<Language> {
        match s.to_ascii_lowercase().as_str() {
            "python" | "python3" | "py" => Some(Language::Python),
            "cpp" | "c++" | "cxx" => Some(Language::Cpp),
            "bash" | "sh" | "shell" => Some(Language::Bash),
            _ => None,
        }
    }
}

/// Resource limits of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Wall-clock limit of the program (compilation has its own, `compile_timeout`).
    pub timeout: Duration,
    pub compile_timeout: Duration,
    /// Address-space limit (RLIMIT_AS), MiB.
    pub memory_mb: u64,
    /// Processes/threads of the sandbox's user (RLIMIT_NPROC).
    pub max_procs: u64,
    /// Largest file the code may write (RLIMIT_FSIZE), MiB.
    pub max_file_mb: u64,
    pub max_open_files: u64,
    /// Bytes kept of stdout and of stderr each; the middle of longer output is cut.
    pub max_output: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            timeout: Duration::from_secs(10),
            compile_timeout: Duration::from_secs(30),
            memory_mb: 1024,
            max_procs: 64,
            max_file_mb: 64,
            max_open_files: 256,
            max_output: 64 * 1024,
        }
    }
}

/// One program to run.
#[derive(Debug, Clone)]
pub struct Request {
    pub language: Language,
    pub code: String,
    pub stdin: Option<String>,
    /// Overrides the sandbox's default limits for this run.
    pub limits: Option<Limits>,
}

impl Request {
    pub fn python(code: impl Into<String>) -> Request {
        Request { language: Language::Python, code: code.into(), stdin: None, limits: None }
    }
    pub fn new(language: Language, code: impl Into<String>) -> Request {
        Request { language, code: code.into(), stdin: None, limits: None }
    }
    pub fn with_stdin(mut self, stdin: impl Into<String>) -> Request {
        self.stdin = Some(stdin.into());
        self
    }
    pub fn with_limits(mut self, limits: Limits) -> Request {
        self.limits = Some(limits);
        self
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Exit code 0, output within the cap.
    Ok,
    /// Non-zero exit code (an exception, a failed assert).
    Error,
    /// Wall-clock or CPU-time limit.
    Timeout,
    /// Out of memory (the address-space limit was hit).
    Memory,
    /// Ended by a signal it did not send itself for a limit we know of.
    Killed,
    /// Exit code 0 but stdout or stderr exceeded the cap and was cut.
    OutputTruncated,
    /// The source did not compile (compiled languages).
    CompileError,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Timeout => "timeout",
            Outcome::Memory => "memory",
            Outcome::Killed => "killed",
            Outcome::OutputTruncated => "output_truncated",
            Outcome::CompileError => "compile_error",
        }
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    pub outcome: Outcome,
    /// The program's exit code (`None` when it was killed by a signal we saw).
    pub exit_code: Option<i32>,
    /// The signal that ended it, when known.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Whether stdout or stderr was cut (also true under `timeout` etc.).
    pub truncated: bool,
    /// Wall time of the program (compilation excluded), seconds.
    pub wall_s: f64,
    /// Compiler diagnostics, for compiled languages.
    pub compile_output: Option<String>,
}

impl RunResult {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "outcome": self.outcome.as_str(),
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "wall_s": (self.wall_s * 1000.0).round() / 1000.0,
        });
        if let Some(s) = self.signal {
            v["signal"] = json!(s);
        }
        if self.truncated {
            v["truncated"] = json!(true);
        }
        if let Some(c) = &self.compile_output {
            v["compile_output"] = json!(c);
        }
        v
    }
}

/// Which backend a [`Sandbox`] uses.
#[derive(Debug, Clone)]
pub enum Backend {
    Local(local::LocalConfig),
    /// SandboxFusion: the base URL or the full `/run_code` URL.
    Remote(remote::RemoteConfig),
}

/// A counting semaphore: bounds how many sandboxes run at once.
#[derive(Debug)]
struct Semaphore {
    free: Mutex<usize>,
    cv: Condvar,
}

struct Permit<'a>(&'a Semaphore);

impl Semaphore {
    fn acquire(&self) -> Permit<'_> {
        let mut n = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *n == 0 {
            n = self.cv.wait(n).unwrap_or_else(|e| e.into_inner());
        }
        *n -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut n = self.0.free.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        self.0.cv.notify_one();
    }
}

/// A sandbox pool: a backend, default limits and a bound on concurrent runs.
/// Cheap to clone (shared); `Send + Sync`, so one can serve many threads.
#[derive(Clone, Debug)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    backend: Backend,
    limits: Limits,
    sem: Semaphore,
    concurrency: usize,
    report: std::sync::OnceLock<Value>,
}

impl Sandbox {
    /// A sandbox with `concurrency` runs at most at once (min 1).
    pub fn new(backend: Backend, limits: Limits, concurrency: usize) -> Sandbox {
        let c = concurrency.max(1);
        Sandbox {
            inner: Arc::new(Inner {
                backend,
                limits,
                sem: Semaphore { free: Mutex::new(c), cv: Condvar::new() },
                concurrency: c,
                report: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The local backend with its defaults.
    pub fn local(limits: Limits, concurrency: usize) -> Sandbox {
        Sandbox::new(Backend::Local(local::LocalConfig::default()), limits, concurrency)
    }

    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    pub fn backend(&self) -> &Backend {
        &self.inner.backend
    }

    pub fn concurrency(&self) -> usize {
        self.inner.concurrency
    }

    /// What the code runs in, for records (`reward_detail.sandbox`): the
    /// local backend's [`local::LocalConfig::report`] (`bwrap`, or the
    /// degraded `namespaces` fallback with what it lacks and whether Landlock
    /// is enforced), or `{"isolation": "sandboxfusion"}`.
    pub fn report(&self) -> &Value {
        self.inner.report.get_or_init(|| match &self.inner.backend {
            Backend::Local(cfg) => cfg.report(),
            Backend::Remote(_) => json!({"isolation": "sandboxfusion"}),
        })
    }

    /// Runs one program; blocks while `concurrency` others are running.
    /// `Err` only when the sandbox itself failed (could not start, remote
    /// server down after retries), never for what the program did.
    pub fn run(&self, req: &Request) -> Result<RunResult> {
        let limits = req.limits.as_ref().unwrap_or(&self.inner.limits);
        let _permit = self.inner.sem.acquire();
        match &self.inner.backend {
            Backend::Local(cfg) => local::run(cfg, req, limits),
            Backend::Remote(cfg) => remote::run(cfg, req, limits),
        }
    }

    /// A persistent Python interpreter (local backend only).
    pub fn session(&self) -> Result<Session> {
        match &self.inner.backend {
            Backend::Local(cfg) => Ok(Session::new(cfg.clone(), self.inner.limits.clone())),
            Backend::Remote(_) => Err(anyhow::anyhow!(
                "stateful Python sessions need the local sandbox (SandboxFusion's /run_jupyter is stateless)"
            )),
        }
    }
}

/// Keeps the head and the tail of a stream; the middle of a long one is
/// replaced by a marker saying how much was cut.
#[derive(Debug)]
pub(crate) struct CappedBuf {
    cap: usize,
    head: Vec<u8>,
    tail: Vec<u8>,
    total: u64,
}

impl CappedBuf {
    pub(crate) fn new(cap: usize) -> CappedBuf {
        CappedBuf { cap, head: Vec::new(), tail: Vec::new(), total: 0 }
    }

    pub(crate) fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let half_head = self.cap - self.cap / 2;
        if self.head.len() < half_head {
            let n = (half_head - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        let half_tail = self.cap / 2;
        if data.is_empty() || half_tail == 0 {
            return;
        }
        if data.len() >= half_tail {
            self.tail.clear();
            self.tail.extend_from_slice(&data[data.len() - half_tail..]);
        } else {
            self.tail.extend_from_slice(data);
            // Trim lazily so the cost stays amortised O(1) per byte.
            if self.tail.len() > 2 * half_tail {
                let cut = self.tail.len() - half_tail;
                self.tail.drain(..cut);
            }
        }
    }

    pub(crate) fn finish(mut self) -> (String, bool) {
        let half_tail = self.cap / 2;
        if self.tail.len() > half_tail {
            let cut = self.tail.len() - half_tail;
            self.tail.drain(..cut);
        }
        let kept = (self.head.len() + self.tail.len()) as u64;
        if self.total <= self.cap as u64 {
            let mut all = self.head;
            all.extend_from_slice(&self.tail);
            return (String::from_utf8_lossy(&all).into_owned(), false);
        }
        let cut = self.total - kept;
        let s = format!(
            "{}\n[... {cut} bytes cut by the sandbox ({} total) ...]\n{}",
            String::from_utf8_lossy(&self.head),
            self.total,
            String::from_utf8_lossy(&self.tail)
        );
        (s, true)
    }
}

/// Cuts the middle of `s` to at most `max` bytes (on char boundaries), with a marker.
pub fn cut_middle(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut a = max - max / 2;
    while !s.is_char_boundary(a) {
        a -= 1;
    }
    let mut b = s.len() - max / 2;
    while !s.is_char_boundary(b) {
        b += 1;
    }
    format!("{}\n[... {} bytes cut ...]\n{}", &s[..a], b - a, &s[b..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capped_buf_keeps_head_and_tail() {
        let mut rng = arl_core::rng::Rng::new(7);
        for _ in 0..200 {
            let cap = 1 + rng.below(64) as usize;
            let mut b = CappedBuf::new(cap);
            let mut all = Vec::new();
            for _ in 0..rng.below(20) {
                let n = rng.below(50) as usize;
                let chunk: Vec<u8> = (0..n).map(|_| b'a' + rng.below(26) as u8).collect();
                b.push(&chunk);
                all.extend_from_slice(&chunk);
            }
            let (s, t) = b.finish();
            if all.len() <= cap {
                assert!(!t);
                assert_eq!(s.as_bytes(), &all[..]);
            } else {
                assert!(t);
                let h = cap - cap / 2;
                assert!(s.starts_with(std::str::from_utf8(&all[..h]).unwrap()));
                assert!(s.ends_with(std::str::from_utf8(&all[all.len() - cap / 2..]).unwrap()));
                assert!(s.contains(&format!("{} bytes cut", all.len() - cap)));
            }
        }
    }

    #[test]
    fn cut_middle_respects_char_boundaries() {
        let s = "é".repeat(100);
        let c = cut_middle(&s, 51);
        assert!(c.contains("bytes cut"));
        assert_eq!(cut_middle("short", 10), "short");
    }
}
