//! What every command of a project needs before its own work: the store
//! opened from `aurad.yaml`, a runtime for async work, waiting on work
//! unless interrupted, and which diagnostics stop a command about one
//! agent.

use std::path::Path;

use crate::config::{self, Diagnostic};
use crate::store::Store;

/// Why the store could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// `aurad.yaml` has errors (the caller shows them).
    Settings(Vec<Diagnostic>),
    /// The database named there cannot be opened.
    Database(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Settings(_) => write!(f, "aurad.yaml has errors"),
            OpenError::Database(message) => f.write_str(message),
        }
    }
}

/// Opens the store `aurad.yaml` of the project at `root` names.
pub fn open_store(root: &Path) -> Result<Store, OpenError> {
    let (settings, diagnostics) = config::load_settings(root, &config::process_env);
    if diagnostics.iter().any(Diagnostic::is_error) {
        return Err(OpenError::Settings(diagnostics));
    }
    let database = &settings.database;
    Store::connect(database).map_err(|e| OpenError::Database(format!("database {database}: {e}")))
}

/// Where the project's running `aurad serve` listens and its API token, as
/// it wrote them for the person (`config::private`); an error when no
/// daemon of this project runs (or it could not write them), saying where
/// it looked and which records are stale.
pub fn api_access(
    root: &Path,
) -> Result<crate::config::private::ApiAccess, crate::config::private::NoDaemon> {
    crate::config::private::running_api(root, &config::process_env)
}

/// Sets up this process to end every process its tools and MCP servers
/// start (`tools::scope`): first thing in `aurad serve` and `aurad run`,
/// before any child exists. Ends what a killed aurad of the project left;
/// records its own in the project's private folder (`config::private`).
pub fn scope_processes(root: &Path) {
    let dir = crate::config::private::project_dir(root, &config::process_env);
    let key = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let started = crate::tools::scope::start(&key, &dir.join("procs"));
    if started.reaped > 0 {
        tracing::warn!(
            processes = started.reaped,
            "ended the tool and MCP server processes a killed aurad of this project left"
        );
    }
    tracing::debug!(cgroup = ?started.cgroup, subreaper = started.subreaper, "tool processes scoped");
}

/// The single-threaded runtime a command needs for async work.
pub fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}

/// Runs `work` unless SIGINT or SIGTERM comes first, then `None`. MCP
/// servers run in process groups of their own, so a Ctrl-C at the terminal
/// does not reach them: dropping `work` (and any `McpManager` in it) is what
/// kills them.
pub async fn interruptible<T>(work: impl std::future::Future<Output = T>) -> Option<T> {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return Some(work.await);
    };
    tokio::select! {
        value = work => Some(value),
        _ = interrupt.recv() => None,
        _ = term.recv() => None,
    }
}

/// `diagnostics` as a command about agent `name` sees them.
#[derive(Debug, Default)]
pub struct ForAgent {
    /// Warnings, errors of the agent's own file, and errors that concern
    /// every agent (`aurad.yaml`): what to show. What the agent needs that
    /// has errors shows as an error of its own file (naming the skipped
    /// item), so the other errors do not stop it.
    pub shown: Vec<Diagnostic>,
    /// How many errors in files the agent does not use were left out.
    pub unrelated: usize,
    /// Whether an error of `shown` stops the agent.
    pub stops: bool,
}

/// Sorts `diagnostics` into what concerns agent `name` and what does not.
pub fn for_agent(diagnostics: Vec<Diagnostic>, name: &str) -> ForAgent {
    let (shown, unrelated): (Vec<_>, Vec<_>) = diagnostics
        .into_iter()
        .partition(|d| !d.is_error() || concerns(d, name));
    ForAgent {
        stops: shown.iter().any(Diagnostic::is_error),
        shown,
        unrelated: unrelated.len(),
    }
}

/// Whether the error `d` stops agent `name`: one of its own file, or one
/// that concerns every agent (`aurad.yaml`).
pub fn concerns(d: &Diagnostic, name: &str) -> bool {
    let agents = Path::new("agents");
    d.path == agents.join(format!("{name}.yaml"))
        || d.path == agents.join(format!("{name}.yml"))
        || !crate::registry::skipped::atomic_errors(std::slice::from_ref(d)).is_empty()
}
