//! The engine end to end through the shared runner: a real mock
//! OpenAI-compatible server on 127.0.0.1, real tools, a real SQLite file.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::time::Duration;

use aurad::types::{RunEvent, RunState};
use serde_json::json;
use support::mock_llm::{MockLlm, Reply};
use support::project::Project;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

const TOOLS_AGENT: &str =
    "model: mock/m1\nsystem: You are terse.\ntools: [calculator, current_time]\n";

fn tool_results(events: &[RunEvent]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ToolResult {
                id,
                output,
                is_error,
                ..
            } => Some((id.clone(), output.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn streams_a_text_answer_and_stores_the_run() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("Hello from the mock.".into()));
    let project = Project::new(&mock, TOOLS_AGENT);
    let (outcome, events, store) = project.run("hi", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Succeeded);
    assert_eq!(outcome.output.as_deref(), Some("Hello from the mock."));
    let streamed: String = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "Hello from the mock.");
    assert!(
        events
            .iter()
            .filter(|e| matches!(e, RunEvent::TextDelta { .. }))
            .count()
            > 1,
        "text arrived in pieces"
    );
    assert!(matches!(events.first(), Some(RunEvent::Started { .. })));
    assert!(matches!(
        events.last(),
        Some(RunEvent::Finished {
            state: RunState::Succeeded,
            ..
        })
    ));

    let request = &mock.requests()[0];
    assert_eq!(request.body["model"], "m1");
    assert_eq!(
        request.messages()[0],
        json!({"role": "system", "content": "You are terse."})
    );
    assert_eq!(
        request.messages()[1],
        json!({"role": "user", "content": "hi"})
    );
    let tools: Vec<&str> = request.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["calculator", "current_time"]);

    let run_id = match &events[0] {
        RunEvent::Started { run_id, .. } => run_id.clone(),
        _ => unreachable!(),
    };
    let record = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(record.state, RunState::Succeeded);
    assert_eq!(record.usage.input_tokens, Some(10));
    let stored = store.run_events(&run_id).await.unwrap();
    // Deltas are merged into one event per model turn.
    let kinds: Vec<&str> = stored.iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, ["started", "text_delta", "usage", "finished"]);
    assert_eq!(
        stored[1],
        RunEvent::TextDelta {
            text: "Hello from the mock.".into()
        }
    );
}

#[tokio::test]
async fn parallel_tool_calls_split_across_chunks_run_and_come_back_in_order() {
    let mock = MockLlm::start().await;
    mock.push(Reply::ToolCallsInterleaved(vec![
        (
            "call_a".into(),
            "calculator".into(),
            r#"{"expression": "2 * (3 + 4)"}"#.into(),
        ),
        (
            "call_b".into(),
            "calculator".into(),
            r#"{"expression": "10 / 4"}"#.into(),
        ),
    ]));
    mock.push(Reply::Text("14 and 2.5".into()));
    let project = Project::new(&mock, TOOLS_AGENT);
    let (outcome, events, _) = project.run("compute", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Succeeded, "{:?}", outcome.reason);
    assert_eq!(
        tool_results(&events),
        vec![
            ("call_a".into(), "14".into(), false),
            ("call_b".into(), "2.5".into(), false)
        ]
    );
    let second = &mock.requests()[1];
    let messages = second.messages();
    assert_eq!(messages.len(), 5, "{messages:#?}");
    let calls = messages[2]["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["id"], "call_a");
    assert_eq!(
        calls[1]["function"]["arguments"],
        r#"{"expression": "10 / 4"}"#
    );
    assert_eq!(
        messages[3],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "14"})
    );
    assert_eq!(
        messages[4],
        json!({"role": "tool", "tool_call_id": "call_b", "content": "2.5"})
    );
}

#[tokio::test]
async fn bad_tool_calls_go_back_to_the_model_and_the_run_goes_on() {
    let mock = MockLlm::start().await;
    mock.push(Reply::ToolCalls(vec![
        ("c1".into(), "rm_rf".into(), "{}".into()),
        ("c2".into(), "calculator".into(), "{not json".into()),
        (
            "c3".into(),
            "calculator".into(),
            r#"{"expression": 5}"#.into(),
        ),
        (
            "c4".into(),
            "bash".into(),
            r#"{"command": "echo should not run"}"#.into(),
        ),
    ]));
    mock.push(Reply::Text("sorry".into()));
    let project = Project::new(&mock, TOOLS_AGENT);
    let (outcome, events, _) = project.run("x", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Succeeded);
    let results = tool_results(&events);
    assert!(
        results.iter().all(|(_, _, is_error)| *is_error),
        "{results:?}"
    );
    assert!(
        results[0].1.contains(
            "`rm_rf` is not available to this agent; available tools: calculator, current_time"
        ),
        "{}",
        results[0].1
    );
    assert!(results[1].1.contains("not valid JSON"), "{}", results[1].1);
    assert!(
        results[2].1.contains("invalid arguments for `calculator`")
            && results[2].1.contains("/expression"),
        "{}",
        results[2].1
    );
    assert!(
        results[3].1.contains("`bash` is not available"),
        "{}",
        results[3].1
    );
    let requests = mock.requests();
    let fed_back = &requests[1].messages()[6];
    assert_eq!(fed_back["tool_call_id"], "c4");
    assert!(
        fed_back["content"]
            .as_str()
            .unwrap()
            .contains("not available")
    );
}

