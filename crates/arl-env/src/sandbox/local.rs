//! The local backend: namespaces (bubblewrap, or `unshare(2)` without it),
//! rlimits, a per-sandbox uid when root, a wall-clock timeout that kills the
//! process group, a scratch directory and capped output.
//!
//! Layout inside the sandbox (bubblewrap mode): `/usr` and `/etc` read-only
//! (plus the `/bin`, `/lib*` links), a fresh `/proc` and minimal `/dev`, the
//! scratch directory at `/sandbox` (the working directory and `$HOME`), and
//! nothing else: no `/root`, `/home`, `/tmp` or project tree. The root is
//! read-only, so the only writable place is the scratch directory.
//!
//! Without bubblewrap (not installed, or unable to make namespaces here) the
//! sandbox falls back to bare namespaces ([`Isolation::Unshare`]): private
//! network, IPC, hostname and mount tables, but no pid namespace and no
//! private root. That is a weaker sandbox, and it says so: once per process on
//! stderr ([`LocalConfig::fallback_warning`]) and in every report
//! ([`LocalConfig::report`], which `arl-reward` writes to `reward_detail`).
//! Where the kernel has Landlock, the fallback adds it in the child before
//! exec: read and execute only beneath the system directories (the ones
//! bubblewrap would bind), read and write only beneath the scratch directory,
//! nothing else (no `/proc`, `/sys`, `/tmp`, `/home`); on ABI 6 and later no
//! signals to processes outside the sandbox and no abstract UNIX sockets
//! outside it. `no_new_privs` is set in either case.
use super::{CappedBuf, Language, Limits, Outcome, Request, RunResult};
use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Where the scratch directory appears inside the sandbox.
pub const SCRATCH: &str = "/sandbox";

/// Set (to anything but empty or `0`): act as if bubblewrap were not
/// installed, so the fallback is used (for tests, and to see what it does).
pub const NO_BWRAP_ENV: &str = "ARL_SANDBOX_NO_BWRAP";

/// Set: act as if the kernel had no Landlock (the fallback runs without it).
pub const NO_LANDLOCK_ENV: &str = "ARL_SANDBOX_NO_LANDLOCK";

/// The system directories the sandboxed program may read and execute: what
/// bubblewrap binds read-only (symbolic links such as `/bin -> usr/bin`
/// resolve into `/usr`).
const SYSTEM_DIRS: &[&str] = &["/usr", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"];

/// Device files the program may read (`/dev/null` also written).
const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// How namespaces are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    Bwrap,
    /// `unshare(2)` in the child: network, ipc, uts and mount namespaces only
    /// (no pid namespace, no private root); the uid switch, rlimits,
    /// `no_new_privs` and Landlock (where the kernel has it) still apply.
    Unshare,
}

impl Isolation {
    /// The name in reports: `bwrap` or `namespaces`.
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Bwrap => "bwrap",
            Isolation::Unshare => "namespaces",
        }
    }
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
    /// Whether the unshare fallback applies Landlock where the kernel has it
    /// (default: yes, unless `ARL_SANDBOX_NO_LANDLOCK` is set).
    pub landlock: bool,
}

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            isolation: None,
            python: PathBuf::from("/usr/bin/python3"),
            cxx: PathBuf::from("/usr/bin/g++"),
            ro_binds: Vec::new(),
            uid_base: 1_000_000,
            landlock: !arl_core::cli::env_flag(NO_LANDLOCK_ENV),
        }
    }
}

/// Why bubblewrap cannot be used here; `None` when it works. Probed once per
/// process (a real `bwrap` run with the namespaces the sandbox asks for).
pub fn bwrap_unusable() -> Option<&'static str> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    WHY.get_or_init(|| {
        if arl_core::cli::env_flag(NO_BWRAP_ENV) {
            return Some(format!("{NO_BWRAP_ENV} is set"));
        }
        let mut c = Command::new("bwrap");
        c.args(["--ro-bind", "/", "/", "--unshare-net", "--unshare-pid"]);
        if !is_root() {
            c.arg("--unshare-user");
        }
        c.args(["--", "/bin/true"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        match c.output() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("`bwrap` is not installed".into()),
            Err(e) => Some(format!("`bwrap` could not be started: {e}")),
            Ok(o) if o.status.success() => None,
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr);
                let last = err.trim().lines().last().unwrap_or("").trim();
                Some(if last.is_empty() {
                    format!("`bwrap` fails here ({})", o.status)
                } else {
                    format!("`bwrap` fails here: {}", super::cut_middle(last, 200))
                })
            }
        }
    })
    .as_deref()
}

