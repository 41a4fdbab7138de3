//! A Slack channel end to end: the daemon in this process (the real
//! binary for the restart), the mock model, and a fake of Slack
//! (`support::fake_slack`, from Slack's documentation) as the platform. A
//! thread is a session whose second turn's request holds the first; a
//! stranger is ignored and counted; an event Slack sends twice runs once;
//! a long answer is split under Slack's recommended 4,000 characters; an
//! approval pressed as a button after the daemon was killed and restarted
//! runs the call, updates the prompt and the answer arrives; the reply
//! word decides too, and a stranger's press does not; a dropped
//! Socket Mode connection is opened again and what came meanwhile is
//! handled; `mode: events` takes only requests signed with the signing
//! secret through `POST /channels/NAME`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report"
)]

mod support;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use support::channels::{project_with_channel, start, status, wait_status};
use support::fake_slack::{APP_TOKEN, BOT_TOKEN, BOT_USER, FakeSlack, SIGNING_SECRET};
use support::mock_llm::{MockLlm, Reply};

const AGENT: &str = "model: mock/m\nprompt: You help.\n";
const USER: &str = "U1";
const CHANNEL: &str = "C1";
const ENV: [(&str, &str); 2] = [("SLACK_BOT", BOT_TOKEN), ("SLACK_APP", APP_TOKEN)];

fn channel(fake: &FakeSlack, mode: &str) -> String {
    format!(
        "agent: a\nallow: {{ users: [\"{USER}\"] }}\nslack:\n  bot_token: ${{SLACK_BOT}}\n{mode}  api_url: {}\n",
        fake.api_url
    )
}

fn socket_channel(fake: &FakeSlack) -> String {
    channel(fake, "  app_token: ${SLACK_APP}\n")
}

