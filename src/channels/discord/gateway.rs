//! The Gateway: the WebSocket Discord sends a bot's events on. Connect to
//! the URL `GET /gateway/bot` gives (`?v=10&encoding=json`), wait for Hello
//! (op 10, `heartbeat_interval`), heartbeat (op 1 with the last sequence
//! number, the first after the interval times a random jitter, each
//! answered by op 11), Identify (op 2) or Resume (op 6), then read
//! dispatches (op 0, `t` and `s`): READY gives the session, its
//! `resume_gateway_url` and the bot's user id; RESUMED ends a replay.
//!
//! After a drop, a zombie connection (a heartbeat not acknowledged before
//! the next) or Reconnect (op 7), the connector connects to
//! `resume_gateway_url` and resumes, so Discord replays what was missed.
//! Invalid Session (op 9) with `d: false`, and close codes 4007 and 4009,
//! start a new session. Close codes that no retry can mend (4004 and
//! 4010-4014) wait ten minutes. The connector closes with 4000 when it
//! leaves to resume: a close with 1000 or 1001 ends the session.
//!
//! Events are handed to the daemon by a worker of their own, in order, so
//! heartbeats go on while the daemon claims an update, and an event read
//! before a drop is still delivered after it.
//!
//! Discord's documentation, which this follows:
//! <https://discord.com/developers/docs/events/gateway> (connecting,
//! heartbeats, resuming), <https://discord.com/developers/docs/events/gateway-events>
//! (Identify, Resume, Hello, Ready, Invalid Session),
//! <https://discord.com/developers/docs/topics/opcodes-and-status-codes>
//! (close codes).

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use rand::Rng;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message as Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;

use super::{Discord, lock};
use crate::channels::Inbox;
use crate::channels::backoff::Backoff;

/// GUILD_MESSAGES (1 << 9), DIRECT_MESSAGES (1 << 12) and MESSAGE_CONTENT
/// (1 << 15, privileged: enable it in the Developer Portal's Bot page).
pub(super) const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);
/// How long to wait after a close no retry can mend.
const FATAL_WAIT: Duration = Duration::from_secs(600);
/// How long connecting and the Hello may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A session to resume.
#[derive(Debug, Clone)]
struct Session {
    id: String,
    resume_url: String,
}

/// How a connection ended.
enum End {
    Shutdown,
    Dropped {
        reason: String,
        /// The session may be resumed.
        resume: bool,
        /// Wait this long rather than the backoff's wait.
        wait: Option<Duration>,
    },
}

fn dropped(reason: impl Into<String>) -> End {
    End::Dropped {
        reason: reason.into(),
        resume: true,
        wait: None,
    }
}

/// Receives events until `shutdown` (or until the daemon stops taking
/// them).
pub(super) async fn run(discord: Arc<Discord>, inbox: Inbox, shutdown: CancellationToken) {
    let stop = shutdown.child_token();
    let (events, mut queue) = mpsc::unbounded_channel::<(String, Value)>();
    let worker = {
        let discord = discord.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            while let Some((t, d)) = queue.recv().await {
                if discord.handle(&t, d, &inbox).await.is_err() {
                    stop.cancel();
                    return;
                }
            }
        })
    };
    let mut gateway = Gateway {
        discord: &discord,
        events,
        session: None,
        seq: None,
    };
    let mut backoff = Backoff::default();
    while !stop.is_cancelled() {
        let url = match gateway.session.clone() {
            Some(s) => Ok(s.resume_url),
            None => discord.gateway_url().await,
        };
        let end = match url {
            Ok(url) => gateway.connection(&url, &stop, &mut backoff).await,
            Err(end) => end,
        };
        let End::Dropped {
            reason,
            resume,
            wait,
        } = end
        else {
            break;
        };
        if !resume {
            gateway.session = None;
            gateway.seq = None;
        }
        let wait = wait.unwrap_or_else(|| backoff.next_wait());
        discord.state.reconnecting(format!(
            "{reason}; connecting again in {:.1} s",
            wait.as_secs_f64()
        ));
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => break,
        }
    }
    stop.cancel();
    drop(gateway);
    worker.abort();
}

