//! Slack, as a bot user of a Slack app. Updates come by Socket Mode (a
//! WebSocket the connector opens: `socket.rs`) or, in `mode: events`, as
//! the Events API's and interactivity's signed `POST`s to the channel's
//! webhook (`webhook.rs`); both carry the same JSON, read in `events.rs`.
//! Answers go out through the Web API (`{api_url}/METHOD`, the bot token
//! as `Authorization: Bearer`, JSON bodies): `chat.postMessage` into the
//! message's thread, in mrkdwn; an approval prompt is a Block Kit message
//! with Approve and Deny buttons, and the press is answered by
//! `chat.update`, which replaces the buttons with the decision.
//!
//! One thread is one conversation (`CHANNEL/THREAD_TS`): a mention in a
//! channel, or a direct message, starts one; replies in it continue it.
//!
//! Errors: the Web API answers HTTP 200 with `{"ok": false, "error"}`; a
//! rate limit is HTTP 429 with `Retry-After` in seconds
//! (<https://docs.slack.dev/apis/web-api/rate-limits>).

mod events;
mod socket;
mod webhook;

use crate::channels::WebhookInbox;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::format::slack_mrkdwn;
use super::{
    ApprovalPrompt, ChannelError, ChannelState, Connector, Conversation, Inbox, Outgoing,
    WebhookAnswer, WebhookRequest,
};
use crate::config::channels::slack::{SlackConfig, SlackMode};

/// Slack's recommendation for a message's `text`: "For best results, limit
/// the number of characters in the text field to 4,000 characters"; longer
/// text may be split by Slack itself, and past 40,000 it is truncated
/// (<https://docs.slack.dev/reference/methods/chat.postMessage>, "Truncating
/// content"; <https://docs.slack.dev/changelog/2018-truncating-really-long-messages>).
const MAX_MESSAGE: usize = 4000;
/// A `section` block's text holds at most 3,000 characters
/// (<https://docs.slack.dev/reference/block-kit/blocks/section-block>):
/// the arguments shown in a prompt are cut to leave room for the rest.
const MAX_PROMPT_ARGUMENTS: usize = 2500;

pub struct Slack {
    config: SlackConfig,
    state: Arc<ChannelState>,
    http: reqwest::Client,
    /// The inbox `run` was given, for webhook requests.
    inbox: WebhookInbox,
    /// The bot's own user id (`auth.test`, or the bot entry of an event's
    /// `authorizations`): its messages are skipped, its mention stripped.
    bot_user: Mutex<Option<String>>,
}

impl Slack {
    pub fn new(config: SlackConfig, state: Arc<ChannelState>, http: reqwest::Client) -> Self {
        Slack {
            config,
            state,
            http,
            inbox: WebhookInbox::default(),
            bot_user: Mutex::new(None),
        }
    }

