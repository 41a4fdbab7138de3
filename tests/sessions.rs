//! Session turns through the run door with a mock model: a turn's request
//! holds the earlier turns' messages (tool calls with their results), turns
//! sent at once are taken in order, a stopped turn keeps the person's
//! message and no half call, and a 200-turn session keeps every request
//! under a small budget by compaction, the summary carried forward.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use aurad::engine::RunOutcome;
use aurad::engine::context::estimate_text;
use aurad::registry::Snapshot;
use aurad::run::{Env, Job, execute, new_session, turn_request};
use aurad::store::Store;
use aurad::types::{Message, RunState, Trigger};
use serde_json::Value;
use support::mock_llm::{MockLlm, Recorded, Reply};
use tokio_util::sync::CancellationToken;

fn snapshot(root: &std::path::Path) -> Arc<Snapshot> {
    let loaded = aurad::config::load(root, &|_| None);
    let (snapshot, diags) = aurad::registry::build(loaded, &|_| None);
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    Arc::new(snapshot)
}

/// One turn of `session` with `message`, as `aurad chat` takes it.
async fn turn(
    snapshot: &Arc<Snapshot>,
    store: &Store,
    session: &str,
    message: &str,
    cancel: CancellationToken,
) -> RunOutcome {
    let request = turn_request(store, snapshot, session, message.into(), Trigger::Cli)
        .await
        .unwrap();
    let env: Env = Arc::new(|_: &str| None);
    let job = Job::prepare(snapshot, request, &env).unwrap();
    execute(job, store, cancel, |_| {}).await.unwrap()
}

/// The texts of a recorded request's messages as (role, content), without
/// the agent's system prompt (`s`).
fn conversation(request: &Recorded) -> Vec<(String, String)> {
    request
        .messages()
        .iter()
        .filter(|m| !(m["role"] == "system" && m["content"] == "s"))
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_turn_sends_the_earlier_turns_with_their_tool_calls() {
    let mock = MockLlm::start().await;
    let dir = support::project::project_with_mock(
        &mock,
        "model: mock/m\nsystem: be brief\ntools: [calculator]\n",
    );
    let (snapshot, store) = (
        snapshot(dir.path()),
        Store::open(&dir.path().join("aurad.db")).unwrap(),
    );
    let session = new_session(&store, &snapshot, "a").await.unwrap();
    mock.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "calculator".into(),
        r#"{"expression":"6*7"}"#.into(),
    )]));
    mock.push(Reply::Text("It is 42.".into()));
    let first = turn(
        &snapshot,
        &store,
        &session.id,
        "what is 6*7?",
        CancellationToken::new(),
    )
    .await;
    assert_eq!(first.state, RunState::Succeeded, "{:?}", first.reason);
    mock.push(Reply::Text("You asked about 6*7.".into()));
    let second = turn(
        &snapshot,
        &store,
        &session.id,
        "what did I ask?",
        CancellationToken::new(),
    )
    .await;
    assert_eq!(second.state, RunState::Succeeded, "{:?}", second.reason);
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    let last = &requests[2];
    let messages = last.messages();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "assistant", "user"],
        "{messages:#?}"
    );
    assert_eq!(messages[1]["content"], "what is 6*7?");
    assert_eq!(
        messages[2]["tool_calls"][0]["function"]["name"],
        "calculator"
    );
    assert_eq!(messages[3]["content"], "42");
    assert_eq!(messages[4]["content"], "It is 42.");
    assert_eq!(messages[5]["content"], "what did I ask?");
    // Stored: both turns, their runs linked, the totals and the title.
    let stored = store.session(&session.id).await.unwrap().unwrap();
    assert_eq!((stored.turns, stored.messages), (2, 6));
    assert_eq!(stored.title.as_deref(), Some("what is 6*7?"));
    let runs = store.session_messages(&session.id).await.unwrap();
    let run = store
        .get_run(runs[5].run_id.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.session_id.as_deref(), Some(session.id.as_str()));
}

