//! Runs and their events, the write side: claiming a run (queued or
//! running), starting a queued one, appending events and recording the final
//! state. The typed [`Store`] methods here send plain functions over a
//! `Connection` to the writer thread; reads are in `run_reads`.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::run_reads::run_by_id;
use super::{Store, StoreError, now_text, sql, time_text};
use crate::types::{RunEvent, RunState, ScheduleId, Usage, timestamp};

/// The scheduled fire a run is for: `(agent, schedule_id, scheduled_for)`
/// has at most one run in the store, across restarts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    /// What the schedule is (never its place in the agent's list).
    pub schedule_id: ScheduleId,
    /// The fire's instant, stored with millisecond precision.
    pub scheduled_for: DateTime<Utc>,
}

/// A run about to be queued or started, claimed before its first model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRun {
    pub id: String,
    pub agent: String,
    /// What started it: `cli`, `schedule`, `api`, `webhook`, `retry`, `after`,
    /// `watch`.
    pub trigger: String,
    pub input: String,
    /// `<provider>/<model>` as resolved for this run.
    pub model: String,
    pub definition_hash: String,
    /// The process running it (`daemon::owner`: `pid:1234 boot 3f2a8c1e
    /// start 8754321`, or plain `pid:1234`); empty means none.
    pub owner: String,
    /// The scheduled fire it is for; `None` for manual and webhook runs,
    /// which never use up a fire.
    pub fire: Option<Fire>,
    /// `Running` (started now) or `Queued` (waiting: [`Store::start_run`]
    /// starts it). [`Store::record_unrun`] ignores it.
    pub state: RunState,
    /// A queued run's template variables (JSON), kept while it waits so a
    /// daemon taking it over after a crash can render its templates
    /// ([`Store::queued_template_context`]); ignored for other states.
    pub template_context: Option<String>,
    /// The run that started this one (a sub-agent call, a pipeline step);
    /// `None` for a run started by a trigger.
    pub parent: Option<RunParent>,
}

/// The run a child run belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunParent {
    pub run_id: String,
    /// The child's depth: its parent's depth + 1 (a run nobody started is
    /// at depth 0).
    pub depth: u32,
}

/// A stored run. Times are shown as RFC 3339 UTC with milliseconds
/// (`types::timestamp`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub agent: String,
    pub state: RunState,
    pub trigger: String,
    pub input: String,
    pub model: String,
    pub definition_hash: String,
    pub owner: Option<String>,
    #[serde(serialize_with = "timestamp::millis")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "timestamp::millis_opt")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "timestamp::millis_opt")]
    pub finished_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
    pub output: Option<String>,
    pub usage: Usage,
    /// US dollars, from `prices`; `None`: unknown (no price for the model,
    /// or token counts the provider did not report).
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// The final answer as JSON, for agents with an `output_schema`.
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    /// The schedule whose fire this run is for (scheduled runs only; runs
    /// stored before schedules had identities have none).
    #[serde(default)]
    pub schedule_id: Option<ScheduleId>,
    /// That fire's instant (scheduled runs only).
    #[serde(default, serialize_with = "timestamp::millis_opt")]
    pub scheduled_for: Option<DateTime<Utc>>,
    /// The run that started this one (a sub-agent call, a pipeline step).
    #[serde(default)]
    pub parent_run_id: Option<String>,
    /// 0 for a run started by a trigger, its parent's depth + 1 otherwise.
    #[serde(default)]
    pub depth: u32,
}

/// How a run ended, as [`Store::finish_run_as`] records it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    pub state: RunState,
    pub error: Option<String>,
    pub output: Option<String>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub result: Option<serde_json::Value>,
}

impl RunEnd {
    /// A run that ended in `state` with no output, usage or cost.
    pub fn new(state: RunState, error: Option<String>) -> RunEnd {
        RunEnd {
            state,
            error,
            output: None,
            usage: Usage::default(),
            cost_usd: None,
            result: None,
        }
    }
}

/// Which runs [`Store::list_runs`] returns, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub agent: Option<String>,
    pub state: Option<RunState>,
    /// Only the children of this run (by exact id).
    pub parent: Option<String>,
    /// At most this many; 0 means no limit.
    pub limit: usize,
}

