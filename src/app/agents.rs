//! `aurad agents`: every valid agent with what the store knows of it (its
//! last run, its consecutive failures and the backoff they cause), read
//! from the files and the store, whether or not `aurad serve` runs.

use std::path::Path;

use chrono::{DateTime, Utc};

use super::project::runtime;
use crate::api::AgentInfo;
use crate::config::{self, Agent, Diagnostic};
use crate::scheduler::failure_backoff;
use crate::store::{RunFilter, RunRecord, Store};
use crate::types::{Database, RunState};

/// The agents, described.
pub struct AgentListing {
    /// Every file's diagnostics.
    pub diagnostics: Vec<Diagnostic>,
    /// The project as loaded (its valid agents).
    pub project: config::Project,
    /// Each valid agent as `GET /v1/agents` describes it.
    pub agents: Vec<AgentInfo>,
    /// `aurad.yaml` has errors, so the store is unknown and was not read.
    pub settings_broken: bool,
    /// The store could not be read: why.
    pub history_error: Option<String>,
    /// When the listing was made (next fires count from it).
    pub now: DateTime<Utc>,
}

/// Lists the agents of the project at `root`.
pub fn list(root: &Path) -> AgentListing {
    let loaded = config::load(root, &config::process_env);
    let settings_broken = loaded
        .diagnostics
        .iter()
        .any(|d| d.is_error() && d.path == Path::new("aurad.yaml"));
    let now = Utc::now();
    let project = loaded.project;
    // Without a valid aurad.yaml the database is not known; without the
    // SQLite file there are no runs yet (and listing must not create it).
    let no_file = project
        .settings
        .database
        .sqlite_path()
        .is_some_and(|path| !path.exists());
    let (history, history_error) = if settings_broken || no_file {
        (None, None)
    } else {
        match read_history(&project.settings.database, project.agents.keys()) {
            Ok(history) => (Some(history), None),
            Err(message) => (None, Some(message)),
        }
    };
    let agents = project
        .agents
        .values()
        .map(|agent| {
            let past = history
                .as_ref()
                .and_then(|h| h.iter().find(|p| p.agent == agent.name));
            describe(agent, past, now)
        })
        .collect();
    AgentListing {
        diagnostics: loaded.diagnostics,
        project,
        agents,
        settings_broken,
        history_error,
        now,
    }
}

/// What the store knows about one agent.
struct Past {
    agent: String,
    last_run: Option<RunRecord>,
    consecutive_failures: u32,
    /// When the newest counted failure ended.
    last_failure: Option<DateTime<Utc>>,
}

fn read_history<'a>(
    database: &Database,
    agents: impl Iterator<Item = &'a String>,
) -> Result<Vec<Past>, String> {
    let store = Store::connect(database).map_err(|e| format!("database {database}: {e}"))?;
    let runtime = runtime()?;
    let mut history = Vec::new();
    for agent in agents {
        let (last_run, failures) = runtime
            .block_on(async {
                Ok::<_, crate::store::StoreError>((
                    store.last_run(agent).await?,
                    store.consecutive_failures(agent).await?,
                ))
            })
            .map_err(|e| e.to_string())?;
        let last_failure = if failures > 0 {
            last_failure(&store, agent)?
        } else {
            None
        };
        history.push(Past {
            agent: agent.clone(),
            last_run,
            consecutive_failures: failures,
            last_failure,
        });
    }
    drop(runtime);
    store.close().map_err(|e| e.to_string())?;
    Ok(history)
}

/// When the agent's newest failed, timed-out or interrupted run ended: the
/// failures the backoff counts. Skipped and missed fires recorded since do
/// not move it.
fn last_failure(store: &Store, agent: &str) -> Result<Option<DateTime<Utc>>, String> {
    let mut newest: Option<DateTime<Utc>> = None;
    for state in [RunState::Failed, RunState::TimedOut, RunState::Interrupted] {
        let filter = RunFilter {
            parent: None,
            agent: Some(agent.to_string()),
            state: Some(state),
            limit: 1,
        };
        let runs = store
            .list_runs_blocking(&filter)
            .map_err(|e| e.to_string())?;
        let ended = runs.first().and_then(|r| r.finished_at.or(r.started_at));
        newest = newest.max(ended);
    }
    Ok(newest)
}

/// The agent as `GET /v1/agents` describes it.
fn describe(agent: &Agent, past: Option<&Past>, now: DateTime<Utc>) -> AgentInfo {
    let failures = past.map_or(0, |p| p.consecutive_failures);
    let backoff_until = past
        .and_then(|p| p.last_failure)
        .zip(failure_backoff(failures))
        .and_then(|(at, wait)| Some(at + chrono::Duration::from_std(wait).ok()?));
    let last_run = past.and_then(|p| p.last_run.clone());
    AgentInfo::new(agent, now, last_run, failures, backoff_until)
}
