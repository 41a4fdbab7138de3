//! One run from request to stored outcome: resolve the agent from a
//! snapshot (model, provider, tools, rendered templates), claim the run row
//! (durable before the first tool call; [`execute`] lets the commit
//! overlap the first model call, see `pending_claim`), drive the engine,
//! stream its events and commit them as each step completes (`run_events`),
//! record the final state.

use std::sync::Arc;
use std::time::Duration;

use backon::Retryable;
use tokio_util::sync::CancellationToken;

use crate::config::EnvLookup;
use crate::config::approval::{ApprovalConfig, NotifyEvent};
use crate::config::{MemoryConfig, SkillsChoice};
use crate::engine::{
    self, ActiveSkills, DaySpending, Parts, RecalledBlock, RunOutcome, RunSpec, SharedSpend,
};
use crate::llm::Provider;
use crate::llm::retry::RetryPolicy;
use crate::redact::Redactor;
use crate::registry::{Snapshot, provider_for};
use crate::skills::{Skill, select_skills, skills_message};
use crate::store::{
    Fire, NewRun, RunEnd, RunParent, RunRecord, Store, StoreError, TriggerClaim, new_run_id,
};
use crate::tools::ToolSet;
use crate::tools::sandbox::Sandbox;
use crate::types::{RecalledMemory, RunEvent, RunState, ScheduleId};

use super::agent_tool::SubAgents;
use super::approvals::{Approvals, RunGate, Slots};
use super::claim::PendingClaim;
use super::events::{RunSink, append_retrying, batch_backoff, durable, is_transient, record};
use super::notify::{Notice, Notifier};
use super::recorder::Recorder;
use super::template::{RequestVars, TriggerVars, render};
use super::traced::{TracedRun, TracedSink};

/// A request to run an agent.
#[derive(Debug, Clone, Default)]
pub struct RunRequest {
    pub agent: String,
    /// The input; `None` renders the schedule's `input` for a scheduled
    /// fire, else the agent's `prompt`.
    pub input: Option<String>,
    /// Overrides the agent's model (`--model`).
    pub model: Option<String>,
    /// What started the run: `cli`, `schedule`, `api`, `webhook`, `retry`,
    /// `after` (another run ended), `watch` (a file).
    pub trigger: String,
    /// `{{ vars.X }}` in the templates.
    pub vars: serde_json::Map<String, serde_json::Value>,
    /// `{{ payload }}` in the templates: a webhook's JSON body.
    pub payload: Option<serde_json::Value>,
    /// `{{ event }}` in the templates: a webhook's event name.
    pub event: Option<String>,
    /// `{{ headers.X }}` in the templates: a webhook's headers, names in
    /// lowercase.
    pub headers: std::collections::BTreeMap<String, String>,
    /// The scheduled fire this run is for (its `schedule_id` is
    /// [`RunRequest::schedule_id`]).
    pub fire: Option<Fire>,
    /// The schedule that started the run (scheduled fires only): its
    /// `input` is rendered when `input` is `None`. What tells runs of one
    /// schedule from those of another (`on_overlap: replace`).
    pub schedule_id: Option<ScheduleId>,
    /// The webhook delivery id that started it: remembered in the
    /// transaction that claims the run, so a delivery runs at most once and
    /// one whose run could not be claimed can be delivered again.
    pub delivery: Option<String>,
    /// The id of a run already claimed (`queued`) that this request takes
    /// over after a crash; `None`: a new run with a new id.
    pub run_id: Option<String>,
    /// The run's end or the file that started it (`after:`, `watch:`):
    /// `{{ trigger }}` in the templates, and the entry whose `input`
    /// renders when `input` is `None`.
    pub origin: Option<TriggerVars>,
    /// What the run is for, remembered in the transaction that claims it,
    /// so it happens at most once (a follow-up, a file version).
    pub claim: Option<TriggerClaim>,
    /// The run that starts this one (an agent called as a tool, a pipeline
    /// step) and the new run's depth; `None` for a run started by a trigger.
    pub parent: Option<RunParent>,
}

impl RunRequest {
    /// The request that runs `run`, a run accepted `queued`, again (taken
    /// over after a crash or from a busy node, or a pipeline resumed): its
    /// id, input, model and trigger, and the template variables it was
    /// accepted with (`context`, [`RequestVars::to_stored`]).
    pub fn again(run: &RunRecord, context: Option<&str>) -> RunRequest {
        let stored = RequestVars::stored(context);
        RunRequest {
            agent: run.agent.clone(),
            input: Some(run.input.clone()),
            model: Some(run.model.clone()).filter(|m| !m.is_empty()),
            trigger: run.trigger.clone(),
            vars: stored.vars,
            payload: stored.payload,
            event: stored.event,
            headers: stored.headers,
            origin: stored.trigger,
            run_id: Some(run.id.clone()),
            ..RunRequest::default()
        }
    }
}

