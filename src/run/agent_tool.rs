//! Agents as tools: each name in an agent's `agents:` becomes a tool
//! `agent_<name>` taking `{input}`. A call starts a sub-run of that agent
//! with the input, a real run in the store (trigger `agent`, linked to the
//! caller by `parent_run_id`, one level deeper, its own events and limits),
//! and returns its final answer, or an error text for the model saying how
//! it ended. The sub-run is cancelled with its caller (cancel or timeout),
//! what it spent counts in the caller's usage and cost (through the
//! engine's [`SharedSpend`]), and its token budget is at most what the
//! caller has left. It runs beside the caller's supervisor slot, not in a
//! slot of its own: a caller waiting for its sub-runs never waits for a
//! slot it holds itself. It runs under the strictest of its caller's
//! limits and its own (sandbox, approval gates, allow-list, `pass_env`:
//! [`Ceiling`]), so an injected caller gains nothing by calling it.
//!
//! May depend on `registry`, `engine`, `store`, `tools`.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::json;

use super::{Env, Job, RunRequest, execute};
use crate::config::{Agent, EnvLookup, Settings};
use crate::engine::{SharedSpend, SubRunSpend};
use crate::registry::Snapshot;
use crate::registry::ceiling::Ceiling;
use crate::registry::sub_agents::agent_tool_name;
use crate::store::{RunParent, Store};
use crate::tools::{Tool, ToolContext, ToolError};
use crate::types::{RunState, ToolSpec, Trigger};

/// How deep runs may nest through agent calls: a run started by a trigger
/// is at depth 0, a sub-run at its caller's depth + 1.
pub const MAX_DEPTH: u32 = 3;

/// The agents a run may call, resolved when the run is prepared.
pub struct SubAgents {
    /// The snapshot the caller runs on: its sub-runs run on it too.
    snapshot: Arc<Snapshot>,
    /// The provider variables of the snapshot's settings, read when the
    /// caller was prepared (sub-runs resolve their providers with them).
    env: Arc<BTreeMap<String, String>>,
    names: Vec<String>,
    /// The caller's depth.
    depth: u32,
    /// The caller's `limits.max_tokens_per_run`.
    max_tokens: Option<u64>,
    /// What the caller allows its sub-runs: its limits and those above it.
    ceiling: Ceiling,
}

impl SubAgents {
    /// The sub-agents of `agent` (run at `depth`, under `above` if another
    /// run started it), or `None` when it has none.
    pub fn resolve(
        snapshot: &Arc<Snapshot>,
        agent: &Agent,
        depth: u32,
        env: EnvLookup,
        above: &Option<Ceiling>,
    ) -> Option<SubAgents> {
        if agent.agents.is_empty() {
            return None;
        }
        Some(SubAgents {
            snapshot: snapshot.clone(),
            env: Arc::new(provider_env(&snapshot.project.settings, env)),
            names: agent.agents.clone(),
            depth,
            max_tokens: agent.limits.max_tokens_per_run,
            ceiling: Ceiling::under(agent, above.as_ref()),
        })
    }

    /// The tools of the run `run_id`, recording their sub-runs in `store`
    /// and their spending in `spend`.
    pub fn tools(self, run_id: &str, store: &Store, spend: &SharedSpend) -> Vec<Arc<dyn Tool>> {
        let caller = Arc::new(Caller {
            snapshot: self.snapshot,
            env: self.env,
            run_id: run_id.to_string(),
            depth: self.depth,
            max_tokens: self.max_tokens,
            ceiling: self.ceiling,
            store: store.clone(),
            spend: spend.clone(),
        });
        self.names
            .into_iter()
            .map(|agent| {
                let description = caller
                    .snapshot
                    .project
                    .agents
                    .get(&agent)
                    .map(|a| a.description.trim().to_string())
                    .filter(|d| !d.is_empty())
                    .unwrap_or_else(|| format!("Runs the agent `{agent}` on a task."));
                Arc::new(AgentTool {
                    spec: ToolSpec {
                        name: agent_tool_name(&agent),
                        description,
                        parameters: json!({
                            "type": "object",
                            "properties": {
                                "input": {
                                    "type": "string",
                                    "description": "The whole task for this agent: it sees nothing else of this conversation."
                                }
                            },
                            "required": ["input"],
                            "additionalProperties": false
                        }),
                    },
                    agent,
                    caller: caller.clone(),
                }) as Arc<dyn Tool>
            })
            .collect()
    }
}

