//! The HTTP API and webhooks (docs/daemon-and-api.md): the axum
//! router, [`serve`] with graceful shutdown, the guard against web pages
//! (`guard`: Host, Origin, Sec-Fetch-Site, JSON content type), bearer-token
//! auth, request logging, the 1 MiB body limit, and the JSON error shape
//! every handler answers with (`{"error": "<what to do>"}`). The handlers live in
//! `agents` (agents, starting runs), `runs` (listing, reading, cancelling
//! runs), `sessions` (conversations: a message is a turn), `openai` (the
//! OpenAI-compatible `/v1/chat/completions` and `/v1/models`, errors in
//! OpenAI's shape), `approvals` (a person's decision on a run waiting for approval),
//! `sse` (a run's events as server-sent events), `status` (what the
//! configuration loaded and left out), `fires` (what became of the
//! schedules' fires), `memory` (the memory namespaces and their entries),
//! `hooks` (signed webhooks), `signatures` (the webhook signing schemes),
//! `dashboard` (the web dashboard at `/`: embedded static files that read
//! this API) and `mcp` (the agents as MCP tools: `/mcp`, and the handler
//! `aurad mcp serve` serves on stdio).
//!
//! Everything goes through the [`Backend`] trait (`backend`), which the
//! daemon implements: the API never names the daemon, the store's methods
//! or the supervisor. Depends on `config` (the allowed hosts), `store` (its
//! record and error types) and `types`.

mod agents;
mod approvals;
mod backend;
mod channels;
mod dashboard;
mod fires;
mod guard;
mod hooks;
pub mod mcp;
mod memory;
#[doc(hidden)]
pub use hooks::check_request as check_webhook_request;
mod openai;
mod runs;
pub mod server;
mod sessions;
mod signatures;
mod sse;
mod status;

pub use backend::{
    AfterInfo, AgentInfo, Backend, CancelAnswer, ChannelAnswer, RunAsk, ScheduleInfo, SessionError,
    SessionView, SubmitError, TriggerError,
};

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use crate::store::{RunRecord, StoreError};

/// The largest request body accepted (413 beyond).
pub const MAX_BODY: usize = 1024 * 1024;

/// Content type of `GET /metrics` (Prometheus text format 0.0.4).
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What every handler works with.
#[derive(Clone)]
struct Api {
    daemon: Arc<dyn Backend>,
    /// Fires when the API stops; open event streams end then.
    stop: CancellationToken,
}

/// Serves the API on `listener` until `stop` fires, then shuts down
/// gracefully: no new connections, open event streams end, requests in
/// progress finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    daemon: Arc<dyn Backend>,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let app = app(daemon, stop.clone());
    server::serve(listener, app, stop).await;
    Ok(())
}

/// The API's routes on `daemon`. Its event streams end only with their runs
/// (or the client); [`serve`] also ends them when it stops.
pub fn router(daemon: Arc<dyn Backend>) -> Router {
    app(daemon, CancellationToken::new())
}

fn app(daemon: Arc<dyn Backend>, stop: CancellationToken) -> Router {
    let api = Api { daemon, stop };
    let protected = Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/agents", get(agents::list))
        .route("/v1/agents/{name}", get(agents::show))
        .route("/v1/agents/{name}/runs", post(agents::start_run))
        .route("/v1/runs", get(runs::list))
        .route("/v1/runs/{id}", get(runs::show))
        .route("/v1/runs/{id}/events", get(sse::events))
        .route("/v1/runs/{id}/cancel", post(runs::cancel))
        .route("/v1/runs/{id}/approval", post(approvals::decide))
        .route("/v1/approvals", get(approvals::waiting))
        .route("/v1/status", get(status::show))
        .route("/v1/fires", get(fires::list))
        .route("/v1/memory", get(memory::namespaces))
        .route("/v1/memory/{namespace}", get(memory::list))
        .nest_service(
            "/mcp",
            mcp::http::service(api.daemon.clone(), api.stop.clone()),
        )
        .merge(sessions::routes())
        .route_layer(middleware::from_fn_with_state(api.clone(), require_token));
    // Everything but the webhooks (signed instead) refuses what a web page
    // could send; that check comes before the token's. The dashboard's
    // files hold no data: guarded, but public.
    let guarded = protected
        .route("/healthz", get(healthz))
        .merge(dashboard::routes())
        .route_layer(middleware::from_fn_with_state(
            api.clone(),
            guard::refuse_web_pages,
        ));
    let hooks = Router::new()
        .route("/hooks/{agent}", post(hooks::deliver))
        .route("/channels/{name}", post(channels::deliver));
    guarded
        .merge(openai::routes(&api))
        .merge(hooks)
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::map_response(secure_headers))
        .layer(middleware::from_fn(log_request))
        .with_state(api)
}

