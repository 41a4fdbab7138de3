//! Runs and their events on PostgreSQL, the write side: claiming a run
//! (queued or running), starting a queued one, appending events and
//! recording the final state; the same contract as the SQLite `store::runs`.
//!
//! Several nodes write at once, so each operation is one transaction and
//! says what guards its race: the primary key and the `runs_fire` unique
//! index decide between two claims of one id or one fire; a run's row lock
//! (`FOR NO KEY UPDATE`, taken by [`insert_events`]) orders the event
//! batches of one run, so seqs stay unique and each batch contiguous, while
//! batches of different runs never wait for each other.
//!
//! Shared with the rest of the backend: [`insert_run`] / [`insert_run_as`]
//! (a `runs` row inside a caller's transaction) and [`insert_events`].
//! Depends on `run_rows`, the store's types and the interface's pure
//! `encode_events` and `Spent`.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::run_rows::{RUN_COLUMNS, millis, run_from_row};
use super::{Postgres, is_unique_violation, pg};
use crate::store::runs::{Spent, encode_events};
use crate::store::sessions::EncodedTurn;
use crate::store::{NewRun, RunEnd, RunRecord, StoreError};
use crate::types::{RunEvent, RunState, timestamp};

/// The primary key of `runs` as PostgreSQL names it.
const RUNS_PKEY: &str = "runs_pkey";
/// The unique index of scheduled fires (schema.rs).
const RUNS_FIRE: &str = "runs_fire";

/// The times and outcome of a row [`insert_run_as`] writes.
#[derive(Debug, Clone)]
pub(crate) struct RowStart {
    pub state: RunState,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
}

