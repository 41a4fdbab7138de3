//! `aurad mcp serve`, composed: the project's agents as MCP tools on
//! stdin/stdout (the protocol handler is `api::mcp`'s), for an editor or
//! any MCP client that starts aurad as a child. It loads the whole
//! project once, starts the MCP servers the agents' allow-lists reach,
//! opens the store, and runs each `tools/call` through the run door `aurad
//! run` uses (`run::Job::prepare`, `run::execute`), recorded with trigger
//! `mcp`. A cancelled call cancels its run; when stdin closes or a signal
//! comes, the runs in flight are cancelled and recorded before the process
//! ends. Nothing but the protocol goes to stdout (logs go to stderr).
//!
//! May depend on `api` (the handler), `config`, `registry`, `run`,
//! `store`, `telemetry`, `tools` and `types`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::StreamExt;
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::one_shot::reachable_servers;
use crate::api::mcp::{AgentRuns, AgentServer, AgentTool, StartedRun, agent_tools};
use crate::config::{self, Diagnostic};
use crate::mcp::McpManager;
use crate::registry::{self, Snapshot};
use crate::run::{Env, Job, RunRequest, execute};
use crate::store::Store;
use crate::types::{RunEvent, RunState, Trigger};

/// How long the runs in flight get to record their end once the server
/// stops.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// What loading the project said, to be shown whatever comes of it.
#[derive(Debug, Default)]
pub struct ServeReport {
    /// The project's diagnostics (an agent with errors is not offered).
    pub diagnostics: Vec<Diagnostic>,
    /// How many agents are offered as tools.
    pub tools: usize,
}

/// Why the server did not serve (or stopped otherwise than by its client).
#[derive(Debug)]
pub enum NotServed {
    /// aurad.yaml or the MCP file has errors that concern every agent (in
    /// the report).
    Config,
    /// Interrupted while the MCP servers started.
    Interrupted,
    /// Something else, said.
    Failed(String),
}

/// Serves the agents of the project at `root` on stdin/stdout until the
/// client closes stdin or SIGINT or SIGTERM comes. `on_loaded` gets the
/// report once the project is loaded, before serving.
pub fn serve(root: &Path, on_loaded: impl FnOnce(&ServeReport)) -> Result<(), NotServed> {
    super::project::scope_processes(root);
    let result = serve_scoped(root, on_loaded);
    crate::tools::scope::finish();
    result
}

fn serve_scoped(root: &Path, on_loaded: impl FnOnce(&ServeReport)) -> Result<(), NotServed> {
    let loaded = config::load(root, &config::process_env);
    let (mut snapshot, diagnostics) = registry::build(loaded, &config::process_env);
    let mut report = ServeReport {
        tools: agent_tools(&snapshot.project).len(),
        diagnostics,
    };
    if !registry::skipped::atomic_errors(&report.diagnostics).is_empty() {
        on_loaded(&report);
        return Err(NotServed::Config);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("aurad-mcp")
        .build()
        .map_err(|e| NotServed::Failed(format!("cannot start the async runtime: {e}")))?;
    let servers = reachable_servers(&snapshot);
    let mcp = if servers.is_empty() {
        None
    } else {
        let connected = runtime.block_on(super::project::interruptible(registry::connect_mcp(
            &mut snapshot,
            servers,
        )));
        let Some((manager, diagnostics)) = connected else {
            return Err(NotServed::Interrupted);
        };
        report.diagnostics.extend(diagnostics);
        Some(manager)
    };
    on_loaded(&report);
    let database = snapshot.project.settings.database.clone();
    let store = Store::connect(&database)
        .map_err(|e| NotServed::Failed(format!("database {database}: {e}")))?;
    if let Err(e) = crate::telemetry::install(
        snapshot.project.settings.otel.as_ref(),
        &config::process_env,
    ) {
        tracing::warn!("{e}; traces are not exported");
    }
    let runs = Arc::new(DoorRuns {
        tools: agent_tools(&snapshot.project),
        snapshot: Arc::new(snapshot),
        store: store.clone(),
        env: Arc::new(config::process_env),
        tracker: TaskTracker::new(),
        closing: CancellationToken::new(),
        live: Arc::default(),
    });
    let served = runtime.block_on(serve_stdio(runs.clone()));
    runtime.block_on(runs.stop(mcp.as_ref()));
    crate::telemetry::shutdown(Duration::from_secs(5));
    // stdin's reader blocks in a thread of its own: it must not keep the
    // process alive.
    runtime.shutdown_timeout(Duration::from_millis(500));
    let closed = store.close();
    served?;
    closed.map_err(|e| NotServed::Failed(format!("closing the database failed: {e}")))
}

/// The protocol on stdin/stdout until the client leaves or a signal comes.
async fn serve_stdio(runs: Arc<DoorRuns>) -> Result<(), NotServed> {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return Err(NotServed::Failed("cannot listen for signals".into()));
    };
    let server = AgentServer::new(runs);
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| NotServed::Failed(format!("the MCP client's initialisation failed: {e}")))?;
    let stop = running.cancellation_token();
    tokio::select! {
        quit = running.waiting() => {
            if let Err(e) = quit {
                return Err(NotServed::Failed(format!("the MCP server stopped abnormally: {e}")));
            }
        }
        _ = interrupt.recv() => stop.cancel(),
        _ = term.recv() => stop.cancel(),
    }
    Ok(())
}

