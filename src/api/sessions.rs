//! Conversations over HTTP: `POST /v1/agents/{name}/sessions` (201, a new
//! session), `GET /v1/sessions?agent=&limit=` (the last updated first),
//! `GET /v1/sessions/{id}` (`{"session", "messages"}`: its messages in
//! order, each with the run that added it), `POST /v1/sessions/{id}/messages` (`{"input": "..."}`:
//! 202 with the turn's run, or with `Accept: text/event-stream` the turn's
//! events as `GET /v1/runs/{id}/events` streams them) and `DELETE
//! /v1/sessions/{id}` (204; 409 while a turn of it has not ended). A
//! message's turn is a run like any API run (trigger `api`): it waits for
//! the session's older turns, then reads the history they left.
//!
//! Depends on the `Backend` (`new_session`, `sessions`, `session`,
//! `send_message`, `delete_session`), `store` (the session records) and
//! the run helpers of `agents`, `runs` and `sse`.

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::{
    Api, ApiError, Param, SessionError, accepted, agents, parse_json, read_body, runs, sse,
};
use crate::store::{SessionMessage, SessionRecord};
use crate::types::Message;
use crate::types::timestamp;

/// The session routes (behind the token, like the rest of `/v1`).
pub(super) fn routes() -> Router<Api> {
    Router::new()
        .route("/v1/agents/{name}/sessions", post(create))
        .route("/v1/sessions", get(list))
        .route("/v1/sessions/{id}", get(show).delete(delete))
        .route("/v1/sessions/{id}/messages", post(send))
}

/// A session as the API shows it.
#[derive(Debug, Serialize)]
pub(super) struct SessionJson<'a> {
    id: &'a str,
    agent: &'a str,
    title: Option<&'a str>,
    #[serde(serialize_with = "timestamp::millis")]
    created_at: DateTime<Utc>,
    #[serde(serialize_with = "timestamp::millis")]
    updated_at: DateTime<Utc>,
    turns: u64,
    messages: u64,
    input_tokens: u64,
    output_tokens: u64,
    cost_usd: Option<f64>,
}

impl<'a> From<&'a SessionRecord> for SessionJson<'a> {
    fn from(s: &'a SessionRecord) -> SessionJson<'a> {
        SessionJson {
            id: &s.id,
            agent: &s.agent,
            title: s.title.as_deref(),
            created_at: s.created_at,
            updated_at: s.updated_at,
            turns: s.turns,
            messages: s.messages,
            input_tokens: s.input_tokens,
            output_tokens: s.output_tokens,
            cost_usd: s.cost_usd,
        }
    }
}

/// One stored message: its place, the run that added it, and the message
/// itself (`role`, `content`, an assistant's `tool_calls`, a tool result's
/// `tool_call_id` and `name`).
#[derive(Debug, Serialize)]
struct MessageJson<'a> {
    seq: u64,
    run_id: Option<&'a str>,
    #[serde(serialize_with = "timestamp::millis")]
    created_at: DateTime<Utc>,
    #[serde(flatten)]
    message: &'a Message,
}

impl<'a> From<&'a SessionMessage> for MessageJson<'a> {
    fn from(m: &'a SessionMessage) -> MessageJson<'a> {
        MessageJson {
            seq: m.seq,
            run_id: m.run_id.as_deref(),
            created_at: m.created_at,
            message: &m.message,
        }
    }
}

/// The body of `POST /v1/agents/{name}/sessions`: nothing yet (an empty
/// body or `{}`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {}

/// The body of `POST /v1/sessions/{id}/messages`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageBody {
    input: String,
}

async fn create(
    State(api): State<Api>,
    Param(agent): Param,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = read_body(body)?;
    if !body.iter().all(u8::is_ascii_whitespace) {
        parse_json::<CreateBody>(&body)?;
    }
    let session = api
        .daemon
        .new_session(&agent)
        .await
        .map_err(session_error)?;
    tracing::info!(agent = %agent, session = %session.id, "session created through the API");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/v1/sessions/{}", session.id))],
        axum::Json(SessionJson::from(&session)),
    )
        .into_response())
}

