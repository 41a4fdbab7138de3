//! One live connection to one MCP server: spawning a stdio server in its own
//! process group and its own `tools::scope::Scope` (so what it starts ends
//! with it, even if detached, and a restarted aurad ends what a killed one
//! left; stderr forwarded to `tracing`), or opening a streamable
//! HTTP session; the MCP handshake and tool listing under the startup
//! timeout; passing on the server's `tools/list_changed` notifications;
//! noticing when the server goes away; closing it so that nothing is left
//! behind. Failure reasons are written for the user.

use std::collections::HashMap;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, Tool};
use rmcp::service::{
    NotificationContext, QuitReason, RunningService, RunningServiceCancellationToken,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, Peer, RoleClient, ServiceExt};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStderr};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout, timeout_at};

use super::errors::{describe_init_error, describe_service_error};
use crate::config::duration::format_duration;
use crate::config::mcp::{McpServerConfig, McpTransport};
use crate::tools::process::{GroupSignal, signal_group};
use crate::tools::scope::Scope;

/// How long a closing server gets to exit on its own before its process
/// group is killed.
const GRACE: Duration = Duration::from_secs(2);
/// Lines of stderr kept for failure reasons.
const TAIL_LINES: usize = 8;

/// A connected server.
pub(crate) struct Session {
    pub peer: Peer<RoleClient>,
    pub protocol_version: Option<String>,
    pub server_info: Option<String>,
    pub tools: Vec<Tool>,
    /// A message for each `notifications/tools/list_changed` of the server
    /// (taken by whoever watches the session).
    pub tools_changed: Option<mpsc::UnboundedReceiver<()>>,
    cancel: Option<RunningServiceCancellationToken>,
    /// Resolves when the service loop ends (transport closed).
    done: Option<BoxFuture<'static, Result<QuitReason, tokio::task::JoinError>>>,
    /// The service loop has ended; `ended` only waits for the process.
    transport_closed: bool,
    child: Option<ChildProc>,
}

/// A stdio server's process and what it printed on stderr.
struct ChildProc {
    child: Child,
    pgid: i32,
    tail: Arc<Mutex<Vec<String>>>,
    stderr_task: Option<tokio::task::JoinHandle<()>>,
    /// Every process the server started; closed once it is killed (or
    /// when dropped).
    scope: Option<Scope>,
}

/// aurad's side of a session: introduces itself, and passes on the
/// server's notices that its tool list changed.
struct Client {
    tools_changed: mpsc::UnboundedSender<()>,
}

impl Client {
    fn new() -> (Client, mpsc::UnboundedReceiver<()>) {
        let (tools_changed, rx) = mpsc::unbounded_channel();
        (Client { tools_changed }, rx)
    }
}

impl ClientHandler for Client {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("aurad", env!("CARGO_PKG_VERSION")),
        )
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let _ = self.tools_changed.send(());
        std::future::ready(())
    }
}

