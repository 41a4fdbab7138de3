//! A Telegram channel end to end: the daemon in this process, the mock
//! model, and a fake of the Bot API (`support::fake_telegram`, from
//! Telegram's documentation) as the platform. A chat is a session whose
//! second turn's request holds the first; a stranger is ignored and
//! counted; an update delivered twice runs once; a long answer is split
//! under Telegram's 4,096; an approval pressed as a button after the
//! daemon restarted runs the call and the answer arrives; polls that fail
//! are retried and the channel says why it reconnects; webhook mode checks
//! Telegram's secret header.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report"
)]

mod support;

use serde_json::{Value, json};
use support::channels::{WAIT, project_with_channel, start, status, wait_status};
use support::fake_telegram::{FakeTelegram, TOKEN, message_update};
use support::mock_llm::{MockLlm, Reply};

const AGENT: &str = "model: mock/m\nprompt: You help.\n";
const USER: i64 = 42;

fn channel(fake: &FakeTelegram, extra: &str) -> String {
    format!(
        "agent: a\nallow: {{ users: [\"{USER}\"] }}\ntelegram:\n  token: ${{TG_TOKEN}}\n  api_url: {}\n{extra}",
        fake.url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_is_a_session_and_the_second_turn_holds_the_first() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("Paris is the **capital** of France.".into()));
    mock.push(Reply::Text("About 2.1 million people.".into()));
    let fake = FakeTelegram::start().await;
    let dir = project_with_channel(&mock, AGENT, "tg", &channel(&fake, ""));
    let daemon = start(dir.path(), &[("TG_TOKEN", TOKEN)]).await;

    fake.push_message(USER, USER, "What is the capital of France?");
    let sent = fake.wait_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent[0]["chat_id"], USER);
    assert_eq!(sent[0]["parse_mode"], "HTML");
    assert_eq!(sent[0]["text"], "Paris is the <b>capital</b> of France.");
    assert!(
        sent[0]["reply_parameters"]["message_id"].is_i64(),
        "{}",
        sent[0]
    );

    fake.push_message(USER, USER, "How many live there?");
    let sent = fake.wait_calls("sendMessage", 2, WAIT).await;
    assert_eq!(sent[1]["text"], "About 2.1 million people.");
    support::channels::assert_second_turn_holds_the_first(&mock);
    support::channels::assert_two_turns_of_one_session(&daemon).await;
    assert!(!fake.calls("sendChatAction").is_empty(), "typing was shown");
    let s = status(&daemon, "tg").await;
    assert_eq!(s["connection"]["state"], "connected", "{s}");
    assert_eq!(
        (s["messages_in"].as_u64(), s["messages_out"].as_u64()),
        (Some(2), Some(2)),
        "{s}"
    );
    let metrics = support::inproc::metrics_text(&daemon).await;
    assert!(
        metrics.contains("aurad_channel_messages_total{channel=\"tg\",kind=\"in\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("aurad_channel_messages_total{channel=\"tg\",kind=\"out\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("aurad_channel_connected{channel=\"tg\"} 1"),
        "{metrics}"
    );
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_is_ignored_and_counted() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("hello friend".into()));
    let fake = FakeTelegram::start().await;
    let dir = project_with_channel(&mock, AGENT, "tg", &channel(&fake, ""));
    let daemon = start(dir.path(), &[("TG_TOKEN", TOKEN)]).await;

    fake.push_message(999, 999, "let me in");
    wait_status(&daemon, "tg", "the stranger counted", |s| s["ignored"] == 1).await;
    // A message from the allowed user after it is answered; the stranger's
    // never reached the model.
    fake.push_message(USER, USER, "hi");
    let sent = fake.wait_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["chat_id"], USER);
    assert_eq!(mock.request_count(), 1);
    assert_eq!(
        mock.requests()[0].conversation(),
        vec![("user".into(), "hi".into())]
    );
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_delivered_twice_is_one_turn() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("once".into()));
    let fake = FakeTelegram::start().await;
    let dir = project_with_channel(&mock, AGENT, "tg", &channel(&fake, ""));
    let daemon = start(dir.path(), &[("TG_TOKEN", TOKEN)]).await;

    let id = fake.push_message(USER, USER, "do it once");
    fake.wait_calls("sendMessage", 1, WAIT).await;
    fake.redeliver(id);
    wait_status(&daemon, "tg", "the duplicate counted", |s| {
        s["duplicates"] == 1
    })
    .await;
    // The next message is answered: the duplicate did not run in between.
    fake.push_message(USER, USER, "next");
    let sent = fake.wait_calls("sendMessage", 2, WAIT).await;
    assert_eq!(sent.len(), 2);
    assert_eq!(mock.request_count(), 2);
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_is_split_under_telegrams_limit() {
    let mock = MockLlm::start().await;
    let paragraph = "word ".repeat(199) + "end.";
    let long: String = vec![paragraph; 5].join("\n\n"); // 5 x 1,000 characters
    assert!(long.chars().count() > 5000 - 10);
    mock.push(Reply::Text(long.clone()));
    let fake = FakeTelegram::start().await;
    let dir = project_with_channel(&mock, AGENT, "tg", &channel(&fake, ""));
    let daemon = start(dir.path(), &[("TG_TOKEN", TOKEN)]).await;

    fake.push_message(USER, USER, "write a lot");
    let sent = fake.wait_calls("sendMessage", 2, WAIT).await;
    let texts: Vec<&str> = sent.iter().map(|m| m["text"].as_str().unwrap()).collect();
    assert!(
        texts.iter().all(|t| t.encode_utf16().count() <= 4096),
        "{texts:?}"
    );
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(words(&texts.join(" ")), words(&long));
    daemon.stop().await.unwrap();
}

