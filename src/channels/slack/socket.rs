//! Socket Mode: `apps.connections.open` with the app-level token gives a
//! WebSocket URL for one connection; Slack greets it with `hello`, then
//! sends envelopes (`{envelope_id, type, payload}`: `events_api` holding an
//! `event_callback`, `interactive` holding a button press) and, when it
//! wants the connection replaced, `disconnect` (`refresh_requested`,
//! `warning`, `link_disabled`). Each envelope is acknowledged by sending
//! back `{"envelope_id": ...}`, here only once the daemon has taken its
//! update: Slack sends an envelope that was not acknowledged again, so a
//! crash before the claim loses nothing. Docs:
//! <https://docs.slack.dev/apis/events-api/using-socket-mode>,
//! <https://docs.slack.dev/reference/methods/apps.connections.open>.

use std::time::{Duration, Instant};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use super::super::backoff::Backoff;
use super::super::{ChannelError, Inbox};
use super::{Slack, events};

/// How often the connector pings Slack to find a connection that died
/// without a word (a NAT that forgot it).
const PING_EVERY: Duration = Duration::from_secs(30);
/// No frame for this long (Slack answers pings, and pings itself): the
/// connection is taken for dead.
const SILENCE: Duration = Duration::from_secs(90);
/// How long opening the WebSocket may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// How one connection ended.
enum End {
    /// The daemon takes no more updates.
    Stop,
    /// Slack asked for a new connection: open one at once.
    Refresh(String),
    /// Lost or refused: wait (`Some`: as long as Slack said), then again.
    Dropped(String, Option<Duration>),
}

fn dropped(e: ChannelError) -> End {
    match e {
        ChannelError::Retryable {
            message,
            retry_after,
        } => End::Dropped(message, retry_after),
        ChannelError::Permanent(message) => End::Dropped(message, None),
    }
}

impl Slack {
    /// Socket Mode until `shutdown`: one connection after another.
    pub(super) async fn socket_mode(
        &self,
        app_token: &str,
        inbox: &Inbox,
        shutdown: &CancellationToken,
    ) {
        let mut backoff = Backoff::default();
        loop {
            let end = tokio::select! {
                end = self.connection(app_token, inbox, &mut backoff) => end,
                () = shutdown.cancelled() => return,
            };
            match end {
                End::Stop => return,
                End::Refresh(reason) => self.state.reconnecting(reason),
                End::Dropped(reason, wait) => {
                    self.state.reconnecting(reason);
                    let wait = wait.unwrap_or_else(|| backoff.next_wait());
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = shutdown.cancelled() => return,
                    }
                }
            }
        }
    }

    /// One Socket Mode connection, from `apps.connections.open` to its end.
    async fn connection(&self, app_token: &str, inbox: &Inbox, backoff: &mut Backoff) -> End {
        if let Err(e) = self.identify().await {
            return dropped(e);
        }
        let open = match self
            .call("apps.connections.open", app_token, &json!({}))
            .await
        {
            Ok(open) => open,
            Err(ChannelError::Permanent(m)) => {
                return End::Dropped(
                    format!(
                        "{m} (check `slack.app_token`: an app-level token with connections:write, and Socket Mode turned on in the app's settings)"
                    ),
                    None,
                );
            }
            Err(e) => return dropped(e),
        };
        let Some(url) = open.get("url").and_then(Value::as_str) else {
            return End::Dropped("apps.connections.open answered no url".into(), None);
        };
        let mut ws = match tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_tungstenite::connect_async(url),
        )
        .await
        {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => {
                return End::Dropped(format!("the Socket Mode WebSocket: {e}"), None);
            }
            Err(_) => {
                return End::Dropped(
                    format!(
                        "the Socket Mode WebSocket did not open within {} s",
                        CONNECT_TIMEOUT.as_secs()
                    ),
                    None,
                );
            }
        };
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
        let mut heard = Instant::now();
        loop {
            let frame = tokio::select! {
                frame = ws.next() => frame,
                _ = ping.tick() => {
                    if heard.elapsed() >= SILENCE {
                        return End::Dropped(
                            format!("no frame from Slack for {} s: the connection is taken for dead", SILENCE.as_secs()),
                            None,
                        );
                    }
                    if let Err(e) = ws.send(Message::Ping(Default::default())).await {
                        return End::Dropped(format!("the Socket Mode connection failed: {e}"), None);
                    }
                    continue;
                }
            };
            heard = Instant::now();
            let text = match frame {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(frame))) => {
                    let why = frame
                        .map(|f| format!(" ({} {})", u16::from(f.code), f.reason.as_str()))
                        .unwrap_or_default();
                    return End::Dropped(
                        format!("Slack closed the Socket Mode connection{why}"),
                        None,
                    );
                }
                // Pings are answered by the WebSocket library.
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    return End::Dropped(format!("the Socket Mode connection failed: {e}"), None);
                }
                None => return End::Dropped("the Socket Mode connection ended".into(), None),
            };
            let message: Value = match serde_json::from_str(text.as_str()) {
                Ok(m) => m,
                Err(e) => {
                    self.state.error(format!(
                        "Slack sent a Socket Mode frame that is not JSON: {e}"
                    ));
                    continue;
                }
            };
            match message.get("type").and_then(Value::as_str) {
                Some("hello") => {
                    self.state.connected();
                    backoff.connected();
                    continue;
                }
                Some("disconnect") => {
                    let reason = message
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("no reason given");
                    if reason == "link_disabled" {
                        return End::Dropped(
                            "Slack closed the connection: Socket Mode was turned off in the app's settings (link_disabled)".into(),
                            None,
                        );
                    }
                    return End::Refresh(format!("Slack asked for a new connection ({reason})"));
                }
                _ => {}
            }
            let Some(envelope_id) = message.get("envelope_id").and_then(Value::as_str) else {
                continue;
            };
            let payload = message.get("payload").unwrap_or(&Value::Null);
            let incoming = match message.get("type").and_then(Value::as_str) {
                Some("events_api") => {
                    self.learn_bot_user(payload);
                    events::from_callback(payload, self.bot_user().as_deref())
                }
                Some("interactive") => events::from_interaction(payload),
                _ => None,
            };
            if let Some(incoming) = incoming
                && inbox.deliver(incoming).await.is_err()
            {
                // Not acknowledged: Slack sends it again to the next run.
                return End::Stop;
            }
            // Frames wait unread while the daemon takes an update: that
            // time is not Slack's silence.
            heard = Instant::now();
            let ack = json!({"envelope_id": envelope_id}).to_string();
            if let Err(e) = ws.send(Message::Text(ack.into())).await {
                return End::Dropped(
                    format!("the Socket Mode connection failed while acknowledging: {e}"),
                    None,
                );
            }
        }
    }
}