async fn list(
    State(api): State<Api>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (mut agent, mut limit) = (None, runs::DEFAULT_LIMIT);
    for (key, value) in &pairs {
        let value = value.trim();
        match key.as_str() {
            "agent" => agent = Some(value.to_string()).filter(|v| !v.is_empty()),
            "limit" => limit = runs::parse_limit(value)?,
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown query parameter `{other}`: GET /v1/sessions takes agent and limit"
                )));
            }
        }
    }
    let sessions = api.daemon.sessions(agent.as_deref(), limit).await?;
    let sessions: Vec<SessionJson<'_>> = sessions.iter().map(SessionJson::from).collect();
    Ok(axum::Json(json!({ "sessions": sessions })).into_response())
}

async fn show(State(api): State<Api>, Param(id): Param) -> Result<Response, ApiError> {
    let Some((session, messages)) = api.daemon.session(&id).await? else {
        return Err(unknown_session(&id));
    };
    let messages: Vec<MessageJson<'_>> = messages.iter().map(MessageJson::from).collect();
    Ok(
        axum::Json(json!({ "session": SessionJson::from(&session), "messages": messages }))
            .into_response(),
    )
}

async fn send(
    State(api): State<Api>,
    Param(id): Param,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: MessageBody = parse_json(&read_body(body)?)?;
    let run = api
        .daemon
        .send_message(&id, body.input, None)
        .await
        .map_err(session_error)?;
    tracing::info!(session = %id, run = %run.id, "session turn started through the API");
    if agents::wants_event_stream(&headers) {
        return sse::stream_run(&api, &run.id, 0).await;
    }
    Ok(accepted(&run))
}

async fn delete(State(api): State<Api>, Param(id): Param) -> Result<Response, ApiError> {
    api.daemon
        .delete_session(&id)
        .await
        .map_err(session_error)?;
    tracing::info!(session = %id, "session deleted through the API");
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn unknown_session(id: &str) -> ApiError {
    ApiError::not_found(format!(
        "no session has the id `{id}`: GET /v1/sessions lists them, POST /v1/agents/{{name}}/sessions starts one"
    ))
}

/// The status of a refused session request: 404 no such session or agent,
/// 422 a message or agent that cannot make a turn, 409 a full session or
/// (deleting) turns not ended, and a refused run's as for any run.
pub(super) fn session_error(e: SessionError) -> ApiError {
    match e {
        SessionError::NotFound(message) => ApiError::not_found(message),
        SessionError::Invalid(message) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message),
        SessionError::Conflict { message, runs } if runs.is_empty() => {
            ApiError::new(StatusCode::CONFLICT, message)
        }
        SessionError::Conflict { message, runs } => {
            ApiError::new(StatusCode::CONFLICT, message).with("runs", json!(runs))
        }
        SessionError::Submit(e) => agents::trigger_error(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SubmitError;

    #[test]
    fn refusals_map_to_statuses() {
        let status = |e| session_error(e).status;
        assert_eq!(
            status(SessionError::NotFound("x".into())),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status(SessionError::Invalid("empty".into())),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        let busy = session_error(SessionError::Conflict {
            message: "busy".into(),
            runs: vec!["r1".into()],
        });
        assert_eq!(busy.status, StatusCode::CONFLICT);
        assert_eq!(busy.extra.unwrap().1, json!(["r1"]));
        assert_eq!(
            status(SubmitError::ShuttingDown.into()),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[test]
    fn message_bodies_need_an_input() {
        assert!(parse_json::<MessageBody>(b"{}").is_err());
        assert!(parse_json::<MessageBody>(br#"{"input": "hi", "x": 1}"#).is_err());
        let body: MessageBody = parse_json(br#"{"input": "hi"}"#).unwrap();
        assert_eq!(body.input, "hi");
    }
}
