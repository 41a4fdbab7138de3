//! The run supervisor: every run of `aurad serve` starts here, whatever
//! started it. It claims the run row before anything runs, applies the
//! agent's `on_overlap` to scheduled fires (`replace` cancels only a run of
//! the same schedule: [`replaced_by`]), caps runs across all agents at
//! `max_concurrent_runs` (the rest wait `queued`), owns each run's
//! cancellation token and live event hub, and tracks consecutive failures
//! for the schedule backoff (a run cut off by a crash is not one). A webhook
//! delivery is claimed with its run; queued runs a dead daemon left are
//! taken over with [`Supervisor::resume`]. A run waiting for a person's
//! approval holds no slot: it gives it back while it waits and takes one
//! again (waiting `queued` if need be) once decided; runs a dead daemon
//! left waiting are taken over with [`Supervisor::resume_waiting`].
//!
//! A run started by another run's end or by a file is claimed with what it
//! is for ([`crate::store::TriggerClaim`]), so it happens once; when a run ends, the runs
//! it starts (`after:`) and the move of its file (`watch:`) are
//! `follow_ups`'s, told through [`OnRunEnd`].
//!
//! Slots (waiting for one, giving it back, reserving free ones for runs
//! taken from the shared queue) are in `slots`; `on_overlap` against other
//! nodes' runs in `elsewhere`; taking over what others left in `takeover`.
//!
//! State is one `std::sync::Mutex`, never held across an `.await`.

mod elsewhere;
mod slots;
mod takeover;

use elsewhere::Elsewhere;

use crate::run::Job;
use crate::run::template::TriggerVars;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::OnOverlap;
use crate::engine::approval::Checkpoint;
use crate::registry::Snapshot;
use crate::run::approvals::{Approvals, Slots};
use crate::run::claim::PendingClaim;
use crate::run::events::RunSink;
use crate::run::hub::Hub;
use crate::run::notify::Notifier;
use crate::run::{RunRequest, RunServices, run_claimed_with};
use crate::scheduler::clock::Clock;
use crate::scheduler::failure_backoff;
use crate::store::{NewRun, RunRecord, Store, StoreError, WaitingRun};
use crate::telemetry::metrics::{Metrics, RunEvents};
use crate::types::{RunEvent, RunState, ScheduleId, Trigger};

pub use crate::run::Env;

/// A run that ended (it ran: skipped and missed runs are not told).
#[derive(Debug, Clone)]
pub struct RunEnded {
    pub run_id: String,
    pub agent: String,
    pub state: RunState,
    /// The run's end or the file that started it (`after:`, `watch:`).
    pub origin: Option<TriggerVars>,
}

/// What a run's end sets off, told by the supervisor as each run ends,
/// before its task ends (so shutdown waits for it). A trait, so that the
/// supervisor does not depend on what the daemon starts from it.
pub trait OnRunEnd: Send + Sync {
    /// Boxed: it may submit runs to the supervisor whose run task awaits it.
    fn ended<'a>(
        &'a self,
        supervisor: &'a Arc<Supervisor>,
        ended: RunEnded,
    ) -> futures::future::BoxFuture<'a, ()>;
}

pub use crate::api::SubmitError;

/// Whether [`Supervisor::cancel`] found the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// It was queued or running and is being cancelled.
    Cancelling,
    /// It is being cancelled already (an earlier request).
    AlreadyCancelling,
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
    /// Cancelled when the daemon stops accepting runs: runs waiting for
    /// approval stop there and stay waiting in the store.
    closing: CancellationToken,
    state: Mutex<State>,
    /// Signalled whenever a run ends or a slot frees.
    changed: Notify,
    /// The same, for the one task that takes over other nodes' queued runs
    /// ([`Supervisor::slot_change`]): `notify_one` keeps a permit, so a
    /// change while that task is busy is not lost.
    freed: Notify,
    /// Where runs wait for and get approval decisions.
    approvals: Approvals,
    notifier: Notifier,
    /// What a run's end sets off, once [`Supervisor::follow`] was called
    /// (`aurad serve`).
    on_end: OnceLock<Box<dyn OnRunEnd>>,
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
    /// The schedule that started it (`None`: an API, CLI, webhook or
    /// retry run).
    schedule: Option<ScheduleKey>,
    cancel: CancellationToken,
    hub: Arc<Hub>,
    /// Held by `on_overlap: queue`: waits until the agent's earlier runs end.
    held: bool,
    /// It holds one of the `limit` slots.
    slot: bool,
    /// It waits for a person's approval (holding no slot, not queued).
    waiting_approval: bool,
    /// Another node took it over while it waited here for a slot
    /// ([`Supervisor::moved`]): it is not this process's to run or record.
    moved: bool,
}