fn bwrap_works() -> bool {
    bwrap_unusable().is_none()
}

/// The kernel's Landlock ABI version, or why there is none. Probed once.
pub fn landlock_abi() -> std::result::Result<i32, &'static str> {
    static ABI: OnceLock<std::result::Result<i32, &'static str>> = OnceLock::new();
    *ABI.get_or_init(|| {
        const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
        // SAFETY: with a null attribute and size 0 this only asks for the version.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                LANDLOCK_CREATE_RULESET_VERSION,
            )
        };
        if v > 0 {
            return Ok(v as i32);
        }
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EOPNOTSUPP) => Err("Landlock is built into this kernel but not enabled (boot option `lsm=`)"),
            _ => Err("this kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)"),
        }
    })
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the fallback applies Landlock, or why not.
fn landlock_for(cfg: &LocalConfig) -> std::result::Result<i32, &'static str> {
    if !cfg.landlock {
        return Err(if arl_core::cli::env_flag(NO_LANDLOCK_ENV) {
            "ARL_SANDBOX_NO_LANDLOCK is set"
        } else {
            "turned off in the sandbox's configuration"
        });
    }
    landlock_abi()
}

/// What the sandbox keeps from bubblewrap's protections without it.
const FALLBACK_MISSING: &[&str] = &["pid namespace", "private root filesystem", "cgroup namespace"];

/// The Landlock ruleset of one fallback run, made before fork (the child only
/// calls `prctl` and `landlock_restrict_self` on its descriptor).
fn landlock_ruleset(abi: i32, cfg: &LocalConfig, scratch: &Path) -> Result<OwnedFd> {
    use landlock::{
        Access, AccessFs, BitFlags, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, ABI,
    };
    let abi = ABI::from(abi);
    let read = AccessFs::from_read(abi);
    let mut rs = Ruleset::default().handle_access(AccessFs::from_all(abi)).context("Landlock: filesystem rights")?;
    let scopes = Scope::from_all(abi);
    if !scopes.is_empty() {
        rs = rs.scope(scopes).context("Landlock: scopes")?;
    }
    let mut created = rs.create().context("Landlock: creating the ruleset")?;
    let mut dirs: Vec<PathBuf> = SYSTEM_DIRS.iter().map(PathBuf::from).collect();
    dirs.extend(cfg.ro_binds.iter().cloned());
    for d in dirs.iter().filter(|d| d.exists()) {
        let fd = PathFd::new(d).with_context(|| format!("Landlock: opening {}", d.display()))?;
        let access = if d.is_dir() { read } else { read & AccessFs::from_file(abi) };
        created =
            created.add_rule(PathBeneath::new(fd, access)).with_context(|| format!("Landlock: {}", d.display()))?;
    }
    let file_rw: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate;
    for dev in DEVICES.iter().map(Path::new).filter(|p| p.exists()) {
        let access = if dev.as_os_str() == "/dev/null" { file_rw } else { AccessFs::ReadFile.into() };
        let fd = PathFd::new(dev).with_context(|| format!("Landlock: opening {}", dev.display()))?;
        created = created
            .add_rule(PathBeneath::new(fd, access & AccessFs::from_file(abi)))
            .with_context(|| format!("Landlock: {}", dev.display()))?;
    }
    let fd = PathFd::new(scratch).context("Landlock: opening the scratch directory")?;
    created =
        created.add_rule(PathBeneath::new(fd, AccessFs::from_all(abi))).context("Landlock: the scratch directory")?;
    Option::<OwnedFd>::from(created).ok_or_else(|| anyhow!("Landlock: the kernel made no ruleset"))
}

impl LocalConfig {
    pub fn isolation(&self) -> Isolation {
        self.isolation.unwrap_or(if bwrap_works() { Isolation::Bwrap } else { Isolation::Unshare })
    }

    /// Why this configuration runs on the fallback (`None`: it uses bubblewrap).
    pub fn fallback_reason(&self) -> Option<String> {
        match self.isolation {
            Some(Isolation::Bwrap) => None,
            Some(Isolation::Unshare) => Some("the fallback was asked for".into()),
            None => bwrap_unusable().map(str::to_string),
        }
    }

    /// `Ok` when the full sandbox (bubblewrap) is used; else an error naming
    /// what is missing, for callers that refuse to run degraded.
    pub fn require_full(&self) -> Result<()> {
        match self.fallback_reason() {
            None => Ok(()),
            Some(why) => Err(anyhow!(
                "the full sandbox needs bubblewrap, and {why}; the fallback (bare Linux namespaces) has no {}",
                FALLBACK_MISSING.join(", no ")
            )),
        }
    }

