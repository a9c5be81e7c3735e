//! HTTPS for the tests: a throwaway certificate authority and a server
//! certificate for `127.0.0.1` signed by it (made with the `openssl` command),
//! and a TLS terminator (`py/tls_proxy.py`, a STAND-IN for the TLS front of a
//! hosted service) that puts any loopback HTTP server behind `https://`.
//! A client trusts the authority through `SSL_CERT_FILE`.
use crate::daemon::Daemon;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A certificate authority and a server certificate for `127.0.0.1`.
pub struct Tls {
    dir: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let o =
        Command::new("openssl").args(args).current_dir(dir).output().expect("run `openssl` (scripts/setup.sh --tests)");
    assert!(o.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

impl Tls {
    pub fn new() -> Tls {
        let dir = crate::common::tmpdir();
        let d = dir.path();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
        let mut ca =
            vec!["req", "-x509", "-days", "2", "-subj", "/CN=arl test CA", "-keyout", "ca.key", "-out", "ca.pem"];
        ca.extend(ec);
        openssl(d, &ca);
        let mut csr = vec!["req", "-subj", "/CN=127.0.0.1", "-keyout", "server.key", "-out", "server.csr"];
        csr.extend(ec);
        openssl(d, &csr);
        std::fs::write(
            d.join("ext.cnf"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write");
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
            ]
            .into_iter()
            .chain(["-extfile", "ext.cnf", "-out", "server.pem"])
            .collect::<Vec<_>>(),
        );
        Tls { dir }
    }

    /// The authority's certificate, for `SSL_CERT_FILE`.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Serves `https://127.0.0.1:PORT` in front of the loopback HTTP server
    /// on `backend_port`; returns the terminator and that base URL.
    pub fn proxy(&self, backend_port: u16) -> (Daemon, String) {
        let script = crate::common::root().join("crates/arl-testkit/py/tls_proxy.py");
        let d = self.dir.path();
        let mut cmd = Command::new("python3");
        cmd.arg(script).arg(d.join("server.pem")).arg(d.join("server.key")).arg(backend_port.to_string());
        let (daemon, port) = Daemon::start("tls_proxy", &mut cmd, "tls_proxy: listening on ", Duration::from_secs(30));
        (daemon, format!("https://127.0.0.1:{port}"))
    }
}

impl Default for Tls {
    fn default() -> Tls {
        Tls::new()
    }
}

/// The port of a `http://HOST:PORT…` URL.
pub fn port_of(url: &str) -> u16 {
    let rest = url.split("://").nth(1).expect("a URL");
    let hostport = rest.split('/').next().expect("host");
    hostport.rsplit(':').next().and_then(|p| p.parse().ok()).expect("a port")
}
