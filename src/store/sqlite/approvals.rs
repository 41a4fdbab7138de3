//! Tool calls waiting for a person (`approve:`): a run going to
//! `waiting_approval` with its call and the engine's checkpoint, decisions
//! (once each, only while the run waits), the run going on, and the reads
//! `aurad approve`, the API and a restarted daemon need. The store is the
//! source of truth: a decision written by `aurad approve` with no daemon up
//! is found by the daemon's next look.

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::run_reads::run_by_id;
use super::{Sqlite, StoreError, sql, time_text};
use crate::store::WaitingRun;
use crate::store::approvals::other_call;
use crate::types::RunState;
use crate::types::approval::{ApprovalRecord, ApprovalRequest, DecidedBy, Decision};

const APPROVAL_COLUMNS: &str = "run_id, call_id, tool, arguments, requested_at, timeout_at,
    decided_at, approved, decided_by, reason";

impl Sqlite {
    pub async fn wait_for_approval(
        &self,
        run_id: &str,
        checkpoint: String,
        request: ApprovalRequest,
        requested_at: DateTime<Utc>,
        timeout_at: DateTime<Utc>,
    ) -> Result<ApprovalRecord, StoreError> {
        let run_id = run_id.to_owned();
        self.call_durable(move |conn| {
            let context = "recording a run waiting for approval";
            let tx = conn.savepoint().map_err(sql(context))?;
            let changed = tx
                .execute(
                    "UPDATE runs SET state = ?2, checkpoint = ?3
                     WHERE id = ?1 AND state IN (?4, ?2)",
                    params![
                        run_id,
                        RunState::WaitingApproval.as_str(),
                        checkpoint,
                        RunState::Running.as_str()
                    ],
                )
                .map_err(sql(context))?;
            if changed == 0 {
                return Err(not_waiting(&tx, &run_id, "cannot wait for approval")?);
            }
            tx.execute(
                "INSERT OR IGNORE INTO approvals
                     (run_id, call_id, tool, arguments, requested_at, timeout_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    run_id,
                    request.call_id,
                    request.tool,
                    request.arguments,
                    time_text(requested_at),
                    time_text(timeout_at)
                ],
            )
            .map_err(sql(context))?;
            let stored = approval_row(&tx, &run_id, &request.call_id)?.ok_or_else(|| {
                StoreError::Internal(format!("run {run_id}: its approval vanished"))
            })?;
            tx.commit().map_err(sql(context))?;
            Ok(stored)
        })
        .await
    }

    pub async fn approval(
        &self,
        run_id: &str,
        call_id: &str,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let (run_id, call_id) = (run_id.to_owned(), call_id.to_owned());
        self.read(move |conn| approval_row(conn, &run_id, &call_id))
            .await
    }

    pub async fn decide_approval(
        &self,
        run_id: &str,
        call_id: &str,
        decision: Decision,
    ) -> Result<ApprovalRecord, StoreError> {
        let (run_id, call_id) = (run_id.to_owned(), call_id.to_owned());
        self.call_durable(move |conn| decide(conn, &run_id, &call_id, &decision))
            .await
    }

    pub fn decide_approval_blocking(
        &self,
        run_id: &str,
        call_id: &str,
        decision: Decision,
    ) -> Result<ApprovalRecord, StoreError> {
        let (run_id, call_id) = (run_id.to_owned(), call_id.to_owned());
        self.call_blocking(move |conn| decide(conn, &run_id, &call_id, &decision))
    }

    pub async fn resume_after_approval(
        &self,
        run_id: &str,
        owner: &str,
    ) -> Result<bool, StoreError> {
        let (run_id, owner) = (run_id.to_owned(), owner.to_owned());
        self.call_durable(move |conn| {
            conn.execute(
                "UPDATE runs SET state = ?2, owner = ?3, checkpoint = NULL
                 WHERE id = ?1 AND state = ?4",
                params![
                    run_id,
                    RunState::Running.as_str(),
                    owner,
                    RunState::WaitingApproval.as_str()
                ],
            )
            .map(|changed| changed > 0)
            .map_err(sql("resuming a run after its approval"))
        })
        .await
    }

    pub async fn approval_checkpoint(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        let run_id = run_id.to_owned();
        self.read(move |conn| {
            conn.prepare_cached("SELECT checkpoint FROM runs WHERE id = ?1 AND state = ?2")
                .and_then(|mut stmt| {
                    stmt.query_row(params![run_id, RunState::WaitingApproval.as_str()], |row| {
                        row.get::<_, Option<String>>(0)
                    })
                    .optional()
                })
                .map(Option::flatten)
                .map_err(sql("reading a waiting run's checkpoint"))
        })
        .await
    }

    pub async fn waiting_runs(&self) -> Result<Vec<WaitingRun>, StoreError> {
        self.read(waiting).await
    }

    pub fn waiting_runs_blocking(&self) -> Result<Vec<WaitingRun>, StoreError> {
        self.read_blocking(waiting)
    }

