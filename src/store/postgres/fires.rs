//! What the daemon records besides runs that run, on PostgreSQL: runs that
//! never ran (`skipped`, `missed`...), runs left behind by a process that
//! stopped (`interrupted`, or handed to the process that takes over), and
//! webhook delivery ids seen in the last day, each claimed in the
//! transaction of its run. The same contract as the SQLite `store::fires`;
//! who is alive comes from the caller (`is_alive`), as there.
//!
//! Races between nodes: a fire has one run (`runs_fire`, see
//! `runs::insert_run_as`); a delivery id is one row (`webhook_deliveries`'
//! primary key, upserted: the second node waits for the first's commit and
//! finds it); sweeps lock the rows they change with `FOR NO KEY UPDATE
//! SKIP LOCKED` (exclusive between sweepers and event appends, yet rows
//! referencing those runs may still be inserted meanwhile), so two nodes
//! sweeping at once interrupt each run once, and a run whose row another
//! transaction holds is left for the next sweep.
//!
//! Depends on `runs` (inserting runs and events), `run_rows`, the store's
//! types and the SQLite side's pure `interrupt_reason` and `encode_events`.

use chrono::{DateTime, Duration, Utc};
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;

use super::run_rows::{RUN_COLUMNS, millis, run_from_row};
use super::runs::{RowStart, insert_events, insert_run, insert_run_as};
use super::{Postgres, pg};
use crate::store::sqlite::fires::interrupt_reason;
use crate::store::sqlite::runs::encode_events;
use crate::store::{NewRun, Recovered, RunRecord, StoreError};
use crate::types::{RunEvent, RunState, Usage};

/// How long a webhook delivery id is remembered (as SQLite's).
const DELIVERY_MEMORY: Duration = Duration::hours(24);

impl Postgres {
    /// [`crate::store::Store::record_unrun`]: records `run` directly in the
    /// final `state`, never started, with one `finished` event. False
    /// (nothing stored) when its fire has a run already, on any node.
    pub(crate) async fn record_unrun(
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
        let rows = encode_events(&run.id, &[finished(state, reason.clone())])?;
        self.with_client(move |mut client| async move {
            let context = "recording a run that never ran";
            let tx = client.transaction().await.map_err(pg(context))?;
            let now = millis(Utc::now());
            let row = RowStart {
                state,
                created_at: now,
                started_at: None,
                finished_at: Some(now),
                error: Some(reason),
            };
            match insert_run_as(&tx, &run, &row).await {
                Ok(_) => {}
                // Dropping `tx` rolls the aborted transaction back.
                Err(StoreError::FireTaken { .. }) => return Ok(false),
                Err(e) => return Err(e),
            }
            insert_events(&tx, &run.id, &rows).await?;
            tx.commit().await.map_err(pg(context))?;
            Ok(true)
        })
        .await
    }

