//! Tool calls waiting for a person (`approve:`) on PostgreSQL: the same
//! operations and outcomes as the SQLite `approvals.rs` (a run going to
//! `waiting_approval` with its call and checkpoint, a decision made once
//! and only while the run waits, the run going on, the reads `aurad
//! approve` and the API need), safe when several nodes act at once.
//!
//! Races between nodes: every write locks the run's row first (`UPDATE`
//! or `SELECT ... FOR UPDATE`), so two nodes deciding the same approval
//! (a person on one, the timeout on another) are serialised: the second
//! sees the first's decision and gets a `Conflict`. The decision's own
//! `UPDATE ... WHERE decided_at IS NULL` guards it a second time.
//!
//! Depends on the store's types, `run_rows` and `tokio-postgres`.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;

use super::run_rows::{RUN_COLUMNS, millis, run_by_id, run_from_row};
use super::{Postgres, pg};
use crate::store::approvals::other_call;
use crate::store::{StoreError, WaitingRun};
use crate::types::RunState;
use crate::types::approval::{ApprovalRecord, ApprovalRequest, DecidedBy, Decision};

const APPROVAL_COLUMNS: &str = "a.run_id, a.call_id, a.tool, a.arguments, a.requested_at, \
    a.timeout_at, a.decided_at, a.approved, a.decided_by, a.reason";

impl Postgres {
    /// Puts run `run_id` (`running`, or `waiting_approval` when a resumed
    /// run asks again) in `waiting_approval` with `checkpoint` and records
    /// `request`, in one transaction. A request recorded already keeps its
    /// times. Returns the approval as stored. See `Store::wait_for_approval`.
    pub(crate) async fn wait_for_approval(
        &self,
        run_id: &str,
        checkpoint: String,
        request: ApprovalRequest,
        requested_at: DateTime<Utc>,
        timeout_at: DateTime<Utc>,
    ) -> Result<ApprovalRecord, StoreError> {
        let run_id = run_id.to_owned();
        self.with_client(move |mut client| async move {
            let context = "recording a run waiting for approval";
            let tx = client.transaction().await.map_err(pg(context))?;
            // The UPDATE locks the run's row until the commit.
            let changed = tx
                .execute(
                    "UPDATE runs SET state = $2, checkpoint = $3
                     WHERE id = $1 AND state IN ($4, $2)",
                    &[
                        &run_id,
                        &RunState::WaitingApproval.as_str(),
                        &checkpoint,
                        &RunState::Running.as_str(),
                    ],
                )
                .await
                .map_err(pg(context))?;
            if changed == 0 {
                return Err(not_waiting(&tx, &run_id, "cannot wait for approval").await?);
            }
            tx.execute(
                "INSERT INTO approvals (run_id, call_id, tool, arguments, requested_at, timeout_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (run_id, call_id) DO NOTHING",
                &[
                    &run_id,
                    &request.call_id,
                    &request.tool,
                    &request.arguments,
                    &millis(requested_at),
                    &millis(timeout_at),
                ],
            )
            .await
            .map_err(pg(context))?;
            let stored = approval_row(&tx, &run_id, &request.call_id)
                .await?
                .ok_or_else(|| {
                    StoreError::Internal(format!("run {run_id}: its approval vanished"))
                })?;
            tx.commit().await.map_err(pg(context))?;
            Ok(stored)
        })
        .await
    }

    /// The approval of call `call_id` of run `run_id`, if asked.
    pub(crate) async fn approval(
        &self,
        run_id: &str,
        call_id: &str,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let (run_id, call_id) = (run_id.to_owned(), call_id.to_owned());
        self.with_client(
            move |client| async move { approval_row(&client, &run_id, &call_id).await },
        )
        .await
    }