impl Postgres {
    /// [`crate::store::Store::claim_run`]: records `run` as `running`
    /// (started now) or `queued`. An id in use is a `Conflict`; a fire that
    /// has a run already (on any node) is `FireTaken`.
    pub(crate) async fn claim_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        if !matches!(run.state, RunState::Queued | RunState::Running) {
            return Err(StoreError::Invalid(format!(
                "run {}: a run is claimed as `queued` or `running`, not `{}`; \
                 record a run that never ran with record_unrun",
                run.id, run.state
            )));
        }
        self.with_client(move |mut client| async move {
            let tx = client
                .transaction()
                .await
                .map_err(pg("beginning a run's claim"))?;
            let record = insert_run(&tx, &run).await?;
            tx.commit().await.map_err(pg("committing a run's claim"))?;
            Ok(record)
        })
        .await
    }

    /// [`crate::store::Store::queued_template_context`].
    pub(crate) async fn queued_template_context(
        &self,
        id: &str,
    ) -> Result<Option<String>, StoreError> {
        let id = id.to_owned();
        self.with_client(move |client| async move {
            let context = "reading a queued run's template variables";
            let stmt = client
                .prepare_cached(
                    "SELECT template_context FROM runs WHERE id = $1 AND state = 'queued'",
                )
                .await
                .map_err(pg(context))?;
            let row = client.query_opt(&stmt, &[&id]).await.map_err(pg(context))?;
            row.map(|r| r.try_get::<_, Option<String>>(0))
                .transpose()
                .map(Option::flatten)
                .map_err(pg(context))
        })
        .await
    }

    /// [`crate::store::Store::start_run`]: `queued` becomes `running`,
    /// started now. False when it is no longer queued. Two nodes starting
    /// one run: the row lock of the `UPDATE` makes the second re-check
    /// `state = 'queued'` after the first commits, so only one gets true.
    pub(crate) async fn start_run(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        let id = id.to_owned();
        let owner = Some(owner.to_owned()).filter(|o| !o.is_empty());
        self.with_client(move |client| async move {
            let context = "starting a queued run";
            let stmt = client
                .prepare_cached(
                    "UPDATE runs SET state = 'running', started_at = $2, template_context = NULL
                     WHERE id = $1 AND state = 'queued' AND owner IS NOT DISTINCT FROM $3",
                )
                .await
                .map_err(pg(context))?;
            let changed = client
                .execute(&stmt, &[&id, &millis(Utc::now()), &owner])
                .await
                .map_err(pg(context))?;
            if changed == 0 && !run_exists(&client, &id).await? {
                return Err(StoreError::NotFound(format!(
                    "run {id} does not exist; claim it as queued before starting it"
                )));
            }
            Ok(changed > 0)
        })
        .await
    }

    /// [`crate::store::Store::append_events`]: appends `events` in one
    /// transaction after the run's last event, adding what their `usage`
    /// events spent to a running run's row. Returns the run's last seq.
    pub(crate) async fn append_events(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
    ) -> Result<i64, StoreError> {
        let run_id = run_id.to_owned();
        if events.is_empty() {
            return self
                .with_client(move |client| async move {
                    last_seq(&client, &run_id)
                        .await?
                        .ok_or_else(|| no_run_for_events(&run_id))
                })
                .await;
        }
        let rows = encode_events(&run_id, &events)?;
        let spent = Spent::of(&events);
        self.with_client(move |mut client| async move {
            let context = "storing a run's events";
            let tx = client.transaction().await.map_err(pg(context))?;
            let last = insert_events(&tx, &run_id, &rows).await?;
            if let Some(spent) = spent {
                add_spent(&tx, &run_id, spent).await?;
            }
            tx.commit().await.map_err(pg(context))?;
            Ok(last)
        })
        .await
    }

    /// [`crate::store::Store::finish_run_as`]: the final state and the last
    /// events in one transaction, so they never disagree.
    pub(crate) async fn finish_run_as(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
        end: RunEnd,
    ) -> Result<i64, StoreError> {
        self.finish_turn(run_id, events, end, None).await
    }

    /// [`Postgres::finish_run_as`], appending `turn` to its session in the
    /// same transaction.
    pub(crate) async fn finish_turn(
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
        self.with_client(move |mut client| async move {
            let context = "recording a run's final state";
            let tx = client.transaction().await.map_err(pg(context))?;
            let result = end.result.as_ref().map(serde_json::Value::to_string);
            let stmt = tx
                .prepare_cached(
                    "UPDATE runs SET state = $2, finished_at = $3, error = $4, output = $5,
                                     input_tokens = COALESCE($6, input_tokens),
                                     output_tokens = COALESCE($7, output_tokens),
                                     cached_input_tokens = COALESCE($8, cached_input_tokens),
                                     cost_usd = COALESCE($9, cost_usd), result = $10,
                                     template_context = NULL
                     WHERE id = $1",
                )
                .await
                .map_err(pg(context))?;
            let params: [&(dyn ToSql + Sync); 10] = [
                &run_id,
                &end.state.as_str(),
                &millis(Utc::now()),
                &end.error,
                &end.output,
                &tokens_to_sql(end.usage.input_tokens),
                &tokens_to_sql(end.usage.output_tokens),
                &tokens_to_sql(end.usage.cached_input_tokens),
                &end.cost_usd.filter(|c| c.is_finite()),
                &result,
            ];
            let changed = tx.execute(&stmt, &params).await.map_err(pg(context))?;
            if changed == 0 {
                return Err(StoreError::NotFound(format!(
                    "run {run_id} does not exist; claim a run before finishing it"
                )));
            }
            let last = insert_events(&tx, &run_id, &rows).await?;
            if let Some(turn) = &turn {
                super::sessions::append(&tx, turn, millis(Utc::now())).await?;
            }
            tx.commit().await.map_err(pg(context))?;
            Ok(last)
        })
        .await
    }
}

/// Inserts the `runs` row of `run` as a claim (`run.state`, created now,
/// started now when `Running`) inside the caller's transaction and returns
/// it as stored. An id in use is a `Conflict`; a fire that has a run
/// already is `FireTaken`. Either error aborts the transaction: roll it
/// back.
pub(crate) async fn insert_run(
    tx: &Transaction<'_>,
    run: &NewRun,
) -> Result<RunRecord, StoreError> {
    let now = millis(Utc::now());
    let row = RowStart {
        state: run.state,
        created_at: now,
        started_at: (run.state == RunState::Running).then_some(now),
        finished_at: None,
        error: None,
    };
    let record = insert_run_as(tx, run, &row).await?;
    if run.state == RunState::Queued && run.parent.is_none() {
        // Delivered at commit: idle nodes wake and may take it.
        super::queue::notify_queued(tx).await?;
    }
    Ok(record)
}

