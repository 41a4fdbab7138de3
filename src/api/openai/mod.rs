//! The OpenAI-compatible endpoint: `POST /v1/chat/completions` where
//! `model` names an agent, streamed (`chat.completion.chunk` events, a last
//! chunk with the usage and no choices, then `[DONE]`) or not (a
//! `chat.completion`), and `GET /v1/models` and `GET /v1/models/{id}` (the
//! agents that can hold a conversation: pipelines are left out). Each
//! request is one run of the agent through the supervisor (trigger `api`),
//! with the agent's system prompt and tools: its tools run inside aurad and
//! the client gets the answer.
//!
//! Stateless by default: the last message (the user's) is the run's input,
//! the messages before it its history (`wire`). With the header
//! [`SESSION_HEADER`] the last user message is instead a turn of that
//! stored session, whose history comes from the store (the client's other
//! messages are not read). Every answer names its run in [`RUN_HEADER`].
//!
//! Same guard and token as the rest of the API (the client's `api_key` is
//! the bearer token); every error, those of the guard and the token
//! included, is in OpenAI's shape `{"error": {"message", "type", "param",
//! "code"}}` ([`openai_errors`]). A run that does not succeed is a 500
//! (`code`: its state), or an error event once streaming has begun.
//!
//! Depends on the `Backend` (`agent`, `agents`, `health`, `trigger`,
//! `send_message`, `events`), `types` (`RunEvent`) and the guard, token and
//! error helpers of the API.

mod wire;

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::{Value, json};

use super::{Api, ApiError, Param, RunAsk, TriggerError, agents, parse_json, read_body, sessions};
use crate::store::RunRecord;
use crate::types::{RunEvent, RunState, Trigger, Usage};
use wire::{Answer, ChatBody, Refused};

/// The request header that makes a request a turn of a stored session.
pub const SESSION_HEADER: &str = "x-aurad-session";
/// The answer header naming the run that answered.
pub const RUN_HEADER: &str = "x-aurad-run";

/// How often an idle stream sends a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The routes, behind the guard and the token, their errors reshaped.
pub(super) fn routes(api: &Api) -> Router<Api> {
    Router::new()
        .route("/v1/chat/completions", post(completions))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route_layer(middleware::from_fn_with_state(
            api.clone(),
            super::require_token,
        ))
        .route_layer(middleware::from_fn_with_state(
            api.clone(),
            super::guard::refuse_web_pages,
        ))
        .route_layer(middleware::map_response(openai_errors))
}

/// Rewrites the API's error bodies, `{"error": "<message>", "code": ...}`,
/// into OpenAI's `{"error": {"message", "type", "param", "code"}}`, the
/// type from the status.
async fn openai_errors(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, super::MAX_BODY).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let reshaped = match serde_json::from_slice::<Value>(&bytes) {
        Ok(body) if body["error"].is_string() => json!({ "error": {
            "message": body["error"],
            "type": error_type(status),
            "param": body.get("param").cloned().unwrap_or(Value::Null),
            "code": body.get("code").cloned().unwrap_or(Value::Null),
        }}),
        _ => return Response::from_parts(parts, Body::from(bytes)),
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(reshaped.to_string()))
}

/// OpenAI's error type for a status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        429 => "rate_limit_error",
        500.. => "server_error",
        _ => "invalid_request_error",
    }
}

impl From<Refused> for ApiError {
    fn from(refused: Refused) -> ApiError {
        ApiError::bad_request(refused.message).with("param", json!(refused.param))
    }
}

/// 404 `model_not_found`.
fn no_model(name: &str) -> ApiError {
    ApiError::not_found(format!(
        "the model `{name}` does not exist: a model is an agent's name (GET /v1/models lists them)"
    ))
    .with("code", json!("model_not_found"))
}