/// A run resolved and ready to start.
pub struct PreparedRun {
    pub spec: RunSpec,
    /// The scheduled fire it is for, claimed with the run.
    pub fire: Option<Fire>,
    /// The agent's memory settings: recall and tools happen in `execute`,
    /// which has the store.
    pub memory: MemoryConfig,
    pub provider: Arc<dyn Provider>,
    pub tools: ToolSet,
    pub retry: RetryPolicy,
    /// Where the agent's day starts for its daily budget: the time zone of
    /// its first schedule, else UTC.
    pub timezone: chrono_tz::Tz,
    /// The snapshot's secrets, redacted from what the run stores, streams
    /// and shows the model.
    pub redactor: Arc<Redactor>,
    /// The request's template variables as JSON (redacted; see
    /// [`RequestVars::to_stored`]) when it had any: stored while the run is
    /// queued, so it can be taken over.
    pub template_context: Option<String>,
    /// The agent's `approve:`, `approval_timeout:` and `notify:`.
    pub approval: ApprovalConfig,
    /// The run's end or file that started it.
    pub origin: Option<TriggerVars>,
    /// The run that started this one, and this one's depth.
    pub parent: Option<RunParent>,
    /// The agents it may call as tools (its `agents:`).
    pub sub_agents: Option<SubAgents>,
}

/// Resolves `request` against `snapshot`. Errors say what to do.
pub fn prepare(
    snapshot: &Snapshot,
    request: RunRequest,
    env: EnvLookup,
) -> Result<PreparedRun, String> {
    // Only an agent that calls others keeps the snapshot for its sub-runs.
    prepare_with(snapshot, &|| Arc::new(snapshot.clone()), request, env)
}

/// [`prepare`] on a snapshot already shared (a sub-run's).
pub fn prepare_shared(
    snapshot: &Arc<Snapshot>,
    request: RunRequest,
    env: EnvLookup,
) -> Result<PreparedRun, String> {
    prepare_with(snapshot, &|| snapshot.clone(), request, env)
}

fn prepare_with(
    snapshot: &Snapshot,
    shared: &dyn Fn() -> Arc<Snapshot>,
    request: RunRequest,
    env: EnvLookup,
) -> Result<PreparedRun, String> {
    let project = &snapshot.project;
    let Some(agent) = project.agents.get(&request.agent) else {
        let names: Vec<&str> = project.agents.keys().map(String::as_str).collect();
        return Err(format!(
            "no agent named `{}` in agents/ (agents: {})",
            request.agent,
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ));
    };
    let model = request.model.clone().unwrap_or_else(|| agent.model.clone());
    let (provider, model_name) = provider_for(&model, &project.settings, &snapshot.http, env)?;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let vars = RequestVars {
        vars: request.vars,
        payload: request.payload,
        event: request.event,
        headers: request.headers,
        trigger: request.origin.clone(),
    };
    let render = |template: &str, input: &str| render(template, &agent.name, &now, input, &vars);
    let schedule_input = request
        .schedule_id
        .as_ref()
        .and_then(|id| agent.triggers.schedule(id))
        .and_then(|s| s.input.as_deref())
        .or_else(|| trigger_input(agent, request.origin.as_ref()));
    let input = match (request.input, schedule_input, &agent.prompt) {
        (Some(input), _, _) => input,
        (None, Some(template), _) => render(template, "").map_err(|e| {
            format!(
                "{}: cannot render the `input` of the schedule, `after` or `watch` entry: {e}",
                agent.path.display()
            )
        })?,
        (None, None, Some(prompt)) => render(prompt, "")
            .map_err(|e| format!("{}: cannot render `prompt`: {e}", agent.path.display()))?,
        (None, None, None) => {
            return Err(format!(
                "agent `{}` has no `prompt`, so a run needs an input: pass --input TEXT (or --input - to read stdin)",
                agent.name
            ));
        }
    };
    let system = agent
        .system
        .as_deref()
        .map(|s| render(s, &input))
        .transpose()
        .map_err(|e| format!("{}: cannot render `system`: {e}", agent.path.display()))?;
    let skills = resolve_skills(&snapshot.skills, &agent.skills, &input)?;
    let price = project.settings.prices.get(&model).copied();
    let template_context =
        (!vars.is_empty()).then(|| snapshot.redactor.redact(&vars.to_stored()).into_owned());
    let run_id = request.run_id.unwrap_or_else(new_run_id);
    let depth = request.parent.as_ref().map_or(0, |p| p.depth);
    let sub_agents = (!agent.agents.is_empty())
        .then(|| SubAgents::resolve(&shared(), agent, depth, env))
        .flatten();
    let sandbox = Sandbox::for_run(agent.sandbox, &project.root, &run_id);
    let spec = RunSpec {
        run_id,
        agent: agent.name.clone(),
        model,
        model_name,
        trigger: request.trigger,
        definition_hash: agent.hash.clone(),
        system,
        input,
        limits: agent.limits.clone(),
        temperature: agent.temperature,
        max_tokens: agent.max_tokens,
        output_schema: agent.output_schema.clone(),
        price,
        root: project.root.clone(),
        skills,
        memory: None,
        resume: None,
    };
    Ok(PreparedRun {
        timezone: agent
            .triggers
            .schedules
            .first()
            .map_or(chrono_tz::Tz::UTC, |s| s.cron.timezone()),
        fire: request.fire,
        memory: agent.memory.clone(),
        spec,
        provider,
        tools: snapshot.tools.select(&agent.tools).with_sandbox(sandbox),
        retry: RetryPolicy::default(),
        redactor: snapshot.redactor.clone(),
        template_context,
        approval: agent.approval.clone(),
        origin: request.origin,
        parent: request.parent,
        sub_agents,
    })
}

