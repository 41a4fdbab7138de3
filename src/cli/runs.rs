//! `aurad runs` and `aurad logs RUN_ID`: read the store, whether or not
//! anything else is running.

use std::io::Write;
use std::path::Path;

use clap::Args;

use super::render::{Renderer, format_cost, format_usage};
use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK, open_store};
use crate::store::RunFilter;
use crate::types::{RunEvent, RunState};

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Only runs of this agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// Only runs in this state (succeeded, failed, running, ...).
    #[arg(long)]
    pub state: Option<String>,
    /// How many runs to show.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Print the runs as a JSON array.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The run id, or a unique prefix of it (at least 4 characters).
    pub run_id: String,
    /// Print one JSON event per line.
    #[arg(long)]
    pub json: bool,
    /// Keep printing new events until the run ends (exit 0 only if it
    /// succeeded); works with or without a running daemon. Ctrl-C stops
    /// following, not the run.
    #[arg(long, short = 'f')]
    pub follow: bool,
}

/// How often `logs --follow` looks for new events.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(200);

pub fn list(root: &Path, args: RunsArgs) -> i32 {
    let state = match args.state.as_deref().map(|s| (s, RunState::parse(s))) {
        None => None,
        Some((_, Some(state))) => Some(state),
        Some((s, None)) => {
            let valid: Vec<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
            eprintln!(
                "error: unknown state {s:?}; valid states: {}",
                valid.join(", ")
            );
            return EXIT_CONFIG;
        }
    };
    let store = match open_store(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    let filter = RunFilter {
        parent: None,
        agent: args.agent,
        state,
        limit: args.limit,
    };
    let runs = match store.list_runs_blocking(&filter) {
        Ok(runs) => runs,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&runs).unwrap_or_default()
        );
        return EXIT_OK;
    }
    if runs.is_empty() {
        eprintln!("no runs yet; start one with `aurad run AGENT`");
        return EXIT_OK;
    }
    println!(
        "{:<36}  {:<16}  {:<15}  {:<8}  {:<20}  {:>8}  {:>12}  TOKENS",
        "RUN", "AGENT", "STATE", "TRIGGER", "STARTED", "TIME", "COST"
    );
    for r in runs {
        let started = r.started_at.unwrap_or(r.created_at);
        // A sub-run (an agent called as a tool) is marked: `aurad logs` of
        // its parent shows it in place.
        let agent = if r.parent_run_id.is_some() {
            format!("↳ {}", r.agent)
        } else {
            r.agent.clone()
        };
        let (duration, cost, tokens) = time_cost_tokens(&r);
        println!(
            "{:<36}  {:<16}  {:<15}  {:<8}  {:<20}  {:>8}  {:>12}  {}",
            r.id,
            agent,
            r.state.as_str(),
            r.trigger,
            started.format("%Y-%m-%d %H:%M:%S").to_string(),
            duration,
            cost,
            tokens
        );
    }
    EXIT_OK
}

/// A run's duration, cost and tokens as `aurad runs` shows them (`-` where
/// unknown).
fn time_cost_tokens(r: &crate::store::RunRecord) -> (String, String, String) {
    let time = match (r.started_at, r.finished_at) {
        (Some(s), Some(f)) => duration_between(s, f),
        _ => "-".into(),
    };
    let (cost, tokens) = match format_usage(&r.usage) {
        Some(tokens) => (format_cost(r.cost_usd), tokens),
        None => ("-".into(), "-".into()),
    };
    (time, cost, tokens)
}

fn duration_between(
    start: chrono::DateTime<chrono::Utc>,
    end: chrono::DateTime<chrono::Utc>,
) -> String {
    let ms = (end - start).num_milliseconds().max(0);
    if ms < 10_000 {
        format!("{:.2}s", ms as f64 / 1000.0)
    } else {
        format!("{}s", ms / 1000)
    }
}

