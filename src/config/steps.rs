//! `steps:` of a pipeline agent file: the raw serde shape of each step
//! (unknown fields refused) and its conversion into a validated
//! [`Pipeline`]: ids, `needs:` (a plain list is a sequence), the DAG checked
//! for unknown ids and cycles, exactly one of `agent`/`tool`/`template`,
//! template and expression syntax, `for_each`, `retry` and `timeout`.
//! Problems are located in the file. References to other agents and to
//! tools are checked by the registry, which knows them.
//!
//! Depends on `types` only (and the config helpers beside it).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_yaml::Value;

use super::diag::{Diagnostic, offset_to_place};
use super::duration::parse_duration;
use super::yaml_value::describe_value;

/// `concurrency` of a `for_each` step when not given.
pub const DEFAULT_CONCURRENCY: usize = 4;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStep {
    id: String,
    needs: Option<Vec<String>>,
    agent: Option<String>,
    input: Option<String>,
    tool: Option<String>,
    args: Option<Value>,
    template: Option<String>,
    when: Option<String>,
    for_each: Option<String>,
    concurrency: Option<usize>,
    retry: Option<RawRetry>,
    timeout: Option<Value>,
    approve: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    attempts: Option<u32>,
    backoff: Option<Value>,
}

/// A validated pipeline: its steps in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    pub steps: Vec<Step>,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum StepAction {
    /// A run of agent `agent` with the rendered `input` (a child run).
    Agent { agent: String, input: String },
    /// A call of tool `tool` with `args`, each string in it rendered.
    Tool {
        tool: String,
        args: serde_json::Value,
    },
    /// A rendered template: no model, no tool.
    Template(String),
}

/// `retry:` of a step: `attempts` in all (1: no retry), the wait before
/// the second attempt doubling for each later one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    pub attempts: u32,
    pub backoff: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            attempts: 1,
            backoff: Duration::from_secs(1),
        }
    }
}

impl Retry {
    /// The wait after failed attempt `attempt` (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        self.backoff
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(Duration::from_secs(3600))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// `[a-z0-9_-]+`, unique in the pipeline.
    pub id: String,
    /// The steps it waits for (ids of earlier or later steps; no cycles).
    pub needs: Vec<String>,
    pub action: StepAction,
    /// A minijinja expression; false: the step is skipped.
    pub when: Option<String>,
    /// A template rendering the list of items (JSON list, else one per
    /// non-empty line); the step runs once per item.
    pub for_each: Option<String>,
    /// The most items of a `for_each` running at once.
    pub concurrency: usize,
    pub retry: Retry,
    /// Per attempt.
    pub timeout: Option<Duration>,
    /// `approve: true`: the run waits for a person's decision before the
    /// step's first attempt (once, before a `for_each` fans out).
    pub approve: bool,
}

impl Pipeline {
    /// The step with id `id`.
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }

    /// Ids of the steps no other step needs, in file order: their outputs
    /// make the pipeline's.
    pub fn leaves(&self) -> Vec<&str> {
        self.steps
            .iter()
            .filter(|s| !self.steps.iter().any(|o| o.needs.contains(&s.id)))
            .map(|s| s.id.as_str())
            .collect()
    }

    /// The agents its steps run, in file order.
    pub fn agents(&self) -> impl Iterator<Item = (&Step, &str)> {
        self.steps.iter().filter_map(|s| match &s.action {
            StepAction::Agent { agent, .. } => Some((s, agent.as_str())),
            _ => None,
        })
    }

    /// The tools its steps call, in file order.
    pub fn tools(&self) -> impl Iterator<Item = (&Step, &str)> {
        self.steps.iter().filter_map(|s| match &s.action {
            StepAction::Tool { tool, .. } => Some((s, tool.as_str())),
            _ => None,
        })
    }
}

/// Whether `id` is a valid step id (`[a-z0-9_-]+`).
fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// Where step `id`'s `field` (or the step itself) is in `text`: found from
/// the step's `id:` forward, up to the next step.
pub fn step_place(text: &str, id: &str, field: Option<&str>) -> (usize, usize) {
    let steps = text.find("steps:").unwrap_or(0);
    let Some(at) = find_id(text, steps, id) else {
        return offset_to_place(text, steps);
    };
    let Some(field) = field else {
        return offset_to_place(text, at);
    };
    // The step's own text: from the start of its line to the next `- `
    // item at the same or lower indentation (approximated by `- id:`).
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..]
        .find("- id:")
        .map_or(text.len(), |rel| at + rel)
        .max(at);
    let own = &text[line_start..end];
    let key = format!("{field}:");
    let mut search = 0;
    while let Some(rel) = own[search..].find(&key) {
        let pos = search + rel;
        let before = own[..pos].chars().last();
        if before.is_none_or(|c| matches!(c, ' ' | '\t' | '{' | ',' | '\n' | '-')) {
            let value = pos + key.len();
            let skip = own[value..].len() - own[value..].trim_start_matches([' ', '\t']).len();
            return offset_to_place(text, line_start + value + skip);
        }
        search = pos + key.len();
    }
    offset_to_place(text, at)
}

