//! `aurad mcp`: connect the MCP servers of the project's MCP file
//! (`mcp.json`, `.mcp.json` or `.vscode/mcp.json`, named in the output) and
//! show their state (the work is `app::inspect`'s). `aurad mcp serve`: the
//! other way round, the project's agents as MCP tools on stdin/stdout (the
//! work is `app::mcp_serve`'s); it writes nothing on stdout but the
//! protocol.

use std::path::Path;

use clap::{Args, Subcommand};

use super::render::one_line;
use super::{EXIT_CANCELLED, EXIT_CONFIG, EXIT_FAILED, EXIT_OK, print_diagnostics};
use crate::app::inspect::{self, McpCheck};
use crate::app::mcp_serve::{self, NotServed};
use crate::config;
use crate::types::McpState;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: Option<McpCommand>,
    /// Print the servers as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Offer the project's agents as MCP tools on stdin/stdout, for an
    /// editor's mcp.json (`mcp_server.agents` in aurad.yaml narrows them).
    Serve,
}

pub fn run(root: &Path, args: McpArgs) -> i32 {
    match args.command {
        Some(McpCommand::Serve) => serve(root),
        None => mcp(root, args),
    }
}

/// `aurad mcp serve`: diagnostics and errors on stderr, the protocol on
/// stdout.
fn serve(root: &Path) -> i32 {
    let served = mcp_serve::serve(root, |report| {
        print_diagnostics(&report.diagnostics);
        say_err!(
            "aurad mcp serve: {} agent(s) offered as tools on stdin/stdout",
            report.tools
        );
    });
    match served {
        Ok(()) => EXIT_OK,
        Err(NotServed::Config) => {
            say_err!("error: the project's configuration has errors (above); nothing is served");
            EXIT_CONFIG
        }
        Err(NotServed::Interrupted) => {
            say_err!("interrupted; the MCP servers were stopped");
            EXIT_CANCELLED
        }
        Err(NotServed::Failed(message)) => {
            say_err!("error: {message}");
            EXIT_FAILED
        }
    }
}

fn mcp(root: &Path, args: McpArgs) -> i32 {
    let (servers, diagnostics) = inspect::load_mcp(root);
    print_diagnostics(&diagnostics);
    if diagnostics.iter().any(|d| d.is_error()) {
        return EXIT_CONFIG;
    }
    if servers.is_empty() {
        let used = config::mcp::mcp_file(root);
        let file = used.unwrap_or(config::mcp::MCP_FILES[0]);
        if used.is_none() && !diagnostics.is_empty() {
            say_err!(
                "no MCP servers: aurad reads {}; the other editors' files named above are not read until you do what they say",
                config::mcp::MCP_FILES.join(", ")
            );
        } else {
            say_err!("no MCP servers: add them to {}", root.join(file).display());
        }
        return EXIT_OK;
    }
    say_mcp_file(root, servers.len());
    let McpCheck {
        servers: status,
        conflicts,
    } = match inspect::check_mcp(servers) {
        Ok(Some(checked)) => checked,
        Ok(None) => {
            say_err!("interrupted; the MCP servers were stopped");
            return EXIT_CANCELLED;
        }
        Err(message) => {
            say_err!("error: {message}");
            return EXIT_FAILED;
        }
    };
    let file = config::mcp::mcp_file(root).unwrap_or(config::mcp::MCP_FILES[0]);
    for c in &conflicts {
        say_err!("{file}: {c}");
    }
    let all_up = status.iter().all(|s| s.state.kind() == McpState::Connected);
    if args.json {
        let list: Vec<serde_json::Value> = status
            .iter()
            .map(|s| {
                serde_json::json!({
                    "name": s.name,
                    "transport": s.transport,
                    "state": s.state.kind(),
                    "reason": s.state.reason(),
                    "protocol_version": s.protocol_version,
                    "server_info": s.server_info,
                    "tools": s.tools.iter().map(|(name, spec)| serde_json::json!({
                        "name": name, "original_name": spec.name, "description": spec.description, "parameters": spec.parameters,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        say!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
    } else {
        for s in &status {
            say!("{}  {}", s.name, s.state);
            say!("  transport: {}", s.transport);
            if let Some(v) = &s.protocol_version {
                say!(
                    "  protocol:  {v}{}",
                    s.server_info
                        .as_ref()
                        .map(|i| format!(" ({i})"))
                        .unwrap_or_default()
                );
            }
            for (name, spec) in &s.tools {
                say!("  - {name}: {}", one_line(&spec.description, 100));
            }
        }
    }
    if all_up && conflicts.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILED
    }
}

/// Says (on stderr) which MCP file the servers come from.
pub(super) fn say_mcp_file(root: &Path, servers: usize) {
    if let Some(file) = config::mcp::mcp_file(root) {
        say_err!("MCP servers: {servers} from {file}");
    }
}