    fn bot_user(&self) -> Option<String> {
        self.bot_user
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Takes the bot's user id from an `event_callback` when it is not
    /// known yet.
    fn learn_bot_user(&self, callback: &Value) {
        let mut known = self.bot_user.lock().unwrap_or_else(|e| e.into_inner());
        if known.is_none() {
            *known = events::bot_user_from_callback(callback);
        }
    }

    /// Asks Slack who the bot is (`auth.test`), once: this also checks the
    /// bot token before anything else is done with it.
    async fn identify(&self) -> Result<(), ChannelError> {
        if self.bot_user().is_some() {
            return Ok(());
        }
        let me = self
            .call("auth.test", &self.config.bot_token, &json!({}))
            .await
            .map_err(|e| match e {
                ChannelError::Permanent(m) => ChannelError::Permanent(format!(
                    "{m} (check `slack.bot_token`: the Bot User OAuth Token of the app's installation)"
                )),
                e => e,
            })?;
        if let Some(user) = me.get("user_id").and_then(Value::as_str) {
            *self.bot_user.lock().unwrap_or_else(|e| e.into_inner()) = Some(user.to_string());
        }
        Ok(())
    }

    /// Calls Web API method `method` with `token` and the JSON `body`; the
    /// whole answer when it is `ok`.
    async fn call(&self, method: &str, token: &str, body: &Value) -> Result<Value, ChannelError> {
        let url = format!("{}/{method}", self.config.api_url);
        let answer = self
            .http
            .post(&url)
            .bearer_auth(token)
            .json(body)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .map_err(|e| ChannelError::retryable(format!("{method}: {}", e.without_url())))?;
        let status = answer.status();
        if status.as_u16() == 429 {
            let retry_after = answer
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            return Err(ChannelError::Retryable {
                message: format!("{method}: Slack is rate limiting this app (HTTP 429)"),
                retry_after,
            });
        }
        if status.is_server_error() {
            return Err(ChannelError::retryable(format!(
                "{method}: Slack answered HTTP {status}"
            )));
        }
        let answer: Value = answer.json().await.map_err(|e| {
            let message = format!("{method}: HTTP {status}, not JSON: {}", e.without_url());
            if status.is_success() {
                ChannelError::retryable(message)
            } else {
                ChannelError::Permanent(message)
            }
        })?;
        if answer.get("ok").and_then(Value::as_bool) == Some(true) {
            return Ok(answer);
        }
        let error = answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no error given");
        let message = format!("{method}: Slack answered {error}");
        Err(match error {
            // Slack's own trouble, worth another try.
            "ratelimited"
            | "internal_error"
            | "fatal_error"
            | "service_unavailable"
            | "request_timeout" => ChannelError::retryable(message),
            // invalid_auth, not_authed, token_revoked, account_inactive,
            // missing_scope, channel_not_found, not_in_channel, ... will
            // fail again.
            _ => ChannelError::Permanent(message),
        })
    }

    async fn post(&self, to: &Conversation, mut body: Value) -> Result<(), ChannelError> {
        let channel = to.reply.get("channel").cloned().unwrap_or(Value::Null);
        if channel.is_null() {
            return Err(ChannelError::Permanent(format!(
                "the conversation {:?} names no Slack channel to answer in",
                to.key
            )));
        }
        body["channel"] = channel;
        if let Some(thread) = to.reply.get("thread_ts").filter(|v| !v.is_null()) {
            body["thread_ts"] = thread.clone();
        }
        body["unfurl_links"] = json!(false);
        self.call("chat.postMessage", &self.config.bot_token, &body)
            .await
            .map(drop)
    }
}

/// The Block Kit message of an approval prompt: what is asked (a mrkdwn
/// section), the two buttons, and a plain `text` for notifications and
/// screen readers. Docs: <https://docs.slack.dev/reference/block-kit/blocks/actions-block>,
/// <https://docs.slack.dev/reference/block-kit/block-elements/button-element>.
fn approval_message(p: &ApprovalPrompt) -> Value {
    // A ``` block shows the arguments as they are; only Slack's three
    // control characters need escaping there.
    let escaped = slack_mrkdwn_escape(&p.arguments);
    let mut arguments: String = escaped.chars().take(MAX_PROMPT_ARGUMENTS).collect();
    if arguments.len() < escaped.len() {
        arguments.push_str("\n…");
    }
    let tool: String = slack_mrkdwn_escape(&p.tool).chars().take(200).collect();
    let section = format!("Approve this call?\n*{tool}*\n```\n{arguments}\n```");
    json!({
        "text": format!("Approve this call of {}? (Approve or Deny)", p.tool),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": section}},
            {"type": "actions", "block_id": "aurad_approval", "elements": [
                {"type": "button", "action_id": "aurad_approve", "style": "primary",
                 "text": {"type": "plain_text", "text": "Approve"},
                 "value": format!("y:{}", p.token)},
                {"type": "button", "action_id": "aurad_deny", "style": "danger",
                 "text": {"type": "plain_text", "text": "Deny"},
                 "value": format!("n:{}", p.token)},
            ]},
        ],
    })
}

/// `text` with `&`, `<` and `>` escaped, as mrkdwn needs
/// (<https://docs.slack.dev/messaging/formatting-message-text>).
fn slack_mrkdwn_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