impl Discord {
    /// The Gateway's URL, from `GET /gateway/bot`. A refused token (401)
    /// waits as long as a Gateway close for it would.
    async fn gateway_url(&self) -> Result<String, End> {
        let answer = self
            .api(Method::GET, "/gateway/bot", None)
            .await
            .map_err(|f| {
                let refused = f.status == Some(401);
                End::Dropped {
                    reason: if refused {
                        format!(
                            "Discord refused the bot token: check `discord.token` ({})",
                            f.error
                        )
                    } else {
                        format!("could not get the Gateway's URL: {}", f.error)
                    },
                    resume: false,
                    wait: refused.then_some(FATAL_WAIT),
                }
            })?;
        // Each Identify spends one of the sessions a bot may start a day;
        // with none left, Identify would fail until `reset_after` (ms).
        let limit = answer.get("session_start_limit");
        if limit
            .and_then(|l| l.get("remaining"))
            .and_then(Value::as_u64)
            == Some(0)
        {
            let reset = limit
                .and_then(|l| l.get("reset_after"))
                .and_then(Value::as_u64)
                .map_or(FATAL_WAIT, Duration::from_millis);
            return Err(End::Dropped {
                reason: "the bot has started all the Gateway sessions Discord allows it for now (session_start_limit)".into(),
                resume: false,
                wait: Some(reset.max(Duration::from_secs(1))),
            });
        }
        answer
            .get("url")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| dropped(format!("GET /gateway/bot answered no `url`: {answer}")))
    }
}

struct Gateway<'a> {
    discord: &'a Discord,
    events: mpsc::UnboundedSender<(String, Value)>,
    session: Option<Session>,
    /// The last sequence number received.
    seq: Option<u64>,
}

