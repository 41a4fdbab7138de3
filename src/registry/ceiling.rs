//! What a run allows the runs it starts (the agents it calls as tools, a
//! pipeline's agent steps): they run under the strictest of their caller's
//! limits and their own, so a call never gets more than its caller allows.
//! The stricter sandbox; every approval gate of either; only the tools
//! both allow-lists allow; only the variables both pass. Calls nest: a run
//! two levels down is held by both runs above it. [`tightened`] says, for
//! `validate`, what a callee loses when one caller runs it.
//! May depend on `config`, `tools`, `types`.

use crate::config::Agent;
use crate::config::approval::{ApprovalConfig, NotifyConfig};
use crate::tools::{ToolRegistry, glob_match};
use crate::types::SandboxMode;

/// The limits of the runs above a run, combined.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ceiling {
    /// The strictest of the callers' `sandbox:`.
    sandbox: SandboxMode,
    /// Every caller's `approve:` globs.
    approve: Vec<String>,
    /// The shortest of the callers' `approval_timeout:` (of those that gate
    /// calls): a waiting call is denied no later than its caller's would be.
    approval_timeout: Option<std::time::Duration>,
    /// The nearest caller's `notify:`: who is told of a gated call when the
    /// callee names no one.
    notify: Option<NotifyConfig>,
    /// Each caller's `tools:`: a tool is kept only if every list allows it.
    allow: Vec<Vec<String>>,
    /// Each caller's `pass_env:`: a name is kept only if every list has it.
    pass_env: Vec<Vec<String>>,
}

impl Ceiling {
    /// What a run of `caller`, itself under `above` (if it was started by
    /// another run), allows the runs it starts.
    pub fn under(caller: &Agent, above: Option<&Ceiling>) -> Ceiling {
        let mut ceiling = above.cloned().unwrap_or_default();
        ceiling.sandbox = ceiling.sandbox.max(caller.sandbox);
        for pattern in &caller.approval.approve {
            if !ceiling.approve.contains(pattern) {
                ceiling.approve.push(pattern.clone());
            }
        }
        if !caller.approval.approve.is_empty() {
            let timeout = caller.approval.timeout;
            ceiling.approval_timeout =
                Some(ceiling.approval_timeout.map_or(timeout, |t| t.min(timeout)));
            if caller.approval.notify.is_some() {
                ceiling.notify = caller.approval.notify.clone();
            }
        }
        ceiling.allow.push(caller.tools.clone());
        ceiling.pass_env.push(caller.pass_env.clone());
        ceiling
    }

    /// The sandbox of a run whose own is `own`.
    pub fn sandbox(&self, own: SandboxMode) -> SandboxMode {
        own.max(self.sandbox)
    }

    /// The approval settings of a run whose own are `own`: its gates, then
    /// the callers' it lacks; the shorter timeout; its `notify:`, else the
    /// nearest caller's.
    pub fn approval(&self, own: &ApprovalConfig) -> ApprovalConfig {
        let mut approve = own.approve.clone();
        for pattern in &self.approve {
            if !approve.contains(pattern) {
                approve.push(pattern.clone());
            }
        }
        ApprovalConfig {
            approve,
            timeout: self
                .approval_timeout
                .map_or(own.timeout, |t| t.min(own.timeout)),
            notify: own.notify.clone().or_else(|| self.notify.clone()),
        }
    }

    /// Whether every caller's allow-list allows `tool`.
    pub fn allows(&self, tool: &str) -> bool {
        self.allow
            .iter()
            .all(|list| list.iter().any(|pattern| glob_match(pattern, tool)))
    }

    /// The names of `own` (a `pass_env:`) every caller passes too.
    pub fn pass_env(&self, own: &[String]) -> Vec<String> {
        own.iter()
            .filter(|name| self.pass_env.iter().all(|list| list.contains(name)))
            .cloned()
            .collect()
    }
}

/// What `callee` loses when `caller` runs it (the agent calls it as a
/// tool, or a step of the pipeline runs it), one phrase each; empty when
/// nothing: for `validate`, which says it so no one is surprised.
pub fn tightened(caller: &Agent, callee: &Agent, tools: &ToolRegistry) -> Vec<String> {
    let ceiling = Ceiling::under(caller, None);
    let mut lost = Vec::new();
    if ceiling.sandbox(callee.sandbox) != callee.sandbox {
        lost.push(format!(
            "its tools run under `sandbox: {}` (the caller's) instead of `{}`",
            caller.sandbox.as_str(),
            callee.sandbox.as_str()
        ));
    }
    let own_tools = tools.names_matching(&callee.tools);
    let dropped: Vec<&str> = own_tools
        .iter()
        .map(String::as_str)
        .filter(|tool| !ceiling.allows(tool))
        .collect();
    if !dropped.is_empty() {
        lost.push(format!(
            "it may not use {} (not in the caller's `tools:`)",
            quoted(&dropped)
        ));
    }
    let gated: Vec<&str> = own_tools
        .iter()
        .map(String::as_str)
        .filter(|tool| ceiling.allows(tool))
        .filter(|tool| {
            let gates = |list: &[String]| list.iter().any(|p| glob_match(p, tool));
            gates(&caller.approval.approve) && !gates(&callee.approval.approve)
        })
        .collect();
    if !gated.is_empty() {
        lost.push(format!(
            "its calls of {} wait for approval (the caller's `approve:`)",
            quoted(&gated)
        ));
    }
    let unpassed: Vec<&str> = callee
        .pass_env
        .iter()
        .filter(|name| !caller.pass_env.contains(name))
        .map(String::as_str)
        .collect();
    if !unpassed.is_empty() {
        lost.push(format!(
            "its tools do not get {} (not in the caller's `pass_env:`)",
            quoted(&unpassed)
        ));
    }
    lost
}

fn quoted(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