/// Connects to the server; bounded by its startup timeout. `pgid_slot`
/// holds the process group id while a stdio server runs.
pub(crate) async fn connect(
    config: &McpServerConfig,
    pgid_slot: &Arc<AtomicI32>,
) -> Result<Session, String> {
    let deadline = Instant::now() + config.startup_timeout;
    match &config.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
            sandbox,
            root,
            ..
        } => {
            if !cwd.is_dir() {
                return Err(format!(
                    "working directory `{}` does not exist; fix `cwd` in mcp.json",
                    cwd.display()
                ));
            }
            let mut cmd = tokio::process::Command::new(command);
            // A server starts with the allow-listed part of aurad's
            // environment; anything else, secrets included, reaches it only
            // through its `env` in mcp.json.
            let base = crate::tools::process::base_environment();
            cmd.env_clear()
                .envs(base.iter().map(|(k, v)| (k, v)))
                .args(args)
                .envs(env)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .process_group(0)
                .kill_on_drop(true);
            cmd.current_dir(cwd);
            // Like tool processes, a server cannot read the daemon's memory
            // or environment; with `sandbox` in mcp.json it is confined as
            // an agent's tools are (its scratch directory, for `workdir`,
            // is `.aurad/work/mcp-<name>`).
            let confinement = crate::tools::sandbox::Sandbox::for_run(
                *sandbox,
                root,
                &format!("mcp-{}", config.name),
            )
            .hiding(&crate::config::private::state_dir(
                &crate::config::process_env,
            ))
            .confinement()
            .map_err(|e| format!("cannot sandbox the server: {e}"))?;
            cmd.envs(confinement.env.iter().map(|(k, v)| (k, v)));
            let scope = Scope::open();
            scope
                .prepare(&mut cmd)
                .map_err(|e| spawn_error(command, &e))?;
            confinement.install(&mut cmd);
            let child = scope
                .spawn(&mut cmd)
                .map_err(|e| spawn_error(command, &e))?;
            connect_stdio(config, child, scope, pgid_slot, deadline).await
        }
        McpTransport::Http { url, headers } => {
            let mut custom = HashMap::new();
            for (name, value) in headers {
                let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| format!("header name `{name}` is invalid: {e}"))?;
                let value = reqwest::header::HeaderValue::from_str(value)
                    .map_err(|_| format!("the value of header `{name}` is invalid"))?;
                custom.insert(name, value);
            }
            let client = reqwest::Client::builder()
                .connect_timeout(config.startup_timeout)
                .build()
                .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
            let transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                .custom_headers(custom)
                .reinit_on_expired_session(false);
            let transport = StreamableHttpClientTransport::with_client(client, transport_config);
            let (client, changes) = Client::new();
            match timeout_at(deadline, client.serve(transport)).await {
                Err(_) => Err(handshake_timeout(config)),
                Ok(Err(e)) => Err(describe_init_error(&e, url)),
                Ok(Ok(running)) => finish(config, running, changes, None, deadline).await,
            }
        }
    }
}

fn spawn_error(command: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => format!(
            "command `{command}` not found; install it or fix `command` in mcp.json (a bare name is looked up on PATH)"
        ),
        std::io::ErrorKind::PermissionDenied => {
            format!("command `{command}` is not executable (permission denied)")
        }
        _ => format!("cannot start `{command}`: {e}"),
    }
}

fn handshake_timeout(config: &McpServerConfig) -> String {
    format!(
        "did not complete the MCP handshake within {}; check that it is an MCP server, or raise `startup_timeout`",
        format_duration(config.startup_timeout)
    )
}

async fn connect_stdio(
    config: &McpServerConfig,
    mut child: Child,
    scope: Scope,
    pgid_slot: &Arc<AtomicI32>,
    deadline: Instant,
) -> Result<Session, String> {
    let pgid = child.id().map(|p| p as i32).unwrap_or(0);
    pgid_slot.store(pgid, Ordering::SeqCst);
    let tail = Arc::new(Mutex::new(Vec::new()));
    let stderr_task = child
        .stderr
        .take()
        .map(|stderr| tokio::spawn(forward_stderr(config.name.clone(), stderr, tail.clone())));
    let pipes = (child.stdout.take(), child.stdin.take());
    let mut proc = ChildProc {
        child,
        pgid,
        tail,
        stderr_task,
        scope: Some(scope),
    };
    let (Some(stdout), Some(stdin)) = pipes else {
        proc.kill(pgid_slot).await;
        return Err("cannot open the server's stdin/stdout".into());
    };
    let (client, changes) = Client::new();
    let handshake = tokio::select! {
        r = timeout_at(deadline, client.serve((stdout, stdin))) => Some(r),
        _ = proc.child.wait() => None,
    };
    let (failure, wait) = match handshake {
        Some(Ok(Ok(running))) => {
            return finish(config, running, changes, Some(proc), deadline).await;
        }
        Some(Err(_)) => (handshake_timeout(config), Duration::ZERO),
        Some(Ok(Err(e))) => (
            format!("the MCP handshake failed: {}", describe_init_error(&e, "")),
            // It probably closed stdout because it is exiting: say how.
            Duration::from_millis(500),
        ),
        None => (String::new(), Duration::ZERO),
    };
    let exited = proc.exit_reason(wait).await;
    proc.kill(pgid_slot).await;
    Err(match exited {
        Some(exit) => format!("{exit} during startup{}", proc.tail_suffix().await),
        None => failure,
    })
}

