//! The reads a browsing client pages through, on PostgreSQL: runs filtered
//! by agent, state, parent and trigger a page at a time, and the fires of
//! schedules (runs with a `scheduled_for`, whatever became of them). The
//! same contract as the SQLite `store::page_reads` (memory namespaces are
//! with memory). Ties of time are broken by `row_seq`, the insertion order
//! across nodes (SQLite's rowid).
//!
//! Depends on `run_rows` and the store's types.

use tokio_postgres::types::ToSql;

use super::run_rows::{RUN_COLUMNS, run_from_row};
use super::{Postgres, pg};
use crate::store::{FirePage, RunPage, RunRecord, StoreError};

impl Postgres {
    /// [`crate::store::Store::list_run_page`]: the runs of `page`, newest
    /// first.
    pub(crate) async fn list_run_page(&self, page: &RunPage) -> Result<Vec<RunRecord>, StoreError> {
        let filter = &page.filter;
        let mut equal = Vec::new();
        if let Some(agent) = &filter.agent {
            equal.push(("agent", agent.clone()));
        }
        if let Some(state) = filter.state {
            equal.push(("state", state.as_str().to_owned()));
        }
        if let Some(parent) = &filter.parent {
            equal.push(("parent_run_id", parent.clone()));
        }
        if let Some(trigger) = &page.trigger {
            equal.push((r#""trigger""#, trigger.as_str().to_owned()));
        }
        let clauses: Vec<String> = equal
            .iter()
            .enumerate()
            .map(|(i, (column, _))| format!("{column} = ${}", i + 1))
            .collect();
        let filter_sql = if clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", clauses.join(" AND "))
        };
        let n = equal.len();
        let query = format!(
            "SELECT {RUN_COLUMNS} FROM runs {filter_sql}
             ORDER BY created_at DESC, row_seq DESC LIMIT ${} OFFSET ${}",
            n + 1,
            n + 2
        );
        let values = equal.into_iter().map(|(_, value)| value).collect();
        self.query_runs(query, values, filter.limit, page.offset, "listing runs")
            .await
    }

    /// [`crate::store::Store::list_fires`]: the runs of scheduled fires,
    /// newest fire first.
    pub(crate) async fn list_fires(&self, page: &FirePage) -> Result<Vec<RunRecord>, StoreError> {
        let mut values = Vec::new();
        let mut filter_sql = String::from("WHERE scheduled_for IS NOT NULL");
        if let Some(agent) = &page.agent {
            values.push(agent.clone());
            filter_sql.push_str(" AND agent = $1");
        }
        let n = values.len();
        let query = format!(
            "SELECT {RUN_COLUMNS} FROM runs {filter_sql}
             ORDER BY scheduled_for DESC, row_seq DESC LIMIT ${} OFFSET ${}",
            n + 1,
            n + 2
        );
        self.query_runs(
            query,
            values,
            page.limit,
            page.offset,
            "listing scheduled fires",
        )
        .await
    }

    /// Runs `query` with the text `values` as `$1..`, then the limit (0: no
    /// limit, bound as NULL) and the offset.
    async fn query_runs(
        &self,
        query: String,
        values: Vec<String>,
        limit: usize,
        offset: usize,
        context: &'static str,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let limit: Option<i64> = (limit > 0).then(|| i64::try_from(limit).unwrap_or(i64::MAX));
        let offset = i64::try_from(offset).unwrap_or(i64::MAX);
        self.with_client(move |client| async move {
            let stmt = client.prepare_cached(&query).await.map_err(pg(context))?;
            let mut params: Vec<&(dyn ToSql + Sync)> =
                values.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
            params.push(&limit);
            params.push(&offset);
            let rows = client.query(&stmt, &params).await.map_err(pg(context))?;
            rows.iter().map(run_from_row).collect()
        })
        .await
    }
}