/// What close code `code` means, and whether a retry may mend it.
fn close_reason(code: u16, text: &str) -> End {
    let (what, resume, fatal) = match code {
        4004 => (
            "authentication failed: check the bot token (`discord.token`)",
            false,
            true,
        ),
        4010 => ("invalid shard", false, true),
        4011 => (
            "sharding required: the bot is in too many guilds for one connection",
            false,
            true,
        ),
        4012 => ("invalid API version", false, true),
        4013 => ("invalid intents", false, true),
        4014 => (
            "disallowed intents: enable the Message Content intent in the Developer Portal (Bot page)",
            false,
            true,
        ),
        4007 => ("invalid sequence number on resume", false, false),
        4009 => ("session timed out", false, false),
        _ => ("", true, false),
    };
    let said = if text.is_empty() {
        String::new()
    } else {
        format!(" ({text})")
    };
    let reason = if what.is_empty() {
        format!("Discord closed the Gateway with code {code}{said}")
    } else {
        format!("Discord closed the Gateway with code {code}, {what}{said}")
    };
    End::Dropped {
        reason,
        resume,
        wait: fatal.then_some(FATAL_WAIT),
    }
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

impl Gateway<'_> {
    /// One connection to `url`, from connecting to its end.
    async fn connection(
        &mut self,
        url: &str,
        stop: &CancellationToken,
        backoff: &mut Backoff,
    ) -> End {
        let full = format!("{}/?v=10&encoding=json", url.trim_end_matches('/'));
        let connecting = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_tungstenite::connect_async(full.as_str()),
        );
        let mut ws: Socket = tokio::select! {
            r = connecting => match r {
                Ok(Ok((ws, _))) => ws,
                Ok(Err(e)) => return dropped(format!("could not connect to the Gateway at {url}: {e}")),
                Err(_) => return dropped(format!("could not connect to the Gateway at {url} within {} s", CONNECT_TIMEOUT.as_secs())),
            },
            () = stop.cancelled() => return End::Shutdown,
        };
        let interval = tokio::select! {
            r = tokio::time::timeout(CONNECT_TIMEOUT, hello(&mut ws)) => match r {
                Ok(Ok(interval)) => interval,
                Ok(Err(end)) => return end,
                Err(_) => return dropped("the Gateway sent no Hello"),
            },
            () = stop.cancelled() => return End::Shutdown,
        };
        let token = self.discord.config.token.clone();
        let first = match (&self.session, self.seq) {
            (Some(s), Some(seq)) => json!({"op": 6, "d": {
                "token": token, "session_id": s.id, "seq": seq,
            }}),
            _ => json!({"op": 2, "d": {
                "token": token,
                "intents": INTENTS,
                "properties": {"os": std::env::consts::OS, "browser": "aurad", "device": "aurad"},
            }}),
        };
        if let Err(e) = ws.send(Frame::text(first.to_string())).await {
            return dropped(format!("the Gateway connection failed: {e}"));
        }
        // The first heartbeat after the interval times a jitter in [0, 1),
        // so many clients started at once do not beat together.
        let jitter: f64 = rand::rng().random_range(0.0..1.0);
        let mut next_beat = Instant::now() + interval.mul_f64(jitter);
        let mut acked = true;
        loop {
            let frame = tokio::select! {
                () = stop.cancelled() => {
                    let _ = ws.close(None).await;
                    return End::Shutdown;
                }
                () = tokio::time::sleep_until(next_beat) => {
                    if !acked {
                        leave(&mut ws).await;
                        return dropped(format!(
                            "Discord did not acknowledge a heartbeat within {} ms (a zombie connection)",
                            interval.as_millis()
                        ));
                    }
                    if let Err(e) = ws.send(Frame::text(json!({"op": 1, "d": self.seq}).to_string())).await {
                        return dropped(format!("the Gateway connection failed: {e}"));
                    }
                    acked = false;
                    next_beat = Instant::now() + interval;
                    continue;
                }
                frame = ws.next() => frame,
            };
            let text = match frame {
                None => return dropped("the Gateway connection was closed without a close code"),
                Some(Err(e)) => return dropped(format!("the Gateway connection failed: {e}")),
                Some(Ok(Frame::Close(close))) => {
                    return match close {
                        Some(c) => close_reason(u16::from(c.code), c.reason.as_str()),
                        None => dropped("Discord closed the Gateway without a code"),
                    };
                }
                Some(Ok(Frame::Text(text))) => text,
                Some(Ok(_)) => continue,
            };
            let payload: Value = match serde_json::from_str(text.as_str()) {
                Ok(v) => v,
                Err(e) => {
                    self.discord
                        .state
                        .error(format!("a Gateway payload could not be read: {e}"));
                    continue;
                }
            };
            match payload.get("op").and_then(Value::as_u64) {
                Some(0) => {
                    if let Some(s) = payload.get("s").and_then(Value::as_u64) {
                        self.seq = Some(s);
                    }
                    let t = payload.get("t").and_then(Value::as_str).unwrap_or("");
                    let d = payload.get("d").cloned().unwrap_or(Value::Null);
                    match t {
                        "READY" => {
                            self.ready(&d);
                            self.discord.state.connected();
                            backoff.connected();
                        }
                        "RESUMED" => {
                            self.discord.state.connected();
                            backoff.connected();
                        }
                        _ => {
                            if self.events.send((t.to_string(), d)).is_err() {
                                return End::Shutdown;
                            }
                        }
                    }
                }
                Some(1) => {
                    // Discord asks for a heartbeat now.
                    if let Err(e) = ws
                        .send(Frame::text(json!({"op": 1, "d": self.seq}).to_string()))
                        .await
                    {
                        return dropped(format!("the Gateway connection failed: {e}"));
                    }
                }
                Some(7) => {
                    leave(&mut ws).await;
                    return dropped("Discord asked the bot to reconnect (op 7)");
                }
                Some(9) => {
                    let resumable = payload.get("d").and_then(Value::as_bool).unwrap_or(false);
                    leave(&mut ws).await;
                    // A random 1 to 5 seconds before the next session.
                    let wait = Duration::from_millis(rand::rng().random_range(1000..=5000));
                    return End::Dropped {
                        reason: format!(
                            "Discord invalidated the session (op 9, {})",
                            if resumable {
                                "resumable"
                            } else {
                                "a new session is needed"
                            }
                        ),
                        resume: resumable,
                        wait: Some(wait),
                    };
                }
                Some(11) => acked = true,
                _ => {}
            }
        }
    }

    fn ready(&mut self, d: &Value) {
        let id = d.get("session_id").and_then(Value::as_str);
        let url = d.get("resume_gateway_url").and_then(Value::as_str);
        self.session = match (id, url) {
            (Some(id), Some(url)) => Some(Session {
                id: id.to_string(),
                resume_url: url.to_string(),
            }),
            _ => None,
        };
        if let Some(user) = d.pointer("/user/id").and_then(Value::as_str) {
            *lock(&self.discord.bot_id) = Some(user.to_string());
        }
    }
}

