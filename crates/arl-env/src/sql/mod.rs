//! The SQL environment: one fresh database per episode, built from the task's
//! setup script (`metadata.sql_setup`), on which the model's queries run with
//! limits. Used by the `sql` tool of `arl-rollout` and the `sql` reward of
//! `arl-reward`, so both see the same database and the same containment.
//!
//! Backends:
//! - **SQLite** (the embedded default): an in-memory database per episode.
//!   Containment: an authorizer denies `ATTACH`/`DETACH`, every `PRAGMA`,
//!   virtual tables, `load_extension`, and (unless the task is writable)
//!   every write or schema change; no attached databases and values of at most
//!   1 MB (`sqlite3_limit`); one statement per call; a progress handler
//!   interrupts a statement at the timeout (huge cross joins, runaway
//!   recursive CTEs); rows are capped.
//! - **PostgreSQL** (`--sql-url postgres://…`, [`pg`]): a schema and a login
//!   role per episode; the role may only read that schema (no rights on any
//!   other schema, no server-file functions, no temporary tables); a server
//!   `statement_timeout` and a client-side cancel at the timeout; rows read
//!   through a cursor, capped.
//!
//! Results are compared as multisets of rows (as lists when the gold query
//! orders) after normalising cells: numbers by value (so SQLite's `12.5` and
//! PostgreSQL's `12.5000000000000000` agree), text as is, NULL as NULL.
pub mod pg;

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use std::time::{Duration, Instant};

/// Where episode databases live.
#[derive(Debug, Clone)]
pub enum Backend {
    Sqlite,
    /// An administrative connection URL (a role that may create roles and schemas).
    Postgres(String),
}

impl Backend {
    pub fn from_url(url: Option<&str>) -> anyhow::Result<Backend> {
        match url {
            None => Ok(Backend::Sqlite),
            Some(u) if u.starts_with("postgres://") || u.starts_with("postgresql://") => {
                Ok(Backend::Postgres(u.to_string()))
            }
            Some(u) if u == "sqlite" || u == "sqlite::memory:" => Ok(Backend::Sqlite),
            Some(u) => anyhow::bail!("`{u}`: expected postgres://USER@HOST:PORT/DB (or `sqlite`)"),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }
}

/// Limits of one query.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub timeout: Duration,
    /// Rows returned; a result with more is cut (`Table::truncated`).
    pub max_rows: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { timeout: Duration::from_secs(5), max_rows: 50 }
    }
}

/// One result cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl Cell {
    pub fn display(&self) -> String {
        match self {
            Cell::Null => "NULL".into(),
            Cell::Int(i) => i.to_string(),
            Cell::Real(f) => f.to_string(),
            Cell::Text(s) => s.clone(),
        }
    }

    /// The comparison key: numbers (and text that is a number) by value to 9
    /// significant digits, NULL apart from the text "NULL".
    pub fn key(&self) -> String {
        fn num(x: f64) -> String {
            if x == 0.0 {
                return "n:0".into();
            }
            format!("n:{:.8e}", x)
        }
        match self {
            Cell::Null => "null".into(),
            Cell::Int(i) => num(*i as f64),
            Cell::Real(f) => num(*f),
            Cell::Text(s) => match s.trim().parse::<f64>() {
                Ok(x) if x.is_finite() => num(x),
                _ => format!("t:{s}"),
            },
        }
    }
}

/// A query result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<Cell>>,
    /// More rows existed than `Limits::max_rows`.
    pub truncated: bool,
}

impl Table {
    /// The text the model sees: a header, rows separated by ` | `, and a count.
    pub fn render(&self) -> String {
        if self.columns.is_empty() {
            return "OK (the statement returned no rows)".into();
        }
        let mut s = self.columns.join(" | ");
        s.push('\n');
        for r in &self.rows {
            s.push_str(&r.iter().map(Cell::display).collect::<Vec<_>>().join(" | "));
            s.push('\n');
        }
        if self.truncated {
            s.push_str(&format!("(first {} rows shown; the result has more)", self.rows.len()));
        } else {
            s.push_str(&format!("({} row{})", self.rows.len(), if self.rows.len() == 1 { "" } else { "s" }));
        }
        s
    }

