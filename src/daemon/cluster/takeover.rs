//! Taking over what processes or nodes that are gone left behind: runs
//! left `running` become `interrupted` (retried when the agent says
//! `on_interrupt: retry`), runs left `queued` are started again, runs left
//! waiting for approval wait on here, pipelines cut off are resumed. Who
//! is gone is [`Liveness`]'s answer: on SQLite a process check on this
//! machine; on PostgreSQL a node whose heartbeat is older than the lease
//! (or, for an owner of this machine that never heartbeats, the process
//! check). `aurad serve` does all of it at start ([`take_over`]); then on
//! SQLite a sweep interrupts the runs of `aurad run`s that died
//! ([`sweep_dead_owners`]), and on PostgreSQL `daemon::cluster` repeats
//! [`take_over`] after each heartbeat.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::OnInterrupt;
use crate::daemon::Daemon;
use crate::run::RunRequest;
use crate::run::owner;
use crate::store::{RunRecord, Store, StoreError};
use crate::types::Trigger;

/// Who is alive, as of one reading: this process always; on PostgreSQL
/// the nodes whose heartbeat is within the lease; other owners by a process
/// check on this machine (a pid of another machine's boot is never alive
/// by that check).
#[derive(Debug, Clone)]
pub struct Liveness {
    me: &'static str,
    nodes: Option<Arc<HashSet<String>>>,
}

impl Liveness {
    /// Process checks only (SQLite).
    pub fn local() -> Liveness {
        Liveness {
            me: owner::this_process(),
            nodes: None,
        }
    }

    /// Reads the live nodes from the store (on SQLite: [`Liveness::local`]).
    pub async fn read(store: &Store, lease: Duration) -> Result<Liveness, StoreError> {
        Ok(Liveness {
            me: owner::this_process(),
            nodes: store.live_nodes(lease).await?.map(Arc::new),
        })
    }

    /// Whether `owner` (a run's) is alive. An empty owner never is.
    pub fn is_alive(&self, owner: &str) -> bool {
        if owner.is_empty() {
            return false;
        }
        if owner == self.me {
            return true;
        }
        if self
            .nodes
            .as_ref()
            .is_some_and(|nodes| nodes.contains(owner))
        {
            return true;
        }
        owner::is_alive(owner)
    }
}

/// What [`take_over`] found and did.
#[derive(Debug, Default)]
pub struct TakenOver {
    pub pipelines: usize,
    pub requeued: usize,
    pub interrupted: usize,
}

/// Takes over the runs of owners `liveness` says are gone: pipelines first
/// (resumed, not interrupted), then running runs are interrupted (and
/// retried per `on_interrupt`) and queued ones started again here, then
/// runs waiting for approval are adopted. Safe to run on several nodes at
/// once: the store moves each run to one owner in one transaction.
pub async fn take_over(daemon: &Arc<Daemon>, liveness: &Liveness) -> Result<TakenOver, StoreError> {
    let me = owner::this_process();
    let alive = liveness.clone();
    let pipelines = daemon
        .store
        .take_over_pipelines(move |o| alive.is_alive(o), me)
        .await?;
    // The pipelines just taken over are this process's: not stale.
    let alive = liveness.clone();
    let recovered = daemon
        .store
        .recover_stale_runs(move |o| alive.is_alive(o), me)
        .await?;
    for run in &recovered.interrupted {
        tracing::warn!(run = %run.id, agent = %run.agent, owner = run.owner.as_deref().unwrap_or(""), "run was left running by a process or node that is gone; recorded as interrupted");
    }
    resume_pipelines(daemon, &pipelines).await;
    resume_queued(daemon, &recovered.requeued).await;
    resume_waiting(daemon, liveness).await;
    retry_interrupted(daemon, &recovered.interrupted).await;
    Ok(TakenOver {
        pipelines: pipelines.len(),
        requeued: recovered.requeued.len(),
        interrupted: recovered.interrupted.len(),
    })
}

/// How often a live daemon looks for runs of other processes that died.
const SWEEP_EVERY: Duration = Duration::from_secs(2);

/// Every [`SWEEP_EVERY`] until `stop`: records `interrupted` the `running`
/// runs whose owner process is gone (a kill -9'd `aurad run`). This
/// daemon's own runs count as alive. A sweep with nothing to do is one
/// indexed read.
pub(crate) async fn sweep_dead_owners(store: Store, stop: CancellationToken) {
    let mut ticks = tokio::time::interval(SWEEP_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let alive = Liveness::local();
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = stop.cancelled() => return,
        }
        // A deleted database is noticed here within a sweep even when
        // nothing writes (the store logs it once, then refuses writes).
        if store.intact().is_err() {
            continue;
        }
        match store
            .interrupt_dead_running_runs(|o| alive.is_alive(o))
            .await
        {
            Ok(runs) => {
                for run in runs {
                    tracing::warn!(run = %run.id, agent = %run.agent, "run's process is gone; recorded as interrupted");
                }
            }
            Err(e) => tracing::error!("cannot look for runs of stopped processes: {e}"),
        }
    }
}