/// The real binary, killed with SIGKILL while the call waits: the run
/// stays `waiting_approval` in the store, the next daemon takes it over,
/// and a press of the button sent before the crash decides it.
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
    let fake = FakeTelegram::start().await;
    let agent = "model: mock/m\nprompt: You help.\ntools: [bash]\napprove: [bash]\n";
    let dir = project_with_channel(&mock, agent, "tg", &channel(&fake, ""));
    let root = dir.path().to_path_buf();
    let addr = write_settings(&root, &mock);
    let env = [("TG_TOKEN", TOKEN)];
    let started = {
        let root = root.clone();
        move || Serve::start_with_env(&root, addr, &[], &env)
    };
    let mut serve = tokio::task::spawn_blocking(started.clone()).await.unwrap();

    fake.push_message(USER, USER, "run the command");
    let prompt = fake.wait_calls("sendMessage", 1, WAIT).await.remove(0);
    assert!(
        prompt["text"].as_str().unwrap().contains("bash"),
        "{prompt}"
    );
    assert!(
        prompt["text"]
            .as_str()
            .unwrap()
            .contains("echo approved-ran"),
        "{prompt}"
    );
    let buttons = &prompt["reply_markup"]["inline_keyboard"][0];
    assert_eq!(buttons[0]["text"], "Approve");
    assert_eq!(buttons[1]["text"], "Deny");
    let approve = buttons[0]["callback_data"].as_str().unwrap().to_string();
    assert!(
        approve.starts_with("y:") && approve.len() <= 64,
        "{approve}"
    );
    serve.kill_now();

    let serve = tokio::task::spawn_blocking(started).await.unwrap();
    fake.push_press(USER, USER, 77, &approve);
    let answered = fake.wait_calls("answerCallbackQuery", 1, WAIT).await;
    assert!(
        answered[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Approved by user42"),
        "{answered:?}\n{}",
        serve.log()
    );
    let edits = fake.wait_calls("editMessageReplyMarkup", 1, WAIT).await;
    assert_eq!(edits[0]["message_id"], 77);
    let sent = fake.wait_calls("sendMessage", 2, WAIT).await;
    assert_eq!(
        sent[1]["text"],
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
    // The same button pressed again decides nothing.
    fake.push_press(USER, USER, 77, &approve);
    let answered = fake.wait_calls("answerCallbackQuery", 2, WAIT).await;
    assert!(
        answered[1]["text"]
            .as_str()
            .unwrap()
            .contains("no longer waiting"),
        "{answered:?}"
    );
    drop(serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_word_decides_and_neither_a_stranger_nor_another_chat_can_press() {
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call(
        "call_1",
        "bash",
        r#"{"command":"echo no"}"#,
    ));
    mock.push(Reply::Text("I did not run it.".into()));
    let fake = FakeTelegram::start().await;
    let agent = "model: mock/m\nprompt: You help.\ntools: [bash]\napprove: [bash]\n";
    let dir = project_with_channel(&mock, agent, "tg", &channel(&fake, ""));
    let daemon = start(dir.path(), &[("TG_TOKEN", TOKEN)]).await;

    fake.push_message(USER, USER, "run it");
    let prompt = fake.wait_calls("sendMessage", 1, WAIT).await.remove(0);
    let approve = prompt["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
        .as_str()
        .unwrap()
        .to_string();
    // A stranger's press is ignored: the call still waits.
    fake.push_press(999, USER, 5, &approve);
    wait_status(&daemon, "tg", "the stranger's press ignored", |s| {
        s["ignored"] == 1
    })
    .await;
    assert!(fake.calls("answerCallbackQuery").is_empty());
    // The allowed user pressing a copy of the button in another chat
    // (callback data is the client's to send) decides nothing either.
    fake.push_press(USER, 777, 6, &approve);
    let answered = fake.wait_calls("answerCallbackQuery", 1, WAIT).await;
    assert_eq!(
        answered[0]["text"],
        "This approval belongs to another conversation."
    );
    fake.push_message(USER, USER, "Deny");
    let sent = fake.wait_calls("sendMessage", 3, WAIT).await;
    assert!(
        sent[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("Denied by user42"),
        "{}",
        sent[1]
    );
    assert_eq!(sent[2]["text"], "I did not run it.");
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_polls_are_retried_and_the_reason_is_shown() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("back".into()));
    let fake = FakeTelegram::start().await;
    fake.fail_polls(2);
    let dir = project_with_channel(&mock, AGENT, "tg", &channel(&fake, ""));
    let daemon = start(dir.path(), &[("TG_TOKEN", TOKEN)]).await;

    let s = wait_status(&daemon, "tg", "the failure shown", |s| {
        s["last_error"].is_string()
    })
    .await;
    assert!(
        s["last_error"].as_str().unwrap().contains("getUpdates"),
        "{s}"
    );
    wait_status(&daemon, "tg", "connected again", |s| {
        s["connection"]["state"] == "connected"
    })
    .await;
    fake.push_message(USER, USER, "are you there?");
    let sent = fake.wait_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent[0]["text"], "back");
    assert!(fake.polls() >= 3);
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_mode_takes_only_requests_with_the_secret_header() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("by webhook".into()));
    let fake = FakeTelegram::start().await;
    let extra = "  mode: webhook\n  webhook_secret: ${TG_SECRET}\n";
    let dir = project_with_channel(&mock, AGENT, "tg", &channel(&fake, extra));
    let daemon = start(
        dir.path(),
        &[("TG_TOKEN", TOKEN), ("TG_SECRET", "s3cret-value")],
    )
    .await;
    wait_status(&daemon, "tg", "ready for webhooks", |s| {
        s["connection"]["state"] == "connected"
    })
    .await;

    let mut update = message_update(None, USER, USER, 9, "via webhook");
    update["update_id"] = json!(5001);
    let post = |secret: Option<&str>| {
        let mut request = reqwest::Client::new()
            .post(daemon.url("/channels/tg"))
            .json(&update);
        if let Some(secret) = secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
        }
        request.send()
    };
    assert_eq!(post(None).await.unwrap().status(), 401);
    assert_eq!(post(Some("wrong")).await.unwrap().status(), 401);
    assert_eq!(mock.request_count(), 0);
    assert_eq!(post(Some("s3cret-value")).await.unwrap().status(), 200);
    let sent = fake.wait_calls("sendMessage", 1, WAIT).await;
    assert_eq!(sent[0]["text"], "by webhook");
    // Telegram retrying the same update: one turn.
    assert_eq!(post(Some("s3cret-value")).await.unwrap().status(), 200);
    wait_status(&daemon, "tg", "the retry counted", |s| s["duplicates"] == 1).await;
    assert_eq!(fake.polls(), 0, "a webhook channel does not poll");
    let unknown: Value = reqwest::Client::new()
        .post(daemon.url("/channels/nope"))
        .json(&update)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .contains("no channel `nope`"),
        "{unknown}"
    );
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_channel_file_reconnects_and_a_broken_one_is_left_out() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("hi there".into()));
    let fake = FakeTelegram::start().await;
    let dir = project_with_channel(&mock, AGENT, "tg", &channel(&fake, ""));
    let daemon = support::inproc::start(
        dir.path(),
        support::inproc::Start {
            env: support::daemon::env_of(&[("TG_TOKEN", TOKEN)]),
            watch: true,
            ..support::inproc::Start::default()
        },
    )
    .await;
    fake.push_message(USER, USER, "one");
    fake.wait_calls("sendMessage", 1, WAIT).await;

    // Only user 43 may talk now: the channel restarts with the new list.
    let file = dir.path().join("channels/tg.yaml");
    std::fs::write(&file, channel(&fake, "").replace("\"42\"", "\"43\"")).unwrap();
    wait_status(&daemon, "tg", "the channel restarted", |s| {
        s["messages_in"] == 0 && s["connection"]["state"] == "connected"
    })
    .await;
    fake.push_message(USER, USER, "still me");
    wait_status(&daemon, "tg", "42 ignored now", |s| s["ignored"] == 1).await;
    fake.push_message(43, 43, "new friend");
    let sent = fake.wait_calls("sendMessage", 2, WAIT).await;
    assert_eq!(sent[1]["chat_id"], 43);

    // A file with an error: left out (its connector stops), the error shown.
    std::fs::write(&file, "agent: a\nallow: {}\n").unwrap();
    let status = support::inproc::eventually("the broken channel left out", WAIT, || async {
        let (_, s) = support::inproc::get(&daemon, "/v1/status").await;
        let gone = s["channels"].as_array().is_some_and(|c| c.is_empty());
        let skipped = s["skipped"]
            .as_array()
            .and_then(|k| k.iter().find(|i| i["kind"] == "channel").cloned());
        gone.then_some(skipped).flatten()
    })
    .await;
    assert_eq!(status["name"], "tg");
    assert_eq!(status["path"], "channels/tg.yaml");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("`allow` lets nobody in"),
        "{status}"
    );
    daemon.stop().await.unwrap();
}
