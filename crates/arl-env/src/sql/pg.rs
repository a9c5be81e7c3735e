//! PostgreSQL episode databases (`--sql-url postgres://ADMIN@HOST:PORT/DB`).
//!
//! Per episode, through the administrative connection: a schema `arl_ep_<id>`
//! holding the task's tables (the setup script runs with that schema first on
//! the search path) and a login role of the same name that may only use that
//! schema: `USAGE` on it and `SELECT` on its tables (`INSERT/UPDATE/DELETE`
//! too when the task is writable), no other grants, no superuser, no
//! `pg_read_server_files`. Once per database the administrative connection
//! revokes `CREATE` on `public` and `TEMPORARY` on the database from PUBLIC,
//! so a role with nothing granted can create nothing; use a database of its
//! own for arl.
//!
//! Each query opens a connection as the episode role (`statement_timeout`
//! set by the role and by the connection), starts a transaction (`READ ONLY`
//! unless writable), declares a cursor for the query and fetches at most
//! `max_rows + 1` rows; a watchdog thread cancels the query on the server
//! when the time limit passes (the role can change its own
//! `statement_timeout`, not the watchdog). The schema and the role are dropped
//! when the episode's [`PgDb`] is dropped.
use super::{Cell, Limits, QueryError, Table, TaskDb};
use postgres::{Client, NoTls, SimpleQueryMessage};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

pub struct PgDb {
    admin_url: String,
    name: String,
    password: String,
    writable: bool,
    limits: Limits,
}

fn pg_err(e: postgres::Error) -> String {
    pg_err_ref(&e)
}

fn random_hex() -> String {
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    static CTR: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let c = CTR.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let a = arl_core::rng::mix(&[t, std::process::id() as u64, c]);
    let b = arl_core::rng::mix(&[a, t ^ 0x9e37_79b9_7f4a_7c15]);
    format!("{a:016x}{b:016x}")
}

fn admin(url: &str) -> Result<Client, QueryError> {
    let mut cfg = postgres::Config::from_str(url).map_err(|e| QueryError::Env(format!("`--sql-url`: {e}")))?;
    cfg.connect_timeout(Duration::from_secs(10));
    cfg.connect(NoTls).map_err(|e| QueryError::Env(format!("cannot connect to PostgreSQL: {}", pg_err(e))))
}

/// Databases already hardened by this process.
static HARDENED: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn harden(c: &mut Client, url: &str) -> Result<(), QueryError> {
    let mut done = HARDENED.lock().unwrap_or_else(|p| p.into_inner());
    if done.iter().any(|u| u == url) {
        return Ok(());
    }
    c.batch_execute(
        "DO $$ BEGIN EXECUTE format('REVOKE TEMPORARY ON DATABASE %I FROM PUBLIC', current_database()); END $$;
         REVOKE CREATE ON SCHEMA public FROM PUBLIC;",
    )
    .map_err(|e| QueryError::Env(format!("hardening the database: {}", pg_err(e))))?;
    done.push(url.to_string());
    Ok(())
}

impl PgDb {
    pub fn open(url: &str, task: &TaskDb, limits: Limits) -> Result<PgDb, QueryError> {
        let mut c = admin(url)?;
        harden(&mut c, url)?;
        let id = random_hex();
        let name = format!("arl_ep_{}", &id[..16]);
        let password = id[16..].to_string();
        let ms = limits.timeout.as_millis().max(1);
        let grants = if task.writable { "SELECT, INSERT, UPDATE, DELETE" } else { "SELECT" };
        let mut tx = c.transaction().map_err(|e| QueryError::Env(pg_err(e)))?;
        tx.batch_execute(&format!(
            "CREATE ROLE {name} LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION CONNECTION LIMIT 4;
             ALTER ROLE {name} SET statement_timeout = {ms};
             ALTER ROLE {name} SET search_path = {name};
             CREATE SCHEMA {name};
             SET LOCAL search_path = {name};"
        ))
        .map_err(|e| QueryError::Env(format!("creating the episode schema: {}", pg_err(e))))?;
        tx.batch_execute(&task.setup)
            .map_err(|e| QueryError::Env(format!("the task's setup script failed: {}", pg_err(e))))?;
        tx.batch_execute(&format!(
            "GRANT USAGE ON SCHEMA {name} TO {name};
             GRANT {grants} ON ALL TABLES IN SCHEMA {name} TO {name};"
        ))
        .map_err(|e| QueryError::Env(format!("granting the episode role: {}", pg_err(e))))?;
        tx.commit().map_err(|e| QueryError::Env(pg_err(e)))?;
        Ok(PgDb { admin_url: url.to_string(), name, password, writable: task.writable, limits })
    }

