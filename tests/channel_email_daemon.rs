#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report"
)]
//! An email channel end to end: the daemon (in this process, or the real
//! binary across a SIGKILL), the mock model, and a real mail server
//! (Dovecot and Exim, `support/mail_server.rs`) holding the agent's
//! mailbox and Alice's. A thread is a session whose second turn's request
//! holds the first; a stranger is ignored and counted; the same mail
//! delivered twice is one turn; an approval answered with the reply word
//! after the daemon restarted runs the call; a restarted IMAP server is
//! reconnected to; a 5,000-character answer is one mail.

mod support;

use std::time::{Duration, Instant};

use support::channels::{WAIT, project_with_channel, start, wait_status};
use support::mail_server::{ALICE, BOT, MailServer, Stored, password};
use support::mock_llm::{MockLlm, Reply};

const AGENT: &str = "model: mock/m\nprompt: You help.\n";

fn channel(server: &MailServer) -> String {
    format!(
        "agent: a\nallow: {{ users: [\"{ALICE}\"] }}\nemail:\n  address: {BOT}\n  imap:\n    host: 127.0.0.1\n    port: {}\n    tls: none\n    password: ${{MAIL_PASSWORD}}\n    poll: 1h\n  smtp:\n    host: 127.0.0.1\n    port: {}\n    tls: none\n    password: ${{MAIL_PASSWORD}}\n",
        server.imap_port, server.smtp_port
    )
}

