//! Retention on PostgreSQL: the same scopes, rules and counts as the
//! SQLite `retention.rs` (events first, then whole runs with their events,
//! approvals, steps, pipeline row and `after_runs` records; never a run
//! that is not final, a final child of a run still going, or the run of a
//! schedule's newest fire), in small batches.
//!
//! Races between nodes: a batch locks the runs it takes `FOR UPDATE SKIP
//! LOCKED`, so two nodes pruning at once take disjoint runs; a run another
//! node emptied or deleted meanwhile is re-checked under the lock (no
//! longer `events_pruned_at IS NULL`, or gone) and left out. Nothing is
//! deleted or counted twice, and neither node fails.
//!
//! [`Pruned`] counts rows here as in SQLite (runs deleted or emptied, event,
//! step and approval rows deleted); [`PruneBatch::held`] is how long the
//! batch's transaction did its work before the commit (its locks are held
//! on the runs it took only). Space: PostgreSQL has no file pages to
//! count; deleted rows become dead tuples that (auto)vacuum makes free
//! space in the same tables, and new rows reuse it, so under steady
//! retention the tables stop growing (checked in the tests with an explicit
//! `VACUUM`); they do not shrink on disk without `VACUUM FULL`.
//!
//! Depends on the store's types, `run_rows::millis` and `tokio-postgres`.

use std::time::Instant;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use super::run_rows::millis;
use super::{Postgres, pg};
use crate::store::{PruneBatch, PruneScope, Pruned, StoreError};

/// Runs that are not final, as SQL: never pruned, and the runs still to
/// be cancelled or weighed by `on_overlap` (`queue`). Must list exactly
/// the states for which `RunState::is_final` is false (a unit test checks).
pub(super) const NOT_FINAL: &str = "('queued', 'running', 'waiting_approval')";

/// Which runs a scope takes, with `$1` the cutoff. A run's age is its end
/// (its creation when it has none); the `created_at` term lets an index
/// find the old ones, as a run ends after it is created.
fn candidates(scope: PruneScope) -> String {
    let common = format!(
        "r.created_at < $1 AND COALESCE(r.finished_at, r.created_at) < $1
         AND r.state NOT IN {NOT_FINAL}
         AND NOT EXISTS (SELECT 1 FROM runs p
                         WHERE p.id = r.parent_run_id AND p.state IN {NOT_FINAL})"
    );
    match scope {
        // `runs_events_kept` indexes exactly the runs not emptied yet.
        PruneScope::Events => {
            format!("SELECT r.id FROM runs r WHERE r.events_pruned_at IS NULL AND {common}")
        }
        // A run with no schedule id but a fire time does not exist in a
        // database that started with schedule ids; it is kept the same
        // way (newest of its agent's) should one be written by hand.
        PruneScope::Runs => format!(
            "SELECT r.id FROM runs r
             WHERE {common}
               AND NOT (r.scheduled_for IS NOT NULL AND r.scheduled_for IS NOT DISTINCT FROM (
                   CASE WHEN r.schedule_id IS NOT NULL THEN
                       (SELECT MAX(f.scheduled_for) FROM runs f
                        WHERE f.agent = r.agent AND f.schedule_id = r.schedule_id
                          AND f.scheduled_for IS NOT NULL)
                   ELSE
                       (SELECT MAX(f.scheduled_for) FROM runs f
                        WHERE f.agent = r.agent AND f.schedule_id IS NULL
                          AND f.scheduled_for IS NOT NULL)
                   END))"
        ),
    }
}

impl Postgres {
    /// Prunes one batch of `scope` for runs that ended before `before`:
    /// oldest first, about `max_rows` rows (at least one run), in one
    /// transaction. Call it until [`Pruned::runs_touched`] is 0.
    pub(crate) async fn prune_batch(
        &self,
        scope: PruneScope,
        before: DateTime<Utc>,
        max_rows: usize,
    ) -> Result<PruneBatch, StoreError> {
        self.with_client(move |mut client| async move {
            let started = Instant::now();
            let context = "pruning old runs (retention)";
            let tx = client.transaction().await.map_err(pg(context))?;
            let limit = i64::try_from(max_rows.max(1)).unwrap_or(i64::MAX);
            let select = tx
                .prepare_cached(&format!(
                    "{} ORDER BY r.created_at LIMIT $2 FOR UPDATE OF r SKIP LOCKED",
                    candidates(scope)
                ))
                .await
                .map_err(pg(context))?;
            let ids = tx
                .query(&select, &[&millis(before), &limit])
                .await
                .map_err(pg(context))?;
            let now = millis(Utc::now());
            let mut pruned = Pruned::default();
            let mut rows = 0;
            for row in ids {
                let id: String = row.try_get(0).map_err(pg(context))?;
                rows += match scope {
                    PruneScope::Events => empty_run(&tx, &id, now, &mut pruned).await,
                    PruneScope::Runs => delete_run(&tx, &id, &mut pruned).await,
                }
                .map_err(|e| {
                    StoreError::Database(format!(
                        "PostgreSQL, run {id}: {context}: {}",
                        super::error_text(&e)
                    ))
                })?;
                if rows >= max_rows as u64 {
                    break;
                }
            }
            let held = started.elapsed();
            tx.commit().await.map_err(pg(context))?;
            Ok(PruneBatch { pruned, held })
        })
        .await
    }

