//! The run supervisor: every run of `aurad serve` starts here, whatever
//! started it. It claims the run row before anything runs, applies the
//! agent's `on_overlap` to scheduled fires, caps runs across all agents at
//! `max_concurrent_runs` (the rest wait `queued`), owns each run's
//! cancellation token and live event hub, and tracks consecutive failures
//! for the schedule backoff.
//!
//! State is one `std::sync::Mutex`, never held across an `.await`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::clock::Clock;
use super::hub::Hub;
use super::metrics::Metrics;
use super::runner::{PreparedRun, RunRequest, RunSink, new_run, prepare, run_claimed};
use crate::config::OnOverlap;
use crate::registry::Snapshot;
use crate::scheduler::failure_backoff;
use crate::store::{NewRun, RunRecord, Store, StoreError};
use crate::types::{RunEvent, RunState};

/// The process environment (or a test's), shared with runs.
pub type Env = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Why a run was not started.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The request cannot run (unknown agent, template error, no input).
    #[error("{0}")]
    Invalid(String),
    /// The scheduled fire was claimed before (e.g. by an earlier process).
    #[error("this fire was already claimed")]
    AlreadyFired,
    #[error("aurad is shutting down and accepts no new runs")]
    ShuttingDown,
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// Whether [`Supervisor::cancel`] found the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// It was queued or running and is being cancelled.
    Cancelling,
    /// It is not in flight (finished, or never existed in this process).
    NotInFlight,
}

/// An agent's run health, for the schedule backoff.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Health {
    pub consecutive_failures: u32,
    pub last_failure: Option<DateTime<Utc>>,
}

impl Health {
    /// Until when scheduled fires are skipped, if backing off.
    pub fn backoff_until(&self) -> Option<DateTime<Utc>> {
        let wait = failure_backoff(self.consecutive_failures)?;
        Some(self.last_failure? + chrono::Duration::from_std(wait).ok()?)
    }
}

pub struct Supervisor {
    store: Store,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    env: Env,
    tracker: TaskTracker,
    /// Parent of every run's token: cancelled at the end of the grace period.
    root: CancellationToken,
    state: Mutex<State>,
    /// Signalled whenever a run ends or a slot frees.
    changed: Notify,
}

struct State {
    accepting: bool,
    limit: usize,
    /// Runs holding one of the `limit` slots.
    running: usize,
    runs: HashMap<String, Live>,
    /// Run ids in flight (queued or running), per agent, oldest first.
    by_agent: HashMap<String, Vec<String>>,
    health: HashMap<String, Health>,
}

struct Live {
    agent: String,
    cancel: CancellationToken,
    hub: Arc<Hub>,
    /// Held by `on_overlap: queue`: waits until the agent's earlier runs end.
    held: bool,
}

