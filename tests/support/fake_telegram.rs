//! A fake of the Telegram Bot API on 127.0.0.1, written from its public
//! documentation (https://core.telegram.org/bots/api): every method is
//! `POST /bot<token>/<method>` with a JSON body and answers `{"ok": true,
//! "result": ...}` or `{"ok": false, "error_code", "description"}`.
//! `getUpdates` long-polls: it returns the updates whose `update_id` is at
//! least `offset` (an `offset` confirms every update before it, which are
//! then forgotten), or waits up to `timeout` seconds for one. The test
//! pushes messages and button presses, reads what the bot sent
//! (`sendMessage`, `sendChatAction`, `answerCallbackQuery`,
//! `editMessageReplyMarkup`), and makes polls fail (a 502 from a proxy)
//! to drop the connection.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router, routing::post};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// The bot token the fake accepts.
pub const TOKEN: &str = "123456:test-token";

#[derive(Default)]
struct Inner {
    /// Updates not yet confirmed by an offset.
    pending: VecDeque<Value>,
    /// Every update ever queued, for redelivery.
    history: Vec<Value>,
    /// Updates to send once more although confirmed.
    again: VecDeque<Value>,
    next_update: i64,
    next_message: i64,
    /// Every call but `getUpdates`: (method, body).
    calls: Vec<(String, Value)>,
    /// How many of the next polls answer 502.
    failing_polls: u32,
    polls: u64,
}

#[derive(Clone, Default)]
pub struct FakeTelegram {
    inner: Arc<Mutex<Inner>>,
    updated: Arc<Notify>,
    called: Arc<Notify>,
    pub addr: Option<SocketAddr>,
}

impl FakeTelegram {
    /// Starts the fake on a free port.
    pub async fn start() -> FakeTelegram {
        let mut fake = FakeTelegram::default();
        fake.inner.lock().unwrap().next_update = 1000;
        fake.inner.lock().unwrap().next_message = 1;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        fake.addr = Some(listener.local_addr().unwrap());
        let app = Router::new()
            .route("/{bot}/{method}", post(method))
            .with_state(fake.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        fake
    }

    /// The base URL to give as `api_url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr.unwrap())
    }

    /// Queues `update` (its `update_id` set when absent); returns its id.
    pub fn push_update(&self, mut update: Value) -> i64 {
        let mut inner = self.inner.lock().unwrap();
        let id = match update["update_id"].as_i64() {
            Some(id) => id,
            None => {
                inner.next_update += 1;
                update["update_id"] = json!(inner.next_update);
                inner.next_update
            }
        };
        inner.history.push(update.clone());
        inner.pending.push_back(update);
        drop(inner);
        self.updated.notify_waiters();
        id
    }

    /// A text message from user `user` in chat `chat`; its update id.
    pub fn push_message(&self, user: i64, chat: i64, text: &str) -> i64 {
        let message_id = {
            let mut inner = self.inner.lock().unwrap();
            inner.next_message += 1;
            inner.next_message
        };
        self.push_update(message_update(None, user, chat, message_id, text))
    }

    /// A press of the inline button whose `callback_data` is `data`, by
    /// `user`, on message `message_id` of chat `chat`.
    pub fn push_press(&self, user: i64, chat: i64, message_id: i64, data: &str) -> i64 {
        self.push_update(json!({
            "callback_query": {
                "id": format!("cb{message_id}{data}"),
                "from": {"id": user, "is_bot": false, "first_name": "U", "username": format!("user{user}")},
                "message": {"message_id": message_id, "date": 0, "chat": {"id": chat, "type": "private"}, "text": "prompt"},
                "chat_instance": "1",
                "data": data,
            }
        }))
    }

    /// Sends update `id` once more although it was confirmed: what Telegram
    /// does when the request that confirmed it was lost, or when a daemon
    /// died between taking an update and confirming it.
    pub fn redeliver(&self, id: i64) {
        let mut inner = self.inner.lock().unwrap();
        let update = inner
            .history
            .iter()
            .find(|u| u["update_id"] == id)
            .cloned()
            .expect("an update that was pushed");
        inner.again.push_back(update);
        drop(inner);
        self.updated.notify_waiters();
    }

