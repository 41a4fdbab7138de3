//! `aurad runs` and `aurad logs RUN_ID`: read the store, whether or not
//! anything else is running. `aurad runs prune` is in `prune`, `aurad logs
//! -f AGENT` in `follow`.

use std::io::Write;
use std::path::Path;

use clap::Args;

use super::render::{Renderer, format_cost, format_usage};
use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK, open_store};
use crate::app::{RunFilter, StoreError};
use crate::types::{RunEvent, RunState};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub command: Option<RunsCommand>,
    /// Only runs of this agent.
    #[arg(long, add = super::completions::agents())]
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

#[derive(Debug, clap::Subcommand)]
pub enum RunsCommand {
    /// Delete runs that ended longer ago than --older-than (or only their
    /// events, with --events-only); runs not finished are kept.
    Prune(super::prune::PruneArgs),
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The run: its short id (as `aurad runs` shows it), a unique start
    /// (at least 4 characters) or end (at least 6) of its id, the whole id,
    /// or an agent's name: its newest run (with --follow, its newest run, then
    /// each next one).
    #[arg(value_name = "RUN_ID|AGENT", add = super::completions::runs_or_agents())]
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
pub(super) const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(200);

pub fn list(root: &Path, args: RunsArgs) -> i32 {
    if let Some(RunsCommand::Prune(prune)) = args.command {
        return super::prune::run(root, prune);
    }
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
        match (&filter.agent, filter.state) {
            (None, None) => eprintln!("no runs yet; start one with `aurad run AGENT`"),
            (Some(agent), None) => eprintln!(
                "agent `{agent}` has no runs; `aurad agents` lists the agents, `aurad runs` every run"
            ),
            (agent, Some(state)) => eprintln!(
                "no {state} runs{}; `aurad runs` lists every run",
                agent
                    .as_ref()
                    .map(|a| format!(" of agent `{a}`"))
                    .unwrap_or_default()
            ),
        }
        return EXIT_OK;
    }
    for line in run_table(&runs) {
        println!("{line}");
    }
    EXIT_OK
}

/// `aurad runs`' table: the short id (the id's random end, which `logs`,
/// `replay` and `approve` take), columns as wide as their content. Newest
/// first, each run's sub-runs (agents it called, pipeline steps) under it
/// in the order they started, indented; a sub-run whose parent is not
/// listed says which run it belongs to.
fn run_table(runs: &[crate::app::RunRecord]) -> Vec<String> {
    use super::table::{Align, lines};
    use crate::app::run_or_agent::short_run_id;
    let listed: std::collections::HashSet<&str> = runs.iter().map(|r| r.id.as_str()).collect();
    let mut children: std::collections::HashMap<&str, Vec<&crate::app::RunRecord>> =
        std::collections::HashMap::new();
    let mut roots = Vec::new();
    for r in runs {
        match r.parent_run_id.as_deref() {
            Some(parent) if listed.contains(parent) => {
                children.entry(parent).or_default().push(r);
            }
            _ => roots.push(r),
        }
    }
    // Listed newest first: sub-runs are shown oldest first, as they ran.
    for list in children.values_mut() {
        list.reverse();
    }
    let mut rows = Vec::new();
    let mut stack: Vec<(&crate::app::RunRecord, usize)> =
        roots.into_iter().rev().map(|r| (r, 0)).collect();
    while let Some((r, depth)) = stack.pop() {
        let started = r.started_at.unwrap_or(r.created_at);
        let agent = match (depth, r.parent_run_id.as_deref()) {
            (0, Some(parent)) => format!("↳ {} (of {})", r.agent, short_run_id(parent)),
            (0, None) => r.agent.clone(),
            (d, _) => format!("{}↳ {}", "  ".repeat(d - 1), r.agent),
        };
        let (duration, cost, tokens) = time_cost_tokens(r);
        rows.push(vec![
            short_run_id(&r.id).to_string(),
            agent,
            r.state.as_str().to_string(),
            r.trigger.to_string(),
            started.format("%Y-%m-%d %H:%M:%S").to_string(),
            duration,
            cost,
            tokens,
        ]);
        if let Some(kids) = children.get(r.id.as_str()) {
            stack.extend(kids.iter().rev().map(|k| (*k, depth + 1)));
        }
    }
    lines(
        &[
            "RUN", "AGENT", "STATE", "TRIGGER", "STARTED", "TIME", "COST", "TOKENS",
        ],
        &rows,
        &[
            Align::Left,
            Align::Left,
            Align::Left,
            Align::Left,
            Align::Left,
            Align::Right,
            Align::Right,
            Align::Left,
        ],
    )
}

