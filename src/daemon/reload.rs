//! Loading a whole snapshot of the project for the daemon, first at start
//! and then on every change: read and validate every file, connect the MCP
//! servers the agents can reach (reusing the connection of every server
//! whose configuration did not change), and report what changed. It also
//! tells when a connected server's tools differ from those the last load
//! saw (a server that came up late, or changed its tool list), which calls
//! for a new snapshot too.
//!
//! A file with errors leaves out only what it defines (see
//! `registry::skipped`): the load goes on without it, an agent file with
//! errors keeps the version the previous snapshot served (when that still
//! fits), and a server whose tool names collide is listed as skipped. Only
//! an atomic error (`aurad.yaml`, an unreadable directory) rejects the
//! load: then nothing changes, the caller keeps the old snapshot and the
//! servers it uses stay connected.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::mcp::McpServerConfig;
use crate::config::{self, Diagnostic, Settings};
use crate::mcp::McpManager;
use crate::registry::{self, Snapshot, skipped};
use crate::types::{McpState, ToolSpec};

use crate::run::Env;

/// A loaded snapshot (what it left out is in `Snapshot::skipped`) and the
/// diagnostics to log besides: warnings, and why a last good agent version
/// no longer fits.
pub struct Loaded {
    pub snapshot: Arc<Snapshot>,
    pub warnings: Vec<Diagnostic>,
}

/// Loads snapshots and owns the MCP connections they use.
pub struct Reloader {
    root: PathBuf,
    env: Env,
    /// Connected servers by name, with the configuration they run.
    servers: HashMap<String, (McpServerConfig, McpManager)>,
    /// Notified when a server's state or tools change.
    changes: Arc<tokio::sync::Notify>,
    /// The servers' tools as the last load saw them: those the current
    /// snapshot took, or, after a rejected load, those of the servers then
    /// connected (so a tool list that makes every load fail does not start
    /// another load at each change of a server's state).
    seen_tools: Vec<(String, ToolSpec)>,
}

impl Reloader {
    pub fn new(root: PathBuf, env: Env) -> Reloader {
        Reloader {
            root,
            env,
            servers: HashMap::new(),
            changes: Arc::new(tokio::sync::Notify::new()),
            seen_tools: Vec::new(),
        }
    }

    /// Notified whenever an MCP server's state or tool list changes: then
    /// [`Reloader::server_states`] and [`Reloader::mcp_tools_changed`] may
    /// tell something new.
    pub fn changes(&self) -> Arc<tokio::sync::Notify> {
        self.changes.clone()
    }

    /// Whether the connected servers now offer other tools than the last
    /// load saw.
    pub fn mcp_tools_changed(&self) -> bool {
        self.connected_tools() != self.seen_tools
    }

    /// Takes the servers' present tools as seen, without a load.
    pub fn mark_tools_seen(&mut self) {
        self.seen_tools = self.connected_tools();
    }

    fn connected_tools(&self) -> Vec<(String, ToolSpec)> {
        tools_of(self.servers.values().map(|(_, m)| m))
    }

    /// Loads the project; an agent whose file has errors keeps its version
    /// in `previous`. `Err` holds every diagnostic when one is atomic; then
    /// nothing changed.
    pub async fn load(
        &mut self,
        previous: Option<Arc<Snapshot>>,
    ) -> Result<Loaded, Vec<Diagnostic>> {
        let before = self.connected_tools();
        let loaded = self.load_snapshot(previous).await;
        if loaded.is_err() {
            self.seen_tools = before;
        }
        loaded
    }

