//! [`Job`]: what a request runs, an agent's engine loop or a pipeline's
//! steps, resolved from a snapshot.

use std::sync::Arc;

use super::Env;
use super::pipeline::PipelineJob;
use super::runner::{PreparedRun, RunRequest, new_run, prepare};
use super::template::TriggerVars;
use crate::registry::Snapshot;
use crate::store::NewRun;
use crate::types::RunState;

/// What a run runs: an agent's engine loop, or a pipeline's steps.
pub enum Job {
    Agent(Box<PreparedRun>),
    Pipeline(Box<PipelineJob>),
}

impl Job {
    /// `request` resolved against `snapshot`: a pipeline when its agent
    /// has `steps:`.
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
        prepare(snapshot, request, &**env).map(|p| Job::Agent(Box::new(p)))
    }

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

    pub fn new_run(&self, state: RunState) -> NewRun {
        match self {
            Job::Agent(p) => new_run(p, state),
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
}