/// A run's duration, cost and tokens as `aurad runs` shows them (`-` where
/// unknown).
fn time_cost_tokens(r: &crate::app::RunRecord) -> (String, String, String) {
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
    if args.follow && crate::app::run_or_agent::names_agent(root, &store, &args.run_id) {
        return super::follow::agent(&store, &args.run_id, args.json);
    }
    let run = match crate::app::run_or_agent::find(root, &store, &args.run_id) {
        Ok(run) => run,
        Err(message) => {
            eprintln!("error: {message}");
            return EXIT_FAILED;
        }
    };
    let mut renderer = Renderer::for_terminal();
    let output = Output {
        json: args.json,
        run_id_in_json: false,
    };
    let (run, finished) = match print_events(&store, run, args.follow, output, &mut renderer) {
        Ok(done) => done,
        Err(code) => return code,
    };
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

/// How `print_events` writes events.
#[derive(Debug, Clone, Copy)]
pub(super) struct Output {
    /// One JSON event per line instead of rendered text.
    pub json: bool,
    /// Each JSON line is `{"run_id", "seq", "event"}` (following an agent's
    /// runs), not the bare event.
    pub run_id_in_json: bool,
}

/// Prints `run`'s stored events and, with `follow`, its new ones until it
/// is final (polling the store). Returns the run as last read and whether
/// a `finished` event was printed; `Err` holds the exit code after an
/// error was printed. Events pruned by retention are said so on stderr.
pub(super) fn print_events(
    store: &crate::app::Store,
    mut run: crate::app::RunRecord,
    follow: bool,
    output: Output,
    renderer: &mut Renderer,
) -> Result<(crate::app::RunRecord, bool), i32> {
    let mut last_seq = 0;
    let mut finished = false;
    let mut print_new =
        |run_id: &str, last_seq: &mut i64, finished: &mut bool| -> Result<(), i32> {
            let events = match store.run_events_after_blocking(run_id, *last_seq) {
                Ok(events) => events,
                Err(e @ StoreError::EventsPruned { .. }) => {
                    eprintln!("note: {e}");
                    return Ok(());
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    return Err(EXIT_FAILED);
                }
            };
            for (seq, event) in &events {
                if output.json {
                    let line = if output.run_id_in_json {
                        serde_json::to_string(
                            &serde_json::json!({ "run_id": run_id, "seq": seq, "event": event }),
                        )
                    } else {
                        serde_json::to_string(event)
                    };
                    if let Ok(line) = line {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "{line}");
                        let _ = out.flush();
                    }
                } else {
                    renderer.event(event);
                }
                *last_seq = *seq;
                *finished |= matches!(event, RunEvent::Finished { .. });
            }
            Ok(())
        };
    print_new(&run.id, &mut last_seq, &mut finished)?;
    if !follow || run.state.is_final() {
        return Ok((run, finished));
    }
    if !output.json {
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
                return Err(EXIT_FAILED);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return Err(EXIT_FAILED);
            }
        }
        print_new(&run.id, &mut last_seq, &mut finished)?;
        if run.state.is_final() {
            return Ok((run, finished));
        }
    }
}

/// One line per run started by `parent` (agents called as tools, oldest
/// first), each followed by its own, indented one step deeper per level:
/// its id, agent, state, time, tokens and cost.
fn sub_runs(
    store: &crate::app::Store,
    parent: &str,
    level: usize,
    lines: &mut Vec<String>,
) -> Result<(), crate::app::StoreError> {
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