    /// The next `n` polls answer 502 Bad Gateway.
    pub fn fail_polls(&self, n: u32) {
        self.inner.lock().unwrap().failing_polls = n;
    }

    pub fn polls(&self) -> u64 {
        self.inner.lock().unwrap().polls
    }

    /// Every call of `method`, in order: their bodies.
    pub fn calls(&self, method: &str) -> Vec<Value> {
        self.inner
            .lock()
            .unwrap()
            .calls
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, b)| b.clone())
            .collect()
    }

    /// Waits until `method` was called at least `n` times; their bodies.
    pub async fn wait_calls(&self, method: &str, n: usize, timeout: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let called = self.called.notified();
            let calls = self.calls(method);
            if calls.len() >= n {
                return calls;
            }
            if tokio::time::timeout_at(deadline, called).await.is_err() {
                panic!(
                    "{method} was called {} times, not {n}, within {timeout:?}; calls: {:?}",
                    calls.len(),
                    self.inner.lock().unwrap().calls
                );
            }
        }
    }
}

/// A `message` update of user `user` in chat `chat` (a private chat when
/// they are the same, else a group), in forum topic `thread` if given.
pub fn message_update(
    thread: Option<i64>,
    user: i64,
    chat: i64,
    message_id: i64,
    text: &str,
) -> Value {
    let kind = if user == chat {
        "private"
    } else {
        "supergroup"
    };
    let mut message = json!({
        "message_id": message_id,
        "from": {"id": user, "is_bot": false, "first_name": "U", "username": format!("user{user}")},
        "chat": {"id": chat, "type": kind},
        "date": 1_700_000_000,
        "text": text,
    });
    if let Some(thread) = thread {
        message["message_thread_id"] = json!(thread);
        message["is_topic_message"] = json!(true);
    }
    json!({"message": message})
}

async fn method(
    State(fake): State<FakeTelegram>,
    Path((bot, method)): Path<(String, String)>,
    body: Option<Json<Value>>,
) -> Response {
    if bot != format!("bot{TOKEN}") {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"ok": false, "error_code": 401, "description": "Unauthorized"})),
        )
            .into_response();
    }
    let body = body.map(|Json(b)| b).unwrap_or(json!({}));
    if method == "getUpdates" {
        return get_updates(&fake, &body).await;
    }
    let result = {
        let mut inner = fake.inner.lock().unwrap();
        inner.calls.push((method.clone(), body.clone()));
        match method.as_str() {
            "sendMessage" => {
                inner.next_message += 1;
                json!({
                    "message_id": inner.next_message,
                    "date": 1_700_000_000,
                    "chat": {"id": body["chat_id"], "type": "private"},
                    "text": body["text"],
                })
            }
            _ => json!(true),
        }
    };
    fake.called.notify_waiters();
    Json(json!({"ok": true, "result": result})).into_response()
}

async fn get_updates(fake: &FakeTelegram, body: &Value) -> Response {
    let timeout = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0));
    let offset = body["offset"].as_i64();
    {
        let mut inner = fake.inner.lock().unwrap();
        inner.polls += 1;
        if inner.failing_polls > 0 {
            inner.failing_polls -= 1;
            return (StatusCode::BAD_GATEWAY, "<html>502 Bad Gateway</html>").into_response();
        }
    }
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let updated = fake.updated.notified();
        let ready: Vec<Value> = {
            let mut inner = fake.inner.lock().unwrap();
            if let Some(offset) = offset {
                inner
                    .pending
                    .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
            }
            let mut ready: Vec<Value> = inner.again.drain(..).collect();
            ready.extend(inner.pending.iter().cloned());
            ready
        };
        if !ready.is_empty() {
            return Json(json!({"ok": true, "result": ready})).into_response();
        }
        if tokio::time::timeout_at(deadline, updated).await.is_err() {
            return Json(json!({"ok": true, "result": []})).into_response();
        }
    }
}
