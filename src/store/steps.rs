//! Pipeline runs and their steps: the template context a pipeline run
//! resumes with, one row per step (and per `for_each` item) written with
//! its event when it starts and when it ends, and the take-over of the
//! pipeline runs a dead process left `running`, so they resume instead of
//! being interrupted. All SQL of pipelines lives here.

use crate::types::{RunEvent, StepState, Usage};
use chrono::{DateTime, Utc};

use super::{Store, StoreError};
use crate::store::RunRecord;

/// One stored step, or one `for_each` item of it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    pub step: String,
    /// The `for_each` item; `None`: the step itself.
    pub item: Option<usize>,
    pub state: StepState,
    /// Attempts started so far.
    pub attempts: u32,
    pub output: Option<String>,
    pub error: Option<String>,
    /// The items a `for_each` step fans out over, as rendered when it
    /// first started.
    pub items: Option<Vec<String>>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    /// The run of an agent step's last attempt.
    pub child_run_id: Option<String>,
}

/// How a step (or item) ended, as [`Store::step_finished`] records it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepEnd {
    pub state: StepState,
    pub output: Option<String>,
    pub error: Option<String>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub child_run_id: Option<String>,
}

impl Store {
    /// Marks run `run_id` as a pipeline run with its template `context`
    /// (JSON), so a daemon starting after a crash resumes it. Idempotent:
    /// a resumed run keeps its first context. Committed with
    /// `synchronous=FULL` before any step starts.
    pub async fn begin_pipeline(
        &self,
        run_id: &str,
        context: Option<String>,
    ) -> Result<(), StoreError> {
        route!(self.begin_pipeline(run_id, context))
    }

    /// The template context a pipeline run was begun with; `None` when it
    /// had none or is not a pipeline run.
    pub async fn pipeline_context(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        route!(self.pipeline_context(run_id))
    }

    /// The stored steps of run `run_id` (empty for a run that is not a
    /// pipeline), ordered by start, then step, then item.
    pub async fn steps_of(&self, run_id: &str) -> Result<Vec<StepRecord>, StoreError> {
        route!(self.steps_of(run_id))
    }

    /// [`Store::steps_of`] for non-async code (`aurad logs`).
    pub fn steps_of_blocking(&self, run_id: &str) -> Result<Vec<StepRecord>, StoreError> {
        route_blocking!(self.steps_of_blocking / steps_of(run_id))
    }

    /// Records that `step` (item `item`) of run `run_id` started attempt
    /// `attempt` (`running`), with the items of a `for_each` step, and
    /// appends `event`, in one transaction. Returns the event's seq.
    pub async fn step_started(
        &self,
        run_id: &str,
        step: &str,
        item: Option<usize>,
        attempt: u32,
        items: Option<&[String]>,
        event: RunEvent,
    ) -> Result<i64, StoreError> {
        route!(self.step_started(run_id, step, item, attempt, items, event))
    }

    /// Records how `step` (item `item`) of run `run_id` ended (a step never
    /// started gets its row now) and appends `event`, in one transaction
    /// committed with `synchronous=FULL`: a step stored `succeeded` is
    /// never run again. Returns the event's seq.
    pub async fn step_finished(
        &self,
        run_id: &str,
        step: &str,
        item: Option<usize>,
        end: StepEnd,
        event: RunEvent,
    ) -> Result<i64, StoreError> {
        route!(self.step_finished(run_id, step, item, end, event))
    }

    /// At start-up of the daemon `new_owner`, before
    /// [`Store::recover_stale_runs`]: the pipeline runs left `running` (or
    /// `waiting_approval` at an `approve: true` step) by a process
    /// `is_alive` says is gone become `new_owner`'s, in the same state, to
    /// be resumed by it. Returns them as they are now,
    /// oldest first. One transaction, committed with `synchronous=FULL`.
    pub async fn take_over_pipelines(
        &self,
        is_alive: impl Fn(&str) -> bool + Send + 'static,
        new_owner: &str,
    ) -> Result<Vec<RunRecord>, StoreError> {
        route!(self.take_over_pipelines(is_alive, new_owner))
    }
}
