//! `after:` in an agent file: run this agent when a run of another agent
//! ends, filtered by outcome. Parsed per file into [`AfterTrigger`]s; what
//! needs every agent (the named agent exists, no cycle across files) is
//! `after_graph`'s.
//!
//! Depends on `types` and the config helpers only.

use std::path::Path;

use serde_yaml::Value;

use super::agent_name::valid_name;
use super::diag::{Diagnostic, item_places, locate, locate_item};
use super::yaml_value::describe_value;
use crate::types::RunState;

/// `on:` of an `after:` entry: which ends of the other agent's run start
/// this one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AfterOutcome {
    /// The run succeeded (default).
    #[default]
    Succeeded,
    /// The run failed, timed out or went over its budget.
    Failed,
    /// Either of those. A cancelled, interrupted, skipped or missed run
    /// never starts a follow-up.
    Any,
}

impl AfterOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AfterOutcome::Succeeded => "succeeded",
            AfterOutcome::Failed => "failed",
            AfterOutcome::Any => "any",
        }
    }

    /// Whether a run that ended in `state` matches.
    pub fn matches(self, state: RunState) -> bool {
        let failed = matches!(
            state,
            RunState::Failed | RunState::TimedOut | RunState::BudgetExceeded
        );
        match self {
            AfterOutcome::Succeeded => state == RunState::Succeeded,
            AfterOutcome::Failed => failed,
            AfterOutcome::Any => failed || state == RunState::Succeeded,
        }
    }
}

/// One `after:` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AfterTrigger {
    /// The agent whose runs' ends start this one.
    pub agent: String,
    pub on: AfterOutcome,
    /// minijinja template overriding the agent's `prompt` for these runs.
    pub input: Option<String>,
}

/// Parses `after:` (a name, a list of names, or a list of mappings with
/// `agent`, `on`, `input`) of agent `me`, adding every problem to `diags`.
pub(super) fn parse_after(
    me: &str,
    value: &Value,
    path: &Path,
    text: &str,
    diags: &mut Vec<Diagnostic>,
) -> Vec<AfterTrigger> {
    let items: Vec<&Value> = match value {
        Value::Sequence(items) => items.iter().collect(),
        Value::Null => Vec::new(),
        other => vec![other],
    };
    let mut out: Vec<AfterTrigger> = Vec::new();
    let places = item_places(text, "after");
    for (i, item) in items.into_iter().enumerate() {
        let place = match item {
            _ if places.len() > i => places[i],
            Value::String(name) => locate_item(text, &["after"], name),
            Value::Mapping(map) => match map.get("agent").and_then(Value::as_str) {
                Some(name) => locate_item(text, &["after"], name),
                None => locate(text, &["after"]),
            },
            _ => locate(text, &["after"]),
        };
        match parse_entry(item) {
            Ok(entry) if entry.agent == me => diags.push(Diagnostic::error(
                path,
                place,
                format!(
                    "after[{i}]: agent `{me}` cannot run after itself (a run would start the next forever); name another agent"
                ),
            )),
            Ok(entry) => {
                if out.iter().any(|e| e.agent == entry.agent && e.on == entry.on) {
                    diags.push(Diagnostic::error(
                        path,
                        place,
                        format!(
                            "after[{i}]: `{}` with `on: {}` is listed twice: each end would start two runs; remove one",
                            entry.agent,
                            entry.on.as_str()
                        ),
                    ));
                    continue;
                }
                out.push(entry);
            }
            Err(msg) => diags.push(Diagnostic::error(path, place, format!("after[{i}]: {msg}"))),
        }
    }
    out
}

