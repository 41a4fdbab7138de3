//! The daemon following its MCP servers without a file change: a server's
//! new tool list reaches the next runs, its states reach `/healthz`, and a
//! load the project's files make fail is not tried again at every change of
//! a server's state; and with one, in `.vscode/mcp.json`. Real child processes of `examples/mcp_test_server.rs`.
//!
//! Apart from `tests/reload.rs`: that file captures the daemon's log on its
//! test's thread, and tracing's per-callsite interest cache can drop those
//! events while another thread of the same process logs at the same
//! callsite (these tests log `reload rejected` too).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use support::inproc::{
    InProc, WAIT, eventually, get, metrics_text, start, start_run, watching, write,
};
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;

/// The tools a run of agent `a` gets now, as the API lists them.
async fn agent_tools(daemon: &InProc) -> Vec<String> {
    let (status, body) = get(daemon, "/v1/agents/a").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_value(body["tools"].clone()).expect("a list of tool names")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tool_list_changes_and_server_states_are_followed() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\ntools: [\"t_*\"]\n");
    let root = dir.path();
    // Started through a script the test removes later, so a restart fails.
    let script = root.join("start-t.sh");
    write(
        root,
        "start-t.sh",
        &format!(
            "#!/bin/sh\nexec '{}'\n",
            support::mcp_test_server().display()
        ),
    );
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mcp = serde_json::json!({ "mcpServers": { "t": { "command": script } } });
    write(root, "mcp.json", &mcp.to_string());
    // No file changes: what follows comes from the server alone.
    let daemon = start(root, watching()).await;
    assert!(agent_tools(&daemon).await.contains(&"t_echo".to_string()));
    assert_eq!(server_state(&daemon, "t").await, "connected");
    assert_eq!(mcp_up(&daemon, "t").await, Some(("connected".into(), 1.0)));

    // A run's model has the server hide `echo`; the server tells aurad.
    mock.push(Reply::tool_call("h", "t_hide", r#"{"name": "echo"}"#));
    mock.push(Reply::Text("hidden".into()));
    let client = reqwest::Client::new();
    start_run(&client, &daemon, "hide echo").await;
    mock.wait_for_requests(2, WAIT).await;
    assert_eq!(
        mock.requests()[1].messages().last().unwrap()["content"],
        "hid echo"
    );
    eventually("t_echo to go", WAIT, || async {
        (!agent_tools(&daemon).await.contains(&"t_echo".to_string())).then_some(())
    })
    .await;

    // The next run's model is offered the new list.
    mock.push(Reply::Text("ok".into()));
    start_run(&client, &daemon, "what can you use?").await;
    let sent = mock.wait_for_requests(3, WAIT).await;
    let offered: Vec<&str> = sent[2].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(offered.contains(&"t_add"), "{offered:?}");
    assert!(!offered.contains(&"t_echo"), "{offered:?}");

    // The server crashes and cannot be started again: health says so.
    std::fs::remove_file(&script).unwrap();
    mock.push(Reply::tool_call("c", "t_crash", "{}"));
    mock.push(Reply::Text("it crashed".into()));
    start_run(&client, &daemon, "crash").await;
    eventually("/healthz to show the server down", WAIT, || async {
        (server_state(&daemon, "t").await == "restarting").then_some(())
    })
    .await;
    // ... and so does the metric: the server is down, so it is 0.
    eventually("aurad_mcp_server_up to be 0", WAIT, || async {
        (mcp_up(&daemon, "t").await == Some(("restarting".into(), 0.0))).then_some(())
    })
    .await;
    daemon.stop().await.unwrap();
}

/// `aurad_reloads_total` (every attempt) and `aurad_reload_errors_total`.
async fn reload_counts(daemon: &InProc) -> (u64, u64) {
    let text = metrics_text(daemon).await;
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    (
        value("aurad_reloads_total"),
        value("aurad_reload_errors_total"),
    )
}

/// `aurad_mcp_server_up{server=name}`'s `state` label and value, if the
/// metric has that server.
async fn mcp_up(daemon: &InProc, name: &str) -> Option<(String, f64)> {
    let text = metrics_text(daemon).await;
    let prefix = format!("aurad_mcp_server_up{{server=\"{name}\",state=\"");
    text.lines().find_map(|line| {
        let (state, value) = line.strip_prefix(&prefix)?.split_once("\"} ")?;
        Some((state.to_owned(), value.trim().parse().unwrap()))
    })
}

/// The state `/healthz` shows for MCP server `name`.
async fn server_state(daemon: &InProc, name: &str) -> String {
    let (_, body) = get(daemon, "/healthz").await;
    body["mcp_servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .map(|s| s["state"].as_str().unwrap().to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_load_is_not_retried_at_each_mcp_state_change() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\ntools: [\"t_*\", \"u_*\"]\n",
    );
    let root = dir.path();
    let server = support::mcp_test_server();
    let mcp = serde_json::json!({ "mcpServers": { "t": { "command": server }, "u": { "command": server } } });
    write(root, "mcp.json", &mcp.to_string());
    let daemon = start(root, watching()).await;
    let client = reqwest::Client::new();
    let counts = |attempts, errors| {
        let daemon = &daemon;
        move || async move { (reload_counts(daemon).await == (attempts, errors)).then_some(()) }
    };

    // An error in aurad.yaml: the load is rejected, `a` keeps running.
    let settings = std::fs::read_to_string(root.join("aurad.yaml")).unwrap();
    write(
        root,
        "aurad.yaml",
        &format!("{settings}max_concurrent_runs: lots\n"),
    );
    eventually("the rejected load", WAIT, counts(1, 1)).await;
    // `t` changes its tools: one more load, rejected for the same file.
    mock.push(Reply::tool_call("h", "t_hide", r#"{"name": "echo"}"#));
    mock.push(Reply::Text("hidden".into()));
    start_run(&client, &daemon, "hide").await;
    eventually("a load for the new tools", WAIT, counts(2, 2)).await;

    // `u` crashes and comes back with the same tools: its state changes,
    // the tools do not, so no load is tried.
    mock.push(Reply::tool_call("c", "u_crash", "{}"));
    mock.push(Reply::Text("crashed".into()));
    start_run(&client, &daemon, "crash u").await;
    eventually("u to restart", WAIT, || async {
        (server_state(&daemon, "u").await == "restarting").then_some(())
    })
    .await;
    eventually("u to be back", WAIT, || async {
        (server_state(&daemon, "u").await == "connected").then_some(())
    })
    .await;
    // The fix of the file is the next load: one attempt, and it succeeds.
    write(root, "aurad.yaml", &settings);
    eventually("the fixed load", WAIT, counts(3, 2)).await;
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vscode_mcp_file_added_later_is_loaded_and_followed() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\ntools: [\"v_*\", \"w_*\"]\n",
    );
    let root = dir.path();
    let daemon = start(root, watching()).await;
    assert!(agent_tools(&daemon).await.is_empty());

    // Written as VS Code does, in a `.vscode` directory made after the start.
    let server = support::mcp_test_server();
    let vscode = serde_json::json!({ "servers": { "v": { "type": "stdio", "command": server } } });
    std::fs::create_dir(root.join(".vscode")).unwrap();
    write(root, ".vscode/mcp.json", &vscode.to_string());
    eventually("v's tools", WAIT, || async {
        agent_tools(&daemon)
            .await
            .contains(&"v_echo".to_string())
            .then_some(())
    })
    .await;

    // An edit of the file is followed too.
    let renamed = serde_json::json!({ "servers": { "w": { "command": server } } });
    write(root, ".vscode/mcp.json", &renamed.to_string());
    eventually("w's tools instead of v's", WAIT, || async {
        let tools = agent_tools(&daemon).await;
        (tools.contains(&"w_echo".to_string()) && !tools.contains(&"v_echo".to_string()))
            .then_some(())
    })
    .await;
    daemon.stop().await.unwrap();
}