/// The `input` template of the `after:` or `watch:` entry of `agent` that
/// `origin` stands for, if it has one.
fn trigger_input<'a>(
    agent: &'a crate::config::Agent,
    origin: Option<&TriggerVars>,
) -> Option<&'a str> {
    match origin? {
        TriggerVars::After {
            agent: ended,
            state,
            ..
        } => agent
            .triggers
            .after
            .iter()
            .find(|a| a.agent == *ended && a.on.matches(*state))
            .and_then(|a| a.input.as_deref()),
        TriggerVars::Watch { .. } => agent.triggers.watch.as_ref()?.input.as_deref(),
    }
}

/// The agent's spending today outside one run, read from the store: runs
/// in progress (in this process or another) count what they have spent so
/// far.
struct AgentDay<'a> {
    store: &'a Store,
    agent: &'a str,
    run_id: &'a str,
    /// Where the agent's day starts.
    timezone: chrono_tz::Tz,
}

impl DaySpending for AgentDay<'_> {
    /// A store that cannot answer is logged and counts as nothing spent:
    /// the run's own spending is still checked.
    fn others_today(&self) -> futures::future::BoxFuture<'_, f64> {
        Box::pin(async move {
            let start = day_start(chrono::Utc::now(), self.timezone);
            match self.store.cost_since(self.agent, start, self.run_id).await {
                Ok(spent) => spent,
                Err(e) => {
                    tracing::error!(
                        agent = self.agent,
                        "cannot read today's spending for the daily budget: {e}"
                    );
                    0.0
                }
            }
        })
    }
}

/// The start of `now`'s day in `timezone`. Where midnight falls in a DST
/// gap, the day starts at the first instant after it; where it repeats, at
/// the earlier one.
fn day_start(
    now: chrono::DateTime<chrono::Utc>,
    timezone: chrono_tz::Tz,
) -> chrono::DateTime<chrono::Utc> {
    let now = now.with_timezone(&timezone);
    let midnight = now
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .expect("midnight exists as a naive time");
    (0..=180)
        .find_map(|m| {
            (midnight + chrono::Duration::minutes(m))
                .and_local_timezone(timezone)
                .earliest()
        })
        .map_or(now.to_utc(), |t| t.to_utc())
}

/// The memories recalled for the run's input. A failed recall is logged and
/// the run goes on without them: memory helps a run, it is not worth failing
/// one for.
async fn recall(store: &Store, memory: &MemoryConfig, spec: &RunSpec) -> Option<RecalledBlock> {
    if memory.recall == 0 {
        return None;
    }
    let recalled = store
        .memory_recall(
            &memory.namespace,
            &spec.input,
            memory.recall,
            0.05,
            chrono::Utc::now(),
        )
        .await;
    match recalled {
        Ok(recalled) if !recalled.is_empty() => Some(RecalledBlock {
            namespace: memory.namespace.clone(),
            block: crate::memory::context_block(&recalled),
            memories: recalled
                .iter()
                .map(|r| RecalledMemory {
                    id: r.memory.id,
                    score: r.score,
                    category: r.memory.category.clone(),
                    content: r.memory.content.clone(),
                })
                .collect(),
        }),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(run = %spec.run_id, "memory recall failed: {e}");
            None
        }
    }
}