impl Store {
    /// Records `run` in `run.state`: `Running` (created and started now) or
    /// `Queued` (created now, not started), committed with
    /// `synchronous=FULL` before this returns the run as stored. An id in
    /// use is a `Conflict`; a fire that has a run already is `FireTaken`.
    pub async fn claim_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        if !matches!(run.state, RunState::Queued | RunState::Running) {
            return Err(StoreError::Invalid(format!(
                "run {}: a run is claimed as `queued` or `running`, not `{}`; \
                 record a run that never ran with record_unrun",
                run.id, run.state
            )));
        }
        self.call_durable(move |conn| claim(conn, &run)).await
    }

    /// The template variables a run claimed `queued` was accepted with
    /// (`NewRun::template_context`), while it is still queued.
    pub async fn queued_template_context(&self, id: &str) -> Result<Option<String>, StoreError> {
        let id = id.to_owned();
        self.read(move |conn| {
            conn.prepare_cached(
                "SELECT template_context FROM runs WHERE id = ?1 AND state = 'queued'",
            )
            .and_then(|mut stmt| {
                stmt.query_row([&id], |row| row.get::<_, Option<String>>(0))
                    .optional()
            })
            .map(Option::flatten)
            .map_err(sql("reading a queued run's template variables"))
        })
        .await
    }

    /// Starts a queued run: `queued` becomes `running`, started now,
    /// committed with `synchronous=FULL`. False (and no change) when the run
    /// is no longer queued, e.g. it was cancelled while waiting.
    pub async fn start_run(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        self.call_durable(move |conn| start(conn, &id)).await
    }

    /// Appends `events` to the run in one transaction (`synchronous=NORMAL`),
    /// numbering them after the run's last stored event (seqs start at 1).
    /// The tokens and cost of their `usage` events are added to a running
    /// run's row in the same transaction, so what a run in progress has
    /// spent is in the store (daily budgets, `aurad runs`, and a run cut
    /// short by a crash). Returns the run's last seq after the call (0 when
    /// it has no events).
    pub async fn append_events(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
    ) -> Result<i64, StoreError> {
        let run_id = run_id.to_owned();
        if events.is_empty() {
            return self
                .read(move |conn| existing_last_seq(conn, &run_id))
                .await;
        }
        let rows = encode_events(&run_id, &events)?;
        let spent = Spent::of(&events);
        self.call(move |conn| append(conn, &run_id, &rows, spent))
            .await
    }

    /// Records the run's final state, committed with `synchronous=FULL`.
    /// Works on a queued run too (cancelled while waiting).
    pub async fn finish_run(
        &self,
        run_id: &str,
        state: RunState,
        error: Option<String>,
        output: Option<String>,
        usage: Usage,
    ) -> Result<(), StoreError> {
        self.finish_run_with_events(run_id, Vec::new(), state, error, output, usage)
            .await
            .map(|_| ())
    }

    /// Appends the run's last events and records its final state in one
    /// transaction committed with `synchronous=FULL`, so the stored events
    /// (ending with `finished`) and the row's state never disagree. Returns
    /// the run's last seq after the call (0 when it has no events).
    pub async fn finish_run_with_events(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
        state: RunState,
        error: Option<String>,
        output: Option<String>,
        usage: Usage,
    ) -> Result<i64, StoreError> {
        let end = RunEnd {
            output,
            usage,
            ..RunEnd::new(state, error)
        };
        self.finish_run_as(run_id, events, end).await
    }

    /// [`Store::finish_run_with_events`] with the cost and the structured
    /// result too.
    pub async fn finish_run_as(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
        end: RunEnd,
    ) -> Result<i64, StoreError> {
        if !end.state.is_final() {
            return Err(StoreError::Invalid(format!(
                "run {run_id}: cannot finish a run as `{}`, which is not a final state",
                end.state
            )));
        }
        let rows = encode_events(run_id, &events)?;
        let run_id = run_id.to_owned();
        self.call_durable(move |conn| finish(conn, &run_id, &rows, end))
            .await
    }
}

/// Serialises events on the caller's side, so the writer thread only writes.
pub(super) fn encode_events(
    run_id: &str,
    events: &[RunEvent],
) -> Result<Vec<(&'static str, String)>, StoreError> {
    events
        .iter()
        .map(|event| {
            serde_json::to_string(event)
                .map(|data| (event.kind(), data))
                .map_err(|e| {
                    StoreError::Invalid(format!(
                        "run {run_id}: cannot encode a `{}` event: {e}",
                        event.kind()
                    ))
                })
        })
        .collect()
}

fn tokens_to_sql(tokens: Option<u64>) -> Option<i64> {
    tokens.map(|t| i64::try_from(t).unwrap_or(i64::MAX))
}

/// The times and outcome of a row [`insert_run`] writes.
pub(super) struct RowStart<'a> {
    pub state: RunState,
    pub created_at: &'a str,
    pub started_at: Option<&'a str>,
    pub finished_at: Option<&'a str>,
    pub error: Option<&'a str>,
}

