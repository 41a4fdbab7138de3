//! The reads a browsing client pages through (the dashboard, through the
//! API): runs filtered by agent, state, parent and trigger a page at a
//! time, the fires of schedules (runs for a scheduled instant, including
//! the `skipped` and `missed` ones with their reasons), and the memory
//! namespaces with their sizes. Every method runs on the reader thread.

use rusqlite::types::Value;
use rusqlite::{Connection, params_from_iter};

use super::run_reads::{RUN_COLUMNS, raw_run};
use super::{RunRecord, Sqlite, StoreError, sql};
use crate::store::{FirePage, MemoryNamespace, RunPage};

impl Sqlite {
    pub async fn list_run_page(&self, page: &RunPage) -> Result<Vec<RunRecord>, StoreError> {
        let page = page.clone();
        self.read(move |conn| run_page(conn, &page)).await
    }

    pub async fn list_fires(&self, page: &FirePage) -> Result<Vec<RunRecord>, StoreError> {
        let page = page.clone();
        self.read(move |conn| fires(conn, &page)).await
    }

    pub async fn memory_namespaces(&self) -> Result<Vec<MemoryNamespace>, StoreError> {
        self.read(|conn| namespaces(conn)).await
    }
}

/// SQLite's `LIMIT` for a limit where 0 means none.
fn sql_limit(limit: usize) -> Value {
    Value::Integer(match limit {
        0 => -1,
        n => i64::try_from(n).unwrap_or(i64::MAX),
    })
}

fn offset_value(offset: usize) -> Value {
    Value::Integer(i64::try_from(offset).unwrap_or(i64::MAX))
}

/// The runs of `page`, newest first.
pub(super) fn run_page(conn: &Connection, page: &RunPage) -> Result<Vec<RunRecord>, StoreError> {
    let filter = &page.filter;
    let mut clauses = Vec::new();
    let mut values = Vec::new();
    let mut equal = |column: &str, value: &str| {
        values.push(Value::Text(value.to_owned()));
        clauses.push(format!("{column} = ?{}", values.len()));
    };
    if let Some(agent) = &filter.agent {
        equal("agent", agent);
    }
    if let Some(state) = filter.state {
        equal("state", state.as_str());
    }
    if let Some(parent) = &filter.parent {
        equal("parent_run_id", parent);
    }
    if let Some(trigger) = &page.trigger {
        equal(r#""trigger""#, trigger.as_str());
    }
    let filter_sql = if clauses.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", clauses.join(" AND "))
    };
    values.push(sql_limit(filter.limit));
    values.push(offset_value(page.offset));
    let query = format!(
        "SELECT {RUN_COLUMNS} FROM runs {filter_sql} ORDER BY created_at DESC, rowid DESC LIMIT ?{} OFFSET ?{}",
        values.len() - 1,
        values.len()
    );
    query_runs(conn, &query, values, "listing runs")
}

fn fires(conn: &Connection, page: &FirePage) -> Result<Vec<RunRecord>, StoreError> {
    let mut values = Vec::new();
    let mut filter_sql = String::from("WHERE scheduled_for IS NOT NULL");
    if let Some(agent) = &page.agent {
        values.push(Value::Text(agent.clone()));
        filter_sql.push_str(&format!(" AND agent = ?{}", values.len()));
    }
    values.push(sql_limit(page.limit));
    values.push(offset_value(page.offset));
    // `scheduled_for` is RFC 3339 UTC text with milliseconds: it sorts as
    // time.
    let query = format!(
        "SELECT {RUN_COLUMNS} FROM runs {filter_sql} ORDER BY scheduled_for DESC, rowid DESC LIMIT ?{} OFFSET ?{}",
        values.len() - 1,
        values.len()
    );
    query_runs(conn, &query, values, "listing scheduled fires")
}

fn query_runs(
    conn: &Connection,
    query: &str,
    values: Vec<Value>,
    context: &'static str,
) -> Result<Vec<RunRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(query).map_err(sql(context))?;
    let rows = stmt
        .query_map(params_from_iter(values), raw_run)
        .map_err(sql(context))?;
    rows.map(|raw| raw.map_err(sql(context))?.check()).collect()
}

fn namespaces(conn: &Connection) -> Result<Vec<MemoryNamespace>, StoreError> {
    conn.prepare_cached("SELECT name, entries FROM memory_namespaces ORDER BY name")
        .and_then(|mut stmt| {
            stmt.query_map([], |row| {
                Ok(MemoryNamespace {
                    name: row.get(0)?,
                    entries: row.get::<_, i64>(1)?.max(0) as u64,
                })
            })?
            .collect()
        })
        .map_err(sql("listing memory namespaces"))
}