#[tokio::test]
async fn a_message_sent_during_a_turn_waits_for_it_and_sends_its_messages() {
    let mock = MockLlm::start().await;
    let dir = support::project::project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let (snapshot, store) = (
        snapshot(dir.path()),
        Store::open(&dir.path().join("aurad.db")).unwrap(),
    );
    let session = new_session(&store, &snapshot, "a").await.unwrap();
    // The first answer takes a while: the second turn must wait for it.
    mock.push(Reply::Delay(
        Duration::from_millis(400),
        Box::new(Reply::Text("first answer".into())),
    ));
    mock.push(Reply::Text("second answer".into()));
    // The second message is sent while the first turn's model call is
    // out: it waits for that turn and then sends its messages.
    let a = {
        let (snapshot, store, id) = (snapshot.clone(), store.clone(), session.id.clone());
        tokio::spawn(
            async move { turn(&snapshot, &store, &id, "one", CancellationToken::new()).await },
        )
    };
    mock.wait_for_requests(1, Duration::from_secs(10)).await;
    let b = {
        let (snapshot, store, id) = (snapshot.clone(), store.clone(), session.id.clone());
        tokio::spawn(
            async move { turn(&snapshot, &store, &id, "two", CancellationToken::new()).await },
        )
    };
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!(
        (a.state, b.state),
        (RunState::Succeeded, RunState::Succeeded)
    );
    let requests = mock.requests();
    assert_eq!(
        conversation(&requests[0]),
        [("user".to_string(), "one".to_string())]
    );
    assert_eq!(
        conversation(&requests[1]),
        [
            ("user".to_string(), "one".to_string()),
            ("assistant".to_string(), "first answer".to_string()),
            ("user".to_string(), "two".to_string())
        ]
    );
    let texts: Vec<String> = store
        .session_messages(&session.id)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.message.content().to_string())
        .collect();
    assert_eq!(texts, ["one", "first answer", "two", "second answer"]);
}

#[tokio::test]
async fn a_stopped_turn_keeps_the_message_but_no_call_without_its_result() {
    let mock = MockLlm::start().await;
    let dir = support::project::project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\ntools: [calculator]\n",
    );
    let (snapshot, store) = (
        snapshot(dir.path()),
        Store::open(&dir.path().join("aurad.db")).unwrap(),
    );
    let session = new_session(&store, &snapshot, "a").await.unwrap();
    mock.push(Reply::Hang);
    let cancel = CancellationToken::new();
    let stopper = {
        let (cancel, mock) = (cancel.clone(), mock.clone());
        tokio::spawn(async move {
            mock.wait_for_requests(1, Duration::from_secs(10)).await;
            cancel.cancel();
        })
    };
    let stopped = turn(&snapshot, &store, &session.id, "start something", cancel).await;
    stopper.await.unwrap();
    assert_eq!(stopped.state, RunState::Cancelled);
    let stored = store.session_messages(&session.id).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].message, Message::user("start something"));
    // The next turn sends it, and goes on.
    mock.push(Reply::Text("ok".into()));
    let next = turn(
        &snapshot,
        &store,
        &session.id,
        "never mind",
        CancellationToken::new(),
    )
    .await;
    assert_eq!(next.state, RunState::Succeeded);
    let last = mock.requests().pop().unwrap();
    assert_eq!(
        conversation(&last),
        [
            ("user".to_string(), "start something".to_string()),
            ("user".to_string(), "never mind".to_string())
        ]
    );
}

/// The estimated tokens of a request as the engine counts them (its
/// messages; no tools here).
fn request_tokens(request: &Recorded) -> usize {
    request
        .messages()
        .iter()
        .map(|m| 4 + estimate_text(m["content"].as_str().unwrap_or_default()))
        .sum()
}

fn is_summary_request(request: &Recorded) -> bool {
    request
        .messages()
        .first()
        .and_then(|m| m["content"].as_str())
        == Some(aurad::engine::history::SUMMARY_INSTRUCTION)
}