    /// What the code runs in, as recorded with results (`reward_detail.sandbox`):
    /// `{"isolation": "bwrap"}`, or for the fallback
    /// `{"isolation": "namespaces", "degraded": true, "missing": [...],
    /// "landlock": {"enforced": true, "abi": 7, "scopes": [...]} }` (or
    /// `{"enforced": false, "why": ...}`).
    pub fn report(&self) -> Value {
        match self.isolation() {
            Isolation::Bwrap => json!({"isolation": Isolation::Bwrap.as_str()}),
            Isolation::Unshare => {
                let landlock = match landlock_for(self) {
                    Ok(abi) => {
                        let mut l = json!({"enforced": true, "abi": abi});
                        if abi >= 6 {
                            l["scopes"] = json!(["signal", "abstract_unix_socket"]);
                        }
                        l
                    }
                    Err(why) => json!({"enforced": false, "why": why}),
                };
                json!({
                    "isolation": Isolation::Unshare.as_str(),
                    "degraded": true,
                    "missing": FALLBACK_MISSING,
                    "landlock": landlock,
                })
            }
        }
    }

    /// The warning printed (once per process) when the fallback is used.
    pub fn fallback_warning(&self) -> Option<String> {
        let why = self.fallback_reason()?;
        let landlock = match landlock_for(self) {
            Ok(abi) => format!(
                "Landlock (ABI {abi}) stands in for the private root: the code may read and execute only the \
                 system directories (/usr, /etc, /bin, /lib…) and write only its scratch directory (no /proc, \
                 /tmp or home){}.",
                if abi >= 6 { ", and may signal only its own processes" } else { "" }
            ),
            Err(e) => format!(
                "No Landlock stands in for the private root ({e}): the code can read every host file its user \
                 can, /proc included, and write wherever its user may (/tmp)."
            ),
        };
        let leftovers = if is_root() {
            "Processes the code leaves behind are killed through their per-run uid."
        } else {
            "A process the code leaves behind outside its process group outlives the run (not root: no per-run uid)."
        };
        Some(format!(
            "the code sandbox runs without bubblewrap ({why}), on bare Linux namespaces: network, IPC, hostname and \
             mount table private, but no pid namespace, no private root filesystem, no cgroup namespace. \
             {landlock} {leftovers} Records say so in `reward_detail.sandbox`; install bubblewrap \
             (scripts/setup.sh does) for the full sandbox"
        ))
    }
}

/// Prints [`LocalConfig::fallback_warning`] once per process, as
/// `<program>: warning: …`.
fn warn_fallback_once(cfg: &LocalConfig) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if let Some(w) = cfg.fallback_warning() {
            let prog = std::env::args_os()
                .next()
                .and_then(|a| Path::new(&a).file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_else(|| "arl".into());
            eprintln!("{prog}: warning: {w}");
        }
    });
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
    /// Kill what still runs as `uid` when done (the fallback has no pid
    /// namespace whose end would take leftover processes with it).
    reap: bool,
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
        Ok(Scratch { dir, uid, reap: cfg.isolation() == Isolation::Unshare })
    }

    /// The uid whose processes die with the run (fallback mode, as root).
    pub(crate) fn reap_uid(&self) -> Option<u32> {
        self.uid.filter(|&u| self.reap && u != 0)
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

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(u) = self.reap_uid() {
            kill_uid(u);
        }
    }
}

