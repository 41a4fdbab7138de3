//! Mail as the daemon sees it, with no I/O: a fetched message read into an
//! [`Incoming`] (its thread as the conversation, the reply's quoted text
//! cut away, loops and auto-replies left out), and the headers of an answer
//! (`Re:` subject, `In-Reply-To`, `References`, a `Message-ID` that is the
//! same for every try of one piece).

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::channels::{Conversation, Incoming, Sender, What};

/// Why a fetched message is not handed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// Not a mail message mail-parser can read.
    Unreadable,
    /// Sent from the channel's own address (an answer of ours coming back).
    OwnAddress,
    /// `Auto-Submitted` other than `no` (RFC 3834): an out-of-office, a
    /// bounce; answering it could loop.
    AutoReply(String),
    /// No From address to answer.
    NoSender,
    /// Nothing left to say once the quoted reply is cut.
    Empty,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::Unreadable => write!(f, "not a mail message that could be read"),
            Skip::OwnAddress => write!(f, "sent from the channel's own address (a loop)"),
            Skip::AutoReply(v) => write!(f, "an automatic message (Auto-Submitted: {v})"),
            Skip::NoSender => write!(f, "no From address to answer"),
            Skip::Empty => write!(f, "no text once the quoted reply is cut"),
        }
    }
}

/// The message `raw` (RFC 5322 bytes) as an update. `own` is the channel's
/// address; `fallback_id` names a message without a Message-ID (the
/// mailbox's UIDVALIDITY and UID).
pub fn incoming(raw: &[u8], own: &str, fallback_id: &str) -> Result<Incoming, Skip> {
    let message = mail_parser::MessageParser::default()
        .parse(raw)
        .ok_or(Skip::Unreadable)?;
    let from = message
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.address())
        .map(|a| a.trim().to_lowercase())
        .filter(|a| !a.is_empty())
        .ok_or(Skip::NoSender)?;
    if from.eq_ignore_ascii_case(own) {
        return Err(Skip::OwnAddress);
    }
    if let Some(auto) = message
        .header_raw("Auto-Submitted")
        .map(|v| v.trim().to_string())
        && !auto.eq_ignore_ascii_case("no")
        && !auto.is_empty()
    {
        return Err(Skip::AutoReply(auto));
    }
    let id = message
        .message_id()
        .map(str::to_string)
        .unwrap_or_else(|| fallback_id.to_string());
    let ids = |v: &mail_parser::HeaderValue| -> Vec<String> {
        v.as_text_list()
            .map(|l| l.iter().map(|s| s.trim().to_string()).collect())
            .unwrap_or_default()
    };
    let references = ids(message.references());
    let in_reply_to = ids(message.in_reply_to());
    let root = references
        .first()
        .or(in_reply_to.first())
        .cloned()
        .unwrap_or_else(|| id.clone());
    let body = message
        .body_text(0)
        .map(|t| t.into_owned())
        .unwrap_or_default();
    let text = strip_quoted(&body);
    if text.is_empty() {
        return Err(Skip::Empty);
    }
    let mut thread: Vec<String> = references.iter().map(|r| bracket(r)).collect();
    thread.push(bracket(&id));
    let name = message
        .from()
        .and_then(|a| a.first())
        .and_then(|a| a.name())
        .map(str::to_string);
    Ok(Incoming {
        id: id.clone(),
        sender: Sender {
            user: from.clone(),
            chat: None,
            name,
        },
        conversation: Conversation {
            key: root,
            reply: json!({
                "to": from,
                "subject": reply_subject(message.subject().unwrap_or("")),
                "in_reply_to": bracket(&id),
                "references": thread,
            }),
        },
        what: What::Message { text },
    })
}

/// `<id>` for a bare message id.
fn bracket(id: &str) -> String {
    let id = id.trim().trim_start_matches('<').trim_end_matches('>');
    format!("<{id}>")
}

/// `Re: subject`, with one `Re:` however many the subject had.
pub fn reply_subject(subject: &str) -> String {
    let mut s = subject.trim();
    loop {
        let lower = s.get(..3).map(str::to_ascii_lowercase);
        match lower.as_deref() {
            Some("re:") => s = s[3..].trim_start(),
            _ => break,
        }
    }
    if s.is_empty() {
        "Re: your message".to_string()
    } else {
        format!("Re: {s}")
    }
}

