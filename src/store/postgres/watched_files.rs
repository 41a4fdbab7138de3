//! What a run started by a trigger other than the clock is for, on
//! PostgreSQL: the follow-up of one finished run (`after_runs`) and the run
//! of one version of a watched file (`watched_files`), each claimed in the
//! transaction that claims the run, so each happens once across nodes and
//! restarts. A file whose run was `interrupted` may be claimed again; one
//! whose run row retention pruned stays processed. The same contract as
//! the SQLite `store::watched_files`.
//!
//! Races: both claims are one upsert on the table's primary key. A second
//! node's upsert waits for the first's uncommitted row and, once it
//! commits, finds it taken (for a file: its run is not an interrupted one)
//! and changes nothing; if the first rolls back, the second claims it.
//!
//! Depends on `runs` (inserting the run) and the store's types.

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;

use super::run_rows::millis;
use super::runs::insert_run;
use super::{Postgres, pg};
use crate::store::{NewRun, RunRecord, StoreError, TriggerClaim};
use crate::types::RunState;

impl Postgres {
    /// [`crate::store::Store::claim_run_for_trigger`]: claims `run` for
    /// `what`, remembering it in the same transaction; `None` (nothing
    /// stored) when `what` has a run already (for a file, one that was not
    /// interrupted).
    pub(crate) async fn claim_run_for_trigger(
        &self,
        run: NewRun,
        what: TriggerClaim,
        now: DateTime<Utc>,
    ) -> Result<Option<RunRecord>, StoreError> {
        if !matches!(run.state, RunState::Queued | RunState::Running) {
            return Err(StoreError::Invalid(format!(
                "run {}: a run is claimed as `queued` or `running`, not `{}`",
                run.id, run.state
            )));
        }
        let now = millis(now);
        self.with_client(move |mut client| async move {
            let context = "claiming a triggered run";
            let tx = client.transaction().await.map_err(pg(context))?;
            let claimed = match &what {
                TriggerClaim::After { after_run_id } => {
                    let stmt = tx
                        .prepare_cached(
                            "INSERT INTO after_runs (agent, after_run_id, run_id)
                             VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                        )
                        .await
                        .map_err(pg(context))?;
                    tx.execute(&stmt, &[&run.agent, after_run_id, &run.id])
                        .await
                        .map_err(pg(context))?
                }
                TriggerClaim::Watch { path, content_hash } => {
                    // Taken over only when its recorded run exists and was
                    // interrupted (a pruned run's row is gone: processed).
                    let stmt = tx
                        .prepare_cached(
                            "INSERT INTO watched_files AS w
                                 (agent, path, content_hash, run_id, claimed_at)
                             VALUES ($1, $2, $3, $4, $5)
                             ON CONFLICT (agent, path, content_hash) DO UPDATE
                                 SET run_id = EXCLUDED.run_id, claimed_at = EXCLUDED.claimed_at
                                 WHERE EXISTS (SELECT 1 FROM runs r
                                               WHERE r.id = w.run_id AND r.state = 'interrupted')",
                        )
                        .await
                        .map_err(pg(context))?;
                    let params: [&(dyn ToSql + Sync); 5] =
                        [&run.agent, path, content_hash, &run.id, &now];
                    tx.execute(&stmt, &params).await.map_err(pg(context))?
                }
            };
            if claimed != 1 {
                return Ok(None);
            }
            let record = insert_run(&tx, &run).await?;
            tx.commit().await.map_err(pg(context))?;
            Ok(Some(record))
        })
        .await
    }

    /// [`crate::store::Store::watched_file_done`]: whether file `path` with
    /// `content_hash` has had its run for `agent` (one not interrupted, or
    /// one retention pruned).
    pub(crate) async fn watched_file_done(
        &self,
        agent: &str,
        path: &str,
        content_hash: &str,
    ) -> Result<bool, StoreError> {
        let (agent, path, hash) = (agent.to_owned(), path.to_owned(), content_hash.to_owned());
        self.with_client(move |client| async move {
            let context = "reading a watched file's run";
            let stmt = client
                .prepare_cached(
                    "SELECT r.state FROM watched_files w LEFT JOIN runs r ON r.id = w.run_id
                     WHERE w.agent = $1 AND w.path = $2 AND w.content_hash = $3",
                )
                .await
                .map_err(pg(context))?;
            let Some(row) = client
                .query_opt(&stmt, &[&agent, &path, &hash])
                .await
                .map_err(pg(context))?
            else {
                return Ok(false);
            };
            let state: Option<String> = row.try_get(0).map_err(pg(context))?;
            // No row: pruned by retention, which deletes final runs only.
            Ok(state.as_deref().and_then(RunState::parse) != Some(RunState::Interrupted))
        })
        .await
    }
}