    pub fn keys(&self) -> Vec<Vec<String>> {
        self.rows.iter().map(|r| r.iter().map(Cell::key).collect()).collect()
    }
}

/// Why a query produced no result.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryError {
    /// Refused by the containment (a write on a read-only task, ATTACH, PRAGMA, …).
    Denied(String),
    /// Interrupted at the time limit.
    Timeout(Duration),
    /// The database rejected it (syntax, unknown column, …).
    Sql(String),
    /// The episode database could not be built or reached.
    Env(String),
}

impl std::fmt::Display for QueryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueryError::Denied(s) => write!(f, "not allowed: {s}"),
            QueryError::Timeout(d) => write!(f, "the query was stopped after the {:.1}s time limit", d.as_secs_f64()),
            QueryError::Sql(s) => write!(f, "SQL error: {s}"),
            QueryError::Env(s) => write!(f, "database unavailable: {s}"),
        }
    }
}

/// The task's database as a record carries it (`metadata.sql_setup`, `metadata.sql_writable`).
#[derive(Debug, Clone)]
pub struct TaskDb {
    pub setup: String,
    pub writable: bool,
}

impl TaskDb {
    pub fn from_metadata(meta: &serde_json::Value) -> Result<TaskDb, String> {
        let setup = meta
            .get("sql_setup")
            .and_then(serde_json::Value::as_str)
            .ok_or("field `metadata.sql_setup`: missing; an SQL task carries its schema and data as an SQL script")?;
        let writable = meta.get("sql_writable").and_then(serde_json::Value::as_bool).unwrap_or(false);
        Ok(TaskDb { setup: setup.to_string(), writable })
    }
}

/// One episode's database.
pub enum Db {
    Sqlite(SqliteDb),
    Postgres(pg::PgDb),
}

impl Db {
    /// Builds a fresh database for one episode. Blocking.
    pub fn open(backend: &Backend, task: &TaskDb, limits: Limits) -> Result<Db, QueryError> {
        match backend {
            Backend::Sqlite => SqliteDb::open(task, limits).map(Db::Sqlite),
            Backend::Postgres(url) => pg::PgDb::open(url, task, limits).map(Db::Postgres),
        }
    }

    /// Runs one statement. Blocking.
    pub fn query(&mut self, sql: &str) -> Result<Table, QueryError> {
        let sql = sql.trim().trim_end_matches(|c: char| c == ';' || c.is_whitespace());
        if sql.is_empty() {
            return Err(QueryError::Sql("empty query".into()));
        }
        match self {
            Db::Sqlite(d) => d.query(sql),
            Db::Postgres(d) => d.query(sql),
        }
    }
}

pub struct SqliteDb {
    conn: rusqlite::Connection,
    limits: Limits,
}

/// Values (strings, blobs) larger than this are an error (`SQLITE_LIMIT_LENGTH`).
const SQLITE_MAX_VALUE: i32 = 1_000_000;

