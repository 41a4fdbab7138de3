//! A fake Discord on 127.0.0.1, written from Discord's public developer
//! documentation, for the Discord connector's tests: the REST API under
//! `/api/v10` (an axum server) and the Gateway (a WebSocket server of its
//! own, tokio-tungstenite).
//!
//! What it follows:
//! - Gateway (<https://discord.com/developers/docs/events/gateway>,
//!   <https://discord.com/developers/docs/events/gateway-events>): `GET
//!   /gateway/bot` gives the Gateway's URL; a connection gets Hello (op 10,
//!   `heartbeat_interval`), heartbeats (op 1) are answered with op 11,
//!   Identify (op 2) with READY (`session_id`, a `resume_gateway_url`
//!   pointing back here at `/resume`, `user`), dispatches (op 0) carry an
//!   increasing `s`; Resume (op 6) replays every dispatch after its `seq`
//!   and ends with RESUMED, or answers Invalid Session (op 9, `d: false`)
//!   for a session it does not know. A wrong token in Identify is closed
//!   with 4004 (<https://discord.com/developers/docs/topics/opcodes-and-status-codes>).
//! - REST (<https://discord.com/developers/docs/resources/message#create-message>,
//!   <https://discord.com/developers/docs/resources/channel>,
//!   <https://discord.com/developers/docs/interactions/receiving-and-responding>):
//!   `Authorization: Bot TOKEN` checked (401 otherwise); Create Message
//!   honours `enforce_nonce` (a nonce seen in the last five minutes gives
//!   back that message, no second one); Start Thread from Message makes a
//!   thread of the message's id owned by the bot, 400 (code 160004) when
//!   the message has one; Get Channel, 404 (code 10003) when unknown;
//!   typing (204); Edit Message; interaction callbacks (204). Errors as
//!   `{"message", "code"}`, a 429 with `retry_after` and `Retry-After`
//!   (<https://discord.com/developers/docs/topics/rate-limits>).
//!
//! Tests push dispatches (`dispatch`), drop or close the socket, stop
//! acknowledging heartbeats, queue error answers, and read what the
//! connector sent (`state`, `until`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response as WsResponse};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// The bot's user id in READY.
pub const BOT_ID: &str = "900000000000000001";

/// What the fake recorded and how it behaves.
#[derive(Debug, Default)]
pub struct State {
    pub heartbeat_interval_ms: u64,
    pub ack_heartbeats: bool,
    /// Every dispatch: (seq, t, d). READY and RESUMED take a seq too.
    pub events: Vec<(u64, String, Value)>,
    /// Session ids given out.
    pub sessions: Vec<String>,
    /// The `d` of every Identify and Resume.
    pub identifies: Vec<Value>,
    pub resumes: Vec<Value>,
    /// The path and query of every Gateway connection.
    pub connections: Vec<String>,
    pub heartbeats: Vec<Value>,
    /// The seqs sent again by a Resume.
    pub replayed: Vec<u64>,
    /// Messages created: the message objects.
    pub messages: Vec<Value>,
    /// Message edits: {channel_id, message_id, body}.
    pub edits: Vec<Value>,
    /// Threads started: {channel_id, message_id, body}.
    pub threads: Vec<Value>,
    /// Channels Get Channel knows, by id.
    pub channels: HashMap<String, Value>,
    /// Channels a typing indicator was sent to.
    pub typing: Vec<String>,
    /// Interaction callbacks: {interaction_id, token, body}.
    pub callbacks: Vec<Value>,
    /// Answers to give to the next REST calls instead of handling them:
    /// (status, body, Retry-After header).
    pub fail_next: VecDeque<(u16, Value, Option<String>)>,
    /// `session_start_limit.remaining` in `GET /gateway/bot` (999 when
    /// not set).
    pub sessions_remaining: Option<u64>,
    /// Every REST call, "METHOD /path".
    pub requests: Vec<String>,
    nonces: HashMap<String, (Instant, Value)>,
    next_id: u64,
}

