//! A Discord channel end to end: the daemon (in this process, or the real
//! binary killed and restarted), the mock model, and a fake Discord
//! (`support::fake_discord`, from Discord's developer documentation) as
//! the platform. A DM is a session whose second turn's request holds the
//! first; a mention starts a thread the conversation goes on in; a
//! stranger is ignored and counted; a message dispatched twice runs once;
//! a long answer is split under Discord's 2,000 characters; an approval
//! pressed as a button after a crash and restart runs the call and the
//! answer arrives; a dropped Gateway is resumed and what was sent in
//! between is answered; a button pressed over signed HTTP interactions
//! decides its call. The connector's own tests are in
//! `channel_discord_connector.rs` and `channel_discord_gateway.rs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report"
)]

mod support;

use serde_json::{Value, json};
use support::channels::{project_with_channel, start, status, wait_status};
use support::fake_discord::{BOT_ID, FakeDiscord, button_press, message_create};
use support::inproc::InProc;
use support::mock_llm::{MockLlm, Reply};

const AGENT: &str = "model: mock/m\nprompt: You help.\n";
const TOKEN: &str = "bot-token-e2e";
const USER: &str = "500000000000000042";
const DM: &str = "400000000000000001";
const GUILD: &str = "300000000000000001";
const GENERAL: &str = "300000000000000002";

fn channel(fake: &FakeDiscord) -> String {
    format!(
        "agent: a\nallow: {{ users: [\"{USER}\"] }}\ndiscord:\n  token: ${{DC_TOKEN}}\n  api_url: {}\n",
        fake.api_url
    )
}

async fn connected(daemon: &InProc) -> Value {
    wait_status(daemon, "dc", "the Gateway connected", |s| {
        s["connection"]["state"] == "connected"
    })
    .await
}

