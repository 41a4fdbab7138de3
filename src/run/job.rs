//! The one way in: [`Job::prepare`] resolves a request (an agent's engine
//! loop, or a pipeline's steps when the agent has `steps:`), and
//! [`execute`] or [`run_claimed`] runs it to its stored end. `aurad run`,
//! the daemon's supervisor, agents called as tools and pipeline steps all
//! start runs here, so every run is claimed, recorded and ended the same
//! way.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::Env;
use super::agent::{RunServices, run_agent};
use super::approvals::Approvals;
use super::claim::PendingClaim;
use super::events::RunSink;
use super::notify::Notifier;
use super::pipeline::{PipelineJob, run_pipeline};
use super::prepare::{PreparedRun, prepare_shared};
use super::request::RunRequest;
use super::template::TriggerVars;
use crate::engine::RunOutcome;
use crate::registry::Snapshot;
use crate::store::{NewRun, Store, StoreError};
use crate::types::{RunEvent, RunState};

/// What a run runs: an agent's engine loop, or a pipeline's steps.
pub enum Job {
    Agent(Box<PreparedRun>),
    Pipeline(Box<PipelineJob>),
}

impl Job {
    /// `request` resolved against `snapshot`: a pipeline when its agent
    /// has `steps:`. Errors say what to do.
    pub fn prepare(
        snapshot: &Arc<Snapshot>,
        request: RunRequest,
        env: &Env,
    ) -> Result<Job, String> {
        if snapshot
            .project
            .agents
            .get(&request.agent)
            .is_some_and(|a| a.steps.is_some())
            && let Some(job) = PipelineJob::prepare(snapshot, request.clone(), env)
        {
            return job.map(|j| Job::Pipeline(Box::new(j)));
        }
        prepare_shared(snapshot, request, &**env).map(|p| Job::Agent(Box::new(p)))
    }

    /// [`Job::prepare`] on a blocking thread, for callers on the runtime:
    /// rendering a run's templates is bounded
    /// ([`TEMPLATE_FUEL`](crate::config::bounds::TEMPLATE_FUEL)) but still
    /// work that must not hold a runtime worker other runs and the API
    /// wait on.
    pub async fn prepare_blocking(
        snapshot: Arc<Snapshot>,
        request: RunRequest,
        env: Env,
    ) -> Result<Job, String> {
        tokio::task::spawn_blocking(move || Job::prepare(&snapshot, request, &env))
            .await
            .unwrap_or_else(|e| Err(format!("preparing the run failed on its thread: {e}")))
    }

    /// The run's id.
    pub fn id(&self) -> &str {
        match self {
            Job::Agent(p) => &p.spec.run_id,
            Job::Pipeline(p) => &p.run_id,
        }
    }

    pub fn agent(&self) -> &str {
        match self {
            Job::Agent(p) => &p.spec.agent,
            Job::Pipeline(p) => &p.agent,
        }
    }

    /// `provider/model` of the agent (its chain's first), or `pipeline`.
    pub fn model(&self) -> &str {
        match self {
            Job::Agent(p) => &p.spec.model,
            Job::Pipeline(_) => "pipeline",
        }
    }

    /// The run row it is claimed with, in `state` (`running`, or `queued`
    /// to start later).
    pub fn new_run(&self, state: RunState) -> NewRun {
        match self {
            Job::Agent(p) => p.new_run(state),
            Job::Pipeline(p) => p.new_run(state),
        }
    }

    /// The run's end or the file that started it (`after:`, `watch:`).
    pub fn origin(&self) -> Option<TriggerVars> {
        match self {
            Job::Agent(p) => p.origin.clone(),
            Job::Pipeline(p) => p.request.trigger.clone(),
        }
    }

    /// A pipeline taken over after a crash: its row is `running` already.
    pub fn resumed(&self) -> bool {
        matches!(self, Job::Pipeline(p) if p.resumed)
    }

    /// Caps the run's token budget at `remaining` (what a calling run has
    /// left). A pipeline has no budget of its own: each agent step's child
    /// run has its agent's, and what they spend is counted after.
    pub fn cap_tokens(&mut self, remaining: u64) {
        if let Job::Agent(p) = self {
            let own = &mut p.spec.limits.max_tokens_per_run;
            *own = Some(own.map_or(remaining, |own| own.min(remaining)));
        }
    }
}

/// Claims `job`'s run row (`running`) and runs it to its end outside the
/// daemon's supervisor (`aurad run`, an agent called as a tool, a pipeline
/// step), giving each event to `on_event`. An agent's claim commits while
/// its first model call goes on ([`PendingClaim`]); a claim that fails is
/// the error, whatever the run then did.
pub async fn execute(
    job: Job,
    store: &Store,
    cancel: CancellationToken,
    on_event: impl FnMut(&RunEvent) + Send,
) -> Result<RunOutcome, StoreError> {
    let mut sink = OnEvent(on_event);
    match job {
        Job::Agent(prepared) => {
            let claim = PendingClaim::start(store, prepared.new_run(RunState::Running));
            let outcome = run_alone(*prepared, store, cancel, &mut sink, Some(&claim)).await;
            claim.wait().await?;
            outcome
        }
        Job::Pipeline(job) => {
            store.claim_run(job.new_run(RunState::Running)).await?;
            run_pipeline(*job, store, cancel, &mut sink).await
        }
    }
}

/// Runs `job`, whose row is claimed and `running`, outside the daemon's
/// supervisor, streaming its events to `sink`.
pub async fn run_claimed(
    job: Job,
    store: &Store,
    cancel: CancellationToken,
    sink: &mut dyn RunSink,
) -> Result<RunOutcome, StoreError> {
    match job {
        Job::Agent(prepared) => run_alone(*prepared, store, cancel, sink, None).await,
        Job::Pipeline(job) => run_pipeline(*job, store, cancel, sink).await,
    }
}

/// Runs `job`, whose row is claimed (or, `services.claim`, still being
/// claimed), with the daemon's `services`: its approvals, notifier, slots
/// and closing token.
pub async fn run_claimed_with(
    job: Job,
    store: &Store,
    cancel: CancellationToken,
    sink: &mut dyn RunSink,
    services: RunServices<'_>,
) -> Result<RunOutcome, StoreError> {
    match job {
        Job::Agent(prepared) => run_agent(*prepared, store, cancel, sink, services).await,
        Job::Pipeline(mut job) => {
            job.closing = services.closing.cloned();
            run_pipeline(*job, store, cancel, sink).await
        }
    }
}

/// An agent's run with services of its own: approvals read from the
/// store, `notify:` sent from here, no slots, no closing daemon.
async fn run_alone(
    prepared: PreparedRun,
    store: &Store,
    cancel: CancellationToken,
    sink: &mut dyn RunSink,
    claim: Option<&PendingClaim>,
) -> Result<RunOutcome, StoreError> {
    let approvals = Approvals::new(store.clone());
    let services = RunServices {
        approvals: &approvals,
        notifier: &Notifier::default(),
        slots: None,
        closing: None,
        claim,
    };
    run_agent(prepared, store, cancel, sink, services).await
}

/// A sink that only looks at events.
struct OnEvent<F>(F);

impl<F: FnMut(&RunEvent) + Send> RunSink for OnEvent<F> {
    fn event(&mut self, _seq: i64, event: &RunEvent) {
        (self.0)(event)
    }
}
