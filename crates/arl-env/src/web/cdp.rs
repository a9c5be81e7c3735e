//! A small Chrome DevTools Protocol client over `--remote-debugging-pipe`:
//! the browser reads NUL-terminated JSON commands on its fd 3 and writes
//! answers and events on its fd 4. No debugging port is opened, so nothing
//! but this process can drive the browser.
//!
//! One [`Browser`] is one headless Chromium process; each episode gets a
//! [`Page`] in a browser context of its own (`Target.createBrowserContext`:
//! cookies, storage and cache are not shared), attached with a flat session
//! (`Target.attachToTarget {flatten: true}`), and the context is disposed
//! when the page is dropped.
//!
//! Network isolation: every request goes through a proxy that this process
//! runs and that refuses everything (403), except the hosts given in
//! `allow` (the task server), which bypass it (`--proxy-bypass-list`, with
//! `<-loopback>` so that other loopback ports are not bypassed implicitly).
//! WebRTC may not use UDP outside the proxy, and host names that are not
//! allowed do not resolve (`--host-resolver-rules`).
//!
//! Calls are blocking (each with a timeout); a reader thread routes answers
//! to their callers, accepts JavaScript dialogs (which would otherwise stop
//! the page) and counts the frames' loading starts and stops per session,
//! which [`Page::settle`] waits on.
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

type Reply = Result<Value, String>;

#[derive(Default)]
struct Loading {
    started: u64,
    stopped: u64,
}

struct Inner {
    writer: Mutex<File>,
    pending: Mutex<HashMap<u64, mpsc::Sender<Reply>>>,
    loading: Mutex<HashMap<String, Loading>>,
    next: AtomicU64,
    dead: AtomicBool,
    timeout: Duration,
}

impl Inner {
    fn send(&self, id: u64, method: &str, params: Value, session: Option<&str>) -> Result<(), String> {
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).map_err(|e| e.to_string())?;
        bytes.push(0);
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        w.write_all(&bytes).map_err(|e| format!("the browser is gone ({e})"))
    }

    fn call(&self, method: &str, params: Value, session: Option<&str>) -> Reply {
        if self.dead.load(Ordering::SeqCst) {
            return Err("the browser has exited".into());
        }
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel();
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(id, tx);
        if let Err(e) = self.send(id, method, params, session) {
            self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            return Err(e);
        }
        match rx.recv_timeout(self.timeout) {
            Ok(r) => r,
            Err(_) => {
                self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                Err(format!("`{method}`: no answer from the browser within {:?}", self.timeout))
            }
        }
    }

    /// Sends without waiting for the answer.
    fn post(&self, method: &str, params: Value, session: Option<&str>) {
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        let _ = self.send(id, method, params, session);
    }

    fn on_message(&self, v: Value) {
        if let Some(id) = v.get("id").and_then(Value::as_u64) {
            let tx = self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            if let Some(tx) = tx {
                let r = match v.get("error") {
                    Some(e) => Err(e.get("message").and_then(Value::as_str).unwrap_or("error").to_string()),
                    None => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = tx.send(r);
            }
            return;
        }
        let session = v.get("sessionId").and_then(Value::as_str);
        match v.get("method").and_then(Value::as_str) {
            Some("Page.javascriptDialogOpening") => {
                self.post("Page.handleJavaScriptDialog", json!({"accept": true}), session)
            }
            Some("Page.frameStartedLoading") => {
                if let Some(s) = session {
                    self.loading.lock().unwrap_or_else(|p| p.into_inner()).entry(s.to_string()).or_default().started +=
                        1;
                }
            }
            Some("Page.frameStoppedLoading") => {
                if let Some(s) = session {
                    self.loading.lock().unwrap_or_else(|p| p.into_inner()).entry(s.to_string()).or_default().stopped +=
                        1;
                }
            }
            _ => {}
        }
    }

    fn die(&self) {
        self.dead.store(true, Ordering::SeqCst);
        for (_, tx) in self.pending.lock().unwrap_or_else(|p| p.into_inner()).drain() {
            let _ = tx.send(Err("the browser has exited".into()));
        }
    }
}

/// How to start the browser.
#[derive(Debug, Clone)]
pub struct LaunchOpts {
    /// The Chromium binary.
    pub chromium: PathBuf,
    /// `host:port`s the pages may reach (the task server); everything else is refused.
    pub allow: Vec<String>,
    /// Time limit of one protocol call.
    pub timeout: Duration,
}

/// Finds the Chromium binary: `$ARL_CHROMIUM`, else `chromium`,
/// `chromium-browser`, `google-chrome` on `PATH`.
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ARL_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    for name in ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"] {
        for dir in std::env::split_paths(&path) {
            let c = dir.join(name);
            if c.is_file() {
                return Some(c);
            }
        }
    }
    None
}

/// A proxy that refuses every request: what a page reaches when it asks
/// for anything but the task server.
struct Refuser {
    port: u16,
    stop: Arc<AtomicBool>,
}

