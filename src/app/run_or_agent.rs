//! Which run a command's `RUN_ID|AGENT` argument means (`aurad logs`,
//! `aurad replay`, `aurad approve`): the run whose id, id prefix or id end
//! (the short id the listings show) it is, else, when it names an agent,
//! that agent's newest run; and whether it names an agent at all (`aurad
//! logs -f`, which follows the agent rather than one run). An ambiguous id
//! lists its candidates with their agent and start.

use std::path::Path;

use crate::store::{RunFilter, RunRecord, Store, StoreError};

pub use crate::store::short_run_id;

/// The run `id` (a whole id, a unique prefix or a unique end) means;
/// `Ok(None)` when none. An ambiguous id is an error listing each
/// candidate (short id, agent, start, whole id) and asking for more
/// characters.
pub fn by_id(store: &Store, id: &str) -> Result<Option<RunRecord>, String> {
    match store.get_run_blocking(id) {
        Err(StoreError::Ambiguous { prefix, matches }) => Err(ambiguous(store, &prefix, &matches)),
        other => other.map_err(|e| e.to_string()),
    }
}

/// What to say when `id` matches the runs `matches` (ids; one more than
/// [`crate::store::MAX_MATCHES`] means there are more).
fn ambiguous(store: &Store, id: &str, matches: &[String]) -> String {
    let mut text = format!(
        "run id `{id}` is ambiguous: it is the start or end of {}{} runs' ids; give more characters \
         (the short id `aurad runs` shows, or the whole id):",
        if matches.len() > crate::store::MAX_MATCHES {
            "more than "
        } else {
            ""
        },
        matches.len().min(crate::store::MAX_MATCHES),
    );
    for candidate in matches.iter().take(crate::store::MAX_MATCHES) {
        match store.get_run_blocking(candidate) {
            Ok(Some(run)) => text.push_str(&format!(
                "\n  {}  {}  started {}  ({})",
                short_run_id(&run.id),
                run.agent,
                run.started_at
                    .unwrap_or(run.created_at)
                    .format("%Y-%m-%d %H:%M:%S"),
                run.id
            )),
            _ => text.push_str(&format!("\n  {candidate}")),
        }
    }
    text
}

/// The run `name` means, or what to say when there is none.
pub fn find(root: &Path, store: &Store, name: &str) -> Result<RunRecord, String> {
    let by_id = by_id(store, name);
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
        Err(e) => Err(e),
        Ok(_) => {
            let names = crate::config::agent_names(root);
            let hint = crate::config::suggest::did_you_mean(name, names.iter().map(String::as_str))
                .map(|hint| format!(" and no agent of that name ({hint})"))
                .unwrap_or_default();
            Err(format!(
                "no run {name:?}{hint}; list runs with `aurad runs` (a run is named \
                 by its short id, a unique start or end of its id, or its whole id) and agents \
                 with `aurad agents`"
            ))
        }
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
