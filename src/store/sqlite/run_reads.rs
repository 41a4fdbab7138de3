//! Runs and their events, the read side: listing and looking up runs,
//! reading events (all, or after a seq for live streaming), and what the
//! scheduler asks of the past (last fire, last run, consecutive failures).
//! Every method here runs on the reader thread, so it never waits behind
//! writes.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{RunFilter, RunRecord, Sqlite, StoreError, sql};
use crate::store::MAX_MATCHES;
use crate::types::{RunEvent, RunState, ScheduleId, Trigger, Usage};

/// The shortest prefix [`Sqlite::get_run`] looks up.
const MIN_PREFIX: usize = 4;
/// Where [`Sqlite::consecutive_failures`] stops counting.
const MAX_FAILURES: u32 = 100;

impl Sqlite {
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let filter = filter.clone();
        self.read(move |conn| list(conn, &filter)).await
    }

    pub fn list_runs_blocking(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        let filter = filter.clone();
        self.read_blocking(move |conn| list(conn, &filter))
    }

    pub async fn get_run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let id = id.to_owned();
        self.read(move |conn| get(conn, &id)).await
    }

    pub fn get_run_blocking(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let id = id.to_owned();
        self.read_blocking(move |conn| get(conn, &id))
    }

    pub async fn run_events(&self, run_id: &str) -> Result<Vec<RunEvent>, StoreError> {
        let run_id = run_id.to_owned();
        self.read(move |conn| events(conn, &run_id)).await
    }

    pub fn run_events_blocking(&self, run_id: &str) -> Result<Vec<RunEvent>, StoreError> {
        let run_id = run_id.to_owned();
        self.read_blocking(move |conn| events(conn, &run_id))
    }

    pub async fn run_events_after(
        &self,
        run_id: &str,
        after_seq: i64,
    ) -> Result<Vec<(i64, RunEvent)>, StoreError> {
        let run_id = run_id.to_owned();
        self.read(move |conn| events_after(conn, &run_id, after_seq))
            .await
    }

    pub fn run_events_after_blocking(
        &self,
        run_id: &str,
        after_seq: i64,
    ) -> Result<Vec<(i64, RunEvent)>, StoreError> {
        let run_id = run_id.to_owned();
        self.read_blocking(move |conn| events_after(conn, &run_id, after_seq))
    }

    pub async fn last_fire(
        &self,
        agent: &str,
        schedule: &ScheduleId,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        let (agent, schedule) = (agent.to_owned(), schedule.clone());
        self.read(move |conn| last_fire(conn, &agent, &schedule))
            .await
    }

    pub async fn last_run(&self, agent: &str) -> Result<Option<RunRecord>, StoreError> {
        let agent = agent.to_owned();
        self.read(move |conn| last_run(conn, &agent)).await
    }

    pub async fn consecutive_failures(&self, agent: &str) -> Result<u32, StoreError> {
        let agent = agent.to_owned();
        self.read(move |conn| consecutive_failures(conn, &agent))
            .await
    }

    pub async fn cost_since(
        &self,
        agent: &str,
        since: DateTime<Utc>,
        except: &str,
    ) -> Result<f64, StoreError> {
        let (agent, except) = (agent.to_owned(), except.to_owned());
        let since = super::time_text(since);
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT COALESCE(SUM(cost_usd), 0.0) FROM runs
                 WHERE agent = ?1 AND created_at >= ?2 AND id != ?3",
            )
            .and_then(|mut stmt| stmt.query_row(params![agent, since, except], |row| row.get(0)))
            .map_err(sql("summing an agent's cost"))
        })
        .await
    }
}

pub(super) const RUN_COLUMNS: &str = r#"id, agent, state, "trigger", input, model, definition_hash, owner,
    created_at, started_at, finished_at, error, output, input_tokens, output_tokens,
    schedule_id, scheduled_for, cached_input_tokens, cost_usd, result, parent_run_id, depth,
    session_id"#;

/// A `runs` row as stored, before its values are checked.
pub(super) struct RawRun {
    record: RunRecord,
    state: String,
    trigger: String,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
    cached_input_tokens: Option<i64>,
    schedule_id: Option<String>,
    result: Option<String>,
    created_at: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    scheduled_for: Option<String>,
}