/// A mention of the bot by `user` in `CHANNEL`, message `ts`, in thread
/// `thread` (none: it starts one).
fn mention(user: &str, text: &str, ts: &str, thread: Option<&str>) -> Value {
    let mut e = json!({"type": "app_mention", "user": user, "channel": CHANNEL,
        "text": format!("<@{BOT_USER}> {text}"), "ts": ts, "event_ts": ts});
    if let Some(t) = thread {
        e["thread_ts"] = json!(t);
    }
    e
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_is_a_session_and_the_second_turn_holds_the_first() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("Paris is the **capital** of France.".into()));
    mock.push(Reply::Text("About 2.1 million people.".into()));
    let fake = FakeSlack::start().await;
    let dir = project_with_channel(&mock, AGENT, "team", &socket_channel(&fake));
    let daemon = start(dir.path(), &ENV).await;

    let env = fake.push_event(
        "Ev1",
        mention(USER, "What is the capital of France?", "100.1", None),
    );
    let sent = fake.wait_calls("chat.postMessage", 1).await;
    assert_eq!(sent[0].token, BOT_TOKEN);
    assert_eq!(sent[0].body["channel"], CHANNEL);
    assert_eq!(sent[0].body["thread_ts"], "100.1");
    assert_eq!(
        sent[0].body["text"].as_str().unwrap().trim(),
        "Paris is the *capital* of France."
    );
    assert!(fake.acks().contains(&env));

    // A reply in the thread (the bot named again) continues the session.
    fake.push_event(
        "Ev2",
        mention(USER, "How many live there?", "100.5", Some("100.1")),
    );
    let sent = fake.wait_calls("chat.postMessage", 2).await;
    assert_eq!(sent[1].body["thread_ts"], "100.1");
    assert_eq!(
        sent[1].body["text"].as_str().unwrap().trim(),
        "About 2.1 million people."
    );
    support::channels::assert_second_turn_holds_the_first(&mock);
    support::channels::assert_two_turns_of_one_session(&daemon).await;

    // A new mention outside the thread is another session.
    mock.push(Reply::Text("A new topic.".into()));
    fake.push_event("Ev3", mention(USER, "Something else", "200.0", None));
    let sent = fake.wait_calls("chat.postMessage", 3).await;
    assert_eq!(sent[2].body["thread_ts"], "200.0");
    let (_, runs) = support::inproc::get(&daemon, "/v1/runs").await;
    let runs = runs["runs"].as_array().cloned().unwrap_or_default();
    let sessions: std::collections::HashSet<String> = runs
        .iter()
        .map(|r| r["session_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sessions.len(), 2, "{runs:?}");

    let s = status(&daemon, "team").await;
    assert_eq!(s["platform"], "slack", "{s}");
    assert_eq!(s["connection"]["state"], "connected", "{s}");
    assert_eq!(
        (s["messages_in"].as_u64(), s["messages_out"].as_u64()),
        (Some(3), Some(3)),
        "{s}"
    );
    let metrics = support::inproc::metrics_text(&daemon).await;
    for line in [
        "aurad_channel_messages_total{channel=\"team\",kind=\"in\"} 3",
        "aurad_channel_messages_total{channel=\"team\",kind=\"out\"} 3",
        "aurad_channel_connected{channel=\"team\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_is_ignored_and_counted() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("hello friend".into()));
    let fake = FakeSlack::start().await;
    let dir = project_with_channel(&mock, AGENT, "team", &socket_channel(&fake));
    let daemon = start(dir.path(), &ENV).await;

    let env = fake.push_event("Ev1", mention("U999", "let me in", "100.0", None));
    wait_status(&daemon, "team", "the stranger counted", |s| {
        s["ignored"] == 1
    })
    .await;
    // Taken (acknowledged), though not answered.
    fake.wait_ack(&env).await;
    fake.push_event(
        "Ev2",
        json!({"type": "message", "channel_type": "im", "channel": "D1", "user": USER,
            "text": "hi", "ts": "101.0"}),
    );
    let sent = fake.wait_calls("chat.postMessage", 1).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].body["channel"], "D1");
    assert_eq!(mock.request_count(), 1);
    assert_eq!(
        mock.requests()[0].conversation(),
        vec![("user".into(), "hi".into())]
    );
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_slack_sends_twice_is_one_turn() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("once".into()));
    let fake = FakeSlack::start().await;
    let dir = project_with_channel(&mock, AGENT, "team", &socket_channel(&fake));
    let daemon = start(dir.path(), &ENV).await;

    fake.push_event("Ev1", mention(USER, "do it once", "100.0", None));
    fake.wait_calls("chat.postMessage", 1).await;
    // Slack's retry of an event: a new envelope, the same event_id.
    let again = fake.push_event("Ev1", mention(USER, "do it once", "100.0", None));
    wait_status(&daemon, "team", "the duplicate counted", |s| {
        s["duplicates"] == 1
    })
    .await;
    fake.wait_ack(&again).await;
    fake.push_event("Ev2", mention(USER, "next", "101.0", None));
    let sent = fake.wait_calls("chat.postMessage", 2).await;
    assert_eq!(sent.len(), 2);
    assert_eq!(mock.request_count(), 2);
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_is_split_under_slacks_4000_characters() {
    let mock = MockLlm::start().await;
    let paragraph = "word ".repeat(199) + "end.";
    let long: String = vec![paragraph; 5].join("\n\n"); // 5 x 1,000 characters
    assert!(long.chars().count() > 5000 - 10);
    mock.push(Reply::Text(long.clone()));
    let fake = FakeSlack::start().await;
    let dir = project_with_channel(&mock, AGENT, "team", &socket_channel(&fake));
    let daemon = start(dir.path(), &ENV).await;

    fake.push_event("Ev1", mention(USER, "write a lot", "100.0", None));
    let sent = fake.wait_calls("chat.postMessage", 2).await;
    let texts: Vec<&str> = sent
        .iter()
        .map(|c| c.body["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts.len(), 2, "{texts:?}");
    assert!(
        texts.iter().all(|t| t.encode_utf16().count() <= 4000),
        "{texts:?}"
    );
    assert!(sent.iter().all(|c| c.body["thread_ts"] == "100.0"));
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(words(&texts.join(" ")), words(&long));
    daemon.stop().await.unwrap();
}

/// A `block_actions` press of `value` on the prompt `prompt` (the call
/// that posted it) by `user`.
fn press(user: &str, prompt: &support::fake_slack::Call, value: &str, trigger: &str) -> Value {
    let ts = prompt.ts.clone().unwrap();
    json!({
        "type": "block_actions",
        "trigger_id": trigger,
        "user": {"id": user, "username": "ann", "team_id": "T1"},
        "team": {"id": "T1"},
        "api_app_id": "A1",
        "container": {"type": "message", "message_ts": ts, "channel_id": CHANNEL,
            "is_ephemeral": false, "thread_ts": prompt.body["thread_ts"]},
        "channel": {"id": CHANNEL, "name": "general"},
        "message": {"type": "message", "ts": ts, "thread_ts": prompt.body["thread_ts"],
            "text": prompt.body["text"], "blocks": prompt.body["blocks"]},
        "response_url": "https://hooks.slack.com/actions/T1/1/x",
        "actions": [{"action_id": "aurad_approve", "block_id": "aurad_approval",
            "type": "button", "value": value, "action_ts": "1700000100.000001"}],
    })
}

/// The real binary, killed with SIGKILL while the call waits: the next
/// daemon takes the run over, and the button pressed then decides it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_pressed_after_a_crash_and_restart_runs_the_call_and_the_answer_arrives() {
    use support::serve::{Serve, write_settings};
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call(
        "call_1",
        "bash",
        r#"{"command":"echo approved-ran"}"#,
    ));
    mock.push(Reply::Text("The command said approved-ran.".into()));
    let fake = FakeSlack::start().await;
    let agent = "model: mock/m\nprompt: You help.\ntools: [bash]\napprove: [bash]\n";
    let dir = project_with_channel(&mock, agent, "team", &socket_channel(&fake));
    let root = dir.path().to_path_buf();
    let addr = write_settings(&root, &mock);
    let started = {
        let root = root.clone();
        move || Serve::start_with_env(&root, addr, &[], &ENV)
    };
    let mut serve = tokio::task::spawn_blocking(started.clone()).await.unwrap();

    fake.push_event("Ev1", mention(USER, "run the command", "100.0", None));
    let prompt = fake.wait_calls("chat.postMessage", 1).await.remove(0);
    assert_eq!(prompt.body["thread_ts"], "100.0");
    let section = prompt.body["blocks"][0]["text"]["text"].as_str().unwrap();
    assert!(
        section.contains("bash") && section.contains("echo approved-ran"),
        "{section}"
    );
    let buttons = prompt.body["blocks"][1]["elements"].as_array().unwrap();
    assert_eq!(buttons[0]["text"]["text"], "Approve");
    assert_eq!(buttons[0]["style"], "primary");
    assert_eq!(buttons[1]["text"]["text"], "Deny");
    assert_eq!(buttons[1]["style"], "danger");
    let approve = buttons[0]["value"].as_str().unwrap().to_string();
    assert!(approve.starts_with("y:"), "{approve}");
    serve.kill_now();

    let serve = tokio::task::spawn_blocking(started).await.unwrap();
    fake.wait_connections(2).await;
    let env = fake.push_interactive(press(USER, &prompt, &approve, "trigger.1"));
    let update = fake.wait_calls("chat.update", 1).await.remove(0);
    assert_eq!(update.body["channel"], CHANNEL);
    assert_eq!(update.body["ts"], prompt.ts.clone().unwrap().as_str());
    assert!(
        update.body["text"]
            .as_str()
            .unwrap()
            .starts_with("Approved by ann"),
        "{}\n{}",
        update.body,
        serve.log()
    );
    let blocks = update.body["blocks"].as_array().unwrap();
    assert!(blocks.iter().all(|b| b["type"] != "actions"), "{blocks:?}");
    fake.wait_ack(&env).await;
    let sent = fake.wait_calls("chat.postMessage", 2).await;
    assert_eq!(
        sent[1].body["text"].as_str().unwrap().trim(),
        "The command said approved-ran.",
        "{}",
        serve.log()
    );
    assert_eq!(sent[1].body["thread_ts"], "100.0");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_word_in_the_thread_decides_and_a_strangers_press_does_not() {
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call(
        "call_1",
        "bash",
        r#"{"command":"echo no"}"#,
    ));
    mock.push(Reply::Text("I did not run it.".into()));
    let fake = FakeSlack::start().await;
    let agent = "model: mock/m\nprompt: You help.\ntools: [bash]\napprove: [bash]\n";
    let dir = project_with_channel(&mock, agent, "team", &socket_channel(&fake));
    let daemon = start(dir.path(), &ENV).await;

    fake.push_event("Ev1", mention(USER, "run it", "100.0", None));
    let prompt = fake.wait_calls("chat.postMessage", 1).await.remove(0);
    let approve = prompt.body["blocks"][1]["elements"][0]["value"]
        .as_str()
        .unwrap()
        .to_string();
    // A stranger's press is ignored: the call still waits.
    let env = fake.push_interactive(press("U999", &prompt, &approve, "trigger.9"));
    wait_status(&daemon, "team", "the stranger's press ignored", |s| {
        s["ignored"] == 1
    })
    .await;
    fake.wait_ack(&env).await;
    assert!(fake.calls("chat.update").is_empty());
    // The reply word, the bot named in the thread.
    fake.push_event("Ev2", mention(USER, "Deny", "100.7", Some("100.0")));
    let sent = fake.wait_calls("chat.postMessage", 3).await;
    assert!(
        sent[1].body["text"]
            .as_str()
            .unwrap()
            .starts_with("Denied by"),
        "{}",
        sent[1].body
    );
    assert_eq!(sent[1].body["thread_ts"], "100.0");
    assert_eq!(
        sent[2].body["text"].as_str().unwrap().trim(),
        "I did not run it."
    );
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_opened_again_and_what_came_meanwhile_is_answered() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("back".into()));
    let fake = FakeSlack::start().await;
    let dir = project_with_channel(&mock, AGENT, "team", &socket_channel(&fake));
    let daemon = start(dir.path(), &ENV).await;
    wait_status(&daemon, "team", "connected", |s| {
        s["connection"]["state"] == "connected"
    })
    .await;
    fake.wait_connections(1).await;

    fake.drop_connection();
    // Sent while the connector has no connection: Slack keeps it.
    fake.push_event("Ev1", mention(USER, "are you there?", "100.0", None));
    let s = wait_status(&daemon, "team", "the drop shown", |s| {
        s["last_error"].is_string()
    })
    .await;
    assert!(
        s["last_error"].as_str().unwrap().contains("Socket Mode"),
        "{s}"
    );
    let sent = fake.wait_calls("chat.postMessage", 1).await;
    assert_eq!(sent[0].body["text"].as_str().unwrap().trim(), "back");
    assert!(fake.connections() >= 2);
    wait_status(&daemon, "team", "connected again", |s| {
        s["connection"]["state"] == "connected"
    })
    .await;

    // Slack asking for a fresh connection is no trouble either.
    fake.disconnect("refresh_requested");
    fake.wait_connections(3).await;
    fake.push_event("Ev2", mention(USER, "and now?", "101.0", None));
    fake.wait_calls("chat.postMessage", 2).await;
    assert_eq!(mock.request_count(), 2);
    daemon.stop().await.unwrap();
}

