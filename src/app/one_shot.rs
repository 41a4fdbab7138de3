//! `aurad run NAME`, composed: load only what this agent needs (its file,
//! `aurad.yaml`, the skills, plugins and MCP servers it and the agents it
//! calls can reach), open the store on a thread of its own meanwhile,
//! start the MCP servers it may use, then run it through the run door with
//! traces when configured, and stop it all. Ctrl-C or SIGTERM cancels the
//! run; a second one records it cancelled and exits at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::project::{ForAgent, concerns, for_agent, interruptible, runtime};
use crate::config::{self, Diagnostic};
use crate::engine::RunOutcome;
use crate::mcp::{McpManager, ServerState};
use crate::registry::{self, Snapshot};
use crate::run::{Env, Job, RunRequest, execute};
use crate::store::{Store, StoreError};
use crate::types::{Database, RunEvent, RunState, Trigger};

/// What loading said, to be shown whatever comes of it.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// The project's diagnostics as they concern the agent.
    pub agent: ForAgent,
    /// What starting the MCP servers found.
    pub mcp: Vec<Diagnostic>,
    /// MCP servers that are not connected, each as `name` and its state:
    /// their tools are not available to the run.
    pub servers_down: Vec<(String, ServerState)>,
}

/// Why the agent cannot run.
#[derive(Debug)]
pub enum NotLoaded {
    /// There is no agent of that name (nor a file of it with errors).
    NoAgent { dir: PathBuf, names: Vec<String> },
    /// Its own files, `aurad.yaml` or its MCP servers have errors (in the
    /// report).
    Config,
    /// Interrupted while the MCP servers started; they were stopped.
    Interrupted,
    /// Something else, said.
    Failed(String),
}

/// The agent loaded and its MCP servers started, ready to run.
pub struct Loaded {
    runtime: tokio::runtime::Runtime,
    snapshot: Arc<Snapshot>,
    mcp: Option<McpManager>,
    /// The store opening on its own thread (`None`: not yet started).
    early_store: Option<JoinHandle<Result<Store, StoreError>>>,
    database: Database,
    name: String,
}

/// Loads agent `name` of the project at `root` and what it needs. Every
/// process its tools and MCP servers start is scoped (`tools::scope`):
/// it ends with them, with this process, or at the next start of `aurad
/// run` or `aurad serve` if this one is killed.
pub fn load(root: &Path, name: &str) -> (LoadReport, Result<Loaded, NotLoaded>) {
    super::project::scope_processes(root);
    let (report, loaded) = load_agent(root, name);
    if loaded.is_err() {
        crate::tools::scope::finish();
    }
    (report, loaded)
}

fn load_agent(root: &Path, name: &str) -> (LoadReport, Result<Loaded, NotLoaded>) {
    let mut report = LoadReport::default();
    let loaded = config::load_one(root, name, &config::process_env);
    let own_errors = loaded
        .diagnostics
        .iter()
        .any(|d| d.is_error() && concerns(d, name));
    if !loaded.project.agents.contains_key(name) && !own_errors {
        let refused = NotLoaded::NoAgent {
            dir: root.join("agents"),
            names: config::agent_names(root),
        };
        return (report, Err(refused));
    }
    // The store opens (and a SQLite file replays its WAL) on a thread of
    // its own while the rest of the start-up goes on. Not when that would
    // create the file: a run stopped by a configuration error leaves none.
    let database = loaded.project.settings.database.clone();
    let early_store = match &database {
        Database::Sqlite(path) if !path.exists() => None,
        _ => {
            let database = database.clone();
            Some(std::thread::spawn(move || Store::connect(&database)))
        }
    };
    if loaded
        .project
        .agents
        .get(name)
        .is_some_and(|agent| !agent.tools.is_empty())
    {
        // Overlaps with the rest of the start-up instead of delaying the
        // first tool call.
        crate::tools::prepare_builtin_schemas();
    }
    let (mut snapshot, diagnostics) = registry::build(loaded, &config::process_env);
    report.agent = for_agent(diagnostics, name);
    if report.agent.stops || !snapshot.project.agents.contains_key(name) {
        return (report, Err(NotLoaded::Config));
    }
    let runtime = match runtime() {
        Ok(runtime) => runtime,
        Err(message) => return (report, Err(NotLoaded::Failed(message))),
    };
    // Only the MCP servers the allow-lists of this agent and of the agents
    // it calls (the only ones loaded) can reach are started.
    let servers = reachable_servers(&snapshot);
    let mcp = if servers.is_empty() {
        None
    } else {
        let connected =
            runtime.block_on(interruptible(registry::connect_mcp(&mut snapshot, servers)));
        let Some((manager, diagnostics)) = connected else {
            return (report, Err(NotLoaded::Interrupted));
        };
        report.servers_down = manager
            .status()
            .into_iter()
            .filter(|s| !matches!(s.state, ServerState::Connected))
            .map(|s| (s.name, s.state))
            .collect();
        let errors = diagnostics.iter().any(Diagnostic::is_error);
        report.mcp = diagnostics;
        if errors {
            runtime.block_on(manager.shutdown());
            return (report, Err(NotLoaded::Config));
        }
        Some(manager)
    };
    let loaded = Loaded {
        runtime,
        snapshot: Arc::new(snapshot),
        mcp,
        early_store,
        database,
        name: name.to_string(),
    };
    (report, Ok(loaded))
}

/// The MCP servers the allow-lists of the snapshot's agents can reach:
/// those a run of them may use, the only ones started.
pub(super) fn reachable_servers(snapshot: &Snapshot) -> Vec<crate::config::mcp::McpServerConfig> {
    let patterns: Vec<String> = snapshot
        .project
        .agents
        .values()
        .flat_map(|a| a.tools.iter().cloned())
        .collect();
    registry::servers_for(&patterns, &snapshot.project.mcp_servers)
}

