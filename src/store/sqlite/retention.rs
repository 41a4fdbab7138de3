//! Retention: deleting old run data in small batches (`retention:` in
//! aurad.yaml, `aurad runs prune`). Two scopes, each by age against a
//! cutoff instant the caller computes:
//!
//! - [`PruneScope::Events`]: a final run that ended before the cutoff
//!   loses its event rows; its `runs` row (state, times, usage, cost,
//!   output, error), steps and approvals stay, and it is marked
//!   (`events_pruned_at`, `events_pruned`) so readers say the events were
//!   pruned instead of showing an empty log ([`StoreError::EventsPruned`]).
//! - [`PruneScope::Runs`]: a final run that ended before the cutoff is
//!   deleted with everything recorded about it: events, approvals, pipeline
//!   steps and the pipeline row, and the `after_runs` record of follow-ups
//!   of it.
//!
//! Never pruned: a run that is not final (queued, running, waiting for
//! approval), whatever its age; a final run whose parent run is not final
//! (a pipeline or agent call still going); and, per schedule, the run of
//! its newest fire, from which the scheduler resumes after a restart (with
//! it gone, fires already handled would look missed). Memory is not run
//! data and is never touched; `watched_files` records are kept (a file
//! whose run was pruned stays processed), webhook deliveries expire on
//! their own after 24 hours.
//!
//! Each batch is one job on the writer thread touching about `max_rows`
//! rows (the runs it selects and their events), so writes queued behind it
//! wait for one small transaction, not the whole prune. Space: SQLite puts
//! freed pages on its freelist and new writes reuse them, so under steady
//! retention the file stops growing (measured by `benches/retention.rs`);
//! the file does not shrink on disk.
//!
//! Dry runs ([`Sqlite::prunable`]) count on the reader thread.

use std::time::Instant;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use super::{Sqlite, StoreError, now_text, sql, time_text};
use crate::store::{PruneBatch, PruneScope, Pruned};

/// Runs that are not final, as SQL: never pruned. Must list exactly the
/// states for which `RunState::is_final` is false (a unit test checks).
const NOT_FINAL: &str = "('queued', 'running', 'waiting_approval')";

/// Which runs a scope takes, with `?1` the cutoff (as stored). A run's age
/// is its end (its creation when it has none); the `created_at` term lets
/// the index find the old ones, as a run ends after it is created.
fn candidates(scope: PruneScope) -> String {
    let common = format!(
        "r.created_at < ?1 AND COALESCE(r.finished_at, r.created_at) < ?1
         AND r.state NOT IN {NOT_FINAL}
         AND NOT EXISTS (SELECT 1 FROM runs p
                         WHERE p.id = r.parent_run_id AND p.state IN {NOT_FINAL})"
    );
    match scope {
        // `runs_events_kept` indexes exactly the runs not pruned yet.
        PruneScope::Events => format!(
            "SELECT r.id FROM runs r INDEXED BY runs_events_kept
             WHERE r.events_pruned_at IS NULL AND {common}"
        ),
        PruneScope::Runs => format!(
            "SELECT r.id FROM runs r
             WHERE {common}
               AND NOT (r.scheduled_for IS NOT NULL AND r.scheduled_for IS (
                   CASE WHEN r.schedule_id IS NOT NULL THEN
                       (SELECT MAX(f.scheduled_for) FROM runs f
                        WHERE f.agent = r.agent AND f.schedule_id = r.schedule_id
                          AND f.scheduled_for IS NOT NULL)
                   ELSE
                       (SELECT MAX(f.scheduled_for) FROM runs f
                        WHERE f.agent = r.agent AND f.schedule_id IS NULL
                          AND f.schedule_index IS r.schedule_index
                          AND f.scheduled_for IS NOT NULL)
                   END))"
        ),
    }
}

impl Sqlite {
    pub async fn prune_batch(
        &self,
        scope: PruneScope,
        before: DateTime<Utc>,
        max_rows: usize,
    ) -> Result<PruneBatch, StoreError> {
        self.call(move |conn| prune(conn, scope, before, max_rows))
            .await
    }

    pub fn prune_batch_blocking(
        &self,
        scope: PruneScope,
        before: DateTime<Utc>,
        max_rows: usize,
    ) -> Result<PruneBatch, StoreError> {
        self.call_blocking(move |conn| prune(conn, scope, before, max_rows))
    }

    pub async fn prunable(
        &self,
        scope: PruneScope,
        before: DateTime<Utc>,
    ) -> Result<Pruned, StoreError> {
        self.read(move |conn| count(conn, scope, before)).await
    }

