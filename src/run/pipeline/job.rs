//! [`PipelineJob`]: a pipeline run resolved from a request and ready to
//! run (or resume), and [`StepResult`], what one of its steps came to.

use crate::registry::ceiling::Ceiling;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::steps::Pipeline;
use crate::redact::Redactor;
use crate::registry::Snapshot;
use crate::run::Env;
use crate::run::RunRequest;
use crate::run::template::RequestVars;
use crate::store::{Fire, NewRun, RunRecord};
use crate::types::{RunState, StepState, Trigger, Usage};

/// A pipeline run resolved and ready to run (or resume).
pub struct PipelineJob {
    pub run_id: String,
    pub agent: String,
    pub pipeline: Arc<Pipeline>,
    pub definition_hash: String,
    pub input: String,
    pub trigger: Trigger,
    pub request: RequestVars,
    /// `limits.timeout` of the pipeline: the whole run's.
    pub timeout: Duration,
    pub fire: Option<Fire>,
    /// What agent steps' child runs are prepared from.
    pub snapshot: Arc<Snapshot>,
    pub env: Env,
    pub redactor: Arc<Redactor>,
    /// Taken over from a process that died: its row is `running` already,
    /// and its stored steps are not run again.
    pub resumed: bool,
    /// Cancelled when the daemon stops: a step waiting for approval stops
    /// waiting and the run stays `waiting_approval` in the store, to be
    /// resumed by the next daemon (the supervisor's; `aurad run` has none).
    pub closing: Option<CancellationToken>,
    /// The limits of the runs above this one, if another run started it:
    /// its tool steps and agent steps run under them too.
    pub ceiling: Option<Ceiling>,
}

impl PipelineJob {
    /// `request` as a pipeline run, when its agent is a pipeline.
    pub fn prepare(
        snapshot: &Arc<Snapshot>,
        request: RunRequest,
        env: &Env,
    ) -> Option<Result<PipelineJob, String>> {
        let agent = snapshot.project.agents.get(&request.agent)?;
        let pipeline = agent.steps.clone()?;
        let ceiling = request.ceiling;
        let request_vars = RequestVars {
            vars: request.vars,
            payload: request.payload,
            event: request.event,
            headers: request.headers,
            trigger: request.origin,
            history: Vec::new(),
        };
        let schedule_input = request
            .schedule_id
            .as_ref()
            .and_then(|id| agent.triggers.schedule(id))
            .and_then(|s| s.input.as_deref());
        let input = match (request.input, schedule_input) {
            (Some(input), _) => input,
            (None, Some(template)) => {
                let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                match crate::run::template::render(template, &agent.name, &now, "", &request_vars) {
                    Ok(input) => input,
                    Err(e) => {
                        return Some(Err(format!(
                            "{}: cannot render the schedule's `input`: {e}",
                            agent.path.display()
                        )));
                    }
                }
            }
            (None, None) => String::new(),
        };
        Some(Ok(PipelineJob {
            run_id: request.run_id.unwrap_or_else(crate::store::new_run_id),
            agent: agent.name.clone(),
            pipeline,
            definition_hash: agent.hash.clone(),
            input,
            trigger: request.trigger,
            request: request_vars,
            timeout: agent.limits.timeout,
            fire: request.fire,
            snapshot: snapshot.clone(),
            env: env.clone(),
            redactor: snapshot.redactor.clone(),
            resumed: false,
            closing: None,
            ceiling,
        }))
    }

    /// The pipeline run `run` (stored `running`, taken over from a process
    /// that died) resumed on `snapshot` with its stored `context`; `Err`
    /// when its agent is no longer a pipeline of the project.
    pub fn resume(
        snapshot: &Arc<Snapshot>,
        run: &RunRecord,
        context: Option<&str>,
        env: &Env,
    ) -> Result<PipelineJob, String> {
        let request = RunRequest {
            model: None,
            ..RunRequest::again(run, context)
        };
        match PipelineJob::prepare(snapshot, request, env) {
            Some(Ok(job)) => Ok(PipelineJob {
                resumed: true,
                ..job
            }),
            Some(Err(e)) => Err(e),
            None => Err(format!(
                "agent `{}` is no longer a pipeline in agents/",
                run.agent
            )),
        }
    }

    /// The run row it is claimed with.
    pub fn new_run(&self, state: RunState) -> NewRun {
        NewRun {
            id: self.run_id.clone(),
            agent: self.agent.clone(),
            trigger: self.trigger,
            input: self.redactor.redact(&self.input).into_owned(),
            model: String::new(),
            definition_hash: self.definition_hash.clone(),
            owner: crate::run::owner::this_process().to_string(),
            fire: self.fire.clone(),
            state,
            template_context: self.context(),
            session_id: None,
            parent: None,
        }
    }

    pub(super) fn context(&self) -> Option<String> {
        (!self.request.is_empty())
            .then(|| self.redactor.redact(&self.request.to_stored()).into_owned())
    }
}

/// What one step came to, for the templates of later steps and the run's
/// output.
#[derive(Debug, Clone)]
pub(crate) struct StepResult {
    pub state: StepState,
    pub output: String,
    /// A `for_each` step's outputs, in item order.
    pub outputs: Option<Vec<String>>,
    pub error: Option<String>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
}

impl StepResult {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "state": self.state.as_str(),
            "output": self.output,
            "outputs": self.outputs.clone().unwrap_or_else(|| vec![self.output.clone()]),
            "error": self.error,
        })
    }
}
