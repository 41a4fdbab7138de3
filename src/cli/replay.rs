//! `aurad replay RUN|AGENT`: re-executes a stored run's agent (an agent's
//! name: its newest run), as its file is now, through the engine with the
//! run's recorded model answers and tool results (no network, no real
//! tool), and reports where the new run diverges from the recorded one,
//! turn by turn with both sides (the work is `app::replay`'s). Exit 0 when
//! identical, 3 when it diverges, 1 when it cannot replay.

use std::path::Path;

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK, show_for_agent};
use crate::app;

/// The replayed run differs from its recording.
pub const EXIT_DIVERGED: i32 = 3;

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The run: its short id (as `aurad runs` lists it), a unique start or
    /// end of its id, the whole id, or an agent's name: its newest run.
    #[arg(value_name = "RUN_ID|AGENT", add = super::completions::runs_or_agents())]
    pub run_id: String,
}

pub fn run(root: &Path, args: ReplayArgs) -> i32 {
    let replayed = match app::replay::replay(root, &args.run_id, &mut show_for_agent) {
        Ok(replayed) => replayed,
        Err(message) => {
            eprintln!("error: {message}");
            return EXIT_FAILED;
        }
    };
    println!(
        "replayed run {} of agent `{}` ({} model turn(s), {} tool call(s) recorded) with {} as it is now",
        replayed.run_id,
        replayed.agent,
        replayed.turns,
        replayed.calls,
        replayed.file.display()
    );
    if replayed.changed {
        println!(
            "note: {} changed since this run: the recorded answers are replayed as they were, the model's input would differ",
            replayed.file.display()
        );
    }
    if replayed.divergences.is_empty() {
        println!("identical: same tool calls, arguments, results, answer and end");
        return EXIT_OK;
    }
    for d in &replayed.divergences {
        println!("{d}");
    }
    println!("diverged: {} difference(s)", replayed.divergences.len());
    EXIT_DIVERGED
}
