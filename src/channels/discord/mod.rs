//! Discord, as a bot: updates come over the Gateway (`gateway.rs`: a
//! WebSocket with heartbeats, identify and resume), answers go through the
//! REST API (`{api_url}/...` with `Authorization: Bot TOKEN`), and with a
//! `public_key` the approval buttons may also come as signed HTTP
//! interactions (`interactions.rs`). Which message is a conversation, and
//! where it is answered, is `events.rs`.
//!
//! Discord's documentation, which this follows:
//! - <https://discord.com/developers/docs/resources/message#create-message>
//!   (`content` up to 2000 characters; `nonce` up to 25 characters with
//!   `enforce_nonce`; `allowed_mentions`; `message_reference`)
//! - <https://discord.com/developers/docs/resources/channel#start-thread-from-message>,
//!   <https://discord.com/developers/docs/resources/channel#trigger-typing-indicator>
//! - <https://discord.com/developers/docs/components/reference> (action
//!   row type 1, button type 2, styles 3 Success and 4 Danger, `custom_id`)
//! - <https://discord.com/developers/docs/topics/rate-limits> (429 with
//!   `retry_after` in seconds in the body and a `Retry-After` header)
//! - <https://discord.com/developers/docs/reference#user-agent>

mod events;
mod gateway;
mod interactions;

use crate::channels::WebhookInbox;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::{
    ChannelError, ChannelState, Connector, Conversation, Inbox, Outgoing, WebhookAnswer,
    WebhookRequest,
};
use crate::config::channels::discord::DiscordConfig;

/// Discord's limit on a message's `content`, in characters.
const MAX_MESSAGE: usize = 2000;
/// How long one REST call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The most channels whose kind is remembered; past it the cache starts over.
const KNOWN_CHANNELS: usize = 10_000;

pub struct Discord {
    config: DiscordConfig,
    state: Arc<ChannelState>,
    http: reqwest::Client,
    /// The bot's own user id, from READY.
    bot_id: Mutex<Option<String>>,
    /// What each guild channel seen is (a thread of this bot's or not), so
    /// a message in a channel costs one `GET /channels/{id}` at most.
    channels: Mutex<HashMap<String, events::ChannelKind>>,
    /// The inbox `run` was given, for HTTP interactions.
    inbox: WebhookInbox,
    /// The key HTTP interactions are signed with (from `public_key`), or
    /// why it cannot be used.
    verifier: Option<Result<ed25519_dalek::VerifyingKey, String>>,
}

/// A REST call that failed: the error for the caller, with Discord's
/// status and JSON error code for the connector's own decisions.
#[derive(Debug)]
struct ApiFailure {
    status: Option<u16>,
    error: ChannelError,
}

