//! `aurad run NAME`: load only what this agent needs, run it through the
//! run door (`crate::run`), stream it, exit 0 on `succeeded`. Errors in files the
//! agent does not need (another skill, plugin or MCP server) are counted
//! in one warning line; its own file's and `aurad.yaml`'s stop it.

use std::io::Write;
use std::path::Path;

use clap::Args;

use super::render::Renderer;
use super::{
    EXIT_CANCELLED, EXIT_CONFIG, EXIT_FAILED, EXIT_OK, print_diagnostics, read_input,
    show_for_agent,
};
use crate::app::one_shot::{self, NotLoaded, RunError};
use crate::types::{RunEvent, RunState};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The agent (the file name in agents/ without .yaml).
    #[arg(add = super::completions::agents())]
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

/// Says why agent `name` could not be loaded; the exit code.
pub(super) fn not_loaded(name: &str, refused: NotLoaded) -> i32 {
    match refused {
        NotLoaded::NoAgent { dir, names } => {
            let hint = crate::config::suggest::did_you_mean(name, names.iter().map(String::as_str))
                .map(|hint| format!("{hint} "))
                .unwrap_or_default();
            eprintln!(
                "error: no agent named `{name}` in {}; {hint}(agents: {})",
                dir.display(),
                if names.is_empty() {
                    "none; create agents/NAME.yaml".to_string()
                } else {
                    names.join(", ")
                }
            );
            EXIT_CONFIG
        }
        NotLoaded::Config => EXIT_CONFIG,
        NotLoaded::Interrupted => {
            eprintln!("interrupted while starting MCP servers; they were stopped");
            EXIT_CANCELLED
        }
        NotLoaded::Failed(message) => {
            eprintln!("error: {message}");
            EXIT_FAILED
        }
    }
}

pub fn run(root: &Path, args: RunArgs) -> i32 {
    let (report, loaded) = one_shot::load(root, &args.name);
    show_for_agent(&report.agent, &args.name);
    print_diagnostics(&report.mcp);
    for (name, state) in &report.servers_down {
        eprintln!(
            "warning: MCP server `{name}` is {state}; its tools are not available to this run"
        );
    }
    let loaded = match loaded {
        Ok(loaded) => loaded,
        Err(refused) => return not_loaded(&args.name, refused),
    };
    let Ok(input) = read_input(args.input.as_deref().or(args.prompt.as_deref())) else {
        return EXIT_CONFIG;
    };
    let json = args.json;
    let mut renderer = Renderer::for_terminal();
    let on_event = |event: &RunEvent| {
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
    let on_cancel = || eprintln!("\ncancelling… (press Ctrl-C again to quit at once)");
    let finished = match loaded.run(input, args.model.clone(), on_event, on_cancel) {
        Ok(finished) => finished,
        Err(RunError::Request(message)) => {
            eprintln!("error: {message}");
            return EXIT_CONFIG;
        }
        Err(RunError::Store(message)) => {
            eprintln!("error: {message}");
            return EXIT_FAILED;
        }
        Err(RunError::Record { run_id, message }) => {
            eprintln!("error: run {run_id}: {message}");
            return EXIT_FAILED;
        }
    };
    let outcome = &finished.outcome;
    if !json {
        // A pipeline streams no answer text: its output is printed whole.
        if finished.pipeline
            && let Some(output) = &outcome.output
        {
            println!("{}", crate::text::inert(output));
        }
        renderer.finish(
            &finished.run_id,
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