/// Inserts the `runs` row of `run` with `row`'s state and times. Two nodes
/// inserting one fire: the second insert waits on the first's entry in the
/// unique index `runs_fire` and fails once it commits (`FireTaken`); one id
/// twice fails on the primary key (`Conflict`).
pub(crate) async fn insert_run_as(
    tx: &Transaction<'_>,
    run: &NewRun,
    row: &RowStart,
) -> Result<RunRecord, StoreError> {
    let context = "recording a run";
    let owner = Some(run.owner.as_str()).filter(|o| !o.is_empty());
    let schedule_id = run.fire.as_ref().map(|f| f.schedule_id.as_str());
    let scheduled_for = run.fire.as_ref().map(|f| millis(f.scheduled_for));
    let template_context = run
        .template_context
        .as_deref()
        .filter(|_| row.state == RunState::Queued);
    let parent_run_id = run.parent.as_ref().map(|p| p.run_id.as_str());
    let depth = run.parent.as_ref().map_or(0, |p| p.depth);
    let depth = i32::try_from(depth).map_err(|_| {
        StoreError::Invalid(format!(
            "run {}: depth {depth} is too deep to store",
            run.id
        ))
    })?;
    let stmt = tx
        .prepare_cached(&format!(
            r#"INSERT INTO runs (id, agent, state, "trigger", input, model, definition_hash,
                                 owner, created_at, started_at, finished_at, error,
                                 schedule_id, scheduled_for, template_context,
                                 parent_run_id, depth, session_id)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,
                       $16, $17, $18)
               RETURNING {RUN_COLUMNS}"#
        ))
        .await
        .map_err(pg(context))?;
    let params: [&(dyn ToSql + Sync); 18] = [
        &run.id,
        &run.agent,
        &row.state.as_str(),
        &run.trigger.as_str(),
        &run.input,
        &run.model,
        &run.definition_hash,
        &owner,
        &millis(row.created_at),
        &row.started_at.map(millis),
        &row.finished_at.map(millis),
        &row.error,
        &schedule_id,
        &scheduled_for,
        &template_context,
        &parent_run_id,
        &depth,
        &run.session_id,
    ];
    match tx.query_one(&stmt, &params).await {
        Ok(stored) => run_from_row(&stored),
        Err(e) if is_unique_violation(&e) => {
            let constraint = e.as_db_error().and_then(|d| d.constraint());
            match (constraint, &run.fire, scheduled_for) {
                (Some(RUNS_FIRE), Some(fire), Some(at)) => Err(StoreError::FireTaken {
                    agent: run.agent.clone(),
                    schedule_id: fire.schedule_id.clone(),
                    scheduled_for: timestamp::millis_text(at),
                }),
                (Some(RUNS_PKEY), _, _) => Err(StoreError::Conflict(format!(
                    "run {} exists already; every run needs a new id",
                    run.id
                ))),
                _ => Err(pg(context)(e)),
            }
        }
        Err(e) => Err(pg(context)(e)),
    }
}