struct Shared {
    token: String,
    gateway_url: String,
    state: Mutex<State>,
    /// The latest seq: connections send what they have not sent yet.
    seq: watch::Sender<u64>,
    /// Bumped to end the live connections, with a close code or none (the
    /// TCP connection just goes).
    cut: watch::Sender<(u64, Option<u16>)>,
    /// Bumped to send Invalid Session (`d: false`) on the live connections.
    invalidate: watch::Sender<u64>,
    /// Woken when a message is created, so a wait for one ends at once.
    created: tokio::sync::Notify,
}

pub struct FakeDiscord {
    /// The REST base URL, for `discord.api_url`.
    pub api_url: String,
    shared: Arc<Shared>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl FakeDiscord {
    /// A fake whose bot token is `token`.
    pub async fn start(token: &str) -> FakeDiscord {
        let rest = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let gateway = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api_url = format!("http://{}/api/v10", rest.local_addr().unwrap());
        let gateway_url = format!("ws://{}", gateway.local_addr().unwrap());
        let shared = Arc::new(Shared {
            token: token.to_string(),
            gateway_url,
            state: Mutex::new(State {
                heartbeat_interval_ms: 1000,
                ack_heartbeats: true,
                next_id: 1_100_000_000_000_000_000,
                ..State::default()
            }),
            seq: watch::channel(0).0,
            cut: watch::channel((0, None)).0,
            invalidate: watch::channel(0).0,
            created: tokio::sync::Notify::new(),
        });
        let app = {
            let shared = shared.clone();
            axum::Router::new().fallback(move |method, uri, headers, body| {
                let shared = shared.clone();
                async move { rest_call(shared, method, uri, headers, body) }
            })
        };
        let rest_task = tokio::spawn(async move {
            axum::serve(rest, app).await.unwrap();
        });
        let gateway_task = {
            let shared = shared.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((socket, _)) = gateway.accept().await else {
                        return;
                    };
                    tokio::spawn(gateway_connection(shared.clone(), socket));
                }
            })
        };
        FakeDiscord {
            api_url,
            shared,
            tasks: vec![rest_task, gateway_task],
        }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state.lock().unwrap()
    }

    /// Waits (30 s at most) until `f` gives a value.
    pub async fn until<T>(&self, what: &str, f: impl Fn(&State) -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let created = self.shared.created.notified();
            if let Some(v) = f(&self.state()) {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "the fake Discord waited 30 s for {what}; it has {:#?}",
                self.state()
            );
            // A created message wakes the wait at once; other changes
            // are looked at every 10 ms.
            let _ = tokio::time::timeout(Duration::from_millis(10), created).await;
        }
    }

    /// Waits until `n` messages were created; all of them.
    pub async fn wait_messages(&self, n: usize) -> Vec<Value> {
        self.until(&format!("{n} messages"), |s| {
            (s.messages.len() >= n).then(|| s.messages.clone())
        })
        .await
    }

    /// Dispatches event `t` with data `d` (op 0); its seq.
    pub fn dispatch(&self, t: &str, d: Value) -> u64 {
        let seq = push(&self.shared, t, d);
        self.shared.seq.send_replace(seq);
        seq
    }

    /// Drops the live Gateway connections without a close frame.
    pub fn drop_connection(&self) {
        self.shared.cut.send_modify(|(n, code)| {
            *n += 1;
            *code = None;
        });
    }

    /// Closes the live Gateway connections with close code `code`.
    pub fn close_with(&self, code: u16) {
        self.shared.cut.send_modify(|(n, c)| {
            *n += 1;
            *c = Some(code);
        });
    }

    /// Sends Invalid Session (op 9, `d: false`) and forgets every session.
    pub fn invalidate_sessions(&self) {
        self.state().sessions.clear();
        self.shared.invalidate.send_modify(|n| *n += 1);
    }

    /// A channel Get Channel knows (a guild text channel is type 0).
    pub fn add_channel(&self, channel: Value) {
        let id = channel["id"].as_str().unwrap().to_string();
        self.state().channels.insert(id, channel);
    }

    /// The next REST call is answered `status` with `body`.
    pub fn fail_next(&self, status: u16, body: Value, retry_after: Option<&str>) {
        self.state()
            .fail_next
            .push_back((status, body, retry_after.map(str::to_string)));
    }
}