fn authorize(writable: bool, ctx: AuthContext<'_>) -> Authorization {
    use AuthAction as A;
    match ctx.action {
        A::Attach { .. } | A::Detach { .. } | A::Pragma { .. } | A::CreateVtable { .. } | A::DropVtable { .. } => {
            Authorization::Deny
        }
        A::Function { function_name } if function_name.eq_ignore_ascii_case("load_extension") => Authorization::Deny,
        A::Insert { .. } | A::Update { .. } | A::Delete { .. } if writable => Authorization::Allow,
        A::Insert { .. }
        | A::Update { .. }
        | A::Delete { .. }
        | A::CreateIndex { .. }
        | A::CreateTable { .. }
        | A::CreateTempIndex { .. }
        | A::CreateTempTable { .. }
        | A::CreateTempTrigger { .. }
        | A::CreateTempView { .. }
        | A::CreateTrigger { .. }
        | A::CreateView { .. }
        | A::DropIndex { .. }
        | A::DropTable { .. }
        | A::DropTempIndex { .. }
        | A::DropTempTable { .. }
        | A::DropTempTrigger { .. }
        | A::DropTempView { .. }
        | A::DropTrigger { .. }
        | A::DropView { .. }
        | A::AlterTable { .. }
        | A::Reindex { .. }
        | A::Analyze { .. } => Authorization::Deny,
        _ => Authorization::Allow,
    }
}

fn sqlite_err(e: rusqlite::Error, timeout: Duration) -> QueryError {
    let (code, msg) = match &e {
        rusqlite::Error::SqliteFailure(f, msg) => (f.code, msg.clone().unwrap_or_else(|| e.to_string())),
        rusqlite::Error::SqlInputError { error, msg, .. } => (error.code, msg.clone()),
        rusqlite::Error::MultipleStatement => return QueryError::Denied("one statement per call".into()),
        _ => return QueryError::Sql(e.to_string()),
    };
    match code {
        rusqlite::ErrorCode::OperationInterrupted => QueryError::Timeout(timeout),
        rusqlite::ErrorCode::AuthorizationForStatementDenied => {
            QueryError::Denied(format!("{msg} (the database is read-only; ATTACH, PRAGMA and extensions are refused)"))
        }
        rusqlite::ErrorCode::TooBig => QueryError::Denied("a value exceeds the 1 MB limit".into()),
        // A function the authorizer refused (load_extension) comes back as a plain error.
        _ if msg.starts_with("not authorized") => QueryError::Denied(msg),
        _ => QueryError::Sql(msg),
    }
}

impl SqliteDb {
    pub fn open(task: &TaskDb, limits: Limits) -> Result<SqliteDb, QueryError> {
        use rusqlite::limits::Limit;
        let conn = rusqlite::Connection::open_in_memory().map_err(|e| QueryError::Env(e.to_string()))?;
        conn.execute_batch(&task.setup).map_err(|e| QueryError::Env(format!("the task's setup script failed: {e}")))?;
        let set = |l, v| conn.set_limit(l, v).map_err(|e| QueryError::Env(e.to_string()));
        set(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
        set(Limit::SQLITE_LIMIT_LENGTH, SQLITE_MAX_VALUE)?;
        set(Limit::SQLITE_LIMIT_SQL_LENGTH, 100_000)?;
        let writable = task.writable;
        conn.authorizer(Some(move |ctx: AuthContext<'_>| authorize(writable, ctx)));
        Ok(SqliteDb { conn, limits })
    }

    fn query(&mut self, sql: &str) -> Result<Table, QueryError> {
        let timeout = self.limits.timeout;
        let deadline = Instant::now() + timeout;
        self.conn.progress_handler(1000, Some(move || Instant::now() >= deadline));
        let res = self.query_inner(sql);
        self.conn.progress_handler(0, None::<fn() -> bool>);
        res.map_err(|e| sqlite_err(e, timeout))
    }

    fn query_inner(&self, sql: &str) -> rusqlite::Result<Table> {
        let mut stmt = self.conn.prepare(sql)?;
        let columns: Vec<String> = stmt.column_names().into_iter().map(str::to_string).collect();
        let ncol = columns.len();
        let mut t = Table { columns, ..Table::default() };
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            if t.rows.len() >= self.limits.max_rows {
                t.truncated = true;
                break;
            }
            let mut r = Vec::with_capacity(ncol);
            for i in 0..ncol {
                use rusqlite::types::ValueRef as V;
                r.push(match row.get_ref(i)? {
                    V::Null => Cell::Null,
                    V::Integer(x) => Cell::Int(x),
                    V::Real(x) => Cell::Real(x),
                    V::Text(b) => Cell::Text(String::from_utf8_lossy(b).into_owned()),
                    V::Blob(b) => {
                        Cell::Text(format!("x'{}'", b.iter().map(|x| format!("{x:02x}")).collect::<String>()))
                    }
                });
            }
            t.rows.push(r);
        }
        Ok(t)
    }
}

/// Whether a query orders its result at the top level: an `ORDER BY` outside
/// every parenthesis (so one inside a subquery does not count).
pub fn orders(sql: &str) -> bool {
    let up = sql.to_ascii_uppercase();
    let b = up.as_bytes();
    let mut depth = 0i32;
    let mut in_str = false;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\'' {
                in_str = false;
            }
        } else if c == b'\'' {
            in_str = true;
        } else if c == b'(' {
            depth += 1;
        } else if c == b')' {
            depth -= 1;
        } else if depth == 0
            && up[i..].starts_with("ORDER")
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric() && b[i - 1] != b'_')
        {
            let rest = up[i + 5..].trim_start();
            if rest.starts_with("BY") {
                return true;
            }
        }
        i += 1;
    }
    false
}

