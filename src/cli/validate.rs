//! `aurad validate`: load everything, print every problem as
//! `path:line:column: message`, exit 2 on any error. Warnings (among them
//! agents that give an unattended trigger an unconfined shell, and webhooks
//! whose secret variable is not set here) never change the exit code.

use std::path::Path;

use super::{EXIT_CONFIG, EXIT_OK, print_diagnostics};
use crate::config;
use crate::config::diag::locate_item;
use crate::config::{Agent, Diagnostic, EnvLookup};
use crate::registry::{self, Snapshot};
use crate::tools::glob_match;
use crate::types::SandboxMode;

pub fn run(root: &Path) -> i32 {
    let loaded = config::load(root, &config::process_env);
    let (snapshot, mut diagnostics) = registry::build(loaded, &config::process_env);
    diagnostics.extend(unsandboxed_shell_warnings(&snapshot));
    diagnostics.extend(unset_webhook_secret_warnings(
        &snapshot,
        &config::process_env,
    ));
    // `agents/NAME.test.yaml`: the cases of `aurad test`.
    let (_, test_diagnostics) = config::agent_tests::load_all(root, &config::agent_names(root));
    diagnostics.extend(test_diagnostics);
    print_diagnostics(&diagnostics);
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = diagnostics.len() - errors;
    let agents = snapshot.project.agents.len();
    // What each schedule means, so a wrong expression shows before it fires.
    let now = chrono::Utc::now();
    for agent in snapshot.project.agents.values() {
        for (i, schedule) in agent.triggers.schedules.iter().enumerate() {
            let next = schedule
                .cron
                .next_after(now)
                .map(|t| {
                    t.with_timezone(&schedule.cron.timezone())
                        .format("%Y-%m-%d %H:%M:%S %Z")
                        .to_string()
                })
                .unwrap_or_else(|| "never".into());
            println!(
                "{} schedule[{i}] `{}`: {}; next fire {next}",
                agent.name,
                schedule.cron.expression(),
                schedule.cron.describe()
            );
        }
    }
    super::mcp::say_mcp_file(root, snapshot.project.mcp_servers.len());
    if errors > 0 {
        eprintln!("{errors} error(s), {warnings} warning(s); {agents} agent(s) valid");
        EXIT_CONFIG
    } else {
        eprintln!("ok: {agents} agent(s), {warnings} warning(s)");
        EXIT_OK
    }
}

/// A warning for each agent that allows `bash` (by name or glob), runs
/// without a person (a `schedule:` or a `webhook:`) and has `sandbox: none`:
/// a model reading untrusted text then drives a shell with the daemon
/// user's power. Placed at the `tools` entry that lets `bash` in.
pub fn unsandboxed_shell_warnings(snapshot: &Snapshot) -> Vec<Diagnostic> {
    snapshot
        .project
        .agents
        .values()
        .filter_map(|agent| unsandboxed_shell_warning(agent, snapshot))
        .collect()
}

fn unsandboxed_shell_warning(agent: &Agent, snapshot: &Snapshot) -> Option<Diagnostic> {
    if agent.sandbox != SandboxMode::None || snapshot.tools.get("bash").is_none() {
        return None;
    }
    let unattended = match (&agent.triggers.schedules[..], &agent.triggers.webhook) {
        ([], None) => return None,
        ([], Some(_)) => "a `webhook:`",
        (_, None) => "a `schedule:`",
        (_, Some(_)) => "a `schedule:` and a `webhook:`",
    };
    let pattern = agent.tools.iter().find(|p| glob_match(p, "bash"))?;
    let entry = if pattern == "bash" {
        "`bash`".to_string()
    } else {
        format!("{pattern:?}, which matches `bash`,")
    };
    Some(Diagnostic::warning(
        &agent.path,
        locate_item(&agent.text, &["tools"], pattern),
        format!(
            "tools: {entry} gives this agent a shell with the daemon user's power, and it runs \
             unattended ({unattended}) with `sandbox: none`; add `sandbox: read-only-project` \
             or `sandbox: workdir` so its commands cannot change the project, or remove `bash`"
        ),
    ))
}

/// A warning for each agent whose `webhook.secret_env` names a variable
/// that is unset or empty here: `aurad serve` started with this environment
/// would answer every delivery 500. A warning, not an error, because
/// `aurad validate` often runs where production secrets are not (CI), and
/// the rest of the agent works without its webhook.
pub fn unset_webhook_secret_warnings(snapshot: &Snapshot, env: EnvLookup) -> Vec<Diagnostic> {
    snapshot
        .project
        .agents
        .values()
        .filter_map(|agent| {
            let hook = agent.triggers.webhook.as_ref()?;
            if env(&hook.secret_env).is_some_and(|v| !v.is_empty()) {
                return None;
            }
            Some(Diagnostic::warning(
                &agent.path,
                locate_item(&agent.text, &["webhook", "secret_env"], &hook.secret_env),
                format!(
                    "webhook: `secret_env` names {}, which is not set (or empty) in this environment; \
                     `aurad serve` started like this answers every delivery to /hooks/{} with 500: \
                     export {} with the secret the sender signs with",
                    hook.secret_env, agent.name, hook.secret_env
                ),
            ))
        })
        .collect()
}