impl From<ApiFailure> for ChannelError {
    fn from(f: ApiFailure) -> Self {
        f.error
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data: keep it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Discord {
    pub fn new(config: DiscordConfig, state: Arc<ChannelState>, http: reqwest::Client) -> Self {
        let verifier = config.public_key.map(|key| {
            ed25519_dalek::VerifyingKey::from_bytes(&key).map_err(|e| {
                format!("`discord.public_key` is not a valid Ed25519 public key ({e}); copy the application's Public Key from the Developer Portal")
            })
        });
        Discord {
            config,
            state,
            http,
            bot_id: Mutex::new(None),
            channels: Mutex::new(HashMap::new()),
            inbox: WebhookInbox::default(),
            verifier,
        }
    }

    fn bot_id(&self) -> Option<String> {
        lock(&self.bot_id).clone()
    }

    /// Calls the REST API: `method` on `path` (after `api_url`) with
    /// `body`; the JSON answer (`null` for 204).
    async fn api(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ApiFailure> {
        let what = format!("{method} {path}");
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.config.api_url))
            .header("Authorization", format!("Bot {}", self.config.token))
            .header(
                "User-Agent",
                concat!(
                    "DiscordBot (https://github.com/aurad/aurad, ",
                    env!("CARGO_PKG_VERSION"),
                    ")"
                ),
            )
            .timeout(CALL_TIMEOUT);
        if let Some(body) = body {
            request = request.json(body);
        }
        let answer = request.send().await.map_err(|e| ApiFailure {
            status: None,
            error: ChannelError::retryable(format!("{what}: {}", e.without_url())),
        })?;
        let status = answer.status();
        let header_wait = answer
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok());
        let bytes = answer.bytes().await.map_err(|e| ApiFailure {
            status: Some(status.as_u16()),
            error: ChannelError::retryable(format!("{what}: HTTP {status}, {}", e.without_url())),
        })?;
        let json: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        if status.is_success() {
            return Ok(json);
        }
        let message = format!(
            "{what}: Discord answered {}: {}{}",
            status.as_u16(),
            json.get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message"),
            json.get("code")
                .and_then(Value::as_i64)
                .map(|c| format!(" (code {c})"))
                .unwrap_or_default()
        );
        let error = if status.as_u16() == 429 {
            // The body's `retry_after` is in seconds with a fraction; the
            // header rounds it.
            let wait = json
                .get("retry_after")
                .and_then(Value::as_f64)
                .or(header_wait)
                .filter(|w| w.is_finite() && *w >= 0.0)
                .map(Duration::from_secs_f64);
            ChannelError::Retryable {
                message,
                retry_after: wait,
            }
        } else if status.is_server_error() {
            ChannelError::retryable(message)
        } else {
            ChannelError::Permanent(message)
        };
        Err(ApiFailure {
            status: Some(status.as_u16()),
            error,
        })
    }

    /// Posts a message to `to` (its thread started first, if it is still
    /// to be). `nonce_of`, if given, names this message for good: its retries carry
    /// the same nonce, and with `enforce_nonce` Discord returns the
    /// message already created by it instead of making a second one
    /// ("If true and nonce is present, it will be checked for uniqueness
    /// in the past few minutes. If another message was created by the same
    /// author with the same nonce, that message will be returned and no new
    /// message will be created.": Create Message's JSON params).
    async fn post_message(
        &self,
        to: &Conversation,
        nonce_of: Option<&str>,
        mut body: Value,
    ) -> Result<(), ChannelError> {
        let target = self.target(to).await?;
        if let Some(key) = nonce_of {
            body["nonce"] = json!(nonce(key));
            body["enforce_nonce"] = json!(true);
        }
        // An agent's answer pings nobody (no @everyone, no roles, no users).
        body["allowed_mentions"] = json!({"parse": []});
        if let Some(reply_to) = &target.reply_to {
            body["message_reference"] =
                json!({"message_id": reply_to, "fail_if_not_exists": false});
        }
        self.api(
            Method::POST,
            &format!("/channels/{}/messages", target.channel),
            Some(&body),
        )
        .await
        .map(drop)
        .map_err(Into::into)
    }
}

/// The nonce of a message named `key`: Discord takes up to 25 characters,
/// so a digest of the key (its first 100 bits in hex), the same for every
/// try of one piece and different between pieces.
fn nonce(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    hex::encode(digest)[..25].to_string()
}

/// `text` cut to at most `max` characters, marked as cut.
fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The message asking to approve a call: the call in a code block and two
/// buttons whose `custom_id`s carry the prompt's token.
fn approval_body(p: &super::ApprovalPrompt) -> Value {
    // A ``` inside the arguments would end the code block early.
    let arguments = p.arguments.replace("```", "`\u{200b}``");
    let head = format!(
        "**Approve this call?**\n`{}`\n```json\n",
        p.tool.replace('`', "'")
    );
    let tail = "\n```";
    let room = MAX_MESSAGE - head.chars().count() - tail.chars().count();
    let content = format!("{head}{}{tail}", clip(&arguments, room));
    json!({
        "content": content,
        "components": [{
            "type": 1,
            "components": [
                {"type": 2, "style": 3, "label": "Approve", "custom_id": format!("y:{}", p.token)},
                {"type": 2, "style": 4, "label": "Deny", "custom_id": format!("n:{}", p.token)},
            ],
        }],
    })
}