/// A run that ended, in whatever state.
#[derive(Debug)]
pub struct Finished {
    pub run_id: String,
    pub outcome: RunOutcome,
    /// It was a pipeline's (which streams no answer text).
    pub pipeline: bool,
}

/// Why a run did not end with its record complete.
#[derive(Debug)]
pub enum RunError {
    /// The request cannot run (a template, a missing input): said.
    Request(String),
    /// The store could not be opened: said.
    Store(String),
    /// The run's record is incomplete: the store failed during or after it.
    Record { run_id: String, message: String },
}

impl Loaded {
    /// Runs the agent with `input` (default: its `prompt`), on `model` if
    /// given, giving each event to `on_event`. `on_cancel` is called when
    /// the first Ctrl-C or SIGTERM cancels the run.
    pub fn run(
        mut self,
        input: Option<String>,
        model: Option<String>,
        on_event: impl FnMut(&RunEvent) + Send,
        on_cancel: impl Fn() + Send + 'static,
    ) -> Result<Finished, RunError> {
        let request = RunRequest {
            input,
            model,
            ..RunRequest::new(&self.name, Trigger::Cli)
        };
        let env: Env = Arc::new(config::process_env);
        let job = match Job::prepare(&self.snapshot, request, &env) {
            Ok(job) => job,
            Err(message) => {
                self.stop_mcp();
                crate::tools::scope::finish();
                return Err(RunError::Request(message));
            }
        };
        let opened = match self.early_store.take().map(JoinHandle::join) {
            Some(Ok(opened)) => opened,
            Some(Err(_)) => Err(StoreError::Invalid(
                "the thread opening the database panicked".into(),
            )),
            None => Store::connect(&self.database),
        };
        let store = match opened {
            Ok(store) => store,
            Err(e) => {
                self.stop_mcp();
                crate::tools::scope::finish();
                return Err(RunError::Store(format!("database {}: {e}", self.database)));
            }
        };
        let pipeline = matches!(job, Job::Pipeline(_));
        let run_id = job.id().to_string();
        // Traces only when configured: otherwise nothing is set up.
        if let Err(e) = crate::telemetry::install(
            self.snapshot.project.settings.otel.as_ref(),
            &config::process_env,
        ) {
            tracing::warn!("{e}; traces are not exported");
        }
        let result = self.runtime.block_on(async {
            let cancel = CancellationToken::new();
            let watcher = tokio::spawn(watch_signals(
                cancel.clone(),
                store.clone(),
                run_id.clone(),
                self.mcp.clone(),
                on_cancel,
            ));
            let result = execute(job, &store, cancel, on_event).await;
            watcher.abort();
            result
        });
        self.stop_mcp();
        // The exporter runs on its own thread: this waits for the run's spans.
        crate::telemetry::shutdown(Duration::from_secs(5));
        // A tool stuck in a blocking call must not keep the process alive.
        self.runtime.shutdown_timeout(Duration::from_millis(500));
        crate::tools::scope::finish();
        let closed = store.close();
        let outcome = result.map_err(|e| RunError::Record {
            run_id: run_id.clone(),
            message: format!("the database failed: {e}"),
        })?;
        closed.map_err(|e| RunError::Record {
            run_id: run_id.clone(),
            message: format!("closing the database failed: {e}"),
        })?;
        Ok(Finished {
            run_id,
            outcome,
            pipeline,
        })
    }

    /// Its runtime, snapshot and MCP servers, and the store opened: what a
    /// chat keeps for its turns (`app::chat`).
    pub(super) fn into_parts(
        mut self,
    ) -> Result<
        (
            tokio::runtime::Runtime,
            Arc<Snapshot>,
            Option<McpManager>,
            Store,
        ),
        String,
    > {
        let opened = match self.early_store.take().map(JoinHandle::join) {
            Some(Ok(opened)) => opened,
            Some(Err(_)) => Err(StoreError::Invalid(
                "the thread opening the database panicked".into(),
            )),
            None => Store::connect(&self.database),
        };
        match opened {
            Ok(store) => Ok((self.runtime, self.snapshot, self.mcp, store)),
            Err(e) => {
                self.stop_mcp();
                crate::tools::scope::finish();
                Err(format!("database {}: {e}", self.database))
            }
        }
    }

    fn stop_mcp(&self) {
        if let Some(manager) = &self.mcp {
            self.runtime.block_on(manager.shutdown());
        }
    }
}

/// Ctrl-C or SIGTERM cancels the run (recorded `cancelled`); a second one
/// records the run as cancelled as best it can within a second, kills what
/// the run started, and exits with 130.
async fn watch_signals(
    cancel: CancellationToken,
    store: Store,
    run_id: String,
    mcp: Option<McpManager>,
    on_cancel: impl Fn(),
) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    let Ok(mut interrupt) = signal(SignalKind::interrupt()) else {
        return;
    };
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = term.recv() => {}
    }
    on_cancel();
    cancel.cancel();
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = term.recv() => {}
    }
    let finish = store.finish_run(
        &run_id,
        RunState::Cancelled,
        Some("cancelled (the process was stopped at once)".into()),
        None,
        Default::default(),
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), finish).await;
    if let Some(manager) = mcp {
        manager.kill_now();
    }
    crate::tools::process::kill_every_group();
    std::process::exit(EXIT_CANCELLED);
}

/// The exit code of a process stopped by Ctrl-C.
pub const EXIT_CANCELLED: i32 = 130;