/// What identifies a schedule of an agent for `on_overlap: replace`: what
/// the schedule is (expression, zone, input), never its place in the list.
pub type ScheduleKey = ScheduleId;

/// The schedule a request's run is a fire of, if any: only a scheduled
/// fire has one.
fn schedule_of(request: &RunRequest) -> Option<ScheduleKey> {
    request
        .schedule_id
        .clone()
        .filter(|_| request.trigger == Trigger::Schedule)
}

/// Whether a fire of `schedule` with `on_overlap: replace` cancels the
/// in-flight run `live` of the same agent: only when the same schedule
/// started it, never an API, CLI, webhook or retry run, nor another
/// schedule's (`on_overlap` in docs/daemon-and-api.md).
fn replaced_by(live: &Live, schedule: Option<&ScheduleKey>) -> bool {
    schedule.is_some() && live.schedule.as_ref() == schedule
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
            approvals: Approvals::new(store.clone()),
            store,
            metrics,
            clock,
            env,
            tracker: TaskTracker::new(),
            root: CancellationToken::new(),
            closing: CancellationToken::new(),
            state: Mutex::new(State {
                accepting: true,
                limit: limit.max(1),
                running: 0,
                runs: HashMap::new(),
                by_agent: HashMap::new(),
                health: HashMap::new(),
            }),
            changed: Notify::new(),
            freed: Notify::new(),
            notifier: Notifier::default(),
            on_end: OnceLock::new(),
        }
    }

    /// From now on, every run's end is told to `on_end` (under `aurad
    /// serve`: the runs whose `after:` it matches, the move of its file).
    /// Without it (tests of the supervisor alone), runs end without
    /// follow-ups.
    pub fn follow(&self, on_end: Box<dyn OnRunEnd>) {
        let _ = self.on_end.set(on_end);
    }

    pub(super) fn store(&self) -> &Store {
        &self.store
    }

    /// Where approval decisions are recorded and waited for.
    pub fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets `max_concurrent_runs` (a reload may change it).
    pub fn set_limit(&self, limit: usize) {
        self.lock().limit = limit.max(1);
        self.wake();
    }

    pub fn set_health(&self, agent: &str, health: Health) {
        self.lock().health.insert(agent.to_string(), health);
    }

    pub fn health(&self, agent: &str) -> Health {
        self.lock().health.get(agent).copied().unwrap_or_default()
    }

    /// (running, queued) runs now.
    pub fn counts(&self) -> (usize, usize) {
        self.lock().counts()
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
        let trigger = request.trigger;
        let fire = request.fire.clone();
        let schedule = schedule_of(&request);
        let delivery = request.delivery.clone();
        let trigger_claim = request.claim.clone();
        let prepared =
            match Job::prepare_blocking(snapshot.clone(), request, self.env.clone()).await {
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
                        parent: None,
                        id: crate::store::new_run_id(),
                        agent,
                        trigger,
                        input: String::new(),
                        model: String::new(),
                        definition_hash: hash,
                        owner: String::new(),
                        fire,
                        state: RunState::Queued,
                        template_context: None,
                        session_id: None,
                    };
                    let message = snapshot.redactor.redact(&message).into_owned();
                    return self.record_unrun(run, RunState::Failed, message).await;
                }
                Err(message) => return Err(SubmitError::Invalid(message)),
            };
        let id = prepared.id().to_string();
        let hub = Arc::new(Hub::default());
        let elsewhere = self.elsewhere(&agent, schedule.as_ref(), overlap).await?;
        let (skip_reason, slot) = self.enter(&agent, &id, schedule, &hub, overlap, &elsewhere)?;
        if skip_reason.is_none() && overlap == Some(OnOverlap::Replace) {
            self.replace_elsewhere(&agent, &elsewhere.replaced).await;
        }
        if let Some(reason) = skip_reason {
            return self
                .record_unrun(
                    prepared.new_run(RunState::Queued),
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
        let run = prepared.new_run(claimed_as);
        if slot
            && fire.is_none()
            && delivery.is_none()
            && trigger_claim.is_none()
            && matches!(prepared, Job::Agent(_))
        {
            // Nothing decides between runs here: the claim commits while
            // the run's first model call is out (`crate::run::claim`), and the
            // caller still gets the record only once it is durable. A
            // claim that fails ends the run, which `drive` cleans up.
            let claim = PendingClaim::start(&self.store, run);
            self.start_driving(prepared, hub, slot, Some(claim.clone()));
            return claim.record().await.map_err(SubmitError::Store);
        }
        let claimed = match (&delivery, trigger_claim) {
            (Some(delivery), _) => {
                self.store
                    .claim_run_for_delivery(run, delivery, self.clock.now())
                    .await
            }
            (None, Some(what)) => {
                self.store
                    .claim_run_for_trigger(run, what, self.clock.now())
                    .await
            }
            (None, None) => self.store.claim_run(run).await.map(Some),
        };
        let record = match claimed {
            Ok(Some(record)) => record,
            Ok(None) => {
                self.forget(&id, slot);
                return Err(if delivery.is_some() {
                    SubmitError::DuplicateDelivery
                } else {
                    SubmitError::AlreadyTriggered
                });
            }
            Err(e) => {
                self.forget(&id, slot);
                return Err(match e {
                    StoreError::FireTaken { .. } => SubmitError::AlreadyFired,
                    other => SubmitError::Store(other),
                });
            }
        };
        self.start_driving(prepared, hub, slot, None);
        Ok(record)
    }

    /// Hands a run entered by `submit` to [`drive`](Self::drive), on a task
    /// of the tracker.
    fn start_driving(
        self: &Arc<Self>,
        prepared: Job,
        hub: Arc<Hub>,
        slot: bool,
        claim: Option<PendingClaim>,
    ) {
        self.publish_counts();
        let this = self.clone();
        self.tracker
            .spawn(async move { this.drive(prepared, hub, slot, claim).await });
    }

    /// Decides overlap and enters the run under one lock, so two fires
    /// cannot both see the agent idle: `(Some(reason), _)` when it is to be
    /// recorded skipped (not entered), else whether it took a slot.
    fn enter(
        &self,
        agent: &str,
        id: &str,
        schedule: Option<ScheduleKey>,
        hub: &Arc<Hub>,
        overlap: Option<OnOverlap>,
        elsewhere: &Elsewhere,
    ) -> Result<(Option<String>, bool), SubmitError> {
        let mut state = self.lock();
        if !state.accepting {
            return Err(SubmitError::ShuttingDown);
        }
        let in_flight: Vec<String> = state.by_agent.get(agent).cloned().unwrap_or_default();
        // The newest run in flight, here or (failing that) on another node.
        let newest = in_flight.last().map(|id| format!("run {id}")).or_else(|| {
            elsewhere
                .newest
                .as_ref()
                .map(|(id, node)| format!("run {id} (on node {node})"))
        });
        let mut held = false;
        if let (Some(policy), Some(newest)) = (overlap, newest) {
            match policy {
                OnOverlap::Skip => {
                    return Ok((
                        Some(format!(
                            "skipped: {newest} of this agent was still in flight (on_overlap: skip)"
                        )),
                        false,
                    ));
                }
                OnOverlap::Queue => {
                    let held_here = in_flight.iter().any(|id| state.runs[id].held);
                    if held_here || elsewhere.queued_fire.is_some() {
                        return Ok((
                            Some(format!(
                                "skipped: a run of this agent is already queued behind {newest} (on_overlap: queue holds one)"
                            )),
                            false,
                        ));
                    }
                    held = true;
                }
                OnOverlap::Replace => {
                    for other in &in_flight {
                        let live = &state.runs[other];
                        if replaced_by(live, schedule.as_ref()) {
                            tracing::info!(run = %other, agent = %agent, "cancelled: replaced by a newer fire of the same schedule (on_overlap: replace)");
                            live.cancel.cancel();
                        }
                    }
                }
                OnOverlap::Allow => {}
            }
        }
        // A run that need not wait takes its slot now and is claimed
        // `running`: one commit fewer than queued, then started.
        let slot = !held && state.running < state.limit;
        if slot {
            state.running += 1;
        }
        let mut live = self.live(agent, schedule, hub, held);
        live.slot = slot;
        state.insert(id, live);
        Ok((None, slot))
    }

    /// Enters a run that waits for its turn like a queued one.
    fn enter_waiting(
        &self,
        agent: &str,
        id: &str,
        schedule: Option<ScheduleKey>,
        hub: &Arc<Hub>,
    ) -> Result<(), SubmitError> {
        let mut state = self.lock();
        if !state.accepting {
            return Err(SubmitError::ShuttingDown);
        }
        state.insert(id, self.live(agent, schedule, hub, false));
        Ok(())
    }

    fn live(&self, agent: &str, schedule: Option<ScheduleKey>, hub: &Arc<Hub>, held: bool) -> Live {
        Live {
            agent: agent.to_string(),
            schedule,
            cancel: self.root.child_token(),
            hub: hub.clone(),
            held,
            slot: false,
            waiting_approval: false,
            moved: false,
        }
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
    async fn drive(
        self: Arc<Self>,
        prepared: Job,
        hub: Arc<Hub>,
        claimed_running: bool,
        claim: Option<PendingClaim>,
    ) {
        let id = prepared.id().to_string();
        let agent = prepared.agent().to_string();
        let Some((cancel, held)) = self
            .lock()
            .runs
            .get(&id)
            .map(|l| (l.cancel.clone(), l.held))
        else {
            if claimed_running {
                self.release_slot();
            }
            return;
        };
        let started = std::time::Instant::now();
        let origin = prepared.origin();
        let state = if claimed_running
            || ((!held || self.wait_elsewhere(&agent, &id, &cancel).await)
                && self.wait_turn(&id, &cancel).await)
        {
            self.run(prepared, &hub, cancel, claimed_running, claim.as_ref())
                .await
        } else if self.lock().runs.get(&id).is_some_and(|l| l.moved) {
            None
        } else {
            self.cancel_waiting(&id).await
        };
        hub.finish();
        {
            // The slot (if one was taken) was released by `run`.
            let mut s = self.lock();
            s.remove(&id);
            if let Some(state) = state {
                let health = s.health.entry(agent.clone()).or_default();
                // `interrupted` is not a failure (and not a success).
                match state {
                    RunState::Succeeded => *health = Health::default(),
                    RunState::Failed | RunState::TimedOut => {
                        health.consecutive_failures += 1;
                        health.last_failure = Some(self.clock.now());
                    }
                    _ => {}
                }
            }
        }
        if let Some(state) = state.filter(|s| s.is_final()) {
            self.metrics
                .run_finished(&agent, state.as_str(), started.elapsed());
        }
        self.wake();
        self.publish_counts();
        // A run suspended while waiting for approval has not ended.
        if let Some(state) = state.filter(|s| s.is_final())
            && let Some(on_end) = self.on_end.get()
        {
            let ended = RunEnded {
                run_id: id,
                agent,
                state,
                origin,
            };
            on_end.ended(&self, ended).await;
        }
    }

    /// Records `cancelled` a run cancelled while it waited for its turn
    /// here. One another node took over meanwhile is not this process's to
    /// record: the cancel request goes to that node. `None` then.
    async fn cancel_waiting(&self, id: &str) -> Option<RunState> {
        let me = crate::run::owner::this_process();
        match self
            .store
            .cancel_queued(id, me, "cancelled while queued")
            .await
        {
            Ok(true) => Some(RunState::Cancelled),
            Ok(false) => {
                tracing::info!(run = %id, "cancelled here while another node had taken it over; asking that node to cancel it");
                if let Err(e) = self.store.request_cancel(id).await {
                    tracing::error!(run = %id, "cannot pass the cancel request on: {e}");
                }
                None
            }
            Err(e) => {
                tracing::error!(run = %id, "cannot record the cancellation: {e}");
                Some(RunState::Cancelled)
            }
        }
    }

    /// Runs a run holding a slot (starting it in the store unless it was
    /// claimed `running`, or is being claimed so: `claim`); releases the
    /// slot. The final state, or `None` if the run could not even be
    /// started in the store.
    async fn run(
        &self,
        prepared: Job,
        hub: &Arc<Hub>,
        cancel: CancellationToken,
        claimed_running: bool,
        claim: Option<&PendingClaim>,
    ) -> Option<RunState> {
        let id = prepared.id().to_string();
        let agent = prepared.agent().to_string();
        self.publish_counts();
        let started = if claimed_running || prepared.resumed() {
            Ok(true)
        } else {
            self.store
                .start_run(&id, crate::run::owner::this_process())
                .await
        };
        let result = match started {
            Ok(true) => {
                let mut sink = HubSink {
                    hub: hub.clone(),
                    metrics: self.metrics.clone(),
                    run: RunEvents::new(&agent, prepared.model()),
                };
                let services = RunServices {
                    approvals: &self.approvals,
                    notifier: &self.notifier,
                    slots: Some(self),
                    closing: Some(&self.closing),
                    claim,
                };
                let outcome =
                    run_claimed_with(prepared, &self.store, cancel, &mut sink, services).await;
                match outcome {
                    Ok(outcome) => Some(outcome.state),
                    Err(e) => {
                        match claim {
                            // The caller of `submit` was told.
                            Some(claim) if claim.wait().await.is_err() => {
                                tracing::debug!(run = %id, "not run: its claim failed: {e}");
                            }
                            _ => tracing::error!(run = %id, "the run's record is incomplete: {e}"),
                        }
                        None
                    }
                }
            }
            Ok(false) => {
                // Cancelled while queued, or another node with a free slot
                // took it over (its events are read from the store then).
                tracing::debug!(run = %id, "not started here: no longer queued under this process");
                None
            }
            Err(e) => {
                tracing::error!(run = %id, "cannot start the run: {e}");
                None
            }
        };
        self.release_slot_of(&id, false);
        result
    }

    fn publish_counts(&self) {
        let (running, queued, waiting) = {
            let s = self.lock();
            let (running, queued) = s.counts();
            (running, queued, s.waiting_approval())
        };
        self.metrics.set_runs_in_flight(running);
        self.metrics.set_runs_queued(queued);
        self.metrics.set_runs_waiting_approval(waiting);
    }

    /// Another node took over run `id`, queued here: if it still waits for
    /// a slot here, it stops waiting, without recording anything (its end
    /// is the other node's), and its live subscribers go on reading the
    /// store.
    pub fn moved(&self, id: &str) {
        let mut s = self.lock();
        let Some(live) = s.runs.get_mut(id) else {
            return;
        };
        if live.slot || live.waiting_approval {
            // Holding a slot here: its start checks the owner in the store,
            // which decides.
            return;
        }
        tracing::info!(run = %id, "another node took over this queued run");
        // Marked before the wake-up, under the lock `drive` reads it with.
        live.moved = true;
        live.cancel.cancel();
    }

    /// Cancels a queued or running run of this process.
    pub fn cancel(&self, run_id: &str) -> CancelOutcome {
        match self.lock().runs.get(run_id) {
            Some(live) if live.cancel.is_cancelled() => CancelOutcome::AlreadyCancelling,
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
        self.closing.cancel();
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
    run: RunEvents,
}

impl RunSink for HubSink {
    fn event(&mut self, seq: i64, event: &RunEvent) {
        self.metrics.observe_event(&mut self.run, event);
        self.hub.publish(seq, event);
    }

    fn committed(&mut self, last_seq: i64) {
        self.hub.committed(last_seq);
    }

    fn metrics(&self) -> Option<Arc<Metrics>> {
        Some(self.metrics.clone())
    }
}

#[cfg(test)]
mod tests;
