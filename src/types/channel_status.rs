//! A channel's connection and counters, as `GET /v1/status` reports them
//! (`channels`) and `aurad status` reads them back from the daemon.

use serde::{Deserialize, Serialize};

/// One channel of `channels/`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelStatus {
    pub name: String,
    /// `telegram`, `slack`, `discord` or `email`.
    pub platform: String,
    pub agent: String,
    pub connection: Connection,
    /// Messages handed to the agent, and messages sent back (answer pieces,
    /// approval prompts).
    pub messages_in: u64,
    pub messages_out: u64,
    /// Updates from senders not on the allow-list.
    pub ignored: u64,
    /// Updates seen before (redelivered, or taken by another node).
    pub duplicates: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// Where a channel's connection to its platform stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Connection {
    /// Connecting for the first time.
    Connecting,
    /// Receiving updates (or, in webhook mode, ready for them).
    Connected,
    /// Lost or refused; the next attempt is under way or waiting.
    Reconnecting { reason: String },
    /// Stopped (shutdown, or the channel's file was removed).
    Stopped,
}

impl Connection {
    pub fn as_str(&self) -> &'static str {
        match self {
            Connection::Connecting => "connecting",
            Connection::Connected => "connected",
            Connection::Reconnecting { .. } => "reconnecting",
            Connection::Stopped => "stopped",
        }
    }
}