    /// Decides the pending approval of run `run_id` (a whole id).
    /// `NotFound` when there is no such run; `Conflict` when it is not
    /// waiting for approval or its call was decided already, by this node
    /// or another (a decision is made once).
    pub(crate) async fn decide_approval(
        &self,
        run_id: &str,
        call_id: &str,
        decision: Decision,
    ) -> Result<ApprovalRecord, StoreError> {
        let (run_id, call_id) = (run_id.to_owned(), call_id.to_owned());
        self.with_client(move |mut client| async move {
            let context = "recording an approval decision";
            let tx = client.transaction().await.map_err(pg(context))?;
            // Race guard: deciders of one run queue on its row lock; the
            // one that waited reads the other's committed decision below.
            let run = tx
                .query_opt(
                    &format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = $1 FOR NO KEY UPDATE"),
                    &[&run_id],
                )
                .await
                .map_err(pg(context))?
                .as_ref()
                .map(run_from_row)
                .transpose()?;
            let Some(run) = run else {
                return Err(StoreError::NotFound(format!("no run has the id `{run_id}`")));
            };
            if run.state != RunState::WaitingApproval {
                return Err(StoreError::Conflict(format!(
                    "run {run_id} is not waiting for approval (it is {}); nothing to decide",
                    run.state
                )));
            }
            let latest = tx
                .query_opt(
                    &format!(
                        "SELECT {APPROVAL_COLUMNS} FROM approvals a WHERE a.run_id = $1
                         ORDER BY a.requested_at DESC LIMIT 1"
                    ),
                    &[&run_id],
                )
                .await
                .map_err(pg(context))?
                .as_ref()
                .map(|row| approval_from_row(row, 0))
                .transpose()?;
            let Some(mut approval) = latest else {
                return Err(StoreError::Conflict(format!(
                    "run {run_id} has no tool call waiting for approval"
                )));
            };
            if approval.request.call_id != call_id && approval.decision.is_none() {
                return Err(other_call(&run_id, &approval, &call_id));
            }
            if let Some(done) = &approval.decision {
                return Err(already_decided(&run_id, &approval, done));
            }
            let changed = tx
                .execute(
                    "UPDATE approvals SET decided_at = $3, approved = $4, decided_by = $5, reason = $6
                     WHERE run_id = $1 AND call_id = $2 AND decided_at IS NULL",
                    &[
                        &run_id,
                        &approval.request.call_id,
                        &millis(decision.at),
                        &decision.approved,
                        &decision.by.as_str(),
                        &decision.reason,
                    ],
                )
                .await
                .map_err(pg(context))?;
            if changed == 0 {
                // Only reachable if something decided it without the run's
                // lock; still exactly one decision.
                return Err(StoreError::Conflict(format!(
                    "the call to `{}` of run {run_id} was decided meanwhile; a decision is made once",
                    approval.request.tool
                )));
            }
            tx.commit().await.map_err(pg(context))?;
            approval.decision = Some(decision);
            Ok(approval)
        })
        .await
    }

    /// A decided run goes on: `waiting_approval` becomes `running`, owned
    /// by `owner`, its checkpoint cleared. False (no change) when it was
    /// not waiting (cancelled meanwhile, or resumed by another node).
    pub(crate) async fn resume_after_approval(
        &self,
        run_id: &str,
        owner: &str,
    ) -> Result<bool, StoreError> {
        let (run_id, owner) = (run_id.to_owned(), owner.to_owned());
        self.with_client(move |client| async move {
            // One UPDATE guarded by the state: of two nodes resuming at
            // once, the second finds it `running` and changes nothing.
            let statement = client
                .prepare_cached(
                    "UPDATE runs SET state = $2, owner = $3, checkpoint = NULL
                     WHERE id = $1 AND state = $4",
                )
                .await
                .map_err(pg("resuming a run after its approval"))?;
            client
                .execute(
                    &statement,
                    &[
                        &run_id,
                        &RunState::Running.as_str(),
                        &owner,
                        &RunState::WaitingApproval.as_str(),
                    ],
                )
                .await
                .map(|changed| changed > 0)
                .map_err(pg("resuming a run after its approval"))
        })
        .await
    }

    /// The checkpoint of a run waiting for approval.
    pub(crate) async fn approval_checkpoint(
        &self,
        run_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let run_id = run_id.to_owned();
        self.with_client(move |client| async move {
            let context = "reading a waiting run's checkpoint";
            let statement = client
                .prepare_cached("SELECT checkpoint FROM runs WHERE id = $1 AND state = $2")
                .await
                .map_err(pg(context))?;
            let row = client
                .query_opt(&statement, &[&run_id, &RunState::WaitingApproval.as_str()])
                .await
                .map_err(pg(context))?;
            row.map(|row| row.try_get::<_, Option<String>>(0))
                .transpose()
                .map(Option::flatten)
                .map_err(pg(context))
        })
        .await
    }

