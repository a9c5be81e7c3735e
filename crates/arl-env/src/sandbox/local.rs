//! The local backend: namespaces (bubblewrap, or `unshare(2)` without it),
//! rlimits, a per-sandbox uid when root, a wall-clock timeout that kills the
//! process group, a scratch directory and capped output.
//!
//! Layout inside the sandbox (bubblewrap mode): `/usr` and `/etc` read-only
//! (plus the `/bin`, `/lib*` links), a fresh `/proc` and minimal `/dev`, the
//! scratch directory at `/sandbox` (the working directory and `$HOME`), and
//! nothing else: no `/root`, `/home`, `/tmp` or project tree. The root is
//! read-only, so the only writable place is the scratch directory.
use super::{CappedBuf, Language, Limits, Outcome, Request, RunResult};
use anyhow::{anyhow, Context, Result};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where the scratch directory appears inside the sandbox.
pub const SCRATCH: &str = "/sandbox";

/// How namespaces are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    Bwrap,
    /// `unshare(2)` in the child: network, ipc, uts and mount namespaces only
    /// (no pid namespace, no private root); the uid switch and rlimits still apply.
    Unshare,
}

/// Local backend settings.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// `None`: bubblewrap when it works here, else unshare.
    pub isolation: Option<Isolation>,
    /// The Python interpreter inside the sandbox; must live under a bound path.
    pub python: PathBuf,
    pub cxx: PathBuf,
    /// Extra host paths bound read-only at the same place (e.g. a venv).
    pub ro_binds: Vec<PathBuf>,
    /// First uid of the per-sandbox range used when running as root.
    pub uid_base: u32,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            isolation: None,
            python: PathBuf::from("/usr/bin/python3"),
            cxx: PathBuf::from("/usr/bin/g++"),
            ro_binds: Vec::new(),
            uid_base: 1_000_000,
        }
    }
}

