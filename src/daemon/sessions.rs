//! Sessions under `aurad serve`, for the API: a new session, a message
//! that becomes a turn through the supervisor (so limits, approvals,
//! cancel, traces and the dashboard work for it as for any API run), and
//! deleting a session once none of its turns is open. The checks are
//! `crate::run::session`'s; their refusals become the API's
//! [`SessionError`]s here.
//!
//! Depends on `run` (`turn_request`, `new_session`, `TurnRefused`),
//! `store` and `api` (the error type).

use crate::api::{SessionError, SessionView, SubmitError};
use crate::run::{TurnRefused, new_session, turn_request};
use crate::store::{RunRecord, SessionDeletion, SessionRecord, StoreError};
use crate::types::Trigger;

use super::Daemon;

impl Daemon {
    /// A new session of `agent` (an agent of the current snapshot, not a
    /// pipeline).
    pub async fn new_session(&self, agent: &str) -> Result<SessionRecord, SessionError> {
        new_session(&self.store, &self.snapshot(), agent)
            .await
            .map_err(refused)
    }

    /// Session `id` with its messages in order.
    pub async fn session(&self, id: &str) -> Result<Option<SessionView>, StoreError> {
        let Some(session) = self.store.session(id).await? else {
            return Ok(None);
        };
        let messages = self.store.session_messages(id).await?;
        Ok(Some((session, messages)))
    }

    /// Starts the turn of session `id` whose message is `message` (of
    /// `agent`, when given) through the supervisor; its run as stored.
    pub async fn send_message(
        &self,
        id: &str,
        message: String,
        agent: Option<&str>,
    ) -> Result<RunRecord, SessionError> {
        let snapshot = self.snapshot();
        if let Some(agent) = agent
            && let Some(session) = self.store.session(id).await.map_err(SubmitError::from)?
            && session.agent != agent
        {
            return Err(refused(TurnRefused::OtherAgent {
                session: session.id,
                owner: session.agent,
                agent: agent.to_string(),
            }));
        }
        let request = turn_request(&self.store, &snapshot, id, message, Trigger::Api)
            .await
            .map_err(refused)?;
        Ok(self.supervisor.submit(snapshot, request, None).await?)
    }

    /// Deletes session `id` and its messages, unless a turn of it has not
    /// ended.
    pub async fn delete_session(&self, id: &str) -> Result<(), SessionError> {
        match self
            .store
            .delete_session(id)
            .await
            .map_err(SubmitError::from)?
        {
            SessionDeletion::Deleted => Ok(()),
            SessionDeletion::NotFound => Err(refused(TurnRefused::UnknownSession(id.to_string()))),
            SessionDeletion::TurnsOpen(runs) => Err(SessionError::Conflict {
                message: format!(
                    "session `{id}` has turns that have not ended ({}): wait for them to end or cancel them (POST /v1/runs/{{id}}/cancel), then delete it",
                    runs.join(", ")
                ),
                runs,
            }),
        }
    }
}

/// The API's error for a refused turn or session.
fn refused(refusal: TurnRefused) -> SessionError {
    let message = refusal.to_string();
    match refusal {
        TurnRefused::UnknownSession(_) | TurnRefused::UnknownAgent(_) => {
            SessionError::NotFound(message)
        }
        TurnRefused::OtherAgent { .. } | TurnRefused::Pipeline(_) | TurnRefused::Empty => {
            SessionError::Invalid(message)
        }
        TurnRefused::Full { .. } => SessionError::Conflict {
            message,
            runs: Vec::new(),
        },
        TurnRefused::Store(e) => SessionError::Submit(SubmitError::Store(e)),
    }
}
