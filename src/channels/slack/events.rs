//! What Slack sends, read into [`Incoming`]: an Events API `event_callback`
//! (the same JSON whether it arrives in a Socket Mode envelope or posted to
//! the webhook) and a `block_actions` interaction (a button of an approval
//! prompt pressed). Pure functions: nothing here does I/O.
//!
//! Which events become messages: `app_mention` (the bot named in a channel)
//! and `message` with `channel_type: im` (a direct message to the bot).
//! Messages written by bots (`bot_id`, the bot's own user id) and messages
//! with a `subtype` (edits, deletions, joins, ...; but a reply also sent to
//! the channel, or a file shared with a comment, is a message) are not: the first keeps
//! the bot from answering itself, the second from answering an edit as a
//! new question. Docs: <https://docs.slack.dev/reference/events/app_mention>,
//! <https://docs.slack.dev/reference/events/message.im>, the event wrapper
//! <https://docs.slack.dev/reference/objects/event-object>, and
//! <https://docs.slack.dev/reference/interaction-payloads/block_actions-payload>.

use serde_json::{Value, json};

use super::super::{Conversation, Incoming, Sender, What};

/// The conversation of a message in `channel`: its thread (`thread_ts`, or
/// the message's own `ts` when it starts one). Answers go to that thread.
pub(super) fn conversation(channel: &str, thread_ts: &str) -> Conversation {
    Conversation {
        key: format!("{channel}/{thread_ts}"),
        reply: json!({"channel": channel, "thread_ts": thread_ts}),
    }
}

