//! What the current snapshot loaded (agents with their definition hash,
//! skills, tool plugins, MCP servers with their state) and what it left out
//! or kept at a last good version, with the located error that is why, plus
//! when its files were read, each provider with limits and the calls
//! waiting for it, and on PostgreSQL the cluster's nodes: the body of
//! `GET /v1/status`.

use serde::Serialize;

use crate::registry::Snapshot;
use crate::registry::skipped::{ItemKind, SkippedItem};
use crate::store::NodeRecord;
use crate::types::{ChannelStatus, GateStatus, McpState};

#[derive(Debug, Serialize)]
pub struct Status<'a> {
    loaded_at: chrono::DateTime<chrono::Utc>,
    agents: Vec<AgentStatus<'a>>,
    skills: Vec<Named<'a>>,
    plugins: Vec<Named<'a>>,
    mcp_servers: Vec<ServerStatus>,
    /// Each provider with limits: its limits and, in this process, the
    /// calls waiting for it and in flight, the waits and the pauses.
    providers: Vec<GateStatus>,
    /// Left out, or (agents) kept at their last good version: `stale`.
    skipped: &'a [SkippedItem],
    /// Each channel of `channels/` that runs: its connection and counters.
    channels: Vec<ChannelStatus>,
    /// On PostgreSQL, the nodes sharing the database (this one included),
    /// their heartbeats and running runs; empty on SQLite (one node).
    nodes: Vec<NodeRecord>,
}

#[derive(Debug, Serialize)]
struct AgentStatus<'a> {
    name: &'a str,
    definition_hash: &'a str,
    /// Its file has errors; this is the last version that had none.
    stale: bool,
}

#[derive(Debug, Serialize)]
struct Named<'a> {
    name: &'a str,
    path: String,
}

#[derive(Debug, Serialize)]
struct ServerStatus {
    name: String,
    /// `unused` when no agent's tools reach it (it is not started).
    state: McpState,
}

/// The report of `snapshot`, with the started MCP servers' states.
pub fn status<'a>(
    snapshot: &'a Snapshot,
    mcp_states: &[(String, McpState)],
    nodes: Vec<NodeRecord>,
    channels: Vec<ChannelStatus>,
) -> Status<'a> {
    let listed = |kind: ItemKind, name: &str, stale: bool| {
        snapshot
            .skipped
            .iter()
            .any(|i| i.kind == kind && i.name == name && (i.stale || !stale))
    };
    Status {
        loaded_at: snapshot.loaded_at,
        agents: snapshot
            .project
            .agents
            .values()
            .map(|a| AgentStatus {
                name: &a.name,
                definition_hash: &a.hash,
                stale: listed(ItemKind::Agent, a.name.as_str(), true),
            })
            .collect(),
        skills: snapshot
            .skills
            .iter()
            .map(|s| Named {
                name: &s.name,
                path: s.path.display().to_string(),
            })
            .collect(),
        plugins: snapshot
            .project
            .plugins
            .iter()
            // A plugin whose tool name was taken is listed as skipped.
            .filter(|p| !listed(ItemKind::Plugin, p.name.as_str(), false))
            .map(|p| Named {
                name: &p.name,
                path: p.path.display().to_string(),
            })
            .collect(),
        mcp_servers: snapshot
            .project
            .mcp_servers
            .iter()
            .map(|s| ServerStatus {
                name: s.name.clone(),
                state: mcp_states
                    .iter()
                    .find(|(name, _)| *name == s.name)
                    .map_or(McpState::Unused, |(_, state)| *state),
            })
            .collect(),
        providers: crate::telemetry::provider_gates(&snapshot.project.settings),
        skipped: &snapshot.skipped,
        channels,
        nodes,
    }
}
