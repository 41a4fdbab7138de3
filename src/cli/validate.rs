//! `aurad validate`: load everything, print every problem as
//! `path:line:column: message`, exit 2 on any error (and in a folder that
//! is no project: no agents/, no aurad.yaml), else say what loaded. Warnings (among them
//! agents that give an unattended trigger an unconfined shell, and webhooks
//! whose secret variable is not set here) never change the exit code.

use std::path::Path;

use super::{EXIT_CONFIG, EXIT_OK, print_diagnostics};
use crate::app::inspect;

pub fn run(root: &Path) -> i32 {
    let found = inspect::validate(root);
    if !found.is_project && found.diagnostics.is_empty() {
        say_err!(
            "error: no aurad project in {}: it has no agents/ folder and no aurad.yaml; \
             create one with `aurad init`, or point at one with --dir PATH",
            root.display()
        );
        return EXIT_CONFIG;
    }
    print_diagnostics(&found.diagnostics);
    let errors = found.diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = found.diagnostics.len() - errors;
    let agents = found.agents;
    // What each schedule means, so a wrong expression shows before it fires.
    for s in &found.schedules {
        say!(
            "{} schedule[{}] `{}`: {}; next fire {}",
            s.agent,
            s.index,
            s.expression,
            s.description,
            s.next.as_deref().unwrap_or("never")
        );
    }
    super::mcp::say_mcp_file(root, found.mcp_servers);
    if errors > 0 {
        say_err!("{errors} error(s), {warnings} warning(s); {agents} agent(s) valid");
        EXIT_CONFIG
    } else {
        say_err!(
            "ok: {agents} agent(s), {warnings} warning(s); {} channel(s), {} MCP server(s), \
             {} tool plugin(s), {} skill(s), {} test file(s)",
            found.channels,
            found.mcp_servers,
            found.plugins,
            found.skills,
            found.test_files
        );
        EXIT_OK
    }
}
