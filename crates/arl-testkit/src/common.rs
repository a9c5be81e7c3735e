//! Helpers for integration tests: run the real binaries in a temporary
//! directory and look at what they did.
#![allow(dead_code)]
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Every binary of the workspace.
pub const TOOLS: [&str; 10] = [
    "arl-advantage",
    "arl-env",
    "arl-filter",
    "arl-inspect",
    "arl-reward",
    "arl-rollout",
    "arl-serve",
    "arl-sync",
    "arl-tasks",
    "arl-train",
];

/// The repository's root (for `testdata/`, `scripts/`, `man/`).
pub fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Path of a binary of the workspace, next to the test executables of the
/// same profile (`target/release/arl-filter` for `target/release/deps/…`).
/// Cargo builds a package's binaries before its integration tests, but not
/// other packages': tests that run the binaries of other packages rely on
/// `cargo test --workspace` (or `make test`, which builds every binary first).
pub fn exe(name: &str) -> PathBuf {
    let mut p = std::env::current_exe().expect("test exe");
    p.pop(); // deps/
    if p.ends_with("deps") {
        p.pop();
    }
    let bin = p.join(name);
    assert!(
        bin.exists(),
        "binary {} not built: run the tests with `make test`, or build every binary first (`cargo build --workspace --bins`, same profile)",
        bin.display()
    );
    bin
}

/// The outcome of one run.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Run {
    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    #[track_caller]
    pub fn ok(self) -> Run {
        assert_eq!(self.code, 0, "exit {} stderr:\n{}", self.code, self.stderr);
        self
    }
}

impl From<Output> for Run {
    fn from(o: Output) -> Run {
        Run {
            code: o.status.code().unwrap_or(-1),
            stdout: o.stdout,
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// Runs `bin args…` in `dir` with `stdin`, and waits.
pub fn run_in(dir: &Path, bin: &str, args: &[&str], stdin: &[u8]) -> Run {
    run_in_env(dir, bin, args, stdin, &[])
}

/// [`run_in`] with extra environment variables.
pub fn run_in_env(dir: &Path, bin: &str, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Run {
    let mut child = Command::new(exe(bin))
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut sin = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = sin.write_all(&data);
    });
    let out = child.wait_with_output().expect("wait");
    let _ = writer.join();
    out.into()
}

/// Runs in the current directory.
pub fn run(bin: &str, args: &[&str], stdin: &[u8]) -> Run {
    run_in(Path::new("."), bin, args, stdin)
}

/// A fresh temporary directory, removed on drop.
pub fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("arl-test-").tempdir().expect("tempdir")
}

/// The Python interpreter of the project's virtualenv (torch, pyarrow,
/// transformers…), from `ARL_PYTHON` (set by the Makefile), if present.
pub fn python() -> Option<PathBuf> {
    let p = PathBuf::from(std::env::var_os("ARL_PYTHON")?);
    p.exists().then_some(p)
}

/// Like [`python`], but a test that needs it fails with a clear message when
/// the virtualenv is missing: tests run through `make test`, which makes it.
pub fn require_python() -> PathBuf {
    python().expect("ARL_PYTHON is not set or missing: run the tests with `make test`")
}

/// Lines of JSONL output parsed as JSON values.
pub fn jsonl(bytes: &[u8]) -> Vec<serde_json::Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("valid JSON line"))
        .collect()
}

/// Records as JSONL bytes.
pub fn to_jsonl(recs: &[serde_json::Value]) -> Vec<u8> {
    recs.iter().map(|r| format!("{r}\n")).collect::<String>().into_bytes()
}

/// Task records as prompts: without their reference `response` and `messages`.
pub fn prompts_of(recs: &[serde_json::Value]) -> Vec<serde_json::Value> {
    recs.iter()
        .map(|r| {
            let mut x = r.clone();
            for k in ["response", "messages"] {
                x.as_object_mut().expect("a record").remove(k);
            }
            x
        })
        .collect()
}

/// A real `arl-env` on a free loopback port (a [`crate::daemon::Daemon`]:
/// killed and reaped when dropped).
pub struct EnvServer {
    pub daemon: crate::daemon::Daemon,
    /// `http://127.0.0.1:PORT`
    pub url: String,
}

impl EnvServer {
    pub fn start(extra: &[&str]) -> EnvServer {
        let mut cmd = Command::new(exe("arl-env"));
        cmd.args(["--port", "0"]).args(extra);
        let (daemon, url) = crate::daemon::Daemon::start(
            "arl-env",
            &mut cmd,
            "arl-env: listening on ",
            std::time::Duration::from_secs(60),
        );
        EnvServer { daemon, url }
    }

    /// The shop API's OpenAPI spec.
    pub fn spec(&self) -> String {
        format!("{}/openapi.json", self.url)
    }

    /// `127.0.0.1:PORT`
    pub fn hostport(&self) -> String {
        self.url.trim_start_matches("http://").to_string()
    }
}
