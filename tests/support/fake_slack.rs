//! A fake of Slack for the Slack channel's tests: a real HTTP server and a
//! real WebSocket server on 127.0.0.1, written from Slack's public docs:
//! - the Web API (<https://docs.slack.dev/apis/web-api>): `POST
//!   /api/METHOD`, the token as `Authorization: Bearer`, HTTP 200 with
//!   `{"ok": false, "error"}` on errors (`invalid_auth` for a wrong
//!   token), HTTP 429 with `Retry-After` when rate limited
//!   (<https://docs.slack.dev/apis/web-api/rate-limits>); `auth.test`,
//!   `chat.postMessage` (<https://docs.slack.dev/reference/methods/chat.postMessage>)
//!   and `chat.update` are recorded;
//! - Socket Mode (<https://docs.slack.dev/apis/events-api/using-socket-mode>):
//!   `apps.connections.open` with the app-level token answers the URL of
//!   the fake's own WebSocket server
//!   (<https://docs.slack.dev/reference/methods/apps.connections.open>);
//!   a connection gets `hello`, then the envelopes a test pushes
//!   (`events_api` with an `event_callback` payload, `interactive` with a
//!   `block_actions` payload); the acknowledgements (`{"envelope_id"}`)
//!   are recorded, and an envelope not acknowledged is sent again on the
//!   next connection, as Slack does. A test can drop the connection (no
//!   close frame) or send `disconnect`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc};
use tokio_tungstenite::tungstenite::Message;

pub const BOT_TOKEN: &str = "xoxb-1-fake-bot";
pub const APP_TOKEN: &str = "xapp-1-A1-fake-app";
pub const SIGNING_SECRET: &str = "fake-signing-secret-0123456789";
/// The bot's user id, as `auth.test` and `authorizations` name it.
pub const BOT_USER: &str = "UBOT";

/// One Web API call the fake received.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    /// The `Authorization` header's token (after `Bearer `).
    pub token: String,
    pub body: Value,
    /// The `ts` the fake gave the message `chat.postMessage` posted.
    pub ts: Option<String>,
}

enum Cmd {
    Send(String),
    Drop,
}

enum Failure {
    RateLimited { retry_after: u64 },
    Error(String),
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    acks: Vec<String>,
    /// WebSocket connections greeted with `hello`.
    connections: usize,
    current: Option<mpsc::UnboundedSender<Cmd>>,
    /// Envelopes sent and not acknowledged, sent again on a new connection.
    unacked: Vec<(String, Value)>,
    failures: Vec<(String, Failure)>,
    next: u64,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Notify,
    ws_url: String,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct FakeSlack {
    /// The Web API's base URL, for `slack.api_url`.
    pub api_url: String,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl FakeSlack {
    pub async fn start() -> FakeSlack {
        let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ws = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner::default()),
            changed: Notify::new(),
            ws_url: format!("ws://{}/link/", ws.local_addr().unwrap()),
        });
        let api_url = format!("http://{}/api", http.local_addr().unwrap());
        let app = Router::new()
            .route("/api/{method}", post(web_api))
            .with_state(shared.clone());
        let web = tokio::spawn(async move {
            axum::serve(http, app).await.unwrap();
        });
        let sockets = {
            let shared = shared.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = ws.accept().await else {
                        return;
                    };
                    tokio::spawn(socket(shared.clone(), stream));
                }
            })
        };
        FakeSlack {
            api_url,
            shared,
            tasks: vec![web, sockets],
        }
    }

    /// Pushes an Events API event (the inner `event`) as an `events_api`
    /// envelope with `event_id`; its envelope id.
    pub fn push_event(&self, event_id: &str, event: Value) -> String {
        let payload = json!({
            "token": "legacy-verification-token",
            "team_id": "T1",
            "api_app_id": "A1",
            "type": "event_callback",
            "event_id": event_id,
            "event_time": 1_700_000_000,
            "authorizations": [{"enterprise_id": null, "team_id": "T1", "user_id": BOT_USER,
                "is_bot": true, "is_enterprise_install": false}],
            "event": event,
        });
        self.push("events_api", payload)
    }

    /// Pushes an interaction payload (`block_actions`) as an `interactive`
    /// envelope; its envelope id.
    pub fn push_interactive(&self, payload: Value) -> String {
        self.push("interactive", payload)
    }

    fn push(&self, kind: &str, payload: Value) -> String {
        let mut inner = self.shared.lock();
        inner.next += 1;
        let id = format!("env-{}", inner.next);
        let envelope = json!({
            "envelope_id": id,
            "type": kind,
            "accepts_response_payload": false,
            "retry_attempt": 0,
            "retry_reason": "",
            "payload": payload,
        });
        inner.unacked.push((id.clone(), envelope.clone()));
        if let Some(tx) = &inner.current {
            let _ = tx.send(Cmd::Send(envelope.to_string()));
        }
        id
    }

    /// Sends `disconnect` with `reason` on the current connection.
    pub fn disconnect(&self, reason: &str) {
        let msg = json!({"type": "disconnect", "reason": reason,
            "debug_info": {"host": "fake-slack"}});
        if let Some(tx) = &self.shared.lock().current {
            let _ = tx.send(Cmd::Send(msg.to_string()));
        }
    }

    /// Drops the current connection without a close frame.
    pub fn drop_connection(&self) {
        if let Some(tx) = self.shared.lock().current.take() {
            let _ = tx.send(Cmd::Drop);
        }
    }

    /// The next call of `method` is answered HTTP 429 with `Retry-After`.
    pub fn rate_limit_once(&self, method: &str, retry_after: u64) {
        self.shared
            .lock()
            .failures
            .push((method.into(), Failure::RateLimited { retry_after }));
    }

    /// The next call of `method` is answered `{"ok": false, "error"}`.
    pub fn fail_once(&self, method: &str, error: &str) {
        self.shared
            .lock()
            .failures
            .push((method.into(), Failure::Error(error.into())));
    }

    pub fn acks(&self) -> Vec<String> {
        self.shared.lock().acks.clone()
    }

    pub fn connections(&self) -> usize {
        self.shared.lock().connections
    }

    /// The recorded calls of `method`, in order.
    pub fn calls(&self, method: &str) -> Vec<Call> {
        self.shared
            .lock()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// Waits (up to 30 s) until `check` holds of the fake; panics with
    /// `what` if it does not.
    pub async fn wait_until(&self, what: &str, check: impl Fn(&FakeSlack) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let changed = self.shared.changed.notified();
            if check(self) {
                return;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                assert!(check(self), "fake Slack: timed out waiting for {what}");
                return;
            }
        }
    }

    pub async fn wait_ack(&self, envelope_id: &str) {
        self.wait_until(&format!("the ack of {envelope_id}"), |f| {
            f.acks().iter().any(|a| a == envelope_id)
        })
        .await;
    }

    pub async fn wait_connections(&self, n: usize) {
        self.wait_until(&format!("{n} Socket Mode connection(s)"), |f| {
            f.connections() >= n
        })
        .await;
    }

    pub async fn wait_calls(&self, method: &str, n: usize) -> Vec<Call> {
        self.wait_until(&format!("{n} call(s) of {method}"), |f| {
            f.calls(method).len() >= n
        })
        .await;
        self.calls(method)
    }
}