    pub async fn adopt_waiting(
        &self,
        run_id: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<bool, StoreError> {
        let (run_id, from, to) = (run_id.to_owned(), from.map(str::to_owned), to.to_owned());
        self.call_durable(move |conn| {
            conn.prepare_cached(
                "UPDATE runs SET owner = ?3
                 WHERE id = ?1 AND state = 'waiting_approval' AND owner IS ?2",
            )
            .and_then(|mut stmt| stmt.execute(params![run_id, from, to]))
            .map(|changed| changed == 1)
            .map_err(sql("adopting a run waiting for approval"))
        })
        .await
    }
}

/// Why run `run_id` is not waiting for approval (to `what`), as a
/// `NotFound` or `Conflict` error.
fn not_waiting(conn: &Connection, run_id: &str, what: &str) -> Result<StoreError, StoreError> {
    Ok(match run_by_id(conn, run_id)? {
        None => StoreError::NotFound(format!("no run has the id `{run_id}`")),
        Some(run) => StoreError::Conflict(format!(
            "run {run_id} is not waiting for approval (it is {}): {what}",
            run.state
        )),
    })
}

fn decide(
    conn: &mut Connection,
    run_id: &str,
    call_id: &str,
    decision: &Decision,
) -> Result<ApprovalRecord, StoreError> {
    let context = "recording an approval decision";
    let tx = conn.savepoint().map_err(sql(context))?;
    let Some(run) = run_by_id(&tx, run_id)? else {
        return Err(StoreError::NotFound(format!(
            "no run has the id `{run_id}`"
        )));
    };
    if run.state != RunState::WaitingApproval {
        return Err(StoreError::Conflict(format!(
            "run {run_id} is not waiting for approval (it is {}); nothing to decide",
            run.state
        )));
    }
    let latest: Option<ApprovalRecord> = tx
        .prepare_cached(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = ?1
             ORDER BY requested_at DESC LIMIT 1"
        ))
        .and_then(|mut stmt| stmt.query_row([run_id], approval_from_row).optional())
        .map_err(sql(context))?
        .transpose()?;
    let Some(mut approval) = latest else {
        return Err(StoreError::Conflict(format!(
            "run {run_id} has no tool call waiting for approval"
        )));
    };
    if approval.request.call_id != call_id && approval.decision.is_none() {
        return Err(other_call(run_id, &approval, call_id));
    }
    if let Some(done) = &approval.decision {
        return Err(StoreError::Conflict(format!(
            "the call to `{}` of run {run_id} was already {} by {} at {}; a decision is made once",
            approval.request.tool,
            if done.approved { "approved" } else { "denied" },
            done.by,
            time_text(done.at)
        )));
    }
    tx.execute(
        "UPDATE approvals SET decided_at = ?3, approved = ?4, decided_by = ?5, reason = ?6
         WHERE run_id = ?1 AND call_id = ?2",
        params![
            run_id,
            approval.request.call_id,
            time_text(decision.at),
            decision.approved,
            decision.by.as_str(),
            decision.reason
        ],
    )
    .map_err(sql(context))?;
    tx.commit().map_err(sql(context))?;
    approval.decision = Some(decision.clone());
    Ok(approval)
}

fn waiting(conn: &mut Connection) -> Result<Vec<WaitingRun>, StoreError> {
    let context = "listing runs waiting for approval";
    let rows: Vec<Result<ApprovalRecord, StoreError>> = conn
        .prepare_cached(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals a
             WHERE EXISTS (SELECT 1 FROM runs r WHERE r.id = a.run_id AND r.state = ?1)
               AND a.requested_at = (SELECT MAX(requested_at) FROM approvals b
                                      WHERE b.run_id = a.run_id)
             ORDER BY requested_at"
        ))
        .and_then(|mut stmt| {
            stmt.query_map([RunState::WaitingApproval.as_str()], approval_from_row)?
                .collect()
        })
        .map_err(sql(context))?;
    let mut out = Vec::new();
    for approval in rows {
        let approval = approval?;
        if let Some(run) = run_by_id(conn, &approval.run_id)? {
            out.push(WaitingRun { run, approval });
        }
    }
    Ok(out)
}

fn approval_row(
    conn: &Connection,
    run_id: &str,
    call_id: &str,
) -> Result<Option<ApprovalRecord>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = ?1 AND call_id = ?2"
    ))
    .and_then(|mut stmt| {
        stmt.query_row([run_id, call_id], approval_from_row)
            .optional()
    })
    .map_err(sql("reading an approval"))?
    .transpose()
}

fn approval_from_row(row: &Row<'_>) -> rusqlite::Result<Result<ApprovalRecord, StoreError>> {
    let run_id: String = row.get(0)?;
    let time = |i: usize| -> rusqlite::Result<Option<Result<DateTime<Utc>, StoreError>>> {
        Ok(row.get::<_, Option<String>>(i)?.map(|text| {
            DateTime::parse_from_rfc3339(&text)
                .map(|t| t.to_utc())
                .map_err(|e| {
                    StoreError::Internal(format!("approval time {text:?} is not RFC 3339: {e}"))
                })
        }))
    };
    let requested_at = time(4)?;
    let timeout_at = time(5)?;
    let decided_at = time(6)?;
    let approved: Option<bool> = row.get(7)?;
    let by: Option<String> = row.get(8)?;
    let reason: Option<String> = row.get(9)?;
    let request = ApprovalRequest {
        call_id: row.get(1)?,
        tool: row.get(2)?,
        arguments: row.get(3)?,
    };
    Ok((|| {
        let missing = || StoreError::Internal(format!("run {run_id}: approval without a time"));
        let decision = match (decided_at, approved, by) {
            (Some(at), Some(approved), Some(by)) => Some(Decision {
                approved,
                reason,
                by: DecidedBy::parse(&by).ok_or_else(|| {
                    StoreError::Internal(format!("run {run_id}: unknown decider {by:?}"))
                })?,
                at: at?,
            }),
            _ => None,
        };
        Ok(ApprovalRecord {
            request,
            requested_at: requested_at.ok_or_else(missing)??,
            timeout_at: timeout_at.ok_or_else(missing)??,
            decision,
            run_id: run_id.clone(),
        })
    })())
}
