//! The MCP client manager (rmcp): starts every server of `mcp.json`
//! concurrently, offers each server tool as an aurad tool named
//! `<server>_<tool>`, supervises the servers (restarts with backoff) and
//! shuts them down without leaving processes behind. Depends on `tools`,
//! `types` and `config`.
//!
//! Layout: `session` (connect, transports, close), `supervise` (the
//! per-server task and its live state), `tool` (`McpTool`, result
//! mapping), `errors` (readable failure reasons).

mod errors;
mod session;
mod supervise;
mod tool;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use supervise::{BACKOFF_MAX, BACKOFF_START, STABLE_AFTER, backoff};
pub use tool::{MAX_TOOL_NAME, McpTool, namespaced_name, render};

use crate::config::mcp::{McpServerConfig, McpTransport};
use crate::tools::Tool;
use crate::types::{McpState, ToolSpec};
use supervise::Server;

/// The MCP servers of a project. Cheap to clone.
#[derive(Clone)]
pub struct McpManager {
    inner: Arc<Inner>,
}

struct Inner {
    servers: Vec<Arc<Server>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    stop: CancellationToken,
}

/// What `aurad` shows about one server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerStatus {
    pub name: String,
    /// `stdio: cmd args` or `http: url` (header values are never shown).
    pub transport: String,
    pub state: ServerState,
    pub protocol_version: Option<String>,
    /// `name version` as the server reported it.
    pub server_info: Option<String>,
    /// (namespaced name, spec under the server's own tool name).
    pub tools: Vec<(String, ToolSpec)>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ServerState {
    Connecting,
    Connected,
    /// Given up for good (stopped); calls fail with the reason.
    Failed {
        reason: String,
    },
    /// Down; the next attempt to connect starts in `retry_in`.
    Restarting {
        attempt: u32,
        reason: String,
        retry_in: Duration,
    },
}

impl ServerState {
    /// The state without its details.
    pub fn kind(&self) -> McpState {
        match self {
            ServerState::Connecting => McpState::Connecting,
            ServerState::Connected => McpState::Connected,
            ServerState::Failed { .. } => McpState::Failed,
            ServerState::Restarting { .. } => McpState::Restarting,
        }
    }

    /// Why it is down, with the next attempt when one comes.
    pub fn reason(&self) -> Option<String> {
        match self {
            ServerState::Failed { reason } => Some(reason.clone()),
            ServerState::Restarting {
                attempt,
                reason,
                retry_in,
            } => Some(format!(
                "{reason} (attempt {attempt}, retry in {:.1}s)",
                retry_in.as_secs_f64()
            )),
            ServerState::Connecting | ServerState::Connected => None,
        }
    }
}

/// `connected`, `failed: reason`, `restarting: reason (attempt 2, retry in
/// 1.0s)`.
impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason() {
            Some(reason) => write!(f, "{}: {reason}", self.kind()),
            None => write!(f, "{}", self.kind()),
        }
    }
}

impl McpManager {
    /// Starts every server concurrently; returns once each is connected or
    /// has failed (its startup timeout bounds it). Never fails as a whole:
    /// a server that failed is retried in the background.
    pub async fn start(servers: Vec<McpServerConfig>) -> McpManager {
        McpManager::start_watched(servers, Arc::new(Notify::new())).await
    }

    /// [`McpManager::start`], with `changes` notified whenever a server's
    /// state or tool list changes (including a server's own
    /// `tools/list_changed`), so the caller can read [`McpManager::status`]
    /// and [`McpManager::tools`] again.
    pub async fn start_watched(servers: Vec<McpServerConfig>, changes: Arc<Notify>) -> McpManager {
        let stop = CancellationToken::new();
        let mut shared = Vec::new();
        let mut tasks = Vec::new();
        let mut started = Vec::new();
        for config in servers {
            let (server, renew_rx) = Server::new(config, changes.clone());
            let (tx, rx) = tokio::sync::oneshot::channel();
            tasks.push(tokio::spawn(supervise::supervise(
                server.clone(),
                renew_rx,
                stop.child_token(),
                tx,
            )));
            started.push(rx);
            shared.push(server);
        }
        // Built before waiting, so that dropping this future mid-way still
        // stops the supervisors and kills their processes (Drop of Inner).
        let manager = McpManager {
            inner: Arc::new(Inner {
                servers: shared,
                tasks: Mutex::new(tasks),
                stop,
            }),
        };
        futures::future::join_all(started).await;
        manager
    }