#[tokio::test]
async fn max_iterations_ends_the_run_as_failed_with_the_reason() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::ToolCalls(vec![(
        "c".into(),
        "current_time".into(),
        "{}".into(),
    )]));
    let project = Project::new(
        &mock,
        "model: mock/m\nsystem: s\ntools: [current_time]\nlimits: { max_iterations: 3 }\n",
    );
    let (outcome, _, _) = project.run("loop", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Failed);
    assert!(outcome.reason.unwrap().contains("max_iterations (3)"));
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn max_tool_calls_ends_the_run() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::ToolCalls(vec![
        ("c1".into(), "current_time".into(), "{}".into()),
        ("c2".into(), "current_time".into(), "{}".into()),
    ]));
    let project = Project::new(
        &mock,
        "model: mock/m\nsystem: s\ntools: [current_time]\nlimits: { max_tool_calls: 3 }\n",
    );
    let (outcome, events, _) = project.run("loop", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Failed);
    assert!(outcome.reason.unwrap().contains("max_tool_calls (3)"));
    assert_eq!(tool_results(&events).len(), 2);
}

#[tokio::test]
async fn a_hung_model_call_times_out() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Hang);
    let project = Project::new(
        &mock,
        "model: mock/m\nsystem: s\nlimits: { timeout: 300ms }\n",
    );
    let (outcome, events, _) = project.run("x", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::TimedOut);
    assert_eq!(
        outcome.reason.as_deref(),
        Some("the run exceeded its timeout of 300ms")
    );
    assert!(matches!(
        events.last(),
        Some(RunEvent::Finished {
            state: RunState::TimedOut,
            ..
        })
    ));
}

#[tokio::test]
async fn a_slow_tool_is_stopped_by_the_timeout() {
    let mock = MockLlm::start().await;
    mock.push(Reply::ToolCalls(vec![(
        "c".into(),
        "bash".into(),
        r#"{"command": "sleep 30"}"#.into(),
    )]));
    let project = Project::new(
        &mock,
        "model: mock/m\nsystem: s\ntools: [bash]\nlimits: { timeout: 500ms }\n",
    );
    let (outcome, _, _) = tokio::time::timeout(WAIT, project.run("x", CancellationToken::new()))
        .await
        .unwrap();
    assert_eq!(outcome.state, RunState::TimedOut);
}

#[tokio::test]
async fn cancellation_ends_the_run_as_cancelled() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Hang);
    let project = Project::new(&mock, "model: mock/m\nsystem: s\n");
    let cancel = CancellationToken::new();
    let canceller = {
        let (mock, cancel) = (mock.clone(), cancel.clone());
        tokio::spawn(async move {
            mock.wait_for_requests(1, WAIT).await;
            cancel.cancel();
        })
    };
    let (outcome, _, store) = project.run("x", cancel).await;
    canceller.await.unwrap();
    assert_eq!(outcome.state, RunState::Cancelled);
    let runs = store
        .list_runs(&aurad::store::RunFilter {
            parent: None,
            agent: None,
            state: None,
            limit: 5,
        })
        .await
        .unwrap();
    assert_eq!(runs[0].state, RunState::Cancelled);
}

#[tokio::test]
async fn server_errors_and_rate_limits_are_retried() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Raw {
        status: 500,
        headers: vec![],
        body: r#"{"error":{"message":"boom"}}"#.into(),
    });
    mock.push(Reply::Raw {
        status: 429,
        headers: vec![("Retry-After".into(), "0".into())],
        body: "slow down".into(),
    });
    mock.push(Reply::Text("finally".into()));
    let project = Project::new(&mock, "model: mock/m\nsystem: s\n");
    let (outcome, events, _) = project.run("x", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Succeeded);
    let retries: Vec<&RunEvent> = events
        .iter()
        .filter(|e| matches!(e, RunEvent::ModelRetry { .. }))
        .collect();
    assert_eq!(retries.len(), 2);
    assert!(matches!(retries[0], RunEvent::ModelRetry { error, .. } if error.contains("boom")));
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn a_client_error_fails_at_once_with_the_providers_message() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Raw {
        status: 400,
        headers: vec![],
        body: r#"{"error":{"message":"model `m` does not exist"}}"#.into(),
    });
    let project = Project::new(&mock, "model: mock/m\nsystem: s\n");
    let (outcome, _, _) = project.run("x", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Failed);
    let reason = outcome.reason.unwrap();
    assert!(
        reason.contains("400") && reason.contains("model `m` does not exist"),
        "{reason}"
    );
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn the_context_is_trimmed_but_the_task_and_tool_groups_stay_whole() {
    let mock = MockLlm::start().await;
    mock.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "read_file".into(),
        r#"{"path": "big.txt"}"#.into(),
    )]));
    mock.push(Reply::ToolCalls(vec![(
        "c2".into(),
        "current_time".into(),
        "{}".into(),
    )]));
    mock.push(Reply::Text("done".into()));
    let project = Project::new(
        &mock,
        "model: mock/m\nsystem: s\ntools: [read_file, current_time]\nlimits: { max_context_tokens: 600 }\n",
    );
    std::fs::write(project.dir.path().join("big.txt"), "word ".repeat(600)).unwrap(); // about 750 tokens
    let (outcome, events, _) = project
        .run("summarise big.txt", CancellationToken::new())
        .await;
    assert_eq!(outcome.state, RunState::Succeeded, "{:?}", outcome.reason);
    assert!(
        events.iter().any(|e| matches!(
            e,
            RunEvent::ContextTrimmed {
                dropped_messages: 2,
                ..
            }
        )),
        "{events:#?}"
    );
    let requests = mock.requests();
    let third = requests[2].messages();
    let roles: Vec<&str> = third.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(third[1]["content"], "summarise big.txt");
    assert_eq!(third[2]["tool_calls"][0]["id"], "c2");
    assert_eq!(third[3]["tool_call_id"], "c2");
}