impl Connector for Slack {
    fn run(self: Arc<Self>, inbox: Inbox, shutdown: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            match &self.config.mode {
                SlackMode::Socket { app_token } => {
                    let app_token = app_token.clone();
                    self.socket_mode(&app_token, &inbox, &shutdown).await;
                }
                SlackMode::Events { .. } => {
                    self.inbox.open(inbox);
                    // Events name the bot in `authorizations` too, so a
                    // failure here only loses the early token check.
                    if let Err(e) = self.identify().await {
                        self.state.error(e.to_string());
                    }
                    self.state.connected();
                    shutdown.cancelled().await;
                    self.inbox.close();
                }
            }
            self.state.stopped();
        })
    }

    fn send<'a>(
        &'a self,
        to: &'a Conversation,
        message: &'a Outgoing,
    ) -> BoxFuture<'a, Result<(), ChannelError>> {
        // chat.postMessage takes no idempotency key: a retry after a lost
        // answer can show a piece twice.
        Box::pin(async move {
            match message {
                Outgoing::Text { markdown, .. } => {
                    self.post(to, json!({"text": slack_mrkdwn(markdown)})).await
                }
                Outgoing::Approval(p) => self.post(to, approval_message(p)).await,
                Outgoing::Decided { ack, text } => {
                    let target = ack
                        .as_ref()
                        .and_then(|a| Some((a.get("channel")?.as_str()?, a.get("ts")?.as_str()?)));
                    let Some((channel, ts)) = target else {
                        return self.post(to, json!({"text": slack_mrkdwn(text)})).await;
                    };
                    let prompt = ack
                        .as_ref()
                        .and_then(|a| a.get("prompt"))
                        .and_then(Value::as_str)
                        .filter(|p| !p.is_empty());
                    let decision = slack_mrkdwn(text);
                    let mut blocks = Vec::new();
                    if let Some(prompt) = prompt {
                        blocks.push(
                            json!({"type": "section", "text": {"type": "mrkdwn", "text": prompt}}),
                        );
                    }
                    blocks.push(
                        json!({"type": "context", "elements": [{"type": "mrkdwn", "text": decision}]}),
                    );
                    // The buttons go, so nobody presses them again.
                    self.call(
                        "chat.update",
                        &self.config.bot_token,
                        &json!({"channel": channel, "ts": ts, "text": decision, "blocks": blocks}),
                    )
                    .await
                    .map(drop)
                }
            }
        })
    }

    fn typing<'a>(&'a self, to: &'a Conversation) -> BoxFuture<'a, Result<(), ChannelError>> {
        // The Web API has no typing indicator for a bot in a channel or a
        // DM. `assistant.threads.setStatus` ("is thinking...") exists, but
        // only for AI assistant threads: the app must enable Slack's Agents
        // & AI Apps feature and the thread must be an assistant thread
        // (<https://docs.slack.dev/reference/methods/assistant.threads.setStatus>);
        // in the channel threads and DMs this connector answers it is
        // refused, so it is not called. Nothing to do.
        let _ = to;
        Box::pin(async { Ok(()) })
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE
    }

    fn webhook(&self, request: WebhookRequest) -> BoxFuture<'_, WebhookAnswer> {
        Box::pin(async move {
            let SlackMode::Events { signing_secret } = &self.config.mode else {
                return WebhookAnswer::json(
                    404,
                    &json!({"error": "this Slack channel uses Socket Mode (mode: socket); it takes no webhook requests (set `mode: events` to use the Events API)"}),
                );
            };
            self.events_request(signing_secret, &request).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_has_two_buttons_carrying_the_token() {
        let m = approval_message(&ApprovalPrompt {
            run_id: "r1".into(),
            tool: "shell".into(),
            arguments: format!("{{\"cmd\":\"a<b\",\"x\":\"{}\"}}", "z".repeat(3000)),
            token: "tok".into(),
            approve_word: "approve".into(),
            deny_word: "deny".into(),
        });
        let section = m["blocks"][0]["text"]["text"].as_str().unwrap();
        assert!(section.contains("*shell*"));
        assert!(section.contains("a&lt;b"));
        assert!(section.chars().count() <= 3000);
        let buttons = &m["blocks"][1]["elements"];
        assert_eq!(buttons[0]["value"], "y:tok");
        assert_eq!(buttons[0]["style"], "primary");
        assert_eq!(buttons[1]["value"], "n:tok");
        assert_eq!(buttons[1]["style"], "danger");
        assert!(m["text"].as_str().unwrap().contains("shell"));
    }
}