    /// Runs waiting for approval, oldest request first, each with the call
    /// it waits on (decided or not yet). One statement: one snapshot.
    /// One UPDATE conditioned on the owner read before: of two nodes
    /// adopting at once, the second finds the owner changed and gets false.
    pub(crate) async fn adopt_waiting(
        &self,
        run_id: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<bool, StoreError> {
        let (run_id, from, to) = (run_id.to_owned(), from.map(str::to_owned), to.to_owned());
        self.with_client(move |client| async move {
            let changed = client
                .execute(
                    "UPDATE runs SET owner = $3
                     WHERE id = $1 AND state = 'waiting_approval' AND owner IS NOT DISTINCT FROM $2",
                    &[&run_id, &from, &to],
                )
                .await
                .map_err(pg("adopting a run waiting for approval"))?;
            Ok(changed == 1)
        })
        .await
    }

    pub(crate) async fn waiting_runs(&self) -> Result<Vec<WaitingRun>, StoreError> {
        self.with_client(move |client| async move {
            let context = "listing runs waiting for approval";
            // The run's columns first (`run_from_row` reads them by place),
            // then the approval's; no name of one table is in the other.
            let statement = client
                .prepare_cached(&format!(
                    "SELECT {RUN_COLUMNS}, {APPROVAL_COLUMNS}
                     FROM approvals a JOIN runs r ON r.id = a.run_id
                     WHERE r.state = $1
                       AND a.requested_at = (SELECT MAX(b.requested_at) FROM approvals b
                                             WHERE b.run_id = a.run_id)
                     ORDER BY a.requested_at, a.run_id, a.call_id"
                ))
                .await
                .map_err(pg(context))?;
            let rows = client
                .query(&statement, &[&RunState::WaitingApproval.as_str()])
                .await
                .map_err(pg(context))?;
            let run_columns = RUN_COLUMNS.split(',').count();
            rows.iter()
                .map(|row| {
                    Ok(WaitingRun {
                        run: run_from_row(row)?,
                        approval: approval_from_row(row, run_columns)?,
                    })
                })
                .collect()
        })
        .await
    }
}

/// A time as the SQLite backend writes it in messages.
fn time_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn already_decided(run_id: &str, approval: &ApprovalRecord, done: &Decision) -> StoreError {
    StoreError::Conflict(format!(
        "the call to `{}` of run {run_id} was already {} by {} at {}; a decision is made once",
        approval.request.tool,
        if done.approved { "approved" } else { "denied" },
        done.by,
        time_text(done.at)
    ))
}

/// Why run `run_id` is not waiting for approval (to `what`), as a
/// `NotFound` or `Conflict` error.
async fn not_waiting(
    client: &impl GenericClient,
    run_id: &str,
    what: &str,
) -> Result<StoreError, StoreError> {
    Ok(match run_by_id(client, run_id).await? {
        None => StoreError::NotFound(format!("no run has the id `{run_id}`")),
        Some(run) => StoreError::Conflict(format!(
            "run {run_id} is not waiting for approval (it is {}): {what}",
            run.state
        )),
    })
}

async fn approval_row(
    client: &impl GenericClient,
    run_id: &str,
    call_id: &str,
) -> Result<Option<ApprovalRecord>, StoreError> {
    let context = "reading an approval";
    let statement = client
        .prepare_cached(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals a WHERE a.run_id = $1 AND a.call_id = $2"
        ))
        .await
        .map_err(pg(context))?;
    client
        .query_opt(&statement, &[&run_id, &call_id])
        .await
        .map_err(pg(context))?
        .as_ref()
        .map(|row| approval_from_row(row, 0))
        .transpose()
}

/// The approval in the columns of `row` from `at` on (in
/// `APPROVAL_COLUMNS` order). A row written wrong is an `Internal` error
/// naming the run, as the SQLite backend reports it; never a panic.
fn approval_from_row(row: &Row, at: usize) -> Result<ApprovalRecord, StoreError> {
    let unreadable = |run_id: &str, e: tokio_postgres::Error| {
        StoreError::Internal(format!("run {run_id}: approval row is unreadable: {e}"))
    };
    let run_id: String = row.try_get(at).map_err(|e| unreadable("?", e))?;
    let read = || -> Result<_, tokio_postgres::Error> {
        Ok((
            ApprovalRequest {
                call_id: row.try_get(at + 1)?,
                tool: row.try_get(at + 2)?,
                arguments: row.try_get(at + 3)?,
            },
            row.try_get::<_, DateTime<Utc>>(at + 4)?,
            row.try_get::<_, DateTime<Utc>>(at + 5)?,
            row.try_get::<_, Option<DateTime<Utc>>>(at + 6)?,
            row.try_get::<_, Option<bool>>(at + 7)?,
            row.try_get::<_, Option<String>>(at + 8)?,
            row.try_get::<_, Option<String>>(at + 9)?,
        ))
    };
    let (request, requested_at, timeout_at, decided_at, approved, by, reason) =
        read().map_err(|e| unreadable(&run_id, e))?;
    let decision = match (decided_at, approved, by) {
        (Some(at), Some(approved), Some(by)) => Some(Decision {
            approved,
            reason,
            by: DecidedBy::parse(&by).ok_or_else(|| {
                StoreError::Internal(format!("run {run_id}: unknown decider {by:?}"))
            })?,
            at,
        }),
        _ => None,
    };
    Ok(ApprovalRecord {
        request,
        requested_at,
        timeout_at,
        decision,
        run_id,
    })
}
