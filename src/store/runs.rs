//! Runs and their events, the write side: claiming a run (queued or
//! running), starting a queued one, appending events and recording the final
//! state. The typed [`Store`] methods here send plain functions over a
//! `Connection` to the writer thread; reads are in `run_reads`.

use crate::types::{RunEvent, RunState, ScheduleId, Trigger, Usage, timestamp};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Store, StoreError};

/// The scheduled fire a run is for: `(agent, schedule_id, scheduled_for)`
/// has at most one run in the store, across restarts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fire {
    /// What the schedule is (never its place in the agent's list).
    pub schedule_id: ScheduleId,
    /// The fire's instant, stored with millisecond precision.
    pub scheduled_for: DateTime<Utc>,
}

/// A run about to be queued or started, claimed before its first model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRun {
    pub id: String,
    pub agent: String,
    /// What started it: `cli`, `schedule`, `api`, `webhook`, `retry`, `after`,
    /// `watch`.
    pub trigger: Trigger,
    pub input: String,
    /// `<provider>/<model>` as resolved for this run.
    pub model: String,
    pub definition_hash: String,
    /// The process running it (`daemon::owner`: `pid:1234 boot 3f2a8c1e
    /// start 8754321`, or plain `pid:1234`); empty means none.
    pub owner: String,
    /// The scheduled fire it is for; `None` for manual and webhook runs,
    /// which never use up a fire.
    pub fire: Option<Fire>,
    /// `Running` (started now) or `Queued` (waiting: [`Store::start_run`]
    /// starts it). [`Store::record_unrun`] ignores it.
    pub state: RunState,
    /// A queued run's template variables (JSON), kept while it waits so a
    /// daemon taking it over after a crash can render its templates
    /// ([`Store::queued_template_context`]); ignored for other states.
    pub template_context: Option<String>,
    /// The run that started this one (a sub-agent call, a pipeline step);
    /// `None` for a run started by a trigger.
    pub parent: Option<RunParent>,
    /// The session this run is a turn of ([`crate::store::sessions`]).
    pub session_id: Option<String>,
}

/// The run a child run belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunParent {
    pub run_id: String,
    /// The child's depth: its parent's depth + 1 (a run nobody started is
    /// at depth 0).
    pub depth: u32,
}

/// A stored run. Times are shown as RFC 3339 UTC with milliseconds
/// (`types::timestamp`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub id: String,
    pub agent: String,
    pub state: RunState,
    pub trigger: Trigger,
    pub input: String,
    pub model: String,
    pub definition_hash: String,
    pub owner: Option<String>,
    #[serde(serialize_with = "timestamp::millis")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "timestamp::millis_opt")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "timestamp::millis_opt")]
    pub finished_at: Option<DateTime<Utc>>,
    pub error: Option<String>,
    pub output: Option<String>,
    pub usage: Usage,
    /// US dollars, from `prices`; `None`: unknown (no price for the model,
    /// or token counts the provider did not report).
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// The final answer as JSON, for agents with an `output_schema`.
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    /// The schedule whose fire this run is for (scheduled runs only; runs
    /// stored before schedules had identities have none).
    #[serde(default)]
    pub schedule_id: Option<ScheduleId>,
    /// That fire's instant (scheduled runs only).
    #[serde(default, serialize_with = "timestamp::millis_opt")]
    pub scheduled_for: Option<DateTime<Utc>>,
    /// The run that started this one (a sub-agent call, a pipeline step).
    #[serde(default)]
    pub parent_run_id: Option<String>,
    /// 0 for a run started by a trigger, its parent's depth + 1 otherwise.
    #[serde(default)]
    pub depth: u32,
    /// The session it is a turn of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// How a run ended, as [`Store::finish_run_as`] records it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    pub state: RunState,
    pub error: Option<String>,
    pub output: Option<String>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub result: Option<serde_json::Value>,
}

impl RunEnd {
    /// A run that ended in `state` with no output, usage or cost.
    pub fn new(state: RunState, error: Option<String>) -> RunEnd {
        RunEnd {
            state,
            error,
            output: None,
            usage: Usage::default(),
            cost_usd: None,
            result: None,
        }
    }
}

/// Which runs [`Store::list_runs`] returns, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    pub agent: Option<String>,
    pub state: Option<RunState>,
    /// Only the children of this run (by exact id).
    pub parent: Option<String>,
    /// At most this many; 0 means no limit.
    pub limit: usize,
}