fn signature(at: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SIGNING_SECRET.as_bytes()).unwrap();
    mac.update(format!("v0:{at}:{body}").as_bytes());
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_mode_takes_only_requests_signed_with_the_signing_secret() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("by the Events API".into()));
    let fake = FakeSlack::start().await;
    let mode = "  mode: events\n  signing_secret: ${SLACK_SIGN}\n";
    let dir = project_with_channel(&mock, AGENT, "team", &channel(&fake, mode));
    let daemon = start(
        dir.path(),
        &[("SLACK_BOT", BOT_TOKEN), ("SLACK_SIGN", SIGNING_SECRET)],
    )
    .await;
    wait_status(&daemon, "team", "ready for the Events API", |s| {
        s["connection"]["state"] == "connected"
    })
    .await;
    let post = |body: String, at: i64, sig: Option<String>| {
        let mut request = reqwest::Client::new()
            .post(daemon.url("/channels/team"))
            .header("Content-Type", "application/json")
            .header("X-Slack-Request-Timestamp", at.to_string())
            .body(body);
        if let Some(sig) = sig {
            request = request.header("X-Slack-Signature", sig);
        }
        request.send()
    };
    let now = chrono::Utc::now().timestamp();

    let challenge =
        json!({"token": "t", "challenge": "c-123", "type": "url_verification"}).to_string();
    let answer = post(challenge.clone(), now, Some(signature(now, &challenge)))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.text().await.unwrap(), "c-123");

    let callback = json!({"type": "event_callback", "event_id": "Ev1", "team_id": "T1",
        "authorizations": [{"user_id": BOT_USER, "is_bot": true}],
        "event": mention(USER, "via the Events API", "100.0", None)})
    .to_string();
    let unsigned = post(callback.clone(), now, None).await.unwrap();
    assert_eq!(unsigned.status(), 401);
    let forged = post(callback.clone(), now, Some(signature(now, "{}")))
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    let old = post(
        callback.clone(),
        now - 600,
        Some(signature(now - 600, &callback)),
    )
    .await
    .unwrap();
    assert_eq!(old.status(), 401);
    assert_eq!(mock.request_count(), 0);

    let good = post(callback.clone(), now, Some(signature(now, &callback)))
        .await
        .unwrap();
    assert_eq!(good.status(), 200);
    let sent = fake.wait_calls("chat.postMessage", 1).await;
    assert_eq!(
        sent[0].body["text"].as_str().unwrap().trim(),
        "by the Events API"
    );
    assert_eq!(sent[0].body["thread_ts"], "100.0");
    // Slack retrying the same event: one turn.
    let retry = post(callback.clone(), now, Some(signature(now, &callback)))
        .await
        .unwrap();
    assert_eq!(retry.status(), 200);
    wait_status(&daemon, "team", "the retry counted", |s| {
        s["duplicates"] == 1
    })
    .await;
    assert_eq!(
        fake.connections(),
        0,
        "an Events API channel opens no socket"
    );
    daemon.stop().await.unwrap();
}