/// Asks a connected server for its tools again (after it said they
/// changed), bounded by `bound`.
pub(crate) async fn list_tools(
    peer: &Peer<RoleClient>,
    bound: Duration,
) -> Result<Vec<Tool>, String> {
    match timeout(bound, peer.list_all_tools()).await {
        Ok(Ok(tools)) => Ok(tools),
        Ok(Err(e)) => Err(format!(
            "listing its tools failed: {}",
            describe_service_error(&e)
        )),
        Err(_) => Err(format!(
            "did not list its tools within {}",
            format_duration(bound)
        )),
    }
}

/// Lists the tools of a freshly initialised service.
async fn finish(
    config: &McpServerConfig,
    running: RunningService<RoleClient, Client>,
    tools_changed: mpsc::UnboundedReceiver<()>,
    mut child: Option<ChildProc>,
    deadline: Instant,
) -> Result<Session, String> {
    let peer = running.peer().clone();
    let listed = timeout_at(deadline, peer.list_all_tools()).await;
    let tools = match listed {
        Ok(Ok(tools)) => tools,
        failed => {
            let mut reason = match failed {
                Err(_) => format!(
                    "connected but did not list its tools within {}; raise `startup_timeout`",
                    format_duration(config.startup_timeout)
                ),
                Ok(Err(e)) => format!("listing its tools failed: {}", describe_service_error(&e)),
                Ok(Ok(_)) => String::new(),
            };
            let _ = timeout(GRACE, running.cancel()).await;
            if let Some(proc) = child.as_mut() {
                if let Some(exit) = proc.exit_reason(Duration::from_millis(200)).await {
                    reason = format!("{exit} during startup{}", proc.tail_suffix().await);
                }
                signal_group(proc.pgid, GroupSignal::Kill);
                let _ = timeout(GRACE, proc.child.wait()).await;
            }
            return Err(reason);
        }
    };
    let info = peer.peer_info();
    let protocol_version = info
        .as_ref()
        .map(|i| i.protocol_version.as_str().to_string());
    let server_info = info
        .as_ref()
        .and_then(|i| i.server_info.as_ref())
        .map(|s| format!("{} {}", s.name, s.version));
    let cancel = Some(running.cancellation_token());
    let done: BoxFuture<'static, _> = Box::pin(running.waiting());
    Ok(Session {
        peer,
        protocol_version,
        server_info,
        tools,
        tools_changed: Some(tools_changed),
        cancel,
        done: Some(done),
        transport_closed: false,
        child,
    })
}

impl Session {
    /// Resolves when the server goes away, with the reason. Cancel-safe:
    /// once the transport is seen closed, a later call goes on from there.
    pub async fn ended(&mut self) -> String {
        if !self.transport_closed {
            let (child, done) = (&mut self.child, &mut self.done);
            let child_exit = async {
                match child.as_mut() {
                    Some(proc) => proc.child.wait().await.ok(),
                    None => std::future::pending().await,
                }
            };
            let done = async {
                match done.as_mut() {
                    Some(done) => {
                        let _ = done.await;
                    }
                    None => std::future::pending().await,
                }
            };
            let status = tokio::select! {
                status = child_exit => status,
                () = done => None,
            };
            if let (Some(status), Some(proc)) = (status, self.child.as_mut()) {
                return format!("{}{}", describe_exit(status), proc.tail_suffix().await);
            }
            self.transport_closed = true;
            self.done = None;
        }
        match self.child.as_mut() {
            // Its stdout closed: it is probably exiting, so say how.
            Some(proc) => match proc.exit_reason(Duration::from_secs(1)).await {
                Some(exit) => format!("{exit}{}", proc.tail_suffix().await),
                None => "closed the connection (stdout) but kept running".into(),
            },
            None => "the HTTP session was closed".into(),
        }
    }