impl RawRun {
    pub(super) fn check(self) -> Result<RunRecord, StoreError> {
        let RawRun {
            mut record,
            state,
            trigger,
            input_tokens,
            output_tokens,
            cached_input_tokens,
            schedule_id,
            result,
            created_at,
            started_at,
            finished_at,
            scheduled_for,
        } = self;
        let corrupt = |message: String| StoreError::CorruptRun {
            run_id: record.id.clone(),
            message,
        };
        record.state =
            RunState::parse(&state).ok_or_else(|| corrupt(format!("unknown state `{state}`")))?;
        record.trigger = trigger.parse().map_err(corrupt)?;
        let tokens = |name: &str, value: Option<i64>| {
            value
                .map(|v| u64::try_from(v).map_err(|_| corrupt(format!("negative {name} {v}"))))
                .transpose()
        };
        record.usage = Usage {
            input_tokens: tokens("input_tokens", input_tokens)?,
            output_tokens: tokens("output_tokens", output_tokens)?,
            cached_input_tokens: tokens("cached_input_tokens", cached_input_tokens)?,
        };
        record.result = result
            .map(|text| {
                serde_json::from_str(&text).map_err(|e| corrupt(format!("result is not JSON: {e}")))
            })
            .transpose()?;
        let time = |name: &str, text: String| {
            DateTime::parse_from_rfc3339(&text)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| corrupt(format!("{name} `{text}` is not an RFC 3339 time: {e}")))
        };
        record.created_at = time("created_at", created_at)?;
        record.started_at = started_at.map(|t| time("started_at", t)).transpose()?;
        record.finished_at = finished_at.map(|t| time("finished_at", t)).transpose()?;
        record.scheduled_for = scheduled_for
            .map(|t| time("scheduled_for", t))
            .transpose()?;
        record.schedule_id = schedule_id
            .map(|id| ScheduleId::parse(&id).map_err(|e| corrupt(format!("schedule_id: {e}"))))
            .transpose()?;
        Ok(record)
    }
}

pub(super) fn raw_run(row: &Row<'_>) -> rusqlite::Result<RawRun> {
    Ok(RawRun {
        record: RunRecord {
            id: row.get(0)?,
            agent: row.get(1)?,
            state: RunState::Queued, // replaced by `check`
            trigger: Trigger::Cli,   // replaced by `check`
            input: row.get(4)?,
            model: row.get(5)?,
            definition_hash: row.get(6)?,
            owner: row.get(7)?,
            created_at: DateTime::<Utc>::MIN_UTC, // set by `check`
            started_at: None,                     // set by `check`
            finished_at: None,                    // set by `check`
            error: row.get(11)?,
            output: row.get(12)?,
            usage: Usage::default(),
            cost_usd: row.get(18)?,
            result: None,        // set by `check`
            schedule_id: None,   // set by `check`
            scheduled_for: None, // set by `check`
            parent_run_id: row.get(20)?,
            depth: row.get(21)?,
            session_id: row.get(22)?,
        },
        state: row.get(2)?,
        trigger: row.get(3)?,
        input_tokens: row.get(13)?,
        output_tokens: row.get(14)?,
        cached_input_tokens: row.get(17)?,
        schedule_id: row.get(15)?,
        result: row.get(19)?,
        created_at: row.get(8)?,
        started_at: row.get(9)?,
        finished_at: row.get(10)?,
        scheduled_for: row.get(16)?,
    })
}

fn list(conn: &Connection, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
    let page = crate::store::RunPage {
        filter: filter.clone(),
        ..Default::default()
    };
    super::page_reads::run_page(conn, &page)
}

