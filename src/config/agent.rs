//! `agents/NAME.yaml`: the raw serde shape (unknown fields refused) and its
//! conversion into a validated [`Agent`], reporting every problem it finds.

use std::path::Path;

use serde::Deserialize;
use serde_yaml::Value;

use super::agent_name::valid_name;
use super::approval::{ApprovalConfig, RawApproval, is_tool_glob, parse_approval};
use super::bounds::{Syntax, check_text};
use super::diag::{Diagnostic, locate, locate_item};
pub use super::limits::Limits;
use super::limits::{RawLimits, parse_limits};
pub use super::model_chain::Fallback;
use super::model_chain::parse_model;
use super::schema::json_schema;
use super::skills::parse_skills;
pub use super::skills::{SkillsChoice, SkillsMode};
use super::steps::{Pipeline, RawStep, parse_steps};
use super::triggers::{RawTriggers, Triggers, parse_triggers};
use super::yaml_value::{describe_value, yaml_diagnostic};
use crate::types::SandboxMode;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAgent {
    description: Option<String>,
    model: Option<Value>,
    system: Option<String>,
    prompt: Option<String>,
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    limits: RawLimits,
    temperature: Option<f32>,
    max_tokens: Option<u32>,
    skills: Option<Value>,
    memory: Option<RawMemory>,
    schedule: Option<Value>,
    on_overlap: Option<Value>,
    on_missed: Option<Value>,
    catch_up: Option<Value>,
    on_interrupt: Option<Value>,
    output_schema: Option<Value>,
    webhook: Option<Value>,
    after: Option<Value>,
    watch: Option<Value>,
    sandbox: Option<Value>,
    history: Option<Value>,
    #[serde(default)]
    pass_env: Vec<String>,
    #[serde(default)]
    agents: Vec<String>,
    approve: Option<Value>,
    approval_timeout: Option<Value>,
    notify: Option<Value>,
    steps: Option<Vec<RawStep>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMemory {
    namespace: Option<String>,
    recall: Option<usize>,
    tools: Option<bool>,
    max_entries: Option<usize>,
}

/// What a session turn does with a history over its context budget
/// (`history:`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HistoryMode {
    /// The oldest messages are left out of the request (tool call groups
    /// whole; the turn's message and the newest two stay).
    #[default]
    Trim,
    /// The oldest part is replaced by a summary the model writes, stored
    /// with the session and reused by later turns.
    Compact,
}

impl HistoryMode {
    pub fn parse(word: &str) -> Option<HistoryMode> {
        match word {
            "trim" => Some(HistoryMode::Trim),
            "compact" => Some(HistoryMode::Compact),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HistoryMode::Trim => "trim",
            HistoryMode::Compact => "compact",
        }
    }
}

/// Long-term memory settings of an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryConfig {
    /// Default: the agent's name.
    pub namespace: String,
    /// How many memories are recalled ahead of the input (0: none).
    pub recall: usize,
    /// Whether the agent gets `memory_save`, `memory_search`, `memory_delete`.
    pub tools: bool,
    /// Most memories kept in the namespace; past it the lowest-scored go.
    pub max_entries: usize,
}

/// A validated agent definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    /// The file stem.
    pub name: String,
    /// The file, relative to the project root.
    pub path: std::path::PathBuf,
    pub description: String,
    /// `provider/model`, or `test` for the built-in offline test model;
    /// the first of a chain.
    pub model: String,
    /// The rest of a model chain, and when a call moves down it; `None`:
    /// one model.
    pub fallback: Option<Fallback>,
    /// minijinja template of the system prompt.
    pub system: Option<String>,
    /// minijinja template of the input of runs started without one.
    pub prompt: Option<String>,
    /// Allow-list of tool names; `*` and `?` globs.
    pub tools: Vec<String>,
    /// Other agents this one may call as tools (`agent_<name>`), each run
    /// as a sub-run linked to the caller's run.
    pub agents: Vec<String>,
    pub limits: Limits,
    pub temperature: Option<f32>,
    /// The most tokens one model answer may have; `None`: the provider's
    /// default (Anthropic, which requires one, gets 4096).
    pub max_tokens: Option<u32>,
    /// The JSON Schema the final answer must match (checked as a schema).
    pub output_schema: Option<serde_json::Value>,
    pub skills: SkillsChoice,
    /// How its skills are offered: injected, or as a catalog to load from.
    pub skills_mode: SkillsMode,
    pub memory: MemoryConfig,
    /// Schedules, overlap and missed-fire policies, webhook.
    pub triggers: Triggers,
    /// What the processes of its tools (`bash`, `tools.d` commands) may
    /// write; enforced with Linux Landlock.
    pub sandbox: SandboxMode,
    /// What a session turn does with a history over
    /// `limits.max_context_tokens`.
    pub history: HistoryMode,
    /// Variables of aurad's environment its tool processes (`bash`,
    /// `tools.d` commands) get beside the allow-listed ones (`PATH`,
    /// `HOME`, the locale, ...).
    pub pass_env: Vec<String>,
    /// `approve:`, `approval_timeout:` and `notify:`.
    pub approval: ApprovalConfig,
    /// A pipeline's steps (`steps:`); such an agent has no model, system
    /// or prompt of its own.
    pub steps: Option<std::sync::Arc<Pipeline>>,
    /// SHA-256 of the file as written (before interpolation), hex.
    pub hash: String,
    /// The interpolated text, for locating later diagnostics.
    pub text: String,
}