    /// Closes the session: a graceful close first, then the whole process
    /// group is killed (grandchildren too) and the child reaped.
    pub async fn close(mut self, pgid_slot: &AtomicI32) {
        if let Some(cancel) = self.cancel.take() {
            cancel.cancel();
        }
        let deadline = Instant::now() + GRACE;
        if let Some(done) = self.done.take() {
            let _ = timeout_at(deadline, done).await;
        }
        if let Some(mut proc) = self.child.take() {
            if timeout_at(deadline, proc.child.wait()).await.is_err() {
                // Still running after stdin closed: ask the whole group to
                // stop (a `docker run` wrapper must get the chance to stop
                // its container) before SIGKILL.
                let pgid = pgid_slot.load(Ordering::SeqCst);
                if pgid > 0 {
                    signal_group(pgid, GroupSignal::Terminate);
                    let _ = tokio::time::timeout(GRACE, proc.child.wait()).await;
                }
            }
            proc.kill(pgid_slot).await;
        }
    }
}

impl ChildProc {
    /// Waits up to `wait` for the process to exit and describes how it did.
    async fn exit_reason(&mut self, wait: Duration) -> Option<String> {
        match timeout(wait, self.child.wait()).await {
            Ok(Ok(status)) => Some(describe_exit(status)),
            _ => None,
        }
    }

    /// Kills the process group and reaps the child. The slot is cleared
    /// only if it still holds this group (not a newer session's).
    async fn kill(&mut self, pgid_slot: &AtomicI32) {
        signal_group(self.pgid, GroupSignal::Kill);
        let _ = pgid_slot.compare_exchange(self.pgid, 0, Ordering::SeqCst, Ordering::SeqCst);
        let _ = timeout(GRACE, self.child.wait()).await;
        if let Some(scope) = self.scope.take() {
            // What left the group ends too.
            let _ = tokio::task::spawn_blocking(move || scope.close()).await;
        }
        if let Some(task) = self.stderr_task.take() {
            // A grandchild that escaped the group could hold stderr open.
            let _ = timeout(Duration::from_millis(300), task).await;
        }
    }

    /// `": <last stderr lines>"`, or a note that stderr was empty.
    async fn tail_suffix(&mut self) -> String {
        if let Some(mut task) = self.stderr_task.take()
            && timeout(Duration::from_millis(300), &mut task)
                .await
                .is_err()
        {
            self.stderr_task = Some(task);
        }
        let lines = self.tail.lock().map(|t| t.clone()).unwrap_or_default();
        if lines.is_empty() {
            " (it printed nothing on stderr)".into()
        } else {
            format!(": {}", lines.join(" | "))
        }
    }
}

/// Forwards each stderr line to `tracing` and keeps the last few.
async fn forward_stderr(server: String, stderr: ChildStderr, tail: Arc<Mutex<Vec<String>>>) {
    let mut reader = BufReader::new(stderr);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&buf);
                let line: String = text.trim_end().chars().take(2000).collect();
                if line.is_empty() {
                    continue;
                }
                tracing::info!(target: "aurad::mcp", server = %server, "stderr: {line}");
                if let Ok(mut t) = tail.lock() {
                    if t.len() == TAIL_LINES {
                        t.remove(0);
                    }
                    t.push(line.chars().take(300).collect());
                }
            }
        }
    }
}

/// "exited with code 1", "was killed by signal 9".
pub(crate) fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => format!("exited ({status})"),
    }
}
