//! What the daemon records besides runs that run (scheduling): runs that never ran (`skipped`, `missed`...), runs left
//! behind by a process that stopped (`interrupted`, or queued again for
//! the daemon that takes over), and the webhook delivery ids seen in the
//! last day, each claimed in the transaction of its run. All writes, on the
//! writer thread.

use chrono::{DateTime, Duration, Utc};
use rusqlite::{Connection, params};

use super::run_reads::run_by_id;
use super::runs::{RowStart, claim, insert_events, insert_run};
use super::{NewRun, RunRecord, Sqlite, StoreError, now_text, sql, time_text};
use crate::store::Recovered;
use crate::store::fires::interrupt_reason;
use crate::store::runs::encode_events;
use crate::types::{RunEvent, RunState, Usage};

/// How long a webhook delivery id is remembered.
const DELIVERY_MEMORY: Duration = Duration::hours(24);

impl Sqlite {
    pub async fn record_unrun(
        &self,
        run: NewRun,
        state: RunState,
        reason: String,
    ) -> Result<bool, StoreError> {
        if !state.is_final() {
            return Err(StoreError::Invalid(format!(
                "run {}: a run that never ran is recorded in a final state, not `{state}`",
                run.id
            )));
        }
        let finished = RunEvent::Finished {
            state,
            reason: Some(reason.clone()),
            output: None,
            usage: Usage::default(),
            cost_usd: None,
            result: None,
        };
        let rows = encode_events(&run.id, &[finished])?;
        self.call_durable(move |conn| unrun(conn, &run, state, &reason, &rows))
            .await
    }

    pub async fn interrupt_stale_runs(
        &self,
        is_alive: impl Fn(&str) -> bool + Send + 'static,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.call_durable(move |conn| {
            interrupt_stale(conn, &is_alive, None).map(|recovered| recovered.interrupted)
        })
        .await
    }

    pub async fn recover_stale_runs(
        &self,
        is_alive: impl Fn(&str) -> bool + Send + 'static,
        new_owner: &str,
    ) -> Result<Recovered, StoreError> {
        let new_owner = new_owner.to_owned();
        self.call_durable(move |conn| interrupt_stale(conn, &is_alive, Some(&new_owner)))
            .await
    }

    pub async fn interrupt_dead_running_runs(
        &self,
        is_alive: impl Fn(&str) -> bool,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let running: Vec<(String, Option<String>)> = self
            .read(|conn| {
                conn.prepare_cached("SELECT id, owner FROM runs WHERE state = ?1")
                    .and_then(|mut stmt| {
                        stmt.query_map([RunState::Running.as_str()], |row| {
                            Ok((row.get(0)?, row.get(1)?))
                        })?
                        .collect()
                    })
                    .map_err(sql("listing running runs"))
            })
            .await?;
        let dead: Vec<(String, Option<String>)> = running
            .into_iter()
            .filter(|(_, owner)| {
                !owner
                    .as_deref()
                    .is_some_and(|o| !o.is_empty() && is_alive(o))
            })
            .collect();
        if dead.is_empty() {
            return Ok(Vec::new());
        }
        self.call_durable(move |conn| interrupt_listed(conn, &dead))
            .await
    }

    pub async fn claim_run_for_delivery(
        &self,
        run: NewRun,
        delivery_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<RunRecord>, StoreError> {
        if !matches!(run.state, RunState::Queued | RunState::Running) {
            return Err(StoreError::Invalid(format!(
                "run {}: a run is claimed as `queued` or `running`, not `{}`",
                run.id, run.state
            )));
        }
        let delivery_id = delivery_id.to_owned();
        self.call_durable(move |conn| {
            let context = "claiming a webhook delivery's run";
            let tx = conn.savepoint().map_err(sql(context))?;
            if !remember_delivery(&tx, &run.agent, &delivery_id, now)? {
                return Ok(None);
            }
            let record = claim(&tx, &run)?;
            tx.commit().map_err(sql(context))?;
            Ok(Some(record))
        })
        .await
    }

    pub async fn claim_delivery(
        &self,
        agent: &str,
        delivery_id: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let (agent, delivery_id) = (agent.to_owned(), delivery_id.to_owned());
        self.call(move |conn| claim_delivery(conn, &agent, &delivery_id, now))
            .await
    }
}