/// The offset of the value of `id: <id>` (plain or quoted) after `from`.
fn find_id(text: &str, from: usize, id: &str) -> Option<usize> {
    let mut search = from;
    while let Some(rel) = text.get(search..)?.find("id:") {
        let key = search + rel;
        let value = key + 3;
        let rest = text[value..].trim_start_matches([' ', '\t']);
        let start = text.len() - rest.len();
        let unquoted = rest.trim_start_matches(['"', '\'']);
        if let Some(after) = unquoted.strip_prefix(id)
            && after
                .chars()
                .next()
                .is_none_or(|c| matches!(c, '"' | '\'' | ',' | '}' | ' ' | '\n' | '\r' | '#'))
            && text[..key]
                .chars()
                .last()
                .is_none_or(|c| matches!(c, ' ' | '\t' | '{' | ',' | '\n' | '-'))
        {
            return Some(start);
        }
        search = value;
    }
    None
}

/// Checks the syntax of template `source` (or, `expression`, of a
/// minijinja expression): the error's detail.
fn template_error(source: &str, expression: bool) -> Option<String> {
    let env = minijinja::Environment::new();
    let result = if expression {
        env.compile_expression(source).map(|_| ())
    } else {
        env.template_from_str(source).map(|_| ())
    };
    result
        .err()
        .map(|e| e.detail().unwrap_or("syntax error").to_string())
}

