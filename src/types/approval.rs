//! Human approval of tool calls (`approve:` in an agent file): the call a
//! run waits on, and the decision that ends the wait. Plain data shared by
//! the engine (which asks), the store (which keeps both) and the daemon, API
//! and CLI (which decide).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Who decided an approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecidedBy {
    /// `aurad approve`.
    Cli,
    /// `POST /v1/runs/{id}/approval`.
    Api,
    /// A button pressed (or a reply word) in a channel.
    Channel,
    /// Nobody within `approval_timeout`: denied.
    Timeout,
}

impl DecidedBy {
    pub const ALL: [DecidedBy; 4] = [
        DecidedBy::Cli,
        DecidedBy::Api,
        DecidedBy::Channel,
        DecidedBy::Timeout,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Cli => "cli",
            DecidedBy::Api => "api",
            DecidedBy::Channel => "channel",
            DecidedBy::Timeout => "timeout",
        }
    }

    pub fn parse(s: &str) -> Option<DecidedBy> {
        DecidedBy::ALL.into_iter().find(|d| d.as_str() == s)
    }
}

impl std::fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The exact tool call a run waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    pub call_id: String,
    pub tool: String,
    /// The raw JSON arguments, as the model wrote them (redacted).
    pub arguments: String,
}

/// A decision on an [`ApprovalRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub approved: bool,
    /// Why it was denied (or a note with an approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub by: DecidedBy,
    pub at: DateTime<Utc>,
}

impl Decision {
    /// The tool result the model gets for a denied call.
    pub fn denial_text(&self) -> String {
        let reason = self.reason.as_deref().unwrap_or("no reason given");
        match self.by {
            DecidedBy::Timeout => format!("denied: {reason}"),
            DecidedBy::Cli | DecidedBy::Api | DecidedBy::Channel => {
                format!("denied by a person: {reason}")
            }
        }
    }
}

/// An approval as stored: the call, when it was asked and until when, and
/// its decision once there is one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    pub run_id: String,
    pub request: ApprovalRequest,
    pub requested_at: DateTime<Utc>,
    pub timeout_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}