/// A MESSAGE_CREATE's `d`: message `id` of `author` in `channel` (of
/// `guild`, or a DM), mentioning the bot if `content` holds `<@BOT_ID>`.
pub fn message_create(
    id: &str,
    channel: &str,
    guild: Option<&str>,
    author: &str,
    content: &str,
) -> Value {
    let mut m = json!({
        "id": id,
        "channel_id": channel,
        "author": {"id": author, "username": format!("user{}", &author[author.len().saturating_sub(2)..]), "bot": false},
        "content": content,
        "mentions": [],
        "type": 0,
    });
    if let Some(guild) = guild {
        m["guild_id"] = json!(guild);
    }
    if content.contains(&format!("<@{BOT_ID}>")) {
        m["mentions"] = json!([{"id": BOT_ID, "username": "aurad", "bot": true}]);
    }
    m
}

/// An INTERACTION_CREATE's `d`: user `user` pressed the button
/// `custom_id` of `message` (as the fake recorded it) in a DM.
pub fn button_press(id: &str, user: &str, custom_id: &str, message: &Value) -> Value {
    json!({
        "id": id,
        "application_id": "900000000000000002",
        "type": 3,
        "token": format!("interaction-token-{id}"),
        "channel_id": message["channel_id"],
        "user": {"id": user, "username": format!("user{}", &user[user.len().saturating_sub(2)..])},
        "data": {"custom_id": custom_id, "component_type": 2},
        "message": message,
    })
}

fn push(shared: &Shared, t: &str, d: Value) -> u64 {
    let mut state = shared.state.lock().unwrap();
    let seq = state.events.len() as u64 + 1;
    state.events.push((seq, t.to_string(), d));
    seq
}

fn error(status: u16, message: &str, code: u64) -> Response {
    (
        StatusCode::from_u16(status).unwrap(),
        axum::Json(json!({"message": message, "code": code})),
    )
        .into_response()
}

