//! Supervision of one MCP server: a task that connects, watches the session,
//! and reconnects with exponential backoff when the server exits, its
//! transport closes, or it failed to start. The server's live state (phase,
//! session, tools) is published through a `watch` channel that tools read
//! at call time, so calls made while a server is down fail at once; each
//! change is also signalled on the manager's `changes`, so the daemon can
//! follow states and tool lists. A server that says its tools changed is
//! asked for them again.

use std::sync::Arc;
use std::sync::atomic::AtomicI32;
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::Tool;
use rmcp::{Peer, RoleClient};
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::ServerState;
use super::session::{self, Session};
use crate::config::mcp::McpServerConfig;
use crate::tools::ToolError;

/// First delay before a reconnect.
pub const BACKOFF_START: Duration = Duration::from_millis(500);
/// Longest delay between reconnects.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A session that stayed up this long resets the backoff.
pub const STABLE_AFTER: Duration = Duration::from_secs(60);

/// The delay before reconnect attempt `attempt` (1-based): 0.5 s, 1 s, 2 s,
/// 4 s ... capped at 30 s.
pub fn backoff(attempt: u32) -> Duration {
    let factor = 1u32 << attempt.saturating_sub(1).min(10);
    (BACKOFF_START * factor).min(BACKOFF_MAX)
}

/// What is known about a server right now.
#[derive(Clone)]
pub(crate) struct Live {
    pub state: ServerState,
    /// When the next reconnect starts (while restarting).
    pub retry_at: Option<Instant>,
    pub peer: Option<Peer<RoleClient>>,
    /// Counts sessions; a new session has a higher number.
    pub generation: u64,
    pub protocol_version: Option<String>,
    pub server_info: Option<String>,
    pub tools: Vec<Tool>,
}

/// One configured server, shared by the manager, its supervisor and its tools.
pub(crate) struct Server {
    pub config: McpServerConfig,
    pub live: watch::Sender<Live>,
    /// The process group of the running stdio server (0: none).
    pub pgid: Arc<AtomicI32>,
    /// Asks the supervisor for a new session to replace `generation`.
    renew_tx: mpsc::UnboundedSender<u64>,
    /// Told of every change to `live`.
    changes: Arc<Notify>,
}

impl Server {
    /// Whether the server is reached over streamable HTTP.
    pub fn is_http(&self) -> bool {
        matches!(
            self.config.transport,
            crate::config::mcp::McpTransport::Http { .. }
        )
    }

    pub fn new(
        config: McpServerConfig,
        changes: Arc<Notify>,
    ) -> (Arc<Server>, mpsc::UnboundedReceiver<u64>) {
        let (renew_tx, renew_rx) = mpsc::unbounded_channel();
        let live = Live {
            state: ServerState::Connecting,
            retry_at: None,
            peer: None,
            generation: 0,
            protocol_version: None,
            server_info: None,
            tools: Vec::new(),
        };
        let pgid = Arc::new(AtomicI32::new(0));
        // A forced exit kills the server's group through this slot.
        crate::tools::process::track_group(&pgid);
        let server = Server {
            config,
            live: watch::Sender::new(live),
            pgid,
            renew_tx,
            changes,
        };
        (Arc::new(server), renew_rx)
    }

    /// The live session, or an error saying at once why there is none.
    pub fn peer(&self) -> Result<(Peer<RoleClient>, u64), ToolError> {
        let live = self.live.borrow();
        match (&live.state, &live.peer) {
            (ServerState::Connected, Some(peer)) => Ok((peer.clone(), live.generation)),
            _ => Err(ToolError::Failed(self.unavailable(&live))),
        }
    }

    fn unavailable(&self, live: &Live) -> String {
        let name = &self.config.name;
        match &live.state {
            ServerState::Restarting {
                attempt, reason, ..
            } => {
                let when = match live
                    .retry_at
                    .map(|t| t.saturating_duration_since(Instant::now()))
                {
                    Some(d) if !d.is_zero() => format!("retry in {:.1}s", d.as_secs_f64()),
                    _ => "reconnecting now".into(),
                };
                format!(
                    "MCP server `{name}` is restarting (attempt {attempt}, {when}): {reason}; its tools are unavailable until it is back, try again later or do without them"
                )
            }
            ServerState::Failed { reason } => {
                format!("MCP server `{name}` is not available: {reason}")
            }
            ServerState::Connecting => {
                format!("MCP server `{name}` is still starting; try again shortly")
            }
            ServerState::Connected => {
                format!("MCP server `{name}` has no session; try again shortly")
            }
        }
    }

    /// Asks for a new session replacing `generation` (an expired HTTP
    /// session) and waits for it, bounded by the startup timeout.
    pub async fn renew(&self, generation: u64) -> Result<Peer<RoleClient>, ToolError> {
        let mut rx = self.live.subscribe();
        let _ = self.renew_tx.send(generation);
        let wait = rx.wait_for(|live| {
            live.generation > generation
                || matches!(live.state, ServerState::Failed { .. })
                || live.retry_at.is_some_and(|t| t > Instant::now())
        });
        let bound = self.config.startup_timeout + Duration::from_secs(1);
        let _ = tokio::time::timeout(bound, wait).await;
        self.peer().map(|(peer, _)| peer)
    }

    fn publish(&self, f: impl FnOnce(&mut Live)) {
        self.live.send_modify(f);
        self.changes.notify_one();
    }
}

