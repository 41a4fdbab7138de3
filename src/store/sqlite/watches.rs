//! Which schedules the daemon watches, and since when (`schedule_watches`,
//! keyed by agent and [`ScheduleId`]). A schedule that never fired has no
//! run to say when the daemon started waiting for it; this table does, so a
//! first fire missed while the daemon was down is found after a restart
//! like any later one. An edited schedule has a new id and so a new watch:
//! it starts from the moment it was loaded. Writer thread.
//!
//! Databases from before schedule ids keep their watches by list place in
//! `schedule_watches_by_index` (see the migration): the first watch of a
//! schedule written the same way takes one over, once.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::{Sqlite, StoreError, sql, time_text};
use crate::types::ScheduleId;

impl Sqlite {
    pub async fn watch_schedule(
        &self,
        agent: &str,
        schedule: &ScheduleId,
        cron: &str,
        now: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, StoreError> {
        let (agent, schedule, cron) = (agent.to_owned(), schedule.clone(), cron.to_owned());
        self.call(move |conn| watch(conn, &agent, &schedule, &cron, now))
            .await
    }

    pub async fn unwatch_schedules_except(
        &self,
        keep: Vec<(String, ScheduleId)>,
    ) -> Result<usize, StoreError> {
        self.call(move |conn| unwatch_except(conn, &keep)).await
    }
}

fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text).ok().map(|t| t.to_utc())
}

fn watch(
    conn: &mut Connection,
    agent: &str,
    schedule: &ScheduleId,
    cron: &str,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, StoreError> {
    let context = "recording a watched schedule";
    let tx = conn.savepoint().map_err(sql(context))?;
    let stored: Option<String> = tx
        .prepare_cached("SELECT since FROM schedule_watches WHERE agent = ?1 AND schedule_id = ?2")
        .and_then(|mut s| {
            s.query_row(params![agent, schedule.as_str()], |r| r.get(0))
                .optional()
        })
        .map_err(sql(context))?;
    // An unreadable instant (a hand edit) is replaced below.
    if let Some(since) = stored.as_deref().and_then(parse_time) {
        return Ok(since);
    }
    let since = take_over_by_index(&tx, agent, cron)?.unwrap_or(now);
    tx.execute(
        "INSERT OR REPLACE INTO schedule_watches (agent, schedule_id, since)
         VALUES (?1, ?2, ?3)",
        params![agent, schedule.as_str(), time_text(since)],
    )
    .map_err(sql(context))?;
    tx.commit().map_err(sql(context))?;
    Ok(since)
}

/// Takes over the watch by list place of `agent`'s schedule written as
/// `cron` (the lowest place when several match), if there is one: deletes
/// it and returns where the schedule resumes, the later of its `since` and
/// the newest fire stored at that place before schedules had ids.
fn take_over_by_index(
    conn: &Connection,
    agent: &str,
    cron: &str,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let context = "taking over a schedule watch stored by list place";
    let old: Option<(i64, String)> = conn
        .prepare_cached(
            "SELECT schedule_index, since FROM schedule_watches_by_index
             WHERE agent = ?1 AND cron = ?2 ORDER BY schedule_index LIMIT 1",
        )
        .and_then(|mut s| {
            s.query_row(params![agent, cron], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(sql(context))?;
    let Some((index, since)) = old else {
        return Ok(None);
    };
    conn.execute(
        "DELETE FROM schedule_watches_by_index WHERE agent = ?1 AND schedule_index = ?2",
        params![agent, index],
    )
    .map_err(sql(context))?;
    let Some(since) = parse_time(&since) else {
        return Ok(None); // unreadable (a hand edit): start anew
    };
    // Only fires since `since` were this schedule's: before, that place
    // held another one.
    let last: Option<String> = conn
        .prepare_cached(
            "SELECT MAX(scheduled_for) FROM runs
             WHERE agent = ?1 AND schedule_index = ?2 AND schedule_id IS NULL
               AND scheduled_for >= ?3",
        )
        .and_then(|mut s| s.query_row(params![agent, index, time_text(since)], |r| r.get(0)))
        .map_err(sql(context))?;
    Ok(Some(
        last.as_deref()
            .and_then(parse_time)
            .map_or(since, |l| l.max(since)),
    ))
}

fn unwatch_except(
    conn: &mut Connection,
    keep: &[(String, ScheduleId)],
) -> Result<usize, StoreError> {
    let context = "forgetting schedules that are gone";
    let tx = conn.savepoint().map_err(sql(context))?;
    let watched: Vec<(String, String)> = tx
        .prepare_cached("SELECT agent, schedule_id FROM schedule_watches")
        .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .map_err(sql(context))?;
    let mut gone = 0;
    for (agent, id) in watched {
        let kept = keep.iter().any(|(a, i)| *a == agent && i.as_str() == id);
        if !kept {
            gone += tx
                .execute(
                    "DELETE FROM schedule_watches WHERE agent = ?1 AND schedule_id = ?2",
                    params![agent, id],
                )
                .map_err(sql(context))?;
        }
    }
    gone += tx
        .execute("DELETE FROM schedule_watches_by_index", [])
        .map_err(sql(context))?;
    tx.commit().map_err(sql(context))?;
    Ok(gone)
}

#[cfg(test)]
#[path = "watches_tests.rs"]
mod tests;