/// Execution match of a result against the gold result: `None` when they
/// match, else why not.
pub fn compare(got: &Table, gold: &Table, ordered: bool) -> Option<String> {
    if got.truncated {
        return Some(format!("the result has more than {} rows", got.rows.len()));
    }
    let (gc, wc) = (got.columns.len(), gold.columns.len());
    if gc != wc {
        return Some(format!("{gc} column{} where the gold result has {wc}", if gc == 1 { "" } else { "s" }));
    }
    if got.rows.len() != gold.rows.len() {
        return Some(format!("{} rows where the gold result has {}", got.rows.len(), gold.rows.len()));
    }
    let (mut a, mut b) = (got.keys(), gold.keys());
    if ordered && a == b {
        return None;
    }
    let show = |r: &[String]| -> String {
        r.iter()
            .map(|k| k.strip_prefix("t:").or_else(|| k.strip_prefix("n:")).unwrap_or(k).to_string())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    if ordered {
        let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(0);
        a.sort();
        b.sort();
        if a == b {
            return Some(format!(
                "the right rows in the wrong order (the gold query orders; first difference at row {})",
                first + 1
            ));
        }
    } else {
        a.sort();
        b.sort();
        if a == b {
            return None;
        }
    }
    let missing = b.iter().find(|r| !a.contains(r)).map(|r| show(r));
    let extra = a.iter().find(|r| !b.contains(r)).map(|r| show(r));
    Some(match (missing, extra) {
        (Some(m), Some(e)) => format!("different rows: e.g. `{e}` is not in the gold result, which has `{m}`"),
        (Some(m), None) => format!("different rows: the gold row `{m}` is missing"),
        (None, Some(e)) => format!("different rows: `{e}` is not in the gold result"),
        (None, None) => "the same rows with different multiplicities".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_top_level_order_by() {
        assert!(orders("SELECT a FROM t ORDER BY a"));
        assert!(orders("select a from t order\n by a desc"));
        assert!(!orders("SELECT a FROM (SELECT a FROM t ORDER BY a LIMIT 3) q"));
        assert!(!orders("SELECT 'ORDER BY' FROM t"));
        assert!(!orders("SELECT reorder_by FROM t"));
    }

    #[test]
    fn numbers_compare_by_value_across_backends() {
        assert_eq!(Cell::Real(12.5).key(), Cell::Text("12.5000000000000000".into()).key());
        assert_eq!(Cell::Int(3).key(), Cell::Text("3".into()).key());
        assert_eq!(Cell::Real(1.0 / 3.0).key(), Cell::Text("0.33333333333333333333".into()).key());
        assert_ne!(Cell::Null.key(), Cell::Text("NULL".into()).key());
    }
}