/// `text` without what a reply quotes: lines starting with `>`, the
/// "On ... wrote:" line (or two, when a client wrapped it) before them,
/// everything after an Outlook "-----Original Message-----", and a
/// signature after the `-- ` line (RFC 3676). What the sender wrote is
/// left, trimmed.
pub fn strip_quoted(text: &str) -> String {
    let mut kept: Vec<&str> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_end_matches('\r');
        if trimmed == "-- " || trimmed.trim() == "-----Original Message-----" {
            break;
        }
        if trimmed.trim_start().starts_with('>') {
            drop_attribution(&mut kept);
            continue;
        }
        kept.push(trimmed);
    }
    let mut out = kept.join("\n");
    let len = out.trim_end().len();
    out.truncate(len);
    out.trim_start_matches(['\n', '\r']).to_string()
}

/// Removes the attribution line ("On Mon, 7 Dec 2026, Alice <a@b>
/// wrote:") at the end of `kept`, and blank lines between it and the
/// quote, where there is one.
fn drop_attribution(kept: &mut Vec<&str>) {
    let blank = kept
        .iter()
        .rev()
        .take_while(|l| l.trim().is_empty())
        .count();
    let end = kept.len() - blank;
    let Some(last) = end.checked_sub(1).map(|i| kept[i].trim()) else {
        return;
    };
    if !last.ends_with("wrote:") && !last.ends_with("a écrit :") && !last.ends_with("schrieb:") {
        return;
    }
    let mut start = end - 1;
    // A wrapped attribution: "On ..., Alice <" then "alice@x> wrote:".
    if !kept[start].trim_start().starts_with("On ")
        && start > 0
        && kept[start - 1].trim_start().starts_with("On ")
    {
        start -= 1;
    }
    kept.truncate(start);
}

/// The Message-ID of an answer piece whose idempotency key is `key`, from
/// `address`'s domain: the same for every try of the piece, so a resent
/// piece is one message to mail clients and to the daemon's claim.
pub fn message_id(key: &str, address: &str) -> String {
    let domain = address.rsplit_once('@').map_or("localhost", |(_, d)| d);
    let hash = hex::encode(Sha256::digest(format!("{address}\n{key}").as_bytes()));
    format!("<{}.aurad@{domain}>", &hash[..32])
}

/// Where an answer to `reply` (a conversation's `reply` JSON) goes.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplyTo {
    pub to: String,
    pub subject: String,
    pub in_reply_to: Option<String>,
    pub references: Vec<String>,
}