fn unrun(
    conn: &mut Connection,
    run: &NewRun,
    state: RunState,
    reason: &str,
    rows: &[(&'static str, String)],
) -> Result<bool, StoreError> {
    let context = format!("run {}: cannot record it", run.id);
    let tx = conn
        .savepoint()
        .map_err(|e| StoreError::sqlite(&context, e))?;
    let now = now_text();
    let row = RowStart {
        state,
        created_at: &now,
        started_at: None,
        finished_at: Some(&now),
        error: Some(reason),
    };
    match insert_run(&tx, run, &row) {
        Ok(()) => {}
        Err(StoreError::FireTaken { .. }) => return Ok(false),
        Err(e) => return Err(e),
    }
    insert_events(&tx, &run.id, rows)?;
    tx.commit().map_err(|e| StoreError::sqlite(&context, e))?;
    Ok(true)
}

/// Marks run `id` (found in `state`, owned by `owner`) `interrupted` with a
/// `finished` event, inside the caller's transaction.
fn interrupt_one(
    tx: &Connection,
    id: &str,
    state: RunState,
    owner: Option<&str>,
    now: &str,
) -> Result<(), StoreError> {
    let reason = interrupt_reason(state, owner);
    tx.execute(
        "UPDATE runs SET state = ?2, finished_at = ?3, error = ?4 WHERE id = ?1",
        params![id, RunState::Interrupted.as_str(), now, reason],
    )
    .map_err(sql("interrupting a run left by a stopped process"))?;
    let finished = RunEvent::Finished {
        state: RunState::Interrupted,
        reason: Some(reason),
        output: None,
        usage: Usage::default(),
        cost_usd: None,
        result: None,
    };
    insert_events(tx, id, &encode_events(id, &[finished])?)?;
    Ok(())
}

fn records(tx: &Connection, ids: &[String]) -> Result<Vec<RunRecord>, StoreError> {
    ids.iter()
        .map(|id| {
            run_by_id(tx, id)?.ok_or_else(|| {
                StoreError::Internal(format!("run {id} vanished while being recovered"))
            })
        })
        .collect()
}

/// Interrupts the running and queued runs of gone owners; with
/// `requeue_to`, queued ones become that owner's instead.
fn interrupt_stale(
    conn: &mut Connection,
    is_alive: &dyn Fn(&str) -> bool,
    requeue_to: Option<&str>,
) -> Result<Recovered, StoreError> {
    let context = "interrupting runs left by stopped processes";
    let tx = conn.savepoint().map_err(sql(context))?;
    let open: Vec<(String, String, Option<String>)> = tx
        .prepare_cached(
            "SELECT id, state, owner FROM runs WHERE state IN (?1, ?2)
             ORDER BY created_at, id",
        )
        .and_then(|mut stmt| {
            stmt.query_map(
                params![RunState::Running.as_str(), RunState::Queued.as_str()],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
            )?
            .collect()
        })
        .map_err(sql(context))?;
    let now = now_text();
    let (mut interrupted, mut requeued) = (Vec::new(), Vec::new());
    for (id, state, owner) in open {
        let owner = owner.filter(|o| !o.is_empty());
        if owner.as_deref().is_some_and(is_alive) {
            continue;
        }
        let state = RunState::parse(&state).unwrap_or(RunState::Running);
        if let (RunState::Queued, Some(new_owner)) = (state, requeue_to) {
            tx.execute(
                "UPDATE runs SET owner = ?2 WHERE id = ?1",
                params![id, new_owner],
            )
            .map_err(sql(context))?;
            requeued.push(id);
            continue;
        }
        interrupt_one(&tx, &id, state, owner.as_deref(), &now)?;
        interrupted.push(id);
    }
    let recovered = Recovered {
        interrupted: records(&tx, &interrupted)?,
        requeued: records(&tx, &requeued)?,
    };
    tx.commit().map_err(sql(context))?;
    Ok(recovered)
}

/// Interrupts each listed run that is still `running` under the owner it
/// was listed with.
fn interrupt_listed(
    conn: &mut Connection,
    listed: &[(String, Option<String>)],
) -> Result<Vec<RunRecord>, StoreError> {
    let context = "interrupting runs whose process is gone";
    let tx = conn.savepoint().map_err(sql(context))?;
    let now = now_text();
    let mut changed = Vec::new();
    for (id, owner) in listed {
        let unchanged: bool = tx
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE id = ?1 AND state = ?2 AND owner IS ?3)",
            )
            .and_then(|mut stmt| {
                stmt.query_row(params![id, RunState::Running.as_str(), owner], |row| {
                    row.get(0)
                })
            })
            .map_err(sql(context))?;
        if unchanged {
            let owner = owner.as_deref().filter(|o| !o.is_empty());
            interrupt_one(&tx, id, RunState::Running, owner, &now)?;
            changed.push(id.clone());
        }
    }
    let runs = records(&tx, &changed)?;
    tx.commit().map_err(sql(context))?;
    Ok(runs)
}

/// Remembers delivery `delivery_id` of `agent` at `now` inside the caller's
/// transaction, forgetting those older than a day first: false when it was
/// seen within the day.
fn remember_delivery(
    tx: &Connection,
    agent: &str,
    delivery_id: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let context = "recording a webhook delivery";
    tx.execute(
        "DELETE FROM webhook_deliveries WHERE received_at < ?1",
        [time_text(now - DELIVERY_MEMORY)],
    )
    .map_err(sql(context))?;
    let inserted = tx
        .execute(
            "INSERT OR IGNORE INTO webhook_deliveries (agent, delivery_id, received_at)
             VALUES (?1, ?2, ?3)",
            params![agent, delivery_id, time_text(now)],
        )
        .map_err(sql(context))?;
    Ok(inserted == 1)
}

fn claim_delivery(
    conn: &mut Connection,
    agent: &str,
    delivery_id: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let tx = conn
        .savepoint()
        .map_err(sql("recording a webhook delivery"))?;
    let new = remember_delivery(&tx, agent, delivery_id, now)?;
    tx.commit().map_err(sql("recording a webhook delivery"))?;
    Ok(new)
}
