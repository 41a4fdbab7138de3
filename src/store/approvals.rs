//! Tool calls waiting for a person (`approve:`): a run going to
//! `waiting_approval` with its call and the engine's checkpoint, decisions
//! (once each, only while the run waits), the run going on, and the reads
//! `aurad approve`, the API and a restarted daemon need. The store is the
//! source of truth: a decision written by `aurad approve` with no daemon up
//! is found by the daemon's next look.

use crate::types::approval::{ApprovalRecord, ApprovalRequest, Decision};
use chrono::{DateTime, Utc};

use super::{Store, StoreError};
use crate::store::RunRecord;

/// A run waiting for approval, with the call it waits on.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitingRun {
    pub run: RunRecord,
    pub approval: ApprovalRecord,
}

impl Store {
    /// Puts run `run_id` (`running`, or `waiting_approval` when a resumed
    /// run asks again) in `waiting_approval` with `checkpoint` (the
    /// engine's state, JSON) and records `request`, asked at `requested_at`
    /// and denied at `timeout_at` unless decided, in one transaction
    /// committed with `synchronous=FULL`. A request recorded already keeps
    /// its times. Returns the approval as stored.
    pub async fn wait_for_approval(
        &self,
        run_id: &str,
        checkpoint: String,
        request: ApprovalRequest,
        requested_at: DateTime<Utc>,
        timeout_at: DateTime<Utc>,
    ) -> Result<ApprovalRecord, StoreError> {
        route!(self.wait_for_approval(run_id, checkpoint, request, requested_at, timeout_at))
    }

    /// The approval of call `call_id` of run `run_id`, if asked.
    pub async fn approval(
        &self,
        run_id: &str,
        call_id: &str,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        route!(self.approval(run_id, call_id))
    }

    /// Decides call `call_id` of run `run_id` (a whole id), the call the
    /// run waits on, committed with `synchronous=FULL`. `NotFound` when
    /// there is no such run; `Conflict` when it is not waiting for
    /// approval, its call was decided already (a decision is made once),
    /// or it waits on another call: a decision names the call a person was
    /// shown, so a second click cannot approve the next call unseen.
    pub async fn decide_approval(
        &self,
        run_id: &str,
        call_id: &str,
        decision: Decision,
    ) -> Result<ApprovalRecord, StoreError> {
        route!(self.decide_approval(run_id, call_id, decision))
    }

    /// [`Store::decide_approval`], blocking (for `aurad approve`).
    pub fn decide_approval_blocking(
        &self,
        run_id: &str,
        call_id: &str,
        decision: Decision,
    ) -> Result<ApprovalRecord, StoreError> {
        route_blocking!(self.decide_approval_blocking / decide_approval(run_id, call_id, decision))
    }

    /// A decided run goes on: `waiting_approval` becomes `running`, owned by
    /// `owner`, its checkpoint cleared. False (no change) when it was not
    /// waiting (cancelled meanwhile, say).
    pub async fn resume_after_approval(
        &self,
        run_id: &str,
        owner: &str,
    ) -> Result<bool, StoreError> {
        route!(self.resume_after_approval(run_id, owner))
    }

    /// The checkpoint of a run waiting for approval.
    pub async fn approval_checkpoint(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        route!(self.approval_checkpoint(run_id))
    }

    /// Runs waiting for approval, oldest request first, each with the call
    /// it waits on (decided or not yet).
    pub async fn waiting_runs(&self) -> Result<Vec<WaitingRun>, StoreError> {
        route!(self.waiting_runs())
    }

    /// Moves run `run_id`, waiting for approval under `from` (a gone
    /// owner; `None`: none recorded), to `to`. Only one caller wins: false
    /// when the run is no longer waiting or another process adopted it
    /// first, so two nodes taking over at once never both resume it.
    pub async fn adopt_waiting(
        &self,
        run_id: &str,
        from: Option<&str>,
        to: &str,
    ) -> Result<bool, StoreError> {
        route!(self.adopt_waiting(run_id, from, to))
    }

    /// [`Store::waiting_runs`], blocking (for `aurad approve`).
    pub fn waiting_runs_blocking(&self) -> Result<Vec<WaitingRun>, StoreError> {
        route_blocking!(self.waiting_runs_blocking / waiting_runs())
    }
}

/// The refusal of a decision on call `asked` of run `run_id`, which waits
/// on `waiting`.
pub(crate) fn other_call(run_id: &str, waiting: &ApprovalRecord, asked: &str) -> StoreError {
    StoreError::Conflict(format!(
        "run {run_id} waits on call {} (`{}` with {}), not on call {asked:?}, which was decided already or never asked; decide the call you were shown (`aurad approve` lists them)",
        waiting.request.call_id, waiting.request.tool, waiting.request.arguments
    ))
}