fn rest_call(
    shared: Arc<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri
        .path()
        .strip_prefix("/api/v10")
        .unwrap_or(uri.path())
        .to_string();
    let mut state = shared.state.lock().unwrap();
    state.requests.push(format!("{method} {path}"));
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let is_callback = segments.first() == Some(&"interactions");
    let authorized = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bot {}", shared.token));
    if !is_callback && !authorized {
        return error(401, "401: Unauthorized", 0);
    }
    if let Some((status, body, retry_after)) = state.fail_next.pop_front() {
        let mut response =
            (StatusCode::from_u16(status).unwrap(), axum::Json(body)).into_response();
        if let Some(wait) = retry_after {
            response
                .headers_mut()
                .insert("retry-after", wait.parse().unwrap());
        }
        return response;
    }
    let json: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => return error(400, "400: Bad Request", 50109),
        }
    };
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["gateway", "bot"]) => axum::Json(json!({
            "url": shared.gateway_url,
            "shards": 1,
            "session_start_limit": {
                "total": 1000,
                "remaining": state.sessions_remaining.unwrap_or(999),
                "reset_after": 3_600_000,
                "max_concurrency": 1,
            },
        }))
        .into_response(),
        ("POST", ["channels", channel, "messages"]) => {
            let content = json.get("content").and_then(Value::as_str).unwrap_or("");
            if content.chars().count() > 2000 {
                return error(
                    400,
                    "Invalid Form Body (content: Must be 2000 or fewer in length.)",
                    50035,
                );
            }
            let nonce = json
                .get("nonce")
                .and_then(Value::as_str)
                .map(str::to_string);
            if nonce.as_ref().is_some_and(|n| n.chars().count() > 25) {
                return error(400, "Invalid Form Body (nonce)", 50035);
            }
            let enforce = json.get("enforce_nonce").and_then(Value::as_bool) == Some(true);
            if let (Some(n), true) = (&nonce, enforce)
                && let Some((at, message)) = state.nonces.get(n)
                && at.elapsed() < Duration::from_secs(300)
            {
                return axum::Json(message.clone()).into_response();
            }
            state.next_id += 1;
            let message = json!({
                "id": state.next_id.to_string(),
                "channel_id": channel,
                "author": {"id": BOT_ID, "username": "aurad", "bot": true},
                "content": content,
                "components": json.get("components").cloned().unwrap_or(json!([])),
                "nonce": nonce,
                "enforce_nonce": enforce,
                "message_reference": json.get("message_reference"),
                "allowed_mentions": json.get("allowed_mentions"),
                "type": 0,
            });
            if let Some(n) = nonce {
                state.nonces.insert(n, (Instant::now(), message.clone()));
            }
            state.messages.push(message.clone());
            shared.created.notify_waiters();
            axum::Json(message).into_response()
        }
        ("PATCH", ["channels", channel, "messages", message]) => {
            state
                .edits
                .push(json!({"channel_id": channel, "message_id": message, "body": json}));
            let found = state.messages.iter_mut().find(|m| m["id"] == *message);
            match found {
                Some(m) => {
                    for (k, v) in json.as_object().cloned().unwrap_or_default() {
                        m[k] = v;
                    }
                    axum::Json(m.clone()).into_response()
                }
                None => error(404, "Unknown Message", 10008),
            }
        }
        ("POST", ["channels", channel, "messages", message, "threads"]) => {
            if state.channels.contains_key(*message) {
                return error(
                    400,
                    "A thread has already been created for this message",
                    160004,
                );
            }
            let name = json.get("name").and_then(Value::as_str).unwrap_or("");
            if name.is_empty() || name.chars().count() > 100 {
                return error(400, "Invalid Form Body (name)", 50035);
            }
            state
                .threads
                .push(json!({"channel_id": channel, "message_id": message, "body": json}));
            let thread = json!({
                "id": message, "type": 11, "parent_id": channel, "owner_id": BOT_ID, "name": name,
            });
            state.channels.insert(message.to_string(), thread.clone());
            (StatusCode::CREATED, axum::Json(thread)).into_response()
        }
        ("GET", ["channels", channel]) => match state.channels.get(*channel) {
            Some(c) => axum::Json(c.clone()).into_response(),
            None => error(404, "Unknown Channel", 10003),
        },
        ("POST", ["channels", channel, "typing"]) => {
            state.typing.push(channel.to_string());
            StatusCode::NO_CONTENT.into_response()
        }
        ("POST", ["interactions", id, token, "callback"]) => {
            state
                .callbacks
                .push(json!({"interaction_id": id, "token": token, "body": json}));
            StatusCode::NO_CONTENT.into_response()
        }
        _ => error(404, "404: Not Found", 0),
    }
}

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

async fn send(ws: &mut Ws, payload: Value) -> bool {
    ws.send(Frame::text(payload.to_string())).await.is_ok()
}

fn dispatch_frame(seq: u64, t: &str, d: &Value) -> Value {
    json!({"op": 0, "s": seq, "t": t, "d": d})
}

