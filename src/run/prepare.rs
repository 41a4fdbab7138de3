//! Resolving a [`RunRequest`] for an agent against a snapshot into a
//! [`PreparedRun`]: model and provider, the tools it may use (sandboxed),
//! rendered templates, the input, the skills matched against it, and the
//! agents it may call. Nothing here touches the store.

use std::sync::Arc;

use crate::config::approval::ApprovalConfig;
use crate::config::{EnvLookup, ProviderKind};
use crate::config::{HistoryMode, MemoryConfig, SkillsChoice, SkillsMode};
use crate::engine::history::TurnHistory;
use crate::engine::{ActiveSkills, RunSpec};
use crate::llm::Provider;
use crate::llm::limits::Limits;
use crate::llm::retry::RetryPolicy;
use crate::redact::Redactor;
use crate::registry::ceiling::Ceiling;
use crate::registry::{Snapshot, endpoint_for, provider_for};
use crate::skills::{Skill, select_skills, skills_message};
use crate::store::{Fire, NewRun, RunParent, new_run_id};
use crate::tools::ToolSet;
use crate::tools::sandbox::Sandbox;
use crate::types::{FallbackReason, Price, RunState, SkillActivation};

use super::agent_tool::SubAgents;
use super::request::RunRequest;
use super::skill_tool::SkillCatalog;
use super::template::{RequestVars, TriggerVars, render};

/// A run resolved and ready to start.
pub struct PreparedRun {
    pub spec: RunSpec,
    /// The scheduled fire it is for, claimed with the run.
    pub fire: Option<Fire>,
    /// The agent's memory settings: recall and tools happen in `execute`,
    /// which has the store.
    pub memory: MemoryConfig,
    /// The agent's model and the rest of its chain, in order (one model
    /// when the request names one).
    pub models: Vec<PreparedModel>,
    /// When a call moves down the chain.
    pub fallback_on: Vec<FallbackReason>,
    /// Attempts each model but the last gets.
    pub fallback_attempts: u32,
    /// How long a node may go silent before the request slots it holds
    /// are free (`cluster.lease`).
    pub cluster_lease: std::time::Duration,
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
    /// The session it is a turn of: its history is read when it starts.
    pub session: Option<String>,
    /// What the turn does with a history over budget.
    pub history: HistoryMode,
    /// The skills it may load with `load_skill` (`skills.mode: catalog`).
    pub skill_catalog: Option<SkillCatalog>,
}

/// One model of a run's chain, resolved.
pub struct PreparedModel {
    /// `provider/model`, or `test`.
    pub model: String,
    /// The name sent to the provider.
    pub model_name: String,
    pub provider: Arc<dyn Provider>,
    pub price: Option<Price>,
    /// The provider's name in aurad.yaml and the limits its runs share.
    pub provider_name: String,
    /// Tells the provider's gate apart in the process: its name and
    /// endpoint.
    pub gate_key: String,
    pub limits: Limits,
    /// The wire format it is asked in and the base URL it is reached at
    /// (for traces); `None` for `test`.
    pub endpoint: Option<(ProviderKind, String)>,
}