fn env() -> [(&'static str, String); 1] {
    [("MAIL_PASSWORD", password(BOT))]
}

/// A mail from Alice to the agent.
fn from_alice(id: &str, subject: &str, thread: Option<(&str, &str)>, body: &str) -> String {
    let threading = thread.map_or(String::new(), |(parent, references)| {
        format!("In-Reply-To: {parent}\nReferences: {references}\n")
    });
    format!(
        "From: Alice <{ALICE}>\nTo: {BOT}\nSubject: {subject}\nMessage-ID: {id}\n{threading}Content-Type: text/plain; charset=utf-8\n\n{body}\n"
    )
}

/// The text of a mail as a reader sees it (transfer encoding undone).
fn text_of(m: &Stored) -> String {
    let parsed = mail_parser::MessageParser::default()
        .parse(m.raw.as_bytes())
        .expect("a mail");
    // Mail's lines end in CRLF on the wire.
    parsed
        .body_text(0)
        .map(|t| t.replace("\r\n", "\n"))
        .unwrap_or_default()
}

/// Alice's mails from the agent, oldest first, once there are `n`.
async fn answers(server: &MailServer, n: usize) -> Vec<Stored> {
    let deadline = Instant::now() + WAIT;
    loop {
        let got: Vec<Stored> = server
            .mailbox(ALICE)
            .await
            .into_iter()
            .filter(|m| m.header("From").as_deref() == Some(BOT))
            .collect();
        if got.len() >= n {
            return got;
        }
        assert!(
            Instant::now() < deadline,
            "{ALICE} got {} answers, not {n}: {got:#?}{}",
            got.len(),
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_is_a_session_and_the_second_turn_holds_the_first() {
    let Some(server) = MailServer::start("two_turns") else {
        return;
    };
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("Paris is the **capital** of France.".into()));
    mock.push(Reply::Text("About 2.1 million people.".into()));
    let dir = project_with_channel(&mock, AGENT, "mail", &channel(&server));
    let [(var, pw)] = env();
    let daemon = start(dir.path(), &[(var, pw.as_str())]).await;

    let first = from_alice(
        "<q1@example.test>",
        "France",
        None,
        "What is the capital of France?",
    );
    server.send(ALICE, BOT, &first).await;
    let answer = answers(&server, 1).await.remove(0);
    assert_eq!(
        text_of(&answer).trim(),
        "Paris is the **capital** of France."
    );
    assert_eq!(answer.header("Subject").as_deref(), Some("Re: France"));
    assert_eq!(
        answer.header("In-Reply-To").as_deref(),
        Some("<q1@example.test>")
    );
    let answer_id = answer.header("Message-ID").unwrap();

    // Alice replies to the answer, quoting it, as a mail client does.
    let second = from_alice(
        "<q2@example.test>",
        "Re: France",
        Some((&answer_id, &format!("<q1@example.test> {answer_id}"))),
        &format!(
            "How many live there?\n\nOn Sun, 6 Dec 2026 at 17:00, {BOT} wrote:\n> Paris is the **capital** of France.\n"
        ),
    );
    server.send(ALICE, BOT, &second).await;
    let both = answers(&server, 2).await;
    assert_eq!(text_of(&both[1]).trim(), "About 2.1 million people.");
    assert_eq!(
        both[1].header("References").as_deref(),
        Some(format!("<q1@example.test> {answer_id} <q2@example.test>").as_str())
    );
    support::channels::assert_second_turn_holds_the_first(&mock);
    support::channels::assert_two_turns_of_one_session(&daemon).await;
    // Counted once the send returned (the mail can be read before).
    let s = wait_status(&daemon, "mail", "two in, two out", |s| {
        s["messages_in"] == 2 && s["messages_out"] == 2
    })
    .await;
    assert_eq!(s["platform"], "email", "{s}");
    assert_eq!(s["connection"]["state"], "connected", "{s}");
    // Both mails were taken: seen on the server.
    assert!(server.mailbox(BOT).await.iter().all(|m| m.seen));
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_is_ignored_and_the_same_mail_twice_is_one_turn() {
    let Some(server) = MailServer::start("stranger") else {
        return;
    };
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("hello friend".into()));
    let dir = project_with_channel(&mock, AGENT, "mail", &channel(&server));
    let [(var, pw)] = env();
    let daemon = start(dir.path(), &[(var, pw.as_str())]).await;

    // Mallory is not on the allow-list (sent through Alice's account:
    // the From is what the channel checks).
    server
        .send(
            ALICE,
            BOT,
            "From: mallory@example.test\nTo: agent@example.test\nSubject: hi\nMessage-ID: <s1@example.test>\n\nlet me in\n",
        )
        .await;
    wait_status(&daemon, "mail", "the stranger counted", |s| {
        s["ignored"] == 1
    })
    .await;

    // The same mail in the mailbox twice (a client's retry, a redelivery):
    // one turn, one answer.
    let mail = from_alice("<d1@example.test>", "Once", None, "do it once");
    server.send(ALICE, BOT, &mail).await;
    server.send(ALICE, BOT, &mail).await;
    wait_status(&daemon, "mail", "the duplicate counted", |s| {
        s["duplicates"] == 1
    })
    .await;
    let got = answers(&server, 1).await;
    assert_eq!(text_of(&got[0]).trim(), "hello friend");
    assert_eq!(mock.request_count(), 1);
    assert_eq!(
        mock.requests()[0].conversation(),
        vec![("user".into(), "do it once".into())]
    );
    // Nothing else goes out.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(answers(&server, 1).await.len(), 1);
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_is_one_mail() {
    let Some(server) = MailServer::start("long") else {
        return;
    };
    let mock = MockLlm::start().await;
    let paragraph = "word ".repeat(199) + "end.";
    let long: String = vec![paragraph; 5].join("\n\n"); // 5 x 1,000 characters
    mock.push(Reply::Text(long.clone()));
    let dir = project_with_channel(&mock, AGENT, "mail", &channel(&server));
    let [(var, pw)] = env();
    let daemon = start(dir.path(), &[(var, pw.as_str())]).await;

    server
        .send(
            ALICE,
            BOT,
            &from_alice("<l1@example.test>", "Long", None, "write a lot"),
        )
        .await;
    let got = answers(&server, 1).await;
    assert_eq!(text_of(&got[0]).trim(), long);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(answers(&server, 1).await.len(), 1, "one mail, not pieces");
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_imap_server_is_reconnected_to() {
    let Some(mut server) = MailServer::start("restart") else {
        return;
    };
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("back".into()));
    let dir = project_with_channel(&mock, AGENT, "mail", &channel(&server));
    let [(var, pw)] = env();
    let daemon = start(dir.path(), &[(var, pw.as_str())]).await;
    wait_status(&daemon, "mail", "connected", |s| {
        s["connection"]["state"] == "connected"
    })
    .await;

    server.restart_imap();
    let s = wait_status(&daemon, "mail", "the drop shown", |s| {
        s["last_error"].is_string()
    })
    .await;
    assert!(s["last_error"].as_str().unwrap().contains("IMAP"), "{s}");
    server
        .send(
            ALICE,
            BOT,
            &from_alice("<r1@example.test>", "Still", None, "are you there?"),
        )
        .await;
    let got = answers(&server, 1).await;
    assert_eq!(text_of(&got[0]).trim(), "back");
    wait_status(&daemon, "mail", "connected again", |s| {
        s["connection"]["state"] == "connected"
    })
    .await;
    daemon.stop().await.unwrap();
}

/// The real binary, killed with SIGKILL while the call waits: the next
/// daemon takes the run over, and Alice's reply word decides it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_answered_after_a_crash_and_restart_runs_the_call() {
    use support::serve::{Serve, write_settings};
    let Some(server) = MailServer::start("approval") else {
        return;
    };
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call(
        "call_1",
        "bash",
        r#"{"command":"echo approved-ran"}"#,
    ));
    mock.push(Reply::Text("The command said approved-ran.".into()));
    let agent = "model: mock/m\nprompt: You help.\ntools: [bash]\napprove: [bash]\n";
    let dir = project_with_channel(&mock, agent, "mail", &channel(&server));
    let root = dir.path().to_path_buf();
    let addr = write_settings(&root, &mock);
    let pw = password(BOT);
    let started = {
        let root = root.clone();
        move || Serve::start_with_env(&root, addr, &[], &[("MAIL_PASSWORD", pw.as_str())])
    };
    let mut serve = tokio::task::spawn_blocking(started.clone()).await.unwrap();

    server
        .send(
            ALICE,
            BOT,
            &from_alice("<c1@example.test>", "Run it", None, "run the command"),
        )
        .await;
    let prompt = answers(&server, 1).await.remove(0);
    let asked = text_of(&prompt);
    assert!(
        asked.contains("bash") && asked.contains("echo approved-ran"),
        "{asked}"
    );
    assert!(
        asked.contains("Reply with the single word APPROVE to run it, or DENY to refuse"),
        "{asked}"
    );
    let prompt_id = prompt.header("Message-ID").unwrap();
    serve.kill_now();

    let serve = tokio::task::spawn_blocking(started).await.unwrap();
    let reply = from_alice(
        "<c2@example.test>",
        "Re: Run it",
        Some((&prompt_id, &format!("<c1@example.test> {prompt_id}"))),
        "APPROVE\n\nOn Sun, 6 Dec 2026, agent@example.test wrote:\n> Reply with the single word APPROVE to run it\n",
    );
    server.send(ALICE, BOT, &reply).await;
    let got = answers(&server, 3).await;
    let texts: Vec<String> = got.iter().map(text_of).collect();
    assert!(
        texts[1].starts_with("Approved by"),
        "{texts:?}\n{}",
        serve.log()
    );
    assert_eq!(
        texts[2].trim(),
        "The command said approved-ran.",
        "{}",
        serve.log()
    );
    let requests = mock.requests();
    let last = requests.last().unwrap().messages();
    let tool = last
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the tool's result went to the model");
    assert!(
        tool["content"].as_str().unwrap().contains("approved-ran"),
        "{tool}"
    );
    drop(serve);
}
