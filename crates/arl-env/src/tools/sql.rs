//! The `sql` tool: runs the model's query on the episode's own database
//! ([`crate::sql`]), built on the first call from the record's
//! `metadata.sql_setup`, and returns the rows as text (capped). SQLite in
//! memory by default, PostgreSQL with `--sql-url`; read-only unless the task
//! sets `metadata.sql_writable`.
use super::{EpisodeState, ToolOutput};
use crate::sql::{Backend, Db, Limits, TaskDb};
use serde_json::Value;
use std::sync::{Arc, Mutex};

pub struct SqlTool {
    pub backend: Backend,
    pub limits: Limits,
}

impl SqlTool {
    pub async fn call(&self, args: &Value, state: &tokio::sync::Mutex<EpisodeState>) -> ToolOutput {
        let Some(query) = args.get("query").and_then(Value::as_str) else {
            return ToolOutput::err("Error: `sql` needs a string argument `query`");
        };
        let mut st = state.lock().await;
        if st.sql_db.is_none() {
            let task = match TaskDb::from_metadata(&st.task) {
                Ok(t) => t,
                Err(e) => return ToolOutput::err(format!("Error: this task has no database ({e})")),
            };
            let (backend, limits) = (self.backend.clone(), self.limits);
            match tokio::task::spawn_blocking(move || Db::open(&backend, &task, limits)).await {
                Ok(Ok(db)) => st.sql_db = Some(Arc::new(Mutex::new(db))),
                Ok(Err(e)) => return ToolOutput::err(format!("Error: {e}")),
                Err(e) => return ToolOutput::err(format!("Error: {e}")),
            }
        }
        let db = st.sql_db.clone().expect("set above");
        let q = query.to_string();
        let r = tokio::task::spawn_blocking(move || match db.lock() {
            Ok(mut d) => d.query(&q),
            Err(_) => Err(crate::sql::QueryError::Env("an earlier query crashed".into())),
        })
        .await;
        match r {
            Ok(Ok(t)) => ToolOutput::ok(t.render()),
            Ok(Err(e)) => ToolOutput::err(format!("Error: {e}")),
            Err(e) => ToolOutput::err(format!("Error: {e}")),
        }
    }
}