/// What every answer carries unless its handler set its own (the
/// dashboard's pages set a policy that lets them load their script): no
/// content-type sniffing, nothing loaded or framed from a JSON or text
/// answer opened in a browser, no referrer.
const API_CONTENT_SECURITY_POLICY: &str = "default-src 'none'; frame-ancestors 'none'";

async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CONTENT_SECURITY_POLICY, API_CONTENT_SECURITY_POLICY),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
    ] {
        if !headers.contains_key(&name) {
            headers.insert(name, HeaderValue::from_static(value));
        }
    }
    response
}

/// 200 with the summary; 503 when the daemon cannot do its work (its
/// store is gone), so a supervisor's health check sees it.
async fn healthz(State(api): State<Api>) -> Response {
    let health = api.daemon.health();
    let status = if health["status"] == "ok" {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, axum::Json(health)).into_response()
}

async fn metrics(State(api): State<Api>) -> Response {
    (
        [(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)],
        api.daemon.metrics_text(),
    )
        .into_response()
}

async fn no_route(request: Request) -> ApiError {
    ApiError::not_found(format!(
        "no route {} {}: the dashboard is at /; the API has /healthz, /metrics, /v1/status, /v1/agents, /v1/runs, /v1/sessions, /v1/fires, /v1/memory, /v1/chat/completions, /v1/models, /mcp, /hooks/{{agent}} and /channels/{{name}}",
        request.method(),
        request.uri().path()
    ))
}

async fn wrong_method(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
}

/// Logs each request at debug: method, path (no query), status, time.
/// Never bodies or headers, which may hold secrets.
async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    tracing::debug!(
        %method,
        %path,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "http request"
    );
    response
}

/// Requires `Authorization: Bearer <token>`: `AURAD_TOKEN`, or the one
/// the daemon made and wrote for the person's CLI (`aurad dashboard` opens
/// the dashboard with it). A request is not trusted for coming from
/// loopback: a tool the model drives runs on this machine too.
async fn require_token(State(api): State<Api>, request: Request, next: Next) -> Response {
    let expected = api.daemon.token();
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
    match presented {
        Some(token) if token_matches(token, expected) => next.run(request).await,
        Some(_) => unauthorized(
            "the bearer token is wrong: send `Authorization: Bearer <token>` with the daemon's token (AURAD_TOKEN, or the one `aurad dashboard --print-token` shows)",
        ),
        None => unauthorized(
            "this API needs a bearer token: send `Authorization: Bearer <token>` (AURAD_TOKEN, or the one `aurad dashboard --print-token` shows); `aurad trigger` and `aurad dashboard` send it for you",
        ),
    }
}

