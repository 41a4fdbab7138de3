//! `aurad tools`: list every tool an agent would see (built-in, `tools.d`,
//! MCP servers', memory) with its source and schema.

use std::path::Path;

use clap::Args;

use super::mcp::say_mcp_file;
use super::render::one_line;
use super::{
    EXIT_CANCELLED, EXIT_CONFIG, EXIT_FAILED, EXIT_OK, print_diagnostics, print_for_agent,
};
use crate::app::inspect::ToolsView;

#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// Only the tools this agent may use (its `tools:` allow-list).
    #[arg(long, add = super::completions::agents())]
    pub agent: Option<String>,
    /// Print the tools as a JSON array with their schemas.
    #[arg(long)]
    pub json: bool,
}

pub fn tools(root: &Path, args: ToolsArgs) -> i32 {
    let mut view = ToolsView::load(root);
    let diagnostics = std::mem::take(&mut view.diagnostics);
    // Errors elsewhere do not hide the tools that loaded: with `--agent`,
    // only the agent's own errors stop the listing; without, every error is
    // shown and the exit code says there were some.
    let config_errors = match &args.agent {
        Some(name) => {
            if print_for_agent(diagnostics, name) {
                return EXIT_CONFIG;
            }
            false
        }
        None => {
            print_diagnostics(&diagnostics);
            diagnostics.iter().any(|d| d.is_error())
        }
    };
    let patterns: Option<Vec<String>> = match &args.agent {
        None => None,
        Some(name) => match view.allow_list(name) {
            Some(patterns) => Some(patterns),
            None => {
                say_err!("error: no agent named `{name}`");
                return EXIT_CONFIG;
            }
        },
    };
    let mut failed = false;
    let servers = view.server_count(patterns.as_deref());
    if servers > 0 {
        say_mcp_file(root, servers);
        let connected = match view.connect(patterns.as_deref()) {
            Ok(Some(connected)) => connected,
            Ok(None) => {
                say_err!("interrupted; the MCP servers were stopped");
                return EXIT_CANCELLED;
            }
            Err(message) => {
                say_err!("error: {message}");
                return EXIT_FAILED;
            }
        };
        for (name, state) in &connected.down {
            say_err!("mcp server `{name}` is {state}; its tools are not listed");
        }
        print_diagnostics(&connected.diagnostics);
        failed = !connected.diagnostics.is_empty();
    }
    let mut tools = view.tools(patterns.as_deref());
    // An agent with `memory.tools: true` also gets the memory tools.
    if let Some(name) = &args.agent {
        match view.memory_tools(root, name) {
            Ok(memory) => tools.extend(memory),
            Err(e) => say_err!("warning: cannot list the memory tools: {e}"),
        }
    }
    if args.json {
        let list: Vec<serde_json::Value> = tools
            .iter()
            .map(|t| {
                serde_json::json!({"name": t.name, "source": t.source, "description": t.description, "parameters": t.parameters})
            })
            .collect();
        say!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
    } else {
        for t in &tools {
            say!("{}  [{}]", t.name, t.source);
            say!("  {}", one_line(&t.description, 160));
            say!(
                "  schema: {}",
                serde_json::to_string(&t.parameters).unwrap_or_default()
            );
        }
        if tools.is_empty() {
            say_err!("no tools");
        }
    }
    if failed {
        EXIT_FAILED
    } else if config_errors {
        EXIT_CONFIG
    } else {
        EXIT_OK
    }
}