/// The values of the variables providers are resolved with
/// ([`crate::registry::provider_for`]): `OPENAI_BASE_URL` and every
/// provider's `api_key_env`.
fn provider_env(settings: &Settings, env: EnvLookup) -> BTreeMap<String, String> {
    std::iter::once("OPENAI_BASE_URL")
        .chain(
            settings
                .providers
                .values()
                .filter_map(|p| p.api_key_env.as_deref()),
        )
        .filter_map(|name| env(name).map(|value| (name.to_string(), value)))
        .collect()
}

/// The run whose tools these are.
struct Caller {
    snapshot: Arc<Snapshot>,
    env: Arc<BTreeMap<String, String>>,
    run_id: String,
    depth: u32,
    max_tokens: Option<u64>,
    ceiling: Ceiling,
    store: Store,
    spend: SharedSpend,
}

struct AgentTool {
    spec: ToolSpec,
    agent: String,
    caller: Arc<Caller>,
}

impl Tool for AgentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> String {
        format!("agent agents/{}.yaml", self.agent)
    }

    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(self.run(args, ctx))
    }
}

impl AgentTool {
    async fn run(&self, args: serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let caller = &self.caller;
        let input = args
            .get("input")
            .and_then(|v| v.as_str())
            .ok_or_else(|| ToolError::InvalidArguments("`input` must be a string".into()))?;
        let depth = caller.depth + 1;
        if depth > MAX_DEPTH {
            return Err(ToolError::Failed(format!(
                "cannot call agent `{}`: its run would be at depth {depth}, past the limit of {MAX_DEPTH} nested agent calls; answer with what you have",
                self.agent
            )));
        }
        let remaining = match caller.max_tokens {
            Some(max) => {
                let used = caller.spend.tokens();
                if used >= max {
                    return Err(ToolError::Failed(format!(
                        "cannot call agent `{}`: this run has used {used} tokens, reaching its limits.max_tokens_per_run ({max}); answer with what you have",
                        self.agent
                    )));
                }
                Some(max - used)
            }
            None => None,
        };
        let request = RunRequest {
            input: Some(input.to_string()),
            parent: Some(RunParent {
                run_id: caller.run_id.clone(),
                depth,
            }),
            ceiling: Some(caller.ceiling.clone()),
            ..RunRequest::new(&self.agent, Trigger::Agent)
        };
        let vars = caller.env.clone();
        let env: Env = Arc::new(move |name: &str| vars.get(name).cloned());
        let mut job = Job::prepare_blocking(caller.snapshot.clone(), request, env)
            .await
            .map_err(|e| ToolError::Failed(format!("cannot start agent `{}`: {e}", self.agent)))?;
        // The sub-run spends from what its caller has left.
        if let Some(remaining) = remaining {
            job.cap_tokens(remaining);
        }
        let run_id = job.id().to_string();
        let store = caller.store.clone();
        let cancel = ctx.cancel.child_token();
        // Its own task: a sub-run records its end even if this call is
        // dropped while it stops.
        let task = tokio::spawn(async move { execute(job, &store, cancel, |_| {}).await });
        let outcome = match task.await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                return Err(ToolError::Failed(format!(
                    "the run {run_id} of agent `{}` could not be recorded: {e}",
                    self.agent
                )));
            }
            Err(e) => {
                return Err(ToolError::Failed(format!(
                    "the run {run_id} of agent `{}` stopped abnormally: {e}",
                    self.agent
                )));
            }
        };
        caller.spend.report(SubRunSpend {
            run_id: run_id.clone(),
            usage: outcome.usage,
            cost_usd: outcome.cost_usd,
        });
        match (outcome.state, outcome.output) {
            (RunState::Succeeded, Some(output)) => Ok(output),
            (RunState::Cancelled, _) if ctx.cancel.is_cancelled() => Err(ToolError::Cancelled),
            (state, _) => Err(ToolError::Failed(format!(
                "the run {run_id} of agent `{}` ended {state}: {}",
                self.agent,
                outcome.reason.as_deref().unwrap_or("no reason given")
            ))),
        }
    }
}
