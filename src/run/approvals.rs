//! Human approval, daemon side. [`Approvals`] is the daemon-level API,
//! tied to no tool call: [`Approvals::wait`] waits for the decision on a
//! run's request (a person's through the API or `aurad approve`, or the
//! timeout's, which it records), [`Approvals::decide`] records one. The store
//! is the source of truth: a decision made through the API wakes the waiter
//! at once, one written by `aurad approve` (another process) is found by the
//! waiter's next look, every [`POLL`]. [`RunGate`] is what a run's engine
//! asks: it stores the request with the engine's checkpoint (so a restart
//! finds the run still `waiting_approval`), tells `notify:`, gives the run's
//! concurrency slot back while it waits and takes one again after.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::notify::{Notice, Notifier};
use crate::config::approval::{ApprovalConfig, NotifyEvent};
use crate::config::duration::format_duration;
use crate::engine::approval::{ApprovalGate, Checkpoint, NoDecision};
use crate::store::{Store, StoreError};
use crate::tools::registry::glob_match;
use crate::types::RunState;
use crate::types::approval::{ApprovalRecord, ApprovalRequest, DecidedBy, Decision};

/// How often a waiting run looks in the store for a decision made by
/// another process (`aurad approve`).
pub const POLL: Duration = Duration::from_millis(500);

/// Waits for and records approval decisions.
pub struct Approvals {
    store: Store,
    /// Signalled when this process records a decision.
    decided: Notify,
}

impl Approvals {
    pub fn new(store: Store) -> Approvals {
        Approvals {
            store,
            decided: Notify::new(),
        }
    }

    /// Waits for the decision on `request` of run `run_id` (recorded with
    /// [`Store::wait_for_approval`]). At its `timeout_at` the call is
    /// denied, recorded as decided by `timeout`; the time counts from the
    /// request, across restarts.
    pub async fn wait(
        &self,
        run_id: &str,
        request: &ApprovalRequest,
    ) -> Result<Decision, StoreError> {
        loop {
            let notified = self.decided.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let stored = self
                .store
                .approval(run_id, &request.call_id)
                .await?
                .ok_or_else(|| {
                    StoreError::NotFound(format!(
                        "run {run_id}: no approval was asked for call {}",
                        request.call_id
                    ))
                })?;
            if let Some(decision) = stored.decision {
                return Ok(decision);
            }
            let now = Utc::now();
            if now >= stored.timeout_at {
                return self.time_out(run_id, &stored, now).await;
            }
            let left = (stored.timeout_at - now).to_std().unwrap_or_default();
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep(left.min(POLL)) => {}
            }
        }
    }

    /// Denies `stored` for its timeout, unless a person decided first.
    async fn time_out(
        &self,
        run_id: &str,
        stored: &ApprovalRecord,
        now: DateTime<Utc>,
    ) -> Result<Decision, StoreError> {
        let waited = (stored.timeout_at - stored.requested_at)
            .to_std()
            .unwrap_or_default();
        let decision = Decision {
            approved: false,
            reason: Some(format!(
                "approval timed out after {}",
                format_duration(waited)
            )),
            by: DecidedBy::Timeout,
            at: now,
        };
        match self
            .store
            .decide_approval(run_id, &stored.request.call_id, decision.clone())
            .await
        {
            Ok(_) => Ok(decision),
            Err(StoreError::Conflict(message)) => {
                // Decided by a person meanwhile: theirs stands.
                let again = self.store.approval(run_id, &stored.request.call_id).await?;
                again
                    .and_then(|a| a.decision)
                    .ok_or(StoreError::Conflict(message))
            }
            Err(e) => Err(e),
        }
    }

    /// Records a decision on call `call_id` of run `run_id` (a whole id)
    /// and wakes its waiter. `NotFound` / `Conflict` as
    /// [`Store::decide_approval`].
    pub async fn decide(
        &self,
        run_id: &str,
        call_id: &str,
        approved: bool,
        reason: Option<String>,
        by: DecidedBy,
    ) -> Result<ApprovalRecord, StoreError> {
        let decision = Decision {
            approved,
            reason: reason.filter(|r| !r.trim().is_empty()),
            by,
            at: Utc::now(),
        };
        let record = self
            .store
            .decide_approval(run_id, call_id, decision)
            .await?;
        self.decided.notify_waiters();
        Ok(record)
    }
}

/// How a waiting run gives back its concurrency slot and takes one again
/// (the supervisor's; `aurad run` has none).
pub trait Slots: Send + Sync {
    /// The run holds no slot while it waits.
    fn release(&self, run_id: &str);
    /// Waits for a slot (the run shows `queued` meanwhile); false if the
    /// run was cancelled first.
    fn acquire<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, bool>;
}

/// The approval gate of one run.
pub struct RunGate<'a> {
    pub approvals: &'a Approvals,
    pub store: &'a Store,
    pub notifier: &'a Notifier,
    pub config: &'a ApprovalConfig,
    pub run_id: &'a str,
    pub agent: &'a str,
    pub slots: Option<&'a dyn Slots>,
    /// Cancelled when the daemon stops: the run stops waiting here and
    /// stays `waiting_approval` in the store.
    pub closing: Option<&'a CancellationToken>,
}

impl ApprovalGate for RunGate<'_> {
    fn required(&self, tool: &str) -> bool {
        self.config
            .approve
            .iter()
            .any(|pattern| glob_match(pattern, tool))
    }

    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<DateTime<Utc>, String>> {
        Box::pin(async move {
            let json = serde_json::to_string(checkpoint)
                .map_err(|e| format!("cannot encode the run's state: {e}"))?;
            let now = Utc::now();
            let timeout =
                chrono::Duration::from_std(self.config.timeout).unwrap_or(chrono::Duration::MAX);
            let stored = self
                .store
                .wait_for_approval(self.run_id, json, request.clone(), now, now + timeout)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(slots) = self.slots {
                slots.release(self.run_id);
            }
            // Asked now, not by a resumed run asking again.
            let fresh = (stored.requested_at - now).num_milliseconds().abs() < 1;
            if fresh
                && let Some(notify) = self
                    .config
                    .notify
                    .as_ref()
                    .filter(|n| n.wants(NotifyEvent::Approval))
            {
                self.notifier
                    .send(notify, Notice::approval(self.agent, self.run_id, &stored));
            }
            Ok(stored.timeout_at)
        })
    }

    fn decision<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, Result<Decision, NoDecision>> {
        Box::pin(async move {
            let closing = async {
                match self.closing {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            let decided = async {
                let decision = self
                    .approvals
                    .wait(self.run_id, request)
                    .await
                    .map_err(|e| NoDecision::Failed(e.to_string()))?;
                if let Some(slots) = self.slots
                    && !slots.acquire(self.run_id).await
                {
                    return Err(NoDecision::Failed(
                        "cancelled while waiting for a slot after the decision".into(),
                    ));
                }
                Ok(decision)
            };
            let decision = tokio::select! {
                biased;
                _ = closing => return Err(NoDecision::Suspended),
                decision = decided => decision?,
            };
            let resumed = self
                .store
                .resume_after_approval(self.run_id, super::owner::this_process())
                .await
                .map_err(|e| NoDecision::Failed(e.to_string()))?;
            if !resumed {
                let state = self
                    .store
                    .get_run(self.run_id)
                    .await
                    .ok()
                    .flatten()
                    .map_or(RunState::WaitingApproval, |r| r.state);
                return Err(NoDecision::Failed(format!(
                    "the run is {state}, no longer waiting for approval"
                )));
            }
            Ok(decision)
        })
    }
}
