//! What `aurad validate` warns about in a loaded snapshot, beyond the
//! files' own diagnostics: an unattended agent with an unconfined shell, a
//! webhook whose secret variable is not set here. Warnings never stop
//! anything.

use crate::config::diag::locate_item;
use crate::config::{Agent, Diagnostic, EnvLookup};
use crate::tools::glob_match;
use crate::types::SandboxMode;

use super::Snapshot;

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
