//! What a Gateway event is to the daemon, and where its answer goes.
//!
//! - A direct message (no `guild_id`): one conversation per DM channel.
//! - A guild message that mentions the bot: a new conversation, answered in
//!   a thread started from that message (`POST
//!   /channels/{id}/messages/{id}/threads`). The thread is started when
//!   the first answer or typing indicator goes out, not when the message
//!   comes, so a stranger's mention (which the daemon ignores) starts
//!   nothing. A thread started from a message has the message's id
//!   ("The created thread and the message it was started from will share
//!   the same id": Start Thread from Message), so the conversation's key
//!   is the message id from the start and stays the thread's channel id.
//! - A guild message in a thread of this bot: that thread's conversation,
//!   mention or not. A thread is this bot's when `GET /channels/{id}` says
//!   it is a thread (type 10, 11 or 12) whose `owner_id` (its creator) is
//!   the bot's user id from READY; the answer is cached per channel, so it
//!   holds across restarts at the cost of one lookup per channel.
//! - A mention in a thread someone else started: answered in that thread,
//!   key = the thread; later messages there need a mention again.
//! - Messages of bots (this one included) and webhooks are ignored.
//!
//! A button press (INTERACTION_CREATE, type 3 MESSAGE_COMPONENT) with
//! `custom_id` `y:TOKEN` / `n:TOKEN` is a decision; it is acknowledged with
//! a deferred update (callback type 6: "ACK an interaction and edit the
//! original message later; the user does not see a loading state") once
//! the daemon has taken it, well within the 3 seconds Discord allows
//! (<https://discord.com/developers/docs/interactions/receiving-and-responding>).

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiFailure, Discord, KNOWN_CHANNELS, clip, lock};
use crate::channels::{ChannelError, Conversation, Inbox, InboxClosed, Incoming, Sender, What};

/// What a guild channel is to this bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ChannelKind {
    /// A thread this bot started: every message there is for it.
    BotThread,
    /// Someone else's thread.
    OtherThread,
    /// Not a thread.
    Channel,
    /// A message the bot could not start a thread from: answered in reply.
    Unthreadable,
}