impl Supervisor {
    pub fn new(
        store: Store,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
        env: Env,
        limit: usize,
    ) -> Supervisor {
        Supervisor {
            store,
            metrics,
            clock,
            env,
            tracker: TaskTracker::new(),
            root: CancellationToken::new(),
            state: Mutex::new(State {
                accepting: true,
                limit: limit.max(1),
                running: 0,
                runs: HashMap::new(),
                by_agent: HashMap::new(),
                health: HashMap::new(),
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets `max_concurrent_runs` (a reload may change it).
    pub fn set_limit(&self, limit: usize) {
        self.lock().limit = limit.max(1);
        self.changed.notify_waiters();
    }

    pub fn set_health(&self, agent: &str, health: Health) {
        self.lock().health.insert(agent.to_string(), health);
    }

    pub fn health(&self, agent: &str) -> Health {
        self.lock().health.get(agent).copied().unwrap_or_default()
    }

    /// (running, queued) runs now.
    pub fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        (state.running, state.runs.len() - state.running)
    }

    /// The live hub of a run in flight.
    pub fn hub(&self, run_id: &str) -> Option<Arc<Hub>> {
        self.lock().runs.get(run_id).map(|l| l.hub.clone())
    }

    /// Starts a run of `request` on `snapshot`. `overlap` applies to
    /// scheduled fires (`None`: run regardless of runs in flight). Returns
    /// the stored run once claimed: `running` when a slot was free,
    /// `queued` when it waits for one, or `skipped` (overlap) or
    /// `failed` (a scheduled fire that cannot even start), never before the
    /// row is committed.
    pub async fn submit(
        self: &Arc<Self>,
        snapshot: Arc<Snapshot>,
        request: RunRequest,
        overlap: Option<OnOverlap>,
    ) -> Result<RunRecord, SubmitError> {
        if !self.lock().accepting {
            return Err(SubmitError::ShuttingDown);
        }
        let agent = request.agent.clone();
        let trigger = request.trigger.clone();
        let fire = request.fire;
        let prepared = match prepare(&snapshot, request, &*self.env) {
            Ok(prepared) => prepared,
            Err(message) if fire.is_some() => {
                // A scheduled fire that cannot start is recorded, not lost.
                let hash = snapshot
                    .project
                    .agents
                    .get(&agent)
                    .map(|a| a.hash.clone())
                    .unwrap_or_default();
                let run = NewRun {
                    id: crate::store::new_run_id(),
                    agent,
                    trigger,
                    input: String::new(),
                    model: String::new(),
                    definition_hash: hash,
                    owner: String::new(),
                    fire,
                    state: RunState::Queued,
                };
                let message = snapshot.redactor.redact(&message).into_owned();
                return self.record_unrun(run, RunState::Failed, message).await;
            }
            Err(message) => return Err(SubmitError::Invalid(message)),
        };
        let id = prepared.spec.run_id.clone();
        let hub = Arc::new(Hub::default());
        // Overlap is decided and the run entered under one lock, so two
        // fires cannot both see the agent idle.
        let (skip_reason, slot) = {
            let mut state = self.lock();
            if !state.accepting {
                return Err(SubmitError::ShuttingDown);
            }
            let in_flight: Vec<String> = state.by_agent.get(&agent).cloned().unwrap_or_default();
            let mut held = false;
            let mut skip = None;
            if let (Some(policy), Some(newest)) = (overlap, in_flight.last()) {
                match policy {
                    OnOverlap::Skip => {
                        skip = Some(format!(
                            "skipped: run {newest} of this agent was still in flight (on_overlap: skip)"
                        ))
                    }
                    OnOverlap::Queue => {
                        if in_flight.iter().any(|id| state.runs[id].held) {
                            skip = Some(format!(
                                "skipped: a run of this agent is already queued behind run {newest} (on_overlap: queue holds one)"
                            ));
                        } else {
                            held = true;
                        }
                    }
                    OnOverlap::Replace => {
                        for id in &in_flight {
                            tracing::info!(run = %id, agent = %agent, "cancelled: replaced by a newer scheduled fire (on_overlap: replace)");
                            state.runs[id].cancel.cancel();
                        }
                    }
                    OnOverlap::Allow => {}
                }
            }
            // A run that need not wait takes its slot now and is claimed
            // `running`: one commit fewer than queued, then started.
            let slot = skip.is_none() && !held && state.running < state.limit;
            if slot {
                state.running += 1;
            }
            if skip.is_none() {
                state.runs.insert(
                    id.clone(),
                    Live {
                        agent: agent.clone(),
                        cancel: self.root.child_token(),
                        hub: hub.clone(),
                        held,
                    },
                );
                state
                    .by_agent
                    .entry(agent.clone())
                    .or_default()
                    .push(id.clone());
            }
            (skip, slot)
        };
        if let Some(reason) = skip_reason {
            return self
                .record_unrun(
                    new_run(&prepared, RunState::Queued),
                    RunState::Skipped,
                    reason,
                )
                .await;
        }
        let claimed_as = if slot {
            RunState::Running
        } else {
            RunState::Queued
        };
        let record = match self.store.claim_run(new_run(&prepared, claimed_as)).await {
            Ok(record) => record,
            Err(e) => {
                self.forget(&id);
                if slot {
                    self.release_slot();
                }
                return Err(match e {
                    StoreError::FireTaken { .. } => SubmitError::AlreadyFired,
                    other => SubmitError::Store(other),
                });
            }
        };
        self.publish_counts();
        let this = self.clone();
        self.tracker
            .spawn(async move { this.drive(prepared, hub, slot).await });
        Ok(record)
    }

    async fn record_unrun(
        &self,
        run: NewRun,
        state: RunState,
        reason: String,
    ) -> Result<RunRecord, SubmitError> {
        let id = run.id.clone();
        let agent = run.agent.clone();
        if !self.store.record_unrun(run, state, reason).await? {
            return Err(SubmitError::AlreadyFired);
        }
        self.metrics.run_recorded(&agent, state.as_str());
        self.store.get_run(&id).await?.ok_or_else(|| {
            SubmitError::Store(StoreError::NotFound(format!(
                "run {id} vanished after it was recorded"
            )))
        })
    }

    /// Waits for the run's turn (unless it was claimed `running`, holding
    /// its slot), runs it, records the end.
    async fn drive(self: Arc<Self>, prepared: PreparedRun, hub: Arc<Hub>, claimed_running: bool) {
        let id = prepared.spec.run_id.clone();
        let agent = prepared.spec.agent.clone();
        let Some(cancel) = self.lock().runs.get(&id).map(|l| l.cancel.clone()) else {
            if claimed_running {
                self.release_slot();
            }
            return;
        };
        let started = std::time::Instant::now();
        let state = if claimed_running || self.wait_turn(&id, &cancel).await {
            self.run(prepared, &hub, cancel, claimed_running).await
        } else {
            let reason = "cancelled while queued".to_string();
            if let Err(e) = self
                .store
                .finish_run(
                    &id,
                    RunState::Cancelled,
                    Some(reason),
                    None,
                    Default::default(),
                )
                .await
            {
                tracing::error!(run = %id, "cannot record the cancellation: {e}");
            }
            Some(RunState::Cancelled)
        };
        hub.finish();
        {
            // The slot (if one was taken) was released by `run`.
            let mut s = self.lock();
            s.runs.remove(&id);
            if let Some(ids) = s.by_agent.get_mut(&agent) {
                ids.retain(|r| r != &id);
                if ids.is_empty() {
                    s.by_agent.remove(&agent);
                }
            }
            if let Some(state) = state {
                let health = s.health.entry(agent.clone()).or_default();
                match state {
                    RunState::Succeeded => *health = Health::default(),
                    RunState::Failed | RunState::TimedOut | RunState::Interrupted => {
                        health.consecutive_failures += 1;
                        health.last_failure = Some(self.clock.now());
                    }
                    _ => {}
                }
            }
        }
        if let Some(state) = state {
            self.metrics
                .run_finished(&agent, state.as_str(), started.elapsed());
        }
        self.changed.notify_waiters();
        self.publish_counts();
    }

    /// Waits until the run may start: (held runs) the agent's earlier runs
    /// have ended, and a slot is free; takes the slot. False if cancelled
    /// first (the slot is not taken).
    async fn wait_turn(&self, id: &str, cancel: &CancellationToken) -> bool {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                let Some(live) = s.runs.get(id) else {
                    return false;
                };
                let blocked_by_agent = live.held
                    && s.by_agent
                        .get(&live.agent)
                        .is_some_and(|ids| ids.first().is_some_and(|first| first != id));
                if !blocked_by_agent && s.running < s.limit {
                    s.running += 1;
                    if let Some(live) = s.runs.get_mut(id) {
                        live.held = false;
                    }
                    return true;
                }
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = cancel.cancelled() => return false,
            }
        }
    }

    /// Runs a run holding a slot (starting it in the store unless it was
    /// claimed `running`); releases the slot. The final state, or `None` if
    /// the run could not even be started in the store.
    async fn run(
        &self,
        prepared: PreparedRun,
        hub: &Arc<Hub>,
        cancel: CancellationToken,
        claimed_running: bool,
    ) -> Option<RunState> {
        let id = prepared.spec.run_id.clone();
        let agent = prepared.spec.agent.clone();
        self.publish_counts();
        let started = if claimed_running {
            Ok(true)
        } else {
            self.store.start_run(&id).await
        };
        let result = match started {
            Ok(true) => {
                let mut sink = HubSink {
                    hub: hub.clone(),
                    metrics: self.metrics.clone(),
                    agent: agent.clone(),
                };
                match run_claimed(prepared, &self.store, cancel, &mut sink).await {
                    Ok(outcome) => Some(outcome.state),
                    Err(e) => {
                        tracing::error!(run = %id, "the run's record is incomplete: {e}");
                        None
                    }
                }
            }
            Ok(false) => None,
            Err(e) => {
                tracing::error!(run = %id, "cannot start the run: {e}");
                None
            }
        };
        self.release_slot();
        result
    }

    /// Gives a run's slot back and wakes the runs waiting for one.
    fn release_slot(&self) {
        self.lock().running -= 1;
        self.changed.notify_waiters();
    }

    fn publish_counts(&self) {
        let (running, queued) = self.counts();
        self.metrics.set_runs_in_flight(running);
        self.metrics.set_runs_queued(queued);
    }

    fn forget(&self, id: &str) {
        let mut s = self.lock();
        if let Some(live) = s.runs.remove(id)
            && let Some(ids) = s.by_agent.get_mut(&live.agent)
        {
            ids.retain(|r| r != id);
        }
    }

    /// Cancels a queued or running run of this process.
    pub fn cancel(&self, run_id: &str) -> CancelOutcome {
        match self.lock().runs.get(run_id) {
            Some(live) => {
                live.cancel.cancel();
                CancelOutcome::Cancelling
            }
            None => CancelOutcome::NotInFlight,
        }
    }

    /// Stops accepting runs (shutdown).
    pub fn close(&self) {
        self.lock().accepting = false;
        self.tracker.close();
    }

    /// Waits until every run has ended.
    pub async fn wait(&self) {
        self.tracker.wait().await;
    }

    /// Cancels every run in flight (end of the shutdown grace period).
    pub fn cancel_all(&self) {
        self.root.cancel();
    }
}

/// Sends a run's events to its hub (for SSE) and to the metrics.
struct HubSink {
    hub: Arc<Hub>,
    metrics: Arc<Metrics>,
    agent: String,
}

impl RunSink for HubSink {
    fn event(&mut self, seq: i64, event: &RunEvent) {
        self.metrics.observe_event(&self.agent, event);
        self.hub.publish(seq, event);
    }

    fn committed(&mut self, last_seq: i64) {
        self.hub.committed(last_seq);
    }
}
