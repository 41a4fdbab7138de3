//! `aurad approve [RUN [--call ID]] [--deny REASON]`: decides the tool call
//! a run waits on (`approve:` in its agent file), or, with no run, lists the
//! runs waiting with their calls. A decision names its call: `--call`, or,
//! on a terminal, the call shown and confirmed; so a second decision can
//! never approve a call nobody saw. It writes to the store, the source of
//! truth, so it works whether or not the daemon is up: a running daemon
//! finds the decision within a moment (it looks every half second).

use std::path::Path;

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK, open_store};
use crate::app::{Store, StoreError};
use crate::types::approval::{DecidedBy, Decision};

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The run (its short id as `aurad runs` and `aurad approve` show it,
    /// a unique start or end of its id, or the whole id); none: list the
    /// runs waiting for approval.
    #[arg(add = super::completions::runs())]
    pub run_id: Option<String>,
    /// The call decided (its id, as `aurad approve` lists it). Without it,
    /// on a terminal, the call the run waits on is shown and confirmed;
    /// elsewhere it is required.
    #[arg(long, value_name = "ID")]
    pub call: Option<String>,
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
        Some(id) => decide(&store, id, args.call, args.deny),
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
            None => waiting_state(
                w.approval.requested_at,
                w.approval.timeout_at,
                chrono::Utc::now(),
            ),
        };
        println!(
            "{}  {}  {}",
            crate::app::run_or_agent::short_run_id(&w.run.id),
            w.run.agent,
            state
        );
        println!(
            "    call {}: {} {}",
            call.call_id, call.tool, call.arguments
        );
    }
    println!(
        "decide with: aurad approve RUN --call ID  or  aurad approve RUN --call ID --deny \"reason\""
    );
    Ok(())
}

/// An undecided call's state as of `now`: since when it waits and, in the
/// future tense while it is ahead, when it is denied automatically.
fn waiting_state(
    requested: chrono::DateTime<chrono::Utc>,
    deadline: chrono::DateTime<chrono::Utc>,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let at = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%SZ").to_string();
    let left = (deadline - now).num_seconds();
    if left > 0 {
        format!(
            "waiting since {}; denied automatically at {} (in {}) unless decided",
            at(requested),
            at(deadline),
            span(left)
        )
    } else {
        format!(
            "waiting since {}; its deadline {} passed {} ago: it is denied automatically when \
             its run's process next looks, unless decided first",
            at(requested),
            at(deadline),
            span(-left)
        )
    }
}

/// `40s`, `23m`, `2h05m`, `3d04h`: a span of seconds to the minute once it
/// is a minute or more.
fn span(seconds: i64) -> String {
    match seconds {
        ..60 => format!("{}s", seconds.max(0)),
        60..3600 => format!("{}m", seconds / 60),
        3600..86_400 => format!("{}h{:02}m", seconds / 3600, seconds % 3600 / 60),
        _ => format!("{}d{:02}h", seconds / 86_400, seconds % 86_400 / 3600),
    }
}

fn decide(
    store: &Store,
    id: &str,
    call: Option<String>,
    deny: Option<String>,
) -> Result<(), String> {
    let run = match crate::app::run_or_agent::by_id(store, id)? {
        Some(run) => run,
        None => {
            return Err(format!(
                "no run {id:?}; `aurad approve` lists the waiting runs"
            ));
        }
    };
    let call_id = match call {
        Some(call) => call,
        None => confirm_waiting_call(store, &run.id, deny.is_none())?,
    };
    let decision = Decision {
        approved: deny.is_none(),
        reason: deny.filter(|r| !r.trim().is_empty()),
        by: DecidedBy::Cli,
        at: chrono::Utc::now(),
    };
    match store.decide_approval_blocking(&run.id, &call_id, decision) {
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

/// The call run `run_id` waits on, once a person at the terminal confirmed
/// deciding it (`approve` or deny); without a terminal, an error naming it
/// so a script can decide it with `--call`.
fn confirm_waiting_call(store: &Store, run_id: &str, approve: bool) -> Result<String, String> {
    use std::io::{BufRead, IsTerminal, Write};
    let waiting = store.waiting_runs_blocking().map_err(|e| e.to_string())?;
    let Some(call) = waiting
        .into_iter()
        .find(|w| w.run.id == run_id && w.approval.decision.is_none())
        .map(|w| w.approval.request)
    else {
        return Err(format!(
            "run {run_id} waits on no undecided call; `aurad approve` lists the waiting runs"
        ));
    };
    let verb = if approve { "approve" } else { "deny" };
    if !std::io::stdin().is_terminal() {
        return Err(format!(
            "run {run_id} waits on call {} (`{}` with {}); name the call you {verb}: aurad approve {run_id} --call {}",
            call.call_id, call.tool, call.arguments, call.call_id
        ));
    }
    print!(
        "run {run_id} waits on call {}: `{}` with {}\n{verb} it? [y/N] ",
        call.call_id, call.tool, call.arguments
    );
    std::io::stdout().flush().map_err(|e| e.to_string())?;
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| e.to_string())?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(call.call_id)
    } else {
        Err(format!(
            "not decided: the call waits on ({verb} it with aurad approve {run_id} --call {})",
            call.call_id
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{span, waiting_state};

    #[test]
    fn a_deadline_ahead_is_in_the_future_tense_one_behind_is_said_passed() {
        let now = chrono::Utc::now();
        let requested = now - chrono::Duration::minutes(7);
        let ahead = waiting_state(requested, now + chrono::Duration::seconds(23 * 60 + 5), now);
        assert!(ahead.contains("denied automatically at"), "{ahead}");
        assert!(ahead.contains("(in 23m) unless decided"), "{ahead}");
        let behind = waiting_state(requested, now - chrono::Duration::seconds(90), now);
        assert!(behind.contains("passed 1m ago"), "{behind}");
        assert!(!behind.contains(" in "), "{behind}");
        assert_eq!(span(40), "40s");
        assert_eq!(span(2 * 3600 + 5 * 60), "2h05m");
        assert_eq!(span(3 * 86_400 + 4 * 3600), "3d04h");
    }
}
