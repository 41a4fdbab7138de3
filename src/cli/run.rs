//! `aurad run NAME`: load only what this agent needs, run it through the
//! run door (`crate::run`), stream it, exit 0 on `succeeded`. Errors in files the
//! agent does not need (another skill, plugin or MCP server) are counted
//! in one warning line; its own file's and `aurad.yaml`'s stop it.

use std::io::Write;
use std::path::Path;

use clap::Args;
use tokio_util::sync::CancellationToken;

use super::render::Renderer;
use super::{
    EXIT_CANCELLED, EXIT_CONFIG, EXIT_FAILED, EXIT_OK, concerns, print_diagnostics,
    print_for_agent, read_input,
};
use crate::config;
use crate::registry;
use crate::run::{Job, RunRequest, execute};
use crate::types::{Database, RunState};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The agent (the file name in agents/ without .yaml).
    pub name: String,
    /// The input, as an alternative to `--input` (not both); `-` reads it
    /// from stdin. Default: the agent's `prompt`.
    #[arg(value_name = "PROMPT", conflicts_with = "input")]
    pub prompt: Option<String>,
    /// The input; `-` reads it from stdin. Default: the agent's `prompt`.
    #[arg(long, short = 'i', value_name = "TEXT")]
    pub input: Option<String>,
    /// Use this model instead of the agent's (`provider/model`, or `test`).
    #[arg(long, short = 'm', value_name = "MODEL")]
    pub model: Option<String>,
    /// Print one JSON event per line instead of the rendering.
    #[arg(long)]
    pub json: bool,
}