/// Appends `rows` after the run's last event inside the caller's
/// transaction and returns the last seq after them (the last seq as it is
/// when `rows` is empty). Takes the run's row lock first (`FOR NO KEY
/// UPDATE`, held until the transaction ends): two nodes appending to one
/// run are serialised there, and the second reads the first's events in
/// its next statement, so seqs are unique and each batch contiguous. The
/// lock does not block inserts referencing the run (they take `KEY SHARE`).
/// `NotFound` when there is no such run.
pub(crate) async fn insert_events(
    tx: &Transaction<'_>,
    run_id: &str,
    rows: &[(&'static str, String)],
) -> Result<i64, StoreError> {
    let context = "storing a run's events";
    let lock = tx
        .prepare_cached("SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE")
        .await
        .map_err(pg(context))?;
    if tx
        .query_opt(&lock, &[&run_id])
        .await
        .map_err(pg(context))?
        .is_none()
    {
        return Err(no_run_for_events(run_id));
    }
    // A statement of its own after the lock: its snapshot sees every event
    // committed before the lock was granted. The nodes following the run
    // from elsewhere are told at the commit (`aurad_events`, the run id).
    let insert = tx
        .prepare_cached(&format!(
            "WITH base AS (SELECT COALESCE(MAX(seq), 0) AS last FROM events WHERE run_id = $1),
                  added AS (
                      INSERT INTO events (run_id, seq, at, kind, data)
                      SELECT $1, base.last + e.n, $2, e.kind, e.data
                      FROM base, unnest($3::text[], $4::text[]) WITH ORDINALITY AS e(kind, data, n)
                      RETURNING seq)
             SELECT COALESCE((SELECT MAX(seq) FROM added), (SELECT last FROM base))
             FROM (SELECT pg_notify('{}', $1)) AS announced",
            super::queue::EVENTS
        ))
        .await
        .map_err(pg(context))?;
    let kinds: Vec<&str> = rows.iter().map(|(kind, _)| *kind).collect();
    let data: Vec<&str> = rows.iter().map(|(_, data)| data.as_str()).collect();
    let row = tx
        .query_one(&insert, &[&run_id, &millis(Utc::now()), &kinds, &data])
        .await
        .map_err(pg(context))?;
    row.try_get(0).map_err(pg(context))
}

/// Whether run `id` exists.
pub(crate) async fn run_exists(
    client: &impl deadpool_postgres::GenericClient,
    id: &str,
) -> Result<bool, StoreError> {
    let context = "looking up a run";
    let stmt = client
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1)")
        .await
        .map_err(pg(context))?;
    client
        .query_one(&stmt, &[&id])
        .await
        .and_then(|row| row.try_get(0))
        .map_err(pg(context))
}

/// The run's last event seq (0 when none), or `None` when there is no run.
async fn last_seq(
    client: &impl deadpool_postgres::GenericClient,
    run_id: &str,
) -> Result<Option<i64>, StoreError> {
    let context = "reading the last event seq";
    let stmt = client
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1),
                    (SELECT MAX(seq) FROM events WHERE run_id = $1)",
        )
        .await
        .map_err(pg(context))?;
    let row = client
        .query_one(&stmt, &[&run_id])
        .await
        .map_err(pg(context))?;
    let exists: bool = row.try_get(0).map_err(pg(context))?;
    let last: Option<i64> = row.try_get(1).map_err(pg(context))?;
    Ok(exists.then_some(last.unwrap_or(0)))
}

fn no_run_for_events(run_id: &str) -> StoreError {
    StoreError::NotFound(format!(
        "run {run_id} does not exist; claim a run before storing its events"
    ))
}

fn tokens_to_sql(tokens: Option<u64>) -> Option<i64> {
    tokens.map(|t| i64::try_from(t).unwrap_or(i64::MAX))
}

/// Adds `spent` to the totals of a running run (any other state is left
/// alone: its final totals are the engine's own). The caller holds the
/// run's row lock ([`insert_events`]), so two batches add up.
async fn add_spent(tx: &Transaction<'_>, run_id: &str, spent: Spent) -> Result<(), StoreError> {
    let context = "adding a run's usage to its row";
    let stmt = tx
        .prepare_cached(
            "UPDATE runs SET input_tokens = COALESCE(input_tokens + $2, input_tokens, $2),
                             output_tokens = COALESCE(output_tokens + $3, output_tokens, $3),
                             cached_input_tokens =
                                 COALESCE(cached_input_tokens + $4, cached_input_tokens, $4),
                             cost_usd = COALESCE(cost_usd + $5, cost_usd, $5)
             WHERE id = $1 AND state = 'running'",
        )
        .await
        .map_err(pg(context))?;
    let params: [&(dyn ToSql + Sync); 5] = [
        &run_id,
        &tokens_to_sql(spent.usage.input_tokens),
        &tokens_to_sql(spent.usage.output_tokens),
        &tokens_to_sql(spent.usage.cached_input_tokens),
        &spent.cost_usd,
    ];
    tx.execute(&stmt, &params).await.map_err(pg(context))?;
    Ok(())
}
