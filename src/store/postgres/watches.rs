//! Which schedules are watched, and since when (`schedule_watches`), on
//! PostgreSQL: the same rule as the SQLite `watches.rs`, the instant stored
//! first stands, so a first fire missed while every node was down is found
//! after a restart.
//!
//! Races between nodes: the primary key (agent, schedule) settles two nodes
//! watching a new schedule at once: one insert wins, the other's waits for
//! it and then reads it, so both get the same instant (the one committed
//! first), and every later call gets it too.
//!
//! A PostgreSQL database never held watches by list place (it starts with
//! schedule ids), so there is no by-place watch to take over: `cron` is
//! accepted for the same signature and not needed.
//!
//! Depends on the store's types, `run_rows::millis` and `tokio-postgres`.

use chrono::{DateTime, Utc};

use super::run_rows::millis;
use super::{Postgres, pg};
use crate::store::StoreError;
use crate::types::ScheduleId;

impl Postgres {
    /// Records that schedule `schedule` of `agent` is watched, and returns
    /// since when: the stored instant when it was watched already (by this
    /// node or another), else `now`.
    pub(crate) async fn watch_schedule(
        &self,
        agent: &str,
        schedule: &ScheduleId,
        _cron: &str,
        now: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, StoreError> {
        let (agent, schedule) = (agent.to_owned(), schedule.as_str().to_owned());
        self.with_client(move |client| async move {
            let context = "recording a watched schedule";
            let insert = client
                .prepare_cached(
                    "INSERT INTO schedule_watches (agent, schedule_id, since) VALUES ($1, $2, $3)
                     ON CONFLICT (agent, schedule_id) DO NOTHING RETURNING since",
                )
                .await
                .map_err(pg(context))?;
            if let Some(row) = client
                .query_opt(&insert, &[&agent, &schedule, &millis(now)])
                .await
                .map_err(pg(context))?
            {
                return row.try_get(0).map_err(pg(context));
            }
            // Watched already: a new statement sees the row that won,
            // committed (the insert above waited for it).
            let select = client
                .prepare_cached(
                    "SELECT since FROM schedule_watches WHERE agent = $1 AND schedule_id = $2",
                )
                .await
                .map_err(pg(context))?;
            match client
                .query_opt(&select, &[&agent, &schedule])
                .await
                .map_err(pg(context))?
            {
                Some(row) => row.try_get(0).map_err(pg(context)),
                // Forgotten between the two statements (another node's
                // `unwatch_schedules_except`): watched from now.
                None => Ok(millis(now)),
            }
        })
        .await
    }

    /// Forgets the watches of schedules that are gone: every watch not in
    /// `keep` (each (agent, schedule) still scheduled). Returns how many
    /// were forgotten. One statement.
    pub(crate) async fn unwatch_schedules_except(
        &self,
        keep: Vec<(String, ScheduleId)>,
    ) -> Result<usize, StoreError> {
        let (agents, ids): (Vec<String>, Vec<String>) = keep
            .into_iter()
            .map(|(agent, id)| (agent, id.as_str().to_owned()))
            .unzip();
        self.with_client(move |client| async move {
            // Two nodes at once: each deletes what it still sees; a row is
            // deleted once, and counted by the node that deleted it.
            let gone = client
                .execute(
                    "DELETE FROM schedule_watches w
                     WHERE NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS k(agent, id)
                                       WHERE k.agent = w.agent AND k.id = w.schedule_id)",
                    &[&agents, &ids],
                )
                .await
                .map_err(pg("forgetting schedules that are gone"))?;
            Ok(usize::try_from(gone).unwrap_or(usize::MAX))
        })
        .await
    }
}
