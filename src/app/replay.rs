//! `aurad replay RUN|AGENT`: re-executes a stored run's agent (an agent's
//! name: its newest run), as its file is now, through the engine with the
//! run's recorded model answers and tool results (no network, no real
//! tool), and finds where the new run diverges from the recorded one.
//! Reads the store directly: no daemon needed.

use std::path::{Path, PathBuf};

use super::offline::{load_agent, prepare_offline, tools_for};
use super::project::{ForAgent, open_store, runtime};
use super::run_or_agent;
use crate::llm::retry::RetryPolicy;
use crate::replay::{Divergence, RecordedApprovals, ScriptedProvider, Trace, compare, play};
use crate::types::Trigger;

/// A run replayed.
#[derive(Debug)]
pub struct Replayed {
    pub run_id: String,
    pub agent: String,
    /// Model turns and tool calls recorded.
    pub turns: usize,
    pub calls: usize,
    /// The agent's file, as it is now.
    pub file: PathBuf,
    /// The file changed since the run (its definition hash differs).
    pub changed: bool,
    /// Where the replay differs from the recording, turn by turn; none:
    /// identical.
    pub divergences: Vec<Divergence>,
}

/// Replays the run `name` means. `show` gets the project's diagnostics as
/// they concern the run's agent, before anything else is said.
pub fn replay(
    root: &Path,
    name: &str,
    show: &mut dyn FnMut(&ForAgent, &str),
) -> Result<Replayed, String> {
    let store = open_store(root).map_err(|e| e.to_string())?;
    let run = run_or_agent::find(root, &store, name)?;
    let events = store
        .run_events_blocking(&run.id)
        .map_err(|e| e.to_string())?;
    store.close().map_err(|e| e.to_string())?;
    if !run.state.is_final() {
        return Err(format!(
            "run {} is {}: replay a run that has ended",
            run.id, run.state
        ));
    }
    let recorded = Trace::from_events(&events);
    if recorded.pipeline {
        return Err(format!(
            "run {} is a pipeline run: replay the runs of its steps (`aurad runs` lists them)",
            run.id
        ));
    }
    let Some(input) = recorded.input.clone().filter(|_| recorded.end.is_some()) else {
        return Err(format!(
            "run {} has no complete record of events (pruned by retention, or cut off): it cannot be replayed",
            run.id
        ));
    };
    let (report, snapshot) = load_agent(root, &run.agent);
    show(&report, &run.agent);
    let snapshot = snapshot?;
    let agent = &snapshot.project.agents[&run.agent];
    let (spec, sandbox) = prepare_offline(&snapshot, agent, Some(input), Trigger::Replay)?;
    let provider = ScriptedProvider::new(recorded.model_turns());
    let tools = tools_for(&snapshot, agent, recorded.tool_results(), &[], sandbox);
    let approvals = RecordedApprovals::from_events(&events);
    let runtime = runtime()?;
    let played = runtime.block_on(play(
        &spec,
        &provider,
        &tools,
        approvals.as_ref().map(|a| a as _),
        &snapshot.redactor,
        RetryPolicy::default(),
    ));
    Ok(Replayed {
        divergences: compare(&recorded, &played.trace(), provider.asked()),
        turns: recorded.turns.len(),
        calls: recorded.call_count(),
        file: agent.path.clone(),
        changed: run.definition_hash != agent.hash,
        run_id: run.id,
        agent: run.agent,
    })
}