fn parse_entry(item: &Value) -> Result<AfterTrigger, String> {
    let (agent, on, input) = match item {
        Value::String(name) => (name.clone(), AfterOutcome::default(), None),
        Value::Mapping(map) => {
            let mut agent = None;
            let mut on = AfterOutcome::default();
            let mut input = None;
            for (k, v) in map {
                let key = k.as_str().unwrap_or_default();
                let text = || {
                    v.as_str().map(str::to_string).ok_or_else(|| {
                        format!("`{key}` must be a string, not {}", describe_value(v))
                    })
                };
                match key {
                    "agent" => agent = Some(text()?),
                    "on" => {
                        on = match v.as_str() {
                            Some("succeeded") => AfterOutcome::Succeeded,
                            Some("failed") => AfterOutcome::Failed,
                            Some("any") => AfterOutcome::Any,
                            _ => {
                                return Err(format!(
                                    "`on` is {}: expected `succeeded` (the default), `failed` (failed, timed out or over budget) or `any`",
                                    describe_value(v)
                                ));
                            }
                        }
                    }
                    "input" => input = Some(text()?),
                    other => {
                        return Err(format!(
                            "unknown field `{other}`: an `after` entry has `agent`, `on` and `input`"
                        ));
                    }
                }
            }
            let agent = agent.ok_or(
                "`agent` is required: name the agent whose runs start this one, e.g. `- agent: triage`"
                    .to_string(),
            )?;
            (agent, on, input)
        }
        other => {
            return Err(format!(
                "expected an agent name or a mapping with `agent`, `on`, `input`, not {}",
                describe_value(other)
            ));
        }
    };
    if !valid_name(&agent) {
        return Err(format!(
            "{agent:?} is not an agent name (the file stem of agents/NAME.yaml: `[a-z0-9][a-z0-9_-]*`)"
        ));
    }
    if let Some(template) = &input
        && let Err(e) = minijinja::Environment::new().template_from_str(template)
    {
        return Err(format!(
            "template error in `input`: {}",
            e.detail().unwrap_or("syntax error")
        ));
    }
    Ok(AfterTrigger { agent, on, input })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn parse(yaml: &str) -> (Vec<AfterTrigger>, Vec<String>) {
        let map: BTreeMap<String, Value> = serde_yaml::from_str(yaml).unwrap();
        let mut diags = Vec::new();
        let out = parse_after(
            "me",
            &map["after"],
            Path::new("agents/me.yaml"),
            yaml,
            &mut diags,
        );
        (out, diags.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn short_and_long_forms() {
        let (t, d) = parse("after: triage\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(
            t,
            [AfterTrigger {
                agent: "triage".into(),
                on: AfterOutcome::Succeeded,
                input: None
            }]
        );
        let (t, d) = parse("after: [triage, fetch]\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(t.len(), 2);
        let (t, d) = parse(
            "after:\n  - agent: triage\n    on: failed\n    input: \"Notify about: {{ trigger.output }}\"\n",
        );
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(t[0].on, AfterOutcome::Failed);
        assert_eq!(
            t[0].input.as_deref(),
            Some("Notify about: {{ trigger.output }}")
        );
    }

    #[test]
    fn errors_are_placed() {
        let (_, d) = parse(
            "after:\n  - agent: triage\n    on: sometimes\n  - me\n  - { agnt: x }\n  - Bad_Name\n",
        );
        assert_eq!(d.len(), 4, "{d:?}");
        assert!(
            d[0].starts_with(
                "agents/me.yaml:2:5: after[0]: `on` is \"sometimes\": expected `succeeded`"
            ),
            "{d:?}"
        );
        assert!(
            d[1].starts_with("agents/me.yaml:4:5: after[1]: agent `me` cannot run after itself"),
            "{d:?}"
        );
        assert!(d[2].contains("after[2]: unknown field `agnt`"), "{d:?}");
        assert!(
            d[3].starts_with("agents/me.yaml:6:5: after[3]: \"Bad_Name\" is not an agent name"),
            "{d:?}"
        );
    }

    #[test]
    fn outcomes() {
        use RunState::*;
        assert!(AfterOutcome::Succeeded.matches(Succeeded));
        assert!(!AfterOutcome::Succeeded.matches(Failed));
        for s in [Failed, TimedOut, BudgetExceeded] {
            assert!(AfterOutcome::Failed.matches(s));
            assert!(AfterOutcome::Any.matches(s));
        }
        for s in [Cancelled, Interrupted, Skipped, Missed, Queued, Running] {
            assert!(!AfterOutcome::Any.matches(s), "{s:?}");
        }
    }
}
