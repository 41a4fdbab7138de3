//! Runs and their events on PostgreSQL, the read side: looking up runs
//! (by id or unique prefix), reading events (all, or after a seq for
//! streaming) and what the scheduler asks of the past (last fire, last run,
//! consecutive failures, cost since). The same contract as the SQLite
//! `store::run_reads`. Each read is one statement (or two that tolerate a
//! write between them), reading what other nodes committed.
//!
//! Depends on `run_rows`, `page_reads` (listing) and the store's types.

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;

use super::run_rows::{RUN_COLUMNS, millis, run_from_row};
use super::{Postgres, pg};
use crate::store::MAX_MATCHES;
use crate::store::{RunFilter, RunPage, RunRecord, StoreError};
use crate::types::{RunEvent, RunState, ScheduleId};

/// The shortest prefix [`Postgres::get_run`] looks up (as SQLite's).
const MIN_PREFIX: usize = 4;
/// Where [`Postgres::consecutive_failures`] stops counting.
const MAX_FAILURES: u32 = 100;

impl Postgres {
    /// [`crate::store::Store::list_runs`]: the runs matching `filter`,
    /// newest first.
    pub(crate) async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let page = RunPage {
            filter: filter.clone(),
            ..Default::default()
        };
        self.list_run_page(&page).await
    }

    /// [`crate::store::Store::get_run`]: the run with this id, or with this
    /// unique id prefix (at least 4 characters) or end (at least 6 hex
    /// digits); an ambiguous one is `Ambiguous` with the first 11 matches
    /// in id order.
    pub(crate) async fn get_run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let id = id.to_owned();
        self.with_client(move |client| async move {
            let context = "looking up a run";
            let exact = client
                .prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1"))
                .await
                .map_err(pg(context))?;
            // PostgreSQL text cannot hold NUL: no run has such an id.
            let storable = !id.contains('\0');
            if storable
                && let Some(row) = client
                    .query_opt(&exact, &[&id])
                    .await
                    .map_err(pg(context))?
            {
                return run_from_row(&row).map(Some);
            }
            if id.chars().count() < MIN_PREFIX {
                return Err(StoreError::Invalid(format!(
                    "no run has the id `{id}`; give the whole run id or at least {MIN_PREFIX} \
                     characters of it"
                )));
            }
            if !storable {
                return Ok(None);
            }
            // `runs.id` is `COLLATE "C"` (bytewise, UTF-8 order is code
            // point order), so `[id, id + U+10FFFF)` holds every id starting
            // with `id` and the primary key index finds them.
            let upper = format!("{id}\u{10FFFF}");
            let prefixed = client
                .prepare_cached(
                    "SELECT id FROM runs WHERE id >= $1 AND id < $2 ORDER BY id LIMIT $3",
                )
                .await
                .map_err(pg(context))?;
            let limit = MAX_MATCHES as i64 + 1;
            let rows = client
                .query(&prefixed, &[&id, &upper, &limit])
                .await
                .map_err(pg(context))?;
            let matches: Vec<String> = rows
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()
                .map_err(pg(context))?;
            let ended: Vec<String> = if crate::store::may_be_id_end(&id) {
                let by_end = client
                    .prepare_cached(
                        "SELECT id FROM runs WHERE right(id, length($1)) = $1 ORDER BY id LIMIT $2",
                    )
                    .await
                    .map_err(pg(context))?;
                client
                    .query(&by_end, &[&id, &limit])
                    .await
                    .map_err(pg(context))?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()
                    .map_err(pg(context))?
            } else {
                Vec::new()
            };
            let matches = crate::store::merge_matches(matches, ended);
            match matches.as_slice() {
                [] => Ok(None),
                [only] => client
                    .query_opt(&exact, &[only])
                    .await
                    .map_err(pg(context))?
                    .as_ref()
                    .map(run_from_row)
                    .transpose(),
                _ => Err(StoreError::Ambiguous {
                    prefix: id,
                    matches,
                }),
            }
        })
        .await
    }

    /// [`crate::store::Store::run_events`]: the run's events in order.
    /// `NotFound` when there is no such run, `EventsPruned` when retention
    /// deleted its events.
    pub(crate) async fn run_events(&self, run_id: &str) -> Result<Vec<RunEvent>, StoreError> {
        Ok(self
            .run_events_after(run_id, 0)
            .await?
            .into_iter()
            .map(|(_, event)| event)
            .collect())
    }

    /// [`crate::store::Store::run_events_after`]: the run's events with a
    /// seq above `after_seq`, with their seqs, in order.
    pub(crate) async fn run_events_after(
        &self,
        run_id: &str,
        after_seq: i64,
    ) -> Result<Vec<(i64, RunEvent)>, StoreError> {
        let run_id = run_id.to_owned();
        if run_id.contains('\0') {
            return Err(no_run(&run_id));
        }
        self.with_client(move |client| async move {
            let context = "reading run events";
            let stmt = client
                .prepare_cached(
                    "SELECT seq, data FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq",
                )
                .await
                .map_err(pg(context))?;
            let rows = client
                .query(&stmt, &[&run_id, &after_seq])
                .await
                .map_err(pg(context))?;
            if rows.is_empty() {
                let pruned = client
                    .prepare_cached(
                        "SELECT events_pruned_at, events_pruned FROM runs WHERE id = $1",
                    )
                    .await
                    .map_err(pg(context))?;
                let Some(row) = client
                    .query_opt(&pruned, &[&run_id])
                    .await
                    .map_err(pg(context))?
                else {
                    return Err(no_run(&run_id));
                };
                let corrupt = |e: tokio_postgres::Error| StoreError::CorruptRun {
                    run_id: run_id.clone(),
                    message: format!("events_pruned_at, events_pruned: {e}"),
                };
                let at: Option<DateTime<Utc>> = row.try_get(0).map_err(corrupt)?;
                let events: Option<i64> = row.try_get(1).map_err(corrupt)?;
                // Retention deleted them: say so rather than show none.
                if let (Some(pruned_at), Some(events)) = (at, events)
                    && events > 0
                {
                    return Err(StoreError::EventsPruned {
                        run_id,
                        pruned_at,
                        events: u64::try_from(events).unwrap_or(0),
                    });
                }
            }
            rows.iter()
                .map(|row| {
                    let seq: i64 = row.try_get(0).map_err(pg(context))?;
                    let data: String = row.try_get(1).map_err(pg(context))?;
                    serde_json::from_str(&data)
                        .map(|event| (seq, event))
                        .map_err(|e| StoreError::CorruptEvent {
                            run_id: run_id.clone(),
                            seq,
                            message: e.to_string(),
                        })
                })
                .collect()
        })
        .await
    }

    /// [`crate::store::Store::last_fire`]: the newest fire instant of the
    /// schedule that has a run (of any state).
    pub(crate) async fn last_fire(
        &self,
        agent: &str,
        schedule: &ScheduleId,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let (agent, schedule) = (agent.to_owned(), schedule.as_str().to_owned());
        self.with_client(move |client| async move {
            let context = "reading the last fire of a schedule";
            // `runs_fire` (agent, schedule_id, scheduled_for) serves it.
            let stmt = client
                .prepare_cached(
                    "SELECT id, scheduled_for FROM runs
                     WHERE agent = $1 AND schedule_id = $2 AND scheduled_for IS NOT NULL
                     ORDER BY scheduled_for DESC LIMIT 1",
                )
                .await
                .map_err(pg(context))?;
            let Some(row) = client
                .query_opt(&stmt, &[&agent, &schedule])
                .await
                .map_err(pg(context))?
            else {
                return Ok(None);
            };
            let run_id: String = row.try_get(0).map_err(pg(context))?;
            row.try_get(1)
                .map(Some)
                .map_err(|e| StoreError::CorruptRun {
                    run_id,
                    message: format!("scheduled_for: {e}"),
                })
        })
        .await
    }

    /// [`crate::store::Store::last_run`]: the agent's newest run by creation
    /// time (ties: the greatest id).
    pub(crate) async fn last_run(&self, agent: &str) -> Result<Option<RunRecord>, StoreError> {
        let agent = agent.to_owned();
        self.with_client(move |client| async move {
            let context = "reading an agent's last run";
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS} FROM runs WHERE agent = $1
                     ORDER BY created_at DESC, id DESC LIMIT 1"
                ))
                .await
                .map_err(pg(context))?;
            client
                .query_opt(&stmt, &[&agent])
                .await
                .map_err(pg(context))?
                .as_ref()
                .map(run_from_row)
                .transpose()
        })
        .await
    }

    /// [`crate::store::Store::consecutive_failures`]: the failures
    /// (`failed`, `timed_out`) before the agent's last success, newest
    /// first, at most 100; other states are passed over.
    pub(crate) async fn consecutive_failures(&self, agent: &str) -> Result<u32, StoreError> {
        let agent = agent.to_owned();
        self.with_client(move |client| async move {
            let context = "counting an agent's consecutive failures";
            // `interrupted` (cut off by a crash) is neither: it is skipped.
            let stmt = client
                .prepare_cached(
                    "SELECT state FROM runs
                     WHERE agent = $1 AND state IN ($2, $3, $4)
                     ORDER BY created_at DESC, id DESC LIMIT $5",
                )
                .await
                .map_err(pg(context))?;
            let params: [&(dyn ToSql + Sync); 5] = [
                &agent,
                &RunState::Succeeded.as_str(),
                &RunState::Failed.as_str(),
                &RunState::TimedOut.as_str(),
                &i64::from(MAX_FAILURES),
            ];
            let rows = client.query(&stmt, &params).await.map_err(pg(context))?;
            let mut failures = 0u32;
            for row in &rows {
                let state: String = row.try_get(0).map_err(pg(context))?;
                if state == RunState::Succeeded.as_str() {
                    break;
                }
                failures += 1;
            }
            Ok(failures.min(MAX_FAILURES))
        })
        .await
    }

    /// [`crate::store::Store::cost_since`]: the known cost of the agent's
    /// runs created at or after `since` (to the millisecond), other than
    /// run `except`.
    pub(crate) async fn cost_since(
        &self,
        agent: &str,
        since: DateTime<Utc>,
        except: &str,
    ) -> Result<f64, StoreError> {
        let (agent, except) = (agent.to_owned(), except.to_owned());
        let since = millis(since);
        self.with_client(move |client| async move {
            let context = "summing an agent's cost";
            let stmt = client
                .prepare_cached(
                    "SELECT COALESCE(SUM(cost_usd), 0.0::float8) FROM runs
                     WHERE agent = $1 AND created_at >= $2 AND id != $3",
                )
                .await
                .map_err(pg(context))?;
            client
                .query_one(&stmt, &[&agent, &since, &except])
                .await
                .and_then(|row| row.try_get(0))
                .map_err(pg(context))
        })
        .await
    }
}

fn no_run(run_id: &str) -> StoreError {
    StoreError::NotFound(format!("no run {run_id}; list runs with `aurad runs`"))
}
