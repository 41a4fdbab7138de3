//! What the engine needs for human approval of tool calls: the gate it asks
//! before a call matching the agent's `approve:` runs (implemented by the
//! daemon, which keeps the request in the store and releases the run's
//! concurrency slot while it waits), the [`Checkpoint`] it hands over so a
//! run can resume after a restart, and the run clock that does not count
//! the time spent waiting against `limits.timeout`. May depend on `types`
//! only.

use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::types::approval::{ApprovalRequest, Decision};
use crate::types::{Message, ToolCall, Usage};

/// Where the engine asks for approval. The engine never touches the store:
/// this does, on its behalf.
pub trait ApprovalGate: Send + Sync {
    /// Does a call to `tool` wait for a person?
    fn required(&self, tool: &str) -> bool;

    /// Records that the run waits on `request` (with `checkpoint`, from
    /// which it resumes after a restart) and returns when it is denied if
    /// nobody decides. Asking again for a request already recorded (a
    /// resumed run) keeps its first time.
    fn request<'a>(
        &'a self,
        request: &'a ApprovalRequest,
        checkpoint: &'a Checkpoint,
    ) -> BoxFuture<'a, Result<DateTime<Utc>, String>>;

    /// Waits for the decision on `request` (a person's, or the timeout's)
    /// and for the run to be allowed to go on (a concurrency slot).
    fn decision<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, Result<Decision, NoDecision>>;
}

/// Why [`ApprovalGate::decision`] returned without a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoDecision {
    /// The daemon is stopping: the run stays `waiting_approval` in the
    /// store, to go on after the restart. The engine ends without a final
    /// state.
    Suspended,
    /// Waiting failed (the store, say); the run fails with this.
    Failed(String),
}

/// One tool call's result, kept in a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResult {
    pub output: String,
    pub is_error: bool,
    pub duration_ms: u64,
}

/// A run's state while it waits for approval: enough for the engine to go
/// on from there in another process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The conversation so far, ending with the assistant message that
    /// asked for `calls`.
    pub messages: Vec<Message>,
    pub usage: Usage,
    /// The run's own share of `usage` (without its sub-runs'), priced at
    /// its model's price.
    #[serde(default)]
    pub own_usage: Usage,
    /// What its sub-runs (agents called as tools) cost so far.
    #[serde(default)]
    pub sub_runs_cost: Option<f64>,
    /// The model of the agent's chain the run had moved on to.
    #[serde(default)]
    pub model_index: usize,
    /// What its calls answered by a fallback model cost.
    #[serde(default)]
    pub fallback_cost: Option<f64>,
    pub iterations: u32,
    pub tool_calls_made: u32,
    /// Set while the one repair turn of a schema-violating answer runs.
    pub repairing: bool,
    /// The tool calls of the current turn, in order.
    pub calls: Vec<ToolCall>,
    /// Their results known so far (`None`: not run yet), in call order.
    pub results: Vec<Option<CallResult>>,
    /// The call that waits (an index into `calls`).
    pub waiting: usize,
    /// Run time left before `limits.timeout`, in milliseconds.
    pub remaining_ms: u64,
    /// Where the run's own messages start in `messages` (after a session's
    /// history); 0 for a run with no history.
    #[serde(default)]
    pub turn_start: usize,
}

/// The run's clock for `limits.timeout`: it stops while the run waits for
/// a person.
pub struct RunClock {
    deadline: watch::Sender<Option<Instant>>,
}

impl RunClock {
    /// A clock with `left` of run time, running.
    pub fn new(left: Duration) -> RunClock {
        RunClock {
            deadline: watch::Sender::new(Some(Instant::now() + left)),
        }
    }

    /// When the run's time ends; `None` while it is stopped.
    pub fn deadline(&self) -> Option<Instant> {
        *self.deadline.borrow()
    }

    /// The run time left (all of it while stopped at that amount).
    pub fn left(&self) -> Duration {
        self.deadline().map_or(Duration::ZERO, |d| {
            d.saturating_duration_since(Instant::now())
        })
    }

    /// Stops the clock; returns the time left.
    pub fn stop(&self) -> Duration {
        let left = self.left();
        self.deadline.send_replace(None);
        left
    }

    /// Starts it again with `left`.
    pub fn restart(&self, left: Duration) {
        self.deadline.send_replace(Some(Instant::now() + left));
    }

    /// Returns once the run's time is up (never while stopped).
    pub async fn expired(&self) {
        let mut rx = self.deadline.subscribe();
        loop {
            let deadline = *rx.borrow_and_update();
            match deadline {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => return,
                        changed = rx.changed() => if changed.is_err() { return },
                    }
                }
                None => {
                    if rx.changed().await.is_err() {
                        std::future::pending::<()>().await;
                    }
                }
            }
        }
    }
}
