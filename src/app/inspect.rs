//! What the listing commands look at: `aurad validate` (every file, with
//! the snapshot's warnings and what each schedule means), `aurad tools`
//! (every tool an agent would see, MCP servers' included) and `aurad mcp`
//! (the servers of the project's MCP file, started once and stopped).

use std::path::Path;
use std::sync::Arc;

use super::project::{interruptible, open_store};
use crate::config::mcp::McpServerConfig;
use crate::config::{self, Diagnostic};
use crate::mcp::{McpManager, ServerState, ServerStatus};
use crate::registry::{self, Snapshot};
use crate::tools::Tool;

/// What `aurad validate` found.
#[derive(Debug)]
pub struct Validation {
    /// Every file's diagnostics, the snapshot's warnings and the test
    /// files'.
    pub diagnostics: Vec<Diagnostic>,
    /// How many agents are valid.
    pub agents: usize,
    /// What each schedule of a valid agent means.
    pub schedules: Vec<ScheduleNote>,
    /// How many MCP servers the project's MCP file has.
    pub mcp_servers: usize,
    /// How many skills, `tools.d` plugins and channels load.
    pub skills: usize,
    pub plugins: usize,
    pub channels: usize,
}

/// One schedule of an agent, explained.
#[derive(Debug)]
pub struct ScheduleNote {
    pub agent: String,
    /// Its place in the agent's `schedule:` list.
    pub index: usize,
    pub expression: String,
    /// In words.
    pub description: String,
    /// The next fire, in the schedule's zone; `None`: never.
    pub next: Option<String>,
}

/// Loads every file of the project at `root` and checks it.
pub fn validate(root: &Path) -> Validation {
    let loaded = config::load(root, &config::process_env);
    let (snapshot, mut diagnostics) = registry::build(loaded, &config::process_env);
    diagnostics.extend(registry::warnings::unsandboxed_shell_warnings(&snapshot));
    diagnostics.extend(registry::warnings::unset_webhook_secret_warnings(
        &snapshot,
        &config::process_env,
    ));
    // `agents/NAME.test.yaml`: the cases of `aurad test`.
    let (_, test_diagnostics) = config::cases::load_all(root, &config::agent_names(root));
    diagnostics.extend(test_diagnostics);
    let now = chrono::Utc::now();
    let mut schedules = Vec::new();
    for agent in snapshot.project.agents.values() {
        for (index, schedule) in agent.triggers.schedules.iter().enumerate() {
            schedules.push(ScheduleNote {
                agent: agent.name.clone(),
                index,
                expression: schedule.cron.expression().to_string(),
                description: schedule.cron.describe(),
                next: schedule.cron.next_after(now).map(|t| {
                    t.with_timezone(&schedule.cron.timezone())
                        .format("%Y-%m-%d %H:%M:%S %Z")
                        .to_string()
                }),
            });
        }
    }
    Validation {
        diagnostics,
        agents: snapshot.project.agents.len(),
        schedules,
        mcp_servers: snapshot.project.mcp_servers.len(),
        skills: snapshot.skills.len(),
        plugins: snapshot.project.plugins.len(),
        channels: snapshot.project.channels.len(),
    }
}

/// A tool as the listings show it.
#[derive(Debug)]
pub struct ToolInfo {
    pub name: String,
    /// Where it comes from (`built-in`, `tools.d/x.yaml`, `mcp server s`).
    pub source: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

impl ToolInfo {
    fn of(tool: &dyn Tool) -> ToolInfo {
        let spec = tool.spec();
        ToolInfo {
            name: spec.name.clone(),
            source: tool.source(),
            description: spec.description.clone(),
            parameters: spec.parameters.clone(),
        }
    }
}

/// The project loaded for `aurad tools`.
pub struct ToolsView {
    snapshot: Snapshot,
    /// Every file's diagnostics.
    pub diagnostics: Vec<Diagnostic>,
}

/// What connecting the MCP servers found.
#[derive(Debug)]
pub struct Connected {
    /// Servers that are not connected, with their state: their tools are
    /// left out.
    pub down: Vec<(String, ServerState)>,
    pub diagnostics: Vec<Diagnostic>,
}

impl ToolsView {
    pub fn load(root: &Path) -> ToolsView {
        let loaded = config::load(root, &config::process_env);
        let (snapshot, diagnostics) = registry::build(loaded, &config::process_env);
        ToolsView {
            snapshot,
            diagnostics,
        }
    }