fn bwrap_works() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        let mut c = Command::new("bwrap");
        c.args(["--ro-bind", "/", "/", "--unshare-net", "--unshare-pid"]);
        if !is_root() {
            c.arg("--unshare-user");
        }
        c.args(["--", "/bin/true"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        c.status().map(|s| s.success()).unwrap_or(false)
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl LocalConfig {
    pub fn isolation(&self) -> Isolation {
        self.isolation.unwrap_or(if bwrap_works() { Isolation::Bwrap } else { Isolation::Unshare })
    }
}

static NEXT_SLOT: AtomicU32 = AtomicU32::new(0);

/// A uid for one sandbox: distinct from every other sandbox of this process
/// that is alive at the same time (slots cycle over 4096), and, through the
/// pid, very likely from other processes' sandboxes, so each has its own
/// `RLIMIT_NPROC` budget.
fn sandbox_uid(base: u32) -> u32 {
    let slot = NEXT_SLOT.fetch_add(1, Ordering::Relaxed) % 4096;
    base + (std::process::id() % 1000) * 4096 + slot
}

/// A prepared scratch directory and the uid that owns it.
pub(crate) struct Scratch {
    pub dir: tempfile::TempDir,
    pub uid: Option<u32>,
}

impl Scratch {
    pub(crate) fn new(cfg: &LocalConfig) -> Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix("arl-sandbox-")
            .tempdir()
            .context("creating the sandbox scratch directory")?;
        let uid = if is_root() { Some(sandbox_uid(cfg.uid_base)) } else { None };
        if let Some(u) = uid {
            std::os::unix::fs::chown(dir.path(), Some(u), Some(u)).context("chown of the scratch directory")?;
        }
        Ok(Scratch { dir, uid })
    }

    pub(crate) fn write(&self, name: &str, data: &[u8]) -> Result<()> {
        let p = self.dir.path().join(name);
        std::fs::write(&p, data).with_context(|| format!("writing {}", p.display()))?;
        if let Some(u) = self.uid {
            std::os::unix::fs::chown(&p, Some(u), Some(u))?;
        }
        Ok(())
    }
}

/// The command line that runs `argv` inside the sandbox over `scratch`.
pub(crate) fn command(cfg: &LocalConfig, scratch: &Scratch, limits: &Limits, argv: &[&str]) -> Result<Command> {
    let iso = cfg.isolation();
    let path_env = "/usr/local/bin:/usr/bin:/bin";
    let mut c;
    match iso {
        Isolation::Bwrap => {
            c = Command::new("bwrap");
            c.args([
                "--die-with-parent",
                "--new-session",
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-net",
                "--unshare-uts",
            ]);
            c.arg("--unshare-cgroup-try");
            if !is_root() {
                c.arg("--unshare-user");
            }
            c.args(["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]);
            for d in ["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"] {
                let p = Path::new(d);
                if let Ok(t) = std::fs::read_link(p) {
                    c.arg("--symlink").arg(t).arg(d);
                } else if p.is_dir() {
                    c.args(["--ro-bind", d, d]);
                }
            }
            for b in &cfg.ro_binds {
                c.arg("--ro-bind").arg(b).arg(b);
            }
            c.args(["--proc", "/proc", "--dev", "/dev"]);
            c.arg("--bind").arg(scratch.dir.path()).arg(SCRATCH);
            c.args(["--chdir", SCRATCH, "--remount-ro", "/", "--"]);
            if let Some(u) = scratch.uid {
                let u = u.to_string();
                c.args([
                    "/usr/bin/setpriv",
                    "--reuid",
                    &u,
                    "--regid",
                    &u,
                    "--clear-groups",
                    "--inh-caps=-all",
                    "--bounding-set=-all",
                    "--",
                ]);
            }
            c.args(argv);
        }
        Isolation::Unshare => {
            c = Command::new(argv[0]);
            c.args(&argv[1..]);
            c.current_dir(scratch.dir.path());
            let uid = scratch.uid;
            // SAFETY: only async-signal-safe calls between fork and exec.
            unsafe {
                c.pre_exec(move || {
                    let flags = libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | libc::CLONE_NEWNS;
                    if libc::unshare(flags) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if let Some(u) = uid {
                        if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(u) != 0 || libc::setuid(u) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
        }
    }
    let home = match iso {
        Isolation::Bwrap => SCRATCH.to_string(),
        Isolation::Unshare => scratch.dir.path().display().to_string(),
    };
    c.env_clear()
        .env("PATH", path_env)
        .env("HOME", &home)
        .env("TMPDIR", &home)
        .env("LANG", "C.UTF-8")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1");
    set_limits(&mut c, limits);
    Ok(c)
}

/// rlimits and a new process group, applied between fork and exec. They are
/// inherited through bubblewrap and setpriv; `RLIMIT_NPROC` starts to bind
/// when setpriv drops to the sandbox uid.
fn set_limits(c: &mut Command, l: &Limits) {
    let cpu = l.timeout.as_secs() + 1;
    let mem = l.memory_mb.saturating_mul(1 << 20);
    let fsize = l.max_file_mb.saturating_mul(1 << 20);
    let nproc = l.max_procs;
    let nofile = l.max_open_files.max(16);
    // SAFETY: setrlimit and setsid are async-signal-safe.
    unsafe {
        c.pre_exec(move || {
            let set = |res, v: u64| {
                let r = libc::rlimit { rlim_cur: v as libc::rlim_t, rlim_max: v as libc::rlim_t };
                libc::setrlimit(res, &r)
            };
            libc::setsid();
            set(libc::RLIMIT_CPU, cpu);
            set(libc::RLIMIT_AS, mem);
            set(libc::RLIMIT_FSIZE, fsize);
            set(libc::RLIMIT_NOFILE, nofile);
            set(libc::RLIMIT_CORE, 0);
            if is_root_raw() {
                set(libc::RLIMIT_NPROC, nproc);
            }
            Ok(())
        });
    }
}

fn is_root_raw() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A finished child: exit code or signal, wall time, captured output.
pub(crate) struct Exec {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub wall_s: f64,
    pub stdout: String,
    pub stderr: String,
    pub truncated: bool,
}

fn reader(mut r: impl Read + Send + 'static, cap: usize) -> std::thread::JoinHandle<(String, bool)> {
    std::thread::spawn(move || {
        let mut b = CappedBuf::new(cap);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => b.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        b.finish()
    })
}

/// Spawns `c`, feeds stdin, waits at most `timeout` (then kills the whole
/// process group), and collects capped output.
pub(crate) fn execute(mut c: Command, stdin: Option<&str>, timeout: Duration, cap: usize) -> Result<Exec> {
    c.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut child =
        c.spawn().context("starting the sandbox (is bubblewrap installed? `scripts/setup.sh` installs it)")?;
    let pid = child.id() as i32;
    let out = reader(child.stdout.take().ok_or_else(|| anyhow!("no stdout pipe"))?, cap);
    let err = reader(child.stderr.take().ok_or_else(|| anyhow!("no stderr pipe"))?, cap);
    if let (Some(data), Some(mut w)) = (stdin, child.stdin.take()) {
        let data = data.as_bytes().to_vec();
        // A program that never reads its stdin must not block us.
        std::thread::spawn(move || {
            let _ = w.write_all(&data);
        });
    }
    let (tx, rx) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let (status, timed_out) = match rx.recv_timeout(timeout) {
        Ok(s) => (s, false),
        Err(_) => {
            // SAFETY: kill has no memory-safety preconditions; -pid is our own group.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
            (rx.recv().map_err(|_| anyhow!("sandbox waiter thread vanished"))?, true)
        }
    };
    let wall_s = start.elapsed().as_secs_f64();
    let status = status.context("waiting for the sandbox")?;
    let (stdout, t1) = out.join().map_err(|_| anyhow!("stdout reader panicked"))?;
    let (stderr, t2) = err.join().map_err(|_| anyhow!("stderr reader panicked"))?;
    use std::os::unix::process::ExitStatusExt;
    let (mut exit_code, mut signal) = (status.code(), status.signal());
    // bubblewrap's pid-1 reports a child killed by signal N as exit code 128+N.
    if let Some(code) = exit_code {
        if (129..=159).contains(&code) {
            signal = Some(code - 128);
            exit_code = None;
        }
    }
    Ok(Exec { exit_code, signal, timed_out, wall_s, stdout, stderr, truncated: t1 || t2 })
}

fn looks_out_of_memory(stderr: &str) -> bool {
    ["MemoryError", "std::bad_alloc", "Cannot allocate memory", "out of memory", "failed to allocate"]
        .iter()
        .any(|m| stderr.contains(m))
}

/// Classifies a finished run.
pub(crate) fn outcome(e: &Exec) -> Outcome {
    if e.timed_out || e.signal == Some(libc::SIGXCPU) {
        return Outcome::Timeout;
    }
    if e.exit_code == Some(0) {
        return if e.truncated { Outcome::OutputTruncated } else { Outcome::Ok };
    }
    if looks_out_of_memory(&e.stderr) {
        return Outcome::Memory;
    }
    if e.signal.is_some() {
        return Outcome::Killed;
    }
    Outcome::Error
}

/// Runs one request on the local backend.
pub fn run(cfg: &LocalConfig, req: &Request, limits: &Limits) -> Result<RunResult> {
    let scratch = Scratch::new(cfg)?;
    let py = cfg.python.display().to_string();
    let (argv, compile_output): (Vec<String>, Option<String>) = match req.language {
        Language::Python => {
            scratch.write("main.py", req.code.as_bytes())?;
            (vec![py, "-B".into(), "main.py".into()], None)
        }
        Language::Bash => {
            scratch.write("main.sh", req.code.as_bytes())?;
            (vec!["/bin/bash".into(), "main.sh".into()], None)
        }
        Language::Cpp => {
            scratch.write("main.cpp", req.code.as_bytes())?;
            let cl = Limits {
                timeout: limits.compile_timeout,
                memory_mb: limits.memory_mb.max(2048),
                max_file_mb: limits.max_file_mb.max(256),
                ..limits.clone()
            };
            let cxx = cfg.cxx.display().to_string();
            let argv = [cxx.as_str(), "-O2", "-std=c++17", "-o", "main", "main.cpp"];
            let c = command(cfg, &scratch, &cl, &argv)?;
            let e = execute(c, None, cl.timeout, limits.max_output)?;
            let diag = format!("{}{}", e.stdout, e.stderr);
            if e.exit_code != Some(0) {
                let why = if e.timed_out { "compilation timed out\n" } else { "" };
                return Ok(RunResult {
                    outcome: Outcome::CompileError,
                    exit_code: e.exit_code,
                    signal: e.signal,
                    stdout: String::new(),
                    stderr: format!("{why}{diag}"),
                    truncated: e.truncated,
                    wall_s: 0.0,
                    compile_output: Some(diag),
                });
            }
            (vec!["./main".into()], Some(diag))
        }
    };
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let c = command(cfg, &scratch, limits, &argv)?;
    let e = execute(c, req.stdin.as_deref(), limits.timeout, limits.max_output)?;
    Ok(RunResult {
        outcome: outcome(&e),
        exit_code: e.exit_code,
        signal: e.signal,
        stdout: e.stdout,
        stderr: e.stderr,
        truncated: e.truncated,
        wall_s: e.wall_s,
        compile_output,
    })
}