/// Inserts the `runs` row of `run`. An id in use is a `Conflict`; a fire
/// that has a run already is `FireTaken`.
pub(super) fn insert_run(
    conn: &Connection,
    run: &NewRun,
    row: &RowStart<'_>,
) -> Result<(), StoreError> {
    let owner = Some(run.owner.as_str()).filter(|o| !o.is_empty());
    let (schedule_id, scheduled_for) = run
        .fire
        .as_ref()
        .map(|f| (f.schedule_id.as_str(), time_text(f.scheduled_for)))
        .unzip();
    let result = conn
        .prepare_cached(
            r#"INSERT INTO runs (id, agent, state, "trigger", input, model, definition_hash,
                                 owner, created_at, started_at, finished_at, error,
                                 schedule_id, scheduled_for, template_context,
                                 parent_run_id, depth)
               VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                       ?16, ?17)"#,
        )
        .and_then(|mut insert| {
            insert.execute(params![
                run.id,
                run.agent,
                row.state.as_str(),
                run.trigger,
                run.input,
                run.model,
                run.definition_hash,
                owner,
                row.created_at,
                row.started_at,
                row.finished_at,
                row.error,
                schedule_id,
                scheduled_for,
                run.template_context
                    .as_deref()
                    .filter(|_| row.state == RunState::Queued),
                run.parent.as_ref().map(|p| p.run_id.as_str()),
                run.parent.as_ref().map_or(0, |p| p.depth),
            ])
        });
    let Err(e) = result else {
        return Ok(());
    };
    match (e.sqlite_extended_error_code(), &run.fire, scheduled_for) {
        (Some(rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY), _, _) => Err(StoreError::Conflict(
            format!("run {} exists already; every run needs a new id", run.id),
        )),
        (Some(rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE), Some(fire), Some(scheduled_for)) => {
            Err(StoreError::FireTaken {
                agent: run.agent.clone(),
                schedule_id: fire.schedule_id.clone(),
                scheduled_for,
            })
        }
        _ => Err(StoreError::sqlite(
            &format!("run {}: cannot record it", run.id),
            e,
        )),
    }
}

pub(super) fn claim(conn: &Connection, run: &NewRun) -> Result<RunRecord, StoreError> {
    let now = now_text();
    let row = RowStart {
        state: run.state,
        created_at: &now,
        started_at: (run.state == RunState::Running).then_some(now.as_str()),
        finished_at: None,
        error: None,
    };
    insert_run(conn, run, &row)?;
    run_by_id(conn, &run.id)?
        .ok_or_else(|| StoreError::Internal(format!("run {} vanished while being claimed", run.id)))
}

fn start(conn: &mut Connection, id: &str) -> Result<bool, StoreError> {
    let context = "starting a queued run";
    let changed = conn
        .execute(
            "UPDATE runs SET state = ?2, started_at = ?3, template_context = NULL
             WHERE id = ?1 AND state = ?4",
            params![
                id,
                RunState::Running.as_str(),
                now_text(),
                RunState::Queued.as_str()
            ],
        )
        .map_err(sql(context))?;
    if changed == 0 && !run_exists(conn, id).map_err(sql(context))? {
        return Err(StoreError::NotFound(format!(
            "run {id} does not exist; claim it as queued before starting it"
        )));
    }
    Ok(changed > 0)
}

fn run_exists(conn: &Connection, id: &str) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1)")?
        .query_row([id], |row| row.get(0))
}

/// The run's last event seq (0 when none), or `None` when there is no run.
fn last_seq(conn: &Connection, run_id: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1),
                (SELECT MAX(seq) FROM events WHERE run_id = ?1)",
    )?
    .query_row([run_id], |row| {
        let exists: bool = row.get(0)?;
        Ok(exists.then_some(row.get::<_, Option<i64>>(1)?.unwrap_or(0)))
    })
}

/// The run's last event seq (0 when none); `NotFound` when there is no run.
fn existing_last_seq(conn: &mut Connection, run_id: &str) -> Result<i64, StoreError> {
    last_seq(conn, run_id)
        .map_err(sql("reading the last event seq"))?
        .ok_or_else(|| no_run_for_events(run_id))
}

fn no_run_for_events(run_id: &str) -> StoreError {
    StoreError::NotFound(format!(
        "run {run_id} does not exist; claim a run before storing its events"
    ))
}

/// What the `usage` events of a batch spent, summed.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Spent {
    usage: Usage,
    /// `None` when no event of the batch knows its cost.
    cost_usd: Option<f64>,
}