/// Kills every process running as `uid` (a per-sandbox uid, so only that
/// sandbox's): a child switches to it and sends SIGKILL to -1. Without a pid
/// namespace this is what ends a process that left its process group (a
/// double fork, `setsid`) before the run's wall-clock kill.
fn kill_uid(uid: u32) {
    // SAFETY: the child makes raw system calls only (async-signal-safe) and
    // leaves with _exit; the parent reaps it.
    unsafe {
        let pid = libc::fork();
        if pid == 0 {
            if libc::syscall(libc::SYS_setgroups, 0usize, std::ptr::null::<libc::gid_t>()) == 0
                && libc::syscall(libc::SYS_setgid, uid as libc::c_long) == 0
                && libc::syscall(libc::SYS_setuid, uid as libc::c_long) == 0
            {
                libc::kill(-1, libc::SIGKILL);
            }
            libc::_exit(0);
        }
        if pid > 0 {
            let mut status = 0;
            while libc::waitpid(pid, &mut status, 0) < 0
                && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
            {}
        }
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
            warn_fallback_once(cfg);
            c = Command::new(argv[0]);
            c.args(&argv[1..]);
            c.current_dir(scratch.dir.path());
            let uid = scratch.uid;
            // An unprivileged caller needs a user namespace to own the others.
            let userns = if is_root() { 0 } else { libc::CLONE_NEWUSER };
            // Built here, before fork: the child only applies it.
            let ruleset = match landlock_for(cfg) {
                Ok(abi) => Some(landlock_ruleset(abi, cfg, scratch.dir.path())?),
                Err(_) => None,
            };
            // SAFETY: only async-signal-safe calls between fork and exec (raw
            // system calls; no allocation, no locks).
            unsafe {
                c.pre_exec(move || {
                    let flags =
                        userns | libc::CLONE_NEWNET | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS | libc::CLONE_NEWNS;
                    if libc::unshare(flags) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if let Some(u) = uid {
                        if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(u) != 0 || libc::setuid(u) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    // No setuid/file-capability gains after exec; required
                    // by Landlock for an unprivileged process.
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    if let Some(fd) = &ruleset {
                        if libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) != 0 {
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
    // Decided here, before fork: in the fallback the child has already
    // switched to the sandbox uid when this runs (the closures run in the
    // order they were registered), so asking there would always say no and
    // leave a fork bomb without a process limit.
    let limit_procs = is_root();
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
            if limit_procs {
                set(libc::RLIMIT_NPROC, nproc);
            }
            Ok(())
        });
    }
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

/// One output pipe, read into a capped buffer on its own thread.
struct Drain {
    buf: std::sync::Arc<std::sync::Mutex<CappedBuf>>,
    eof: crossbeam_channel::Receiver<()>,
}

fn reader(mut r: impl Read + Send + 'static, cap: usize) -> Drain {
    let buf = std::sync::Arc::new(std::sync::Mutex::new(CappedBuf::new(cap)));
    let (tx, eof) = crossbeam_channel::bounded(1);
    let b = buf.clone();
    std::thread::spawn(move || {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match r.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => b.lock().unwrap_or_else(|e| e.into_inner()).push(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let _ = tx.send(());
    });
    Drain { buf, eof }
}

impl Drain {
    /// What was read, waiting for end of file until `deadline`; the flag
    /// says whether the output was cut (capped), the second whether the pipe
    /// reached its end (else it was still held open at the deadline).
    fn finish(self, deadline: Instant) -> (String, bool, bool) {
        let complete = self.eof.recv_deadline(deadline).is_ok();
        let b = std::mem::replace(&mut *self.buf.lock().unwrap_or_else(|e| e.into_inner()), CappedBuf::new(0));
        let (s, cut) = b.finish();
        (s, cut, complete)
    }
}

/// Spawns `c`, feeds stdin, waits at most `timeout` (then kills the whole
/// process group), and collects capped output.
/// `reap`: the sandbox uid whose processes are killed as soon as the program
/// ends (the fallback's stand-in for the end of a pid namespace), before its
/// output pipes are drained, so a left-behind process cannot hold them open.
pub(crate) fn execute(
    mut c: Command,
    stdin: Option<&str>,
    timeout: Duration,
    cap: usize,
    reap: Option<u32>,
) -> Result<Exec> {
    c.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    // EAGAIN: the process table (or the sandbox uid's process limit) is full
    // for a moment, e.g. while an earlier program's fork bomb is reaped.
    let mut tries = 0;
    let mut child = loop {
        match c.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && tries < 50 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            r => break r.context("starting the sandbox (bubblewrap, or unshare(2) and Landlock without it)")?,
        }
    };
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
    if let Some(u) = reap {
        kill_uid(u);
    }
    let status = status.context("waiting for the sandbox")?;
    // Once the program has ended its pipes close at once, unless a process it
    // left behind (outside its process group, where no uid or pid namespace
    // ends it) still holds them: then stop reading after a grace period.
    let deadline = Instant::now() + Duration::from_secs(1);
    let (stdout, t1, c1) = out.finish(deadline);
    let (mut stderr, t2, c2) = err.finish(deadline);
    if !(c1 && c2) {
        stderr.push_str("\n[sandbox: a process the program left behind still holds its output; read up to here]\n");
    }
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
            let e = execute(c, None, cl.timeout, limits.max_output, scratch.reap_uid())?;
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
    let e = execute(c, req.stdin.as_deref(), limits.timeout, limits.max_output, scratch.reap_uid())?;
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