/// One Gateway connection, from the handshake until it ends.
#[allow(
    clippy::result_large_err,
    reason = "the handshake callback's error type is tungstenite's"
)]
async fn gateway_connection(shared: Arc<Shared>, socket: tokio::net::TcpStream) {
    let mut target = String::new();
    let record = |request: &Request, response: WsResponse| {
        target = request.uri().to_string();
        Ok(response)
    };
    let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(socket, record).await else {
        return;
    };
    let interval = {
        let mut state = shared.state.lock().unwrap();
        state.connections.push(target);
        state.heartbeat_interval_ms
    };
    let mut seq_rx = shared.seq.subscribe();
    let mut cut_rx = shared.cut.subscribe();
    let mut invalidate_rx = shared.invalidate.subscribe();
    if !send(
        &mut ws,
        json!({"op": 10, "d": {"heartbeat_interval": interval}}),
    )
    .await
    {
        return;
    }
    // The last seq this connection sent; None until identified or resumed.
    let mut sent: Option<u64> = None;
    loop {
        tokio::select! {
            frame = ws.next() => {
                let Some(Ok(frame)) = frame else { return };
                let Frame::Text(text) = frame else {
                    if matches!(frame, Frame::Close(_)) { return; }
                    continue;
                };
                let Ok(payload) = serde_json::from_str::<Value>(text.as_str()) else {
                    let _ = ws.close(Some(CloseFrame { code: CloseCode::from(4002), reason: "Error while decoding payload.".into() })).await;
                    return;
                };
                let d = payload.get("d").cloned().unwrap_or(Value::Null);
                match payload.get("op").and_then(Value::as_u64) {
                    Some(1) => {
                        let ack = {
                            let mut state = shared.state.lock().unwrap();
                            state.heartbeats.push(d);
                            state.ack_heartbeats
                        };
                        if ack && !send(&mut ws, json!({"op": 11})).await { return; }
                    }
                    Some(2) => {
                        if d.get("token").and_then(Value::as_str) != Some(shared.token.as_str()) {
                            shared.state.lock().unwrap().identifies.push(d);
                            let _ = ws.close(Some(CloseFrame { code: CloseCode::from(4004), reason: "Authentication failed.".into() })).await;
                            return;
                        }
                        let session = {
                            let mut state = shared.state.lock().unwrap();
                            state.identifies.push(d);
                            let session = format!("session-{}", state.identifies.len());
                            state.sessions.push(session.clone());
                            session
                        };
                        let ready = json!({
                            "v": 10,
                            "session_id": session,
                            "resume_gateway_url": format!("{}/resume", shared.gateway_url),
                            "user": {"id": BOT_ID, "username": "aurad", "bot": true},
                            "guilds": [],
                            "application": {"id": "900000000000000002"},
                        });
                        let seq = push(&shared, "READY", ready.clone());
                        if !send(&mut ws, dispatch_frame(seq, "READY", &ready)).await { return; }
                        sent = Some(seq);
                    }
                    Some(6) => {
                        let known = {
                            let mut state = shared.state.lock().unwrap();
                            state.resumes.push(d.clone());
                            let id = d.get("session_id").and_then(Value::as_str).unwrap_or("");
                            state.sessions.iter().any(|s| s == id)
                        };
                        let from = d.get("seq").and_then(Value::as_u64);
                        let (Some(from), true) = (from, known) else {
                            if !send(&mut ws, json!({"op": 9, "d": false})).await { return; }
                            continue;
                        };
                        let missed: Vec<(u64, String, Value)> = {
                            let mut state = shared.state.lock().unwrap();
                            let missed: Vec<_> = state.events.iter()
                                .filter(|(s, t, _)| *s > from && t != "READY" && t != "RESUMED")
                                .cloned()
                                .collect();
                            state.replayed.extend(missed.iter().map(|(s, _, _)| *s));
                            missed
                        };
                        for (s, t, d) in &missed {
                            if !send(&mut ws, dispatch_frame(*s, t, d)).await { return; }
                        }
                        let seq = push(&shared, "RESUMED", Value::Null);
                        if !send(&mut ws, dispatch_frame(seq, "RESUMED", &Value::Null)).await { return; }
                        sent = Some(seq);
                    }
                    _ => {}
                }
            }
            changed = seq_rx.changed() => {
                if changed.is_err() { return; }
                let Some(from) = sent else { continue };
                let new: Vec<(u64, String, Value)> = shared.state.lock().unwrap().events.iter()
                    .filter(|(s, t, _)| *s > from && t != "READY" && t != "RESUMED")
                    .cloned()
                    .collect();
                for (s, t, d) in &new {
                    if !send(&mut ws, dispatch_frame(*s, t, d)).await { return; }
                    sent = Some(*s);
                }
            }
            changed = cut_rx.changed() => {
                if changed.is_err() { return; }
                let code = cut_rx.borrow_and_update().1;
                if let Some(code) = code {
                    let _ = ws.close(Some(CloseFrame { code: CloseCode::from(code), reason: "closed by the test".into() })).await;
                }
                // Without a code the socket just goes, as a lost network does.
                return;
            }
            changed = invalidate_rx.changed() => {
                if changed.is_err() { return; }
                if !send(&mut ws, json!({"op": 9, "d": false})).await { return; }
            }
        }
    }
}

