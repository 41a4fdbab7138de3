//! Tools that answer from a recording instead of running: each has the
//! spec of the real tool (so the agent's allow-list and the tool's JSON
//! Schema still judge every call), and returns the recorded result of the
//! first unused recorded call with the same name and arguments. A call the
//! recording does not have gets an error result saying so; nothing runs.

use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;

use crate::tools::{Tool, ToolContext, ToolError, ToolRegistry, ToolSet, glob_match};
use crate::types::ToolSpec;

/// One recorded (or scripted) tool call and its result.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedResult {
    pub name: String,
    /// The call's arguments as JSON (a string when they were not JSON).
    pub arguments: serde_json::Value,
    pub output: String,
    pub is_error: bool,
}

impl RecordedResult {
    pub fn new(name: &str, arguments: &str, output: &str, is_error: bool) -> RecordedResult {
        RecordedResult {
            name: name.to_string(),
            arguments: parse_arguments(arguments),
            output: output.to_string(),
            is_error,
        }
    }
}

/// Raw call arguments as JSON: empty is `{}`, text that is not JSON stays
/// a string.
pub fn parse_arguments(raw: &str) -> serde_json::Value {
    if raw.trim().is_empty() {
        return serde_json::Value::Object(Default::default());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_string()))
}

/// The results not used yet, shared by every scripted tool of a run.
type Pool = Arc<Mutex<Vec<Option<RecordedResult>>>>;

struct ScriptedTool {
    spec: ToolSpec,
    pool: Pool,
}

impl Tool for ScriptedTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> String {
        "recording".into()
    }

    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let taken = {
                let mut pool = self
                    .pool
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                pool.iter_mut()
                    .find(|r| {
                        r.as_ref()
                            .is_some_and(|r| r.name == self.spec.name && r.arguments == args)
                    })
                    .and_then(Option::take)
            };
            match taken {
                Some(r) if r.is_error => {
                    // The tool set says `error: ` before a failure's text;
                    // the recorded text has it already.
                    let text = r.output.strip_prefix("error: ").unwrap_or(&r.output);
                    Err(ToolError::Failed(text.to_string()))
                }
                Some(r) => Ok(r.output),
                None => Err(ToolError::Failed(format!(
                    "the recording has no result for `{}` with arguments {args}; no real tool runs here",
                    self.spec.name
                ))),
            }
        })
    }
}

/// Which tools a replayed run gets.
pub struct ToolPlan<'a> {
    /// Every tool the project knows without connecting MCP servers.
    pub registry: &'a ToolRegistry,
    /// The agent's `tools:` allow-list.
    pub allowed: &'a [String],
    /// Names the agent has besides its allow-list (memory tools, agents
    /// called as tools).
    pub extra: &'a [String],
    /// Tools that run for real (a test case's opt-in `real_tools`).
    pub real: &'a [String],
}

/// The agent's tools, each answering from `recorded` (except `real`
/// ones). Tools the registry does not have (MCP tools, which are not
/// connected, memory and agent tools) are there when the allow-list or
/// `extra` names them and the recording calls them; their arguments are
/// not checked against a schema.
pub fn scripted_toolset(plan: &ToolPlan<'_>, recorded: Vec<RecordedResult>) -> ToolSet {
    let mut unknown: Vec<String> = recorded
        .iter()
        .map(|r| r.name.clone())
        .filter(|name| plan.registry.get(name).is_none())
        .filter(|name| {
            plan.extra.contains(name) || plan.allowed.iter().any(|p| glob_match(p, name))
        })
        .collect();
    unknown.sort();
    unknown.dedup();
    let pool: Pool = Arc::new(Mutex::new(recorded.into_iter().map(Some).collect()));
    let mut set = ToolSet::default();
    for name in plan.registry.names_matching(plan.allowed) {
        let Some(tool) = plan.registry.get(&name) else {
            continue;
        };
        if plan.real.contains(&name) {
            set.add(tool.clone());
        } else {
            set.add(Arc::new(ScriptedTool {
                spec: tool.spec().clone(),
                pool: pool.clone(),
            }));
        }
    }
    for name in unknown {
        set.add(Arc::new(ScriptedTool {
            spec: ToolSpec {
                description: format!("`{name}` answered from the recording"),
                parameters: serde_json::json!({ "type": "object" }),
                name,
            },
            pool: pool.clone(),
        }));
    }
    set
}