#[tokio::test]
async fn a_200_turn_session_stays_under_its_budget_by_compaction() {
    let mock = MockLlm::start().await;
    let budget = 4_000;
    let dir = support::project::project_with_mock(
        &mock,
        &format!(
            "model: mock/m\nsystem: s\nhistory: compact\nlimits: {{ max_context_tokens: {budget} }}\n"
        ),
    );
    // Answers of ~100 tokens; a summary names the last turn it saw.
    mock.set_responder(|request| {
        if is_summary_request(request) {
            let text = request.messages()[1]["content"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let last = text
                .rmatch_indices("[user] turn ")
                .next()
                .map(|(at, _)| {
                    text[at + 12..]
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .to_string()
                })
                .unwrap_or_default();
            return Reply::Text(format!("The user counted turns up to {last}."));
        }
        Reply::Text(format!("answer {}", "words ".repeat(65)))
    });
    let (snapshot, store) = (
        snapshot(dir.path()),
        Store::open(&dir.path().join("aurad.db")).unwrap(),
    );
    let session = new_session(&store, &snapshot, "a").await.unwrap();
    for i in 1..=200 {
        let message = format!("turn {i} {}", "detail ".repeat(40));
        let outcome = turn(
            &snapshot,
            &store,
            &session.id,
            &message,
            CancellationToken::new(),
        )
        .await;
        assert_eq!(
            outcome.state,
            RunState::Succeeded,
            "turn {i}: {:?}",
            outcome.reason
        );
    }
    let requests = mock.requests();
    let summaries = requests.iter().filter(|r| is_summary_request(r)).count();
    assert!(summaries >= 5, "only {summaries} summaries in 200 turns");
    for (i, request) in requests.iter().enumerate() {
        let tokens = request_tokens(request);
        assert!(
            tokens <= budget,
            "request {i} has {tokens} estimated tokens, over {budget}"
        );
    }
    // The last turn's request carries a summary that covers recent turns,
    // and every message is still stored.
    let last = requests.last().unwrap();
    let summary = conversation(last)
        .into_iter()
        .find(|(role, text)| role == "system" && text.starts_with("Summary of the earlier part"))
        .expect("the summary is carried into the last request");
    let covered: u32 = summary
        .1
        .trim_end_matches('.')
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        covered >= 150,
        "the summary covers turns up to {covered}: {}",
        summary.1
    );
    let stored = store.session(&session.id).await.unwrap().unwrap();
    assert_eq!((stored.turns, stored.messages), (200, 400));
    // Nothing ran over: no turn's request needed trimming.
    assert!(
        requests
            .iter()
            .all(|r| !r.messages().iter().any(|m: &Value| m.is_null())),
        "malformed request"
    );
}

#[tokio::test]
async fn runs_prune_with_sessions_deletes_the_sessions_not_used_for_the_age() {
    let mock = MockLlm::start().await;
    let dir = support::project::project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let db = dir.path().join("aurad.db");
    {
        let store = Store::open(&db).unwrap();
        let now = chrono::Utc::now();
        store
            .create_session("old", "a", now - chrono::Duration::days(3))
            .await
            .unwrap();
        store.create_session("new", "a", now).await.unwrap();
        store.close().unwrap();
    }
    let prune = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_aurad"))
            .arg("--dir")
            .arg(dir.path())
            .args(["runs", "prune", "--older-than", "2d"])
            .args(extra)
            .output()
            .unwrap()
    };
    let dry = prune(&["--sessions", "--dry-run"]);
    let text = String::from_utf8_lossy(&dry.stdout);
    assert!(
        text.contains("would delete 1 session(s) (0 messages)"),
        "{text}"
    );
    // Without --sessions, sessions are not touched.
    assert!(!String::from_utf8_lossy(&prune(&[]).stdout).contains("session"));
    let done = prune(&["--sessions"]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(String::from_utf8_lossy(&done.stdout).contains("deleted 1 session(s)"));
    let store = Store::open(&db).unwrap();
    assert!(store.session("old").await.unwrap().is_none());
    assert!(store.session("new").await.unwrap().is_some());
}
