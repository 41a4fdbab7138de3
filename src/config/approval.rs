//! An agent's `approve:` (tool globs whose calls wait for a person),
//! `approval_timeout:` and `notify:` (a webhook told when a run waits for
//! approval, fails or exceeds its budget), validated with located errors.
//! Depends on `types` only (and the config helpers).

use std::time::Duration;

use serde_yaml::Value;

use super::diag::Diagnostic;
use super::duration::duration_value;
use super::yaml_value::describe_value;

/// How long a call waits for a decision by default: then it is denied.
pub const DEFAULT_APPROVAL_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// What a `notify:` webhook is told about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotifyEvent {
    /// A run waits for approval.
    Approval,
    /// A run failed (`failed` or `timed_out`).
    Failed,
    /// A run was stopped by a spending limit.
    BudgetExceeded,
}

impl NotifyEvent {
    pub const ALL: [NotifyEvent; 3] = [
        NotifyEvent::Approval,
        NotifyEvent::Failed,
        NotifyEvent::BudgetExceeded,
    ];

    /// The word written in `notify.on`.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::Approval => "approval",
            NotifyEvent::Failed => "failed",
            NotifyEvent::BudgetExceeded => "budget_exceeded",
        }
    }

    pub fn parse(s: &str) -> Option<NotifyEvent> {
        NotifyEvent::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

/// `notify:` of an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    /// An http(s) URL (a secret: usually `${VAR}`).
    pub url: String,
    pub on: Vec<NotifyEvent>,
}

impl NotifyConfig {
    pub fn wants(&self, event: NotifyEvent) -> bool {
        self.on.contains(&event)
    }
}

/// An agent's approval and notification settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalConfig {
    /// Tool-name globs (`*`, `?`) whose calls wait for a person.
    pub approve: Vec<String>,
    pub timeout: Duration,
    pub notify: Option<NotifyConfig>,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        ApprovalConfig {
            approve: Vec::new(),
            timeout: DEFAULT_APPROVAL_TIMEOUT,
            notify: None,
        }
    }
}

/// Is `pattern` a tool name or glob (letters, digits, `_`, `-`, `*`, `?`),
/// as `tools:` and `approve:` take?
pub(super) fn is_tool_glob(pattern: &str) -> bool {
    !pattern.is_empty()
        && pattern
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*' | '?'))
}

/// The raw fields, as written.
pub struct RawApproval<'a> {
    pub approve: Option<&'a Value>,
    pub approval_timeout: Option<&'a Value>,
    pub notify: Option<&'a Value>,
}

/// Validates the fields; each problem becomes a located diagnostic via
/// `err(keys, message)`.
pub fn parse_approval(
    raw: RawApproval<'_>,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
    diags: &mut Vec<Diagnostic>,
) -> ApprovalConfig {
    let mut config = ApprovalConfig::default();
    match raw.approve {
        None => {}
        Some(Value::Sequence(items)) => {
            for (i, item) in items.iter().enumerate() {
                match item.as_str() {
                    Some(p) if is_tool_glob(p) => config.approve.push(p.to_string()),
                    _ => diags.push(err(
                        &["approve"],
                        format!(
                            "approve[{i}]: {} is not a tool name or glob (letters, digits, `_`, `-`, `*`, `?`)",
                            describe_value(item)
                        ),
                    )),
                }
            }
        }
        Some(other) => diags.push(err(
            &["approve"],
            format!(
                "`approve` is {}: write a list of tool names or globs, e.g. approve: [bash, \"github_*\"]",
                describe_value(other)
            ),
        )),
    }
    if let Some(value) = raw.approval_timeout {
        match duration_value(value) {
            Ok(d) if d.is_zero() => diags.push(err(
                &["approval_timeout"],
                "approval_timeout: must be longer than 0s".into(),
            )),
            Ok(d) => config.timeout = d,
            Err(msg) => diags.push(err(
                &["approval_timeout"],
                format!("approval_timeout: {msg}"),
            )),
        }
    }
    config.notify = raw.notify.and_then(|value| parse_notify(value, err, diags));
    config
}

fn parse_notify(
    value: &Value,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
    diags: &mut Vec<Diagnostic>,
) -> Option<NotifyConfig> {
    let (url, url_keys, on) = match value {
        Value::String(url) => (url.as_str(), vec!["notify"], None),
        Value::Mapping(map) => {
            for key in map.keys() {
                if !matches!(key.as_str(), Some("url" | "on")) {
                    diags.push(err(
                        &["notify"],
                        format!(
                            "notify: unknown field {}, expected `url` or `on`",
                            describe_value(key)
                        ),
                    ));
                }
            }
            let Some(url) = map.get("url").and_then(Value::as_str) else {
                diags.push(err(
                    &["notify"],
                    "notify: `url` is required (a string, e.g. url: \"${OPS_WEBHOOK_URL}\")".into(),
                ));
                return None;
            };
            (url, vec!["notify", "url"], map.get("on"))
        }
        other => {
            diags.push(err(
                &["notify"],
                format!(
                    "`notify` is {}: write a URL, or {{ url: ..., on: [approval, failed, budget_exceeded] }}",
                    describe_value(other)
                ),
            ));
            return None;
        }
    };
    let mut ok = true;
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
        // The URL is a secret: it is never repeated in the message.
        _ => {
            ok = false;
            diags.push(err(
                &url_keys,
                "notify: the URL is not an http:// or https:// URL (it is not shown: it may hold a secret); check the variable it comes from".into(),
            ));
        }
    }
    let on = match on {
        None => NotifyEvent::ALL.to_vec(),
        Some(Value::Sequence(items)) => {
            let mut events = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item.as_str().and_then(NotifyEvent::parse) {
                    Some(e) => events.push(e),
                    None => {
                        ok = false;
                        diags.push(err(
                            &["notify", "on"],
                            format!(
                                "notify.on[{i}]: {} is not one of `approval`, `failed`, `budget_exceeded`",
                                describe_value(item)
                            ),
                        ));
                    }
                }
            }
            events
        }
        Some(other) => {
            ok = false;
            diags.push(err(
                &["notify", "on"],
                format!(
                    "notify.on is {}: write a list of `approval`, `failed`, `budget_exceeded`",
                    describe_value(other)
                ),
            ));
            Vec::new()
        }
    };
    ok.then(|| NotifyConfig {
        url: url.to_string(),
        on,
    })
}
