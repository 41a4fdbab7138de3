//! What the shell's completion offers (`COMPLETE=bash aurad -- aurad run
//! he`, `aurad completions`): the project's agent names and its recent runs
//! (their short ids, or whole ids for a typed id start). Reads the files and
//! the store, never creates the store: with no SQLite file there are no runs
//! to offer. Depends on `config` and `store`.

use std::path::Path;

use crate::config;
use crate::store::{RunFilter, RunRecord, Store, short_run_id};
use crate::types::Database;

/// How many of the newest runs completion offers.
const RECENT_RUNS: usize = 200;

/// One completion: the word and what it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    pub word: String,
    pub help: String,
}

/// The agents of the project at `root` whose name starts with `current`.
pub fn agents(root: &Path, current: &str) -> Vec<Choice> {
    config::agent_names(root)
        .into_iter()
        .filter(|name| name.starts_with(current))
        .map(|name| Choice {
            help: "agent".to_string(),
            word: name,
        })
        .collect()
}

/// The recent runs `current` may be the start of: their short ids (what
/// the listings show) starting with it, else their whole ids starting with
/// it; newest first.
pub fn runs(root: &Path, current: &str) -> Vec<Choice> {
    let recent = recent_runs(root);
    let help = |r: &RunRecord| {
        format!(
            "{} {} {}",
            r.agent,
            r.state,
            r.started_at
                .unwrap_or(r.created_at)
                .format("%Y-%m-%d %H:%M:%S")
        )
    };
    let short: Vec<Choice> = recent
        .iter()
        .filter(|r| short_run_id(&r.id).starts_with(current))
        .map(|r| Choice {
            word: short_run_id(&r.id).to_string(),
            help: help(r),
        })
        .collect();
    if !short.is_empty() {
        return short;
    }
    recent
        .iter()
        .filter(|r| r.id.starts_with(current))
        .map(|r| Choice {
            word: r.id.clone(),
            help: help(r),
        })
        .collect()
}

/// The newest runs of the project's store; none when its settings have
/// errors, its SQLite file does not exist yet, or it cannot be read.
fn recent_runs(root: &Path) -> Vec<RunRecord> {
    let (settings, diagnostics) = config::load_settings(root, &config::process_env);
    if diagnostics.iter().any(config::Diagnostic::is_error) {
        return Vec::new();
    }
    if let Database::Sqlite(path) = &settings.database
        && !path.is_file()
    {
        return Vec::new();
    }
    let Ok(store) = Store::connect(&settings.database) else {
        return Vec::new();
    };
    let runs = store
        .list_runs_blocking(&RunFilter {
            limit: RECENT_RUNS,
            ..RunFilter::default()
        })
        .unwrap_or_default();
    let _ = store.close();
    runs
}
