//! What the daemon keeps of its channels' conversations: which session a
//! conversation is (`channel_sessions`: the channel, the platform's key of
//! the conversation, and where its answers go now, updated by each message
//! so an email reply answers the latest mail), and which turns' answers
//! were sent (`channel_replies`, claimed before sending so no answer goes out twice), so after a restart the answers of turns
//! that were running, waiting for approval or ended unsent still go out.
//! Claiming an update once is the webhook deliveries' claim
//! (`claim_run_for_delivery`, `claim_delivery`).

use chrono::{DateTime, Utc};

use super::{SessionRecord, Store, StoreError};

/// A turn of a channel's session whose answer was not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnansweredTurn {
    pub run_id: String,
    pub session_id: String,
}

/// How long a sent answer is remembered: longer than any turn is looked
/// back on after a restart.
pub const REPLIES_KEPT: chrono::TimeDelta = chrono::TimeDelta::days(7);

impl Store {
    /// Session `session_id` of `agent` for conversation `conversation` of
    /// channel `channel`, created if it does not exist; its answers go to
    /// `reply` (JSON) from now on.
    pub async fn channel_session(
        &self,
        session_id: &str,
        agent: &str,
        channel: &str,
        conversation: &str,
        reply: &str,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let (session_id, agent, channel, conversation, reply) = (
            session_id.to_string(),
            agent.to_string(),
            channel.to_string(),
            conversation.to_string(),
            reply.to_string(),
        );
        route!(self.channel_session(session_id, agent, channel, conversation, reply, now))
    }

    /// Where the answers of session `session_id` go: (channel, reply JSON),
    /// if it is a channel's.
    pub async fn channel_reply(
        &self,
        session_id: &str,
    ) -> Result<Option<(String, String)>, StoreError> {
        route!(self.channel_reply(session_id.to_string()))
    }

    /// Claims the sending of reply `key` (a turn's answer: its run id; an
    /// approval prompt: its token): true for the one caller that may send
    /// it, across restarts and nodes; false when it was claimed before.
    /// Forgets claims older than [`REPLIES_KEPT`].
    pub async fn claim_channel_reply(
        &self,
        key: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        route!(self.claim_channel_reply(key.to_string(), now))
    }

    /// The turns of channel `channel`'s sessions started since `since`
    /// whose answer was not sent, oldest first.
    pub async fn channel_unanswered(
        &self,
        channel: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<UnansweredTurn>, StoreError> {
        route!(self.channel_unanswered(channel.to_string(), since))
    }
}
