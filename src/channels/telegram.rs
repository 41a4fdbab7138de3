//! Telegram, through the Bot API (`{api_url}/bot{token}/METHOD`, JSON in
//! and out, `{"ok": false, "error_code", "description", "parameters":
//! {"retry_after"}}` on errors). Updates come by long polling
//! (`getUpdates` with an offset, confirmed only once the daemon has taken
//! each update) or, in webhook mode, as Telegram's `POST`s checked by their
//! `X-Telegram-Bot-Api-Secret-Token` header. Answers go out with
//! `sendMessage` in Telegram's HTML (`parse_mode: HTML`), in reply to the
//! message and in its forum topic; approvals as an inline keyboard whose
//! buttons come back as callback queries; the typing indicator is
//! `sendChatAction`.
//!
//! One chat (and forum topic) is one conversation.

use crate::channels::WebhookInbox;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::backoff::Backoff;
use super::{
    ChannelError, ChannelState, Connector, Conversation, Inbox, Incoming, Outgoing, Sender,
    WebhookAnswer, WebhookRequest, What,
};
use crate::config::channels::telegram::{TelegramConfig, TelegramMode};

/// Telegram's limit on a message's text, after entities are parsed.
const MAX_MESSAGE: usize = 4096;
/// How long one `getUpdates` call waits for an update.
const POLL_SECONDS: u64 = 30;

pub struct Telegram {
    config: TelegramConfig,
    state: Arc<ChannelState>,
    http: reqwest::Client,
    /// The inbox `run` was given, for webhook requests.
    inbox: WebhookInbox,
}

#[derive(Debug, Deserialize)]
struct Answer {
    ok: bool,
    #[serde(default)]
    result: Value,
    #[serde(default)]
    error_code: Option<u16>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<ErrorParameters>,
}

