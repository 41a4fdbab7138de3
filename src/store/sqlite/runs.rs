//! Runs and their events, the write side: claiming a run (queued or
//! running), starting a queued one, appending events and recording the final
//! state. The typed [`Sqlite`] methods here send plain functions over a
//! `Connection` to the writer thread; reads are in `run_reads`.

use rusqlite::{Connection, OptionalExtension, params};

use super::run_reads::run_by_id;
use super::{Sqlite, StoreError, now_text, sql, time_text};
use crate::store::runs::{Spent, encode_events};
use crate::store::sessions::EncodedTurn;
use crate::store::{NewRun, RunEnd, RunRecord};
use crate::types::{RunEvent, RunState};

impl Sqlite {
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

    pub async fn start_run(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        let (id, owner) = (id.to_owned(), owner.to_owned());
        self.call_durable(move |conn| start(conn, &id, &owner))
            .await
    }

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

    pub async fn finish_run_as(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
        end: RunEnd,
    ) -> Result<i64, StoreError> {
        self.finish_turn(run_id, events, end, None).await
    }

    /// [`Sqlite::finish_run_as`], appending `turn` to its session in the
    /// same transaction.
    pub async fn finish_turn(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
        end: RunEnd,
        turn: Option<EncodedTurn>,
    ) -> Result<i64, StoreError> {
        if !end.state.is_final() {
            return Err(StoreError::Invalid(format!(
                "run {run_id}: cannot finish a run as `{}`, which is not a final state",
                end.state
            )));
        }
        let rows = encode_events(run_id, &events)?;
        let run_id = run_id.to_owned();
        self.call_durable(move |conn| finish(conn, &run_id, &rows, end, turn.as_ref()))
            .await
    }
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
                                 parent_run_id, depth, session_id)
               VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                       ?16, ?17, ?18)"#,
        )
        .and_then(|mut insert| {
            insert.execute(params![
                run.id,
                run.agent,
                row.state.as_str(),
                run.trigger.as_str(),
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
                run.session_id,
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

fn start(conn: &mut Connection, id: &str, owner: &str) -> Result<bool, StoreError> {
    let context = "starting a queued run";
    let changed = conn
        .execute(
            "UPDATE runs SET state = ?2, started_at = ?3, template_context = NULL
             WHERE id = ?1 AND state = ?4 AND owner IS ?5",
            params![
                id,
                RunState::Running.as_str(),
                now_text(),
                RunState::Queued.as_str(),
                Some(owner).filter(|o| !o.is_empty())
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
    turn: Option<&EncodedTurn>,
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
    if let Some(turn) = turn {
        super::sessions::append(&tx, turn, &now_text())?;
    }
    tx.commit().map_err(|e| StoreError::sqlite(&context, e))?;
    Ok(last)
}
