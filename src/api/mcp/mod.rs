//! The project's agents as MCP tools: aurad as an MCP server (the MCP
//! servers the agents use are the client side, `crate::mcp`). Each agent
//! offered (all, or those of `mcp_server.agents` in aurad.yaml) is a tool
//! of its name taking `{input}` and answering with the run's answer, or
//! its JSON result (`structuredContent`) for an agent with an
//! `output_schema`. A call starts a run recorded like any other (trigger
//! `mcp`), reports its progress when the client asked for it, and is
//! cancelled with the call.
//!
//! The protocol handler (`handler`) works through the [`AgentRuns`] trait:
//! `aurad mcp serve` implements it with the run door on stdio
//! (`app::mcp_serve`), `aurad serve` through the [`Backend`](super::Backend)
//! on `/mcp` (`http`, behind the API's token and guard). Depends on
//! `config` (the agents and `mcp_server:`) and `types`.

mod handler;
pub(super) mod http;

pub use handler::AgentServer;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde_json::{Map, Value};

use crate::config::Project;
use crate::types::RunEvent;

/// An agent offered as a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentTool {
    /// The agent's name, which is the tool's.
    pub name: String,
    pub description: String,
    /// The agent has no `prompt` (and is no pipeline): a call must give
    /// `input`.
    pub needs_input: bool,
    /// The agent's `output_schema`, declared as the tool's `outputSchema`
    /// when its root is an object (MCP requires one there); a result under
    /// another schema is still returned as text.
    pub output_schema: Option<Map<String, Value>>,
}

/// The agents of `project` offered as tools: every agent, or those
/// `mcp_server.agents` names, by name.
pub fn agent_tools(project: &Project) -> Vec<AgentTool> {
    let exposed = &project.settings.mcp_server;
    project
        .agents
        .values()
        .filter(|agent| exposed.exposes(&agent.name))
        .map(|agent| {
            let description = agent.description.trim();
            let description = if description.is_empty() {
                format!(
                    "Runs the aurad agent `{}` (agents/{}.yaml) and returns its answer.",
                    agent.name, agent.name
                )
            } else {
                description.to_string()
            };
            AgentTool {
                name: agent.name.clone(),
                description,
                needs_input: agent.prompt.is_none() && agent.steps.is_none(),
                output_schema: agent
                    .output_schema
                    .as_ref()
                    .and_then(Value::as_object)
                    .filter(|schema| schema.get("type").and_then(Value::as_str) == Some("object"))
                    .cloned(),
            }
        })
        .collect()
}

/// A run a tool call started: its id and its events from the first, ending
/// with its `finished` event.
pub struct StartedRun {
    pub run_id: String,
    pub events: BoxStream<'static, RunEvent>,
}

/// What the MCP server needs to run agents: the daemon's (`aurad serve`)
/// or a run door of its own (`aurad mcp serve`).
pub trait AgentRuns: Send + Sync + 'static {
    /// The agents offered as tools now.
    fn tools(&self) -> Vec<AgentTool>;
    /// Starts a run of `agent` with `input` (`None`: its `prompt`), stored
    /// with trigger `mcp`. `Err` says why it could not start.
    fn start<'a>(
        &'a self,
        agent: &'a str,
        input: Option<String>,
    ) -> BoxFuture<'a, Result<StartedRun, String>>;
    /// Cancels run `run_id` (it ends `cancelled`); nothing if it has ended.
    fn cancel<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, ()>;
}
