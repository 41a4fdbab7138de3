//! The cross-file checks of `agents:` (other agents callable as tools):
//! every name must be a loaded agent, no agent may reach itself through
//! `agents:` (a static cycle), and the tool an entry becomes
//! (`agent_<name>`) must not collide with a tool the caller already allows.
//! An agent that fails one of them is left out, and so, in turn, is an
//! agent that calls a left-out one; the others load. A callee that runs
//! with less than its own file says (the caller's limits,
//! [`super::ceiling`]) gets a warning saying what it loses.
//! May depend on `config` and `tools`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::config::diag::locate_item;
use crate::config::{Agent, Diagnostic};
use crate::tools::{ToolRegistry, glob_match};

/// Longest tool name the providers accept.
const MAX_TOOL_NAME: usize = 64;

/// The tool name under which `agent` is offered to its callers:
/// `agent_<name>`, cut to the 64 characters providers accept (agent names
/// use only characters tool names allow).
pub fn agent_tool_name(agent: &str) -> String {
    let mut name = format!("agent_{agent}");
    name.truncate(MAX_TOOL_NAME);
    name
}

/// Checks the `agents:` of every agent in `agents`, removes those that fail
/// (and those calling them) and returns the errors, each placed on the
/// `agents:` entry at fault.
pub fn check_sub_agents(
    agents: &mut BTreeMap<String, Agent>,
    tools: &ToolRegistry,
) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    let mut out: BTreeSet<String> = BTreeSet::new();
    for agent in agents.values() {
        for sub in &agent.agents {
            let name = agent_tool_name(sub);
            if let Some(tool) = tools.get(&name)
                && agent.tools.iter().any(|p| glob_match(p, &name))
            {
                diags.push(error(
                    agent,
                    sub,
                    format!(
                        "agents: `{sub}` is offered as the tool `{name}`, but `tools:` also allows {} of that name; rename one or narrow the allow-list",
                        tool.source()
                    ),
                ));
                out.insert(agent.name.clone());
            }
        }
    }
    for cycle in cycles(agents) {
        for (i, member) in cycle.iter().enumerate() {
            let agent = &agents[member];
            let next = &cycle[(i + 1) % cycle.len()];
            let mut path: Vec<&str> = cycle[i..]
                .iter()
                .chain(&cycle[..i])
                .map(String::as_str)
                .collect();
            path.push(member);
            diags.push(error(
                agent,
                next,
                format!(
                    "agents: calling `{next}` makes a cycle {}; an agent may not call itself, directly or through others: remove one of these entries",
                    path.join(" -> ")
                ),
            ));
            out.insert(member.clone());
        }
    }
    // Unknown names, then whoever calls a left-out agent, until none is left.
    loop {
        let known: Vec<&str> = agents
            .keys()
            .filter(|name| !out.contains(*name))
            .map(String::as_str)
            .collect();
        let mut more = Vec::new();
        for agent in agents.values().filter(|a| !out.contains(&a.name)) {
            for sub in &agent.agents {
                let message = if !agents.contains_key(sub) {
                    format!(
                        "agents: no agent named `{sub}` is loaded (agents/{sub}.yaml is missing or has errors); agents: {}",
                        known.join(", ")
                    )
                } else if out.contains(sub) {
                    format!(
                        "agents: `{sub}` is left out because of its errors (see agents/{sub}.yaml), so this agent cannot call it; fix it or remove `{sub}`"
                    )
                } else {
                    continue;
                };
                diags.push(error(agent, sub, message));
                more.push(agent.name.clone());
            }
        }
        if more.is_empty() {
            break;
        }
        out.extend(more);
    }
    for name in &out {
        agents.remove(name);
    }
    for agent in agents.values() {
        for sub in &agent.agents {
            let Some(callee) = agents.get(sub) else {
                continue;
            };
            let lost = super::ceiling::tightened(agent, callee, tools);
            if !lost.is_empty() {
                diags.push(Diagnostic::warning(
                    &agent.path,
                    locate_item(&agent.text, &["agents"], sub),
                    format!(
                        "agents: `{sub}` runs here under this agent's limits too: {}; a call never gets more than its caller allows",
                        lost.join("; ")
                    ),
                ));
            }
        }
    }
    diags
}

fn error(agent: &Agent, entry: &str, message: String) -> Diagnostic {
    Diagnostic::error(
        &agent.path,
        locate_item(&agent.text, &["agents"], entry),
        message,
    )
}

/// Every cycle of the `agents:` graph, once each, as the agents along it
/// (the first is the smallest name, the last calls the first).
fn cycles(agents: &BTreeMap<String, Agent>) -> Vec<Vec<String>> {
    let mut found: Vec<Vec<String>> = Vec::new();
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for start in agents.keys() {
        if seen.contains(start) {
            continue;
        }
        let Some(cycle) = shortest_cycle(agents, start) else {
            continue;
        };
        seen.extend(cycle.iter().cloned());
        found.push(cycle);
    }
    found
}

/// The shortest way from `start` back to itself through `agents:`, if any.
fn shortest_cycle(agents: &BTreeMap<String, Agent>, start: &str) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue: VecDeque<&str> = VecDeque::from([start]);
    while let Some(at) = queue.pop_front() {
        for next in agents.get(at).map(|a| a.agents.as_slice()).unwrap_or(&[]) {
            if next == start {
                let mut cycle = vec![at.to_string()];
                let mut back = at;
                while back != start {
                    back = came_from[back];
                    cycle.push(back.to_string());
                }
                cycle.reverse();
                return Some(cycle);
            }
            if !came_from.contains_key(next.as_str()) && agents.contains_key(next) {
                came_from.insert(next, at);
                queue.push_back(next);
            }
        }
    }
    None
}