/// Every string inside `value` (tool arguments).
fn strings(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// Converts the raw steps of the file at `path` with `text` into a
/// [`Pipeline`], pushing every problem found into `diags`.
pub(super) fn parse_steps(
    raw: Vec<RawStep>,
    path: &std::path::Path,
    text: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<Pipeline> {
    let before = diags.len();
    let err = |id: &str, field: Option<&str>, msg: String| {
        Diagnostic::error(path, step_place(text, id, field), msg)
    };
    if raw.is_empty() {
        diags.push(Diagnostic::error(
            path,
            super::diag::locate(text, &["steps"]),
            "`steps` is empty: list at least one step (`- id: NAME` with `agent:`, `tool:` or `template:`)".to_string(),
        ));
        return None;
    }
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, step) in raw.iter().enumerate() {
        if !valid_id(&step.id) {
            diags.push(err(
                &step.id,
                None,
                format!(
                    "steps[{i}]: id {:?} is not valid: use lowercase letters, digits, `_` and `-`",
                    step.id
                ),
            ));
        }
        if seen.insert(&step.id, i).is_some() {
            diags.push(err(
                &step.id,
                None,
                format!(
                    "steps[{i}]: duplicate step id {:?}: every step needs its own id",
                    step.id
                ),
            ));
        }
    }
    let mut steps = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let id = r.id.as_str();
        let needs = match &r.needs {
            Some(needs) => needs.clone(),
            None if i == 0 => Vec::new(),
            None => vec![raw[i - 1].id.clone()],
        };
        for need in &needs {
            if !seen.contains_key(need.as_str()) {
                diags.push(err(
                    id,
                    Some("needs"),
                    format!(
                        "step `{id}`: needs unknown step {need:?} (steps: {})",
                        seen.keys().copied().collect::<Vec<_>>().join(", ")
                    ),
                ));
            } else if need == id {
                diags.push(err(
                    id,
                    Some("needs"),
                    format!("step `{id}` needs itself: remove {need:?} from its `needs`"),
                ));
            }
        }
        let kinds: Vec<&str> = [
            ("agent", r.agent.is_some()),
            ("tool", r.tool.is_some()),
            ("template", r.template.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(k, _)| k)
        .collect();
        if kinds.len() != 1 {
            let what = if kinds.is_empty() {
                "none".to_string()
            } else {
                kinds.join(" and ")
            };
            diags.push(err(
                id,
                None,
                format!("step `{id}` has {what} of `agent`, `tool`, `template`: give exactly one"),
            ));
        }
        if r.input.is_some() && r.agent.is_none() {
            diags.push(err(
                id,
                Some("input"),
                format!("step `{id}`: `input` is for agent steps; a tool step takes `args`"),
            ));
        }
        if r.args.is_some() && r.tool.is_none() {
            diags.push(err(
                id,
                Some("args"),
                format!("step `{id}`: `args` is for tool steps"),
            ));
        }
        let args = match &r.args {
            None => serde_json::Value::Object(Default::default()),
            Some(value @ Value::Mapping(_)) => match serde_json::to_value(value) {
                Ok(json) => json,
                Err(e) => {
                    diags.push(err(
                        id,
                        Some("args"),
                        format!("step `{id}`: `args` cannot be read as JSON: {e}"),
                    ));
                    serde_json::Value::Null
                }
            },
            Some(other) => {
                diags.push(err(
                    id,
                    Some("args"),
                    format!(
                        "step `{id}`: `args` must be a mapping of the tool's arguments, not {}",
                        describe_value(other)
                    ),
                ));
                serde_json::Value::Null
            }
        };
        let mut templates: Vec<(&str, String)> = Vec::new();
        if let Some(input) = &r.input {
            templates.push(("input", input.clone()));
        }
        if let Some(template) = &r.template {
            templates.push(("template", template.clone()));
        }
        if let Some(for_each) = &r.for_each {
            templates.push(("for_each", for_each.clone()));
        }
        let mut arg_strings = Vec::new();
        strings(&args, &mut arg_strings);
        templates.extend(arg_strings.into_iter().map(|s| ("args", s)));
        for (field, source) in &templates {
            if let Some(detail) = template_error(source, false) {
                diags.push(err(
                    id,
                    Some(field),
                    format!("step `{id}`: template error in `{field}`: {detail}"),
                ));
            }
        }
        if let Some(when) = &r.when
            && let Some(detail) = template_error(when, true)
        {
            diags.push(err(
                id,
                Some("when"),
                format!("step `{id}`: `when` is not a valid expression: {detail}"),
            ));
        }
        if r.concurrency.is_some() && r.for_each.is_none() {
            diags.push(err(
                id,
                Some("concurrency"),
                format!(
                    "step `{id}`: `concurrency` caps `for_each` items; this step has no `for_each`"
                ),
            ));
        }
        if r.concurrency == Some(0) {
            diags.push(err(
                id,
                Some("concurrency"),
                format!("step `{id}`: `concurrency` must be at least 1"),
            ));
        }
        let mut retry = Retry::default();
        if let Some(raw_retry) = &r.retry {
            match raw_retry.attempts {
                Some(0) => diags.push(err(
                    id,
                    Some("attempts"),
                    format!("step `{id}`: `retry.attempts` counts every attempt: at least 1"),
                )),
                Some(n) if n > 100 => diags.push(err(
                    id,
                    Some("attempts"),
                    format!("step `{id}`: `retry.attempts` is {n}; at most 100"),
                )),
                Some(n) => retry.attempts = n,
                None => {}
            }
            if let Some(backoff) = &raw_retry.backoff {
                match duration(backoff) {
                    Ok(d) => retry.backoff = d,
                    Err(e) => diags.push(err(
                        id,
                        Some("backoff"),
                        format!("step `{id}`: retry.backoff: {e}"),
                    )),
                }
            }
        }
        let timeout = match &r.timeout {
            None => None,
            Some(value) => match duration(value) {
                Ok(d) if d.is_zero() => {
                    diags.push(err(
                        id,
                        Some("timeout"),
                        format!("step `{id}`: `timeout` must be more than 0"),
                    ));
                    None
                }
                Ok(d) => Some(d),
                Err(e) => {
                    diags.push(err(
                        id,
                        Some("timeout"),
                        format!("step `{id}`: timeout: {e}"),
                    ));
                    None
                }
            },
        };
        let approve = match &r.approve {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(other) => {
                diags.push(err(
                    id,
                    Some("approve"),
                    format!(
                        "step `{id}`: `approve` is {}: write `approve: true` to make the step wait for a person's decision",
                        describe_value(other)
                    ),
                ));
                false
            }
        };
        let action = if let Some(agent) = &r.agent {
            StepAction::Agent {
                agent: agent.clone(),
                input: r.input.clone().unwrap_or_else(|| "{{ input }}".to_string()),
            }
        } else if let Some(tool) = &r.tool {
            StepAction::Tool {
                tool: tool.clone(),
                args,
            }
        } else {
            StepAction::Template(r.template.clone().unwrap_or_default())
        };
        steps.push(Step {
            id: r.id.clone(),
            needs,
            action,
            when: r.when.clone(),
            for_each: r.for_each.clone(),
            concurrency: r.concurrency.unwrap_or(DEFAULT_CONCURRENCY).max(1),
            retry,
            timeout,
            approve,
        });
    }
    if diags.len() == before
        && let Some(cycle) = find_cycle(&steps)
    {
        diags.push(err(
            &cycle[0],
            Some("needs"),
            format!(
                "steps form a cycle through `needs`: {}; a step cannot wait for itself",
                cycle.join(" -> ")
            ),
        ));
    }
    (diags.len() == before).then_some(Pipeline { steps })
}

fn duration(value: &Value) -> Result<Duration, String> {
    match value {
        Value::String(s) => parse_duration(s),
        Value::Number(n) => n
            .as_u64()
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{n} is not a whole number of seconds")),
        other => Err(format!(
            "expected a duration such as 30s or 5m, not {}",
            describe_value(other)
        )),
    }
}

/// A cycle through `needs`, as the ids along it (first repeated last).
fn find_cycle(steps: &[Step]) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        at: usize,
        steps: &[Step],
        marks: &mut [Mark],
        path: &mut Vec<usize>,
    ) -> Option<Vec<String>> {
        marks[at] = Mark::Open;
        path.push(at);
        for need in &steps[at].needs {
            let Some(next) = steps.iter().position(|s| &s.id == need) else {
                continue;
            };
            match marks[next] {
                Mark::Open => {
                    let from = path.iter().position(|&p| p == next).unwrap_or(0);
                    let mut cycle: Vec<String> =
                        path[from..].iter().map(|&p| steps[p].id.clone()).collect();
                    cycle.push(steps[next].id.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(cycle) = visit(next, steps, marks, path) {
                        return Some(cycle);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        marks[at] = Mark::Done;
        None
    }
    let mut marks = vec![Mark::New; steps.len()];
    for start in 0..steps.len() {
        if marks[start] == Mark::New
            && let Some(cycle) = visit(start, steps, &mut marks, &mut Vec::new())
        {
            return Some(cycle);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> (Option<Pipeline>, Vec<String>) {
        let raw: Vec<RawStep> = serde_yaml::from_str::<BTreeMap<String, Vec<RawStep>>>(text)
            .unwrap()
            .remove("steps")
            .unwrap();
        let mut diags = Vec::new();
        let p = parse_steps(raw, Path::new("agents/p.yaml"), text, &mut diags);
        (p, diags.iter().map(|d| d.to_string()).collect())
    }

    #[test]
    fn a_plain_list_is_a_sequence_and_needs_make_a_dag() {
        let (p, d) = parse(
            "steps:\n  - id: a\n    template: x\n  - id: b\n    template: y\n  - id: c\n    needs: []\n    template: z\n  - id: d\n    needs: [b, c]\n    template: w\n",
        );
        assert!(d.is_empty(), "{d:?}");
        let p = p.unwrap();
        let needs: Vec<Vec<String>> = p.steps.iter().map(|s| s.needs.clone()).collect();
        assert_eq!(
            needs,
            [
                vec![],
                vec!["a".to_string()],
                vec![],
                vec!["b".into(), "c".into()]
            ]
        );
        assert_eq!(p.leaves(), ["d"]);
    }

    #[test]
    fn load_errors_are_located() {
        let text = "steps:\n  - id: a\n    needs: [zz]\n    template: x\n  - id: a\n    template: y\n    tool: bash\n  - id: c\n    template: \"{{ broken\"\n  - id: d\n    when: \"1 +\"\n    template: ok\n  - id: e\n    template: ok\n    retry: { attempts: 0 }\n    timeout: 10q\n    approve: \"yes\"\n";
        let (p, d) = parse(text);
        assert!(p.is_none());
        let want = [
            "agents/p.yaml:2:9: steps[1]: duplicate step id \"a\"",
            "agents/p.yaml:3:12: step `a`: needs unknown step \"zz\"",
            "agents/p.yaml:2:9: step `a` has tool and template of `agent`, `tool`, `template`",
            "agents/p.yaml:9:15: step `c`: template error in `template`",
            "agents/p.yaml:11:11: step `d`: `when` is not a valid expression",
            "agents/p.yaml:15:24: step `e`: `retry.attempts` counts every attempt",
            "agents/p.yaml:16:14: step `e`: timeout: invalid duration \"10q\"",
            "agents/p.yaml:17:14: step `e`: `approve` is \"yes\": write `approve: true`",
        ];
        for w in want {
            assert!(d.iter().any(|m| m.starts_with(w)), "{w}\n{d:#?}");
        }
    }

    #[test]
    fn a_cycle_is_named() {
        let (p, d) = parse(
            "steps:\n  - id: a\n    needs: [c]\n    template: x\n  - id: b\n    template: y\n  - id: c\n    template: z\n",
        );
        assert!(p.is_none());
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].starts_with(
                "agents/p.yaml:3:12: steps form a cycle through `needs`: a -> c -> b -> a"
            ),
            "{d:?}"
        );
    }

    #[test]
    fn retry_delays_double() {
        let r = Retry {
            attempts: 3,
            backoff: Duration::from_millis(100),
        };
        assert_eq!(r.delay(1), Duration::from_millis(100));
        assert_eq!(r.delay(2), Duration::from_millis(200));
    }
}