/// Parses one agent file's interpolated `text`. Returns the agent when it has
/// no errors, and every diagnostic found.
pub fn parse_agent(
    name: &str,
    path: &Path,
    text: &str,
    hash: String,
) -> (Option<Agent>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    if let Err(d) = check_text(path, text, Syntax::Yaml, 1) {
        return (None, vec![d]);
    }
    if text.trim().is_empty() || text.lines().all(|l| l.trim_start().starts_with('#')) {
        diags.push(Diagnostic::error(
            path,
            (1, 1),
            "the agent file is empty: it needs at least `model:` and a `prompt:` or `system:`",
        ));
        return (None, diags);
    }
    let raw: RawAgent = match serde_yaml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            diags.push(yaml_diagnostic(path, text, &e));
            return (None, diags);
        }
    };
    let err = |keys: &[&str], msg: String| Diagnostic::error(path, locate(text, keys), msg);

    let output_schema = raw.output_schema.as_ref().and_then(|schema| {
        json_schema(schema, "output_schema")
            .map_err(|(keys, msg)| {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                diags.push(err(&keys, msg));
            })
            .ok()
    });
    if let Some(0) = raw.max_tokens {
        diags.push(err(
            &["max_tokens"],
            "`max_tokens` must be at least 1 (the most tokens one model answer may have)".into(),
        ));
    }
    let triggers = parse_triggers(
        name,
        RawTriggers {
            schedule: raw.schedule.as_ref(),
            on_overlap: raw.on_overlap.as_ref(),
            on_missed: raw.on_missed.as_ref(),
            catch_up: raw.catch_up.as_ref(),
            on_interrupt: raw.on_interrupt.as_ref(),
            webhook: raw.webhook.as_ref(),
            after: raw.after.as_ref(),
            watch: raw.watch.as_ref(),
        },
        path,
        text,
        &mut diags,
    );
    let pipeline = raw
        .steps
        .map(|steps| parse_steps(steps, path, text, &mut diags));
    if pipeline.is_some() {
        let set: [(&str, bool); 10] = [
            ("history", raw.history.is_some()),
            ("model", raw.model.is_some()),
            ("system", raw.system.is_some()),
            ("prompt", raw.prompt.is_some()),
            ("temperature", raw.temperature.is_some()),
            ("max_tokens", raw.max_tokens.is_some()),
            ("output_schema", raw.output_schema.is_some()),
            ("skills", raw.skills.is_some()),
            ("memory", raw.memory.is_some()),
            ("on_interrupt", raw.on_interrupt.is_some()),
        ];
        for (field, _) in set.iter().filter(|(_, given)| *given) {
            diags.push(err(
                &[field],
                format!("`{field}` does not apply to a pipeline: an agent with `steps` runs its steps (give `{field}` to the agents its steps run), so remove `{field}` or `steps`"),
            ));
        }
    }
    let check_model = |m: &str| match m.split_once('/') {
        _ if m == "test" => Ok(m.to_string()),
        Some((p, rest)) if !p.is_empty() && !rest.is_empty() => Ok(m.to_string()),
        _ => Err(format!(
            "model {m:?} must be `provider/model`, e.g. openai/{m}, or `test`"
        )),
    };
    let (model, fallback) = match &raw.model {
        _ if pipeline.is_some() => (String::new(), None),
        None => {
            diags.push(err(
                &["model"],
                "`model` is required: write `model: provider/model` (e.g. openai/gpt-4o-mini) or `model: test`".into(),
            ));
            (String::new(), None)
        }
        Some(Value::String(m)) if m.trim().is_empty() => {
            diags.push(err(
                &["model"],
                "`model` is required: write `model: provider/model` (e.g. openai/gpt-4o-mini) or `model: test`".into(),
            ));
            (String::new(), None)
        }
        Some(value) => match parse_model(value, &check_model) {
            Ok(chain) => chain,
            Err((keys, message)) => {
                diags.push(err(&keys, message));
                (String::new(), None)
            }
        },
    };
    if raw.system.is_none() && raw.prompt.is_none() && pipeline.is_none() {
        diags.push(err(
            &["model"],
            "the agent has neither `system` nor `prompt`: give it at least one".into(),
        ));
    }
    for (field, template) in [("system", &raw.system), ("prompt", &raw.prompt)] {
        if let Some(src) = template
            && minijinja::Environment::new().template_from_str(src).is_ok()
            && !super::bounds::template_renders_within_fuel(src)
        {
            diags.push(Diagnostic::warning(
                path,
                locate(text, &[field]),
                format!(
                    "`{field}` takes more than {} steps to render even with empty inputs (a loop over a large range?): every run of this agent would stop with an error; make the loop smaller",
                    super::bounds::TEMPLATE_FUEL
                ),
            ));
        }
        if let Some(src) = template
            && let Err(e) = minijinja::Environment::new().template_from_str(src)
        {
            let (line, col) = locate(text, &[field]);
            let block = text
                .lines()
                .nth(line - 1)
                .is_some_and(super::interp::is_block_header);
            let line = line + e.line().unwrap_or(1) - 1 + usize::from(block);
            diags.push(Diagnostic::error(
                path,
                (line, if block { 1 } else { col }),
                format!(
                    "template error in `{field}`: {}",
                    e.detail().unwrap_or("syntax error")
                ),
            ));
        }
    }
    for (i, pattern) in raw.tools.iter().enumerate() {
        if !is_tool_glob(pattern) {
            diags.push(err(
                &["tools"],
                format!("tools[{i}]: {pattern:?} is not a tool name or glob (letters, digits, `_`, `-`, `*`, `?`)"),
            ));
        }
    }
    for (i, sub) in raw.agents.iter().enumerate() {
        let place = locate_item(text, &["agents"], sub);
        if !valid_name(sub) {
            diags.push(Diagnostic::error(
                path,
                place,
                format!("agents[{i}]: {sub:?} is not an agent name (the file stem of agents/NAME.yaml: lowercase letters, digits, `_`, `-`)"),
            ));
        } else if raw.agents[..i].contains(sub) {
            diags.push(Diagnostic::error(
                path,
                place,
                format!("agents[{i}]: {sub:?} is listed twice; remove one"),
            ));
        }
    }
    let limits = parse_limits(&raw.limits, &err, &mut diags);
    if let Some(t) = raw.temperature
        && !(0.0..=2.0).contains(&t)
    {
        diags.push(err(
            &["temperature"],
            format!("temperature {t} is out of range: use 0.0 to 2.0"),
        ));
    }
    let (skills, skills_mode) = parse_skills(raw.skills.as_ref(), &err, &mut diags);
    let raw_memory = raw.memory.unwrap_or_default();
    let memory = MemoryConfig {
        namespace: raw_memory
            .namespace
            .clone()
            .unwrap_or_else(|| name.to_string()),
        recall: raw_memory.recall.unwrap_or(5),
        tools: raw_memory.tools.unwrap_or(false),
        max_entries: raw_memory.max_entries.unwrap_or(500),
    };
    if memory.namespace.trim().is_empty() {
        diags.push(err(
            &["memory", "namespace"],
            "`memory.namespace` is empty: give a name, or leave it out to use the agent's".into(),
        ));
    }
    if memory.recall > 50 {
        diags.push(err(
            &["memory", "recall"],
            format!(
                "`memory.recall` is {}; at most 50 memories can be recalled",
                memory.recall
            ),
        ));
    }
    if memory.max_entries < 10 {
        diags.push(err(
            &["memory", "max_entries"],
            format!(
                "`memory.max_entries` is {}; it must be at least 10 (cleanup keeps 80% of it)",
                memory.max_entries
            ),
        ));
    }
    let sandbox = match &raw.sandbox {
        None => SandboxMode::None,
        Some(value) => match value.as_str().and_then(SandboxMode::parse) {
            Some(mode) => mode,
            None => {
                let words: Vec<String> =
                    SandboxMode::ALL.iter().map(|m| format!("`{m}`")).collect();
                diags.push(err(
                    &["sandbox"],
                    format!(
                        "`sandbox` is {}: expected one of {}",
                        describe_value(value),
                        words.join(", ")
                    ),
                ));
                SandboxMode::None
            }
        },
    };
    let history = match &raw.history {
        None => HistoryMode::Trim,
        Some(value) => match value.as_str().and_then(HistoryMode::parse) {
            Some(mode) => mode,
            None => {
                diags.push(err(
                    &["history"],
                    format!(
                        "`history` is {}: expected `trim` (the oldest messages of a session are left out of a request over `limits.max_context_tokens`) or `compact` (they are replaced by a summary the model writes)",
                        describe_value(value),
                    ),
                ));
                HistoryMode::Trim
            }
        },
    };
    for name in &raw.pass_env {
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        let problem = if !valid {
            Some(format!(
                "pass_env: {name:?} is not a variable name (letters, digits and `_`, not starting with a digit)"
            ))
        } else if name == "AURAD_TOKEN" {
            Some(
                "pass_env: `AURAD_TOKEN` is the daemon's API credential and is never given to tools; remove it"
                    .to_string(),
            )
        } else {
            None
        };
        if let Some(message) = problem {
            diags.push(Diagnostic::error(
                path,
                locate_item(text, &["pass_env"], name),
                message,
            ));
        }
    }
    let approval = parse_approval(
        RawApproval {
            approve: raw.approve.as_ref(),
            approval_timeout: raw.approval_timeout.as_ref(),
            notify: raw.notify.as_ref(),
        },
        &err,
        &mut diags,
    );
    if diags.iter().any(Diagnostic::is_error) {
        return (None, diags);
    }
    let agent = Agent {
        name: name.to_string(),
        path: path.to_path_buf(),
        description: raw.description.unwrap_or_default(),
        model,
        fallback,
        system: raw.system,
        prompt: raw.prompt,
        tools: raw.tools,
        agents: raw.agents,
        limits,
        temperature: raw.temperature,
        max_tokens: raw.max_tokens,
        output_schema,
        skills,
        skills_mode,
        memory,
        triggers,
        sandbox,
        history,
        pass_env: raw.pass_env,
        approval,
        steps: pipeline.flatten().map(std::sync::Arc::new),
        hash,
        text: text.to_string(),
    };
    (Some(agent), diags)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Option<Agent>, Vec<String>) {
        let (a, d) = parse_agent("a", Path::new("agents/a.yaml"), text, "h".into());
        (a, d.iter().map(|d| d.to_string()).collect())
    }

    #[test]
    fn an_error_at_the_end_of_input_is_placed_on_the_last_line() {
        // Found by tests/fuzz_props.rs: libyaml put this one on line 2.
        let (_, d) = parse("{#");
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].starts_with("agents/a.yaml:1:3: "), "{d:?}");
    }

    #[test]
    fn minimal_agent_gets_defaults() {
        let (a, d) = parse("model: test\nprompt: hi\n");
        assert!(d.is_empty(), "{d:?}");
        let a = a.unwrap();
        assert_eq!(a.limits, Limits::default());
        assert_eq!(a.model, "test");
    }

    #[test]
    fn history_is_read_and_a_bad_value_is_located() {
        let (a, _) = parse("model: test\nsystem: hi\n");
        assert_eq!(a.unwrap().history, HistoryMode::Trim);
        let (a, _) = parse("model: test\nsystem: hi\nhistory: compact\n");
        assert_eq!(a.unwrap().history, HistoryMode::Compact);
        let (a, d) = parse("model: test\nsystem: hi\nhistory: summarize\n");
        assert!(a.is_none());
        assert!(
            d[0].starts_with("agents/a.yaml:3:10: `history` is \"summarize\": expected `trim`"),
            "{d:?}"
        );
    }

    #[test]
    fn sandbox_is_read_and_a_bad_value_is_located() {
        let (a, d) = parse("model: test\nprompt: hi\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(a.unwrap().sandbox, SandboxMode::None);
        for (word, mode) in [
            ("none", SandboxMode::None),
            ("read-only-project", SandboxMode::ReadOnlyProject),
            ("workdir", SandboxMode::Workdir),
        ] {
            let (a, d) = parse(&format!("model: test\nprompt: hi\nsandbox: {word}\n"));
            assert!(d.is_empty(), "{d:?}");
            assert_eq!(a.unwrap().sandbox, mode);
        }
        let (a, d) = parse("model: test\nprompt: hi\nsandbox: readonly\n");
        assert!(a.is_none());
        assert_eq!(
            d,
            [
                "agents/a.yaml:3:10: `sandbox` is \"readonly\": expected one of `none`, `read-only-project`, `workdir`"
            ]
        );
    }

    #[test]
    fn unknown_field_lists_valid_ones() {
        let (a, d) = parse("model: test\nprompt: hi\nmax_stpes: 3\n");
        assert!(a.is_none());
        assert!(
            d[0].starts_with("agents/a.yaml:3:1: unknown field `max_stpes`, expected one of"),
            "{d:?}"
        );
        assert!(d[0].contains("`limits`"));
        // A field near a known one is named alone, at its place.
        let (_, d) = parse("model: test\npromt: hi\n");
        assert_eq!(
            d[0],
            "agents/a.yaml:2:1: unknown field `promt`: did you mean `prompt`?"
        );
    }

    #[test]
    fn wrong_type_has_place() {
        let (_, d) = parse("model: test\nprompt: hi\nlimits:\n  max_iterations: lots\n");
        assert!(d[0].starts_with("agents/a.yaml:4:"), "{d:?}");
        assert!(d[0].contains("invalid type: string \"lots\""), "{d:?}");
    }

    #[test]
    fn reports_every_semantic_problem() {
        let text = "model: gpt4\nprompt: hi\ntemperature: 7\nlimits: { timeout: 10q }\nschedule: [{cron: '* * * * * * *'}]\n";
        let (a, d) = parse(text);
        assert!(a.is_none());
        assert_eq!(d.len(), 4, "{d:?}");
        assert!(
            d.iter()
                .any(|m| m.starts_with("agents/a.yaml:5:11: schedule[0]: cron expression")),
            "{d:?}"
        );
        assert!(
            d.iter().any(
                |m| m.starts_with("agents/a.yaml:1:8: model \"gpt4\" must be `provider/model`")
            )
        );
        assert!(
            d.iter()
                .any(|m| m.starts_with("agents/a.yaml:3:14: temperature 7"))
        );
        assert!(
            d.iter()
                .any(|m| m
                    .starts_with("agents/a.yaml:4:20: limits.timeout: invalid duration \"10q\"")),
            "{d:?}"
        );
    }

    #[test]
    fn template_errors_point_into_the_block() {
        let (_, d) = parse("model: test\nsystem: |\n  line one\n  {{ broken\n");
        assert!(
            d[0].starts_with("agents/a.yaml:4:1: template error in `system`"),
            "{d:?}"
        );
    }

    #[test]
    fn skills_and_memory() {
        let (a, d) = parse(
            "model: test\nprompt: hi\nskills: [web-search]\nmemory: { namespace: shared, tools: true }\n",
        );
        assert!(d.is_empty(), "{d:?}");
        let a = a.unwrap();
        assert_eq!(a.skills, SkillsChoice::Named(vec!["web-search".into()]));
        assert_eq!(
            a.memory,
            MemoryConfig {
                namespace: "shared".into(),
                recall: 5,
                tools: true,
                max_entries: 500
            }
        );
        let (a, _) = parse("model: test\nprompt: hi\nskills: none\n");
        assert_eq!(a.unwrap().skills, SkillsChoice::None);
        let (a, _) = parse("model: test\nprompt: hi\n");
        let a = a.unwrap();
        assert_eq!(
            (a.skills, a.memory.namespace, a.memory.tools),
            (SkillsChoice::Auto, "a".to_string(), false)
        );
        let (_, d) = parse("model: test\nprompt: hi\nskills: sometimes\nmemory: { recal: 3 }\n");
        assert!(d[0].contains("unknown field `recal`"), "{d:?}");
        let (_, d) = parse("model: test\nprompt: hi\nskills: sometimes\n");
        assert!(
            d[0].starts_with("agents/a.yaml:3:9: `skills` must be `auto`, `none` or a list"),
            "{d:?}"
        );
    }
}