pub fn logs(root: &Path, args: LogsArgs) -> i32 {
    let store = match open_store(root) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    let run = match store.get_run_blocking(&args.run_id) {
        Ok(Some(run)) => run,
        Ok(None) => {
            eprintln!(
                "error: no run {:?}; list runs with `aurad runs`",
                args.run_id
            );
            return EXIT_FAILED;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    let events = match store.run_events_after_blocking(&run.id, 0) {
        Ok(events) => events,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    let mut renderer = Renderer::for_terminal();
    let mut printer = |event: &RunEvent| {
        if args.json {
            if let Ok(line) = serde_json::to_string(event) {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
        } else {
            renderer.event(event);
        }
    };
    let mut last_seq = 0;
    let mut finished = false;
    for (seq, event) in &events {
        printer(event);
        last_seq = *seq;
        finished |= matches!(event, RunEvent::Finished { .. });
    }
    let mut run = run;
    if args.follow && !run.state.is_final() {
        if !args.json {
            eprintln!(
                "(run {} is {}: waiting for its next events; Ctrl-C stops following, not the run)",
                run.id, run.state
            );
        }
        loop {
            std::thread::sleep(FOLLOW_POLL);
            // The state first: events committed before it are read below.
            match store.get_run_blocking(&run.id) {
                Ok(Some(now)) => run = now,
                Ok(None) => {
                    eprintln!("error: run {} was deleted from the database", run.id);
                    return EXIT_FAILED;
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return EXIT_FAILED;
                }
            }
            match store.run_events_after_blocking(&run.id, last_seq) {
                Ok(events) => {
                    for (seq, event) in &events {
                        printer(event);
                        last_seq = *seq;
                        finished |= matches!(event, RunEvent::Finished { .. });
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return EXIT_FAILED;
                }
            }
            if run.state.is_final() {
                break;
            }
        }
    }
    if args.json {
        return follow_code(args.follow, run.state);
    }
    match store.steps_of_blocking(&run.id) {
        Ok(steps) if !steps.is_empty() => {
            let mut out = std::io::stdout().lock();
            for line in super::steps::step_tree(&steps) {
                let _ = writeln!(out, "{line}");
            }
        }
        Ok(_) => {}
        Err(e) => eprintln!("error: cannot read the run's steps: {e}"),
    }
    if !finished && run.state == RunState::Running {
        eprintln!(
            "(run {} is still marked running: it is in progress, or its process was killed)",
            run.id
        );
    }
    renderer.finish(
        &run.id,
        run.state,
        run.error.as_deref(),
        &run.usage,
        run.cost_usd,
    );
    let mut tree = Vec::new();
    if let Err(e) = sub_runs(&store, &run.id, 1, &mut tree) {
        eprintln!("error: cannot read the sub-runs of {}: {e}", run.id);
        return EXIT_FAILED;
    }
    if !tree.is_empty() {
        println!("sub-runs (usage included above):");
        for line in tree {
            println!("{line}");
        }
    }
    follow_code(args.follow, run.state)
}

/// One line per run started by `parent` (agents called as tools, oldest
/// first), each followed by its own, indented one step deeper per level:
/// its id, agent, state, time, tokens and cost.
fn sub_runs(
    store: &crate::store::Store,
    parent: &str,
    level: usize,
    lines: &mut Vec<String>,
) -> Result<(), crate::store::StoreError> {
    let mut children = store.list_runs_blocking(&RunFilter {
        parent: Some(parent.to_string()),
        ..RunFilter::default()
    })?;
    children.reverse();
    for r in children {
        let (time, cost, tokens) = time_cost_tokens(&r);
        lines.push(format!(
            "{:indent$}↳ {}  {}  {}  {}  {}  {}{}",
            "",
            r.id,
            r.agent,
            r.state,
            time,
            tokens,
            cost,
            r.error.map(|e| format!("  ({e})")).unwrap_or_default(),
            indent = level * 2,
        ));
        sub_runs(store, &r.id, level + 1, lines)?;
    }
    Ok(())
}

/// `logs` exits 0; `logs --follow` exits like the run: 0 only on success.
fn follow_code(follow: bool, state: RunState) -> i32 {
    if !follow || state == RunState::Succeeded {
        EXIT_OK
    } else {
        EXIT_FAILED
    }
}
