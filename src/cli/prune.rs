//! `aurad runs prune --older-than AGE [--events-only] [--dry-run]`: what
//! the daemon's retention does (`daemon::retention`), by hand, now. It
//! works whether or not `aurad serve` is running (SQLite WAL: the daemon's
//! writes wait for one small batch at most) and prints what it removed.

use std::path::Path;
use std::time::Duration;

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK, open_store};
use crate::app::retention::{BATCH_ROWS, cutoff};
use crate::app::{PruneScope, Pruned};
use crate::config::duration::{format_duration, parse_duration};
use crate::config::settings::Retention;

#[derive(Debug, Args)]
pub struct PruneArgs {
    /// Prune runs that ended longer ago than this: 30d, 12h, 1w (at least 1h).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub older_than: Duration,
    /// Delete only the runs' events; keep each run's record (state, times,
    /// usage, cost, output, error).
    #[arg(long)]
    pub events_only: bool,
    /// Print what would be removed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also delete the sessions (conversations) not used for AGE, with
    /// their messages; a session with a turn not ended is kept.
    #[arg(long, conflicts_with = "events_only")]
    pub sessions: bool,
}

fn parse_age(text: &str) -> Result<Duration, String> {
    let age = parse_duration(text)?;
    if age < Retention::MIN {
        return Err(format!(
            "{} is shorter than the minimum of 1h; write e.g. 30d",
            format_duration(age)
        ));
    }
    Ok(age)
}

pub fn run(root: &Path, args: PruneArgs) -> i32 {
    let store = match open_store(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    let scope = if args.events_only {
        PruneScope::Events
    } else {
        PruneScope::Runs
    };
    let before = cutoff(chrono::Utc::now(), args.older_than);
    let outcome = if args.dry_run {
        store.prunable_blocking(scope, before)
    } else {
        prune_all(&store, scope, before)
    };
    let pruned = match outcome {
        Ok(pruned) => pruned,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    let when = before.format("%Y-%m-%d %H:%M:%S UTC");
    let verb = match (args.dry_run, scope) {
        (true, PruneScope::Runs) => "would delete",
        (true, PruneScope::Events) => "would delete the events of",
        (false, PruneScope::Runs) => "deleted",
        (false, PruneScope::Events) => "deleted the events of",
    };
    println!(
        "{verb} {} that ended before {when}",
        describe(scope, &pruned)
    );
    if args.sessions {
        let sessions = prune_sessions(&store, before, args.dry_run);
        match sessions {
            Ok(p) => println!(
                "{} {} session(s) ({} messages) not used since {when}",
                if args.dry_run {
                    "would delete"
                } else {
                    "deleted"
                },
                p.sessions,
                p.messages
            ),
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_FAILED;
            }
        }
    }
    if args.dry_run {
        println!("nothing was changed (--dry-run)");
    }
    EXIT_OK
}

/// The sessions not used since `before`, a batch at a time (counted only
/// on a dry run).
fn prune_sessions(
    store: &crate::app::Store,
    before: chrono::DateTime<chrono::Utc>,
    dry_run: bool,
) -> Result<crate::app::SessionsPruned, crate::app::StoreError> {
    let batch =
        |limit| futures::executor::block_on(store.prune_sessions(before, u64::MAX, limit, dry_run));
    if dry_run {
        return batch(usize::MAX);
    }
    let mut total = crate::app::SessionsPruned::default();
    loop {
        let pruned = batch(crate::app::retention::SESSION_BATCH)?;
        if pruned.sessions == 0 {
            return Ok(total);
        }
        total.sessions += pruned.sessions;
        total.messages += pruned.messages;
    }
}

/// Every batch until none is left; a batch at a time, so a running daemon
/// keeps writing in between.
fn prune_all(
    store: &crate::app::Store,
    scope: PruneScope,
    before: chrono::DateTime<chrono::Utc>,
) -> Result<Pruned, crate::app::StoreError> {
    let mut total = Pruned::default();
    loop {
        let batch = store.prune_batch_blocking(scope, before, BATCH_ROWS)?;
        if batch.pruned.runs_touched() == 0 {
            return Ok(total);
        }
        total.add(batch.pruned);
    }
}

/// `12 runs (340 events, 2 pipeline steps, 1 approval)` or, for events
/// only, `12 runs (340 events)`.
fn describe(scope: PruneScope, p: &Pruned) -> String {
    let count = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    match scope {
        PruneScope::Events => format!(
            "{} ({})",
            count(p.runs_emptied, "run", "runs"),
            count(p.events, "event", "events")
        ),
        PruneScope::Runs => format!(
            "{} ({}, {}, {})",
            count(p.runs, "run", "runs"),
            count(p.events, "event", "events"),
            count(p.steps, "pipeline step", "pipeline steps"),
            count(p.approvals, "approval", "approvals")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_durations_of_an_hour_or_more() {
        assert_eq!(parse_age("30d").unwrap(), Duration::from_secs(30 * 86_400));
        assert_eq!(parse_age("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_age("10m").unwrap_err().contains("minimum of 1h"));
        assert!(parse_age("soon").unwrap_err().contains("invalid duration"));
    }

    #[test]
    fn counts_read_as_sentences() {
        let p = Pruned {
            runs: 1,
            runs_emptied: 3,
            events: 40,
            steps: 2,
            approvals: 1,
        };
        assert_eq!(
            describe(PruneScope::Runs, &p),
            "1 run (40 events, 2 pipeline steps, 1 approval)"
        );
        assert_eq!(describe(PruneScope::Events, &p), "3 runs (40 events)");
    }
}
