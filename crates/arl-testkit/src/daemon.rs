//! The one guard for a daemon a test starts (`arl-serve`, `arl-env`,
//! sgl-router…): its stdout and stderr are drained into a bounded log from the
//! start (a daemon that fills an unread pipe blocks), readiness is awaited
//! with a timeout, and the process is killed and reaped when the guard drops.
//! A daemon that exits or times out before it is ready fails the test with
//! its log.
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How much of a daemon's output is kept (the tail).
const LOG_KEEP: usize = 256 << 10;

/// A running daemon, killed (and reaped) when dropped.
pub struct Daemon {
    name: String,
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Daemon {
    /// Spawns `cmd` and waits up to `timeout` for a line of its stderr that
    /// starts with `ready_prefix`; returns the guard and the rest of that line
    /// (for `arl-serve: listening on URL`, the URL).
    pub fn start(name: &str, cmd: &mut Command, ready_prefix: &str, timeout: Duration) -> (Daemon, String) {
        let (tx, rx) = channel();
        let prefix = ready_prefix.to_string();
        let d = Daemon::spawn(name, cmd, Some((prefix, tx)));
        let rest = d.await_ready(&rx, timeout);
        (d, rest)
    }

    /// Spawns `cmd` and calls `ready` every 100 ms until it returns true, for
    /// up to `timeout` (for daemons whose readiness is an HTTP endpoint).
    pub fn start_polling(name: &str, cmd: &mut Command, timeout: Duration, mut ready: impl FnMut() -> bool) -> Daemon {
        let mut d = Daemon::spawn(name, cmd, None);
        let deadline = Instant::now() + timeout;
        while !ready() {
            if let Ok(Some(st)) = d.child.try_wait() {
                panic!("{} exited ({st}) before it was ready; its output:\n{}", d.name, d.log());
            }
            assert!(Instant::now() < deadline, "{} was not ready within {timeout:?}; its output:\n{}", d.name, d.log());
            std::thread::sleep(Duration::from_millis(100));
        }
        d
    }

    fn spawn(name: &str, cmd: &mut Command, ready: Option<(String, std::sync::mpsc::Sender<String>)>) -> Daemon {
        let mut child = cmd
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let log = Arc::new(Mutex::new(String::new()));
        drain(child.stdout.take().expect("stdout"), log.clone(), None);
        drain(child.stderr.take().expect("stderr"), log.clone(), ready);
        Daemon { name: name.to_string(), child, log }
    }

    fn await_ready(&self, rx: &Receiver<String>, timeout: Duration) -> String {
        match rx.recv_timeout(timeout) {
            Ok(rest) => rest,
            Err(RecvTimeoutError::Disconnected) => {
                panic!("{} exited before it was ready; its output:\n{}", self.name, self.log())
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!("{} was not ready within {timeout:?}; its output:\n{}", self.name, self.log())
            }
        }
    }

    /// What the daemon has written so far (stdout and stderr interleaved by
    /// line, the last 256 KiB).
    pub fn log(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the daemon now (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Copies `from` line by line into `log` until EOF, and sends the rest of the
/// first line that starts with the ready prefix, if one is given. Dropping the
/// sender at EOF tells a waiter that the daemon exited.
fn drain(
    from: impl Read + Send + 'static,
    log: Arc<Mutex<String>>,
    mut ready: Option<(String, std::sync::mpsc::Sender<String>)>,
) {
    std::thread::spawn(move || {
        let mut r = BufReader::new(from);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&buf);
            if let Some((prefix, tx)) = &ready {
                if let Some(rest) = line.strip_prefix(prefix.as_str()) {
                    let _ = tx.send(rest.trim().to_string());
                    ready = None;
                }
            }
            let Ok(mut l) = log.lock() else { break };
            l.push_str(&line);
            if l.len() > 2 * LOG_KEEP {
                let mut cut = l.len() - LOG_KEEP;
                while !l.is_char_boundary(cut) {
                    cut += 1;
                }
                l.drain(..cut);
            }
        }
    });
}