/// Starts again the runs a previous daemon accepted (202) and left queued
/// when it died: each keeps its id and waits for a slot like any queued run.
pub(crate) async fn resume_queued(daemon: &Arc<Daemon>, queued: &[RunRecord]) {
    let snapshot = daemon.snapshot();
    for run in queued {
        match daemon.supervisor.resume(snapshot.clone(), run).await {
            Ok(state) => {
                tracing::info!(run = %run.id, agent = %run.agent, state = %state, "run queued by a process that is gone is started again")
            }
            Err(e) => tracing::error!(run = %run.id, "cannot start again a run left queued: {e}"),
        }
    }
}

/// Takes over the runs a process that is gone left waiting for approval
/// (`recover_stale_runs` leaves them alone): they wait on, still decidable,
/// with their approval timeout counted from the request.
pub(crate) async fn resume_waiting(daemon: &Arc<Daemon>, liveness: &Liveness) {
    let waiting = match daemon.store.waiting_runs().await {
        Ok(waiting) => waiting,
        Err(e) => {
            tracing::error!("cannot list the runs waiting for approval: {e}");
            return;
        }
    };
    let snapshot = daemon.snapshot();
    for run in waiting {
        let owner = run.run.owner.as_deref().unwrap_or_default();
        // Pipelines waiting at an `approve: true` step were taken over and
        // resumed above (they are this process's now).
        if liveness.is_alive(owner) {
            continue;
        }
        // Made this process's first: of several nodes taking over at once,
        // one resumes it.
        match daemon
            .store
            .adopt_waiting(&run.run.id, run.run.owner.as_deref(), owner::this_process())
            .await
        {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::error!(run = %run.run.id, "cannot adopt a run waiting for approval: {e}");
                continue;
            }
        }
        match daemon
            .supervisor
            .resume_waiting(snapshot.clone(), &run)
            .await
        {
            Ok(state) => {
                tracing::info!(run = %run.run.id, agent = %run.run.agent, state = %state, "run left waiting for approval by a process that is gone is taken over")
            }
            Err(e) => {
                tracing::error!(run = %run.run.id, "cannot take over a run waiting for approval: {e}")
            }
        }
    }
}

/// Resumes the pipeline runs a previous daemon left running when it died:
/// their finished steps are kept, the others run.
pub(crate) async fn resume_pipelines(daemon: &Arc<Daemon>, runs: &[RunRecord]) {
    let snapshot = daemon.snapshot();
    for run in runs {
        match daemon
            .supervisor
            .resume_pipeline(snapshot.clone(), run)
            .await
        {
            Ok(state) => {
                tracing::info!(run = %run.id, agent = %run.agent, state = %state, "pipeline cut off by a process that is gone is resumed")
            }
            Err(e) => tracing::error!(run = %run.id, "cannot resume a pipeline: {e}"),
        }
    }
}

/// Re-runs, once, the interrupted runs of agents with `on_interrupt:
/// retry` that are still within their `catch_up`.
pub(crate) async fn retry_interrupted(daemon: &Arc<Daemon>, interrupted: &[RunRecord]) {
    let snapshot = daemon.snapshot();
    let now = daemon.clock.now();
    for run in interrupted {
        let Some(agent) = snapshot.project.agents.get(&run.agent) else {
            continue;
        };
        // A file's run cut off is run again when the files are looked at.
        if agent.triggers.on_interrupt != OnInterrupt::Retry
            || run.trigger == Trigger::Retry
            || run.trigger == Trigger::Watch
        {
            continue;
        }
        let since = run
            .scheduled_for
            .or(run.started_at)
            .unwrap_or(run.created_at);
        let schedule = run
            .schedule_id
            .as_ref()
            .and_then(|id| agent.triggers.schedule(id));
        let window = agent.triggers.catch_up_for(schedule, now);
        if (now - since).to_std().is_ok_and(|age| age > window) {
            tracing::info!(run = %run.id, "interrupted run is older than catch_up; not retried");
            continue;
        }
        let request = RunRequest {
            input: Some(run.input.clone()),
            ..RunRequest::new(&run.agent, Trigger::Retry)
        };
        match daemon
            .supervisor
            .submit(snapshot.clone(), request, None)
            .await
        {
            Ok(new) => {
                tracing::info!(run = %run.id, retry = %new.id, "retrying interrupted run (on_interrupt: retry)")
            }
            Err(e) => tracing::error!(run = %run.id, "cannot retry interrupted run: {e}"),
        }
    }
}