/// The skills a run gets: matched against the input (`auto`), named by the
/// agent (`pinned`), or none.
fn resolve_skills(
    all: &[Skill],
    choice: &SkillsChoice,
    input: &str,
) -> Result<Option<ActiveSkills>, String> {
    let chosen: Vec<&Skill> = select_skills(all, choice, input)?
        .into_iter()
        .map(|(skill, _)| skill)
        .collect();
    if chosen.is_empty() {
        return Ok(None);
    }
    let how = if matches!(choice, SkillsChoice::Named(_)) {
        "pinned"
    } else {
        "auto"
    };
    Ok(Some(ActiveSkills {
        names: chosen.iter().map(|s| s.name.clone()).collect(),
        how: how.to_string(),
        message: skills_message(&chosen),
    }))
}

/// A sink that only looks at events (`aurad run`).
struct OnEvent<F>(F);

impl<F: FnMut(&RunEvent) + Send> RunSink for OnEvent<F> {
    fn event(&mut self, _seq: i64, event: &RunEvent) {
        (self.0)(event)
    }
}

/// The run row `prepared` is claimed with: `state` is `running` (start now)
/// or `queued` (start later with [`Store::start_run`]).
pub fn new_run(prepared: &PreparedRun, state: RunState) -> NewRun {
    let spec = &prepared.spec;
    NewRun {
        parent: prepared.parent.clone(),
        id: spec.run_id.clone(),
        agent: spec.agent.clone(),
        trigger: spec.trigger.clone(),
        input: prepared.redactor.redact(&spec.input).into_owned(),
        model: spec.model.clone(),
        definition_hash: spec.definition_hash.clone(),
        owner: super::owner::this_process().to_string(),
        fire: prepared.fire.clone(),
        state,
        template_context: prepared.template_context.clone(),
    }
}

/// Runs `prepared` to its end: claims the run row (as `running`), then
/// [`run_claimed`].
pub async fn execute(
    prepared: PreparedRun,
    store: &Store,
    cancel: CancellationToken,
    on_event: impl FnMut(&RunEvent) + Send,
) -> Result<RunOutcome, StoreError> {
    let claim = PendingClaim::start(store, new_run(&prepared, RunState::Running));
    let outcome = run_alone(
        prepared,
        store,
        cancel,
        &mut OnEvent(on_event),
        Some(&claim),
    )
    .await;
    // A claim that failed is the error, whatever the run then did.
    claim.wait().await?;
    outcome
}

/// Runs `prepared`, whose row is claimed and `running`: streams events to
/// `sink` as they happen and to the store at each step, records the final
/// state. A store failure after the claim does not stop the run: events
/// that could not be stored go with the next batch, the last with the final
/// state, and an error is returned only when that final write fails (then
/// the run's record is incomplete).
pub async fn run_claimed(
    prepared: PreparedRun,
    store: &Store,
    cancel: CancellationToken,
    sink: &mut dyn RunSink,
) -> Result<RunOutcome, StoreError> {
    run_alone(prepared, store, cancel, sink, None).await
}

/// [`run_claimed`] outside the daemon's supervisor, its claim still
/// committing when `claim` is given.
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
    run_claimed_with(prepared, store, cancel, sink, services).await
}

/// What a run uses besides its parts: where approvals are waited for and
/// decided, where `notify:` messages go, and (under the supervisor) how a
/// waiting run gives back its concurrency slot.
pub struct RunServices<'a> {
    pub approvals: &'a Approvals,
    pub notifier: &'a Notifier,
    pub slots: Option<&'a dyn Slots>,
    /// Cancelled when the daemon stops: a run waiting for approval then
    /// stops here and stays `waiting_approval` in the store.
    pub closing: Option<&'a CancellationToken>,
    /// The run's claim, when it is still committing: the run's first model
    /// answer, events and final state wait for it.
    pub claim: Option<&'a PendingClaim>,
}

