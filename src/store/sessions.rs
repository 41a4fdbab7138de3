//! Conversations: a session belongs to an agent and holds its ordered
//! messages (the person's, the assistant's with their tool calls, the tool
//! results), a title, its times and running totals. Each turn is a run;
//! its messages are stored with that run's id, so a session's history
//! says which run produced each part ([`Store::append_turn`]). The first
//! user message gives an untitled session its title. Writer thread for
//! writes; sessions live in the store, not in memory.

use chrono::{DateTime, Utc};

use super::{Store, StoreError};
use crate::types::{Message, Usage};

/// A session as stored, without its messages.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub id: String,
    pub agent: String,
    /// The first line of the first user message (at most
    /// [`TITLE_CHARS`] characters), until one is set.
    pub title: Option<String>,
    pub created_at: DateTime<Utc>,
    /// When its last turn was stored (or when it was created).
    pub updated_at: DateTime<Utc>,
    /// Turns stored.
    pub turns: u64,
    /// Messages stored.
    pub messages: u64,
    /// The totals of its turns' runs.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None` until a turn with a known cost was stored.
    pub cost_usd: Option<f64>,
}

/// One stored message of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionMessage {
    /// Its place in the session, from 1.
    pub seq: u64,
    pub message: Message,
    /// The turn's run that added it.
    pub run_id: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// What one turn adds to a session: its run and the messages in order
/// (the user's, then the assistant's and tool results).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionTurn {
    pub run_id: String,
    pub messages: Vec<Message>,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    /// A new summary of the session's oldest messages, written during the
    /// turn: it replaces the stored one.
    pub summary: Option<SessionSummary>,
}

/// The summary that stands for a session's oldest messages in the history
/// a turn sends (`history: compact`).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSummary {
    pub text: String,
    /// The seq of the last message it covers: the history goes on after it.
    pub through: u64,
}

/// What a turn sends as its history: the stored summary, then the messages
/// after the ones it covers, in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SessionHistory {
    pub summary: Option<SessionSummary>,
    pub messages: Vec<SessionMessage>,
}

/// What [`Store::delete_session`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionDeletion {
    Deleted,
    NotFound,
    /// Nothing was deleted: these runs, turns of the session, have not
    /// ended (oldest first).
    TurnsOpen(Vec<String>),
}

/// The longest title taken from a message.
pub const TITLE_CHARS: usize = 60;

/// The title an untitled session takes from `messages`: the first line of
/// the first user message, cut at [`TITLE_CHARS`] characters.
fn title_of(messages: &[Message]) -> Option<String> {
    messages.iter().find_map(|m| match m {
        Message::User { content } => {
            let line = content.lines().map(str::trim).find(|l| !l.is_empty())?;
            Some(line.chars().take(TITLE_CHARS).collect())
        }
        _ => None,
    })
}

/// A turn as the backends write it: the messages as JSON, the title an
/// untitled session takes, the token counts as stored.
pub(crate) struct EncodedTurn {
    pub session_id: String,
    pub run_id: String,
    pub texts: Vec<String>,
    pub title: Option<String>,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: Option<f64>,
    /// A new summary and the seq of the last message it covers.
    pub summary: Option<(String, i64)>,
}

impl EncodedTurn {
    fn of(session_id: &str, turn: SessionTurn) -> Result<EncodedTurn, StoreError> {
        let texts = turn
            .messages
            .iter()
            .map(|m| {
                serde_json::to_string(m).map_err(|e| {
                    StoreError::Invalid(format!("cannot store a session message: {e}"))
                })
            })
            .collect::<Result<_, _>>()?;
        let count = |n: Option<u64>| i64::try_from(n.unwrap_or(0)).unwrap_or(i64::MAX);
        Ok(EncodedTurn {
            session_id: session_id.to_string(),
            summary: turn
                .summary
                .map(|s| (s.text, i64::try_from(s.through).unwrap_or(i64::MAX))),
            run_id: turn.run_id,
            title: title_of(&turn.messages),
            texts,
            input_tokens: count(turn.usage.input_tokens),
            output_tokens: count(turn.usage.output_tokens),
            cost_usd: turn.cost_usd,
        })
    }

    /// How many messages it adds.
    pub fn added(&self) -> i64 {
        i64::try_from(self.texts.len()).unwrap_or(i64::MAX)
    }
}

pub(crate) fn message_from(session: &str, seq: u64, text: &str) -> Result<Message, StoreError> {
    serde_json::from_str(text).map_err(|e| {
        StoreError::Database(format!(
            "session {session}: stored message {seq} is unreadable ({e}); the database was edited by hand or written by an incompatible aurad"
        ))
    })
}