impl Store {
    /// Records `run` in `run.state`: `Running` (created and started now) or
    /// `Queued` (created now, not started), committed with
    /// `synchronous=FULL` before this returns the run as stored. An id in
    /// use is a `Conflict`; a fire that has a run already is `FireTaken`.
    pub async fn claim_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        route!(self.claim_run(run))
    }

    /// The template variables a run claimed `queued` was accepted with
    /// (`NewRun::template_context`), while it is still queued.
    pub async fn queued_template_context(&self, id: &str) -> Result<Option<String>, StoreError> {
        route!(self.queued_template_context(id))
    }

    /// Starts a run queued under `owner`: `queued` becomes `running`,
    /// started now, committed with `synchronous=FULL`. False (and no
    /// change) when the run is no longer queued under `owner`: it was
    /// cancelled while waiting, or another node took it over
    /// ([`Store::claim_queued`]).
    pub async fn start_run(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        route!(self.start_run(id, owner))
    }

    /// Appends `events` to the run in one transaction (`synchronous=NORMAL`),
    /// numbering them after the run's last stored event (seqs start at 1).
    /// The tokens and cost of their `usage` events are added to a running
    /// run's row in the same transaction, so what a run in progress has
    /// spent is in the store (daily budgets, `aurad runs`, and a run cut
    /// short by a crash). Returns the run's last seq after the call (0 when
    /// it has no events).
    pub async fn append_events(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
    ) -> Result<i64, StoreError> {
        route!(self.append_events(run_id, events))
    }

    /// Records the run's final state, committed with `synchronous=FULL`.
    /// Works on a queued run too (cancelled while waiting).
    pub async fn finish_run(
        &self,
        run_id: &str,
        state: RunState,
        error: Option<String>,
        output: Option<String>,
        usage: Usage,
    ) -> Result<(), StoreError> {
        self.finish_run_with_events(run_id, Vec::new(), state, error, output, usage)
            .await
            .map(|_| ())
    }

    /// Appends the run's last events and records its final state in one
    /// transaction committed with `synchronous=FULL`, so the stored events
    /// (ending with `finished`) and the row's state never disagree. Returns
    /// the run's last seq after the call (0 when it has no events).
    pub async fn finish_run_with_events(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
        state: RunState,
        error: Option<String>,
        output: Option<String>,
        usage: Usage,
    ) -> Result<i64, StoreError> {
        let end = RunEnd {
            output,
            usage,
            ..RunEnd::new(state, error)
        };
        self.finish_run_as(run_id, events, end).await
    }

    /// [`Store::finish_run_with_events`] with the cost and the structured
    /// result too.
    pub async fn finish_run_as(
        &self,
        run_id: &str,
        events: Vec<RunEvent>,
        end: RunEnd,
    ) -> Result<i64, StoreError> {
        route!(self.finish_run_as(run_id, events, end))
    }
}

/// Serialises events on the caller's side, so a backend's transaction only writes
/// (both backends store `(kind, JSON)`).
pub(crate) fn encode_events(
    run_id: &str,
    events: &[RunEvent],
) -> Result<Vec<(&'static str, String)>, StoreError> {
    events
        .iter()
        .map(|event| {
            serde_json::to_string(event)
                .map(|data| (event.kind(), data))
                .map_err(|e| {
                    StoreError::Invalid(format!(
                        "run {run_id}: cannot encode a `{}` event: {e}",
                        event.kind()
                    ))
                })
        })
        .collect()
}

/// What the `usage` events of a batch spent, summed: both backends add it
/// to a running run's totals as the batch is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spent {
    pub(crate) usage: Usage,
    /// `None` when no event of the batch knows its cost.
    pub(crate) cost_usd: Option<f64>,
}

impl Spent {
    /// `None` when the batch has no `usage` event.
    pub(crate) fn of(events: &[RunEvent]) -> Option<Spent> {
        let mut spent: Option<Spent> = None;
        for event in events {
            if let RunEvent::Usage {
                usage, cost_usd, ..
            } = event
            {
                let sum = spent.get_or_insert(Spent {
                    usage: Usage::default(),
                    cost_usd: None,
                });
                sum.usage.add(usage);
                if let Some(cost) = cost_usd.filter(|c| c.is_finite()) {
                    sum.cost_usd = Some(sum.cost_usd.unwrap_or(0.0) + cost);
                }
            }
        }
        spent
    }
}