/// Closes the connection so that its session may be resumed (a close with
/// 1000 or 1001 would end it).
async fn leave(ws: &mut Socket) {
    let _ = ws
        .close(Some(CloseFrame {
            code: CloseCode::from(4000),
            reason: "resuming".into(),
        }))
        .await;
}

/// Reads the Hello and its heartbeat interval.
async fn hello(ws: &mut Socket) -> Result<Duration, End> {
    loop {
        match ws.next().await {
            Some(Ok(Frame::Text(text))) => {
                let payload: Value = serde_json::from_str(text.as_str())
                    .map_err(|e| dropped(format!("the Gateway's Hello could not be read: {e}")))?;
                if payload.get("op").and_then(Value::as_u64) != Some(10) {
                    return Err(dropped(format!(
                        "the Gateway sent {payload} before its Hello"
                    )));
                }
                let ms = payload
                    .pointer("/d/heartbeat_interval")
                    .and_then(Value::as_u64)
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| {
                        dropped(format!(
                            "the Gateway's Hello has no heartbeat_interval: {payload}"
                        ))
                    })?;
                return Ok(Duration::from_millis(ms));
            }
            Some(Ok(Frame::Close(Some(c)))) => {
                return Err(close_reason(u16::from(c.code), c.reason.as_str()));
            }
            Some(Ok(Frame::Close(None))) | None => {
                return Err(dropped("the Gateway closed before its Hello"));
            }
            Some(Err(e)) => return Err(dropped(format!("the Gateway connection failed: {e}"))),
            Some(Ok(_)) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_intents_are_guild_and_direct_messages_with_their_content() {
        assert_eq!(INTENTS, 512 + 4096 + 32768);
    }

    /// Discord's Gateway is `wss://`: the TLS side (rustls with the
    /// system's roots) is set up, and a failed handshake is an error to
    /// reconnect after, not a panic.
    #[tokio::test]
    async fn a_wss_url_goes_through_rustls() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                drop(socket);
            }
        });
        let url = format!("wss://127.0.0.1:{port}/?v=10&encoding=json");
        let result = tokio_tungstenite::connect_async(url.as_str()).await;
        assert!(result.is_err());
    }

    #[test]
    fn close_codes_that_no_retry_mends_wait_long() {
        let End::Dropped {
            resume,
            wait,
            reason,
        } = close_reason(4004, "Authentication failed.")
        else {
            panic!("a drop")
        };
        assert!(!resume);
        assert_eq!(wait, Some(FATAL_WAIT));
        assert!(
            reason.contains("4004") && reason.contains("discord.token"),
            "{reason}"
        );
        let End::Dropped { resume, wait, .. } = close_reason(4000, "") else {
            panic!("a drop")
        };
        assert!(resume && wait.is_none());
        let End::Dropped { resume, wait, .. } = close_reason(4009, "") else {
            panic!("a drop")
        };
        assert!(!resume && wait.is_none());
    }
}
