#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report"
)]
//! The email connector over TLS: IMAP with TLS from the first byte and
//! SMTP upgraded with STARTTLS, then the other way round, against the test
//! mail server with a certificate for `localhost` signed by a CA of the
//! test's own. The certificate is checked by the platform verifier, which
//! reads the system's trusted roots; `SSL_CERT_FILE` points it at the test
//! CA, set before anything else runs (hence a test binary of its own, with
//! one test).

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aurad::channels::email::Email;
use aurad::channels::{ChannelState, Connection, Connector, Inbox, Outgoing, What};
use aurad::config::channels::{PlatformConfig, parse_channel};
use support::mail_server::{ALICE, BOT, MailServer, password};
use tokio_util::sync::CancellationToken;

fn config(imap: (u16, &str), smtp: (u16, &str)) -> aurad::config::channels::email::EmailConfig {
    let raw = format!(
        "agent: helper\nallow: {{ users: [\"{ALICE}\"] }}\nemail:\n  address: {BOT}\n  imap:\n    host: localhost\n    port: {}\n    tls: {}\n    password: ${{P}}\n  smtp:\n    host: localhost\n    port: {}\n    tls: {}\n    password: ${{P}}\n",
        imap.0, imap.1, smtp.0, smtp.1
    );
    let text = raw.replace("${P}", &password(BOT));
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

async fn round_trip(server: &MailServer, imap: (u16, &str), smtp: (u16, &str), n: usize) {
    let state = Arc::new(ChannelState::new("mail", "email", "helper"));
    let connector = Arc::new(Email::new(config(imap, smtp), state.clone()));
    let (inbox, mut rx) = Inbox::new(4);
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(connector.clone().run(inbox, shutdown.clone()));
    let id = format!("<tls{n}@example.test>");
    server
        .send(
            ALICE,
            BOT,
            &format!(
                "From: {ALICE}\nTo: {BOT}\nSubject: Over TLS\nMessage-ID: {id}\n\nsecret {n}\n"
            ),
        )
        .await;
    let (incoming, done) = tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "nothing over IMAP {imap:?}: {:?}{}",
                state.status(),
                server.logs()
            )
        })
        .unwrap();
    assert_eq!(
        incoming.what,
        What::Message {
            text: format!("secret {n}")
        }
    );
    assert_eq!(state.status().connection, Connection::Connected);
    done.send(()).unwrap();
    connector
        .send(
            &incoming.conversation,
            &Outgoing::Text {
                markdown: format!("answer {n}"),
                key: format!("tls.{n}"),
            },
        )
        .await
        .unwrap_or_else(|e| panic!("SMTP {smtp:?}: {e}{}", server.logs()));
    server
        .wait_for(ALICE, "the answer", |m| {
            m.raw.contains(&format!("answer {n}"))
        })
        .await;
    shutdown.cancel();
    task.await.unwrap();
}

#[test]
fn tls_and_starttls_with_a_trusted_certificate() {
    let Some(server) = MailServer::start_with_tls("tls") else {
        return;
    };
    // SAFETY: this binary's only test sets it before it starts a runtime
    // or anything else that reads the environment.
    unsafe { std::env::set_var("SSL_CERT_FILE", server.ca_file()) };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        round_trip(
            &server,
            (server.imaps_port, "tls"),
            (server.smtp_port, "starttls"),
            1,
        )
        .await;
        round_trip(
            &server,
            (server.imap_port, "starttls"),
            (server.smtps_port, "tls"),
            2,
        )
        .await;
    });
    // The servers saw the connector's logins and mails under TLS.
    let logs = server.logs();
    let logins: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains(&format!("Login: user=<{BOT}>")))
        .collect();
    assert_eq!(logins.len(), 2, "{logs}");
    assert!(logins.iter().all(|l| l.contains(", TLS,")), "{logins:#?}");
    let sent: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains(&format!("<= {BOT} ")))
        .collect();
    assert_eq!(sent.len(), 2, "{logs}");
    assert!(sent.iter().all(|l| l.contains(" X=TLS")), "{sent:#?}");
}