/// The bot's own user id as an `event_callback` names it: the bot entry of
/// its `authorizations`, when `auth.test` has not said it yet.
pub(super) fn bot_user_from_callback(callback: &Value) -> Option<String> {
    callback
        .get("authorizations")?
        .as_array()?
        .iter()
        .find(|a| a.get("is_bot").and_then(Value::as_bool) == Some(true))
        .and_then(|a| a.get("user_id"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The message an `event_callback` holds, or `None` when it is not one the
/// channel answers. `bot_user` is the bot's user id, if known: its own
/// messages are skipped and its mention stripped from the text.
pub(super) fn from_callback(callback: &Value, bot_user: Option<&str>) -> Option<Incoming> {
    if callback.get("type").and_then(Value::as_str) != Some("event_callback") {
        return None;
    }
    let event_id = callback.get("event_id").and_then(Value::as_str)?;
    let event = callback.get("event")?;
    let str_of = |k: &str| event.get(k).and_then(Value::as_str);
    let kind = str_of("type")?;
    let addressed = match kind {
        "app_mention" => true,
        "message" => str_of("channel_type") == Some("im"),
        _ => false,
    };
    if !addressed
        || event.get("bot_id").is_some_and(|b| !b.is_null())
        || str_of("subtype").is_some_and(|s| !matches!(s, "thread_broadcast" | "file_share"))
    {
        return None;
    }
    let user = str_of("user")?;
    if bot_user == Some(user) {
        return None;
    }
    let channel = str_of("channel")?;
    let ts = str_of("ts")?;
    let thread = str_of("thread_ts").unwrap_or(ts);
    let text = message_text(str_of("text").unwrap_or(""), bot_user);
    if text.is_empty() {
        return None;
    }
    Some(Incoming {
        id: event_id.to_string(),
        sender: Sender {
            user: user.to_string(),
            chat: Some(channel.to_string()),
            name: None,
        },
        conversation: conversation(channel, thread),
        what: What::Message { text },
    })
}

/// A message's text as the agent reads it: the bot's leading mention
/// (`<@UBOT>` or `<@UBOT|name>`) taken off, and Slack's three escapes
/// (`&amp;`, `&lt;`, `&gt;`) turned back into characters.
pub(super) fn message_text(text: &str, bot_user: Option<&str>) -> String {
    let mut rest = text.trim_start();
    if let Some(bot) = bot_user
        && let Some(after) = rest.strip_prefix("<@")
        && let Some(after) = after.strip_prefix(bot)
        && let Some(close) = after.find('>')
        && (close == 0 || after.starts_with('|'))
    {
        rest = after[close + 1..].trim_start_matches([' ', ':', ',']);
    }
    rest.trim()
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// A button press on an approval prompt (`type: block_actions`, the first
/// action's `value` being `y:TOKEN` or `n:TOKEN`), or `None`.
pub(super) fn from_interaction(payload: &Value) -> Option<Incoming> {
    if payload.get("type").and_then(Value::as_str) != Some("block_actions") {
        return None;
    }
    let action = payload.get("actions")?.as_array()?.first()?;
    let value = action.get("value").and_then(Value::as_str)?;
    let (approve, token) = match value.split_once(':') {
        Some(("y", token)) => (true, token),
        Some(("n", token)) => (false, token),
        _ => return None,
    };
    let user = payload.pointer("/user/id").and_then(Value::as_str)?;
    let name = payload
        .pointer("/user/username")
        .or_else(|| payload.pointer("/user/name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let channel = payload
        .pointer("/channel/id")
        .or_else(|| payload.pointer("/container/channel_id"))
        .and_then(Value::as_str)?;
    let message_ts = payload
        .pointer("/container/message_ts")
        .or_else(|| payload.pointer("/message/ts"))
        .and_then(Value::as_str)?;
    let thread = payload
        .pointer("/message/thread_ts")
        .or_else(|| payload.pointer("/container/thread_ts"))
        .and_then(Value::as_str)
        .unwrap_or(message_ts);
    // A press has no event_id: its trigger_id is unique to the press (the
    // action_ts names it where a payload lacks one).
    let id = match payload.get("trigger_id").and_then(Value::as_str) {
        Some(trigger) => format!("action:{trigger}"),
        None => format!(
            "action:{channel}:{message_ts}:{}",
            action.get("action_ts").and_then(Value::as_str)?
        ),
    };
    // What the prompt asked, kept so the update that takes the buttons away
    // still shows it.
    let prompt = payload
        .pointer("/message/blocks/0/text/text")
        .and_then(Value::as_str)
        .unwrap_or("");
    Some(Incoming {
        id,
        sender: Sender {
            user: user.to_string(),
            chat: Some(channel.to_string()),
            name,
        },
        conversation: conversation(channel, thread),
        what: What::Decision {
            token: token.to_string(),
            approve,
            ack: Some(json!({"channel": channel, "ts": message_ts, "prompt": prompt})),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn callback(event: Value) -> Value {
        json!({
            "type": "event_callback",
            "event_id": "Ev1",
            "authorizations": [{"user_id": "UBOT", "is_bot": true}],
            "event": event,
        })
    }

    #[test]
    fn a_mention_is_a_message_of_its_thread_without_the_mention() {
        let c = callback(json!({
            "type": "app_mention", "user": "U1", "channel": "C1",
            "text": "<@UBOT> what is 2 &lt; 3 &amp;&amp; 1?", "ts": "10.5",
        }));
        assert_eq!(bot_user_from_callback(&c).as_deref(), Some("UBOT"));
        let i = from_callback(&c, Some("UBOT")).unwrap();
        assert_eq!(i.id, "Ev1");
        assert_eq!(i.sender.user, "U1");
        assert_eq!(i.conversation.key, "C1/10.5");
        assert_eq!(
            i.what,
            What::Message {
                text: "what is 2 < 3 && 1?".into()
            }
        );
        let reply = callback(json!({
            "type": "app_mention", "user": "U1", "channel": "C1",
            "text": "<@UBOT|aura>: again", "ts": "11.0", "thread_ts": "10.5",
        }));
        let i = from_callback(&reply, Some("UBOT")).unwrap();
        assert_eq!(i.conversation.key, "C1/10.5");
        assert_eq!(
            i.what,
            What::Message {
                text: "again".into()
            }
        );
    }

    #[test]
    fn only_direct_messages_from_people_count() {
        let im = |extra: Value| {
            let mut e = json!({"type": "message", "channel_type": "im", "user": "U1",
                "channel": "D1", "text": "hi", "ts": "1.0"});
            for (k, v) in extra.as_object().unwrap() {
                e[k] = v.clone();
            }
            from_callback(&callback(e), Some("UBOT"))
        };
        assert!(im(json!({})).is_some());
        assert!(im(json!({"channel_type": "channel"})).is_none());
        assert!(im(json!({"bot_id": "B1"})).is_none());
        assert!(im(json!({"user": "UBOT"})).is_none());
        assert!(im(json!({"subtype": "message_changed"})).is_none());
    }

    #[test]
    fn another_users_leading_mention_stays() {
        assert_eq!(
            message_text("<@U2> and <@UBOT> look", Some("UBOT")),
            "<@U2> and <@UBOT> look"
        );
        assert_eq!(message_text("<@UBOTX> hi", Some("UBOT")), "<@UBOTX> hi");
    }

    #[test]
    fn a_button_press_is_a_decision_with_what_updates_the_prompt() {
        let p = json!({
            "type": "block_actions", "trigger_id": "T.1",
            "user": {"id": "U1", "username": "ann"},
            "channel": {"id": "C1"},
            "container": {"type": "message", "message_ts": "20.0", "channel_id": "C1"},
            "message": {"ts": "20.0", "thread_ts": "10.5",
                "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "Run *rm*?"}}]},
            "actions": [{"type": "button", "value": "n:tok9", "action_ts": "21.0"}],
        });
        let i = from_interaction(&p).unwrap();
        assert_eq!(i.id, "action:T.1");
        assert_eq!(i.conversation.key, "C1/10.5");
        assert_eq!(
            i.what,
            What::Decision {
                token: "tok9".into(),
                approve: false,
                ack: Some(json!({"channel": "C1", "ts": "20.0", "prompt": "Run *rm*?"})),
            }
        );
    }
}