/// Where a message to a conversation goes.
#[derive(Debug)]
pub(super) struct Target {
    pub channel: String,
    /// Posted in reply to this message (when no thread could be started).
    pub reply_to: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Message {
    id: String,
    channel_id: String,
    #[serde(default)]
    guild_id: Option<String>,
    author: User,
    #[serde(default)]
    content: String,
    #[serde(default)]
    mentions: Vec<User>,
    #[serde(rename = "type", default)]
    kind: u8,
    #[serde(default)]
    webhook_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct User {
    id: String,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    bot: bool,
}

#[derive(Debug, Deserialize)]
struct Member {
    user: User,
}

#[derive(Debug, Deserialize)]
pub(super) struct Interaction {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: u8,
    pub token: String,
    #[serde(default)]
    data: Option<ComponentData>,
    #[serde(default)]
    guild_id: Option<String>,
    #[serde(default)]
    channel_id: Option<String>,
    #[serde(default)]
    member: Option<Member>,
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    message: Option<InteractionMessage>,
}

#[derive(Debug, Deserialize)]
struct ComponentData {
    #[serde(default)]
    custom_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct InteractionMessage {
    id: String,
    #[serde(default)]
    content: String,
}

/// Interaction type of a message component (a button press).
pub(super) const MESSAGE_COMPONENT: u8 = 3;
/// Callback type: acknowledge a component press, the message edited later.
pub(super) const DEFERRED_UPDATE_MESSAGE: u8 = 6;

/// `content` without the mentions of user `bot` (`<@ID>`, or `<@!ID>` as
/// older clients write it), trimmed.
fn strip_mention(content: &str, bot: &str) -> String {
    content
        .replace(&format!("<@{bot}>"), "")
        .replace(&format!("<@!{bot}>"), "")
        .trim()
        .to_string()
}

/// A thread's name from the message that starts it (Discord takes 1-100
/// characters).
fn thread_name(text: &str) -> String {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let name = clip(first.trim(), 80);
    if name.is_empty() {
        "Conversation".to_string()
    } else {
        name
    }
}

impl Discord {
    /// Hands a dispatched event to the daemon, if it is one for it.
    pub(super) async fn handle(&self, t: &str, d: Value, inbox: &Inbox) -> Result<(), InboxClosed> {
        match t {
            "MESSAGE_CREATE" => {
                if let Some(incoming) = self.message(d).await {
                    inbox.deliver(incoming).await?;
                }
            }
            "INTERACTION_CREATE" => {
                let interaction: Interaction = match serde_json::from_value(d) {
                    Ok(i) => i,
                    Err(e) => {
                        self.state.error(format!(
                            "an interaction Discord sent could not be read: {e}"
                        ));
                        return Ok(());
                    }
                };
                let Some(incoming) = self.decision(&interaction) else {
                    return Ok(());
                };
                inbox.deliver(incoming).await?;
                let path = format!(
                    "/interactions/{}/{}/callback",
                    interaction.id, interaction.token
                );
                if let Err(f) = self
                    .api(
                        Method::POST,
                        &path,
                        Some(&json!({"type": DEFERRED_UPDATE_MESSAGE})),
                    )
                    .await
                {
                    self.state.error(format!(
                        "the button press could not be acknowledged: {}",
                        f.error
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// A MESSAGE_CREATE as the daemon takes it; `None` for what is not for
    /// the bot.
    async fn message(&self, d: Value) -> Option<Incoming> {
        let m: Message = match serde_json::from_value(d) {
            Ok(m) => m,
            Err(e) => {
                self.state
                    .error(format!("a message Discord sent could not be read: {e}"));
                return None;
            }
        };
        let bot = self.bot_id()?;
        // 0 DEFAULT and 19 REPLY are what people write; the rest are
        // system messages (joins, pins, thread created, ...).
        if m.author.bot || m.author.id == bot || m.webhook_id.is_some() || !matches!(m.kind, 0 | 19)
        {
            return None;
        }
        let mentioned = m.mentions.iter().any(|u| u.id == bot);
        let text = strip_mention(&m.content, &bot);
        if text.is_empty() {
            return None;
        }
        let sender = Sender {
            user: m.author.id.clone(),
            chat: Some(m.guild_id.clone().unwrap_or_else(|| m.channel_id.clone())),
            name: m.author.username.clone(),
        };
        let here = || Conversation {
            key: m.channel_id.clone(),
            reply: json!({"channel_id": m.channel_id}),
        };
        let conversation = if m.guild_id.is_none() {
            here()
        } else {
            match self.channel_kind(&m.channel_id).await {
                Ok(ChannelKind::BotThread) => here(),
                _ if !mentioned => return None,
                Ok(ChannelKind::OtherThread) => here(),
                Ok(_) | Err(_) => Conversation {
                    key: m.id.clone(),
                    reply: json!({
                        "channel_id": m.channel_id,
                        "thread_from": m.id,
                        "thread_name": thread_name(&text),
                    }),
                },
            }
        };
        Some(Incoming {
            id: m.id,
            sender,
            conversation,
            what: What::Message { text },
        })
    }

    /// A button press as the daemon takes it; `None` for other
    /// interactions and for buttons that are not an approval's.
    pub(super) fn decision(&self, i: &Interaction) -> Option<Incoming> {
        if i.kind != MESSAGE_COMPONENT {
            return None;
        }
        let custom_id = i.data.as_ref()?.custom_id.as_deref()?;
        let (approve, token) = match custom_id.split_once(':') {
            Some(("y", token)) => (true, token),
            Some(("n", token)) => (false, token),
            _ => return None,
        };
        let user = i.member.as_ref().map(|m| &m.user).or(i.user.as_ref())?;
        let channel = i.channel_id.clone()?;
        let message = i.message.as_ref()?;
        Some(Incoming {
            id: i.id.clone(),
            sender: Sender {
                user: user.id.clone(),
                chat: Some(i.guild_id.clone().unwrap_or_else(|| channel.clone())),
                name: user.username.clone(),
            },
            conversation: Conversation {
                key: channel.clone(),
                reply: json!({"channel_id": channel}),
            },
            what: What::Decision {
                token: token.to_string(),
                approve,
                ack: Some(json!({
                    "interaction_id": i.id,
                    "interaction_token": i.token,
                    "channel_id": channel,
                    "message_id": message.id,
                    "content": message.content,
                })),
            },
        })
    }

    fn remember(&self, channel: &str, kind: ChannelKind) {
        let mut known = lock(&self.channels);
        if known.len() >= KNOWN_CHANNELS {
            known.clear();
        }
        known.insert(channel.to_string(), kind);
    }

    /// What guild channel `id` is, asked of Discord once.
    async fn channel_kind(&self, id: &str) -> Result<ChannelKind, ApiFailure> {
        if let Some(kind) = lock(&self.channels).get(id) {
            return Ok(*kind);
        }
        let channel = self
            .api(Method::GET, &format!("/channels/{id}"), None)
            .await
            .inspect_err(|f| {
                self.state
                    .error(format!("could not tell what channel {id} is: {}", f.error));
            })?;
        let is_thread = matches!(channel.get("type").and_then(Value::as_u64), Some(10..=12));
        let owner = channel.get("owner_id").and_then(Value::as_str);
        let kind = match (is_thread, owner) {
            (true, Some(owner)) if Some(owner.to_string()) == self.bot_id() => {
                ChannelKind::BotThread
            }
            (true, _) => ChannelKind::OtherThread,
            (false, _) => ChannelKind::Channel,
        };
        self.remember(id, kind);
        Ok(kind)
    }

    /// Where a message to `to` goes: its thread, started now if it is
    /// still to be.
    pub(super) async fn target(&self, to: &Conversation) -> Result<Target, ChannelError> {
        let Some(channel) = to.reply.get("channel_id").and_then(Value::as_str) else {
            return Err(ChannelError::Permanent(format!(
                "conversation {} has no channel_id to answer in",
                to.key
            )));
        };
        let Some(from) = to.reply.get("thread_from").and_then(Value::as_str) else {
            return Ok(Target {
                channel: channel.to_string(),
                reply_to: None,
            });
        };
        let known = lock(&self.channels).get(from).copied();
        let kind = match known {
            Some(kind) => kind,
            None => {
                let name = to
                    .reply
                    .get("thread_name")
                    .and_then(Value::as_str)
                    .unwrap_or("Conversation");
                match self.start_thread(channel, from, name).await {
                    Ok(()) => ChannelKind::BotThread,
                    Err(f) if matches!(f.error, ChannelError::Retryable { .. }) => {
                        return Err(f.error);
                    }
                    Err(f) => {
                        self.state.error(format!(
                            "no thread could be started from message {from}, answering in reply to it instead: {}",
                            f.error
                        ));
                        ChannelKind::Unthreadable
                    }
                }
            }
        };
        self.remember(from, kind);
        Ok(match kind {
            ChannelKind::Unthreadable => Target {
                channel: channel.to_string(),
                reply_to: Some(from.to_string()),
            },
            _ => Target {
                channel: from.to_string(),
                reply_to: None,
            },
        })
    }

    /// Starts a public thread from message `message` of `channel`. A
    /// message has one thread at most: if Discord refuses because it has
    /// one (a retry, or a restart in between), that thread is used.
    async fn start_thread(
        &self,
        channel: &str,
        message: &str,
        name: &str,
    ) -> Result<(), ApiFailure> {
        let started = self
            .api(
                Method::POST,
                &format!("/channels/{channel}/messages/{message}/threads"),
                Some(&json!({"name": name, "auto_archive_duration": 1440})),
            )
            .await;
        match started {
            Ok(_) => Ok(()),
            Err(f) if f.status == Some(400) => {
                match self
                    .api(Method::GET, &format!("/channels/{message}"), None)
                    .await
                {
                    Ok(thread)
                        if matches!(thread.get("type").and_then(Value::as_u64), Some(10..=12)) =>
                    {
                        Ok(())
                    }
                    _ => Err(f),
                }
            }
            Err(f) => Err(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_of_the_bot_are_stripped() {
        assert_eq!(strip_mention("<@42> hello <@!42>", "42"), "hello");
        assert_eq!(strip_mention("hi <@43>", "42"), "hi <@43>");
    }

    #[test]
    fn a_thread_is_named_after_the_first_line() {
        assert_eq!(thread_name("\n  what is up?\nmore"), "what is up?");
        assert_eq!(thread_name(&"x".repeat(300)).chars().count(), 80);
    }
}