/// Resolves `model` (`provider/model` or `test`) against the settings.
fn prepare_model(
    snapshot: &Snapshot,
    model: &str,
    env: EnvLookup,
) -> Result<PreparedModel, String> {
    let settings = &snapshot.project.settings;
    let (provider, model_name) = provider_for(model, settings, &snapshot.http, env)?;
    let provider_name = model.split_once('/').map_or(model, |(p, _)| p).to_string();
    let config = settings.providers.get(&provider_name);
    let limits = config.map_or_else(Limits::default, |p| Limits {
        concurrent: p.limits.concurrent,
        requests_per_minute: p.limits.requests_per_minute,
        tokens_per_minute: p.limits.tokens_per_minute,
    });
    let gate_key = format!(
        "{provider_name} {}",
        config.and_then(|p| p.base_url.as_deref()).unwrap_or("")
    );
    Ok(PreparedModel {
        model: model.to_string(),
        model_name,
        provider,
        price: settings.prices.get(model).copied(),
        provider_name,
        gate_key,
        limits,
        endpoint: endpoint_for(model, settings, env),
    })
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
    // A model the request names replaces the whole chain.
    let chain: Vec<&str> = match &request.model {
        Some(model) => vec![model.as_str()],
        None => std::iter::once(agent.model.as_str())
            .chain(
                agent
                    .fallback
                    .iter()
                    .flat_map(|f| f.models.iter().map(String::as_str)),
            )
            .collect(),
    };
    let models = chain
        .into_iter()
        .map(|m| prepare_model(snapshot, m, env))
        .collect::<Result<Vec<_>, _>>()?;
    let (model, model_name) = (models[0].model.clone(), models[0].model_name.clone());
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let vars = RequestVars {
        vars: request.vars,
        payload: request.payload,
        event: request.event,
        headers: request.headers,
        trigger: request.origin.clone(),
        // A session's turn reads its history from the session.
        history: match &request.session {
            Some(_) => Vec::new(),
            None => request.history.unwrap_or_default(),
        },
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
    let skill_catalog = SkillCatalog::offered(&snapshot.skills, agent)?;
    let skills = match agent.skills_mode {
        SkillsMode::Inject => resolve_skills(&snapshot.skills, &agent.skills, &input)?,
        SkillsMode::Catalog => skill_catalog.as_ref().map(SkillCatalog::active),
    };
    let price = models[0].price;
    let template_context =
        (!vars.is_empty()).then(|| snapshot.redactor.redact(&vars.to_stored()).into_owned());
    let run_id = request.run_id.unwrap_or_else(new_run_id);
    let depth = request.parent.as_ref().map_or(0, |p| p.depth);
    // A run started by another runs under the strictest of its callers'
    // limits and its own.
    let ceiling = request.ceiling.clone().unwrap_or_default();
    let sub_agents = (!agent.agents.is_empty())
        .then(|| SubAgents::resolve(&shared(), agent, depth, env, &request.ceiling))
        .flatten();
    let tools = agent_tools(snapshot, agent, &ceiling, &run_id);
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
        // A caller's own conversation (`RunRequest::history`); a session's
        // turn gets its history when it starts (`super::agent`).
        history: (!vars.history.is_empty()).then(|| TurnHistory {
            summary: None,
            messages: vars.history.clone(),
            first_seq: 1,
            compact: false,
        }),
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
        fallback_on: agent
            .fallback
            .as_ref()
            .map_or_else(Vec::new, |f| f.on.clone()),
        fallback_attempts: agent.fallback.as_ref().map_or(1, |f| f.attempts),
        models,
        cluster_lease: project.settings.cluster_lease,
        tools,
        retry: RetryPolicy::default(),
        redactor: snapshot.redactor.clone(),
        template_context,
        approval: ceiling.approval(&agent.approval),
        origin: request.origin,
        parent: request.parent,
        sub_agents,
        session: request.session,
        history: agent.history,
        skill_catalog,
    })
}

/// The tools a run `run_id` of `agent` may use under `ceiling`: those its
/// allow-list and every caller's allow, their processes confined by the
/// stricter sandbox, with the variables both pass, and kept from what the
/// daemon depends on (the snapshot's protected files, aurad's private
/// folder). Agent runs and a pipeline's tool steps get theirs here.
pub(crate) fn agent_tools(
    snapshot: &Snapshot,
    agent: &crate::config::Agent,
    ceiling: &Ceiling,
    run_id: &str,
) -> ToolSet {
    let sandbox = Sandbox::for_run(
        ceiling.sandbox(agent.sandbox),
        &snapshot.project.root,
        run_id,
    )
    .passing(&ceiling.pass_env(&agent.pass_env))
    .protecting(&snapshot.protected_files)
    .hiding(&crate::config::private::state_dir(
        &crate::config::process_env,
    ));
    snapshot
        .tools
        .select(&agent.tools)
        .retain(|tool| ceiling.allows(tool))
        .with_sandbox(sandbox)
}

/// The names of every tool a run of `agent` gets now, sorted: those of its
/// `tools` list (built-in, plugins, connected MCP servers'), the memory
/// tools, `load_skill` and the agents it calls.
pub fn agent_tool_names(snapshot: &Snapshot, agent: &crate::config::Agent) -> Vec<String> {
    let mut tools = snapshot.tools.names_matching(&agent.tools);
    if agent.memory.tools {
        tools.extend(crate::memory::memory_tool_names());
    }
    if super::skill_tool::SkillCatalog::offers(&snapshot.skills, agent) {
        tools.push(super::skill_tool::LOAD_SKILL.to_string());
    }
    tools.extend(
        agent
            .agents
            .iter()
            .map(|a| crate::registry::sub_agents::agent_tool_name(a)),
    );
    tools.sort();
    tools
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

/// The skills a run gets injected (`skills.mode: inject`): matched against
/// the input (`auto`), named by the agent (`pinned`), or none.
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
        SkillActivation::Pinned
    } else {
        SkillActivation::Auto
    };
    Ok(Some(ActiveSkills {
        names: chosen.iter().map(|s| s.name.clone()).collect(),
        how,
        message: skills_message(&chosen),
    }))
}

impl PreparedRun {
    /// The run row it is claimed with: `state` is `running` (start now)
    /// or `queued` (start later with [`crate::store::Store::start_run`]).
    pub fn new_run(&self, state: RunState) -> NewRun {
        let prepared = self;
        let spec = &prepared.spec;
        NewRun {
            parent: prepared.parent.clone(),
            id: spec.run_id.clone(),
            agent: spec.agent.clone(),
            trigger: spec.trigger,
            input: prepared.redactor.redact(&spec.input).into_owned(),
            model: spec.model.clone(),
            definition_hash: spec.definition_hash.clone(),
            owner: super::owner::this_process().to_string(),
            fire: prepared.fire.clone(),
            state,
            template_context: prepared.template_context.clone(),
            session_id: prepared.session.clone(),
        }
    }
}
