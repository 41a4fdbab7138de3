//! The cross-checks of a pipeline (`steps:`) that need more than its own
//! file: each agent step names an agent of the project that is not a
//! pipeline itself, and each tool step calls a known tool its `tools:`
//! allows. An agent step that runs with less than its own file says (the
//! pipeline's limits, [`super::ceiling`]) gets a warning saying what.
//! May depend on `config` and `tools`.

use std::collections::BTreeMap;

use crate::config::steps::step_place;
use crate::config::{Agent, Diagnostic};
use crate::tools::{ToolRegistry, glob_match};

/// The problems of `agent`'s steps against `agents` and `tools` (none for
/// an agent without steps).
pub fn check_pipeline(
    agent: &Agent,
    agents: &BTreeMap<String, Agent>,
    tools: &ToolRegistry,
) -> Vec<Diagnostic> {
    let Some(pipeline) = &agent.steps else {
        return Vec::new();
    };
    let mut diags = Vec::new();
    let err = |step: &str, field: &str, msg: String| {
        Diagnostic::error(&agent.path, step_place(&agent.text, step, Some(field)), msg)
    };
    for (step, name) in pipeline.agents() {
        match agents.get(name) {
            None => {
                let known: Vec<&str> = agents
                    .values()
                    .filter(|a| a.steps.is_none())
                    .map(|a| a.name.as_str())
                    .collect();
                diags.push(err(
                    &step.id,
                    "agent",
                    format!(
                        "step `{}`: no agent named {name:?} in agents/ (or its file has errors); agents: {}",
                        step.id,
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                ));
            }
            Some(other) if other.steps.is_some() => diags.push(err(
                &step.id,
                "agent",
                format!(
                    "step `{}`: {name:?} is a pipeline; a step runs an agent with a prompt, so list its steps here instead",
                    step.id
                ),
            )),
            Some(callee) => {
                let lost = super::ceiling::tightened(agent, callee, tools);
                if !lost.is_empty() {
                    diags.push(Diagnostic::warning(
                        &agent.path,
                        step_place(&agent.text, &step.id, Some("agent")),
                        format!(
                            "step `{}`: `{name}` runs under the pipeline's limits too: {}; a step never gets more than its pipeline allows",
                            step.id,
                            lost.join("; ")
                        ),
                    ));
                }
            }
        }
    }
    for (step, tool) in pipeline.tools() {
        if !agent.tools.iter().any(|p| glob_match(p, tool)) {
            diags.push(err(
                &step.id,
                "tool",
                format!(
                    "step `{}`: tool {tool:?} is not allowed: add it to the pipeline's `tools:` list",
                    step.id
                ),
            ));
        } else if tools.get(tool).is_none() {
            let known: Vec<&str> = tools.names().collect();
            diags.push(err(
                &step.id,
                "tool",
                format!(
                    "step `{}`: unknown tool {tool:?}; known tools: {}",
                    step.id,
                    known.join(", ")
                ),
            ));
        }
    }
    diags
}