    /// One tool per tool of every connected server, named `<server>_<tool>`
    /// (sanitised to `[A-Za-z0-9_-]{1,64}`). Tools whose names collide are
    /// left out; [`McpManager::conflicts`] names them.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        let (named, _) = self.named_tools();
        named
            .into_iter()
            .filter_map(|(name, mut owners)| {
                (owners.len() == 1).then(|| {
                    let (server, tool) = owners.remove(0);
                    Arc::new(McpTool {
                        spec: tool::spec_for(name, &tool),
                        original: tool.name.to_string(),
                        server,
                    }) as Arc<dyn Tool>
                })
            })
            .collect()
    }

    /// Namespaced-name collisions, each naming both (server, tool) pairs.
    pub fn conflicts(&self) -> Vec<String> {
        self.named_tools().1
    }

    #[allow(
        clippy::type_complexity,
        reason = "two lists of tuples, each documented where they are returned"
    )]
    fn named_tools(
        &self,
    ) -> (
        BTreeMap<String, Vec<(Arc<Server>, rmcp::model::Tool)>>,
        Vec<String>,
    ) {
        let mut named: BTreeMap<String, Vec<(Arc<Server>, rmcp::model::Tool)>> = BTreeMap::new();
        for server in &self.inner.servers {
            let tools = server.live.borrow().tools.clone();
            for tool in tools {
                let name = namespaced_name(&server.config.name, &tool.name);
                named.entry(name).or_default().push((server.clone(), tool));
            }
        }
        let conflicts = named
            .iter()
            .filter(|(_, owners)| owners.len() > 1)
            .map(|(name, owners)| {
                let who: Vec<String> = owners
                    .iter()
                    .map(|(s, t)| format!("tool `{}` of server `{}`", t.name, s.config.name))
                    .collect();
                format!(
                    "MCP tool name `{name}` is claimed by {}; none of them is offered. Rename a server in mcp.json (names are cut at {MAX_TOOL_NAME} characters)",
                    who.join(" and ")
                )
            })
            .collect();
        (named, conflicts)
    }

    /// Every server, in config order.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.inner
            .servers
            .iter()
            .map(|server| {
                let live = server.live.borrow();
                let mut state = live.state.clone();
                if let (ServerState::Restarting { retry_in, .. }, Some(at)) =
                    (&mut state, live.retry_at)
                {
                    *retry_in = at.saturating_duration_since(Instant::now());
                }
                ServerStatus {
                    name: server.config.name.clone(),
                    transport: describe_transport(&server.config.transport),
                    state,
                    protocol_version: live.protocol_version.clone(),
                    server_info: live.server_info.clone(),
                    tools: live
                        .tools
                        .iter()
                        .map(|t| {
                            let name = namespaced_name(&server.config.name, &t.name);
                            (name, tool::spec_for(t.name.to_string(), t))
                        })
                        .collect(),
                }
            })
            .collect()
    }

    /// Closes every session and kills every child process group
    /// (grandchildren too). Idempotent.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        let tasks = match self.inner.tasks.lock() {
            Ok(mut tasks) => std::mem::take(&mut *tasks),
            Err(_) => Vec::new(),
        };
        // Each supervisor closes its session: a graceful close, then killpg.
        let bound = Duration::from_secs(8);
        for task in tasks {
            let abort = task.abort_handle();
            if tokio::time::timeout(bound, task).await.is_err() {
                abort.abort();
            }
        }
        self.inner.kill_all();
    }

    /// Kills every server process group at once, without a graceful close:
    /// for a process about to exit (a second Ctrl-C).
    pub fn kill_now(&self) {
        self.inner.stop.cancel();
        self.inner.kill_all();
    }
}

impl Inner {
    /// Best effort: SIGKILL to every process group still known.
    fn kill_all(&self) {
        for server in &self.servers {
            crate::tools::process::kill_group_in(&server.pgid);
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
        self.kill_all();
    }
}

fn describe_transport(t: &McpTransport) -> String {
    match t {
        McpTransport::Stdio { command, args, .. } => {
            let mut text = format!("stdio: {command}");
            for arg in args {
                text.push(' ');
                text.push_str(arg);
            }
            text
        }
        McpTransport::Http { url, .. } => format!("http: {url}"),
    }
}