/// The run with exactly this id.
pub(super) fn run_by_id(conn: &Connection, id: &str) -> Result<Option<RunRecord>, StoreError> {
    conn.prepare_cached(&format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1"))
        .and_then(|mut stmt| stmt.query_row([id], raw_run).optional())
        .map_err(sql("looking up a run"))?
        .map(RawRun::check)
        .transpose()
}

fn get(conn: &Connection, id: &str) -> Result<Option<RunRecord>, StoreError> {
    let context = "looking up a run";
    if let Some(run) = run_by_id(conn, id)? {
        return Ok(Some(run));
    }
    if id.chars().count() < MIN_PREFIX {
        return Err(StoreError::Invalid(format!(
            "no run has the id `{id}`; give the whole run id or at least {MIN_PREFIX} characters of it"
        )));
    }
    // Ids are compared bytewise, so `[id, id + U+10FFFF)` holds every id
    // starting with `id` and the primary key index finds them.
    let upper = format!("{id}\u{10FFFF}");
    let matches: Vec<String> = conn
        .prepare_cached("SELECT id FROM runs WHERE id >= ?1 AND id < ?2 ORDER BY id LIMIT ?3")
        .and_then(|mut stmt| {
            stmt.query_map(params![id, upper, MAX_MATCHES as i64 + 1], |row| row.get(0))?
                .collect()
        })
        .map_err(sql(context))?;
    let ended: Vec<String> = if crate::store::may_be_id_end(id) {
        conn.prepare_cached(
            "SELECT id FROM runs WHERE substr(id, -length(?1)) = ?1 ORDER BY id LIMIT ?2",
        )
        .and_then(|mut stmt| {
            stmt.query_map(params![id, MAX_MATCHES as i64 + 1], |row| row.get(0))?
                .collect()
        })
        .map_err(sql(context))?
    } else {
        Vec::new()
    };
    let matches = crate::store::merge_matches(matches, ended);
    match matches.as_slice() {
        [] => Ok(None),
        [only] => run_by_id(conn, only),
        _ => Err(StoreError::Ambiguous {
            prefix: id.to_owned(),
            matches,
        }),
    }
}

fn events(conn: &Connection, run_id: &str) -> Result<Vec<RunEvent>, StoreError> {
    Ok(events_after(conn, run_id, 0)?
        .into_iter()
        .map(|(_, event)| event)
        .collect())
}

fn events_after(
    conn: &Connection,
    run_id: &str,
    after_seq: i64,
) -> Result<Vec<(i64, RunEvent)>, StoreError> {
    let context = "reading run events";
    let rows: Vec<(i64, String)> = conn
        .prepare_cached("SELECT seq, data FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq")
        .and_then(|mut stmt| {
            stmt.query_map(params![run_id, after_seq], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })?
            .collect()
        })
        .map_err(sql(context))?;
    if rows.is_empty() {
        let pruned: Option<(Option<String>, Option<i64>)> = conn
            .prepare_cached("SELECT events_pruned_at, events_pruned FROM runs WHERE id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row([run_id], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
            })
            .map_err(sql(context))?;
        match pruned {
            None => {
                return Err(StoreError::NotFound(format!(
                    "no run {run_id}; list runs with `aurad runs`"
                )));
            }
            // Retention deleted them: say so rather than show none.
            Some((Some(at), Some(events))) if events > 0 => {
                let pruned_at = DateTime::parse_from_rfc3339(&at)
                    .map_err(|e| StoreError::CorruptRun {
                        run_id: run_id.to_owned(),
                        message: format!("events_pruned_at `{at}` is not an RFC 3339 time: {e}"),
                    })?
                    .to_utc();
                return Err(StoreError::EventsPruned {
                    run_id: run_id.to_owned(),
                    pruned_at,
                    events: u64::try_from(events).unwrap_or(0),
                });
            }
            Some(_) => {}
        }
    }
    rows.into_iter()
        .map(|(seq, data)| {
            serde_json::from_str(&data)
                .map(|event| (seq, event))
                .map_err(|e| StoreError::CorruptEvent {
                    run_id: run_id.to_owned(),
                    seq,
                    message: e.to_string(),
                })
        })
        .collect()
}

fn last_fire(
    conn: &Connection,
    agent: &str,
    schedule: &ScheduleId,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    // `runs_fire` orders by this text, which sorts as time.
    let found: Option<(String, String)> = conn
        .prepare_cached(
            "SELECT id, scheduled_for FROM runs
             WHERE agent = ?1 AND schedule_id = ?2 AND scheduled_for IS NOT NULL
             ORDER BY scheduled_for DESC LIMIT 1",
        )
        .and_then(|mut stmt| {
            stmt.query_row(params![agent, schedule.as_str()], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .optional()
        })
        .map_err(sql("reading the last fire of a schedule"))?;
    found
        .map(|(run_id, text)| {
            DateTime::parse_from_rfc3339(&text)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| StoreError::CorruptRun {
                    run_id,
                    message: format!("scheduled_for `{text}` is not an RFC 3339 time: {e}"),
                })
        })
        .transpose()
}

fn last_run(conn: &Connection, agent: &str) -> Result<Option<RunRecord>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE agent = ?1
         ORDER BY created_at DESC, id DESC LIMIT 1"
    ))
    .and_then(|mut stmt| stmt.query_row([agent], raw_run).optional())
    .map_err(sql("reading an agent's last run"))?
    .map(RawRun::check)
    .transpose()
}

fn consecutive_failures(conn: &Connection, agent: &str) -> Result<u32, StoreError> {
    let states: Vec<String> = conn
        .prepare_cached(
            "SELECT state FROM runs
             WHERE agent = ?1 AND state IN (?2, ?3, ?4)
             ORDER BY created_at DESC, id DESC LIMIT ?5",
        )
        .and_then(|mut stmt| {
            // `interrupted` (cut off by a crash) is neither: it is skipped.
            stmt.query_map(
                params![
                    agent,
                    RunState::Succeeded.as_str(),
                    RunState::Failed.as_str(),
                    RunState::TimedOut.as_str(),
                    MAX_FAILURES
                ],
                |row| row.get(0),
            )?
            .collect()
        })
        .map_err(sql("counting an agent's consecutive failures"))?;
    let failures = states
        .iter()
        .take_while(|s| s.as_str() != RunState::Succeeded.as_str())
        .count();
    Ok(u32::try_from(failures).unwrap_or(MAX_FAILURES))
}