    /// The `tools:` allow-list of agent `name`, if it is loaded.
    pub fn allow_list(&self, name: &str) -> Option<Vec<String>> {
        self.snapshot
            .project
            .agents
            .get(name)
            .map(|agent| agent.tools.clone())
    }

    /// The MCP servers an allow-list reaches (every one without one).
    fn servers(&self, patterns: Option<&[String]>) -> Vec<McpServerConfig> {
        match patterns {
            None => self.snapshot.project.mcp_servers.clone(),
            Some(p) => registry::servers_for(p, &self.snapshot.project.mcp_servers),
        }
    }

    /// How many MCP servers [`ToolsView::connect`] would start.
    pub fn server_count(&self, patterns: Option<&[String]>) -> usize {
        self.servers(patterns).len()
    }

    /// Starts the MCP servers `patterns` reach, takes their tools and stops
    /// them; `None` when interrupted (they were stopped).
    pub fn connect(&mut self, patterns: Option<&[String]>) -> Result<Option<Connected>, String> {
        let servers = self.servers(patterns);
        if servers.is_empty() {
            return Ok(Some(Connected {
                down: Vec::new(),
                diagnostics: Vec::new(),
            }));
        }
        let runtime = super::runtime()?;
        let snapshot = &mut self.snapshot;
        Ok(runtime.block_on(interruptible(async {
            let (manager, diagnostics) = registry::connect_mcp(snapshot, servers).await;
            let down = manager
                .status()
                .into_iter()
                .filter(|s| s.state.reason().is_some())
                .map(|s| (s.name, s.state))
                .collect();
            manager.shutdown().await;
            Connected { down, diagnostics }
        })))
    }

    /// The tools `patterns` allow (every tool without them).
    pub fn tools(&self, patterns: Option<&[String]>) -> Vec<ToolInfo> {
        self.snapshot
            .tools
            .tools()
            .filter(|t| {
                patterns.is_none_or(|p| {
                    p.iter()
                        .any(|p| crate::tools::glob_match(p, &t.spec().name))
                })
            })
            .map(|t| ToolInfo::of(t.as_ref()))
            .collect()
    }

    /// The memory tools agent `name` gets (`memory.tools: true`), which need
    /// the store; none for another agent.
    pub fn memory_tools(&self, root: &Path, name: &str) -> Result<Vec<ToolInfo>, String> {
        let Some(agent) = self
            .snapshot
            .project
            .agents
            .get(name)
            .filter(|a| a.memory.tools)
        else {
            return Ok(Vec::new());
        };
        let store = open_store(root).map_err(|e| e.to_string())?;
        let tools: Vec<Arc<dyn Tool>> =
            crate::memory::memory_tools(store, agent.memory.namespace.clone(), String::new());
        Ok(tools.iter().map(|t| ToolInfo::of(t.as_ref())).collect())
    }
}

/// The MCP servers of the project's MCP file, with its diagnostics. What
/// the servers log will not show the values the file interpolated.
pub fn load_mcp(root: &Path) -> (Vec<McpServerConfig>, Vec<Diagnostic>) {
    let recording = config::interp::RecordingLookup::new(&config::process_env);
    let (servers, diagnostics) = config::mcp::load_mcp(root, &|name| recording.lookup(name));
    crate::redact::add_to_logs(&registry::secrets::variables_redactor(
        &recording.names(),
        &config::process_env,
    ));
    (servers, diagnostics)
}

/// What `aurad mcp` found of the servers.
#[derive(Debug)]
pub struct McpCheck {
    pub servers: Vec<ServerStatus>,
    /// Tools of different servers that ended up with one name.
    pub conflicts: Vec<String>,
}

/// Starts `servers`, reads their state and tools, stops them; `None` when
/// interrupted (they were stopped). This looks once: a server that would
/// be retried in the background has, for its purpose, failed.
pub fn check_mcp(servers: Vec<McpServerConfig>) -> Result<Option<McpCheck>, String> {
    let runtime = super::runtime()?;
    let checked = runtime.block_on(interruptible(async {
        let manager = McpManager::start(servers).await;
        let status = manager.status();
        let conflicts = manager.conflicts();
        manager.shutdown().await;
        (status, conflicts)
    }));
    Ok(checked.map(|(mut servers, conflicts)| {
        for s in &mut servers {
            if let ServerState::Restarting { reason, .. } = &s.state {
                s.state = ServerState::Failed {
                    reason: reason.clone(),
                };
            }
        }
        McpCheck { servers, conflicts }
    }))
}