    /// [`crate::store::Store::interrupt_stale_runs`]: marks every `running`
    /// or `queued` run whose owner `is_alive` says is gone (a missing owner
    /// counts as gone) `interrupted`, in one transaction. Returns the
    /// changed runs as they are now, oldest first.
    pub(crate) async fn interrupt_stale_runs(
        &self,
        is_alive: impl Fn(&str) -> bool + Send + 'static,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.with_client(move |mut client| async move {
            let tx = client
                .transaction()
                .await
                .map_err(pg("interrupting runs left by stopped processes"))?;
            let recovered = interrupt_stale(&tx, is_alive, None).await?;
            tx.commit()
                .await
                .map_err(pg("interrupting runs left by stopped processes"))?;
            Ok(recovered.interrupted)
        })
        .await
    }

    /// [`crate::store::Store::recover_stale_runs`]: like
    /// [`Postgres::interrupt_stale_runs`] for `running` runs, but the
    /// `queued` runs of a gone owner stay queued and become `new_owner`'s.
    pub(crate) async fn recover_stale_runs(
        &self,
        is_alive: impl Fn(&str) -> bool + Send + 'static,
        new_owner: &str,
    ) -> Result<Recovered, StoreError> {
        let new_owner = new_owner.to_owned();
        self.with_client(move |mut client| async move {
            let context = "recovering runs left by stopped processes";
            let tx = client.transaction().await.map_err(pg(context))?;
            let recovered = interrupt_stale(&tx, is_alive, Some(&new_owner)).await?;
            tx.commit().await.map_err(pg(context))?;
            Ok(recovered)
        })
        .await
    }

    /// [`crate::store::Store::interrupt_dead_running_runs`]: the periodic
    /// sweep. The candidates are read first and `is_alive` runs here, on
    /// the caller's side (it need not be `Send`); then each dead one is
    /// interrupted only if it is still `running` under the same owner.
    pub(crate) async fn interrupt_dead_running_runs(
        &self,
        is_alive: impl Fn(&str) -> bool,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let running: Vec<(String, Option<String>)> = self
            .with_client(|client| async move {
                let context = "listing running runs";
                let stmt = client
                    .prepare_cached("SELECT id, owner FROM runs WHERE state = 'running'")
                    .await
                    .map_err(pg(context))?;
                let rows = client.query(&stmt, &[]).await.map_err(pg(context))?;
                rows.iter()
                    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                    .collect::<Result<_, tokio_postgres::Error>>()
                    .map_err(pg(context))
            })
            .await?;
        let (ids, owners): (Vec<String>, Vec<Option<String>>) = running
            .into_iter()
            .filter(|(_, owner)| {
                !owner
                    .as_deref()
                    .is_some_and(|o| !o.is_empty() && is_alive(o))
            })
            .unzip();
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.with_client(move |mut client| async move {
            let context = "interrupting runs whose process is gone";
            let tx = client.transaction().await.map_err(pg(context))?;
            // Still running under the owner they were listed with; a row
            // another node's sweep holds is its to interrupt.
            let stmt = tx
                .prepare_cached(
                    "SELECT r.id, r.owner FROM runs r
                     JOIN unnest($1::text[], $2::text[]) AS l(id, owner) ON r.id = l.id
                     WHERE r.state = 'running' AND r.owner IS NOT DISTINCT FROM l.owner
                     ORDER BY r.created_at, r.id
                     FOR NO KEY UPDATE OF r SKIP LOCKED",
                )
                .await
                .map_err(pg(context))?;
            let rows = tx
                .query(&stmt, &[&ids, &owners])
                .await
                .map_err(pg(context))?;
            let now = millis(Utc::now());
            let mut changed = Vec::new();
            for row in rows {
                let id: String = row.try_get(0).map_err(pg(context))?;
                let owner: Option<String> = row.try_get(1).map_err(pg(context))?;
                let owner = owner.filter(|o| !o.is_empty());
                changed
                    .push(interrupt_one(&tx, &id, RunState::Running, owner.as_deref(), now).await?);
            }
            tx.commit().await.map_err(pg(context))?;
            Ok(changed)
        })
        .await
    }

    /// [`crate::store::Store::claim_run_for_delivery`]: claims `run` for
    /// webhook delivery `delivery_id` received at `now`, remembering the
    /// delivery in the same transaction; `None` (nothing stored) when it
    /// was seen in the 24 hours before `now`, by any node.
    pub(crate) async fn claim_run_for_delivery(
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
        self.with_client(move |mut client| async move {
            let context = "claiming a webhook delivery's run";
            let tx = client.transaction().await.map_err(pg(context))?;
            if !remember_delivery(&tx, &run.agent, &delivery_id, now).await? {
                return Ok(None);
            }
            let record = insert_run(&tx, &run).await?;
            tx.commit().await.map_err(pg(context))?;
            Ok(Some(record))
        })
        .await
    }

    /// [`crate::store::Store::claim_delivery`]: true when delivery
    /// `delivery_id` of `agent` is new, false when it was seen in the 24
    /// hours before `now`.
    pub(crate) async fn claim_delivery(
        &self,
        agent: &str,
        delivery_id: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let (agent, delivery_id) = (agent.to_owned(), delivery_id.to_owned());
        self.with_client(move |mut client| async move {
            let context = "recording a webhook delivery";
            let tx = client.transaction().await.map_err(pg(context))?;
            let new = remember_delivery(&tx, &agent, &delivery_id, now).await?;
            tx.commit().await.map_err(pg(context))?;
            Ok(new)
        })
        .await
    }
}

fn finished(state: RunState, reason: String) -> RunEvent {
    RunEvent::Finished {
        state,
        reason: Some(reason),
        output: None,
        usage: Usage::default(),
        cost_usd: None,
        result: None,
    }
}

/// Marks run `id` (found in `state`, owned by `owner`, its row locked by
/// the caller) `interrupted` with a `finished` event; returns it as now.
async fn interrupt_one(
    tx: &Transaction<'_>,
    id: &str,
    state: RunState,
    owner: Option<&str>,
    now: DateTime<Utc>,
) -> Result<RunRecord, StoreError> {
    let context = "interrupting a run left by a stopped process";
    let reason = interrupt_reason(state, owner);
    let stmt = tx
        .prepare_cached(&format!(
            "UPDATE runs SET state = 'interrupted', finished_at = $2, error = $3 WHERE id = $1
             RETURNING {RUN_COLUMNS}"
        ))
        .await
        .map_err(pg(context))?;
    let row = tx
        .query_one(&stmt, &[&id, &now, &reason])
        .await
        .map_err(pg(context))?;
    let record = run_from_row(&row)?;
    let rows = encode_events(id, &[finished(RunState::Interrupted, reason)])?;
    insert_events(tx, id, &rows).await?;
    Ok(record)
}

