//! What `after:` needs of the whole project, checked where the project is
//! assembled: each entry names an agent that has a file in agents/, and no
//! chain of them comes back to where it started. Agents in a cycle are
//! left out with an error naming the cycle at each place; the others load.
//!
//! Depends on the parsed agents and the config helpers only.

use std::collections::{BTreeMap, BTreeSet};

use super::agent::Agent;
use super::diag::{Diagnostic, locate_item};

/// Checks the `after:` entries of every loaded agent against the project:
/// each names an agent that has a file in agents/ (`files`: the names of
/// those, loaded or not), and no chain of them comes back to where it
/// started. Agents naming a missing agent, and every agent in a cycle, are
/// removed from `agents` with a located error each.
pub fn check_after(
    agents: &mut BTreeMap<String, Agent>,
    files: &[String],
    diagnostics: &mut Vec<Diagnostic>,
) {
    let mut broken = BTreeSet::new();
    for agent in agents.values() {
        for (i, after) in agent.triggers.after.iter().enumerate() {
            if !files.contains(&after.agent) {
                let known: Vec<&str> = files.iter().map(String::as_str).collect();
                diagnostics.push(Diagnostic::error(
                    &agent.path,
                    locate_item(&agent.text, &["after"], &after.agent),
                    format!(
                        "after[{i}]: there is no agent `{}` in agents/ (agents: {}); name one of them",
                        after.agent,
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                ));
                broken.insert(agent.name.clone());
            }
        }
    }
    for cycle in cycles(agents) {
        let shown = cycle
            .iter()
            .chain(cycle.first())
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" -> ");
        for (i, name) in cycle.iter().enumerate() {
            let agent = &agents[name];
            // `name` runs after the previous agent of the cycle's order
            // reversed: edges go from a follower to what it follows.
            let follows = &cycle[(i + 1) % cycle.len()];
            diagnostics.push(Diagnostic::error(
                &agent.path,
                locate_item(&agent.text, &["after"], follows),
                format!(
                    "`after:` makes a cycle: {shown} (each runs after the next), so one run would start the others forever; remove `{follows}` from `after` here or break the cycle in another of these files"
                ),
            ));
            broken.insert(name.clone());
        }
    }
    for name in broken {
        agents.remove(&name);
    }
}

/// The cycles of the "runs after" graph (an edge from each agent to each
/// agent it names in `after:`), each once, as the agents in edge order
/// starting from its smallest name.
fn cycles(agents: &BTreeMap<String, Agent>) -> Vec<Vec<String>> {
    let edges = |name: &str| -> Vec<String> {
        agents.get(name).map_or_else(Vec::new, |a| {
            let mut next: Vec<String> = a.triggers.after.iter().map(|t| t.agent.clone()).collect();
            next.dedup();
            next
        })
    };
    let mut found: Vec<Vec<String>> = Vec::new();
    let mut in_cycle: BTreeSet<String> = BTreeSet::new();
    // Depth-first from each agent; a path that comes back to a name on it
    // is a cycle. Agents already in a reported cycle are not reported again.
    for start in agents.keys() {
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), edges(start))];
        let mut on_path: Vec<String> = vec![start.clone()];
        let mut seen: BTreeSet<String> = BTreeSet::from([start.clone()]);
        while let Some((_, next)) = stack.last_mut() {
            let Some(n) = next.pop() else {
                stack.pop();
                on_path.pop();
                continue;
            };
            if let Some(at) = on_path.iter().position(|p| *p == n) {
                let cycle: Vec<String> = on_path[at..].to_vec();
                if !cycle.iter().any(|c| in_cycle.contains(c)) {
                    let smallest = cycle
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, c)| *c)
                        .map_or(0, |(i, _)| i);
                    let mut rotated = cycle[smallest..].to_vec();
                    rotated.extend_from_slice(&cycle[..smallest]);
                    in_cycle.extend(rotated.iter().cloned());
                    found.push(rotated);
                }
                continue;
            }
            if seen.insert(n.clone()) {
                on_path.push(n.clone());
                let more = edges(&n);
                stack.push((n, more));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_leaves_out_each_agent_in_it_and_names_it_at_each_place() {
        let files: Vec<String> = ["p", "q", "r", "s"].map(String::from).to_vec();
        let mut agents = BTreeMap::new();
        for (name, after) in [("p", "q"), ("q", "r"), ("r", "p"), ("s", "p")] {
            let path = std::path::PathBuf::from(format!("agents/{name}.yaml"));
            let text = format!("model: test\nprompt: hi\nafter: {after}\n");
            let (agent, d) = super::super::agent::parse_agent(name, &path, &text, "h".into());
            assert!(d.is_empty(), "{d:?}");
            agents.insert(name.to_string(), agent.unwrap());
        }
        let mut diags = Vec::new();
        check_after(&mut agents, &files, &mut diags);
        let d: Vec<String> = diags.iter().map(ToString::to_string).collect();
        assert_eq!(d.len(), 3, "{d:?}");
        for (i, (name, follows)) in [("p", "q"), ("q", "r"), ("r", "p")].into_iter().enumerate() {
            assert!(
                d[i].starts_with(&format!(
                    "agents/{name}.yaml:3:8: `after:` makes a cycle: p -> q -> r -> p (each runs after the next), so one run would start the others forever; remove `{follows}`"
                )),
                "{d:?}"
            );
        }
        assert_eq!(agents.keys().collect::<Vec<_>>(), ["s"]);
    }
}