fn unauthorized(message: &str) -> Response {
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// The token of an `Authorization: Bearer <token>` value (scheme
/// case-insensitive).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Compares in constant time, also across lengths: both sides are hashed
/// to 32 bytes first, so the comparison never depends on where or whether
/// the lengths differ.
fn token_matches(presented: &str, expected: &str) -> bool {
    let presented = Sha256::digest(presented.as_bytes());
    let expected = Sha256::digest(expected.as_bytes());
    presented.as_slice().ct_eq(expected.as_slice()).into()
}

/// An error answer: `{"error": message, ..extra}` with its status.
#[derive(Debug)]
pub(crate) struct ApiError {
    status: StatusCode,
    message: String,
    /// More fields of the body, e.g. the run a 409 is about.
    extra: Option<(&'static str, Value)>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            extra: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    fn with(mut self, key: &'static str, value: Value) -> ApiError {
        self.extra = Some((key, value));
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = self.status.as_u16(), "{}", self.message);
        }
        let mut body = json!({ "error": self.message });
        if let Some((key, value)) = self.extra {
            body[key] = value;
        }
        (self.status, axum::Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match e {
            StoreError::Ambiguous { .. } | StoreError::Invalid(_) => {
                ApiError::bad_request(e.to_string())
            }
            StoreError::NotFound(_) => ApiError::not_found(e.to_string()),
            // Retention deleted them: 410, with the reason, never an empty stream.
            StoreError::EventsPruned { .. } => ApiError::new(StatusCode::GONE, e.to_string()),
            other => ApiError::internal(format!("the store failed: {other}")),
        }
    }
}

/// A path parameter, its rejection as a JSON error.
struct Param(String);

impl<S: Send + Sync> FromRequestParts<S> for Param {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| Param(value))
            .map_err(|e| ApiError::bad_request(e.body_text()))
    }
}

/// The request body, or why it could not be read (413 beyond [`MAX_BODY`]).
fn read_body(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                status,
                format!(
                    "the request body is larger than {} KiB: send less",
                    MAX_BODY / 1024
                ),
            )
        } else {
            ApiError::new(
                status,
                format!("cannot read the request body: {}", rejection.body_text()),
            )
        }
    })
}

/// Parses a JSON body; a parse error is a 400 saying where and why.
fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("the body is not valid JSON for this request: {e}"))
    })
}

/// 202 with the run and `Location: /v1/runs/{id}`.
fn accepted(run: &RunRecord) -> Response {
    (
        StatusCode::ACCEPTED,
        [(header::LOCATION, format!("/v1/runs/{}", run.id))],
        axum::Json(run),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_case_insensitively() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }

    #[test]
    fn tokens_match_only_when_equal() {
        assert!(token_matches("s3cret", "s3cret"));
        assert!(!token_matches("s3cret", "s3cre"));
        assert!(!token_matches("s3cret!", "s3cret"));
        assert!(!token_matches("", "s3cret"));
        assert!(!token_matches("S3cret", "s3cret"));
    }

    #[test]
    fn store_errors_map_to_statuses() {
        let ambiguous = StoreError::Ambiguous {
            prefix: "abcd".into(),
            matches: vec!["abcd1".into(), "abcd2".into()],
        };
        assert_eq!(ApiError::from(ambiguous).status, StatusCode::BAD_REQUEST);
        let missing = StoreError::NotFound("gone".into());
        assert_eq!(ApiError::from(missing).status, StatusCode::NOT_FOUND);
        let broken = StoreError::Database("disk I/O error".into());
        let error = ApiError::from(broken);
        assert_eq!(error.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(error.message.contains("disk I/O error"));
    }

    #[tokio::test]
    async fn errors_are_json_with_extra_fields() {
        let response = ApiError::new(StatusCode::CONFLICT, "run x is already succeeded")
            .with("run", json!({ "id": "x" }))
            .into_response();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body,
            json!({ "error": "run x is already succeeded", "run": { "id": "x" } })
        );
    }

    #[test]
    fn json_errors_say_why() {
        let error = parse_json::<Value>(b"{\"input\": ").unwrap_err();
        assert_eq!(error.status, StatusCode::BAD_REQUEST);
        assert!(error.message.contains("EOF"), "{}", error.message);
    }
}
