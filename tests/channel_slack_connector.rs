#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report"
)]
//! The Slack connector driven directly (no daemon) against a fake Slack
//! (`support/fake_slack.rs`); `channel_slack.rs` is the daemon end to end:
//! Socket Mode (updates handed on, acknowledged only once taken, the
//! connection dropped and refreshed), the Web API (threads, mrkdwn,
//! approval buttons and their update, rate limits), and the Events API
//! mode's signed webhook.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aurad::channels::split::split_message;
use aurad::channels::{
    ApprovalPrompt, ChannelError, ChannelState, Connection, Connector, Conversation, Inbox,
    InboxReceiver, Incoming, Outgoing, WebhookRequest, What,
};
use aurad::config::channels::parse_channel;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use support::fake_slack::{APP_TOKEN, BOT_TOKEN, BOT_USER, FakeSlack, SIGNING_SECRET};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

struct Running {
    fake: FakeSlack,
    state: Arc<ChannelState>,
    connector: Arc<dyn Connector>,
    rx: InboxReceiver,
    shutdown: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// `slack:` fields after the bot token, `${VAR}`s as written.
fn config(
    fake: &FakeSlack,
    fields: &str,
    app_token: &str,
) -> aurad::config::channels::ChannelConfig {
    let raw = format!(
        "agent: helper\nallow: {{ anyone: true }}\nslack:\n  bot_token: ${{SLACK_BOT}}\n{fields}  api_url: {}\n",
        fake.api_url
    );
    let text = raw
        .replace("${SLACK_BOT}", BOT_TOKEN)
        .replace("${SLACK_APP}", app_token)
        .replace("${SLACK_SIGN}", SIGNING_SECRET);
    let (channel, diags) = parse_channel(
        "team",
        Path::new("channels/team.yaml"),
        &raw,
        &text,
        &["helper".to_string()],
    );
    channel.unwrap_or_else(|| panic!("the channel file does not load: {diags:?}"))
}

async fn start_with(fields: &str, app_token: &str) -> Running {
    let fake = FakeSlack::start().await;
    let config = config(&fake, fields, app_token);
    let state = Arc::new(ChannelState::new("team", "slack", "helper"));
    let connector = aurad::channels::connector(&config, state.clone(), reqwest::Client::new());
    let (inbox, rx) = Inbox::new(8);
    let shutdown = CancellationToken::new();
    tokio::spawn(connector.clone().run(inbox, shutdown.clone()));
    Running {
        fake,
        state,
        connector,
        rx,
        shutdown,
    }
}

async fn start_socket() -> Running {
    let r = start_with("  app_token: ${SLACK_APP}\n", APP_TOKEN).await;
    wait_connection(&r.state, "connected", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    r
}

async fn wait_connection(
    state: &ChannelState,
    what: &str,
    check: impl Fn(&Connection) -> bool,
) -> Connection {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let c = state.status().connection;
        if check(&c) {
            return c;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the channel never got {what}; it is {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn next(rx: &mut InboxReceiver) -> (Incoming, oneshot::Sender<()>) {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no update reached the inbox within 10 s")
        .expect("the inbox closed")
}

fn mention(text: &str, ts: &str, thread_ts: Option<&str>) -> Value {
    let mut e = json!({"type": "app_mention", "user": "U1", "channel": "C1",
        "text": text, "ts": ts, "event_ts": ts});
    if let Some(t) = thread_ts {
        e["thread_ts"] = json!(t);
    }
    e
}

fn thread(channel: &str, ts: &str) -> Conversation {
    Conversation {
        key: format!("{channel}/{ts}"),
        reply: json!({"channel": channel, "thread_ts": ts}),
    }
}

#[tokio::test]
async fn a_mention_and_a_direct_message_arrive_and_are_acknowledged_only_once_taken() {
    let mut r = start_socket().await;
    let env = r.fake.push_event(
        "Ev1",
        mention(&format!("<@{BOT_USER}> what is 1 &lt; 2?"), "100.1", None),
    );
    let (incoming, done) = next(&mut r.rx).await;
    assert_eq!(incoming.id, "Ev1");
    assert_eq!(incoming.sender.user, "U1");
    assert_eq!(incoming.sender.chat.as_deref(), Some("C1"));
    assert_eq!(incoming.conversation, thread("C1", "100.1"));
    assert_eq!(
        incoming.what,
        What::Message {
            text: "what is 1 < 2?".into()
        }
    );
    // Slack is told only once the daemon has taken the update.
    assert!(r.fake.acks().is_empty(), "acknowledged before it was taken");
    done.send(()).unwrap();
    r.fake.wait_ack(&env).await;

    // The bot's own messages and other bots' are acknowledged, not handed on.
    let own = r.fake.push_event(
        "Ev2",
        json!({"type": "message", "channel_type": "im", "channel": "D1", "user": BOT_USER,
            "text": "my answer", "ts": "101.0"}),
    );
    let bot = r.fake.push_event(
        "Ev3",
        json!({"type": "message", "channel_type": "im", "channel": "D1", "bot_id": "B9",
            "subtype": "bot_message", "text": "beep", "ts": "102.0"}),
    );
    r.fake.wait_ack(&own).await;
    r.fake.wait_ack(&bot).await;
    assert!(r.rx.try_recv().is_err(), "a bot's message was handed on");

    // A direct message; a reply in a thread stays in that thread.
    r.fake.push_event(
        "Ev4",
        json!({"type": "message", "channel_type": "im", "channel": "D1", "user": "U1",
            "text": "hello", "ts": "103.0"}),
    );
    let (dm, done) = next(&mut r.rx).await;
    assert_eq!(dm.conversation, thread("D1", "103.0"));
    assert_eq!(
        dm.what,
        What::Message {
            text: "hello".into()
        }
    );
    done.send(()).unwrap();
    r.fake.push_event(
        "Ev5",
        mention(&format!("<@{BOT_USER}> more"), "104.0", Some("100.1")),
    );
    let (reply, done) = next(&mut r.rx).await;
    assert_eq!(reply.conversation.key, "C1/100.1");
    done.send(()).unwrap();

    let auth = r.fake.calls("auth.test");
    assert_eq!(auth.len(), 1);
    assert_eq!(auth[0].token, BOT_TOKEN);
    assert_eq!(r.fake.calls("apps.connections.open")[0].token, APP_TOKEN);
}

#[tokio::test]
async fn answers_go_to_the_thread_in_mrkdwn_and_a_long_one_is_cut_to_slacks_4000() {
    let r = start_socket().await;
    let to = thread("C1", "100.1");
    r.connector
        .send(
            &to,
            &Outgoing::Text {
                markdown: "**Yes**, use `x < y` and [the docs](https://example.com).".into(),
                key: "run1.0".into(),
            },
        )
        .await
        .unwrap();
    let posts = r.fake.wait_calls("chat.postMessage", 1).await;
    assert_eq!(posts[0].token, BOT_TOKEN);
    assert_eq!(posts[0].body["channel"], "C1");
    assert_eq!(posts[0].body["thread_ts"], "100.1");
    assert_eq!(
        posts[0].body["text"].as_str().unwrap().trim(),
        "*Yes*, use `x &lt; y` and <https://example.com|the docs>."
    );

    // Slack recommends at most 4,000 characters of `text`
    // (chat.postMessage, "Truncating content"): the caller splits to that.
    assert_eq!(r.connector.max_message_len(), 4000);
    let answer: String = (0..1000).map(|i| format!("w{:03} ", i % 1000)).collect();
    assert_eq!(answer.chars().count(), 5000);
    let pieces = split_message(&answer, r.connector.max_message_len());
    assert_eq!(pieces.len(), 2);
    for (i, piece) in pieces.iter().enumerate() {
        r.connector
            .send(
                &to,
                &Outgoing::Text {
                    markdown: piece.clone(),
                    key: format!("run2.{i}"),
                },
            )
            .await
            .unwrap();
    }
    let posts = r.fake.wait_calls("chat.postMessage", 3).await;
    let sent: Vec<&str> = posts[1..]
        .iter()
        .map(|c| c.body["text"].as_str().unwrap())
        .collect();
    assert!(sent.iter().all(|t| t.chars().count() <= 4000));
    assert_eq!(
        sent.join(" ").split_whitespace().count(),
        answer.split_whitespace().count()
    );
    assert!(posts[1..].iter().all(|c| c.body["thread_ts"] == "100.1"));

    // Slack has no typing indicator for a bot outside assistant threads.
    r.connector.typing(&to).await.unwrap();
}

#[tokio::test]
async fn an_approval_is_two_buttons_and_a_press_comes_back_and_updates_the_prompt() {
    let mut r = start_socket().await;
    let to = thread("C1", "100.1");
    r.connector
        .send(
            &to,
            &Outgoing::Approval(ApprovalPrompt {
                run_id: "run1".into(),
                tool: "shell".into(),
                arguments: r#"{"command":"rm -rf build"}"#.into(),
                token: "tok42".into(),
                approve_word: "approve".into(),
                deny_word: "deny".into(),
            }),
        )
        .await
        .unwrap();
    let post = r.fake.wait_calls("chat.postMessage", 1).await.remove(0);
    assert_eq!(post.body["thread_ts"], "100.1");
    assert!(post.body["text"].as_str().unwrap().contains("shell"));
    let blocks = post.body["blocks"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "section");
    assert_eq!(blocks[0]["text"]["type"], "mrkdwn");
    let section = blocks[0]["text"]["text"].as_str().unwrap();
    assert!(
        section.contains("shell") && section.contains("rm -rf build"),
        "{section}"
    );
    assert_eq!(blocks[1]["type"], "actions");
    let buttons = blocks[1]["elements"].as_array().unwrap();
    assert_eq!(
        buttons
            .iter()
            .map(|b| (
                b["text"]["text"].as_str().unwrap(),
                b["style"].as_str().unwrap(),
                b["value"].as_str().unwrap()
            ))
            .collect::<Vec<_>>(),
        vec![
            ("Approve", "primary", "y:tok42"),
            ("Deny", "danger", "n:tok42")
        ]
    );

    // The press, as Slack sends it over Socket Mode.
    let env = r.fake.push_interactive(json!({
        "type": "block_actions",
        "trigger_id": "13345224609.738474920.8088930838d88f008e0",
        "user": {"id": "U1", "username": "ann", "team_id": "T1"},
        "team": {"id": "T1"},
        "api_app_id": "A1",
        "container": {"type": "message", "message_ts": "1700000000.000009",
            "channel_id": "C1", "is_ephemeral": false, "thread_ts": "100.1"},
        "channel": {"id": "C1", "name": "general"},
        "message": {"type": "message", "ts": "1700000000.000009", "thread_ts": "100.1",
            "text": post.body["text"], "blocks": post.body["blocks"]},
        "response_url": "https://hooks.slack.com/actions/T1/1/x",
        "actions": [{"action_id": "aurad_approve", "block_id": "aurad_approval",
            "type": "button", "value": "y:tok42", "action_ts": "1700000001.000100",
            "text": {"type": "plain_text", "text": "Approve"}}],
    }));
    let (press, done) = next(&mut r.rx).await;
    assert_eq!(press.id, "action:13345224609.738474920.8088930838d88f008e0");
    assert_eq!(press.sender.user, "U1");
    assert_eq!(press.conversation.key, "C1/100.1");
    let What::Decision {
        token,
        approve,
        ack,
    } = press.what
    else {
        panic!("not a decision: {:?}", press.what)
    };
    assert_eq!((token.as_str(), approve), ("tok42", true));
    assert!(r.fake.acks().is_empty());
    done.send(()).unwrap();
    r.fake.wait_ack(&env).await;

    r.connector
        .send(
            &to,
            &Outgoing::Decided {
                ack,
                text: "Approved by ann.".into(),
            },
        )
        .await
        .unwrap();
    let update = r.fake.wait_calls("chat.update", 1).await.remove(0);
    assert_eq!(update.token, BOT_TOKEN);
    assert_eq!(update.body["channel"], "C1");
    assert_eq!(update.body["ts"], "1700000000.000009");
    assert_eq!(
        update.body["text"].as_str().unwrap().trim(),
        "Approved by ann."
    );
    let blocks = update.body["blocks"].as_array().unwrap();
    assert!(
        blocks.iter().all(|b| b["type"] != "actions"),
        "the buttons are still there: {blocks:?}"
    );
    assert!(
        blocks[0]["text"]["text"]
            .as_str()
            .unwrap()
            .contains("rm -rf build")
    );
    assert!(update.body.to_string().contains("Approved by ann."));
}

#[tokio::test]
async fn a_rate_limit_is_retryable_with_its_wait_and_a_refused_token_is_permanent() {
    let r = start_socket().await;
    let to = thread("C1", "100.1");
    let text = Outgoing::Text {
        markdown: "hi".into(),
        key: "k.0".into(),
    };
    r.fake.rate_limit_once("chat.postMessage", 7);
    match r.connector.send(&to, &text).await {
        Err(ChannelError::Retryable { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)));
        }
        other => panic!("a 429 is retryable with its Retry-After: {other:?}"),
    }
    r.fake.fail_once("chat.postMessage", "invalid_auth");
    match r.connector.send(&to, &text).await {
        Err(ChannelError::Permanent(m)) => assert!(m.contains("invalid_auth"), "{m}"),
        other => panic!("invalid_auth is permanent: {other:?}"),
    }
    r.fake.fail_once("chat.postMessage", "internal_error");
    assert!(matches!(
        r.connector.send(&to, &text).await,
        Err(ChannelError::Retryable { .. })
    ));
    r.connector.send(&to, &text).await.unwrap();
}

#[tokio::test]
async fn a_dropped_connection_reconnects_and_what_was_not_acknowledged_comes_again() {
    let mut r = start_socket().await;
    // An update handed on, then the connection lost before its
    // acknowledgement could go: Slack sends it again on the next one (the
    // daemon's claim makes the second copy a duplicate).
    let env = r
        .fake
        .push_event("Ev1", mention(&format!("<@{BOT_USER}> hi"), "100.1", None));
    let (first, done) = next(&mut r.rx).await;
    assert_eq!(first.id, "Ev1");
    r.fake.drop_connection();
    done.send(()).unwrap();
    let c = wait_connection(&r.state, "reconnecting", |c| {
        matches!(c, Connection::Reconnecting { .. })
    })
    .await;
    let Connection::Reconnecting { reason } = c else {
        unreachable!()
    };
    assert!(reason.contains("Socket Mode"), "{reason}");
    assert!(r.state.status().last_error.is_some());
    r.fake.wait_connections(2).await;
    wait_connection(&r.state, "connected again", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    let (again, done) = next(&mut r.rx).await;
    assert_eq!(again.id, "Ev1", "the unacknowledged update comes again");
    done.send(()).unwrap();
    r.fake.wait_ack(&env).await;

    // And the new connection carries new updates.
    let env = r.fake.push_event(
        "Ev2",
        mention(&format!("<@{BOT_USER}> still there?"), "105.0", None),
    );
    let (later, done) = next(&mut r.rx).await;
    assert_eq!(later.id, "Ev2");
    done.send(()).unwrap();
    r.fake.wait_ack(&env).await;
    assert_eq!(r.fake.calls("apps.connections.open").len(), 2);
}

#[tokio::test]
async fn an_update_not_taken_before_a_stop_reaches_the_next_run() {
    let mut r = start_socket().await;
    let env = r
        .fake
        .push_event("Ev1", mention(&format!("<@{BOT_USER}> hi"), "100.1", None));
    let (first, _not_taken) = next(&mut r.rx).await;
    assert_eq!(first.id, "Ev1");
    // The daemon stops (or dies) before claiming it.
    r.shutdown.cancel();
    wait_connection(&r.state, "stopped", |c| matches!(c, Connection::Stopped)).await;
    assert!(r.fake.acks().is_empty());

    // The next run of the channel gets it from Slack again.
    let state = Arc::new(ChannelState::new("team", "slack", "helper"));
    let config = config(&r.fake, "  app_token: ${SLACK_APP}\n", APP_TOKEN);
    let connector = aurad::channels::connector(&config, state.clone(), reqwest::Client::new());
    let (inbox, mut rx) = Inbox::new(8);
    let shutdown = CancellationToken::new();
    tokio::spawn(connector.run(inbox, shutdown.clone()));
    let (again, done) = next(&mut rx).await;
    assert_eq!(again.id, "Ev1");
    done.send(()).unwrap();
    r.fake.wait_ack(&env).await;
    shutdown.cancel();
}

#[tokio::test]
async fn a_disconnect_asks_for_a_new_connection_at_once() {
    let mut r = start_socket().await;
    r.fake.disconnect("refresh_requested");
    r.fake.wait_connections(2).await;
    assert_eq!(r.fake.calls("apps.connections.open").len(), 2);
    assert!(
        r.state
            .status()
            .last_error
            .is_some_and(|e| e.contains("refresh_requested"))
    );
    wait_connection(&r.state, "connected again", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    let env = r
        .fake
        .push_event("Ev9", mention(&format!("<@{BOT_USER}> hi"), "200.0", None));
    let (incoming, done) = next(&mut r.rx).await;
    assert_eq!(incoming.id, "Ev9");
    done.send(()).unwrap();
    r.fake.wait_ack(&env).await;
}

#[tokio::test]
async fn a_refused_app_token_is_reported_while_the_connector_retries() {
    let r = start_with("  app_token: ${SLACK_APP}\n", "xapp-1-not-the-right-one").await;
    let c = wait_connection(&r.state, "reconnecting", |c| {
        matches!(c, Connection::Reconnecting { .. })
    })
    .await;
    let Connection::Reconnecting { reason } = c else {
        unreachable!()
    };
    assert!(
        reason.contains("invalid_auth") && reason.contains("slack.app_token"),
        "{reason}"
    );
    assert_eq!(r.fake.connections(), 0);
}

fn signed(body: &str, content_type: &str, at: i64, now: i64) -> WebhookRequest {
    let mut mac = Hmac::<Sha256>::new_from_slice(SIGNING_SECRET.as_bytes()).unwrap();
    mac.update(format!("v0:{at}:{body}").as_bytes());
    let sig = format!("v0={}", hex::encode(mac.finalize().into_bytes()));
    WebhookRequest {
        headers: vec![
            ("Content-Type".into(), content_type.into()),
            ("X-Slack-Request-Timestamp".into(), at.to_string()),
            ("X-Slack-Signature".into(), sig),
        ],
        body: body.as_bytes().to_vec(),
        now,
    }
}

#[tokio::test]
async fn events_mode_checks_signatures_and_hands_on_events_and_presses() {
    let mut r = start_with(
        "  mode: events\n  signing_secret: ${SLACK_SIGN}\n",
        APP_TOKEN,
    )
    .await;
    wait_connection(&r.state, "connected", |c| {
        matches!(c, Connection::Connected)
    })
    .await;
    let now = 1_765_000_000;
    let json_type = "application/json";

    let challenge = r#"{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    let answer = r
        .connector
        .webhook(signed(challenge, json_type, now, now))
        .await;
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.body,
        b"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P".to_vec()
    );

    let callback = json!({"type": "event_callback", "event_id": "Ev7", "team_id": "T1",
        "authorizations": [{"user_id": BOT_USER, "is_bot": true}],
        "event": mention(&format!("<@{BOT_USER}> hi there"), "300.0", None)})
    .to_string();
    let connector = r.connector.clone();
    let request = signed(&callback, json_type, now - 10, now);
    let answered = tokio::spawn(async move { connector.webhook(request).await });
    let (incoming, done) = next(&mut r.rx).await;
    assert_eq!(incoming.id, "Ev7");
    assert_eq!(incoming.conversation.key, "C1/300.0");
    assert_eq!(
        incoming.what,
        What::Message {
            text: "hi there".into()
        }
    );
    assert!(
        !answered.is_finished(),
        "answered before the update was taken"
    );
    done.send(()).unwrap();
    assert_eq!(answered.await.unwrap().status, 200);

    // A bad signature, and a good one on a request older than 5 minutes.
    let mut forged = signed(&callback, json_type, now, now);
    forged.body = callback.replace("hi there", "rm -rf /").into_bytes();
    assert_eq!(r.connector.webhook(forged).await.status, 401);
    let old = r
        .connector
        .webhook(signed(&callback, json_type, now - 301, now))
        .await;
    assert_eq!(old.status, 401);
    assert!(String::from_utf8_lossy(&old.body).contains("5 minutes"));
    let mut unsigned = signed(&callback, json_type, now, now);
    unsigned.headers.retain(|(k, _)| k != "X-Slack-Signature");
    assert_eq!(r.connector.webhook(unsigned).await.status, 401);
    assert!(r.rx.try_recv().is_err());

    // A button press, posted as a form with one `payload` field.
    let payload = json!({"type": "block_actions", "trigger_id": "T.77",
        "user": {"id": "U1", "username": "ann"}, "channel": {"id": "C1"},
        "container": {"type": "message", "message_ts": "301.0", "channel_id": "C1"},
        "message": {"ts": "301.0", "thread_ts": "300.0", "blocks": []},
        "actions": [{"type": "button", "value": "n:tok5", "action_ts": "302.0"}]});
    let form: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("payload", &payload.to_string())
        .finish();
    let connector = r.connector.clone();
    let request = signed(&form, "application/x-www-form-urlencoded", now, now);
    let answered = tokio::spawn(async move { connector.webhook(request).await });
    let (press, done) = next(&mut r.rx).await;
    assert_eq!(press.id, "action:T.77");
    assert_eq!(press.conversation.key, "C1/300.0");
    assert!(matches!(
        press.what,
        What::Decision { ref token, approve: false, .. } if token == "tok5"
    ));
    done.send(()).unwrap();
    assert_eq!(answered.await.unwrap().status, 200);
}

#[tokio::test]
async fn socket_mode_takes_no_webhook_requests() {
    let r = start_socket().await;
    let answer = r
        .connector
        .webhook(signed("{}", "application/json", 1, 1))
        .await;
    assert_eq!(answer.status, 404);
}