    /// [`Reloader::load`]; sets `seen_tools` when it succeeds.
    async fn load_snapshot(
        &mut self,
        previous: Option<Arc<Snapshot>>,
    ) -> Result<Loaded, Vec<Diagnostic>> {
        let env = self.env.clone();
        let root = self.root.clone();
        // Reading and parsing files is blocking work.
        let built = tokio::task::spawn_blocking(move || {
            let loaded = config::load(&root, &*env);
            let (mut snapshot, diagnostics) = registry::build(loaded, &*env);
            if !skipped::atomic_errors(&diagnostics).is_empty() {
                return Err(diagnostics);
            }
            let mut warnings: Vec<Diagnostic> =
                diagnostics.into_iter().filter(|d| !d.is_error()).collect();
            if let Some(previous) = previous {
                warnings.extend(registry::keep_last_good(&mut snapshot, &previous, &*env));
            }
            Ok((snapshot, warnings))
        })
        .await;
        let (mut snapshot, warnings) = match built {
            Ok(built) => built?,
            Err(e) => {
                return Err(vec![Diagnostic::error(
                    std::path::Path::new("."),
                    (0, 0),
                    format!("loading the project failed: {e}"),
                )]);
            }
        };
        // The servers some agent's allow-list can reach.
        let mut wanted: BTreeMap<String, McpServerConfig> = BTreeMap::new();
        for agent in snapshot.project.agents.values() {
            for server in registry::servers_for(&agent.tools, &snapshot.project.mcp_servers) {
                wanted.insert(server.name.clone(), server);
            }
        }
        let mut started = Vec::new();
        let mut managers = Vec::new();
        for (name, config) in &wanted {
            match self.servers.get(name) {
                Some((old, manager)) if old == config => managers.push((config, manager.clone())),
                _ => {
                    tracing::info!(server = %name, "connecting MCP server");
                    let manager =
                        McpManager::start_watched(vec![config.clone()], self.changes.clone()).await;
                    started.push((name.clone(), config.clone(), manager.clone()));
                    managers.push((config, manager));
                }
            }
        }
        // Taken before the tools themselves, so the snapshot can only be
        // newer than what is marked seen (then one more load follows).
        let loaded_tools = tools_of(managers.iter().map(|(_, m)| m));
        // A tool whose name is taken is left out, and its server listed as
        // skipped with the collision; its other tools stay.
        for (config, manager) in &managers {
            let mut problems = manager.conflicts();
            for tool in manager.tools() {
                if let Err(message) = snapshot.tools.add(tool) {
                    problems.push(message);
                }
            }
            if let Some(first) = problems.first() {
                let place = (config.line, config.column);
                let error = Diagnostic::error(&config.source, place, first.clone());
                snapshot.skipped.push(skipped::SkippedItem {
                    kind: skipped::ItemKind::McpServer,
                    name: config.name.clone(),
                    error: skipped::ErrorPlace::from(&error),
                    errors: problems.len(),
                    stale: false,
                });
            }
        }
        snapshot
            .skipped
            .sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        // Commit: the new connections replace the old ones of their name;
        // servers no longer wanted stop.
        let mut replaced = Vec::new();
        for (name, config, manager) in started {
            if let Some((_, old)) = self.servers.insert(name, (config, manager)) {
                replaced.push(old);
            }
        }
        let gone: Vec<String> = self
            .servers
            .keys()
            .filter(|name| !wanted.contains_key(*name))
            .cloned()
            .collect();
        for name in gone {
            if let Some((_, old)) = self.servers.remove(&name) {
                tracing::info!(server = %name, "stopping MCP server no agent uses any more");
                replaced.push(old);
            }
        }
        // Runs in flight hold their own tool handles; a replaced server's
        // calls fail with its stopped state, which the model is told.
        for old in replaced {
            old.shutdown().await;
        }
        self.seen_tools = loaded_tools;
        Ok(Loaded {
            snapshot: Arc::new(snapshot),
            warnings,
        })
    }

    /// Every connected server's state, for metrics and health.
    pub fn server_states(&self) -> Vec<(String, McpState)> {
        let mut states: Vec<(String, McpState)> = self
            .servers
            .values()
            .flat_map(|(_, m)| m.status())
            .map(|s| (s.name, s.state.kind()))
            .collect();
        states.sort_by(|a, b| a.0.cmp(&b.0));
        states
    }

    /// Stops every MCP server.
    pub async fn shutdown(&mut self) {
        for (_, (_, manager)) in self.servers.drain() {
            manager.shutdown().await;
        }
    }
}

/// Every tool of `managers`' servers, by name: what a snapshot takes.
fn tools_of<'a>(managers: impl Iterator<Item = &'a McpManager>) -> Vec<(String, ToolSpec)> {
    let mut tools: Vec<(String, ToolSpec)> = managers
        .flat_map(McpManager::status)
        .flat_map(|status| status.tools)
        .collect();
    tools.sort_by(|a, b| a.0.cmp(&b.0));
    tools
}

/// What changed between two snapshots, for the log.
pub fn describe_changes(old: &Snapshot, new: &Snapshot) -> Vec<String> {
    let mut changes = Vec::new();
    let (a, b) = (&old.project.agents, &new.project.agents);
    for name in b.keys().filter(|n| !a.contains_key(*n)) {
        changes.push(format!("agent `{name}` added"));
    }
    for name in a.keys().filter(|n| !b.contains_key(*n)) {
        changes.push(format!("agent `{name}` removed"));
    }
    for (name, agent) in b {
        if let Some(old) = a.get(name)
            && old.hash != agent.hash
        {
            changes.push(format!("agent `{name}` changed"));
        }
    }
    changes.extend(restart_needed(&old.project.settings, &new.project.settings));
    changes
}

/// Settings that take effect only after a restart.
pub fn restart_needed(old: &Settings, new: &Settings) -> Vec<String> {
    let mut notes = Vec::new();
    if old.listen != new.listen {
        notes.push(format!(
            "aurad.yaml: `listen` changed to {}; restart aurad serve to apply it (still listening on {})",
            new.listen, old.listen
        ));
    }
    if old.database != new.database || old.cluster_lease != new.cluster_lease {
        notes.push(format!(
            "aurad.yaml: `database` or `cluster` changed (database {}); restart aurad serve to apply it (still using {})",
            new.database, old.database
        ));
    }
    notes
}
