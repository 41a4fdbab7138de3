//! This node's side of the run queue a PostgreSQL cluster shares
//! (`store::queue`). A node that accepts a run with every slot taken
//! claims it `queued` under its own name; any node with a free slot takes
//! it over ([`Store::claim_queued`](crate::store::Store::claim_queued),
//! oldest first, rows another node is taking skipped) and runs it under
//! the definition it loaded. A node looks when another queues a run
//! (LISTEN/NOTIFY), when one of its own slots frees, and every
//! [`POLL`] in case a signal was lost. It also cancels the runs other
//! nodes were asked to cancel: at once when the request's signal comes,
//! and at the next [`POLL`] (or when its receiver fell behind) when the
//! signal was lost, from the request the store keeps with the run.
//!
//! Never taken: runs of agents this node did not load, child runs, and
//! scheduled fires of agents with `on_overlap: queue` (such a fire waits
//! behind the agent's earlier run where it was fired).
//!
//! Depends on the daemon's supervisor and the store.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::config::OnOverlap;
use crate::daemon::Daemon;
use crate::daemon::supervisor::CancelOutcome;
use crate::run::owner;
use crate::store::ClusterSignal;

/// How often a node looks at the queue without being told to.
pub const POLL: Duration = Duration::from_secs(1);

/// Takes queued runs of busy nodes into this node's free slots, and
/// cancels the runs other nodes were asked to cancel, until `stop`.
/// Returns at once on a store nobody shares.
pub async fn run(daemon: Arc<Daemon>, stop: CancellationToken) {
    let Some(mut signals) = daemon.store.signals() else {
        return;
    };
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // Whether a signal may have been missed: then the cancel requests
        // are read from the store too.
        let missed = tokio::select! {
            signal = signals.recv() => match signal {
                // For the runs' followers (`remote_events`).
                Ok(ClusterSignal::Events(_)) => continue,
                Ok(ClusterSignal::Taken(id)) => {
                    daemon.supervisor.moved(&id);
                    continue;
                }
                Ok(ClusterSignal::Cancel(id)) => {
                    cancel(&daemon, &id);
                    continue;
                }
                Ok(ClusterSignal::Queued) => false,
                // A lagged receiver may have missed a queued run or a
                // cancel request: look.
                Err(RecvError::Lagged(_)) => true,
                Err(RecvError::Closed) => return,
            },
            () = daemon.supervisor.slot_change() => false,
            _ = poll.tick() => true,
            () = stop.cancelled() => return,
        };
        if missed {
            cancel_requested(&daemon).await;
        }
        take(&daemon).await;
    }
}

/// Cancels run `id` if it is this node's (queued or running here); said
/// once, not again at each poll while the run stops.
fn cancel(daemon: &Daemon, id: &str) {
    if daemon.supervisor.cancel(id) == CancelOutcome::Cancelling {
        tracing::info!(run = %id, "cancelling the run: another node was asked to");
    }
}

/// Cancels this node's runs whose cancel request is stored but whose
/// signal may not have come (the listening connection was down, or the
/// receiver fell behind). A run already cancelling is left as it is.
async fn cancel_requested(daemon: &Daemon) {
    match daemon.store.cancels_requested().await {
        Ok(ids) => ids.iter().for_each(|id| cancel(daemon, id)),
        Err(e) => tracing::warn!("cannot read the runs other nodes were asked to cancel: {e}"),
    }
}

/// Takes as many queued runs as this node has free slots, until it has
/// none or the queue has nothing more for it. The slots are taken first,
/// so a run taken over starts at once.
async fn take(daemon: &Arc<Daemon>) {
    loop {
        let slots = daemon.supervisor.reserve_slots(usize::MAX);
        if slots == 0 {
            return;
        }
        let snapshot = daemon.snapshot();
        let agents: Vec<String> = snapshot.project.agents.keys().cloned().collect();
        let pinned: Vec<String> = snapshot
            .project
            .agents
            .values()
            .filter(|a| a.triggers.on_overlap == OnOverlap::Queue)
            .map(|a| a.name.clone())
            .collect();
        let me = owner::this_process();
        let taken = match daemon.store.claim_queued(me, slots, &agents, &pinned).await {
            Ok(taken) => taken,
            Err(e) => {
                daemon.supervisor.unreserve_slots(slots);
                tracing::error!("cannot take queued runs from the shared queue: {e}");
                return;
            }
        };
        daemon.supervisor.unreserve_slots(slots - taken.len());
        if taken.is_empty() {
            return;
        }
        for run in taken {
            let (id, agent) = (run.run.id.clone(), run.run.agent.clone());
            match daemon.supervisor.run_taken(snapshot.clone(), run).await {
                Ok(state) => {
                    tracing::info!(run = %id, agent = %agent, state = %state, "took over a queued run of a busy node");
                }
                Err(e) => {
                    tracing::error!(run = %id, "cannot run a run taken from the shared queue: {e}")
                }
            }
        }
    }
}