impl ReplyTo {
    pub fn from_json(reply: &Value) -> Option<ReplyTo> {
        let to = reply.get("to")?.as_str()?.to_string();
        let subject = reply
            .get("subject")
            .and_then(Value::as_str)
            .unwrap_or("Re: your message")
            .to_string();
        let in_reply_to = reply
            .get("in_reply_to")
            .and_then(Value::as_str)
            .map(str::to_string);
        let references = reply
            .get("references")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        Some(ReplyTo {
            to,
            subject,
            in_reply_to,
            references,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: &str = "agent@example.test";

    fn mail(headers: &str, body: &str) -> Vec<u8> {
        format!("{headers}\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{body}").into_bytes()
    }

    #[test]
    fn a_first_message_is_its_own_thread() {
        let raw = mail(
            "From: Alice <Alice@Example.test>\r\nTo: agent@example.test\r\nSubject: Disk full\r\nMessage-ID: <m1@example.test>",
            "The disk is full.\r\nWhat now?\r\n",
        );
        let m = incoming(&raw, OWN, "uid:1:1").unwrap();
        assert_eq!(m.id, "m1@example.test");
        assert_eq!(m.sender.user, "alice@example.test");
        assert_eq!(m.sender.name.as_deref(), Some("Alice"));
        assert_eq!(m.conversation.key, "m1@example.test");
        assert_eq!(
            m.conversation.reply,
            json!({"to": "alice@example.test", "subject": "Re: Disk full",
                   "in_reply_to": "<m1@example.test>", "references": ["<m1@example.test>"]})
        );
        assert_eq!(
            m.what,
            What::Message {
                text: "The disk is full.\nWhat now?".into()
            }
        );
    }

    #[test]
    fn a_reply_joins_the_thread_of_its_root_and_loses_the_quote() {
        let raw = mail(
            "From: alice@example.test\r\nSubject: Re: RE: Disk full\r\nMessage-ID: <m3@example.test>\r\nIn-Reply-To: <a2@example.test>\r\nReferences: <m1@example.test> <a2@example.test>",
            "approve\r\n\r\nOn Mon, 7 Dec 2026 at 10:00, Agent <agent@example.test>\r\nwrote:\r\n> Approve this call?\r\n> bash\r\n",
        );
        let m = incoming(&raw, OWN, "x").unwrap();
        assert_eq!(m.conversation.key, "m1@example.test");
        assert_eq!(m.conversation.reply["subject"], "Re: Disk full");
        assert_eq!(
            m.conversation.reply["references"],
            json!([
                "<m1@example.test>",
                "<a2@example.test>",
                "<m3@example.test>"
            ])
        );
        assert_eq!(
            m.what,
            What::Message {
                text: "approve".into()
            }
        );
    }

    #[test]
    fn in_reply_to_names_the_thread_without_references() {
        let raw = mail(
            "From: alice@example.test\r\nMessage-ID: <m2@x>\r\nIn-Reply-To: <m1@x>",
            "and another thing",
        );
        assert_eq!(incoming(&raw, OWN, "x").unwrap().conversation.key, "m1@x");
    }

    #[test]
    fn loops_and_auto_replies_are_skipped() {
        let own = mail("From: Agent@example.test\r\nMessage-ID: <a@x>", "hi");
        assert_eq!(incoming(&own, OWN, "x"), Err(Skip::OwnAddress));
        let auto = mail(
            "From: bob@example.test\r\nAuto-Submitted: auto-replied\r\nMessage-ID: <b@x>",
            "I am away",
        );
        assert_eq!(
            incoming(&auto, OWN, "x"),
            Err(Skip::AutoReply("auto-replied".into()))
        );
        let human = mail(
            "From: bob@example.test\r\nAuto-Submitted: no\r\nMessage-ID: <c@x>",
            "hello",
        );
        assert!(incoming(&human, OWN, "x").is_ok());
        let quoted_only = mail("From: bob@example.test\r\nMessage-ID: <d@x>", "> hi\r\n");
        assert_eq!(incoming(&quoted_only, OWN, "x"), Err(Skip::Empty));
    }

    #[test]
    fn html_only_mail_becomes_text() {
        let raw = b"From: bob@example.test\r\nMessage-ID: <h@x>\r\nContent-Type: text/html\r\n\r\n<html><body><p>Hello <b>there</b></p></body></html>\r\n";
        let m = incoming(raw, OWN, "x").unwrap();
        let What::Message { text } = m.what else {
            panic!("a message")
        };
        assert!(text.contains("Hello") && text.contains("there"), "{text}");
        assert!(!text.contains('<'), "{text}");
    }

    #[test]
    fn a_message_without_id_takes_the_fallback() {
        let raw = mail("From: bob@example.test", "hi");
        let m = incoming(&raw, OWN, "uid:7:3").unwrap();
        assert_eq!(
            (m.id.as_str(), m.conversation.key.as_str()),
            ("uid:7:3", "uid:7:3")
        );
    }

    #[test]
    fn signatures_and_outlook_quotes_are_cut() {
        assert_eq!(strip_quoted("yes\n-- \nAlice\n"), "yes");
        assert_eq!(
            strip_quoted("deny\r\n\r\n-----Original Message-----\r\nFrom: x\r\n"),
            "deny"
        );
        assert_eq!(
            strip_quoted("first\n> quoted\nmiddle\n> more\nlast"),
            "first\nmiddle\nlast"
        );
        assert_eq!(strip_quoted("why?\nOn Tue, Bob wrote:\n> x"), "why?");
    }

    #[test]
    fn subjects_get_one_re() {
        assert_eq!(reply_subject("Hello"), "Re: Hello");
        assert_eq!(reply_subject("re: RE:Hello"), "Re: Hello");
        assert_eq!(reply_subject(""), "Re: your message");
    }

    #[test]
    fn message_ids_follow_the_key() {
        let a = message_id("run1.0", OWN);
        assert_eq!(a, message_id("run1.0", OWN));
        assert_ne!(a, message_id("run1.1", OWN));
        assert!(a.starts_with('<') && a.ends_with("@example.test>"), "{a}");
    }
}