/// [`run_claimed`] with the daemon's `services`. A run resumed from an
/// approval checkpoint (`spec.resume`) goes on after its stored events.
pub async fn run_claimed_with(
    prepared: PreparedRun,
    store: &Store,
    cancel: CancellationToken,
    sink: &mut dyn RunSink,
    services: RunServices<'_>,
) -> Result<RunOutcome, StoreError> {
    let PreparedRun {
        mut spec,
        memory,
        provider,
        tools,
        retry,
        timezone,
        fire: _,
        redactor,
        template_context: _,
        approval,
        origin: _,
        parent,
        sub_agents,
    } = prepared;
    let mut traced = TracedSink::new(
        sink,
        TracedRun {
            run_id: &spec.run_id,
            agent: &spec.agent,
            model: &spec.model,
            trigger: &spec.trigger,
            parent: parent.as_ref(),
            resumed: spec.resume.is_some(),
        },
    );
    let provider = traced.provider(provider, &spec.model, &redactor);
    let provider = match services.claim {
        Some(claim) => claim.gate(provider),
        None => provider,
    };
    let mut tools = traced.tools(tools, &redactor);
    let sink: &mut dyn RunSink = &mut traced;
    // Events already stored: a resumed run numbers its own after them.
    let stored_seq = match spec.resume {
        Some(_) => store.append_events(&spec.run_id, Vec::new()).await?,
        None => {
            spec.memory = recall(store, &memory, &spec).await;
            0
        }
    };
    let day = AgentDay {
        store,
        agent: &spec.agent,
        run_id: &spec.run_id,
        timezone,
    };
    if memory.tools {
        let bound = crate::memory::memory_tools_with_limit(
            store.clone(),
            memory.namespace.clone(),
            spec.run_id.clone(),
            memory.max_entries,
        );
        for tool in bound {
            tools.add(tool);
        }
    }
    let sub_runs = SharedSpend::default();
    if let Some(sub_agents) = sub_agents {
        for tool in sub_agents.tools(&spec.run_id, store, &sub_runs) {
            tools.add(tool);
        }
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let gate = RunGate {
        approvals: services.approvals,
        store,
        notifier: services.notifier,
        config: &approval,
        run_id: &spec.run_id,
        agent: &spec.agent,
        slots: services.slots,
        closing: services.closing,
    };
    let parts = Parts {
        provider: provider.as_ref(),
        tools: &tools,
        retry,
        spending: Some(&day),
        redactor: &redactor,
        sub_runs: Some(&sub_runs),
        approvals: (!approval.approve.is_empty()).then_some(&gate as _),
    };
    let engine = engine::run(&spec, parts, cancel, tx);
    // Events come redacted: secrets never reach the sink or the store.
    let recorder = Recorder::after(redactor.clone(), stored_seq);
    let record = record(rx, recorder, sink, store, &spec.run_id, services.claim);
    let (mut outcome, last_batch) = tokio::join!(engine, record);
    redact_outcome(&redactor, &mut outcome);
    let state = outcome.state;
    if state == RunState::WaitingApproval {
        // Suspended: no end yet; the run waits on in the store.
        durable(services.claim).await?;
        let last_seq = append_retrying(store, &spec.run_id, &last_batch).await?;
        sink.committed(last_seq);
        return Ok(outcome);
    }
    debug_assert!(state != RunState::Running);
    let end = RunEnd {
        state,
        error: outcome.reason.clone(),
        output: outcome.output.clone(),
        usage: outcome.usage,
        cost_usd: outcome.cost_usd,
        result: outcome.result.clone(),
    };
    durable(services.claim).await?;
    // The final state is retried like a batch: a run left `running` by a
    // passing failure would stay so until the next start.
    let last_seq = (|| store.finish_run_as(&spec.run_id, last_batch.clone(), end.clone()))
        .retry(batch_backoff())
        .sleep(tokio::time::sleep)
        .when(is_transient)
        .notify(|e: &StoreError, wait: Duration| {
            tracing::warn!(run = %spec.run_id, "recording the run's end failed, retrying in {wait:?}: {e}");
        })
        .await?;
    sink.committed(last_seq);
    if let Some(notify) = &approval.notify {
        let event = match state {
            RunState::Failed | RunState::TimedOut => Some((NotifyEvent::Failed, "failed")),
            RunState::BudgetExceeded => Some((NotifyEvent::BudgetExceeded, "budget_exceeded")),
            _ => None,
        };
        if let Some((_, word)) = event.filter(|(kind, _)| notify.wants(*kind)) {
            services.notifier.send(
                notify,
                Notice::ended(
                    word,
                    &spec.agent,
                    &spec.run_id,
                    state,
                    outcome.reason.clone(),
                ),
            );
        }
    }
    Ok(outcome)
}

/// Redacts the texts of a run's outcome (as its events were), before they
/// are stored in the run row or returned.
fn redact_outcome(redactor: &Redactor, outcome: &mut RunOutcome) {
    for text in [&mut outcome.reason, &mut outcome.output]
        .into_iter()
        .flatten()
    {
        redactor.redact_in_place(text);
    }
    if let Some(result) = &mut outcome.result {
        redactor.redact_json(result);
    }
}
