//! Which run a command's `RUN_ID|AGENT` argument means (`aurad logs`,
//! `aurad replay`): the run whose id or id prefix it is, else, when it names
//! an agent, that agent's newest run; and whether it names an agent at all
//! (`aurad logs -f`, which follows the agent rather than one run).

use std::path::Path;

use crate::store::{RunFilter, RunRecord, Store, StoreError};

/// The run `name` means, or what to say when there is none.
pub fn find(root: &Path, store: &Store, name: &str) -> Result<RunRecord, String> {
    let by_id = store.get_run_blocking(name);
    if let Ok(Some(run)) = by_id {
        return Ok(run);
    }
    if is_agent_name(name) {
        if let Some(run) = newest_run(store, name).map_err(|e| e.to_string())? {
            return Ok(run);
        }
        if has_agent_file(root, name) {
            return Err(format!(
                "agent `{name}` has no runs yet; start one with `aurad run {name}`"
            ));
        }
    }
    match by_id {
        Err(e) => Err(e.to_string()),
        Ok(_) => Err(format!("no run {name:?}; list runs with `aurad runs`")),
    }
}

/// Whether `name` means an agent: its file exists, or it is no run id
/// (prefix) but the store has runs of that agent.
pub fn names_agent(root: &Path, store: &Store, name: &str) -> bool {
    if !is_agent_name(name) {
        return false;
    }
    if has_agent_file(root, name) {
        return true;
    }
    matches!(
        store.get_run_blocking(name),
        Ok(None) | Err(StoreError::Invalid(_))
    ) && newest_run(store, name).is_ok_and(|run| run.is_some())
}

/// Whether `name` could be an agent's (its file name's) name.
fn is_agent_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

fn has_agent_file(root: &Path, name: &str) -> bool {
    let agents = root.join("agents");
    ["yaml", "yml"]
        .iter()
        .any(|ext| agents.join(format!("{name}.{ext}")).is_file())
}

/// The newest run of `agent`, if it has any.
pub fn newest_run(store: &Store, agent: &str) -> Result<Option<RunRecord>, StoreError> {
    Ok(newest_runs(store, agent, 1)?.pop())
}

/// The `limit` newest runs of `agent`, newest first.
pub fn newest_runs(store: &Store, agent: &str, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
    store.list_runs_blocking(&RunFilter {
        agent: Some(agent.to_string()),
        limit,
        ..RunFilter::default()
    })
}
