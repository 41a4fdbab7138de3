//! Channels: chat platforms and email as a way to reach an agent. This
//! module holds the platforms' connectors (one folder each) and what they
//! share: the [`Connector`] trait the daemon drives them through, the
//! messages that cross it ([`Incoming`], [`Outgoing`]), splitting an answer
//! to a platform's size (`split.rs`), Markdown turned into a platform's
//! formatting (`format.rs`) and each channel's live state (`state.rs`).
//!
//! A connector only speaks its platform's protocol: it receives updates
//! (reconnecting with backoff), hands them on as [`Incoming`], and sends
//! what it is given. Everything else (who may talk, claiming an update once,
//! sessions, turns, approvals, replies after a restart) is the daemon's
//! (`daemon/channels/`), the same for every platform.
//!
//! Depends on `config` (the channel files) and `types`; never on the store
//! or the daemon.

pub mod backoff;
pub mod discord;
pub mod email;
pub mod format;
pub mod slack;
pub mod split;
pub mod state;
pub mod telegram;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::config::channels::{ChannelConfig, PlatformConfig};
pub use state::{ChannelState, ChannelStatus, Connection};

/// Where a conversation lives on its platform: `key` names it for good (one
/// session per key), `reply` is what the connector needs to answer there
/// (a chat id and thread, the last message's id for an email reply). The
/// daemon stores the latest `reply` of each session, so an answer that
/// comes after a restart still finds its way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    pub key: String,
    pub reply: serde_json::Value,
}

/// Who sent an update: the platform's id of the user (an email address for
/// email) and, where the platform gives one, the chat or channel it came
/// from; both are checked against the channel's allow-list.
#[derive(Debug, Clone, PartialEq)]
pub struct Sender {
    pub user: String,
    pub chat: Option<String>,
    /// A display name, for logs only.
    pub name: Option<String>,
}

/// One update from the platform.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// The platform's id of this update, unique within the channel (a
    /// Telegram `update_id`, a Slack `event_id`, a Discord message id, an
    /// email's Message-ID): claimed in the store before it is handled, so
    /// it is handled once across restarts and nodes.
    pub id: String,
    pub sender: Sender,
    pub conversation: Conversation,
    pub what: What,
}

/// Where a connector hands its updates. [`deliver`](Inbox::deliver)
/// returns once the daemon has taken the update (claimed it in the store,
/// or refused it): only then may the connector tell its platform the update
/// was received (advance Telegram's offset, acknowledge a Slack envelope,
/// mark an email seen), so a crash in between loses nothing.
#[derive(Debug, Clone)]
pub struct Inbox {
    tx: mpsc::Sender<(Incoming, oneshot::Sender<()>)>,
}

/// The daemon's end of an [`Inbox`]: each update with the sender to call
/// once it is taken.
pub type InboxReceiver = mpsc::Receiver<(Incoming, oneshot::Sender<()>)>;

/// The daemon stopped taking updates (shutdown, or the channel removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the daemon no longer takes this channel's updates")]
pub struct InboxClosed;

impl Inbox {
    /// An inbox and its receiving end, holding up to `capacity` updates.
    pub fn new(capacity: usize) -> (Inbox, InboxReceiver) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Inbox { tx }, rx)
    }

    /// Hands `incoming` to the daemon and waits until it is taken.
    pub async fn deliver(&self, incoming: Incoming) -> Result<(), InboxClosed> {
        let (done, taken) = oneshot::channel();
        self.tx
            .send((incoming, done))
            .await
            .map_err(|_| InboxClosed)?;
        taken.await.map_err(|_| InboxClosed)
    }
}

/// Where a connector in webhook mode hands the updates of the requests it
/// is given: the [`Inbox`] of `run`, while it runs.
#[derive(Debug, Default)]
pub struct WebhookInbox(std::sync::Mutex<Option<Inbox>>);

impl WebhookInbox {
    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Inbox>> {
        // Plain data: a panic elsewhere leaves it usable.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `run` takes requests from now on, into `inbox`.
    pub fn open(&self, inbox: Inbox) {
        *self.slot() = Some(inbox);
    }

    /// `run` ended: requests are refused.
    pub fn close(&self) {
        self.slot().take();
    }

    /// Hands `incoming` to the daemon and waits until it is taken; the 503
    /// to answer when it cannot be (not running yet, or stopping), so the
    /// platform sends it again.
    pub async fn deliver(&self, incoming: Incoming) -> Result<(), WebhookAnswer> {
        let inbox = self.slot().clone();
        let Some(inbox) = inbox else {
            return Err(WebhookAnswer::json(
                503,
                &serde_json::json!({"error": "the channel is not running yet"}),
            ));
        };
        inbox.deliver(incoming).await.map_err(|_| {
            WebhookAnswer::json(503, &serde_json::json!({"error": "the daemon is stopping"}))
        })
    }
}

/// What an update asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// A message to the agent: a turn of the conversation's session.
    Message { text: String },
    /// A button pressed on an approval prompt: `token` is the one the
    /// prompt carried ([`ApprovalPrompt::token`]). `ack` is the platform's
    /// handle to acknowledge the press (a Telegram callback query id, a
    /// Discord interaction id and token), if it needs one.
    Decision {
        token: String,
        approve: bool,
        ack: Option<serde_json::Value>,
    },
}

