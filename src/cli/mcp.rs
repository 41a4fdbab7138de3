//! `aurad mcp` and `aurad tools`: connect the MCP servers of the project's
//! MCP file (`mcp.json`, `.mcp.json` or `.vscode/mcp.json`, named in the
//! output) and show their state, and list every tool an agent would see
//! with its source and schema.

use std::path::Path;

use clap::Args;

use super::render::one_line;
use super::{EXIT_CANCELLED, EXIT_CONFIG, EXIT_FAILED, EXIT_OK, print_diagnostics};
use crate::config;
use crate::mcp::ServerState;
use crate::registry;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Print the servers as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// Only the tools this agent may use (its `tools:` allow-list).
    #[arg(long)]
    pub agent: Option<String>,
    /// Print the tools as a JSON array with their schemas.
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

fn state_word(state: &ServerState) -> &'static str {
    match state {
        ServerState::Connecting => "connecting",
        ServerState::Connected => "connected",
        ServerState::Failed { .. } => "failed",
        ServerState::Restarting { .. } => "restarting",
    }
}

fn state_reason(state: &ServerState) -> Option<String> {
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

pub fn tools(root: &Path, args: ToolsArgs) -> i32 {
    let loaded = config::load(root, &config::process_env);
    let (mut snapshot, diagnostics) = registry::build(loaded, &config::process_env);
    print_diagnostics(&diagnostics);
    if diagnostics.iter().any(|d| d.is_error()) {
        return EXIT_CONFIG;
    }
    let patterns: Option<Vec<String>> = match &args.agent {
        None => None,
        Some(name) => match snapshot.project.agents.get(name) {
            Some(agent) => Some(agent.tools.clone()),
            None => {
                eprintln!("error: no agent named `{name}`");
                return EXIT_CONFIG;
            }
        },
    };
    let servers = match &patterns {
        None => snapshot.project.mcp_servers.clone(),
        Some(p) => registry::servers_for(p, &snapshot.project.mcp_servers),
    };
    let mut failed = false;
    if !servers.is_empty() {
        say_mcp_file(root, servers.len());
        let Some(rt) = super::runtime() else {
            return EXIT_FAILED;
        };
        let diags = rt.block_on(interruptible(async {
            let (manager, diags) = registry::connect_mcp(&mut snapshot, servers).await;
            for s in manager.status() {
                if let Some(reason) = state_reason(&s.state) {
                    eprintln!(
                        "mcp server `{}` is {}: {reason}; its tools are not listed",
                        s.name,
                        state_word(&s.state)
                    );
                }
            }
            manager.shutdown().await;
            diags
        }));
        let Some(diags) = diags else {
            eprintln!("interrupted; the MCP servers were stopped");
            return EXIT_CANCELLED;
        };
        print_diagnostics(&diags);
        failed = !diags.is_empty();
    }
    let mut tools: Vec<std::sync::Arc<dyn crate::tools::Tool>> = snapshot
        .tools
        .tools()
        .filter(|t| {
            patterns.as_ref().is_none_or(|p| {
                p.iter()
                    .any(|p| crate::tools::glob_match(p, &t.spec().name))
            })
        })
        .cloned()
        .collect();
    // An agent with `memory.tools: true` also gets the memory tools.
    if let Some(agent) = args
        .agent
        .as_ref()
        .and_then(|n| snapshot.project.agents.get(n))
        && agent.memory.tools
    {
        match super::open_store(root) {
            Ok(store) => tools.extend(crate::memory::memory_tools(
                store,
                agent.memory.namespace.clone(),
                String::new(),
            )),
            Err(e) => eprintln!("warning: cannot list the memory tools: {e}"),
        }
    }
    if args.json {
        let list: Vec<serde_json::Value> = tools
            .iter()
            .map(|t| {
                let spec = t.spec();
                serde_json::json!({"name": spec.name, "source": t.source(), "description": spec.description, "parameters": spec.parameters})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
    } else {
        for t in &tools {
            let spec = t.spec();
            println!("{}  [{}]", spec.name, t.source());
            println!("  {}", one_line(&spec.description, 160));
            println!(
                "  schema: {}",
                serde_json::to_string(&spec.parameters).unwrap_or_default()
            );
        }
        if tools.is_empty() {
            eprintln!("no tools");
        }
    }
    if failed { EXIT_FAILED } else { EXIT_OK }
}
