//! `aurad tools`: list every tool an agent would see (built-in, `tools.d`,
//! MCP servers', memory) with its source and schema.

use std::path::Path;

use clap::Args;

use super::mcp::{interruptible, say_mcp_file, state_reason, state_word};
use super::render::one_line;
use super::{
    EXIT_CANCELLED, EXIT_CONFIG, EXIT_FAILED, EXIT_OK, print_diagnostics, print_for_agent,
};
use crate::config;
use crate::registry;

#[derive(Debug, Args)]
pub struct ToolsArgs {
    /// Only the tools this agent may use (its `tools:` allow-list).
    #[arg(long)]
    pub agent: Option<String>,
    /// Print the tools as a JSON array with their schemas.
    #[arg(long)]
    pub json: bool,
}

pub fn tools(root: &Path, args: ToolsArgs) -> i32 {
    let loaded = config::load(root, &config::process_env);
    let (mut snapshot, diagnostics) = registry::build(loaded, &config::process_env);
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
    if failed {
        EXIT_FAILED
    } else if config_errors {
        EXIT_CONFIG
    } else {
        EXIT_OK
    }
}