/// The open (`running` or `queued`) runs, oldest first, each with its
/// state and owner (`None`: none recorded), locked `FOR NO KEY UPDATE
/// SKIP LOCKED` until the caller's transaction ends: two nodes recovering at
/// once take disjoint runs, and a run whose row a live writer holds at
/// that instant is left to the next sweep.
async fn lock_open_runs(
    tx: &Transaction<'_>,
) -> Result<Vec<(String, RunState, Option<String>)>, StoreError> {
    let context = "interrupting runs left by stopped processes";
    let stmt = tx
        .prepare_cached(
            "SELECT id, state, owner FROM runs WHERE state IN ('running', 'queued')
             ORDER BY created_at, id FOR NO KEY UPDATE SKIP LOCKED",
        )
        .await
        .map_err(pg(context))?;
    let rows = tx.query(&stmt, &[]).await.map_err(pg(context))?;
    rows.iter()
        .map(|row| {
            let id: String = row.try_get(0)?;
            let state: String = row.try_get(1)?;
            let owner: Option<String> = row.try_get(2)?;
            let state = RunState::parse(&state).unwrap_or(RunState::Running);
            Ok((id, state, owner.filter(|o| !o.is_empty())))
        })
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(pg(context))
}

/// Interrupts the open runs of gone owners (locked by [`lock_open_runs`]);
/// with `requeue_to`, queued ones become that owner's instead.
async fn settle_stale(
    tx: &Transaction<'_>,
    gone: Vec<(String, RunState, Option<String>)>,
    requeue_to: Option<&str>,
) -> Result<Recovered, StoreError> {
    let context = "interrupting runs left by stopped processes";
    let now = millis(Utc::now());
    let mut recovered = Recovered::default();
    for (id, state, owner) in gone {
        if let (RunState::Queued, Some(new_owner)) = (state, requeue_to) {
            let requeue = tx
                .prepare_cached(&format!(
                    "UPDATE runs SET owner = $2 WHERE id = $1 RETURNING {RUN_COLUMNS}"
                ))
                .await
                .map_err(pg(context))?;
            let row = tx
                .query_one(&requeue, &[&id, &new_owner])
                .await
                .map_err(pg(context))?;
            recovered.requeued.push(run_from_row(&row)?);
            continue;
        }
        let record = interrupt_one(tx, &id, state, owner.as_deref(), now).await?;
        recovered.interrupted.push(record);
    }
    Ok(recovered)
}

/// Interrupts (or, with `requeue_to`, hands over) the open runs whose
/// owner `is_alive` says is gone, inside the caller's transaction.
/// `is_alive` is called between statements, never held across one, so it
/// need not be `Sync`.
async fn interrupt_stale(
    tx: &Transaction<'_>,
    is_alive: impl Fn(&str) -> bool,
    requeue_to: Option<&str>,
) -> Result<Recovered, StoreError> {
    let open = lock_open_runs(tx).await?;
    let gone: Vec<_> = open
        .into_iter()
        .filter(|(_, _, owner)| !owner.as_deref().is_some_and(&is_alive))
        .collect();
    drop(is_alive);
    settle_stale(tx, gone, requeue_to).await
}

/// Remembers delivery `delivery_id` of `agent` at `now` inside the caller's
/// transaction: false when it was seen within the day before `now`.
///
/// The primary key (agent, delivery_id) guards the race: the upsert of a
/// second node waits for the first's uncommitted row and, once it commits,
/// finds it recent and changes nothing (if it rolls back, the second
/// inserts). A row older than a day is taken over by the upsert, so
/// forgetting old rows is only housekeeping: rows another transaction
/// holds are skipped, never waited for.
async fn remember_delivery(
    tx: &Transaction<'_>,
    agent: &str,
    delivery_id: &str,
    now: DateTime<Utc>,
) -> Result<bool, StoreError> {
    let context = "recording a webhook delivery";
    let now = millis(now);
    let forgotten = now - DELIVERY_MEMORY;
    let forget = tx
        .prepare_cached(
            "DELETE FROM webhook_deliveries d USING (
                 SELECT agent, delivery_id FROM webhook_deliveries WHERE received_at < $1
                 FOR UPDATE SKIP LOCKED) old
             WHERE d.agent = old.agent AND d.delivery_id = old.delivery_id",
        )
        .await
        .map_err(pg(context))?;
    tx.execute(&forget, &[&forgotten])
        .await
        .map_err(pg(context))?;
    let remember = tx
        .prepare_cached(
            "INSERT INTO webhook_deliveries AS d (agent, delivery_id, received_at)
             VALUES ($1, $2, $3)
             ON CONFLICT (agent, delivery_id) DO UPDATE SET received_at = EXCLUDED.received_at
                 WHERE d.received_at < $4",
        )
        .await
        .map_err(pg(context))?;
    let params: [&(dyn ToSql + Sync); 4] = [&agent, &delivery_id, &now, &forgotten];
    let changed = tx.execute(&remember, &params).await.map_err(pg(context))?;
    Ok(changed == 1)
}