#[derive(Debug, Deserialize)]
struct ErrorParameters {
    retry_after: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct Update {
    update_id: i64,
    #[serde(default)]
    message: Option<Message>,
    #[serde(default)]
    callback_query: Option<CallbackQuery>,
}

#[derive(Debug, Deserialize)]
struct Message {
    message_id: i64,
    #[serde(default)]
    message_thread_id: Option<i64>,
    #[serde(default)]
    from: Option<User>,
    chat: Chat,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct User {
    id: i64,
    #[serde(default)]
    username: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Chat {
    id: i64,
}

#[derive(Debug, Deserialize)]
struct CallbackQuery {
    id: String,
    from: User,
    #[serde(default)]
    message: Option<Message>,
    #[serde(default)]
    data: Option<String>,
}

impl Telegram {
    pub fn new(config: TelegramConfig, state: Arc<ChannelState>, http: reqwest::Client) -> Self {
        Telegram {
            config,
            state,
            http,
            inbox: WebhookInbox::default(),
        }
    }

    /// Calls Bot API method `method` with `body`; its `result`.
    async fn call(
        &self,
        method: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, ChannelError> {
        let url = format!("{}/bot{}/{method}", self.config.api_url, self.config.token);
        let answer = self
            .http
            .post(&url)
            .json(body)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| ChannelError::retryable(format!("{method}: {}", e.without_url())))?;
        let status = answer.status();
        let answer: Answer = answer.json().await.map_err(|e| {
            ChannelError::retryable(format!("{method}: HTTP {status}, {}", e.without_url()))
        })?;
        if answer.ok {
            return Ok(answer.result);
        }
        let code = answer.error_code.unwrap_or(status.as_u16());
        let message = format!(
            "{method}: Telegram answered {code}: {}",
            answer.description.as_deref().unwrap_or("no description")
        );
        Err(if code == 429 || code >= 500 {
            ChannelError::Retryable {
                message,
                retry_after: answer
                    .parameters
                    .and_then(|p| p.retry_after)
                    .map(Duration::from_secs),
            }
        } else {
            ChannelError::Permanent(message)
        })
    }

    /// Long polling until `shutdown`: each batch of updates is delivered,
    /// then confirmed by asking for the ones after it.
    async fn poll(&self, inbox: &Inbox, shutdown: &CancellationToken) {
        let mut offset: Option<i64> = None;
        let mut backoff = Backoff::default();
        // A webhook left set by an earlier run of the bot makes getUpdates
        // fail with 409; polling is what this channel asked for.
        let _ = self
            .call("deleteWebhook", &json!({}), Duration::from_secs(10))
            .await;
        // The first poll and the first after a failure answer at once, so
        // the channel shows `connected` as soon as Telegram answers.
        let mut quick = true;
        loop {
            let mut body = json!({
                "timeout": if quick { 0 } else { POLL_SECONDS },
                "allowed_updates": ["message", "callback_query"],
            });
            if let Some(offset) = offset {
                body["offset"] = json!(offset);
            }
            let timeout = Duration::from_secs(POLL_SECONDS + 15);
            let result = tokio::select! {
                r = self.call("getUpdates", &body, timeout) => r,
                () = shutdown.cancelled() => return,
            };
            let updates = match result.and_then(|r| {
                serde_json::from_value::<Vec<Value>>(r)
                    .map_err(|e| ChannelError::Permanent(format!("getUpdates: {e}")))
            }) {
                Ok(updates) => updates,
                Err(e) => {
                    quick = true;
                    self.state.reconnecting(e.to_string());
                    let wait = match e {
                        ChannelError::Retryable {
                            retry_after: Some(wait),
                            ..
                        } => wait,
                        _ => backoff.next_wait(),
                    };
                    tokio::select! {
                        () = tokio::time::sleep(wait) => continue,
                        () = shutdown.cancelled() => return,
                    }
                }
            };
            quick = false;
            if !matches!(self.state.connection(), super::Connection::Connected) {
                self.state.connected();
                backoff.connected();
            }
            for raw in updates {
                let id = raw.get("update_id").and_then(Value::as_i64);
                if let Some(id) = id {
                    offset = Some(offset.map_or(id + 1, |o| o.max(id + 1)));
                }
                if let Some(incoming) = self.incoming(raw)
                    && inbox.deliver(incoming).await.is_err()
                {
                    return;
                }
            }
        }
    }

    /// The update `raw` as the daemon takes it; `None` for what a channel
    /// does not handle (an edit, a sticker, a message without text).
    fn incoming(&self, raw: Value) -> Option<Incoming> {
        let update: Update = match serde_json::from_value(raw) {
            Ok(u) => u,
            Err(e) => {
                self.state
                    .error(format!("an update Telegram sent could not be read: {e}"));
                return None;
            }
        };
        let id = update.update_id.to_string();
        if let Some(m) = update.message {
            let from = m.from.as_ref()?;
            let text = m.text.clone()?;
            return Some(Incoming {
                id,
                sender: Sender {
                    user: from.id.to_string(),
                    chat: Some(m.chat.id.to_string()),
                    name: from.username.clone(),
                },
                conversation: conversation(&m, Some(m.message_id)),
                what: What::Message { text },
            });
        }
        let q = update.callback_query?;
        let data = q.data.as_deref()?;
        let (approve, token) = match data.split_once(':') {
            Some(("y", token)) => (true, token),
            Some(("n", token)) => (false, token),
            _ => return None,
        };
        let message = q.message.as_ref()?;
        Some(Incoming {
            id,
            sender: Sender {
                user: q.from.id.to_string(),
                chat: Some(message.chat.id.to_string()),
                name: q.from.username.clone(),
            },
            conversation: conversation(message, None),
            what: What::Decision {
                token: token.to_string(),
                approve,
                ack: Some(json!({
                    "callback_query_id": q.id,
                    "chat_id": message.chat.id,
                    "message_id": message.message_id,
                })),
            },
        })
    }

    async fn send_text(
        &self,
        to: &Conversation,
        html: String,
        markup: Option<Value>,
    ) -> Result<(), ChannelError> {
        let mut body = json!({
            "chat_id": to.reply["chat_id"],
            "text": html,
            "parse_mode": "HTML",
            "link_preview_options": {"is_disabled": true},
        });
        if let Some(thread) = to.reply.get("message_thread_id").filter(|v| !v.is_null()) {
            body["message_thread_id"] = thread.clone();
        }
        if let Some(reply) = to.reply.get("reply_to").filter(|v| !v.is_null()) {
            body["reply_parameters"] =
                json!({"message_id": reply, "allow_sending_without_reply": true});
        }
        if let Some(markup) = markup {
            body["reply_markup"] = markup;
        }
        self.call("sendMessage", &body, Duration::from_secs(30))
            .await
            .map(drop)
    }
}

/// The conversation of message `m`: its chat and forum topic, answered in
/// reply to `reply_to`.
fn conversation(m: &Message, reply_to: Option<i64>) -> Conversation {
    let key = match m.message_thread_id {
        Some(thread) => format!("{}/{thread}", m.chat.id),
        None => m.chat.id.to_string(),
    };
    Conversation {
        key,
        reply: json!({
            "chat_id": m.chat.id,
            "message_thread_id": m.message_thread_id,
            "reply_to": reply_to,
        }),
    }
}

impl Connector for Telegram {
    fn run(self: Arc<Self>, inbox: Inbox, shutdown: CancellationToken) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            match &self.config.mode {
                TelegramMode::Polling => self.poll(&inbox, &shutdown).await,
                TelegramMode::Webhook { .. } => {
                    self.inbox.open(inbox);
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
        Box::pin(async move {
            match message {
                Outgoing::Text { markdown, .. } => {
                    self.send_text(to, super::format::telegram_html(markdown), None)
                        .await
                }
                Outgoing::Approval(p) => {
                    let text = format!(
                        "Approve this call?\n\n<b>{}</b>\n<pre>{}</pre>",
                        super::format::html_escape(&p.tool),
                        super::format::html_escape(&p.arguments)
                    );
                    let markup = json!({"inline_keyboard": [[
                        {"text": "Approve", "callback_data": format!("y:{}", p.token)},
                        {"text": "Deny", "callback_data": format!("n:{}", p.token)},
                    ]]});
                    self.send_text(to, text, Some(markup)).await
                }
                Outgoing::Decided { ack, text } => {
                    let Some(ack) = ack else {
                        return self
                            .send_text(to, super::format::telegram_html(text), None)
                            .await;
                    };
                    // The press is answered (the button stops spinning) and
                    // the buttons go, so nobody presses them again.
                    self.call(
                        "answerCallbackQuery",
                        &json!({"callback_query_id": ack["callback_query_id"], "text": text}),
                        Duration::from_secs(10),
                    )
                    .await?;
                    self.call(
                        "editMessageReplyMarkup",
                        &json!({
                            "chat_id": ack["chat_id"],
                            "message_id": ack["message_id"],
                            "reply_markup": {"inline_keyboard": []},
                        }),
                        Duration::from_secs(10),
                    )
                    .await
                    .map(drop)
                }
            }
        })
    }

    fn typing<'a>(&'a self, to: &'a Conversation) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            let mut body = json!({"chat_id": to.reply["chat_id"], "action": "typing"});
            if let Some(thread) = to.reply.get("message_thread_id").filter(|v| !v.is_null()) {
                body["message_thread_id"] = thread.clone();
            }
            self.call("sendChatAction", &body, Duration::from_secs(10))
                .await
                .map(drop)
        })
    }

