//! `aurad approve [RUN] [--deny REASON]`: decides the tool call a run waits
//! on (`approve:` in its agent file), or, with no run, lists the runs
//! waiting with their calls. It writes to the store, the source of truth,
//! so it works whether or not the daemon is up: a running daemon finds the
//! decision within a moment (it looks every half second).

use std::path::Path;

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK, open_store};
use crate::app::{Store, StoreError};
use crate::types::approval::{DecidedBy, Decision};

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The run (its id or a unique prefix, as `aurad runs` shows); none:
    /// list the runs waiting for approval.
    pub run_id: Option<String>,
    /// Deny the call instead, with this reason (the model gets
    /// "denied by a person: REASON" as the tool's result).
    #[arg(long, value_name = "REASON")]
    pub deny: Option<String>,
}

pub fn run(root: &Path, args: ApproveArgs) -> i32 {
    let store = match open_store(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    let result = match &args.run_id {
        None if args.deny.is_some() => Err(
            "--deny needs a run: aurad approve RUN --deny \"reason\" (aurad approve lists the waiting runs)"
                .to_string(),
        ),
        None => list(&store),
        Some(id) => decide(&store, id, args.deny),
    };
    match result {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_FAILED
        }
    }
}

fn list(store: &Store) -> Result<(), String> {
    let waiting = store.waiting_runs_blocking().map_err(|e| e.to_string())?;
    if waiting.is_empty() {
        println!("no run is waiting for approval");
        return Ok(());
    }
    for w in waiting {
        let call = &w.approval.request;
        let state = match &w.approval.decision {
            Some(d) if d.approved => format!("approved by {}, resuming", d.by),
            Some(d) => format!("denied by {}, resuming", d.by),
            None => format!(
                "waiting since {}, denied at {}",
                w.approval.requested_at.format("%Y-%m-%d %H:%M:%SZ"),
                w.approval.timeout_at.format("%Y-%m-%d %H:%M:%SZ")
            ),
        };
        println!("{}  {}  {}", w.run.id, w.run.agent, state);
        println!("    {} {}", call.tool, call.arguments);
    }
    println!("decide with: aurad approve RUN  or  aurad approve RUN --deny \"reason\"");
    Ok(())
}

fn decide(store: &Store, id: &str, deny: Option<String>) -> Result<(), String> {
    let run = match store.get_run_blocking(id) {
        Ok(Some(run)) => run,
        Ok(None) => {
            return Err(format!(
                "no run {id:?}; `aurad approve` lists the waiting runs"
            ));
        }
        Err(e) => return Err(e.to_string()),
    };
    let decision = Decision {
        approved: deny.is_none(),
        reason: deny.filter(|r| !r.trim().is_empty()),
        by: DecidedBy::Cli,
        at: chrono::Utc::now(),
    };
    match store.decide_approval_blocking(&run.id, decision) {
        Ok(approval) => {
            let verdict = match &approval.decision {
                Some(d) if d.approved => "approved",
                _ => "denied",
            };
            println!(
                "{verdict}: {} {} (run {})",
                approval.request.tool, approval.request.arguments, run.id
            );
            Ok(())
        }
        Err(StoreError::Conflict(message)) => Err(message),
        Err(e) => Err(e.to_string()),
    }
}
