#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report"
)]
//! The Discord connector against a fake Discord (`support/fake_discord.rs`),
//! without the daemon: conversations (DMs, a thread per mention, the bot's
//! threads known after a restart, replies when no thread can be started),
//! sends (nonces so a retry shows once, 429s and their wait, Discord's
//! 2,000 characters), approval buttons and the press acknowledged only
//! once taken, HTTP interactions checked by signature. The Gateway's
//! connection is `channel_discord_gateway.rs`.

mod support;

use std::time::Duration;

use aurad::channels::{
    ApprovalPrompt, ChannelError, Connection, Conversation, Outgoing, WebhookRequest, What,
};
use ed25519_dalek::{Signer, SigningKey};
use serde_json::{Value, json};
use support::fake_discord::connector::{
    ALICE, TOKEN, next, start, start_with, text_of, until_connection,
};
use support::fake_discord::{BOT_ID, FakeDiscord};

const GUILD: &str = "300000000000000001";
const GENERAL: &str = "300000000000000002";
const DM: &str = "400000000000000001";

fn message(id: &str, channel: &str, guild: Option<&str>, author: &str, content: &str) -> Value {
    support::fake_discord::message_create(id, channel, guild, author, content)
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