async fn web_api(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let token = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_string();
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let answer = {
        let mut inner = shared.lock();
        inner.calls.push(Call {
            method: method.clone(),
            token: token.clone(),
            body: body.clone(),
            ts: None,
        });
        let failure = inner
            .failures
            .iter()
            .position(|(m, _)| *m == method)
            .map(|i| inner.failures.remove(i).1);
        let wanted = if method == "apps.connections.open" {
            APP_TOKEN
        } else {
            BOT_TOKEN
        };
        match failure {
            Some(Failure::RateLimited { retry_after }) => {
                drop(inner);
                shared.changed.notify_waiters();
                return (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", retry_after.to_string())],
                    axum::Json(json!({"ok": false, "error": "ratelimited"})),
                )
                    .into_response();
            }
            Some(Failure::Error(error)) => json!({"ok": false, "error": error}),
            None if token.is_empty() => json!({"ok": false, "error": "not_authed"}),
            None if token != wanted => json!({"ok": false, "error": "invalid_auth"}),
            None => {
                inner.next += 1;
                let ts = format!("1700000000.{:06}", inner.next);
                match method.as_str() {
                    "auth.test" => json!({"ok": true, "url": "https://fake.slack.com/",
                        "team": "Fake", "user": "aura", "team_id": "T1",
                        "user_id": BOT_USER, "bot_id": "BBOT"}),
                    "apps.connections.open" => json!({"ok": true, "url": shared.ws_url}),
                    "chat.postMessage" => {
                        if let Some(call) = inner.calls.last_mut() {
                            call.ts = Some(ts.clone());
                        }
                        json!({"ok": true, "channel": body["channel"],
                            "ts": ts, "message": {"text": body["text"], "ts": ts}})
                    }
                    "chat.update" => json!({"ok": true, "channel": body["channel"],
                        "ts": body["ts"], "text": body["text"]}),
                    _ => json!({"ok": false, "error": "unknown_method"}),
                }
            }
        }
    };
    shared.changed.notify_waiters();
    axum::Json(answer).into_response()
}

async fn socket(shared: Arc<Shared>, stream: tokio::net::TcpStream) {
    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
        return;
    };
    let hello = json!({"type": "hello", "num_connections": 1,
        "debug_info": {"host": "fake-slack", "approximate_connection_time": 18060},
        "connection_info": {"app_id": "A1"}});
    if ws
        .send(Message::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    let resend: VecDeque<String> = {
        let mut inner = shared.lock();
        inner.connections += 1;
        inner.current = Some(tx.clone());
        inner
            .unacked
            .iter_mut()
            .map(|(_, e)| {
                let attempt = e["retry_attempt"].as_u64().unwrap_or(0) + 1;
                e["retry_attempt"] = json!(attempt);
                e["retry_reason"] = json!("timeout");
                e.to_string()
            })
            .collect()
    };
    shared.changed.notify_waiters();
    for e in resend {
        let _ = tx.send(Cmd::Send(e));
    }
    loop {
        tokio::select! {
            cmd = rx.recv() => match cmd {
                Some(Cmd::Send(text)) => {
                    if ws.send(Message::Text(text.into())).await.is_err() {
                        break;
                    }
                }
                Some(Cmd::Drop) | None => break,
            },
            frame = ws.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    let Ok(v) = serde_json::from_str::<Value>(text.as_str()) else { continue };
                    if let Some(id) = v.get("envelope_id").and_then(Value::as_str) {
                        let mut inner = shared.lock();
                        inner.acks.push(id.to_string());
                        inner.unacked.retain(|(e, _)| e != id);
                        drop(inner);
                        shared.changed.notify_waiters();
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None => break,
            },
        }
    }
    let mut inner = shared.lock();
    if inner.current.as_ref().is_some_and(|c| c.same_channel(&tx)) {
        inner.current = None;
    }
}
