//! What `aurad replay` and `aurad test` share: an agent loaded without
//! starting its MCP servers or building its provider (no key needed), its
//! run resolved by the run path's own `prepare` (templates, skills,
//! limits), and the tools it gets, answering from a recording. These are
//! not runs: nothing is claimed or stored.

use std::path::Path;

use super::project::{ForAgent, for_agent};
use crate::config::{self, Agent};
use crate::engine::RunSpec;
use crate::registry::{self, Snapshot};
use crate::replay::{RecordedResult, ToolPlan, scripted_toolset};
use crate::run::skill_tool::{LOAD_SKILL, SkillCatalog};
use crate::run::{RunRequest, prepare};
use crate::tools::ToolSet;
use crate::tools::sandbox::Sandbox;
use crate::types::Trigger;

/// Loads agent `name` and what it needs, with the problems that concern
/// it (to be shown); `Err` when it cannot run.
pub fn load_agent(root: &Path, name: &str) -> (ForAgent, Result<Snapshot, String>) {
    let loaded = config::load_one(root, name, &config::process_env);
    let (snapshot, diagnostics) = registry::build(loaded, &config::process_env);
    let report = for_agent(diagnostics, name);
    if report.stops {
        return (report, Err(format!("agents/{name}.yaml has errors")));
    }
    let snapshot = agent_snapshot(root, name, snapshot);
    (report, snapshot)
}

/// `snapshot` when agent `name` is in it and can be replayed.
fn agent_snapshot(root: &Path, name: &str, snapshot: Snapshot) -> Result<Snapshot, String> {
    match snapshot.project.agents.get(name) {
        Some(agent) if agent.steps.is_some() => Err(format!(
            "agent `{name}` is a pipeline (`steps:`): replay and test the agents its steps run"
        )),
        Some(_) => Ok(snapshot),
        None => Err(format!(
            "no agent named `{name}` in {}",
            root.join("agents").display()
        )),
    }
}

/// A run of `agent` resolved as the daemon would, with the agent's model
/// and price but no provider: the caller gives the answers.
pub fn prepare_offline(
    snapshot: &Snapshot,
    agent: &Agent,
    input: Option<String>,
    trigger: Trigger,
) -> Result<(RunSpec, Sandbox), String> {
    // `test` resolves without a key or a connection; the spec then gets
    // the agent's own model back, for its price and the events.
    let request = RunRequest {
        input,
        model: Some("test".into()),
        ..RunRequest::new(&agent.name, trigger)
    };
    let prepared = prepare(snapshot, request, &config::process_env)?;
    let mut spec = prepared.spec;
    spec.model = agent.model.clone();
    spec.model_name = agent
        .model
        .split_once('/')
        .map_or(agent.model.as_str(), |(_, m)| m)
        .to_string();
    spec.price = snapshot.project.settings.prices.get(&agent.model).copied();
    Ok((spec, prepared.tools.sandbox().clone()))
}

/// The agent's tools answering from `recorded`, `real` ones excepted (its
/// `load_skill` too: a real one reads the skills as they are now).
pub fn tools_for(
    snapshot: &Snapshot,
    agent: &Agent,
    recorded: Vec<RecordedResult>,
    real: &[String],
    sandbox: Sandbox,
) -> ToolSet {
    let mut extra: Vec<String> = agent
        .agents
        .iter()
        .map(|a| registry::sub_agents::agent_tool_name(a))
        .collect();
    if agent.memory.tools {
        extra.extend(crate::memory::memory_tool_names());
    }
    // `load_skill` answers from the recording like the others, or runs for
    // real when listed in `real` (it only reads the snapshot's skills).
    let load_skill = SkillCatalog::offered(&snapshot.skills, agent)
        .ok()
        .flatten()
        .filter(|_| real.iter().any(|r| r == LOAD_SKILL));
    if load_skill.is_none() && SkillCatalog::offers(&snapshot.skills, agent) {
        extra.push(LOAD_SKILL.to_string());
    }
    let plan = ToolPlan {
        registry: &snapshot.tools,
        allowed: &agent.tools,
        extra: &extra,
        real,
    };
    let mut tools = scripted_toolset(&plan, recorded).with_sandbox(sandbox);
    if let Some(catalog) = load_skill {
        tools.add(catalog.tool(None));
    }
    tools
}
