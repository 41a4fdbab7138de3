//! `on_overlap` across the nodes of a cluster: a scheduled fire weighs the
//! agent's runs in flight on other nodes (read from the store) beside this
//! process's own. `skip` skips when any runs anywhere; `queue` holds the
//! fire until the earlier runs end wherever they run (and skips when one
//! is already held anywhere); `replace` asks the node running the same
//! schedule's run to cancel it. On SQLite there is nobody else.

use std::time::Duration;

use super::*;

use crate::types::Trigger;

/// How often a held fire looks whether the agent's earlier runs on other
/// nodes have ended.
const RECHECK: Duration = Duration::from_millis(500);

/// The agent's runs in flight on other nodes, as `on_overlap` weighs them.
#[derive(Debug, Default)]
pub(super) struct Elsewhere {
    /// The newest one, with its node: what a skip names.
    pub(super) newest: Option<(String, String)>,
    /// A scheduled fire waiting `queued` there (held by `on_overlap:
    /// queue`, or waiting for a slot).
    pub(super) queued_fire: Option<String>,
    /// Those the new fire of `schedule` replaces.
    pub(super) replaced: Vec<String>,
}

impl Elsewhere {
    fn of(runs: &[RunRecord], schedule: Option<&ScheduleKey>) -> Elsewhere {
        Elsewhere {
            newest: runs
                .last()
                .map(|r| (r.id.clone(), r.owner.clone().unwrap_or_default())),
            queued_fire: runs
                .iter()
                .find(|r| r.state == RunState::Queued && r.trigger == Trigger::Schedule)
                .map(|r| r.id.clone()),
            replaced: runs
                .iter()
                .filter(|r| {
                    schedule.is_some()
                        && r.trigger == Trigger::Schedule
                        && r.schedule_id.as_ref() == schedule
                })
                .map(|r| r.id.clone())
                .collect(),
        }
    }
}

impl Supervisor {
    /// The agent's runs on other nodes, when a fire with an `on_overlap`
    /// policy is to be weighed against them (a shared store only).
    pub(super) async fn elsewhere(
        &self,
        agent: &str,
        schedule: Option<&ScheduleKey>,
        overlap: Option<OnOverlap>,
    ) -> Result<Elsewhere, SubmitError> {
        if !self.store.is_shared() || matches!(overlap, None | Some(OnOverlap::Allow)) {
            return Ok(Elsewhere::default());
        }
        let runs = self
            .store
            .in_flight_elsewhere(agent, crate::run::owner::this_process())
            .await?;
        Ok(Elsewhere::of(&runs, schedule))
    }

    /// Asks the nodes running `runs` to cancel them (`on_overlap: replace`).
    pub(super) async fn replace_elsewhere(&self, agent: &str, runs: &[String]) {
        for id in runs {
            tracing::info!(run = %id, agent = %agent, "asking the node running it to cancel it: replaced by a newer fire of the same schedule (on_overlap: replace)");
            if let Err(e) = self.store.request_cancel(id).await {
                tracing::error!(run = %id, "cannot ask for the run's cancellation: {e}");
            }
        }
    }

    /// Waits until no run of `agent` accepted before run `id` is in flight
    /// on another node (a fire held by `on_overlap: queue`); false if
    /// cancelled first. At once on a store nobody shares.
    pub(super) async fn wait_elsewhere(
        &self,
        agent: &str,
        id: &str,
        cancel: &CancellationToken,
    ) -> bool {
        if !self.store.is_shared() {
            return true;
        }
        let me = crate::run::owner::this_process();
        let created_at = loop {
            match self.store.get_run(id).await {
                Ok(Some(mine)) => break mine.created_at,
                Ok(None) => return false,
                Err(e) => tracing::warn!(run = %id, "cannot read the run: {e}"),
            }
            tokio::select! {
                () = tokio::time::sleep(RECHECK) => {}
                () = cancel.cancelled() => return false,
            }
        };
        loop {
            let earlier = match self.store.in_flight_elsewhere(agent, me).await {
                Ok(runs) => runs
                    .into_iter()
                    .any(|r| (r.created_at, r.id.as_str()) < (created_at, id)),
                Err(e) => {
                    tracing::warn!(run = %id, "cannot read the agent's runs on other nodes: {e}");
                    true
                }
            };
            if !earlier {
                return true;
            }
            tokio::select! {
                () = tokio::time::sleep(RECHECK) => {}
                () = cancel.cancelled() => return false,
            }
        }
    }
}