/// The Discord connector itself run against the fake (no daemon), for the
/// connector's tests: a channel file parsed the way the daemon parses it,
/// the connector's updates read from its inbox.
pub mod connector {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use aurad::channels::{
        ChannelState, Connection, Connector, Inbox, InboxReceiver, Incoming, What,
    };
    use aurad::config::channels::parse_channel;
    use tokio::sync::oneshot;
    use tokio_util::sync::CancellationToken;

    use super::FakeDiscord;

    /// The fake's bot token in these tests.
    pub const TOKEN: &str = "bot-token-1";
    /// The one user on the channel's allow-list.
    pub const ALICE: &str = "500000000000000001";

    /// A running connector; stopped when dropped.
    pub struct Running {
        pub connector: Arc<dyn Connector>,
        pub state: Arc<ChannelState>,
        pub rx: InboxReceiver,
        shutdown: CancellationToken,
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.shutdown.cancel();
        }
    }

    /// The connector of a channel file pointing at `fake`, with `extra`
    /// lines in its `discord:` section and `token` as the bot token,
    /// running.
    pub fn start_with(fake: &FakeDiscord, token: &str, extra: &str) -> Running {
        let raw = format!(
            "agent: helper\nallow: {{ users: [\"{ALICE}\"] }}\ndiscord:\n  token: ${{DISCORD_TOKEN}}\n  api_url: {}\n{extra}",
            fake.api_url
        );
        let text = raw.replace("${DISCORD_TOKEN}", token);
        let (config, diags) = parse_channel(
            "dc",
            Path::new("channels/dc.yaml"),
            &raw,
            &text,
            &["helper".to_string()],
        );
        let config = config.unwrap_or_else(|| panic!("{diags:?}"));
        let state = Arc::new(ChannelState::new("dc", "discord", "helper"));
        let connector = aurad::channels::connector(&config, state.clone(), reqwest::Client::new());
        let (inbox, rx) = Inbox::new(8);
        let shutdown = CancellationToken::new();
        tokio::spawn(connector.clone().run(inbox, shutdown.clone()));
        Running {
            connector,
            state,
            rx,
            shutdown,
        }
    }

    /// A connector with the right token, once it is connected.
    pub async fn start(fake: &FakeDiscord) -> Running {
        let running = start_with(fake, TOKEN, "");
        until_connection(&running, "connected", |c| {
            matches!(c, Connection::Connected)
        })
        .await;
        running
    }

    /// Waits (10 s at most) until the connection is as `f` wants; it.
    pub async fn until_connection(
        running: &Running,
        what: &str,
        f: impl Fn(&Connection) -> bool,
    ) -> Connection {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let c = running.state.status().connection;
            if f(&c) {
                return c;
            }
            assert!(
                Instant::now() < deadline,
                "waited 10 s for the connection to be {what}; it is {c:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The reason of a connection that is reconnecting, once it is.
    pub async fn reconnecting(running: &Running) -> String {
        let c = until_connection(running, "reconnecting", |c| {
            matches!(c, Connection::Reconnecting { .. })
        })
        .await;
        match c {
            Connection::Reconnecting { reason } => reason,
            other => panic!("reconnecting, not {other:?}"),
        }
    }

    /// The next update the connector hands on, and its `done`.
    pub async fn next(running: &mut Running) -> (Incoming, oneshot::Sender<()>) {
        tokio::time::timeout(Duration::from_secs(10), running.rx.recv())
            .await
            .expect("an update within 10 s")
            .expect("the connector is running")
    }

    /// The text of a message update.
    pub fn text_of(incoming: &Incoming) -> &str {
        match &incoming.what {
            What::Message { text } => text,
            other => panic!("a message, not {other:?}"),
        }
    }
}