/// The time models are listed as created: the daemon's start.
fn created(api: &Api) -> i64 {
    api.daemon.health()["started_at"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map_or(0, |t| t.timestamp())
}

async fn models(State(api): State<Api>) -> Result<Response, ApiError> {
    let created = created(&api);
    let data: Vec<Value> = api
        .daemon
        .agents()
        .await?
        .iter()
        .filter(|a| a.steps.is_none())
        .map(|a| wire::model(&a.name, created))
        .collect();
    Ok(axum::Json(json!({ "object": "list", "data": data })).into_response())
}

async fn model(State(api): State<Api>, Param(name): Param) -> Result<Response, ApiError> {
    match api.daemon.agent(&name).await? {
        Some(agent) if agent.steps.is_none() => {
            Ok(axum::Json(wire::model(&agent.name, created(&api))).into_response())
        }
        _ => Err(no_model(&name)),
    }
}

async fn completions(
    State(api): State<Api>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: ChatBody = parse_json(&read_body(body)?)?;
    body.check()?;
    let session = session_header(&headers)?;
    match api.daemon.agent(&body.model).await? {
        None => return Err(no_model(&body.model)),
        Some(agent) if agent.steps.is_some() => {
            return Err(ApiError::bad_request(format!(
                "agent `{}` is a pipeline (it has `steps:`), so it cannot hold a conversation: start it with POST /v1/agents/{}/runs",
                agent.name, agent.name
            ))
            .with("code", json!("model_not_supported")));
        }
        Some(_) => {}
    }
    let run = match &session {
        Some(id) => {
            let input = wire::last_user_message(&body.messages)?;
            api.daemon
                .send_message(id, input, Some(&body.model))
                .await
                .map_err(sessions::session_error)?
        }
        None => {
            let conversation = wire::conversation(&body.messages)?;
            let ask = RunAsk {
                input: Some(conversation.input),
                history: Some(conversation.history).filter(|h| !h.is_empty()),
                ..RunAsk::new(Trigger::Api)
            };
            api.daemon
                .trigger(&body.model, ask)
                .await
                .map_err(|e| match e {
                    TriggerError::UnknownAgent(name) => no_model(&name),
                    other => agents::trigger_error(other),
                })?
        }
    };
    tracing::info!(agent = %run.agent, run = %run.id, "run started through the OpenAI-compatible endpoint");
    let answer = Answer {
        id: format!("chatcmpl-{}", run.id),
        created: run.created_at.timestamp(),
        model: body.model.clone(),
    };
    let events = api
        .daemon
        .events(&run.id, 0)
        .await?
        .take_until(api.stop.clone().cancelled_owned())
        .map(|(_, event)| event)
        .boxed();
    let mut response = if body.stream == Some(true) {
        stream(answer, &run, events)
    } else {
        complete(answer, &run, events).await?
    };
    if let Ok(value) = HeaderValue::from_str(&run.id) {
        response.headers_mut().insert(RUN_HEADER, value);
    }
    Ok(response)
}

/// The session the request names, if any.
fn session_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(SESSION_HEADER) else {
        return Ok(None);
    };
    match value.to_str().map(str::trim) {
        Ok(id) if !id.is_empty() => Ok(Some(id.to_string())),
        _ => Err(ApiError::bad_request(format!(
            "the {SESSION_HEADER} header must name a session (an id from GET /v1/sessions or POST /v1/agents/{{name}}/sessions)"
        ))),
    }
}

/// How a run ended, from its `finished` event.
struct Ended {
    state: RunState,
    reason: Option<String>,
    output: Option<String>,
    usage: Usage,
}

fn ended(event: RunEvent) -> Option<Ended> {
    match event {
        RunEvent::Finished {
            state,
            reason,
            output,
            usage,
            ..
        } => Some(Ended {
            state,
            reason,
            output,
            usage,
        }),
        _ => None,
    }
}

/// The error of a run that did not succeed (or whose end this answer did
/// not see): the message says where to read more.
fn run_error(run: &RunRecord, end: Option<&Ended>) -> ApiError {
    match end {
        Some(end) => ApiError::internal(format!(
            "run {} of agent `{}` ended {}{}: GET /v1/runs/{}/events shows what happened",
            run.id,
            run.agent,
            end.state,
            end.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            run.id
        ))
        .with("code", json!(end.state.as_str())),
        None => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "aurad is stopping before run {} ended; the run goes on or is taken over: GET /v1/runs/{} shows it",
                run.id, run.id
            ),
        )
        .with("code", json!("unavailable")),
    }
}