    /// What pruning `scope` before `before` would remove now (a dry run;
    /// changes nothing, takes no lock).
    pub(crate) async fn prunable(
        &self,
        scope: PruneScope,
        before: DateTime<Utc>,
    ) -> Result<Pruned, StoreError> {
        self.with_client(move |client| async move {
            let context = "counting what retention would prune";
            let query = format!(
                "WITH doomed(id) AS ({})
                 SELECT (SELECT COUNT(*) FROM doomed),
                        (SELECT COUNT(*) FROM events WHERE run_id IN (SELECT id FROM doomed)),
                        (SELECT COUNT(*) FROM pipeline_steps WHERE run_id IN (SELECT id FROM doomed)),
                        (SELECT COUNT(*) FROM approvals WHERE run_id IN (SELECT id FROM doomed))",
                candidates(scope)
            );
            let statement = client.prepare_cached(&query).await.map_err(pg(context))?;
            let row = client
                .query_one(&statement, &[&millis(before)])
                .await
                .map_err(pg(context))?;
            let mut counts = [0u64; 4];
            for (i, count) in counts.iter_mut().enumerate() {
                let n: i64 = row.try_get(i).map_err(pg(context))?;
                *count = u64::try_from(n).unwrap_or(0);
            }
            let [runs, events, steps, approvals] = counts;
            Ok(match scope {
                PruneScope::Events => Pruned {
                    runs_emptied: runs,
                    events,
                    ..Pruned::default()
                },
                PruneScope::Runs => Pruned {
                    runs,
                    events,
                    steps,
                    approvals,
                    ..Pruned::default()
                },
            })
        })
        .await
    }
}

/// Deletes the events of run `id` and marks it; returns the rows touched.
async fn empty_run(
    tx: &impl GenericClient,
    id: &str,
    now: DateTime<Utc>,
    pruned: &mut Pruned,
) -> Result<u64, tokio_postgres::Error> {
    let delete = tx
        .prepare_cached("DELETE FROM events WHERE run_id = $1")
        .await?;
    let events = tx.execute(&delete, &[&id]).await?;
    let mark = tx
        .prepare_cached("UPDATE runs SET events_pruned_at = $2, events_pruned = $3 WHERE id = $1")
        .await?;
    let count = i64::try_from(events).unwrap_or(i64::MAX);
    tx.execute(&mark, &[&id, &now, &count]).await?;
    pruned.runs_emptied += 1;
    pruned.events += events;
    Ok(events + 1)
}

/// Deletes run `id` and the rows recorded about it; returns the rows
/// touched.
async fn delete_run(
    tx: &impl GenericClient,
    id: &str,
    pruned: &mut Pruned,
) -> Result<u64, tokio_postgres::Error> {
    let mut counts = [0u64; 6];
    for (statement, count) in [
        "DELETE FROM events WHERE run_id = $1",
        "DELETE FROM approvals WHERE run_id = $1",
        "DELETE FROM pipeline_steps WHERE run_id = $1",
        "DELETE FROM pipeline_runs WHERE run_id = $1",
        // Its follow-ups were started (or never will be: it ended long ago).
        "DELETE FROM after_runs WHERE after_run_id = $1",
        "DELETE FROM runs WHERE id = $1",
    ]
    .into_iter()
    .zip(counts.iter_mut())
    {
        let statement = tx.prepare_cached(statement).await?;
        *count = tx.execute(&statement, &[&id]).await?;
    }
    let [events, approvals, steps, _pipeline, _after, run] = counts;
    pruned.runs += run;
    pruned.events += events;
    pruned.approvals += approvals;
    pruned.steps += steps;
    Ok(counts.iter().sum())
}
