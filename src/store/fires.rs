//! What the daemon records besides runs that run (scheduling): runs that never ran (`skipped`, `missed`...), runs left
//! behind by a process that stopped (`interrupted`, or queued again for
//! the daemon that takes over), and the webhook delivery ids seen in the
//! last day, each claimed in the transaction of its run. All writes, on the
//! writer thread.

use crate::types::RunState;
use chrono::{DateTime, Utc};

use super::{Store, StoreError};
use crate::store::{NewRun, RunRecord};

/// What [`Store::recover_stale_runs`] did with the runs of processes that
/// are gone, each list oldest first, as the runs are now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recovered {
    /// Runs that were `running`: now `interrupted`.
    pub interrupted: Vec<RunRecord>,
    /// Runs that were `queued` (accepted, never started): still `queued`,
    /// now owned by the recovering process, which starts them.
    pub requeued: Vec<RunRecord>,
}

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
        route!(self.record_unrun(run, state, reason))
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
        route!(self.interrupt_stale_runs(is_alive))
    }

    /// At start-up of the daemon `new_owner`: like
    /// [`Store::interrupt_stale_runs`] for `running` runs, but the `queued`
    /// runs of a gone owner (accepted with 202, never started) stay queued
    /// and become `new_owner`'s, to be started by it, never lost. One
    /// transaction, committed with `synchronous=FULL`.
    pub async fn recover_stale_runs(
        &self,
        is_alive: impl Fn(&str) -> bool + Send + 'static,
        new_owner: &str,
    ) -> Result<Recovered, StoreError> {
        route!(self.recover_stale_runs(is_alive, new_owner))
    }

    /// For a live daemon's periodic sweep: marks `running` runs whose owner
    /// `is_alive` says is gone `interrupted`, like
    /// [`Store::interrupt_stale_runs`], leaving queued runs alone. Cheap
    /// when there is nothing to do: the candidates are read on the reader
    /// thread (an index on `state`), and only runs found dead are written,
    /// each only if it is still `running` under the same owner.
    pub async fn interrupt_dead_running_runs(
        &self,
        is_alive: impl Fn(&str) -> bool,
    ) -> Result<Vec<RunRecord>, StoreError> {
        route!(self.interrupt_dead_running_runs(is_alive))
    }

    /// Claims `run` (as [`Store::claim_run`]) for webhook delivery
    /// `delivery_id` received at `now`, remembering the delivery in the
    /// same transaction: `None` (nothing stored) when the delivery was seen
    /// in the 24 hours before `now`. So a delivery is remembered exactly
    /// when its run exists, and one whose run could not be claimed can be
    /// delivered again.
    pub async fn claim_run_for_delivery(
        &self,
        run: NewRun,
        delivery_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<RunRecord>, StoreError> {
        route!(self.claim_run_for_delivery(run, delivery_id, now))
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
        route!(self.claim_delivery(agent, delivery_id, now))
    }
}

/// Why a run of `owner` (`None`: no owner recorded) was interrupted.
pub(crate) fn interrupt_reason(state: RunState, owner: Option<&str>) -> String {
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
