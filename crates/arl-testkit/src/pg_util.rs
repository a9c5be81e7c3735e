//! A real PostgreSQL server for tests: `initdb` into a temporary directory
//! and `pg_ctl start` on 127.0.0.1 at a free port (run as the `postgres` user
//! when the tests run as root, since the server refuses root), password
//! authentication over TCP, stopped and deleted on drop. The server binaries
//! come from Debian's `postgresql` package (`scripts/setup.sh` installs it).
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    pub port: u16,
    /// `postgres://postgres:…@127.0.0.1:PORT/arl`: the superuser on a database of its own.
    pub admin_url: String,
}

fn bindir() -> PathBuf {
    if let Ok(o) = Command::new("pg_config").arg("--bindir").output() {
        let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
        if p.join("initdb").exists() {
            return p;
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path().join("bin")).filter(|p| p.join("initdb").exists()).collect())
        .unwrap_or_default();
    found.sort();
    found
        .pop()
        .expect("PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/initdb): run scripts/setup.sh")
}

fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Runs a server binary, as `postgres` when we are root.
fn pg_cmd(bin: &Path, prog: &str) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(prog));
        c
    } else {
        Command::new(bin.join(prog))
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Postgres {
    pub fn start() -> Postgres {
        let bin = bindir();
        let dir = tempfile::Builder::new().prefix("arl-pg-").tempdir().unwrap();
        let data = dir.path().join("data");
        let pw = "arl-test-pw";
        std::fs::write(dir.path().join("pw"), pw).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        if is_root() {
            let st = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir.path()).status().unwrap();
            assert!(st.success(), "chown to postgres failed");
        }
        let o = pg_cmd(&bin, "initdb")
            .args([
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .arg(format!("--pwfile={}", dir.path().join("pw").display()))
            .arg("-D")
            .arg(&data)
            .output()
            .unwrap();
        assert!(o.status.success(), "initdb failed: {}", String::from_utf8_lossy(&o.stderr));
        let mut port = 0;
        for _ in 0..5 {
            port = free_port();
            let o = pg_cmd(&bin, "pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(dir.path().join("log"))
                .arg("-o")
                .arg(format!(
                    "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60",
                    dir.path().display()
                ))
                .args(["-w", "-t", "60", "start"])
                .output()
                .unwrap();
            if o.status.success() {
                break;
            }
            let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
            if !log.contains("already in use") {
                panic!("pg_ctl start failed: {}\n{log}", String::from_utf8_lossy(&o.stderr));
            }
            port = 0;
        }
        assert!(port != 0, "no free port for PostgreSQL");
        let base = format!("postgres://postgres:{pw}@127.0.0.1:{port}");
        let mut c =
            postgres::Client::connect(&format!("{base}/postgres"), postgres::NoTls).expect("connect as postgres");
        c.batch_execute("CREATE DATABASE arl").unwrap();
        Postgres { dir, bin, port, admin_url: format!("{base}/arl") }
    }

    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.admin_url, postgres::NoTls).expect("connect")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = pg_cmd(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output();
    }
}