    pub fn prunable_blocking(
        &self,
        scope: PruneScope,
        before: DateTime<Utc>,
    ) -> Result<Pruned, StoreError> {
        self.read_blocking(move |conn| count(conn, scope, before))
    }
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn prune(
    conn: &mut Connection,
    scope: PruneScope,
    before: DateTime<Utc>,
    max_rows: usize,
) -> Result<PruneBatch, StoreError> {
    let started = Instant::now();
    let context = "pruning old runs (retention)";
    let tx = conn.savepoint().map_err(sql(context))?;
    let limit = i64::try_from(max_rows.max(1)).unwrap_or(i64::MAX);
    let ids: Vec<String> = tx
        .prepare_cached(&format!(
            "{} ORDER BY r.created_at LIMIT ?2",
            candidates(scope)
        ))
        .and_then(|mut stmt| {
            stmt.query_map(params![time_text(before), limit], |row| row.get(0))?
                .collect()
        })
        .map_err(sql(context))?;
    let now = now_text();
    let mut pruned = Pruned::default();
    let mut rows = 0;
    for id in ids {
        rows += match scope {
            PruneScope::Events => empty_run(&tx, &id, &now, &mut pruned),
            PruneScope::Runs => delete_run(&tx, &id, &mut pruned),
        }
        .map_err(|e| StoreError::sqlite(&format!("run {id}: {context}"), e))?;
        if rows >= max_rows {
            break;
        }
    }
    tx.commit().map_err(sql(context))?;
    Ok(PruneBatch {
        pruned,
        held: started.elapsed(),
    })
}

/// Deletes the events of run `id` and marks it; returns the rows touched.
fn empty_run(tx: &Connection, id: &str, now: &str, pruned: &mut Pruned) -> rusqlite::Result<usize> {
    let events = tx
        .prepare_cached("DELETE FROM events WHERE run_id = ?1")?
        .execute([id])?;
    tx.prepare_cached("UPDATE runs SET events_pruned_at = ?2, events_pruned = ?3 WHERE id = ?1")?
        .execute(params![id, now, i64::try_from(events).unwrap_or(i64::MAX)])?;
    pruned.runs_emptied += 1;
    pruned.events += to_u64(events);
    Ok(events + 1)
}

/// Deletes run `id` and the rows recorded about it; returns the rows
/// touched.
fn delete_run(tx: &Connection, id: &str, pruned: &mut Pruned) -> rusqlite::Result<usize> {
    let delete = |statement: &str| tx.prepare_cached(statement)?.execute([id]);
    let events = delete("DELETE FROM events WHERE run_id = ?1")?;
    let approvals = delete("DELETE FROM approvals WHERE run_id = ?1")?;
    let steps = delete("DELETE FROM pipeline_steps WHERE run_id = ?1")?;
    let pipeline = delete("DELETE FROM pipeline_runs WHERE run_id = ?1")?;
    // Its follow-ups were started (or never will be: it ended long ago).
    let after = delete("DELETE FROM after_runs WHERE after_run_id = ?1")?;
    let run = delete("DELETE FROM runs WHERE id = ?1")?;
    pruned.runs += to_u64(run);
    pruned.events += to_u64(events);
    pruned.approvals += to_u64(approvals);
    pruned.steps += to_u64(steps);
    Ok(events + approvals + steps + pipeline + after + run)
}

fn count(
    conn: &Connection,
    scope: PruneScope,
    before: DateTime<Utc>,
) -> Result<Pruned, StoreError> {
    let query = format!(
        "WITH doomed(id) AS ({})
         SELECT (SELECT COUNT(*) FROM doomed),
                (SELECT COUNT(*) FROM events WHERE run_id IN doomed),
                (SELECT COUNT(*) FROM pipeline_steps WHERE run_id IN doomed),
                (SELECT COUNT(*) FROM approvals WHERE run_id IN doomed)",
        candidates(scope)
    );
    let (runs, events, steps, approvals): (i64, i64, i64, i64) = conn
        .prepare_cached(&query)
        .and_then(|mut stmt| {
            stmt.query_row([time_text(before)], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
        })
        .map_err(sql("counting what retention would prune"))?;
    let [runs, events, steps, approvals] =
        [runs, events, steps, approvals].map(|n| u64::try_from(n).unwrap_or(0));
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
}

#[cfg(test)]
#[path = "retention_tests.rs"]
mod tests;
