//! What a run started by a trigger other than the clock is for, claimed in
//! the transaction that claims the run, so each happens at most once even
//! across restarts: the follow-up of one finished run (`after_runs`, keyed
//! by agent and the finished run) and the run of one version of a watched
//! file (`watched_files`, keyed by agent, path and content hash). A file
//! whose run was cut off by a crash (`interrupted`) may be claimed again:
//! it was never processed to an end. A file whose run retention pruned
//! stays processed (these records are kept). Writer thread for claims.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::runs::claim;
use super::{Sqlite, StoreError, sql, time_text};
use crate::store::TriggerClaim;
use crate::store::{NewRun, RunRecord};
use crate::types::RunState;

impl Sqlite {
    pub async fn claim_run_for_trigger(
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
        self.call_durable(move |conn| {
            let context = "claiming a triggered run";
            let tx = conn.savepoint().map_err(sql(context))?;
            let new = match &what {
                TriggerClaim::After { after_run_id } => {
                    tx.execute(
                        "INSERT OR IGNORE INTO after_runs (agent, after_run_id, run_id)
                         VALUES (?1, ?2, ?3)",
                        params![run.agent, after_run_id, run.id],
                    )
                    .map_err(sql(context))?
                        == 1
                }
                TriggerClaim::Watch { path, content_hash } => {
                    claim_file(&tx, &run, path, content_hash, now)?
                }
            };
            if !new {
                return Ok(None);
            }
            let record = claim(&tx, &run)?;
            tx.commit().map_err(sql(context))?;
            Ok(Some(record))
        })
        .await
    }

    pub async fn watched_file_done(
        &self,
        agent: &str,
        path: &str,
        content_hash: &str,
    ) -> Result<bool, StoreError> {
        let (agent, path, hash) = (agent.to_owned(), path.to_owned(), content_hash.to_owned());
        self.read(move |conn| Ok(processed(file_run(conn, &agent, &path, &hash)?)))
            .await
    }
}

/// Whether a file version with this recorded run (see [`file_run`]) needs
/// no other: it has a run that was not interrupted, or one whose row
/// retention pruned (`store::retention` deletes final runs only, and keeps
/// this record so the file is not run again).
fn processed(found: Option<Option<RunState>>) -> bool {
    match found {
        None => false,
        Some(None) => true,
        Some(Some(state)) => state != RunState::Interrupted,
    }
}

/// The state of the run recorded for the file: `None` when there is none,
/// `Some(None)` when its run row is gone (pruned by retention).
fn file_run(
    conn: &Connection,
    agent: &str,
    path: &str,
    hash: &str,
) -> Result<Option<Option<RunState>>, StoreError> {
    conn.prepare_cached(
        "SELECT r.state FROM watched_files w LEFT JOIN runs r ON r.id = w.run_id
         WHERE w.agent = ?1 AND w.path = ?2 AND w.content_hash = ?3",
    )
    .and_then(|mut stmt| {
        stmt.query_row(params![agent, path, hash], |row| {
            row.get::<_, Option<String>>(0)
        })
        .optional()
    })
    .map(|found| found.map(|state| state.as_deref().and_then(RunState::parse)))
    .map_err(sql("reading a watched file's run"))
}

/// Records `run` as the run of the file version inside the caller's
/// transaction: false when it has a run that was not interrupted.
fn claim_file(
    tx: &Connection,
    run: &NewRun,
    path: &str,
    hash: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let context = "recording a watched file's run";
    let found = file_run(tx, &run.agent, path, hash)?;
    if processed(found) {
        return Ok(false);
    }
    match found {
        Some(_) => {
            tx.execute(
                "UPDATE watched_files SET run_id = ?4, claimed_at = ?5
                 WHERE agent = ?1 AND path = ?2 AND content_hash = ?3",
                params![run.agent, path, hash, run.id, time_text(now)],
            )
            .map_err(sql(context))?;
            Ok(true)
        }
        None => {
            tx.execute(
                "INSERT INTO watched_files (agent, path, content_hash, run_id, claimed_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![run.agent, path, hash, run.id, time_text(now)],
            )
            .map_err(sql(context))?;
            Ok(true)
        }
    }
}