/// What the daemon sends to a conversation.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    /// One piece of an answer, already split to the platform's size, in
    /// Markdown (the connector turns it into its platform's formatting).
    /// `key` is the same for every try of this piece and differs between
    /// pieces (`RUN_ID.INDEX`): a connector whose platform can drop a
    /// repeated send (a Discord nonce, an email's Message-ID) derives that
    /// from it, so a retry never shows an answer twice.
    Text { markdown: String, key: String },
    /// A tool call waiting for a person: shown with Approve and Deny
    /// buttons (a reply word where there are no buttons).
    Approval(ApprovalPrompt),
    /// What became of a decision, in answer to a button press (`ack` of
    /// [`What::Decision`]): the prompt is updated or the press answered.
    Decided {
        ack: Option<serde_json::Value>,
        text: String,
    },
}

/// A tool call waiting for approval, as a channel shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalPrompt {
    pub run_id: String,
    pub tool: String,
    /// The call's arguments (JSON), secrets already redacted.
    pub arguments: String,
    /// Names the call: a button carries `y:TOKEN` or `n:TOKEN` (under
    /// Telegram's 64 bytes of callback data) and the press comes back as
    /// [`What::Decision`] with it. Also the prompt's idempotency key.
    pub token: String,
    /// The words a reply may use instead of the buttons.
    pub approve_word: String,
    pub deny_word: String,
}

/// Why a send failed.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// Worth another try (a connection error, 5xx, 429 with its wait).
    #[error("{message}")]
    Retryable {
        message: String,
        retry_after: Option<std::time::Duration>,
    },
    /// Will fail again (a 4xx other than 429, a refused message).
    #[error("{0}")]
    Permanent(String),
}

impl ChannelError {
    pub fn retryable(message: impl Into<String>) -> Self {
        ChannelError::Retryable {
            message: message.into(),
            retry_after: None,
        }
    }
}

/// An HTTP request to a channel's webhook (`POST /channels/{name}`), for
/// the platforms' webhook modes.
#[derive(Debug, Clone)]
pub struct WebhookRequest {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Unix seconds when it arrived (for signature timestamps).
    pub now: i64,
}

impl WebhookRequest {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The answer to a webhook request.
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookAnswer {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl WebhookAnswer {
    pub fn json(status: u16, value: &serde_json::Value) -> Self {
        WebhookAnswer {
            status,
            content_type: "application/json",
            body: value.to_string().into_bytes(),
        }
    }
}

/// A platform account, connected. The daemon makes one per channel file,
/// calls [`run`](Connector::run) on a task of its own, and sends through
/// the same value.
pub trait Connector: Send + Sync + 'static {
    /// Receives updates until `shutdown`, handing each to `inbox`;
    /// reconnects after a drop with [`backoff`], and keeps `state` current
    /// (connected, reconnecting and why, the last error). Returns only at
    /// shutdown or when `inbox` is closed.
    fn run(self: Arc<Self>, inbox: Inbox, shutdown: CancellationToken) -> BoxFuture<'static, ()>;

    /// Sends `message` to `to`. A [`ChannelError::Retryable`] is tried
    /// again by the caller; a connector that can make a retry harmless (an
    /// idempotency key, a nonce) does so.
    fn send<'a>(
        &'a self,
        to: &'a Conversation,
        message: &'a Outgoing,
    ) -> BoxFuture<'a, Result<(), ChannelError>>;

    /// Shows that an answer is being written (a typing indicator), where
    /// the platform has one. Best effort.
    fn typing<'a>(&'a self, to: &'a Conversation) -> BoxFuture<'a, Result<(), ChannelError>>;

    /// The longest message the platform takes, in UTF-16 code units (the
    /// stricter count: no platform counts more units than this).
    fn max_message_len(&self) -> usize;

    /// A request to the channel's webhook, for a platform in webhook mode:
    /// checks the platform's signature, hands the updates it holds to the
    /// inbox given to `run` (waiting until they are taken), and says what
    /// to answer. A connector without
    /// a webhook mode answers 404.
    fn webhook(&self, request: WebhookRequest) -> BoxFuture<'_, WebhookAnswer> {
        let _ = request;
        Box::pin(async {
            WebhookAnswer::json(
                404,
                &serde_json::json!({"error": "this channel takes no webhook requests (it is not in webhook mode)"}),
            )
        })
    }
}

/// The connector for `config`'s platform, reporting to `state`. `env` reads
/// nothing: the secrets were resolved when the file was loaded.
pub fn connector(
    config: &ChannelConfig,
    state: Arc<ChannelState>,
    http: reqwest::Client,
) -> Arc<dyn Connector> {
    match &config.platform {
        PlatformConfig::Telegram(t) => {
            Arc::new(telegram::Telegram::new(t.clone(), state, http)) as Arc<dyn Connector>
        }
        PlatformConfig::Slack(s) => Arc::new(slack::Slack::new(s.clone(), state, http)),
        PlatformConfig::Discord(d) => Arc::new(discord::Discord::new(d.clone(), state, http)),
        PlatformConfig::Email(e) => Arc::new(email::Email::new(e.clone(), state)),
    }
}
