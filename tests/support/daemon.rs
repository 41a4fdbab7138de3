//! The HTTP API of an in-process daemon (started with [`super::inproc`]),
//! from a client's side: requests with an optional bearer token, JSON
//! answers, polling a run until it ends, reading server-sent events one by
//! one, and signing webhook bodies.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

use super::inproc::{self, InProc, Start, eventually};

/// A daemon and a client for its API.
pub struct Api {
    pub daemon: InProc,
    pub client: reqwest::Client,
    /// Sent as `Authorization: Bearer` when set.
    pub token: Option<String>,
}

/// An environment holding exactly `vars`.
pub fn env_of(vars: &[(&str, &str)]) -> aurad::run::Env {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Arc::new(move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
}

impl Api {
    /// Starts the daemon on `root` with the environment `vars`.
    pub async fn start(root: &Path, vars: &[(&str, &str)]) -> Api {
        let daemon = inproc::start(
            root,
            Start {
                env: env_of(vars),
                ..Start::default()
            },
        )
        .await;
        Api {
            token: Some(daemon.token.clone()),
            daemon,
            client: reqwest::Client::new(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        self.daemon.url(path)
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.authorised(self.client.get(self.url(path)))
    }

    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.authorised(self.client.post(self.url(path)))
    }

    fn authorised(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// GET `path`: (status, JSON body).
    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        json_of(self.get(path).send().await.expect("GET answered")).await
    }

    /// POST `body` (JSON) to `path`: (status, JSON body).
    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        json_of(
            self.post(path)
                .json(body)
                .send()
                .await
                .expect("POST answered"),
        )
        .await
    }

    /// Polls `GET /v1/runs/{id}` until the run is in a final state.
    pub async fn wait_run(&self, id: &str) -> Value {
        eventually(
            &format!("run {id} to end"),
            Duration::from_secs(30),
            || async {
                let (status, run) = self.get_json(&format!("/v1/runs/{id}")).await;
                assert_eq!(status, 200, "{run}");
                let state = run["state"].as_str().unwrap_or("").to_string();
                (state != "queued" && state != "running").then_some(run)
            },
        )
        .await
    }

    /// Shuts the daemon down; asserts it stopped cleanly.
    pub async fn stop(self) {
        self.daemon
            .stop()
            .await
            .expect("aurad serve stopped cleanly");
    }
}

/// The status and the JSON body of `response` (panics on a non-JSON body).
pub async fn json_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.expect("a body");
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("status {status}: body is not JSON ({e}): {text}"));
    (status, body)
}

/// `sha256=<hex>` of HMAC-SHA256(secret, body), as GitHub signs webhooks.
pub fn sign(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let hex = hex::encode(mac.finalize().into_bytes());
    format!("sha256={hex}")
}

/// One server-sent event.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub event: String,
    /// `None` when the event has no `id:` field.
    pub id: Option<i64>,
    pub data: Value,
}

/// Reads server-sent events from a response, one at a time.
pub struct SseReader {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Vec<u8>>> + Send>>,
    buffer: String,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> SseReader {
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        assert!(
            content_type.starts_with("text/event-stream"),
            "status {}: content type `{content_type}`, not an event stream",
            response.status()
        );
        SseReader {
            body: Box::pin(response.bytes_stream().map(|r| r.map(|b| b.to_vec()))),
            buffer: String::new(),
        }
    }

    /// The next event; `None` when the stream ended. Panics if none comes
    /// within `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Option<SseEvent> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse_block(&block) {
                    return Some(event);
                }
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .unwrap_or_else(|_| {
                    panic!("no event within {timeout:?}; buffered: {:?}", self.buffer)
                });
            match chunk {
                Some(Ok(bytes)) => self.buffer.push_str(&String::from_utf8_lossy(&bytes)),
                Some(Err(e)) => panic!("the event stream failed: {e}"),
                None => {
                    assert!(
                        self.buffer.trim().is_empty(),
                        "the stream ended inside an event: {:?}",
                        self.buffer
                    );
                    return None;
                }
            }
        }
    }

    /// Every event until the stream ends (within `timeout` in all).
    pub async fn collect(mut self, timeout: Duration) -> Vec<SseEvent> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut events = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Some(event) => events.push(event),
                None => return events,
            }
        }
    }
}

/// An event block; `None` for a block of comments only (keep-alives).
fn parse_block(block: &str) -> Option<SseEvent> {
    let mut event = None;
    let mut id = None;
    let mut data: Vec<&str> = Vec::new();
    for line in block.lines() {
        if line.starts_with(':') || line.is_empty() {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_string()),
            "id" => id = Some(value.parse::<i64>().expect("a numeric event id")),
            "data" => data.push(value),
            other => panic!("unexpected SSE field `{other}` in {block:?}"),
        }
    }
    if event.is_none() && data.is_empty() {
        return None;
    }
    let data = data.join("\n");
    Some(SseEvent {
        event: event.unwrap_or_else(|| "message".into()),
        id,
        data: serde_json::from_str(&data)
            .unwrap_or_else(|e| panic!("data is not JSON ({e}): {data}")),
    })
}
