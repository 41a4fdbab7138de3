#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report"
)]
//! The email connector against a real mail server (Dovecot for IMAP and
//! delivery, Exim for SMTP: `support/mail_server.rs`): mail sent over SMTP
//! arrives as an update with its thread as the conversation, is marked seen
//! only once the daemon took it, answers land in the sender's mailbox as
//! replies in the thread, IDLE brings new mail without polling, and a
//! server that went away is reconnected to.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aurad::channels::email::{Email, mail};
use aurad::channels::{
    ApprovalPrompt, ChannelState, Connection, Connector, Conversation, Inbox, InboxReceiver,
    Incoming, Outgoing, What,
};
use aurad::config::channels::{PlatformConfig, parse_channel};
use support::mail_server::{ALICE, BOT, MailServer, password};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// A channel file for the test server's bot mailbox; `poll` as given.
fn channel(server: &MailServer, poll: &str) -> aurad::config::channels::email::EmailConfig {
    let raw = format!(
        "agent: helper\nallow: {{ users: [\"{ALICE}\"] }}\nemail:\n  address: {BOT}\n  imap:\n    host: 127.0.0.1\n    port: {}\n    tls: none\n    password: ${{MAIL_PASSWORD}}\n    poll: {poll}\n  smtp:\n    host: 127.0.0.1\n    port: {}\n    tls: none\n    password: ${{MAIL_PASSWORD}}\n",
        server.imap_port, server.smtp_port
    );
    let text = raw.replace("${MAIL_PASSWORD}", &password(BOT));
    let (config, diags) = parse_channel(
        "mail",
        Path::new("channels/mail.yaml"),
        &raw,
        &text,
        &["helper".to_string()],
    );
    assert!(diags.is_empty(), "{diags:?}");
    let PlatformConfig::Email(e) = config.unwrap().platform else {
        panic!("an email channel")
    };
    e
}

struct Running {
    connector: Arc<Email>,
    state: Arc<ChannelState>,
    rx: InboxReceiver,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

fn start(server: &MailServer, poll: &str) -> Running {
    let state = Arc::new(ChannelState::new("mail", "email", "helper"));
    let connector = Arc::new(
        Email::new(channel(server, poll), state.clone())
            .with_first_backoff(Duration::from_millis(100)),
    );
    let (inbox, rx) = Inbox::new(8);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(connector.clone().run(inbox, shutdown.clone()));
    Running {
        connector,
        state,
        rx,
        shutdown,
        task,
    }
}

impl Running {
    async fn next(&mut self, server: &MailServer) -> (Incoming, oneshot::Sender<()>) {
        match tokio::time::timeout(Duration::from_secs(30), self.rx.recv()).await {
            Ok(Some(got)) => got,
            other => panic!(
                "no update within 30s ({other:?}); state {:?}{}",
                self.state.status(),
                server.logs()
            ),
        }
    }

    async fn wait_connection(&self, want: impl Fn(&Connection) -> bool, what: &str) -> Connection {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let c = self.state.status().connection;
            if want(&c) {
                return c;
            }
            assert!(
                Instant::now() < deadline,
                "the connection never became {what}: {c:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the connector stops at shutdown")
            .unwrap();
        assert_eq!(self.state.status().connection, Connection::Stopped);
    }
}

fn text(incoming: &Incoming) -> &str {
    match &incoming.what {
        What::Message { text } => text,
        other => panic!("a message, not {other:?}"),
    }
}

const FIRST: &str = "From: Alice <alice@example.test>\nTo: agent@example.test\nSubject: Disk full\nMessage-ID: <m1@example.test>\nContent-Type: text/plain; charset=utf-8\n\nThe disk on web-1 is full.\nWhat should I delete?\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_arrives_as_its_thread_and_is_seen_only_once_taken() {
    let Some(server) = MailServer::start("a_mail_arrives") else {
        return;
    };
    server.send(ALICE, BOT, FIRST).await;
    let mut running = start(&server, "1h");
    let (incoming, done) = running.next(&server).await;
    assert_eq!(incoming.id, "m1@example.test");
    assert_eq!(incoming.sender.user, ALICE);
    assert_eq!(incoming.sender.chat, None);
    assert_eq!(incoming.conversation.key, "m1@example.test");
    assert_eq!(
        incoming.conversation.reply,
        serde_json::json!({"to": ALICE, "subject": "Re: Disk full",
            "in_reply_to": "<m1@example.test>", "references": ["<m1@example.test>"]})
    );
    assert_eq!(
        text(&incoming),
        "The disk on web-1 is full.\nWhat should I delete?"
    );
    assert_eq!(running.state.status().connection, Connection::Connected);