    fn max_message_len(&self) -> usize {
        MAX_MESSAGE
    }

    fn webhook(&self, request: WebhookRequest) -> BoxFuture<'_, WebhookAnswer> {
        Box::pin(async move {
            let TelegramMode::Webhook { secret } = &self.config.mode else {
                return WebhookAnswer::json(
                    404,
                    &json!({"error": "this Telegram channel polls for updates (mode: polling); it takes no webhook requests"}),
                );
            };
            let given = request
                .header("x-telegram-bot-api-secret-token")
                .unwrap_or("");
            if !bool::from(subtle::ConstantTimeEq::ct_eq(
                given.as_bytes(),
                secret.as_bytes(),
            )) {
                return WebhookAnswer::json(
                    401,
                    &json!({"error": "the X-Telegram-Bot-Api-Secret-Token header does not match the channel's webhook_secret"}),
                );
            }
            let raw: Value = match serde_json::from_slice(&request.body) {
                Ok(v) => v,
                Err(e) => {
                    return WebhookAnswer::json(
                        400,
                        &json!({"error": format!("the body is not a Telegram update: {e}")}),
                    );
                }
            };
            // Telegram retries a delivery answered 503.
            if let Some(incoming) = self.incoming(raw)
                && let Err(refused) = self.inbox.deliver(incoming).await
            {
                return refused;
            }
            WebhookAnswer::json(200, &json!({"ok": true}))
        })
    }
}
