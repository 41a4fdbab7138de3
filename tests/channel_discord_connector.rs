#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report"
)]
//! The Discord connector against a fake Discord (`support/fake_discord.rs`):
//! the Gateway (identify, dispatches, resume after a drop or a zombie
//! connection, a new session after Invalid Session, a close no retry
//! mends), conversations (DMs, a thread per mention, the bot's threads),
//! sends (nonces, 429s, buttons, a decision shown), HTTP interactions.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aurad::channels::{
    ApprovalPrompt, ChannelError, ChannelState, Connection, Connector, Conversation, Inbox,
    InboxReceiver, Incoming, Outgoing, WebhookRequest, What,
};
use aurad::config::channels::parse_channel;
use ed25519_dalek::{Signer, SigningKey};
use serde_json::{Value, json};
use support::fake_discord::{BOT_ID, FakeDiscord};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "bot-token-1";
const GUILD: &str = "300000000000000001";
const GENERAL: &str = "300000000000000002";
const DM: &str = "400000000000000001";
const ALICE: &str = "500000000000000001";

struct Running {
    connector: Arc<dyn Connector>,
    state: Arc<ChannelState>,
    rx: InboxReceiver,
    shutdown: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The connector of a channel file pointing at `fake`, with `extra` lines
/// in its `discord:` section and `token` as the bot token, running.
fn start_with(fake: &FakeDiscord, token: &str, extra: &str) -> Running {
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

async fn start(fake: &FakeDiscord) -> Running {
    let running = start_with(fake, TOKEN, "");
    until_connection(&running, "connected", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    running
}

/// Waits (10 s at most) until the channel's connection is as `f` wants.
async fn until_connection(
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

/// The next update the connector hands on, and its `done`.
async fn next(running: &mut Running) -> (Incoming, oneshot::Sender<()>) {
    tokio::time::timeout(Duration::from_secs(10), running.rx.recv())
        .await
        .expect("an update within 10 s")
        .expect("the connector is running")
}

fn message(id: &str, channel: &str, guild: Option<&str>, author: &str, content: &str) -> Value {
    support::fake_discord::message_create(id, channel, guild, author, content)
}

fn text_of(incoming: &Incoming) -> &str {
    match &incoming.what {
        What::Message { text } => text,
        other => panic!("a message, not {other:?}"),
    }
}

#[tokio::test]
async fn identify_asks_for_messages_and_their_content() {
    let fake = FakeDiscord::start(TOKEN).await;
    let _running = start(&fake).await;
    let state = fake.state();
    assert_eq!(state.identifies.len(), 1);
    let identify = &state.identifies[0];
    assert_eq!(identify["token"], TOKEN);
    // GUILD_MESSAGES | DIRECT_MESSAGES | MESSAGE_CONTENT.
    assert_eq!(identify["intents"], 512 + 4096 + 32768);
    assert_eq!(state.connections[0], "/?v=10&encoding=json");
    assert!(state.requests.contains(&"GET /gateway/bot".to_string()));
}

#[tokio::test]
async fn a_direct_message_is_one_conversation_and_bots_are_ignored() {
    let fake = FakeDiscord::start(TOKEN).await;
    let mut running = start(&fake).await;
    // The bot's own message and another bot's come first: both ignored.
    let mut own = message("600000000000000001", DM, None, BOT_ID, "I said this");
    own["author"]["bot"] = json!(true);
    fake.dispatch("MESSAGE_CREATE", own);
    let mut other = message("600000000000000002", DM, None, "77", "beep");
    other["author"]["bot"] = json!(true);
    fake.dispatch("MESSAGE_CREATE", other);
    fake.dispatch(
        "MESSAGE_CREATE",
        message("600000000000000003", DM, None, ALICE, "hello there"),
    );
    let (incoming, done) = next(&mut running).await;
    assert_eq!(incoming.id, "600000000000000003");
    assert_eq!(incoming.sender.user, ALICE);
    assert_eq!(incoming.sender.chat.as_deref(), Some(DM));
    assert_eq!(incoming.conversation.key, DM);
    assert_eq!(text_of(&incoming), "hello there");
    done.send(()).unwrap();

    running
        .connector
        .send(
            &incoming.conversation,
            &Outgoing::Text {
                markdown: "**hi** there".into(),
                key: "run-1.0".into(),
            },
        )
        .await
        .unwrap();
    running
        .connector
        .typing(&incoming.conversation)
        .await
        .unwrap();
    let state = fake.state();
    assert_eq!(state.messages.len(), 1);
    assert_eq!(state.messages[0]["channel_id"], DM);
    assert_eq!(state.messages[0]["content"], "**hi** there");
    assert_eq!(state.messages[0]["allowed_mentions"], json!({"parse": []}));
    assert_eq!(state.typing, vec![DM.to_string()]);
    assert!(state.threads.is_empty());
}

#[tokio::test]
async fn a_mention_starts_a_thread_and_the_thread_continues_without_one() {
    let fake = FakeDiscord::start(TOKEN).await;
    fake.add_channel(json!({"id": GENERAL, "type": 0, "guild_id": GUILD}));
    let mut running = start(&fake).await;
    // Not mentioned, in a plain channel: not for the bot.
    fake.dispatch(
        "MESSAGE_CREATE",
        message(
            "600000000000000010",
            GENERAL,
            Some(GUILD),
            ALICE,
            "just chatting",
        ),
    );
    let mention = "600000000000000011";
    fake.dispatch(
        "MESSAGE_CREATE",
        message(
            mention,
            GENERAL,
            Some(GUILD),
            ALICE,
            &format!("<@{BOT_ID}> what is a monad?"),
        ),
    );
    let (incoming, done) = next(&mut running).await;
    assert_eq!(incoming.id, mention);
    assert_eq!(text_of(&incoming), "what is a monad?");
    assert_eq!(incoming.sender.chat.as_deref(), Some(GUILD));
    // The thread to be has the message's id.
    assert_eq!(incoming.conversation.key, mention);
    done.send(()).unwrap();
    // Nothing is started before the daemon answers.
    assert!(fake.state().threads.is_empty());

    running
        .connector
        .typing(&incoming.conversation)
        .await
        .unwrap();
    running
        .connector
        .send(
            &incoming.conversation,
            &Outgoing::Text {
                markdown: "A monoid in the category of endofunctors.".into(),
                key: "run-2.0".into(),
            },
        )
        .await
        .unwrap();
    {
        let state = fake.state();
        assert_eq!(state.threads.len(), 1, "one thread: {:?}", state.threads);
        assert_eq!(state.threads[0]["channel_id"], GENERAL);
        assert_eq!(state.threads[0]["message_id"], mention);
        assert_eq!(state.threads[0]["body"]["name"], "what is a monad?");
        assert_eq!(state.typing, vec![mention.to_string()]);
        assert_eq!(state.messages[0]["channel_id"], mention);
    }

    // In the thread, no mention needed: the same conversation.
    fake.dispatch(
        "MESSAGE_CREATE",
        message(
            "600000000000000012",
            mention,
            Some(GUILD),
            ALICE,
            "and a functor?",
        ),
    );
    let (incoming, done) = next(&mut running).await;
    assert_eq!(incoming.conversation.key, mention);
    assert_eq!(text_of(&incoming), "and a functor?");
    done.send(()).unwrap();

    // A restarted connector knows the thread is the bot's from Discord.
    drop(running);
    let mut running = start(&fake).await;
    fake.dispatch(
        "MESSAGE_CREATE",
        message(
            "600000000000000013",
            mention,
            Some(GUILD),
            ALICE,
            "still there?",
        ),
    );
    let (incoming, done) = next(&mut running).await;
    assert_eq!(incoming.conversation.key, mention);
    done.send(()).unwrap();
    assert!(
        fake.state()
            .requests
            .contains(&format!("GET /channels/{mention}"))
    );
    // An answer after the restart finds the thread there already.
    let old = Conversation {
        key: mention.into(),
        reply: json!({"channel_id": GENERAL, "thread_from": mention, "thread_name": "x"}),
    };
    running
        .connector
        .send(
            &old,
            &Outgoing::Text {
                markdown: "yes".into(),
                key: "run-3.0".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(fake.state().messages.last().unwrap()["channel_id"], mention);
}

#[tokio::test]
async fn a_retried_send_is_shown_once_and_a_429_says_how_long_to_wait() {
    let fake = FakeDiscord::start(TOKEN).await;
    let running = start(&fake).await;
    let to = Conversation {
        key: DM.into(),
        reply: json!({"channel_id": DM}),
    };
    let piece = |key: &str| Outgoing::Text {
        markdown: format!("piece {key}"),
        key: key.into(),
    };
    running
        .connector
        .send(&to, &piece("run-9.0"))
        .await
        .unwrap();
    running
        .connector
        .send(&to, &piece("run-9.0"))
        .await
        .unwrap();
    running
        .connector
        .send(&to, &piece("run-9.1"))
        .await
        .unwrap();
    {
        let state = fake.state();
        assert_eq!(state.messages.len(), 2, "{:?}", state.messages);
        for m in &state.messages {
            assert_eq!(m["nonce"].as_str().unwrap().len(), 25);
            assert_eq!(m["enforce_nonce"], true);
        }
        assert_ne!(state.messages[0]["nonce"], state.messages[1]["nonce"]);
    }

    fake.fail_next(
        429,
        json!({"message": "You are being rate limited.", "retry_after": 1.5, "global": false}),
        Some("2"),
    );
    let err = running
        .connector
        .send(&to, &piece("run-9.2"))
        .await
        .unwrap_err();
    let ChannelError::Retryable { retry_after, .. } = err else {
        panic!("a 429 is retryable: {err:?}")
    };
    assert_eq!(retry_after, Some(Duration::from_millis(1500)));
    fake.fail_next(502, json!({"message": "Bad Gateway"}), None);
    assert!(matches!(
        running.connector.send(&to, &piece("run-9.2")).await,
        Err(ChannelError::Retryable { .. })
    ));
    fake.fail_next(
        403,
        json!({"message": "Missing Permissions", "code": 50013}),
        None,
    );
    let err = running
        .connector
        .send(&to, &piece("run-9.2"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ChannelError::Permanent(m) if m.contains("Missing Permissions") && m.contains("50013")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_long_answer_is_split_to_discords_2000_characters() {
    let fake = FakeDiscord::start(TOKEN).await;
    let running = start(&fake).await;
    assert_eq!(running.connector.max_message_len(), 2000);
    let answer = "word ".repeat(1000);
    let pieces =
        aurad::channels::split::split_message(&answer, running.connector.max_message_len());
    assert_eq!(pieces.len(), 3);
    let to = Conversation {
        key: DM.into(),
        reply: json!({"channel_id": DM}),
    };
    for (i, piece) in pieces.iter().enumerate() {
        running
            .connector
            .send(
                &to,
                &Outgoing::Text {
                    markdown: piece.clone(),
                    key: format!("run-5.{i}"),
                },
            )
            .await
            .unwrap();
    }
    let state = fake.state();
    assert_eq!(state.messages.len(), 3);
    assert!(
        state
            .messages
            .iter()
            .all(|m| m["content"].as_str().unwrap().chars().count() <= 2000)
    );
}

#[tokio::test]
async fn an_approval_has_buttons_and_a_press_is_acknowledged_after_it_is_taken() {
    let fake = FakeDiscord::start(TOKEN).await;
    let mut running = start(&fake).await;
    let to = Conversation {
        key: DM.into(),
        reply: json!({"channel_id": DM}),
    };
    let prompt = ApprovalPrompt {
        run_id: "run-7".into(),
        tool: "shell".into(),
        arguments: r#"{"cmd": "rm -rf build"}"#.into(),
        token: "tok7".into(),
        approve_word: "approve".into(),
        deny_word: "deny".into(),
    };
    running
        .connector
        .send(&to, &Outgoing::Approval(prompt.clone()))
        .await
        .unwrap();
    // A retry of the prompt shows it once.
    running
        .connector
        .send(&to, &Outgoing::Approval(prompt))
        .await
        .unwrap();
    let prompt_message = {
        let state = fake.state();
        assert_eq!(state.messages.len(), 1);
        let m = state.messages[0].clone();
        let buttons = &m["components"][0];
        assert_eq!(buttons["type"], 1);
        assert_eq!(buttons["components"][0]["type"], 2);
        assert_eq!(buttons["components"][0]["style"], 3);
        assert_eq!(buttons["components"][0]["label"], "Approve");
        assert_eq!(buttons["components"][0]["custom_id"], "y:tok7");
        assert_eq!(buttons["components"][1]["style"], 4);
        assert_eq!(buttons["components"][1]["custom_id"], "n:tok7");
        assert!(m["content"].as_str().unwrap().contains("rm -rf build"));
        m
    };

    fake.dispatch(
        "INTERACTION_CREATE",
        json!({
            "id": "700000000000000001",
            "application_id": "900000000000000002",
            "type": 3,
            "token": "interaction-token-1",
            "channel_id": DM,
            "user": {"id": ALICE, "username": "alice"},
            "data": {"custom_id": "n:tok7", "component_type": 2},
            "message": prompt_message,
        }),
    );
    let (incoming, done) = next(&mut running).await;
    assert_eq!(incoming.id, "700000000000000001");
    assert_eq!(incoming.sender.user, ALICE);
    assert_eq!(incoming.conversation.key, DM);
    let What::Decision {
        token,
        approve,
        ack,
    } = incoming.what
    else {
        panic!("a decision")
    };
    assert_eq!((token.as_str(), approve), ("tok7", false));
    // Discord hears of the press only once the daemon has taken it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(fake.state().callbacks.is_empty());
    done.send(()).unwrap();
    let callback = fake
        .until("the press acknowledged", |s| s.callbacks.first().cloned())
        .await;
    assert_eq!(callback["interaction_id"], "700000000000000001");
    assert_eq!(callback["token"], "interaction-token-1");
    assert_eq!(callback["body"], json!({"type": 6}));

    running
        .connector
        .send(
            &to,
            &Outgoing::Decided {
                ack,
                text: "Denied by alice.".into(),
            },
        )
        .await
        .unwrap();
    let state = fake.state();
    assert_eq!(state.edits.len(), 1);
    assert_eq!(state.edits[0]["channel_id"], DM);
    assert_eq!(state.edits[0]["message_id"], prompt_message["id"]);
    assert_eq!(state.edits[0]["body"]["components"], json!([]));
    let content = state.edits[0]["body"]["content"].as_str().unwrap();
    assert!(
        content.contains("rm -rf build") && content.ends_with("Denied by alice."),
        "{content}"
    );
}

#[tokio::test]
async fn a_dropped_connection_resumes_and_what_was_missed_is_replayed() {
    let fake = FakeDiscord::start(TOKEN).await;
    let mut running = start(&fake).await;
    fake.dispatch(
        "MESSAGE_CREATE",
        message("600000000000000020", DM, None, ALICE, "one"),
    );
    let (incoming, done) = next(&mut running).await;
    assert_eq!(text_of(&incoming), "one");
    done.send(()).unwrap();

    fake.drop_connection();
    let c = until_connection(&running, "reconnecting", |c| {
        matches!(c, Connection::Reconnecting { .. })
    })
    .await;
    let Connection::Reconnecting { reason } = c else {
        unreachable!()
    };
    assert!(reason.contains("Gateway"), "{reason}");
    // Sent while the bot is away (it waits about a second to come back).
    let missed = fake.dispatch(
        "MESSAGE_CREATE",
        message("600000000000000021", DM, None, ALICE, "two"),
    );
    until_connection(&running, "connected", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    let (incoming, done) = next(&mut running).await;
    assert_eq!(text_of(&incoming), "two");
    done.send(()).unwrap();

    let state = fake.state();
    assert_eq!(state.identifies.len(), 1, "one session");
    assert_eq!(state.resumes.len(), 1);
    assert_eq!(state.resumes[0]["session_id"], "session-1");
    assert_eq!(state.resumes[0]["token"], TOKEN);
    assert_eq!(state.connections[1], "/resume/?v=10&encoding=json");
    assert_eq!(state.replayed, vec![missed]);
}

#[tokio::test]
async fn a_zombie_connection_is_closed_and_resumed() {
    let fake = FakeDiscord::start(TOKEN).await;
    fake.state().heartbeat_interval_ms = 150;
    let running = start(&fake).await;
    fake.until("a heartbeat acknowledged", |s| {
        (!s.heartbeats.is_empty()).then_some(())
    })
    .await;
    // The READY's seq goes with the heartbeats.
    assert_eq!(fake.state().heartbeats[0], json!(1));
    fake.state().ack_heartbeats = false;
    let c = until_connection(&running, "reconnecting", |c| {
        matches!(c, Connection::Reconnecting { .. })
    })
    .await;
    let Connection::Reconnecting { reason } = c else {
        unreachable!()
    };
    assert!(reason.contains("zombie"), "{reason}");
    fake.state().ack_heartbeats = true;
    until_connection(&running, "connected", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    let state = fake.state();
    assert_eq!(state.identifies.len(), 1);
    assert_eq!(state.resumes.len(), 1);
}

#[tokio::test]
async fn an_invalid_session_identifies_anew() {
    let fake = FakeDiscord::start(TOKEN).await;
    let running = start(&fake).await;
    fake.invalidate_sessions();
    until_connection(
        &running,
        "reconnecting",
        |c| matches!(c, Connection::Reconnecting { reason } if reason.contains("op 9")),
    )
    .await;
    fake.until("a second identify", |s| {
        (s.identifies.len() == 2).then_some(())
    })
    .await;
    until_connection(&running, "connected", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    assert!(fake.state().resumes.is_empty());
}

#[tokio::test]
async fn a_refused_token_is_reported_and_not_retried_at_once() {
    let fake = FakeDiscord::start(TOKEN).await;
    let running = start(&fake).await;
    fake.close_with(4004);
    let c = until_connection(&running, "reconnecting", |c| {
        matches!(c, Connection::Reconnecting { .. })
    })
    .await;
    let Connection::Reconnecting { reason } = c else {
        unreachable!()
    };
    assert!(
        reason.contains("4004") && reason.contains("discord.token") && reason.contains("600.0 s"),
        "{reason}"
    );
    assert_eq!(fake.state().connections.len(), 1);
}

fn signed(key: &SigningKey, timestamp: i64, body: &Value, now: i64) -> WebhookRequest {
    let body = body.to_string();
    let mut message = timestamp.to_string().into_bytes();
    message.extend_from_slice(body.as_bytes());
    WebhookRequest {
        headers: vec![
            (
                "X-Signature-Ed25519".into(),
                hex::encode(key.sign(&message).to_bytes()),
            ),
            ("X-Signature-Timestamp".into(), timestamp.to_string()),
            ("Content-Type".into(), "application/json".into()),
        ],
        body: body.into_bytes(),
        now,
    }
}

#[tokio::test]
async fn http_interactions_are_checked_by_signature() {
    let fake = FakeDiscord::start(TOKEN).await;
    let key = SigningKey::from_bytes(&rand::random::<[u8; 32]>());
    let public = hex::encode(key.verifying_key().to_bytes());
    let mut running = start_with(&fake, TOKEN, &format!("  public_key: {public}\n"));
    until_connection(&running, "connected", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    let now = 1_780_000_000;

    let ping = json!({"id": "1", "type": 1, "token": "t", "application_id": "2"});
    let answer = running
        .connector
        .webhook(signed(&key, now, &ping, now))
        .await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&answer.body).unwrap(),
        json!({"type": 1})
    );

    let other = SigningKey::from_bytes(&rand::random::<[u8; 32]>());
    let answer = running
        .connector
        .webhook(signed(&other, now, &ping, now))
        .await;
    assert_eq!(answer.status, 401);
    let answer = running
        .connector
        .webhook(signed(&key, now - 3600, &ping, now))
        .await;
    assert_eq!(answer.status, 401, "an hour-old request");

    let press = json!({
        "id": "700000000000000009",
        "type": 3,
        "token": "interaction-token-9",
        "guild_id": GUILD,
        "channel_id": "800000000000000001",
        "member": {"user": {"id": ALICE, "username": "alice"}},
        "data": {"custom_id": "y:tok9", "component_type": 2},
        "message": {"id": "810000000000000001", "channel_id": "800000000000000001", "content": "Approve this call?"},
    });
    let connector = running.connector.clone();
    let request = signed(&key, now, &press, now);
    let answering = tokio::spawn(async move { connector.webhook(request).await });
    let (incoming, done) = next(&mut running).await;
    assert_eq!(incoming.sender.user, ALICE);
    assert_eq!(incoming.sender.chat.as_deref(), Some(GUILD));
    assert_eq!(incoming.conversation.key, "800000000000000001");
    assert!(matches!(
        &incoming.what,
        What::Decision { token, approve: true, .. } if token == "tok9"
    ));
    assert!(
        !answering.is_finished(),
        "answered before the daemon took it"
    );
    done.send(()).unwrap();
    let answer = answering.await.unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(
        serde_json::from_slice::<Value>(&answer.body).unwrap(),
        json!({"type": 6})
    );
}

#[tokio::test]
async fn without_a_public_key_the_webhook_is_off() {
    let fake = FakeDiscord::start(TOKEN).await;
    let running = start(&fake).await;
    let answer = running
        .connector
        .webhook(WebhookRequest {
            headers: vec![],
            body: b"{}".to_vec(),
            now: 0,
        })
        .await;
    assert_eq!(answer.status, 404);
}

#[tokio::test]
async fn a_token_refused_over_rest_waits_long() {
    let fake = FakeDiscord::start(TOKEN).await;
    let running = start_with(&fake, "not-the-token", "");
    let c = until_connection(&running, "reconnecting", |c| {
        matches!(c, Connection::Reconnecting { .. })
    })
    .await;
    let Connection::Reconnecting { reason } = c else {
        unreachable!()
    };
    assert!(
        reason.contains("refused the bot token") && reason.contains("600.0 s"),
        "{reason}"
    );
    assert!(fake.state().connections.is_empty());
}

#[tokio::test]
async fn without_thread_permission_the_answer_replies_in_the_channel() {
    let fake = FakeDiscord::start(TOKEN).await;
    fake.add_channel(json!({"id": GENERAL, "type": 0, "guild_id": GUILD}));
    let mut running = start(&fake).await;
    let mention = "600000000000000031";
    fake.dispatch(
        "MESSAGE_CREATE",
        message(
            mention,
            GENERAL,
            Some(GUILD),
            ALICE,
            &format!("<@{BOT_ID}> hi"),
        ),
    );
    let (incoming, done) = next(&mut running).await;
    done.send(()).unwrap();
    fake.fail_next(
        403,
        json!({"message": "Missing Permissions", "code": 50013}),
        None,
    );
    for i in 0..2 {
        running
            .connector
            .send(
                &incoming.conversation,
                &Outgoing::Text {
                    markdown: format!("hello {i}"),
                    key: format!("run-4.{i}"),
                },
            )
            .await
            .unwrap();
    }
    let state = fake.state();
    assert!(state.threads.is_empty());
    // One try at a thread, then replies in the channel.
    let tries = state
        .requests
        .iter()
        .filter(|r| r.ends_with("/threads"))
        .count();
    assert_eq!(tries, 1);
    assert_eq!(state.messages.len(), 2);
    for m in &state.messages {
        assert_eq!(m["channel_id"], GENERAL);
        assert_eq!(m["message_reference"]["message_id"], mention);
    }
    assert!(
        running
            .state
            .status()
            .last_error
            .unwrap()
            .contains("no thread could be started")
    );
}

#[tokio::test]
async fn no_sessions_left_today_waits_for_discords_reset() {
    let fake = FakeDiscord::start(TOKEN).await;
    fake.state().sessions_remaining = Some(0);
    let running = start_with(&fake, TOKEN, "");
    let c = until_connection(&running, "reconnecting", |c| {
        matches!(c, Connection::Reconnecting { .. })
    })
    .await;
    let Connection::Reconnecting { reason } = c else {
        unreachable!()
    };
    assert!(
        reason.contains("session_start_limit") && reason.contains("3600.0 s"),
        "{reason}"
    );
    assert!(fake.state().connections.is_empty());
}
