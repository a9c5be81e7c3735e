//! A persistent Python interpreter in the local sandbox: variables live from
//! one call to the next (like a notebook kernel) until the session is dropped,
//! or until a call times out or crashes the interpreter — then the next call
//! starts a fresh one and says so on stderr.
//!
//! The interpreter runs a small driver that reads one JSON request a line on
//! stdin and answers on a private duplicate of its original stdout; the
//! cell's own fds 1 and 2 go to files in the scratch directory, so prints from
//! subprocesses are captured too and cannot corrupt the protocol.
use super::local::{self, LocalConfig, Scratch};
use super::{CappedBuf, Limits, Outcome, RunResult};
use anyhow::{anyhow, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::time::{Duration, Instant};

const DRIVER: &str = r#"
import sys, os, json, ast, traceback
proto = os.fdopen(os.dup(1), "w")
inp = os.fdopen(os.dup(0), "r")
_n = os.open(os.devnull, os.O_RDONLY); os.dup2(_n, 0)
CAP = int(sys.argv[1])
g = {"__name__": "__main__", "__builtins__": __builtins__}
def capped(path):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size <= CAP:
            return f.read().decode("utf-8", "replace"), False
        h = CAP - CAP // 2
        head = f.read(h); f.seek(size - CAP // 2); tail = f.read()
        return head.decode("utf-8", "replace") + "\n[... %d bytes cut by the sandbox (%d total) ...]\n" % (size - h - len(tail), size) + tail.decode("utf-8", "replace"), True
def tb():
    t, v, b = sys.exc_info()
    traceback.print_exception(t, v, b.tb_next if b is not None else None)
for line in inp:
    code = json.loads(line)["code"]
    out = open(".arl_out", "w+b"); err = open(".arl_err", "w+b")
    os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2); out.close(); err.close()
    status, exit_code = "ok", 0
    try:
        tree = ast.parse(code, "<cell>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), g)
        if last is not None:
            v = eval(compile(last, "<cell>", "eval"), g)
            if v is not None:
                print(repr(v))
    except MemoryError:
        status, exit_code = "memory", 1; tb()
    except SystemExit as e:
        c = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        status, exit_code = ("ok" if c == 0 else "error"), c
    except BaseException:
        status, exit_code = "error", 1; tb()
    try:
        sys.stdout.flush(); sys.stderr.flush()
    except Exception:
        pass
    o, t1 = capped(".arl_out"); e, t2 = capped(".arl_err")
    proto.write(json.dumps({"status": status, "exit_code": exit_code, "stdout": o, "stderr": e, "truncated": t1 or t2}) + "\n")
    proto.flush()
"#;

struct Proc {
    child: Child,
    stdin: ChildStdin,
    lines: crossbeam_channel::Receiver<String>,
    stderr: std::thread::JoinHandle<(String, bool)>,
    _scratch: Scratch,
}

impl Proc {
    fn kill(mut self) -> String {
        let pid = self.child.id() as i32;
        // SAFETY: kill on our own child's process group.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
        drop(self.stdin);
        self.stderr.join().map(|(s, _)| s).unwrap_or_default()
    }
}

/// A stateful Python session. Not `Sync`: one episode drives it at a time.
pub struct Session {
    cfg: LocalConfig,
    limits: Limits,
    proc: Option<Proc>,
    restarts: u32,
    calls: u32,
}

impl Session {
    pub(crate) fn new(cfg: LocalConfig, limits: Limits) -> Session {
        Session { cfg, limits, proc: None, restarts: 0, calls: 0 }
    }

    fn start(&mut self) -> Result<()> {
        let scratch = Scratch::new(&self.cfg)?;
        scratch.write(".arl_driver.py", DRIVER.as_bytes())?;
        // The interpreter outlives many calls, so the CPU rlimit is the
        // session's whole budget; each call has its own wall-clock limit.
        let rl = Limits { timeout: Duration::from_secs(3600), ..self.limits.clone() };
        let py = self.cfg.python.display().to_string();
        let cap = self.limits.max_output.to_string();
        let mut c = local::command(&self.cfg, &scratch, &rl, &[py.as_str(), "-B", ".arl_driver.py", cap.as_str()])?;
        c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().context("starting the Python session sandbox")?;
        let stdin = child.stdin.take().ok_or_else(|| anyhow!("no stdin pipe"))?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout pipe"))?;
        let mut errp = child.stderr.take().ok_or_else(|| anyhow!("no stderr pipe"))?;
        let cap = self.limits.max_output;
        let stderr = std::thread::spawn(move || {
            let mut b = CappedBuf::new(cap);
            let mut buf = [0u8; 8192];
            while let Ok(n) = std::io::Read::read(&mut errp, &mut buf) {
                if n == 0 {
                    break;
                }
                b.push(&buf[..n]);
            }
            b.finish()
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        self.proc = Some(Proc { child, stdin, lines: rx, stderr, _scratch: scratch });
        Ok(())
    }

    /// Runs one cell. The value of a trailing expression is printed, as in a notebook.
    pub fn run(&mut self, code: &str) -> Result<RunResult> {
        self.run_with_timeout(code, self.limits.timeout)
    }

    pub fn run_with_timeout(&mut self, code: &str, timeout: Duration) -> Result<RunResult> {
        let mut note = String::new();
        if self.proc.is_none() {
            if self.calls > 0 {
                self.restarts += 1;
                note =
                    "[sandbox: the previous interpreter ended; this is a fresh session, earlier variables are gone]\n"
                        .into();
            }
            self.start()?;
        }
        self.calls += 1;
        let start = Instant::now();
        let p = self.proc.as_mut().ok_or_else(|| anyhow!("session not started"))?;
        let mut line = serde_json::to_vec(&json!({ "code": code }))?;
        line.push(b'\n');
        let sent = p.stdin.write_all(&line).and_then(|_| p.stdin.flush());
        let got = if sent.is_ok() { Some(p.lines.recv_timeout(timeout)) } else { None };
        let wall_s = start.elapsed().as_secs_f64();
        match got {
            Some(Ok(l)) => {
                let v: Value = serde_json::from_str(&l).context("bad reply from the session driver")?;
                let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                let truncated = v.get("truncated").and_then(Value::as_bool).unwrap_or(false);
                let exit_code = v.get("exit_code").and_then(Value::as_i64).map(|x| x as i32);
                let outcome = match v.get("status").and_then(Value::as_str) {
                    Some("memory") => Outcome::Memory,
                    Some("error") => Outcome::Error,
                    _ if truncated => Outcome::OutputTruncated,
                    _ => Outcome::Ok,
                };
                Ok(RunResult {
                    outcome,
                    exit_code,
                    signal: None,
                    stdout: s("stdout"),
                    stderr: note + &s("stderr"),
                    truncated,
                    wall_s,
                    compile_output: None,
                })
            }
            Some(Err(crossbeam_channel::RecvTimeoutError::Timeout)) => {
                let p = self.proc.take().ok_or_else(|| anyhow!("session vanished"))?;
                p.kill();
                Ok(RunResult {
                    outcome: Outcome::Timeout,
                    exit_code: None,
                    signal: Some(libc::SIGKILL),
                    stdout: String::new(),
                    stderr: format!(
                        "{note}[sandbox: the cell ran past {:.1}s; the interpreter was killed and its state is lost]",
                        timeout.as_secs_f64()
                    ),
                    truncated: false,
                    wall_s,
                    compile_output: None,
                })
            }
            _ => {
                // The interpreter died (os._exit, a signal, the process limit...).
                let p = self.proc.take().ok_or_else(|| anyhow!("session vanished"))?;
                let err = p.kill();
                let outcome = if err.contains("MemoryError") { Outcome::Memory } else { Outcome::Killed };
                Ok(RunResult {
                    outcome,
                    exit_code: None,
                    signal: None,
                    stdout: String::new(),
                    stderr: format!("{note}{err}[sandbox: the interpreter exited; its state is lost]"),
                    truncated: false,
                    wall_s,
                    compile_output: None,
                })
            }
        }
    }

    /// How many times the interpreter had to be restarted.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// Ends the session now (also done on drop).
    pub fn close(&mut self) {
        if let Some(p) = self.proc.take() {
            p.kill();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.close();
    }
}