/// A DM from `USER`.
fn dm(id: &str, text: &str) -> Value {
    message_create(id, DM, None, USER, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dm_is_a_session_and_the_second_turn_holds_the_first() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("Paris is the **capital** of France.".into()));
    mock.push(Reply::Text("About 2.1 million people.".into()));
    let fake = FakeDiscord::start(TOKEN).await;
    let dir = project_with_channel(&mock, AGENT, "dc", &channel(&fake));
    let daemon = start(dir.path(), &[("DC_TOKEN", TOKEN)]).await;
    connected(&daemon).await;

    fake.dispatch(
        "MESSAGE_CREATE",
        dm("600000000000000001", "What is the capital of France?"),
    );
    let sent = fake.wait_messages(1).await;
    assert_eq!(sent[0]["channel_id"], DM);
    // Discord renders Markdown: the answer goes as it is.
    assert_eq!(sent[0]["content"], "Paris is the **capital** of France.");
    assert_eq!(sent[0]["enforce_nonce"], true);

    fake.dispatch(
        "MESSAGE_CREATE",
        dm("600000000000000002", "How many live there?"),
    );
    let sent = fake.wait_messages(2).await;
    assert_eq!(sent[1]["content"], "About 2.1 million people.");
    support::channels::assert_second_turn_holds_the_first(&mock);
    support::channels::assert_two_turns_of_one_session(&daemon).await;
    assert!(
        fake.state().typing.iter().any(|c| c == DM),
        "typing was shown"
    );
    let s = status(&daemon, "dc").await;
    assert_eq!(s["platform"], "discord", "{s}");
    assert_eq!(
        (s["messages_in"].as_u64(), s["messages_out"].as_u64()),
        (Some(2), Some(2)),
        "{s}"
    );
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mention_starts_a_thread_and_the_conversation_goes_on_there() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("Hello from the thread.".into()));
    mock.push(Reply::Text("Still here.".into()));
    let fake = FakeDiscord::start(TOKEN).await;
    fake.add_channel(json!({"id": GENERAL, "type": 0, "guild_id": GUILD}));
    let dir = project_with_channel(&mock, AGENT, "dc", &channel(&fake));
    let daemon = start(dir.path(), &[("DC_TOKEN", TOKEN)]).await;
    connected(&daemon).await;

    let mention = "600000000000000010";
    fake.dispatch(
        "MESSAGE_CREATE",
        message_create(
            mention,
            GENERAL,
            Some(GUILD),
            USER,
            &format!("<@{BOT_ID}> hi there"),
        ),
    );
    let sent = fake.wait_messages(1).await;
    assert_eq!(sent[0]["channel_id"], mention, "answered in the thread");
    assert_eq!(fake.state().threads[0]["message_id"], mention);
    assert_eq!(
        mock.requests()[0].conversation(),
        vec![("user".to_string(), "hi there".to_string())]
    );

    fake.dispatch(
        "MESSAGE_CREATE",
        message_create(
            "600000000000000011",
            mention,
            Some(GUILD),
            USER,
            "and again",
        ),
    );
    let sent = fake.wait_messages(2).await;
    assert_eq!(sent[1]["channel_id"], mention);
    assert_eq!(sent[1]["content"], "Still here.");
    assert_eq!(mock.requests()[1].conversation().len(), 3, "one session");
    assert_eq!(fake.state().threads.len(), 1);
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_is_ignored_and_counted() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("hello friend".into()));
    let fake = FakeDiscord::start(TOKEN).await;
    let dir = project_with_channel(&mock, AGENT, "dc", &channel(&fake));
    let daemon = start(dir.path(), &[("DC_TOKEN", TOKEN)]).await;
    connected(&daemon).await;

    fake.dispatch(
        "MESSAGE_CREATE",
        message_create(
            "600000000000000020",
            "400000000000000099",
            None,
            "999",
            "let me in",
        ),
    );
    wait_status(&daemon, "dc", "the stranger counted", |s| s["ignored"] == 1).await;
    fake.dispatch("MESSAGE_CREATE", dm("600000000000000021", "hi"));
    let sent = fake.wait_messages(1).await;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["channel_id"], DM);
    assert_eq!(mock.request_count(), 1);
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_dispatched_twice_is_one_turn() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("once".into()));
    let fake = FakeDiscord::start(TOKEN).await;
    let dir = project_with_channel(&mock, AGENT, "dc", &channel(&fake));
    let daemon = start(dir.path(), &[("DC_TOKEN", TOKEN)]).await;
    connected(&daemon).await;

    let twice = dm("600000000000000030", "do it once");
    fake.dispatch("MESSAGE_CREATE", twice.clone());
    fake.wait_messages(1).await;
    fake.dispatch("MESSAGE_CREATE", twice);
    wait_status(&daemon, "dc", "the duplicate counted", |s| {
        s["duplicates"] == 1
    })
    .await;
    fake.dispatch("MESSAGE_CREATE", dm("600000000000000031", "next"));
    let sent = fake.wait_messages(2).await;
    assert_eq!(sent.len(), 2);
    assert_eq!(mock.request_count(), 2);
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_is_split_under_discords_limit() {
    let mock = MockLlm::start().await;
    let paragraph = "word ".repeat(199) + "end.";
    let long: String = vec![paragraph; 5].join("\n\n"); // 5 x 1,000 characters
    mock.push(Reply::Text(long.clone()));
    let fake = FakeDiscord::start(TOKEN).await;
    let dir = project_with_channel(&mock, AGENT, "dc", &channel(&fake));
    let daemon = start(dir.path(), &[("DC_TOKEN", TOKEN)]).await;
    connected(&daemon).await;

    fake.dispatch("MESSAGE_CREATE", dm("600000000000000040", "write a lot"));
    // Two of the 1,000-character paragraphs do not fit one message.
    let pieces = aurad::channels::split::split_message(&long, 2000).len();
    assert!(pieces >= 3, "{pieces}");
    let sent = fake.wait_messages(pieces).await;
    let texts: Vec<&str> = sent
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert!(texts.iter().all(|t| t.chars().count() <= 2000), "{texts:?}");
    let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(words(&texts.join(" ")), words(&long));
    let nonces: std::collections::HashSet<&str> =
        sent.iter().map(|m| m["nonce"].as_str().unwrap()).collect();
    assert_eq!(nonces.len(), sent.len(), "each piece its own nonce");
    daemon.stop().await.unwrap();
}