impl Store {
    /// Creates session `id` of `agent`; [`StoreError::Conflict`] when the
    /// id is taken.
    pub async fn create_session(
        &self,
        id: &str,
        agent: &str,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let (id, agent) = (id.to_string(), agent.to_string());
        route!(self.create_session(id, agent, now))
    }

    /// Session `id`, if it exists.
    pub async fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let id = id.to_string();
        route!(self.session(id))
    }

    /// The sessions (of `agent`, or all), the last updated first, at most
    /// `limit`.
    pub async fn sessions(
        &self,
        agent: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        let agent = agent.map(str::to_string);
        route!(self.sessions(agent, limit))
    }

    /// The messages of session `id` in order (none for an unknown one).
    pub async fn session_messages(&self, id: &str) -> Result<Vec<SessionMessage>, StoreError> {
        let id = id.to_string();
        route!(self.session_messages(id))
    }

    /// Appends `turn` to session `id` in one transaction: its messages
    /// after the session's last, its usage and cost to the totals, a title
    /// if it has none. Returns the session as it now is;
    /// [`StoreError::NotFound`] when there is no such session.
    pub async fn append_turn(
        &self,
        id: &str,
        turn: SessionTurn,
        now: DateTime<Utc>,
    ) -> Result<SessionRecord, StoreError> {
        let turn = EncodedTurn::of(id, turn)?;
        route!(self.append_turn(turn, now))
    }

    /// Records the end of run `run_id`, a turn of a session, and appends
    /// `turn` to that session, in one transaction: a turn's messages are
    /// stored if and only if its run's end is
    /// ([`Store::finish_run_as`] otherwise).
    pub async fn finish_turn(
        &self,
        run_id: &str,
        events: Vec<crate::types::RunEvent>,
        end: super::RunEnd,
        session_id: &str,
        turn: SessionTurn,
    ) -> Result<i64, StoreError> {
        let turn = Some(EncodedTurn::of(session_id, turn)?);
        route!(self.finish_turn(run_id, events, end, turn))
    }

    /// Makes run `run_id` the one taking its turn in session `session_id`,
    /// if it may: no other run holds the turn (a holder whose run has
    /// ended, or a crashed process's, holds nothing), and no older run of
    /// the session (by id) that has not ended waits before it. One commit,
    /// so two processes or nodes never both take a turn; turns go oldest
    /// first. The turn is given back with the run's end
    /// ([`Store::finish_turn`]). [`StoreError::NotFound`] for an unknown
    /// session.
    pub async fn take_session_turn(
        &self,
        session_id: &str,
        run_id: &str,
    ) -> Result<bool, StoreError> {
        let (session_id, run_id) = (session_id.to_string(), run_id.to_string());
        route!(self.take_session_turn(session_id, run_id))
    }

    /// The history a turn of session `id` sends: its summary, if any, and
    /// the messages after the ones the summary covers.
    pub async fn session_history(&self, id: &str) -> Result<SessionHistory, StoreError> {
        let id = id.to_string();
        route!(self.session_history(id))
    }

    /// Deletes session `id` and its messages (its runs stay), unless a
    /// turn of it has not ended (queued, running or waiting for approval):
    /// checked in the same transaction, so a turn never ends into a session
    /// that is gone.
    pub async fn delete_session(&self, id: &str) -> Result<SessionDeletion, StoreError> {
        let id = id.to_string();
        route!(self.delete_session(id))
    }

    /// Deletes (or, `dry_run`, counts) at most `limit` sessions with their
    /// messages: those not used since `idle_before`, and, per agent, those
    /// beyond its `max_per_agent` most recently used. A session with a
    /// turn not ended (queued, running, waiting for approval) is never
    /// pruned; its turns' runs stay (runs have their own retention). One
    /// transaction; call again until it removes nothing.
    pub async fn prune_sessions(
        &self,
        idle_before: DateTime<Utc>,
        max_per_agent: u64,
        limit: usize,
        dry_run: bool,
    ) -> Result<SessionsPruned, StoreError> {
        let max_per_agent = i64::try_from(max_per_agent).unwrap_or(i64::MAX);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        route!(self.prune_sessions(idle_before, max_per_agent, limit, dry_run))
    }
}

/// What [`Store::prune_sessions`] removed (or would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SessionsPruned {
    pub sessions: u64,
    pub messages: u64,
}