    // Not taken yet: the mail stays unseen on the server.
    let stored = server.mailbox(BOT).await;
    assert_eq!(stored.len(), 1);
    assert!(!stored[0].seen, "seen before the daemon took it");
    done.send(()).unwrap();
    server
        .wait_for(BOT, "the mail marked seen", |m| m.seen)
        .await;
    // Not handed on twice.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), running.rx.recv())
            .await
            .is_err()
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_reply_in_the_thread_and_the_reply_joins_it() {
    let Some(server) = MailServer::start("answers_reply") else {
        return;
    };
    server.send(ALICE, BOT, FIRST).await;
    let mut running = start(&server, "1h");
    let (first, done) = running.next(&server).await;
    done.send(()).unwrap();
    assert_eq!(running.connector.max_message_len(), 100_000);
    running.connector.typing(&first.conversation).await.unwrap();

    let answer = Outgoing::Text {
        markdown: "Delete the old logs in **/var/log/app**.".into(),
        key: "run-1.0".into(),
    };
    running
        .connector
        .send(&first.conversation, &answer)
        .await
        .unwrap();
    let reply = server
        .wait_for(ALICE, "the answer", |m| m.raw.contains("old logs"))
        .await;
    let id = mail::message_id("run-1.0", BOT);
    assert_eq!(reply.header("Message-ID").as_deref(), Some(id.as_str()));
    assert_eq!(
        reply.header("In-Reply-To").as_deref(),
        Some("<m1@example.test>")
    );
    assert_eq!(
        reply.header("References").as_deref(),
        Some("<m1@example.test>")
    );
    assert_eq!(reply.header("Subject").as_deref(), Some("Re: Disk full"));
    assert_eq!(reply.header("From").as_deref(), Some(BOT));
    assert_eq!(reply.header("To").as_deref(), Some(ALICE));
    assert!(reply.body().contains("**/var/log/app**"), "{}", reply.raw);

    // A retried send is the same message to mail clients.
    running
        .connector
        .send(&first.conversation, &answer)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let copies = loop {
        let copies: Vec<_> = server
            .mailbox(ALICE)
            .await
            .into_iter()
            .filter(|m| m.raw.contains("old logs"))
            .collect();
        if copies.len() == 2 || Instant::now() > deadline {
            break copies;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(copies.len(), 2);
    assert_eq!(
        copies[0].header("Message-ID"),
        copies[1].header("Message-ID")
    );

    // Alice answers in the thread, quoting: the same conversation, her
    // words alone.
    let follow_up = format!(
        "From: alice@example.test\nTo: agent@example.test\nSubject: Re: Disk full\nMessage-ID: <m2@example.test>\nIn-Reply-To: {id}\nReferences: <m1@example.test> {id}\n\nAnd the cache?\n\nOn Sun, 6 Dec 2026 at 16:00, agent@example.test wrote:\n> Delete the old logs in **/var/log/app**.\n"
    );
    server.send(ALICE, BOT, &follow_up).await;
    let (second, done) = running.next(&server).await;
    done.send(()).unwrap();
    assert_eq!(second.id, "m2@example.test");
    assert_eq!(second.conversation.key, first.conversation.key);
    assert_eq!(text(&second), "And the cache?");
    assert_eq!(
        second.conversation.reply["references"],
        serde_json::json!(["<m1@example.test>", id, "<m2@example.test>"])
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_asks_for_a_reply_word() {
    let Some(server) = MailServer::start("an_approval") else {
        return;
    };
    let conversation = Conversation {
        key: "m1@example.test".into(),
        reply: serde_json::json!({"to": ALICE, "subject": "Re: Disk full",
            "in_reply_to": "<m1@example.test>", "references": ["<m1@example.test>"]}),
    };
    let state = Arc::new(ChannelState::new("mail", "email", "helper"));
    let connector = Email::new(channel(&server, "1h"), state);
    let prompt = ApprovalPrompt {
        run_id: "run-7".into(),
        tool: "bash".into(),
        arguments: "{\"command\": \"rm -rf /var/log/app/old\"}".into(),
        token: "tok7".into(),
        approve_word: "approve".into(),
        deny_word: "deny".into(),
    };
    connector
        .send(&conversation, &Outgoing::Approval(prompt))
        .await
        .unwrap();
    let asked = server
        .wait_for(ALICE, "the approval request", |m| m.raw.contains("bash"))
        .await;
    let body = asked.body().replace("=\r\n", "");
    assert!(
        body.contains("Reply with the single word APPROVE to run it, or DENY to refuse"),
        "{}",
        asked.raw
    );
    assert!(body.contains("rm -rf /var/log/app/old"), "{}", asked.raw);
    assert_eq!(
        asked.header("Message-ID").as_deref(),
        Some(mail::message_id("approval:tok7", BOT).as_str())
    );
    assert_eq!(
        asked.header("In-Reply-To").as_deref(),
        Some("<m1@example.test>")
    );

    connector
        .send(
            &conversation,
            &Outgoing::Decided {
                ack: None,
                text: "Approved: bash runs.".into(),
            },
        )
        .await
        .unwrap();
    let decided = server
        .wait_for(ALICE, "the decision", |m| {
            m.raw.contains("Approved: bash runs.")
        })
        .await;
    assert_eq!(decided.header("Subject").as_deref(), Some("Re: Disk full"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_brings_new_mail_without_polling_and_loops_are_left_out() {
    let Some(server) = MailServer::start("idle") else {
        return;
    };
    let capabilities = server.capabilities(BOT).await;
    assert!(capabilities.iter().any(|c| c == "IDLE"), "{capabilities:?}");
    // Polling once an hour: only IDLE can bring the mail in time.
    let mut running = start(&server, "1h");
    running
        .wait_connection(|c| *c == Connection::Connected, "connected")
        .await;
    // Our own answer coming back, and an out-of-office: neither is a message.
    server
        .send(
            BOT,
            BOT,
            "From: agent@example.test\nTo: agent@example.test\nSubject: loop\nMessage-ID: <own@example.test>\n\nmine\n",
        )
        .await;
    server
        .send(
            ALICE,
            BOT,
            "From: alice@example.test\nTo: agent@example.test\nSubject: Away\nAuto-Submitted: auto-replied\nMessage-ID: <away@example.test>\n\nI am away.\n",
        )
        .await;
    server
        .send(
            ALICE,
            BOT,
            "From: alice@example.test\nTo: agent@example.test\nSubject: Hello\nMessage-ID: <hello@example.test>\n\nhello there\n",
        )
        .await;
    let started = Instant::now();
    let (incoming, done) = running.next(&server).await;
    assert_eq!(incoming.id, "hello@example.test");
    assert!(started.elapsed() < Duration::from_secs(25));
    done.send(()).unwrap();
    // The skipped ones are marked seen too, so they are not read again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.mailbox(BOT).await.iter().any(|m| !m.seen) {
        assert!(
            Instant::now() < deadline,
            "mail left unseen: {:#?}",
            server.mailbox(BOT).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // And a second mail, while idling.
    server
        .send(
            ALICE,
            BOT,
            "From: alice@example.test\nTo: agent@example.test\nSubject: Again\nMessage-ID: <again@example.test>\n\nagain\n",
        )
        .await;
    let (again, done) = running.next(&server).await;
    assert_eq!(again.id, "again@example.test");
    done.send(()).unwrap();
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_went_away_is_reconnected_to() {
    let Some(mut server) = MailServer::start("reconnect") else {
        return;
    };
    let mut running = start(&server, "1h");
    running
        .wait_connection(|c| *c == Connection::Connected, "connected")
        .await;
    server.stop_imap();
    let dropped = running
        .wait_connection(
            |c| matches!(c, Connection::Reconnecting { .. }),
            "reconnecting",
        )
        .await;
    let Connection::Reconnecting { reason } = dropped else {
        unreachable!()
    };
    assert!(reason.contains("IMAP"), "{reason}");
    assert_eq!(
        running.state.status().last_error.as_deref(),
        Some(reason.as_str())
    );
    // Back: connected again, and mail comes in.
    server.start_imap();
    running
        .wait_connection(|c| *c == Connection::Connected, "connected again")
        .await;
    server.send(ALICE, BOT, FIRST).await;
    let (incoming, done) = running.next(&server).await;
    assert_eq!(incoming.id, "m1@example.test");
    done.send(()).unwrap();

    // A restart under an idling connection: dropped, then back.
    server.restart_imap();
    server
        .send(
            ALICE,
            BOT,
            "From: alice@example.test\nTo: agent@example.test\nSubject: After\nMessage-ID: <after@example.test>\n\nstill there?\n",
        )
        .await;
    let (after, done) = running.next(&server).await;
    assert_eq!(after.id, "after@example.test");
    done.send(()).unwrap();
    running
        .wait_connection(
            |c| *c == Connection::Connected,
            "connected after the restart",
        )
        .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_idle_is_polled() {
    let Some(server) = MailServer::start_without_idle("polled") else {
        return;
    };
    let capabilities = server.capabilities(BOT).await;
    assert!(
        !capabilities.iter().any(|c| c == "IDLE"),
        "{capabilities:?}"
    );
    let mut running = start(&server, "1s");
    running
        .wait_connection(|c| *c == Connection::Connected, "connected")
        .await;
    server
        .send(
            ALICE,
            BOT,
            "From: alice@example.test\nTo: agent@example.test\nSubject: Poll\nMessage-ID: <poll@example.test>\n\nare you polling?\n",
        )
        .await;
    let (incoming, done) = running.next(&server).await;
    assert_eq!(text(&incoming), "are you polling?");
    done.send(()).unwrap();
    server
        .wait_for(BOT, "the mail marked seen", |m| m.seen)
        .await;
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_renewed_many_times_still_brings_mail() {
    let Some(server) = MailServer::start("renew") else {
        return;
    };
    let state = Arc::new(ChannelState::new("mail", "email", "helper"));
    let connector = Arc::new(
        Email::new(channel(&server, "1h"), state.clone())
            .with_idle_renew(Duration::from_millis(100)),
    );
    let (inbox, mut rx) = Inbox::new(8);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(connector.clone().run(inbox, shutdown.clone()));
    // Ten renewals (IDLE ended, DONE, a search, IDLE again) on one
    // connection, which stays up.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(state.status().connection, Connection::Connected);
    assert_eq!(state.status().last_error, None);
    server
        .send(
            ALICE,
            BOT,
            "From: alice@example.test\nTo: agent@example.test\nSubject: Renewed\nMessage-ID: <renewed@example.test>\n\nstill idling?\n",
        )
        .await;
    let (incoming, done) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("the mail within 30s")
        .unwrap();
    assert_eq!(text(&incoming), "still idling?");
    done.send(()).unwrap();
    shutdown.cancel();
    task.await.unwrap();
    // One login for all of it.
    let logins = server
        .logs()
        .lines()
        .filter(|l| l.contains(&format!("Login: user=<{BOT}>")))
        .count();
    assert_eq!(logins, 1, "{}", server.logs());
}
