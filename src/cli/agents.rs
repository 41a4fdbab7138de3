//! `aurad agents`: every valid agent with its schedules, their next fire
//! times, the last run and the failure backoff. Reads the files and the
//! store, so it works whether or not `aurad serve` is running.

use std::path::Path;

use chrono::{DateTime, Utc};
use clap::Args;

use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK, print_diagnostics};
use crate::app::{self, AgentInfo, RunRecord};
use crate::config;

#[derive(Debug, Args)]
pub struct AgentsArgs {
    /// Print the agents as a JSON array.
    #[arg(long)]
    pub json: bool,
}

pub fn run(root: &Path, args: AgentsArgs) -> i32 {
    let listing = app::agents::list(root);
    print_diagnostics(&listing.diagnostics);
    let broken = listing.diagnostics.iter().any(|d| d.is_error());
    if let Some(message) = &listing.history_error {
        say_err!("error: {message}");
        return EXIT_FAILED;
    }
    let infos = &listing.agents;
    if args.json {
        say!(
            "{}",
            serde_json::to_string_pretty(infos).unwrap_or_default()
        );
    } else if infos.is_empty() {
        if !broken {
            say_err!(
                "no agents in {}; create agents/NAME.yaml",
                root.join("agents").display()
            );
        }
    } else {
        print_table(
            &listing.project,
            infos,
            !listing.settings_broken,
            listing.now,
        );
    }
    if listing.settings_broken {
        say_err!("aurad.yaml has errors, so the runs in the database are not shown");
    }
    if broken {
        say_err!(
            "some files have errors and their agents are left out; fix them (see above), or run `aurad validate`"
        );
        return EXIT_CONFIG;
    }
    EXIT_OK
}

/// `runs_known`: the store was read (or has no file yet), so no last run
/// means none.
fn print_table(
    project: &config::Project,
    infos: &[AgentInfo],
    runs_known: bool,
    now: DateTime<Utc>,
) {
    let header = ["NAME", "TRIGGER", "NEXT FIRE", "LAST", "BACKOFF"];
    let mut rows: Vec<[String; 5]> = Vec::new();
    for info in infos {
        let last = match &info.last_run {
            Some(run) => describe_last(run, now),
            None if runs_known => "-".to_string(),
            None => "?".to_string(),
        };
        let backoff = match info.backoff_until {
            Some(until) => format!(
                "backing off until {} ({} failure{})",
                until.with_timezone(&chrono::Local).format("%H:%M"),
                info.consecutive_failures,
                if info.consecutive_failures == 1 {
                    ""
                } else {
                    "s"
                }
            ),
            None => "-".to_string(),
        };
        let schedules = project
            .agents
            .get(&info.name)
            .map(|a| a.triggers.schedules.as_slice())
            .unwrap_or_default();
        // One line per trigger (schedule, `after:`, `watch:`), with its
        // next fire; the agent's columns on the first only.
        let mut triggers: Vec<(String, String)> = schedules
            .iter()
            .map(|entry| {
                let next = entry.cron.next_after(now).map_or("-".to_string(), |at| {
                    at.with_timezone(&entry.cron.timezone())
                        .format("%Y-%m-%d %H:%M %Z")
                        .to_string()
                });
                (entry.cron.to_string(), next)
            })
            .collect();
        for after in &info.after {
            let what = format!("after {} ({})", after.agent, after.on);
            triggers.push((what, "-".into()));
        }
        if !info.watch.is_empty() {
            triggers.push((format!("watch {}", info.watch.join(", ")), "-".into()));
        }
        if triggers.is_empty() {
            triggers.push(("-".into(), "-".into()));
        }
        for (i, (trigger, next)) in triggers.into_iter().enumerate() {
            if i == 0 {
                rows.push([
                    info.name.clone(),
                    trigger,
                    next,
                    last.clone(),
                    backoff.clone(),
                ]);
            } else {
                rows.push([String::new(), trigger, next, String::new(), String::new()]);
            }
        }
    }
    let rows: Vec<Vec<String>> = rows.into_iter().map(Vec::from).collect();
    for line in super::table::lines(&header, &rows, &[]) {
        say!("{line}");
    }
}

/// `succeeded 3h ago`, `running 12s ago`.
fn describe_last(run: &RunRecord, now: DateTime<Utc>) -> String {
    let at = run.finished_at.or(run.started_at).unwrap_or(run.created_at);
    format!("{} {}", run.state, ago(now - at))
}

fn ago(elapsed: chrono::Duration) -> String {
    let s = elapsed.num_seconds().max(0);
    match s {
        0..5 => "just now".to_string(),
        5..120 => format!("{s}s ago"),
        120..7200 => format!("{}m ago", s / 60),
        7200..172_800 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ago_picks_a_readable_unit() {
        let d = chrono::Duration::seconds;
        assert_eq!(ago(d(-3)), "just now");
        assert_eq!(ago(d(42)), "42s ago");
        assert_eq!(ago(d(600)), "10m ago");
        assert_eq!(ago(d(3 * 3600)), "3h ago");
        assert_eq!(ago(d(5 * 86_400)), "5d ago");
    }
}
