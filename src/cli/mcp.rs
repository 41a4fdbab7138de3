//! `aurad mcp`: connect the MCP servers of the project's MCP file
//! (`mcp.json`, `.mcp.json` or `.vscode/mcp.json`, named in the output) and
//! show their state. Also what `aurad tools` and `aurad run` share about MCP
//! servers: waiting on them unless interrupted, and describing a server's
//! state.

use std::path::Path;

use clap::Args;

use super::render::one_line;
use super::{EXIT_CANCELLED, EXIT_CONFIG, EXIT_FAILED, EXIT_OK, print_diagnostics};
use crate::config;
use crate::mcp::ServerState;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Print the servers as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `work` unless SIGINT or SIGTERM comes first, then `None`. MCP
/// servers run in process groups of their own, so a Ctrl-C at the terminal
/// does not reach them: dropping `work` (and any `McpManager` in it) is what
/// kills them.
pub(super) async fn interruptible<T>(work: impl std::future::Future<Output = T>) -> Option<T> {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return Some(work.await);
    };
    tokio::select! {
        value = work => Some(value),
        _ = interrupt.recv() => None,
        _ = term.recv() => None,
    }
}

pub fn mcp(root: &Path, args: McpArgs) -> i32 {
    let recording = config::interp::RecordingLookup::new(&config::process_env);
    let (servers, diagnostics) = config::mcp::load_mcp(root, &|name| recording.lookup(name));
    // What the servers log must not show what mcp.json gave them.
    crate::redact::add_to_logs(&crate::registry::secrets::variables_redactor(
        &recording.names(),
        &config::process_env,
    ));
    print_diagnostics(&diagnostics);
    if diagnostics.iter().any(|d| d.is_error()) {
        return EXIT_CONFIG;
    }
    if servers.is_empty() {
        let file = config::mcp::mcp_file(root).unwrap_or(config::mcp::MCP_FILES[0]);
        eprintln!("no MCP servers: add them to {}", root.join(file).display());
        return EXIT_OK;
    }
    say_mcp_file(root, servers.len());
    let Some(rt) = super::runtime() else {
        return EXIT_FAILED;
    };
    let status = rt.block_on(interruptible(async {
        let manager = crate::mcp::McpManager::start(servers).await;
        let status = manager.status();
        let conflicts = manager.conflicts();
        manager.shutdown().await;
        (status, conflicts)
    }));
    let Some((mut status, conflicts)) = status else {
        eprintln!("interrupted; the MCP servers were stopped");
        return EXIT_CANCELLED;
    };
    // This command looks once and stops the servers: a server that would be
    // retried in the background has, for its purpose, failed.
    for s in &mut status {
        if let ServerState::Restarting { reason, .. } = &s.state {
            s.state = ServerState::Failed {
                reason: reason.clone(),
            };
        }
    }
    let file = config::mcp::mcp_file(root).unwrap_or(config::mcp::MCP_FILES[0]);
    for c in &conflicts {
        eprintln!("{file}: {c}");
    }
    let all_up = status
        .iter()
        .all(|s| matches!(s.state, ServerState::Connected));
    if args.json {
        let list: Vec<serde_json::Value> = status
            .iter()
            .map(|s| {
                serde_json::json!({
                    "name": s.name,
                    "transport": s.transport,
                    "state": state_word(&s.state),
                    "reason": state_reason(&s.state),
                    "protocol_version": s.protocol_version,
                    "server_info": s.server_info,
                    "tools": s.tools.iter().map(|(name, spec)| serde_json::json!({
                        "name": name, "original_name": spec.name, "description": spec.description, "parameters": spec.parameters,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
    } else {
        for s in &status {
            println!("{}  {}", s.name, describe_state(&s.state));
            println!("  transport: {}", s.transport);
            if let Some(v) = &s.protocol_version {
                println!(
                    "  protocol:  {v}{}",
                    s.server_info
                        .as_ref()
                        .map(|i| format!(" ({i})"))
                        .unwrap_or_default()
                );
            }
            for (name, spec) in &s.tools {
                println!("  - {name}: {}", one_line(&spec.description, 100));
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
        eprintln!("MCP servers: {servers} from {file}");
    }
}

/// `connected`, `failed: reason`, `restarting: reason (attempt 2, retry in 1.0s)`.
pub(super) fn describe_state(state: &ServerState) -> String {
    match state_reason(state) {
        Some(reason) => format!("{}: {reason}", state_word(state)),
        None => state_word(state).to_string(),
    }
}

pub(super) fn state_word(state: &ServerState) -> &'static str {
    match state {
        ServerState::Connecting => "connecting",
        ServerState::Connected => "connected",
        ServerState::Failed { .. } => "failed",
        ServerState::Restarting { .. } => "restarting",
    }
}

pub(super) fn state_reason(state: &ServerState) -> Option<String> {
    match state {
        ServerState::Failed { reason } => Some(reason.clone()),
        ServerState::Restarting {
            attempt,
            reason,
            retry_in,
        } => Some(format!(
            "{reason} (attempt {attempt}, retry in {:.1}s)",
            retry_in.as_secs_f64()
        )),
        _ => None,
    }
}
