//! `aurad replay RUN|AGENT`: re-executes a stored run's agent (an agent's
//! name: its newest run), as its file is now, through the engine with the
//! run's recorded model answers and tool results (no network, no real
//! tool), and reports where the new run diverges from the recorded one,
//! turn by turn with both sides. Reads the store directly, like `aurad
//! logs`: no daemon needed. Exit 0 when identical, 3 when it diverges, 1
//! when it cannot replay.

use std::path::Path;

use clap::Args;

use super::offline::{load_agent, prepare_offline, tools_for};
use super::{EXIT_FAILED, EXIT_OK, open_store};
use crate::llm::retry::RetryPolicy;
use crate::replay::{RecordedApprovals, ScriptedProvider, Trace, compare, play};

/// The replayed run differs from its recording.
pub const EXIT_DIVERGED: i32 = 3;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The run id (as `aurad runs` lists it) or a unique prefix of it, or
    /// an agent's name: its newest run.
    #[arg(value_name = "RUN_ID|AGENT")]
    pub run_id: String,
}

pub fn run(root: &Path, args: ReplayArgs) -> i32 {
    match replay(root, &args.run_id) {
        Ok(true) => EXIT_OK,
        Ok(false) => EXIT_DIVERGED,
        Err(message) => {
            eprintln!("error: {message}");
            EXIT_FAILED
        }
    }
}

/// `Ok(true)`: identical; `Ok(false)`: diverged (printed).
fn replay(root: &Path, run_id: &str) -> Result<bool, String> {
    let store = open_store(root)?;
    let run = super::run_or_agent::find(root, &store, run_id)?;
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
    let snapshot = load_agent(root, &run.agent)?;
    let agent = &snapshot.project.agents[&run.agent];
    let (spec, sandbox) = prepare_offline(&snapshot, agent, Some(input), "replay")?;
    let provider = ScriptedProvider::new(recorded.model_turns());
    let tools = tools_for(&snapshot, agent, recorded.tool_results(), &[], sandbox);
    let approvals = RecordedApprovals::from_events(&events);
    let runtime = super::runtime().ok_or("cannot start the async runtime")?;
    let played = runtime.block_on(play(
        &spec,
        &provider,
        &tools,
        approvals.as_ref().map(|a| a as _),
        &snapshot.redactor,
        RetryPolicy::default(),
    ));
    println!(
        "replayed run {} of agent `{}` ({} model turn(s), {} tool call(s) recorded) with {} as it is now",
        run.id,
        run.agent,
        recorded.turns.len(),
        recorded.call_count(),
        agent.path.display()
    );
    if run.definition_hash != agent.hash {
        println!(
            "note: {} changed since this run: the recorded answers are replayed as they were, the model's input would differ",
            agent.path.display()
        );
    }
    let divergences = compare(&recorded, &played.trace(), provider.asked());
    if divergences.is_empty() {
        println!("identical: same tool calls, arguments, results, answer and end");
        return Ok(true);
    }
    for d in &divergences {
        println!("{d}");
    }
    println!("diverged: {} difference(s)", divergences.len());
    Ok(false)
}
