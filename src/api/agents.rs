//! `GET /v1/agents`, `GET /v1/agents/{name}` and `POST
//! /v1/agents/{name}/runs` (start a run; with `Accept: text/event-stream`
//! the answer is the new run's event stream). Also how a refused trigger
//! maps to a status, shared with the webhooks.
//!
//! Depends on the `Backend` (`agents`, `agent`, `trigger`) and the
//! `sse` handler for streaming answers.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Api, ApiError, Param, accepted, parse_json, read_body, sse};
use super::{RunAsk, SubmitError, TriggerError};

use crate::types::Trigger;

/// The body of `POST /v1/agents/{name}/runs`; an empty body is all
/// defaults.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RunBody {
    #[serde(default)]
    input: Option<String>,
    #[serde(default)]
    vars: Option<Map<String, Value>>,
}

pub(super) async fn list(State(api): State<Api>) -> Result<Response, ApiError> {
    let agents = api.daemon.agents().await?;
    Ok(axum::Json(json!({ "agents": agents })).into_response())
}

pub(super) async fn show(State(api): State<Api>, Param(name): Param) -> Result<Response, ApiError> {
    match api.daemon.agent(&name).await? {
        Some(agent) => Ok(axum::Json(agent).into_response()),
        None => Err(unknown_agent(&name)),
    }
}

pub(super) async fn start_run(
    State(api): State<Api>,
    Param(name): Param,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = read_body(body)?;
    let body: RunBody = if body.iter().all(u8::is_ascii_whitespace) {
        RunBody::default()
    } else {
        parse_json(&body)?
    };
    let trigger = RunAsk {
        input: body.input,
        vars: body.vars.unwrap_or_default(),
        ..RunAsk::new(Trigger::Api)
    };
    let run = api
        .daemon
        .trigger(&name, trigger)
        .await
        .map_err(trigger_error)?;
    tracing::info!(agent = %name, run = %run.id, "run started through the API");
    if wants_event_stream(&headers) {
        return sse::stream_run(&api, &run.id, 0).await;
    }
    Ok(accepted(&run))
}

/// True when the client asked for `text/event-stream`.
pub(super) fn wants_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
}

pub(super) fn unknown_agent(name: &str) -> ApiError {
    ApiError::not_found(format!(
        "no agent named `{name}`: GET /v1/agents lists the agents"
    ))
}

/// The status of a refused trigger: 404 unknown agent, 422 the run cannot
/// be prepared, 503 shutting down.
pub(super) fn trigger_error(e: TriggerError) -> ApiError {
    match e {
        TriggerError::UnknownAgent(name) => unknown_agent(&name),
        TriggerError::Submit(SubmitError::Invalid(message)) => {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
        }
        TriggerError::Submit(e @ SubmitError::ShuttingDown) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        TriggerError::Submit(
            e @ (SubmitError::AlreadyFired
            | SubmitError::DuplicateDelivery
            | SubmitError::AlreadyTriggered),
        ) => ApiError::new(StatusCode::CONFLICT, e.to_string()),
        TriggerError::Submit(SubmitError::Store(e @ crate::store::StoreError::Lost(_))) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
        }
        TriggerError::Submit(SubmitError::Store(e)) => {
            ApiError::internal(format!("cannot record the run: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn run_bodies_reject_unknown_fields() {
        let error = parse_json::<RunBody>(br#"{"inptu": "x"}"#).unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
        assert!(
            error.message.contains("unknown field `inptu`"),
            "{}",
            error.message
        );
        let body: RunBody = parse_json(br#"{"input": "x", "vars": {"a": 1}}"#).unwrap();
        assert_eq!(body.input.as_deref(), Some("x"));
        assert_eq!(body.vars.unwrap()["a"], json!(1));
        assert!(parse_json::<RunBody>(br#"{"vars": [1]}"#).is_err());
    }

    #[test]
    fn event_streams_are_asked_for_with_accept() {
        let mut headers = HeaderMap::new();
        assert!(!wants_event_stream(&headers));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
        assert!(!wants_event_stream(&headers));
        headers.append(
            header::ACCEPT,
            HeaderValue::from_static("Text/Event-Stream"),
        );
        assert!(wants_event_stream(&headers));
    }

    #[test]
    fn refused_triggers_map_to_statuses() {
        let status = |e| trigger_error(e).status;
        assert_eq!(
            status(TriggerError::UnknownAgent("x".into())),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            status(SubmitError::Invalid("no input".into()).into()),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            status(SubmitError::ShuttingDown.into()),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
}