pub fn run(root: &Path, args: RunArgs) -> i32 {
    let loaded = config::load_one(root, &args.name, &config::process_env);
    let own_errors = loaded
        .diagnostics
        .iter()
        .any(|d| d.is_error() && concerns(d, &args.name));
    if !loaded.project.agents.contains_key(&args.name) && !own_errors {
        let names = config::agent_names(root);
        eprintln!(
            "error: no agent named `{}` in {} (agents: {})",
            args.name,
            root.join("agents").display(),
            if names.is_empty() {
                "none; create agents/NAME.yaml".to_string()
            } else {
                names.join(", ")
            }
        );
        return EXIT_CONFIG;
    }
    // The store opens (and a SQLite file replays its WAL) on a thread of
    // its own while the rest of the start-up goes on. Not when that would
    // create the file: a run stopped by a configuration error leaves none.
    let database = loaded.project.settings.database.clone();
    let mut early_store = match &database {
        Database::Sqlite(path) if !path.exists() => None,
        _ => {
            let database = database.clone();
            Some(std::thread::spawn(move || {
                crate::store::Store::connect(&database)
            }))
        }
    };
    if loaded
        .project
        .agents
        .get(&args.name)
        .is_some_and(|agent| !agent.tools.is_empty())
    {
        // Overlaps with the rest of the start-up instead of delaying the
        // first tool call.
        crate::tools::prepare_builtin_schemas();
    }
    let (mut snapshot, diagnostics) = registry::build(loaded, &config::process_env);
    let own_errors = print_for_agent(diagnostics, &args.name);
    if own_errors || !snapshot.project.agents.contains_key(&args.name) {
        return EXIT_CONFIG;
    }
    let Some(runtime) = super::runtime() else {
        return EXIT_FAILED;
    };
    // Only the MCP servers the allow-lists of this agent and of the agents
    // it calls (the only ones loaded) can reach are started.
    let patterns: Vec<String> = snapshot
        .project
        .agents
        .values()
        .flat_map(|a| a.tools.iter().cloned())
        .collect();
    let servers = registry::servers_for(&patterns, &snapshot.project.mcp_servers);
    let mcp = if servers.is_empty() {
        None
    } else {
        let connected = runtime.block_on(super::mcp::interruptible(registry::connect_mcp(
            &mut snapshot,
            servers,
        )));
        let Some((manager, diagnostics)) = connected else {
            eprintln!("interrupted while starting MCP servers; they were stopped");
            return EXIT_CANCELLED;
        };
        print_diagnostics(&diagnostics);
        for status in manager.status() {
            if !matches!(status.state, crate::mcp::ServerState::Connected) {
                eprintln!(
                    "warning: MCP server `{}` is {}; its tools are not available to this run",
                    status.name,
                    super::mcp::describe_state(&status.state)
                );
            }
        }
        if diagnostics.iter().any(|d| d.is_error()) {
            runtime.block_on(manager.shutdown());
            return EXIT_CONFIG;
        }
        Some(manager)
    };
    let Ok(input) = read_input(args.input.as_deref().or(args.prompt.as_deref())) else {
        return EXIT_CONFIG;
    };
    let request = RunRequest {
        agent: args.name.clone(),
        input,
        model: args.model.clone(),
        trigger: "cli".into(),
        ..RunRequest::default()
    };
    let stop_mcp = |runtime: &tokio::runtime::Runtime| {
        if let Some(manager) = &mcp {
            runtime.block_on(manager.shutdown());
        }
    };
    let snapshot = std::sync::Arc::new(snapshot);
    let env: crate::daemon::Env = std::sync::Arc::new(config::process_env);
    let prepared = Job::prepare(&snapshot, request, &env);
    let prepared = match prepared {
        Ok(p) => p,
        Err(message) => {
            eprintln!("error: {message}");
            stop_mcp(&runtime);
            return EXIT_CONFIG;
        }
    };
    let opened = match early_store.take().map(std::thread::JoinHandle::join) {
        Some(Ok(opened)) => opened,
        Some(Err(_)) => Err(crate::store::StoreError::Invalid(
            "the thread opening the database panicked".into(),
        )),
        None => crate::store::Store::connect(&database),
    };
    let store = match opened {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: database {database}: {e}");
            stop_mcp(&runtime);
            return EXIT_FAILED;
        }
    };
    let is_pipeline = matches!(prepared, Job::Pipeline(_));
    let run_id = prepared.id().to_string();
    // Traces only when configured: otherwise nothing is set up.
    if let Err(e) = crate::telemetry::install(
        snapshot.project.settings.otel.as_ref(),
        &config::process_env,
    ) {
        eprintln!("warning: {e}; traces are not exported");
    }
    let json = args.json;
    let result = runtime.block_on(async {
        let cancel = CancellationToken::new();
        let watcher = tokio::spawn(watch_signals(
            cancel.clone(),
            store.clone(),
            run_id.clone(),
            mcp.clone(),
        ));
        let mut renderer = Renderer::for_terminal();
        let on_event = |event: &crate::types::RunEvent| {
            if json {
                if let Ok(line) = serde_json::to_string(event) {
                    // A closed pipe (`| head`) must not abort the run.
                    let mut out = std::io::stdout().lock();
                    let _ = writeln!(out, "{line}");
                }
            } else {
                renderer.event(event);
            }
        };
        let result = execute(prepared, &store, cancel, on_event).await;
        watcher.abort();
        (result, renderer)
    });
    stop_mcp(&runtime);
    // The exporter runs on its own thread: this waits for the run's spans.
    crate::telemetry::shutdown(std::time::Duration::from_secs(5));
    // A tool stuck in a blocking call must not keep the process alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    let (result, mut renderer) = result;
    let closed = store.close();
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("error: run {run_id}: the database failed: {e}");
            return EXIT_FAILED;
        }
    };
    if let Err(e) = closed {
        eprintln!("error: run {run_id}: closing the database failed: {e}");
        return EXIT_FAILED;
    }
    if !json {
        // A pipeline streams no answer text: its output is printed whole.
        if is_pipeline && let Some(output) = &outcome.output {
            println!("{output}");
        }
        renderer.finish(
            &run_id,
            outcome.state,
            outcome.reason.as_deref(),
            &outcome.usage,
            outcome.cost_usd,
        );
    }
    match outcome.state {
        RunState::Succeeded => EXIT_OK,
        RunState::Cancelled => EXIT_CANCELLED,
        _ => EXIT_FAILED,
    }
}

/// Ctrl-C or SIGTERM cancels the run (recorded `cancelled`); a second one
/// records the run as cancelled as best it can within a second and exits.
async fn watch_signals(
    cancel: CancellationToken,
    store: crate::store::Store,
    run_id: String,
    mcp: Option<crate::mcp::McpManager>,
) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    let mut interrupt = match signal(SignalKind::interrupt()) {
        Ok(s) => s,
        Err(_) => return,
    };
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = term.recv() => {}
    }
    eprintln!("\ncancelling… (press Ctrl-C again to quit at once)");
    cancel.cancel();
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = term.recv() => {}
    }
    let finish = store.finish_run(
        &run_id,
        RunState::Cancelled,
        Some("cancelled (the process was stopped at once)".into()),
        None,
        Default::default(),
    );
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), finish).await;
    if let Some(manager) = mcp {
        manager.kill_now();
    }
    crate::tools::process::kill_every_group();
    std::process::exit(EXIT_CANCELLED);
}