/// Runs until `stop` is cancelled. `started` is told once the first attempt
/// to connect has ended, either way.
pub(crate) async fn supervise(
    server: Arc<Server>,
    mut renew_rx: mpsc::UnboundedReceiver<u64>,
    stop: CancellationToken,
    started: tokio::sync::oneshot::Sender<()>,
) {
    let name = server.config.name.clone();
    let mut started = Some(started);
    let mut attempt: u32 = 0;
    loop {
        if stop.is_cancelled() {
            break;
        }
        let connected = tokio::select! {
            biased;
            () = stop.cancelled() => break,
            r = session::connect(&server.config, &server.pgid) => r,
        };
        let mut immediate = false;
        let reason = match connected {
            Ok(mut session) => {
                let up_since = Instant::now();
                tracing::info!(target: "aurad::mcp", server = %name, tools = session.tools.len(),
                    "connected ({})", session.server_info.as_deref().unwrap_or("unknown server"));
                server.publish(|live| {
                    live.state = ServerState::Connected;
                    live.retry_at = None;
                    live.peer = Some(session.peer.clone());
                    live.generation += 1;
                    live.protocol_version = session.protocol_version.clone();
                    live.server_info = session.server_info.clone();
                    live.tools = std::mem::take(&mut session.tools);
                });
                if let Some(tx) = started.take() {
                    let _ = tx.send(());
                }
                let generation = server.live.borrow().generation;
                let end =
                    watch_session(&server, &mut session, &mut renew_rx, generation, &stop).await;
                server.publish(|live| live.peer = None);
                session.close(&server.pgid).await;
                if up_since.elapsed() >= STABLE_AFTER {
                    attempt = 0;
                }
                match end {
                    End::Stop => break,
                    End::Renew => {
                        immediate = true;
                        "the HTTP session expired; opening a new one".to_string()
                    }
                    End::Gone(reason) => reason,
                }
            }
            Err(reason) => reason,
        };
        if let Some(tx) = started.take() {
            let _ = tx.send(());
        }
        // A renewal on request is not a failure: it neither waits nor
        // counts towards the backoff.
        let (shown, delay) = if immediate {
            (attempt.saturating_add(1), Duration::ZERO)
        } else {
            attempt = attempt.saturating_add(1);
            (attempt, backoff(attempt))
        };
        tracing::warn!(target: "aurad::mcp", server = %name, attempt = shown,
            "MCP server unavailable: {reason}; reconnecting in {:.1}s", delay.as_secs_f64());
        server.publish(|live| {
            live.state = ServerState::Restarting {
                attempt: shown,
                reason,
                retry_in: delay,
            };
            live.retry_at = Some(Instant::now() + delay);
            live.peer = None;
        });
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stop.cancelled() => break,
        }
    }
    server.publish(|live| {
        live.state = ServerState::Failed {
            reason: "stopped (aurad is shutting down or reloading)".into(),
        };
        live.retry_at = None;
        live.peer = None;
    });
    if let Some(tx) = started.take() {
        let _ = tx.send(());
    }
}

enum End {
    Stop,
    Renew,
    Gone(String),
}

async fn watch_session(
    server: &Server,
    session: &mut Session,
    renew_rx: &mut mpsc::UnboundedReceiver<u64>,
    generation: u64,
    stop: &CancellationToken,
) -> End {
    let mut tools_changed = session.tools_changed.take();
    // The tools asked for again after a notice; the session is still
    // watched meanwhile (a server may hang on `tools/list`).
    let mut listing: Option<BoxFuture<'static, Result<Vec<Tool>, String>>> = None;
    loop {
        tokio::select! {
            reason = session.ended() => return End::Gone(reason),
            () = stop.cancelled() => return End::Stop,
            asked = renew_rx.recv() => match asked {
                Some(g) if g == generation => return End::Renew,
                Some(_) => continue,
                None => return End::Stop,
            },
            Some(()) = async {
                match tools_changed.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            }, if listing.is_none() => {
                // Several notices at once need one listing.
                if let Some(rx) = tools_changed.as_mut() {
                    while rx.try_recv().is_ok() {}
                }
                let peer = session.peer.clone();
                let bound = server.config.startup_timeout;
                listing = Some(Box::pin(async move { session::list_tools(&peer, bound).await }));
            }
            listed = async {
                match listing.as_mut() {
                    Some(listing) => listing.await,
                    None => std::future::pending().await,
                }
            } => {
                listing = None;
                take_tools(server, listed);
            }
        }
    }
}

/// Takes the tools a server listed again after it said they changed. A
/// server that cannot list them keeps its old list (calls to a tool it
/// dropped fail with its own error), and the failure is logged.
fn take_tools(server: &Server, listed: Result<Vec<Tool>, String>) {
    let name = &server.config.name;
    match listed {
        Ok(tools) => {
            if server.live.borrow().tools == tools {
                return;
            }
            tracing::info!(target: "aurad::mcp", server = %name, tools = tools.len(),
                "the server's tool list changed");
            server.publish(|live| live.tools = tools);
        }
        Err(reason) => {
            tracing::warn!(target: "aurad::mcp", server = %name,
                "the server said its tools changed, but {reason}; keeping its previous tools");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let secs: Vec<f64> = (1..=9).map(|a| backoff(a).as_secs_f64()).collect();
        assert_eq!(secs, [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]);
        assert_eq!(backoff(u32::MAX), BACKOFF_MAX);
    }
}