/// The non-streamed answer: waits for the run's end.
async fn complete(
    answer: Answer,
    run: &RunRecord,
    events: BoxStream<'static, RunEvent>,
) -> Result<Response, ApiError> {
    let end = events
        .filter_map(|e| std::future::ready(ended(e)))
        .next()
        .await;
    match end {
        Some(end) if end.state == RunState::Succeeded => {
            let content = end.output.as_deref().unwrap_or_default();
            Ok(axum::Json(answer.completion(content, &end.usage)).into_response())
        }
        end => Err(run_error(run, end.as_ref())),
    }
}

/// The streamed answer: a role chunk, a content chunk per text delta of
/// the run (text the model writes before a tool call included), a chunk
/// with `finish_reason`, one with the usage and no choices, then `[DONE]`.
/// A run that does not succeed ends the stream with an error event
/// (`{"error": {...}}`, what OpenAI's clients raise).
fn stream(answer: Answer, run: &RunRecord, events: BoxStream<'static, RunEvent>) -> Response {
    let role = answer.chunk(json!({ "role": "assistant", "content": "" }), None);
    let run = run.clone();
    let body = stream::unfold(Some(events), move |events| {
        let (answer, run) = (answer.clone(), run.clone());
        async move {
            let mut events = events?;
            loop {
                let Some(event) = events.next().await else {
                    return Some((vec![error_data(&run, None)], None));
                };
                match event {
                    RunEvent::TextDelta { text } if !text.is_empty() => {
                        let chunk = answer.chunk(json!({ "content": text }), None);
                        return Some((vec![chunk.to_string()], Some(events)));
                    }
                    event => {
                        let Some(end) = ended(event) else { continue };
                        if end.state != RunState::Succeeded {
                            return Some((vec![error_data(&run, Some(&end))], None));
                        }
                        let done = vec![
                            answer.chunk(json!({}), Some("stop")).to_string(),
                            answer.usage_chunk(&end.usage).to_string(),
                            "[DONE]".to_string(),
                        ];
                        return Some((done, None));
                    }
                }
            }
        }
    });
    let data = stream::once(std::future::ready(vec![role.to_string()]))
        .chain(body)
        .flat_map(stream::iter)
        .map(|data| Ok::<_, Infallible>(Event::default().data(data)));
    let mut response = Sse::new(data)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// An error event's data, in OpenAI's shape.
fn error_data(run: &RunRecord, end: Option<&Ended>) -> String {
    let error = run_error(run, end);
    json!({ "error": {
        "message": error.message,
        "type": error_type(error.status),
        "param": null,
        "code": error.extra.map(|(_, code)| code),
    }})
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn reshaped(error: ApiError) -> (StatusCode, Value) {
        let response = openai_errors(error.into_response()).await;
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        (status, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn errors_take_openai_s_shape() {
        let (status, body) = reshaped(no_model("x")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(body["error"]["param"], Value::Null);
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("GET /v1/models")
        );
        let refused = Refused {
            message: "no".into(),
            param: "n",
        };
        let (status, body) = reshaped(refused.into()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert_eq!(body["error"]["param"], "n");
        let (_, body) = reshaped(ApiError::new(StatusCode::UNAUTHORIZED, "needs a token")).await;
        assert_eq!(body["error"]["type"], "authentication_error");
        assert_eq!(body["error"]["message"], "needs a token");
    }

    #[test]
    fn the_session_header_must_name_a_session() {
        let mut headers = HeaderMap::new();
        assert_eq!(session_header(&headers).unwrap(), None);
        headers.insert(SESSION_HEADER, HeaderValue::from_static(" s1 "));
        assert_eq!(session_header(&headers).unwrap().as_deref(), Some("s1"));
        headers.insert(SESSION_HEADER, HeaderValue::from_static(""));
        assert!(session_header(&headers).is_err());
    }
}