/// The real binary, killed with SIGKILL while the call waits: the run
/// stays `waiting_approval`, the next daemon takes it over (a new Gateway
/// session), and a press of the button sent before the crash decides it.
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
    let fake = FakeDiscord::start(TOKEN).await;
    let agent = "model: mock/m\nprompt: You help.\ntools: [bash]\napprove: [bash]\n";
    let dir = project_with_channel(&mock, agent, "dc", &channel(&fake));
    let root = dir.path().to_path_buf();
    let addr = write_settings(&root, &mock);
    let env = [("DC_TOKEN", TOKEN)];
    let started = {
        let root = root.clone();
        move || Serve::start_with_env(&root, addr, &[], &env)
    };
    let mut serve = tokio::task::spawn_blocking(started.clone()).await.unwrap();
    fake.until("the first Gateway session", |s| {
        s.events.iter().any(|(_, t, _)| t == "READY").then_some(())
    })
    .await;

    fake.dispatch(
        "MESSAGE_CREATE",
        dm("600000000000000050", "run the command"),
    );
    let prompt = fake.wait_messages(1).await.remove(0);
    let content = prompt["content"].as_str().unwrap();
    assert!(
        content.contains("bash") && content.contains("echo approved-ran"),
        "{prompt}"
    );
    let buttons = &prompt["components"][0]["components"];
    assert_eq!(buttons[0]["label"], "Approve");
    assert_eq!(buttons[0]["style"], 3);
    assert_eq!(buttons[1]["label"], "Deny");
    assert_eq!(buttons[1]["style"], 4);
    let approve = buttons[0]["custom_id"].as_str().unwrap().to_string();
    assert!(
        approve.starts_with("y:") && approve.len() <= 100,
        "{approve}"
    );
    serve.kill_now();

    let serve = tokio::task::spawn_blocking(started).await.unwrap();
    fake.until("a second Gateway session", |s| {
        (s.events.iter().filter(|(_, t, _)| t == "READY").count() == 2).then_some(())
    })
    .await;
    fake.dispatch(
        "INTERACTION_CREATE",
        button_press("700000000000000001", USER, &approve, &prompt),
    );
    let callback = fake
        .until("the press acknowledged", |s| s.callbacks.first().cloned())
        .await;
    assert_eq!(callback["body"], json!({"type": 6}), "{}", serve.log());
    let edit = fake
        .until("the prompt edited", |s| s.edits.first().cloned())
        .await;
    assert_eq!(edit["message_id"], prompt["id"]);
    assert_eq!(edit["body"]["components"], json!([]));
    assert!(
        edit["body"]["content"]
            .as_str()
            .unwrap()
            .contains("Approved by user42"),
        "{edit}"
    );
    let sent = fake.wait_messages(2).await;
    assert_eq!(
        sent[1]["content"],
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
    fake.dispatch(
        "INTERACTION_CREATE",
        button_press("700000000000000002", USER, &approve, &prompt),
    );
    let edit = fake
        .until("the second press answered", |s| s.edits.get(1).cloned())
        .await;
    assert!(
        edit["body"]["content"]
            .as_str()
            .unwrap()
            .contains("no longer waiting"),
        "{edit}"
    );
    drop(serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_gateway_is_resumed_and_what_came_in_between_is_answered() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("first".into()));
    mock.push(Reply::Text("second".into()));
    let fake = FakeDiscord::start(TOKEN).await;
    let dir = project_with_channel(&mock, AGENT, "dc", &channel(&fake));
    let daemon = start(dir.path(), &[("DC_TOKEN", TOKEN)]).await;
    connected(&daemon).await;
    fake.dispatch("MESSAGE_CREATE", dm("600000000000000060", "one"));
    fake.wait_messages(1).await;

    fake.drop_connection();
    let s = wait_status(&daemon, "dc", "reconnecting", |s| {
        s["connection"]["state"] == "reconnecting"
    })
    .await;
    assert!(s["last_error"].as_str().unwrap().contains("Gateway"), "{s}");
    // Sent while the bot is away: replayed by the resume.
    let missed = fake.dispatch("MESSAGE_CREATE", dm("600000000000000061", "two"));
    connected(&daemon).await;
    let sent = fake.wait_messages(2).await;
    assert_eq!(sent[1]["content"], "second");
    {
        let state = fake.state();
        assert_eq!(state.identifies.len(), 1, "one session");
        assert_eq!(state.resumes.len(), 1);
        assert_eq!(state.replayed, vec![missed]);
    }
    daemon.stop().await.unwrap();
}

