//! What the daemon records besides runs that run (DESIGN.md section 3,
//! scheduling): runs that never ran (`skipped`, `missed`...), runs left
//! behind by a process that stopped (`interrupted`), and the webhook
//! delivery ids seen in the last day. All writes, on the writer thread.

use chrono::{DateTime, Duration, Utc};
use rusqlite::{Connection, params};

use super::run_reads::run_by_id;
use super::runs::{RowStart, encode_events, insert_events, insert_run};
use super::{NewRun, RunRecord, Store, StoreError, now_text, sql, time_text};
use crate::types::{RunEvent, RunState, Usage};

/// How long a webhook delivery id is remembered.
const DELIVERY_MEMORY: Duration = Duration::hours(24);

impl Store {
    /// Records `run` as one that never ran, directly in the final `state`
    /// (`skipped`, `missed`, `failed`, `budget_exceeded`, `cancelled`...):
    /// created and finished now, never started, `error` = `reason`, with one
    /// `finished` event; committed with `synchronous=FULL`. False (nothing
    /// stored) when its fire has a run already. `run.state` is ignored.
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

    /// Marks every `running` or `queued` run whose owner `is_alive` says is
    /// gone (a missing owner counts as gone) `interrupted`, finished now,
    /// with the reason as its error and a `finished` event, all in one
    /// transaction committed with `synchronous=FULL`. Returns the changed
    /// runs as they are now, oldest first. `is_alive` gets owners such as
    /// `pid:1234 boot .. start ..` and runs on the store's thread: keep it quick.
    pub async fn interrupt_stale_runs(
        &self,
        is_alive: impl Fn(&str) -> bool + Send + 'static,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.call_durable(move |conn| interrupt_stale(conn, &is_alive))
            .await
    }

    /// Remembers webhook delivery `delivery_id` for `agent`, received at
    /// `now`: true when it is new, false when it was seen in the 24 hours
    /// before `now` (a redelivery: do not run it again). Forgets deliveries
    /// older than that first.
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

/// Why a run of `owner` (`None`: no owner recorded) was interrupted.
fn interrupt_reason(state: RunState, owner: Option<&str>) -> String {
    let owner = owner.unwrap_or("no owner recorded");
    if state == RunState::Queued {
        format!(
            "interrupted: the process that queued it ({owner}) stopped (crash, kill or power \
             loss) before the run started"
        )
    } else {
        format!(
            "interrupted: the process that ran it ({owner}) stopped (crash, kill or power \
             loss) before the run finished"
        )
    }
}

fn interrupt_stale(
    conn: &mut Connection,
    is_alive: &dyn Fn(&str) -> bool,
) -> Result<Vec<RunRecord>, StoreError> {
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
    let mut changed = Vec::new();
    for (id, state, owner) in open {
        let owner = owner.filter(|o| !o.is_empty());
        if owner.as_deref().is_some_and(is_alive) {
            continue;
        }
        let state = RunState::parse(&state).unwrap_or(RunState::Running);
        let reason = interrupt_reason(state, owner.as_deref());
        tx.execute(
            "UPDATE runs SET state = ?2, finished_at = ?3, error = ?4 WHERE id = ?1",
            params![id, RunState::Interrupted.as_str(), now, reason],
        )
        .map_err(sql(context))?;
        let finished = RunEvent::Finished {
            state: RunState::Interrupted,
            reason: Some(reason),
            output: None,
            usage: Usage::default(),
            cost_usd: None,
            result: None,
        };
        insert_events(&tx, &id, &encode_events(&id, &[finished])?)?;
        changed.push(id);
    }
    let runs = changed
        .iter()
        .map(|id| {
            run_by_id(&tx, id)?.ok_or_else(|| {
                StoreError::Internal(format!("run {id} vanished while being interrupted"))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    tx.commit().map_err(sql(context))?;
    Ok(runs)
}

fn claim_delivery(
    conn: &mut Connection,
    agent: &str,
    delivery_id: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    // A lost delivery record is harmless: its run's claim (FULL) comes after.
    let context = "recording a webhook delivery";
    let tx = conn.savepoint().map_err(sql(context))?;
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
    tx.commit().map_err(sql(context))?;
    Ok(inserted == 1)
}