/// Runs through the run door, each on a task of its own.
struct DoorRuns {
    /// The agents offered, computed once: the snapshot does not change.
    tools: Vec<AgentTool>,
    snapshot: Arc<Snapshot>,
    store: Store,
    env: Env,
    /// The runs' tasks, waited for at the end.
    tracker: TaskTracker,
    /// Fires when the server stops: every run in flight is cancelled.
    closing: CancellationToken,
    /// The runs in flight, by id.
    live: Arc<Mutex<HashMap<String, CancellationToken>>>,
}

impl DoorRuns {
    /// Cancels the runs in flight and waits (a while) for them to record
    /// their end; then stops the MCP servers.
    async fn stop(&self, mcp: Option<&McpManager>) {
        self.closing.cancel();
        self.tracker.close();
        if tokio::time::timeout(STOP_GRACE, self.tracker.wait())
            .await
            .is_err()
        {
            let left: Vec<String> = lock(&self.live).keys().cloned().collect();
            tracing::error!(
                runs = ?left,
                "runs did not record their end within {}s of the MCP server's stop",
                STOP_GRACE.as_secs()
            );
        }
        if let Some(manager) = mcp {
            manager.shutdown().await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl AgentRuns for DoorRuns {
    fn tools(&self) -> Vec<AgentTool> {
        self.tools.clone()
    }

    fn start<'a>(
        &'a self,
        agent: &'a str,
        input: Option<String>,
    ) -> BoxFuture<'a, Result<StartedRun, String>> {
        Box::pin(async move {
            if self.closing.is_cancelled() {
                return Err("the MCP server is stopping".into());
            }
            let request = RunRequest {
                input,
                ..RunRequest::new(agent, Trigger::Mcp)
            };
            let job =
                Job::prepare_blocking(self.snapshot.clone(), request, self.env.clone()).await?;
            let run_id = job.id().to_string();
            let cancel = self.closing.child_token();
            lock(&self.live).insert(run_id.clone(), cancel.clone());
            let (events, received) = tokio::sync::mpsc::unbounded_channel();
            let store = self.store.clone();
            let live = self.live.clone();
            let id = run_id.clone();
            // A task of its own: the run records its end even when the call
            // that started it is gone.
            self.tracker.spawn(async move {
                let forward = events.clone();
                let result = execute(job, &store, cancel, move |event| {
                    // The end is sent below, once it is stored.
                    if !matches!(event, RunEvent::Finished { .. }) {
                        let _ = forward.send(event.clone());
                    }
                })
                .await;
                lock(&live).remove(&id);
                let end = match result {
                    Ok(outcome) => RunEvent::Finished {
                        state: outcome.state,
                        reason: outcome.reason,
                        output: outcome.output,
                        usage: outcome.usage,
                        cost_usd: outcome.cost_usd,
                        result: outcome.result,
                    },
                    Err(e) => RunEvent::Finished {
                        state: RunState::Failed,
                        reason: Some(format!(
                            "the run's record could not be stored ({e}); its answer is not returned"
                        )),
                        output: None,
                        usage: Default::default(),
                        cost_usd: None,
                        result: None,
                    },
                };
                let _ = events.send(end);
            });
            let events = stream_of(received);
            Ok(StartedRun { run_id, events })
        })
    }

    fn cancel<'a>(&'a self, run_id: &'a str) -> BoxFuture<'a, ()> {
        if let Some(cancel) = lock(&self.live).get(run_id) {
            cancel.cancel();
        }
        Box::pin(std::future::ready(()))
    }
}

/// The events a run's task sends, as a stream ending when it is done.
fn stream_of(
    received: tokio::sync::mpsc::UnboundedReceiver<RunEvent>,
) -> futures::stream::BoxStream<'static, RunEvent> {
    futures::stream::unfold(received, |mut rx| async move {
        rx.recv().await.map(|event| (event, rx))
    })
    .boxed()
}