/// Signs `body` as Discord signs an interaction it posts.
fn signed_post(
    daemon: &InProc,
    key: &ed25519_dalek::SigningKey,
    body: &Value,
) -> reqwest::RequestBuilder {
    use ed25519_dalek::Signer;
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let body = body.to_string();
    let signature = key.sign(format!("{timestamp}{body}").as_bytes());
    reqwest::Client::new()
        .post(daemon.url("/channels/dc"))
        .header("X-Signature-Ed25519", hex::encode(signature.to_bytes()))
        .header("X-Signature-Timestamp", timestamp)
        .header("Content-Type", "application/json")
        .body(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_button_pressed_over_http_interactions_decides_the_call() {
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call(
        "call_1",
        "bash",
        r#"{"command":"echo via-http"}"#,
    ));
    mock.push(Reply::Text("Done over HTTP.".into()));
    let fake = FakeDiscord::start(TOKEN).await;
    let key = ed25519_dalek::SigningKey::from_bytes(&rand::random::<[u8; 32]>());
    let file = format!(
        "{}  public_key: {}\n",
        channel(&fake),
        hex::encode(key.verifying_key().to_bytes())
    );
    let agent = "model: mock/m\nprompt: You help.\ntools: [bash]\napprove: [bash]\n";
    let dir = project_with_channel(&mock, agent, "dc", &file);
    let daemon = start(dir.path(), &[("DC_TOKEN", TOKEN)]).await;
    connected(&daemon).await;

    // Discord's check of the endpoint: a PING, and a bad signature.
    let ping = json!({"id": "1", "type": 1, "token": "t", "application_id": "2"});
    let answer = signed_post(&daemon, &key, &ping).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.json::<Value>().await.unwrap(), json!({"type": 1}));
    let other = ed25519_dalek::SigningKey::from_bytes(&rand::random::<[u8; 32]>());
    let answer = signed_post(&daemon, &other, &ping).send().await.unwrap();
    assert_eq!(answer.status(), 401);

    fake.dispatch("MESSAGE_CREATE", dm("600000000000000070", "run it"));
    let prompt = fake.wait_messages(1).await.remove(0);
    let approve = prompt["components"][0]["components"][0]["custom_id"]
        .as_str()
        .unwrap()
        .to_string();
    let press = button_press("700000000000000070", USER, &approve, &prompt);
    let answer = signed_post(&daemon, &key, &press).send().await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.json::<Value>().await.unwrap(), json!({"type": 6}));
    // The prompt was edited before the press was answered.
    let edit = fake
        .state()
        .edits
        .first()
        .cloned()
        .expect("the prompt edited");
    assert!(
        edit["body"]["content"]
            .as_str()
            .unwrap()
            .contains("Approved by user42"),
        "{edit}"
    );
    let sent = fake.wait_messages(2).await;
    assert_eq!(sent[1]["content"], "Done over HTTP.");
    assert!(
        fake.state().callbacks.is_empty(),
        "answered over HTTP, not by callback"
    );
    daemon.stop().await.unwrap();
}
