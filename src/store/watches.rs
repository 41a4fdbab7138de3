//! Which schedules the daemon watches, and since when (`schedule_watches`).
//! A schedule that never fired has no run to say when the daemon started
//! waiting for it; this table does, so a first fire missed while the daemon
//! was down is found after a restart like any later one. Writer thread.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};

use super::{Store, StoreError, sql, time_text};

impl Store {
    /// Records that schedule `schedule_index` of `agent`, written as `cron`
    /// (expression and zone), is watched, and returns since when: the
    /// stored instant when the same `cron` was watched already, else `now`
    /// (new or changed schedules start now).
    pub async fn watch_schedule(
        &self,
        agent: &str,
        schedule_index: usize,
        cron: &str,
        now: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, StoreError> {
        let (agent, cron) = (agent.to_owned(), cron.to_owned());
        self.call(move |conn| watch(conn, &agent, schedule_index, &cron, now))
            .await
    }

    /// Forgets the watches of schedules that are gone (an agent removed, a
    /// schedule taken out of its list): if one comes back, it starts anew.
    /// `keep` holds every (agent, index) still scheduled.
    pub async fn unwatch_schedules_except(
        &self,
        keep: Vec<(String, usize)>,
    ) -> Result<usize, StoreError> {
        self.call(move |conn| unwatch_except(conn, &keep)).await
    }
}

fn index_sql(schedule_index: usize) -> Result<i64, StoreError> {
    i64::try_from(schedule_index)
        .map_err(|_| StoreError::Invalid(format!("schedule index {schedule_index} is too large")))
}

fn watch(
    conn: &mut Connection,
    agent: &str,
    schedule_index: usize,
    cron: &str,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, StoreError> {
    let index = index_sql(schedule_index)?;
    let context = "recording a watched schedule";
    let stored: Option<(String, String)> = conn
        .prepare_cached(
            "SELECT cron, since FROM schedule_watches WHERE agent = ?1 AND schedule_index = ?2",
        )
        .and_then(|mut s| {
            s.query_row(params![agent, index], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .map_err(sql(context))?;
    if let Some((stored_cron, since)) = stored
        && stored_cron == cron
    {
        // An unreadable instant (a hand edit) is replaced below.
        if let Ok(since) = DateTime::parse_from_rfc3339(&since) {
            return Ok(since.to_utc());
        }
    }
    conn.execute(
        "INSERT OR REPLACE INTO schedule_watches (agent, schedule_index, cron, since)
         VALUES (?1, ?2, ?3, ?4)",
        params![agent, index, cron, time_text(now)],
    )
    .map_err(sql(context))?;
    Ok(now)
}

fn unwatch_except(conn: &mut Connection, keep: &[(String, usize)]) -> Result<usize, StoreError> {
    let context = "forgetting schedules that are gone";
    let watched: Vec<(String, i64)> = conn
        .prepare_cached("SELECT agent, schedule_index FROM schedule_watches")
        .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
        .map_err(sql(context))?;
    let mut gone = 0;
    for (agent, index) in watched {
        let kept = keep
            .iter()
            .any(|(a, i)| *a == agent && i64::try_from(*i).is_ok_and(|i| i == index));
        if !kept {
            gone += conn
                .execute(
                    "DELETE FROM schedule_watches WHERE agent = ?1 AND schedule_index = ?2",
                    params![agent, index],
                )
                .map_err(sql(context))?;
        }
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    use super::super::tests::db;
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    #[tokio::test]
    async fn a_watch_lasts_while_its_schedule_is_unchanged_and_present() {
        let (_dir, path) = db();
        let store = Store::open(&path).unwrap();
        let (t1, t2, t3) = (
            at("2026-06-01T10:00:00Z"),
            at("2026-06-01T11:00:00Z"),
            at("2026-06-01T12:00:00Z"),
        );
        let daily = "0 9 * * * (UTC)";
        assert_eq!(store.watch_schedule("a", 0, daily, t1).await, Ok(t1));
        assert_eq!(store.watch_schedule("b", 0, daily, t1).await, Ok(t1));
        // Unchanged: since stays, across a reopen too.
        store.close().unwrap();
        let store = Store::open(&path).unwrap();
        assert_eq!(store.watch_schedule("a", 0, daily, t2).await, Ok(t1));
        // Changed expression or zone: starts anew.
        let paris = "0 9 * * * (Europe/Paris)";
        assert_eq!(store.watch_schedule("a", 0, paris, t2).await, Ok(t2));
        // `b` is gone, then comes back: starts anew.
        let keep = vec![("a".to_string(), 0)];
        assert_eq!(store.unwatch_schedules_except(keep).await, Ok(1));
        assert_eq!(store.watch_schedule("b", 0, daily, t3).await, Ok(t3));
        assert_eq!(store.watch_schedule("a", 0, paris, t3).await, Ok(t2));
        store.close().unwrap();
    }
}
