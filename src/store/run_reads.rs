//! Runs and their events, the read side: listing and looking up runs,
//! reading events (all, or after a seq for live streaming), and what the
//! scheduler asks of the past (last fire, last run, consecutive failures).
//! Every method here runs on the reader thread, so it never waits behind
//! writes.

use crate::types::{RunEvent, ScheduleId};
use chrono::{DateTime, Utc};

use super::{Store, StoreError};
use crate::store::{RunFilter, RunRecord};

impl Store {
    pub async fn list_runs(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        route!(self.list_runs(filter))
    }

    /// The runs matching `filter`, newest first. Blocking.
    pub fn list_runs_blocking(&self, filter: &RunFilter) -> Result<Vec<RunRecord>, StoreError> {
        route_blocking!(self.list_runs_blocking / list_runs(filter))
    }

    pub async fn get_run(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        route!(self.get_run(id))
    }

    /// The run with this id, or with this unique id prefix (at least 4
    /// characters) or id end (at least 6 hex digits: the short id the
    /// listings show). An ambiguous one is an error listing the matches.
    /// Blocking.
    pub fn get_run_blocking(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        route_blocking!(self.get_run_blocking / get_run(id))
    }

    pub async fn run_events(&self, run_id: &str) -> Result<Vec<RunEvent>, StoreError> {
        route!(self.run_events(run_id))
    }

    /// The run's events in order (the exact id). `NotFound` when there is no
    /// such run, `EventsPruned` when retention deleted its events. Blocking.
    pub fn run_events_blocking(&self, run_id: &str) -> Result<Vec<RunEvent>, StoreError> {
        route_blocking!(self.run_events_blocking / run_events(run_id))
    }

    /// The run's events with a seq above `after_seq`, with their seqs, in
    /// order (seqs start at 1, so 0 gives them all). `NotFound` when there is
    /// no such run, `EventsPruned` when retention deleted its events. For streaming: send these, then the live events numbered
    /// after the seq `append_events` returned.
    pub async fn run_events_after(
        &self,
        run_id: &str,
        after_seq: i64,
    ) -> Result<Vec<(i64, RunEvent)>, StoreError> {
        route!(self.run_events_after(run_id, after_seq))
    }

    /// [`Store::run_events_after`], blocking.
    pub fn run_events_after_blocking(
        &self,
        run_id: &str,
        after_seq: i64,
    ) -> Result<Vec<(i64, RunEvent)>, StoreError> {
        route_blocking!(self.run_events_after_blocking / run_events_after(run_id, after_seq))
    }

    /// The newest fire instant that has a run (of any state) for schedule
    /// `schedule` of `agent`, or `None` when it never fired.
    pub async fn last_fire(
        &self,
        agent: &str,
        schedule: &ScheduleId,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        route!(self.last_fire(agent, schedule))
    }

    /// The agent's newest run by creation time (ties: the greatest id).
    pub async fn last_run(&self, agent: &str) -> Result<Option<RunRecord>, StoreError> {
        route!(self.last_run(agent))
    }

    /// How many of the agent's latest runs failed in a row: walking its
    /// runs newest first, counting only `succeeded`, `failed` and
    /// `timed_out` ones, the failures before the first success (at most
    /// 100). Drives the schedule backoff. An `interrupted` run (cut off by a
    /// crash) is not a failure and does not end a streak either: it is
    /// passed over.
    pub async fn consecutive_failures(&self, agent: &str) -> Result<u32, StoreError> {
        route!(self.consecutive_failures(agent))
    }

    /// The known cost in US dollars of the agent's runs created at or
    /// after `since`, other than run `except`. Runs in progress count what
    /// their stored `usage` events have spent so far; runs of unknown cost
    /// count nothing. Drives the daily budget.
    pub async fn cost_since(
        &self,
        agent: &str,
        since: DateTime<Utc>,
        except: &str,
    ) -> Result<f64, StoreError> {
        route!(self.cost_since(agent, since, except))
    }
}
