//! MCP tools end to end through the engine: the mock model calls
//! `<server>_<tool>`, the tool runs in a real child process (the rmcp test
//! server of `examples/`), and the next request carries the result.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::time::{Duration, Instant};

use aurad::engine::RunOutcome;
use aurad::mcp::{McpManager, ServerState};
use aurad::registry::Snapshot;
use aurad::run::{Job, RunRequest, execute, prepare};
use aurad::store::Store;
use aurad::types::{RunEvent, RunState};
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;
use tokio_util::sync::CancellationToken;

async fn setup(mock: &MockLlm, call_timeout: &str) -> (tempfile::TempDir, Snapshot, McpManager) {
    let dir = project_with_mock(mock, "model: mock/m\nsystem: s\ntools: [\"t_*\"]\n");
    let mcp = serde_json::json!({"mcpServers": {"t": {"command": support::mcp_test_server(), "call_timeout": call_timeout}}});
    std::fs::write(dir.path().join("mcp.json"), mcp.to_string()).unwrap();
    let loaded = aurad::config::load(dir.path(), &|_| None);
    let (mut snapshot, diags) = aurad::registry::build(loaded, &|_| None);
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    let servers = snapshot.project.mcp_servers.clone();
    let (manager, diags) = aurad::registry::connect_mcp(&mut snapshot, servers).await;
    assert!(diags.is_empty(), "{diags:?}");
    (dir, snapshot, manager)
}

async fn run(dir: &tempfile::TempDir, snapshot: &Snapshot) -> (RunOutcome, Vec<RunEvent>) {
    let request = RunRequest {
        input: Some("go".into()),
        model: None,
        ..RunRequest::new("a", aurad::types::Trigger::Test)
    };
    let prepared = prepare(snapshot, request, &|_| None).unwrap();
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let mut events = Vec::new();
    let outcome = execute(
        Job::Agent(Box::new(prepared)),
        &store,
        CancellationToken::new(),
        |e| events.push(e.clone()),
    )
    .await
    .unwrap();
    (outcome, events)
}

fn results(events: &[RunEvent]) -> Vec<(String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ToolResult {
                output, is_error, ..
            } => Some((output.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn the_model_calls_an_mcp_tool_and_gets_its_result() {
    let mock = MockLlm::start().await;
    mock.push(Reply::ToolCalls(vec![
        (
            "c1".into(),
            "t_echo".into(),
            r#"{"text": "hello over stdio"}"#.into(),
        ),
        ("c2".into(), "t_add".into(), r#"{"a": 2, "b": 40}"#.into()),
    ]));
    mock.push(Reply::Text("done".into()));
    let (dir, snapshot, manager) = setup(&mock, "60s").await;
    let tools: Vec<String> = mock_tools(&snapshot);
    assert!(tools.contains(&"t_echo".to_string()), "{tools:?}");
    let (outcome, events) = run(&dir, &snapshot).await;
    assert_eq!(outcome.state, RunState::Succeeded);
    assert_eq!(
        results(&events),
        vec![("hello over stdio".into(), false), ("42".into(), false)]
    );
    let requests = mock.requests();
    let shown: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        shown.iter().all(|n| n.starts_with("t_")),
        "only allowed tools are shown: {shown:?}"
    );
    let messages = requests[1].messages();
    assert_eq!(messages[3]["tool_call_id"], "c1");
    assert_eq!(messages[3]["content"], "hello over stdio");
    assert_eq!(messages[4]["content"], "42");
    manager.shutdown().await;
}

fn mock_tools(snapshot: &Snapshot) -> Vec<String> {
    snapshot.tools.names().map(str::to_string).collect()
}

#[tokio::test]
async fn a_hung_mcp_call_times_out_and_the_run_goes_on() {
    let mock = MockLlm::start().await;
    mock.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "t_sleep".into(),
        r#"{"seconds": 30}"#.into(),
    )]));
    mock.push(Reply::Text("gave up waiting".into()));
    let (dir, snapshot, manager) = setup(&mock, "1s").await;
    let started = Instant::now();
    let (outcome, events) = run(&dir, &snapshot).await;
    assert_eq!(outcome.state, RunState::Succeeded);
    let r = results(&events);
    assert!(r[0].1 && r[0].0.contains("timed out"), "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "the call was not cut at its timeout"
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn a_crashed_server_is_restarted_and_a_later_call_succeeds() {
    let mock = MockLlm::start().await;
    mock.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "t_crash".into(),
        "{}".into(),
    )]));
    mock.push(Reply::Text("it crashed".into()));
    let (dir, snapshot, manager) = setup(&mock, "10s").await;
    let (outcome, events) = run(&dir, &snapshot).await;
    assert_eq!(outcome.state, RunState::Succeeded);
    assert!(results(&events)[0].1, "the crash is an error for the model");

    // The supervisor notices the exit (the state leaves `connected`), then
    // restarts the server after its backoff.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen_down = false;
    loop {
        let state = manager.status()[0].state.clone();
        seen_down |= !matches!(state, ServerState::Connected);
        if seen_down && matches!(state, ServerState::Connected) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server was not restarted: {state:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    mock.push(Reply::ToolCalls(vec![(
        "c2".into(),
        "t_echo".into(),
        r#"{"text": "back"}"#.into(),
    )]));
    mock.push(Reply::Text("ok".into()));
    let (outcome, events) = run(&dir, &snapshot).await;
    assert_eq!(outcome.state, RunState::Succeeded);
    assert_eq!(results(&events), vec![("back".into(), false)]);
    manager.shutdown().await;
}