    pub(super) fn query(&mut self, sql: &str) -> Result<Table, QueryError> {
        let mut cfg = postgres::Config::from_str(&self.admin_url).map_err(|e| QueryError::Env(e.to_string()))?;
        let ms = self.limits.timeout.as_millis().max(1);
        cfg.user(&self.name).password(&self.password).connect_timeout(Duration::from_secs(10));
        cfg.options(&format!("-c statement_timeout={ms} -c search_path={}", self.name));
        let mut c = cfg
            .connect(NoTls)
            .map_err(|e| QueryError::Env(format!("cannot connect as the episode role: {}", pg_err(e))))?;
        // The watchdog: cancel on the server at the time limit, whatever the session set.
        let token = c.cancel_token();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let timeout = self.limits.timeout;
        let dog = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                rx.recv_timeout(timeout + Duration::from_millis(200))
            {
                let _ = token.cancel_query(NoTls);
            }
        });
        let res = run_cursor(&mut c, sql, self.writable, self.limits.max_rows);
        let _ = tx.send(());
        let _ = dog.join();
        res.map_err(|e| classify(e, timeout))
    }
}

fn classify(e: postgres::Error, timeout: Duration) -> QueryError {
    let msg = pg_err_ref(&e);
    match e.code().map(|c| c.code()) {
        Some("57014") => QueryError::Timeout(timeout),
        // insufficient_privilege, read_only_sql_transaction
        Some("42501") | Some("25006") => {
            QueryError::Denied(format!("{msg} (the episode role may only read its own schema)"))
        }
        _ => QueryError::Sql(msg),
    }
}

fn pg_err_ref(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => d.message().to_string(),
        None => e.to_string(),
    }
}

fn run_cursor(c: &mut Client, sql: &str, writable: bool, max_rows: usize) -> Result<Table, postgres::Error> {
    c.batch_execute(if writable { "BEGIN" } else { "BEGIN READ ONLY" })?;
    let head = sql.trim_start().get(..6).unwrap_or("").to_ascii_uppercase();
    let rowset = matches!(head.as_str(), "SELECT" | "WITH" | "VALUES" | "TABLE ") || head.starts_with('(');
    let msgs = if rowset {
        c.batch_execute(&format!("DECLARE arl_cursor NO SCROLL CURSOR FOR {sql}"))?;
        c.simple_query(&format!("FETCH FORWARD {} FROM arl_cursor", max_rows + 1))?
    } else {
        c.simple_query(sql)?
    };
    let mut t = Table::default();
    for m in msgs {
        match m {
            SimpleQueryMessage::RowDescription(cols) => t.columns = cols.iter().map(|c| c.name().to_string()).collect(),
            SimpleQueryMessage::Row(r) => {
                if t.columns.is_empty() {
                    t.columns = r.columns().iter().map(|c| c.name().to_string()).collect();
                }
                if t.rows.len() >= max_rows {
                    t.truncated = true;
                    continue;
                }
                t.rows.push((0..r.len()).map(|i| r.get(i).map_or(Cell::Null, |s| Cell::Text(s.to_string()))).collect());
            }
            _ => {}
        }
    }
    c.batch_execute(if writable { "COMMIT" } else { "ROLLBACK" })?;
    Ok(t)
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let (url, name) = (self.admin_url.clone(), self.name.clone());
        // Its own thread: the sync client must not run inside an async runtime.
        let h = std::thread::spawn(move || {
            let Ok(mut c) = admin(&url) else { return };
            let r = c.batch_execute(&format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{name}';
                 DROP SCHEMA IF EXISTS {name} CASCADE; DROP ROLE IF EXISTS {name};"
            ));
            if let Err(e) = r {
                eprintln!("arl: could not drop the episode schema `{name}`: {}", pg_err_ref(&e));
            }
        });
        let _ = h.join();
    }
}