impl Spent {
    /// `None` when the batch has no `usage` event.
    fn of(events: &[RunEvent]) -> Option<Spent> {
        let mut spent: Option<Spent> = None;
        for event in events {
            if let RunEvent::Usage {
                usage, cost_usd, ..
            } = event
            {
                let sum = spent.get_or_insert(Spent {
                    usage: Usage::default(),
                    cost_usd: None,
                });
                sum.usage.add(usage);
                if let Some(cost) = cost_usd.filter(|c| c.is_finite()) {
                    sum.cost_usd = Some(sum.cost_usd.unwrap_or(0.0) + cost);
                }
            }
        }
        spent
    }
}

fn append(
    conn: &mut Connection,
    run_id: &str,
    rows: &[(&'static str, String)],
    spent: Option<Spent>,
) -> Result<i64, StoreError> {
    let context = |what: &str| format!("run {run_id}: cannot store events ({what})");
    let tx = conn
        .savepoint()
        .map_err(|e| StoreError::sqlite(&context("begin"), e))?;
    let last = insert_events(&tx, run_id, rows)?;
    if let Some(spent) = spent {
        add_spent(&tx, run_id, spent)
            .map_err(|e| StoreError::sqlite(&context("add its usage to the run"), e))?;
    }
    tx.commit()
        .map_err(|e| StoreError::sqlite(&context("commit"), e))?;
    Ok(last)
}

/// Adds `spent` to the totals of a running run. A run in any other state is
/// left alone: its final totals are the engine's own.
fn add_spent(conn: &Connection, run_id: &str, spent: Spent) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE runs SET input_tokens = COALESCE(input_tokens + ?2, input_tokens, ?2),
                         output_tokens = COALESCE(output_tokens + ?3, output_tokens, ?3),
                         cached_input_tokens =
                             COALESCE(cached_input_tokens + ?4, cached_input_tokens, ?4),
                         cost_usd = COALESCE(cost_usd + ?5, cost_usd, ?5)
         WHERE id = ?1 AND state = 'running'",
    )?
    .execute(params![
        run_id,
        tokens_to_sql(spent.usage.input_tokens),
        tokens_to_sql(spent.usage.output_tokens),
        tokens_to_sql(spent.usage.cached_input_tokens),
        spent.cost_usd
    ])
    .map(|_| ())
}

/// Inserts `rows` after the run's last stored event, inside a transaction
/// (the caller's); returns the last seq after them.
pub(super) fn insert_events(
    tx: &Connection,
    run_id: &str,
    rows: &[(&'static str, String)],
) -> Result<i64, StoreError> {
    let context = |what: &str| format!("run {run_id}: cannot store events ({what})");
    let mut seq = last_seq(tx, run_id)
        .map_err(|e| StoreError::sqlite(&context("read the last seq"), e))?
        .ok_or_else(|| no_run_for_events(run_id))?;
    let at = now_text();
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO events (run_id, seq, at, kind, data) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(|e| StoreError::sqlite(&context("prepare"), e))?;
    for (kind, data) in rows {
        seq += 1;
        insert
            .execute(params![run_id, seq, at, kind, data])
            .map_err(|e| StoreError::sqlite(&context("insert"), e))?;
    }
    Ok(seq)
}

fn finish(
    conn: &mut Connection,
    run_id: &str,
    rows: &[(&'static str, String)],
    end: RunEnd,
) -> Result<i64, StoreError> {
    let result = end.result.as_ref().map(serde_json::Value::to_string);
    let context = format!("run {run_id}: cannot record its final state");
    let tx = conn
        .savepoint()
        .map_err(|e| StoreError::sqlite(&context, e))?;
    let changed = tx
        .prepare_cached(
            "UPDATE runs SET state = ?2, finished_at = ?3, error = ?4, output = ?5,
                             input_tokens = COALESCE(?6, input_tokens),
                             output_tokens = COALESCE(?7, output_tokens),
                             cached_input_tokens = COALESCE(?8, cached_input_tokens),
                             cost_usd = COALESCE(?9, cost_usd), result = ?10,
                             template_context = NULL
             WHERE id = ?1",
        )
        .and_then(|mut update| {
            update.execute(params![
                run_id,
                end.state.as_str(),
                now_text(),
                end.error,
                end.output,
                tokens_to_sql(end.usage.input_tokens),
                tokens_to_sql(end.usage.output_tokens),
                tokens_to_sql(end.usage.cached_input_tokens),
                end.cost_usd.filter(|c| c.is_finite()),
                result
            ])
        })
        .map_err(|e| StoreError::sqlite(&context, e))?;
    if changed == 0 {
        return Err(StoreError::NotFound(format!(
            "run {run_id} does not exist; claim a run before finishing it"
        )));
    }
    let last = insert_events(&tx, run_id, rows)?;
    tx.commit().map_err(|e| StoreError::sqlite(&context, e))?;
    Ok(last)
}
