//! A run that is a turn of a session: it waits until the session's older
//! turns have ended (one turn at a time, in the order their runs were
//! created, across processes and nodes), then reads the session's history
//! for the engine. Its messages are stored with its end
//! ([`crate::store::Store::finish_turn`]).
//!
//! A turn's end wakes the turns of this process waiting behind it at once;
//! turns waiting on another node see it at their next look (at most
//! [`LOOK_AGAIN_MAX`] later).

use std::sync::LazyLock;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::HistoryMode;
use crate::engine::history::TurnHistory;
use crate::store::{Store, StoreError};

use super::approvals::Slots;

/// Told when a turn of any session ends in this process.
static TURN_ENDED: LazyLock<Notify> = LazyLock::new(Notify::new);

/// The longest a waiting turn goes without looking at the store, for turns
/// that end on another node.
const LOOK_AGAIN_MAX: Duration = Duration::from_millis(500);

/// Wakes the turns of this process waiting for an older one.
pub(super) fn turn_ended() {
    TURN_ENDED.notify_waiters();
}

/// Waits until run `run_id` takes `session`'s turn: once no other run
/// holds it and no older turn waits before it
/// ([`Store::take_session_turn`]).
/// While it waits, it holds no concurrency slot (`slots`: the daemon's),
/// so the turn it waits for can always run. False when `cancel` fired
/// first.
pub(super) async fn wait_for_turn(
    store: &Store,
    session: &str,
    run_id: &str,
    cancel: &CancellationToken,
    slots: Option<&dyn Slots>,
) -> Result<bool, StoreError> {
    let mut released = false;
    let mut look_again = Duration::from_millis(10);
    let ready = loop {
        let ended = TURN_ENDED.notified();
        tokio::pin!(ended);
        // Registered before the look, so an end between the two is not
        // missed.
        ended.as_mut().enable();
        if store.take_session_turn(session, run_id).await? {
            break true;
        }
        if !released && let Some(slots) = slots {
            slots.release(run_id);
            released = true;
        }
        tokio::select! {
            _ = cancel.cancelled() => break false,
            _ = &mut ended => {}
            _ = tokio::time::sleep(look_again) => {}
        }
        look_again = (look_again * 2).min(LOOK_AGAIN_MAX);
    };
    if released && let Some(slots) = slots {
        return Ok(ready && slots.acquire(run_id).await);
    }
    Ok(ready)
}

/// The history a turn of `session` sends.
pub(super) async fn history(
    store: &Store,
    session: &str,
    mode: HistoryMode,
) -> Result<TurnHistory, StoreError> {
    let stored = store.session_history(session).await?;
    let first_seq = stored.messages.first().map_or_else(
        || stored.summary.as_ref().map_or(1, |s| s.through + 1),
        |m| m.seq,
    );
    Ok(TurnHistory {
        summary: stored.summary.map(|s| s.text),
        messages: stored.messages.into_iter().map(|m| m.message).collect(),
        first_seq,
        compact: mode == HistoryMode::Compact,
    })
}

/// Why a message cannot become a turn of a session.
#[derive(Debug, thiserror::Error)]
pub enum TurnRefused {
    #[error("no session has the id `{0}`; list them with `aurad sessions` or start a new one")]
    UnknownSession(String),
    #[error("session `{session}` belongs to agent `{owner}`, not `{agent}`")]
    OtherAgent {
        session: String,
        owner: String,
        agent: String,
    },
    #[error("no agent named `{0}` in agents/ (a session's agent was removed or renamed)")]
    UnknownAgent(String),
    #[error(
        "agent `{0}` is a pipeline (it has `steps:`): it runs its steps, so it cannot hold a conversation"
    )]
    Pipeline(String),
    #[error(
        "session `{session}` has reached its {max_turns} turns (sessions.max_turns in aurad.yaml); start a new session"
    )]
    Full { session: String, max_turns: u64 },
    #[error("the message is empty; write something")]
    Empty,
    #[error("{0}")]
    Store(#[from] StoreError),
}

/// The request for a turn of session `session_id` whose message is
/// `message`, started by `trigger`, once the session and its agent are
/// checked: the session exists, its agent is an agent of `snapshot` (not a
/// pipeline), and it has turns left.
pub async fn turn_request(
    store: &Store,
    snapshot: &crate::registry::Snapshot,
    session_id: &str,
    message: String,
    trigger: crate::types::Trigger,
) -> Result<super::RunRequest, TurnRefused> {
    if message.trim().is_empty() {
        return Err(TurnRefused::Empty);
    }
    let Some(session) = store.session(session_id).await? else {
        return Err(TurnRefused::UnknownSession(session_id.to_string()));
    };
    let Some(agent) = snapshot.project.agents.get(&session.agent) else {
        return Err(TurnRefused::UnknownAgent(session.agent));
    };
    if agent.steps.is_some() {
        return Err(TurnRefused::Pipeline(session.agent));
    }
    let max_turns = snapshot.project.settings.sessions.max_turns;
    if session.turns >= max_turns {
        return Err(TurnRefused::Full {
            session: session.id,
            max_turns,
        });
    }
    Ok(super::RunRequest {
        input: Some(message),
        session: Some(session.id),
        ..super::RunRequest::new(&session.agent, trigger)
    })
}

/// A new session of `agent` (an agent of `snapshot`, not a pipeline) with
/// a new id.
pub async fn new_session(
    store: &Store,
    snapshot: &crate::registry::Snapshot,
    agent: &str,
) -> Result<crate::store::SessionRecord, TurnRefused> {
    let Some(found) = snapshot.project.agents.get(agent) else {
        return Err(TurnRefused::UnknownAgent(agent.to_string()));
    };
    if found.steps.is_some() {
        return Err(TurnRefused::Pipeline(agent.to_string()));
    }
    let id = crate::store::new_run_id();
    Ok(store.create_session(&id, agent, chrono::Utc::now()).await?)
}