impl Refuser {
    fn start() -> std::io::Result<Refuser> {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = l.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        std::thread::Builder::new().name("arl-web-refuser".into()).spawn(move || {
            for c in l.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut c) = c else { continue };
                std::thread::spawn(move || {
                    let _ = c.set_read_timeout(Some(Duration::from_secs(2)));
                    let mut buf = [0u8; 4096];
                    let _ = c.read(&mut buf);
                    let body = "blocked: only the task site is reachable from this browser\n";
                    let _ = write!(c, "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
                });
            }
        })?;
        Ok(Refuser { port, stop })
    }
}

impl Drop for Refuser {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
    }
}

pub struct Browser {
    inner: Arc<Inner>,
    child: Mutex<Child>,
    _refuser: Refuser,
    _dir: tempfile::TempDir,
}

fn pipe() -> std::io::Result<(RawFd, RawFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((fds[0], fds[1]))
}

impl Browser {
    pub fn launch(o: &LaunchOpts) -> Result<Browser, String> {
        let dir = tempfile::Builder::new()
            .prefix("arl-chromium-")
            .tempdir()
            .map_err(|e| format!("temporary profile: {e}"))?;
        let refuser = Refuser::start().map_err(|e| format!("starting the refusing proxy: {e}"))?;
        let (to_chrome_r, to_chrome_w) = pipe().map_err(|e| e.to_string())?;
        let (from_chrome_r, from_chrome_w) = pipe().map_err(|e| e.to_string())?;
        let bypass: Vec<String> = std::iter::once("<-loopback>".to_string()).chain(o.allow.iter().cloned()).collect();
        let hosts: Vec<&str> = o.allow.iter().map(|a| a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h)).collect();
        let resolver = format!("MAP * ~NOTFOUND{}", hosts.iter().map(|h| format!(", EXCLUDE {h}")).collect::<String>());
        let log = File::create(dir.path().join("chromium.log")).map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&o.chromium);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--remote-debugging-pipe",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-default-apps",
            "--disable-breakpad",
            "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication",
            "--metrics-recording-only",
            "--mute-audio",
            "--password-store=basic",
            "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", dir.path().display()))
        .arg(format!("--proxy-server=http://127.0.0.1:{}", refuser.port))
        .arg(format!("--proxy-bypass-list={}", bypass.join(";")))
        .arg(format!("--host-resolver-rules={resolver}"))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log));
        let (a, b) = (to_chrome_r, from_chrome_w);
        // SAFETY: only async-signal-safe calls between fork and exec. The two
        // ends are first moved above 10 so that placing them at 3 and 4
        // cannot overwrite one with the other.
        unsafe {
            cmd.pre_exec(move || {
                let ra = libc::fcntl(a, libc::F_DUPFD_CLOEXEC, 10);
                let rb = libc::fcntl(b, libc::F_DUPFD_CLOEXEC, 10);
                if ra < 0 || rb < 0 || libc::dup2(ra, 3) < 0 || libc::dup2(rb, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        // The browser is started from the reader thread, which lives as long
        // as the browser does: PR_SET_PDEATHSIG fires when the thread that
        // started the child ends, and this one ends only after the browser.
        // SAFETY: the descriptors come from pipe2 above and are owned once each.
        let (writer, reader) = unsafe { (File::from_raw_fd(to_chrome_w), File::from_raw_fd(from_chrome_r)) };
        let inner = Arc::new(Inner {
            writer: Mutex::new(writer),
            pending: Mutex::new(HashMap::new()),
            loading: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            dead: AtomicBool::new(false),
            timeout: o.timeout,
        });
        let (ctx, crx) = mpsc::channel();
        let inn = inner.clone();
        std::thread::Builder::new()
            .name("arl-cdp-reader".into())
            .spawn(move || {
                let spawned = cmd.spawn();
                // SAFETY: the child has its copies; ours of the child's ends are closed once.
                unsafe {
                    libc::close(a);
                    libc::close(b);
                }
                let ok = spawned.is_ok();
                let _ = ctx.send(spawned);
                if ok {
                    let mut r = BufReader::new(reader);
                    let mut buf = Vec::new();
                    loop {
                        buf.clear();
                        match r.read_until(0, &mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {
                                if buf.last() == Some(&0) {
                                    buf.pop();
                                }
                                if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
                                    inn.on_message(v);
                                }
                            }
                        }
                    }
                }
                inn.die();
            })
            .map_err(|e| e.to_string())?;
        let child = match crx.recv() {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(format!("cannot start `{}`: {e}", o.chromium.display())),
            Err(_) => return Err("the browser's reader thread failed".into()),
        };
        let b = Browser { inner, child: Mutex::new(child), _refuser: refuser, _dir: dir };
        if let Err(e) = b.inner.call("Browser.getVersion", json!({}), None) {
            let log = std::fs::read_to_string(b._dir.path().join("chromium.log")).unwrap_or_default();
            let tail: String =
                log.lines().rev().take(8).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
            return Err(format!("`{}` did not answer on the DevTools pipe: {e}\n{tail}", o.chromium.display()));
        }
        Ok(b)
    }

    pub fn version(&self) -> Result<String, String> {
        let v = self.inner.call("Browser.getVersion", json!({}), None)?;
        Ok(v.get("product").and_then(Value::as_str).unwrap_or("?").to_string())
    }

    /// A blank page in a fresh browser context.
    pub fn new_page(&self) -> Result<Page, String> {
        let ctx = self.inner.call("Target.createBrowserContext", json!({"disposeOnDetach": true}), None)?;
        let context = ctx.get("browserContextId").and_then(Value::as_str).ok_or("no browserContextId")?.to_string();
        let page = (|| {
            let t = self.inner.call(
                "Target.createTarget",
                json!({"url": "about:blank", "browserContextId": context}),
                None,
            )?;
            let target = t.get("targetId").and_then(Value::as_str).ok_or("no targetId")?.to_string();
            let s = self.inner.call("Target.attachToTarget", json!({"targetId": target, "flatten": true}), None)?;
            let session = s.get("sessionId").and_then(Value::as_str).ok_or("no sessionId")?.to_string();
            let p = Page { inner: self.inner.clone(), context: context.clone(), session };
            p.call("Page.enable", json!({}))?;
            p.call("Runtime.enable", json!({}))?;
            Ok::<Page, String>(p)
        })();
        if page.is_err() {
            self.inner.post("Target.disposeBrowserContext", json!({"browserContextId": context}), None);
        }
        page
    }

    /// Browser contexts open now (besides the default one).
    pub fn contexts(&self) -> Result<usize, String> {
        let v = self.inner.call("Target.getBrowserContexts", json!({}), None)?;
        Ok(v.get("browserContextIds").and_then(Value::as_array).map_or(0, Vec::len))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let mut c = self.child.lock().unwrap_or_else(|p| p.into_inner());
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// One tab in its own browser context.
pub struct Page {
    inner: Arc<Inner>,
    context: String,
    session: String,
}

impl Page {
    pub fn call(&self, method: &str, params: Value) -> Reply {
        self.inner.call(method, params, Some(&self.session))
    }

    /// Evaluates an expression in the page and returns its value (promises awaited).
    pub fn eval(&self, expr: &str) -> Reply {
        let r =
            self.call("Runtime.evaluate", json!({"expression": expr, "returnByValue": true, "awaitPromise": true}))?;
        if let Some(ex) = r.get("exceptionDetails") {
            let msg = ex
                .pointer("/exception/description")
                .and_then(Value::as_str)
                .or_else(|| ex.get("text").and_then(Value::as_str))
                .unwrap_or("exception");
            return Err(format!("script error: {}", msg.lines().next().unwrap_or("")));
        }
        Ok(r.pointer("/result/value").cloned().unwrap_or(Value::Null))
    }

    /// Navigates and waits for the load to finish.
    pub fn navigate(&self, url: &str) -> Result<(), String> {
        let r = self.call("Page.navigate", json!({"url": url}))?;
        if let Some(e) = r.get("errorText").and_then(Value::as_str) {
            self.settle();
            return Err(format!("cannot open {url}: {e}"));
        }
        self.settle();
        Ok(())
    }

    fn loads(&self) -> (u64, u64) {
        let g = self.inner.loading.lock().unwrap_or_else(|p| p.into_inner());
        g.get(&self.session).map_or((0, 0), |l| (l.started, l.stopped))
    }

    /// Waits (at most the call timeout) until no frame is loading and the
    /// document is complete, after a short grace for a navigation that an
    /// action started to begin.
    pub fn settle(&self) {
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_millis(60));
        loop {
            let (s, e) = self.loads();
            if s <= e
                && self.eval("document.readyState").ok().and_then(|v| v.as_str().map(str::to_string)).as_deref()
                    == Some("complete")
            {
                return;
            }
            if t0.elapsed() > self.inner.timeout {
                return;
            }
            std::thread::sleep(Duration::from_millis(30));
        }
    }

    /// A mouse click (press and release) at a point of the viewport.
    pub fn click_at(&self, x: f64, y: f64) -> Result<(), String> {
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}),
            )?;
        }
        Ok(())
    }

    /// Types text into the focused element, as keyboard input would.
    pub fn insert_text(&self, text: &str) -> Result<(), String> {
        self.call("Input.insertText", json!({"text": text})).map(|_| ())
    }

    /// Presses Enter in the focused element.
    pub fn press_enter(&self) -> Result<(), String> {
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyDown", "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13, "text": "\r"}),
        )?;
        self.call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}),
        )
        .map(|_| ())
    }

    /// Goes one entry back in the history; false when there is none.
    pub fn back(&self) -> Result<bool, String> {
        let h = self.call("Page.getNavigationHistory", json!({}))?;
        let i = h.get("currentIndex").and_then(Value::as_i64).unwrap_or(0);
        if i < 1 {
            return Ok(false);
        }
        let Some(id) = h.pointer(&format!("/entries/{}/id", i - 1)).and_then(Value::as_i64) else { return Ok(false) };
        self.call("Page.navigateToHistoryEntry", json!({"entryId": id}))?;
        self.settle();
        Ok(true)
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        self.inner.post("Target.disposeBrowserContext", json!({"browserContextId": self.context}), None);
        self.inner.loading.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.session);
    }
}