impl Connector for Discord {
    fn run(self: Arc<Self>, inbox: Inbox, shutdown: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            self.inbox.open(inbox.clone());
            gateway::run(self.clone(), inbox, shutdown).await;
            self.inbox.close();
            self.state.stopped();
        })
    }

    fn send<'a>(
        &'a self,
        to: &'a Conversation,
        message: &'a Outgoing,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            match message {
                Outgoing::Text { markdown, key } => {
                    // Discord's messages are Markdown: the text goes as it is.
                    self.post_message(to, Some(key), json!({"content": markdown}))
                        .await
                }
                Outgoing::Approval(p) => {
                    self.post_message(to, Some(&format!("approval:{}", p.token)), approval_body(p))
                        .await
                }
                Outgoing::Decided { ack, text } => {
                    let Some(ack) = ack else {
                        // Nothing names this notice for good (two decisions
                        // may read the same), so it goes without a nonce.
                        return self.post_message(to, None, json!({"content": text})).await;
                    };
                    // The press itself was acknowledged when it came (a
                    // deferred update, type 6, within Discord's 3 seconds:
                    // `events.rs`). The prompt is the bot's own message, so
                    // the bot edits it (`PATCH /channels/{id}/messages/{id}`)
                    // rather than through the interaction's token, which
                    // expires after 15 minutes: the buttons go and the
                    // decision shows under the call.
                    let (Some(channel), Some(message_id)) = (
                        ack.get("channel_id").and_then(Value::as_str),
                        ack.get("message_id").and_then(Value::as_str),
                    ) else {
                        return Err(ChannelError::Permanent(format!(
                            "the decision's ack {ack} names no channel_id and message_id"
                        )));
                    };
                    let before = ack.get("content").and_then(Value::as_str).unwrap_or("");
                    let after = format!("\n\n{text}");
                    let room = MAX_MESSAGE.saturating_sub(after.chars().count());
                    let content = format!("{}{after}", clip(before, room));
                    self.api(
                        Method::PATCH,
                        &format!("/channels/{channel}/messages/{message_id}"),
                        Some(&json!({"content": content, "components": []})),
                    )
                    .await
                    .map(drop)
                    .map_err(Into::into)
                }
            }
        })
    }

    fn typing<'a>(&'a self, to: &'a Conversation) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            let target = self.target(to).await?;
            self.api(
                Method::POST,
                &format!("/channels/{}/typing", target.channel),
                None,
            )
            .await
            .map(drop)
            .map_err(Into::into)
        })
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE
    }

    fn webhook(&self, request: WebhookRequest) -> BoxFuture<'_, WebhookAnswer> {
        Box::pin(self.interaction_webhook(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_25_characters_and_stable_per_key() {
        let a = nonce("run-1.0");
        assert_eq!(a.len(), 25);
        assert_eq!(a, nonce("run-1.0"));
        assert_ne!(a, nonce("run-1.1"));
    }

    #[test]
    fn an_approval_has_two_buttons_and_fits() {
        let p = super::super::ApprovalPrompt {
            run_id: "r".into(),
            tool: "shell".into(),
            arguments: format!("{{\"cmd\": \"```{}\"}}", "x".repeat(5000)),
            token: "tok".into(),
            approve_word: "approve".into(),
            deny_word: "deny".into(),
        };
        let body = approval_body(&p);
        let content = body["content"].as_str().unwrap();
        assert!(content.chars().count() <= MAX_MESSAGE);
        assert_eq!(content.matches("```").count(), 2, "{content}");
        let row = &body["components"][0];
        assert_eq!(row["type"], 1);
        assert_eq!(row["components"][0]["style"], 3);
        assert_eq!(row["components"][0]["custom_id"], "y:tok");
        assert_eq!(row["components"][1]["style"], 4);
        assert_eq!(row["components"][1]["custom_id"], "n:tok");
    }
}
