//! Hot reload with real files and real file-system events: agents added,
//! changed, saved by rename, deleted; a broken agent file keeps its last
//! good version serving and is logged with its place (more in
//! `tests/isolation.rs`); a run started before a change
//! finishes on the definition it started with.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::sync::{Arc, Mutex};

use support::inproc::{
    InProc, WAIT, eventually, get, hash, start, start_run, wait_hash, watching, write,
};
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_added_changed_rename_saved_and_deleted_are_picked_up() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: mock/m\nprompt: one\n");
    let root = dir.path();
    let daemon = start(root, watching()).await;
    let first = hash(&daemon, "a").await.expect("a is served");
    assert_eq!(hash(&daemon, "b").await, None);

    write(root, "agents/b.yaml", "model: mock/m\nprompt: bee\n");
    assert!(wait_hash(&daemon, "b", None).await.is_some());

    write(root, "agents/a.yaml", "model: mock/m\nprompt: two\n");
    let second = wait_hash(&daemon, "a", Some(&first)).await.unwrap();

    // An editor's atomic save: write a temporary file, rename it over.
    write(
        root,
        "agents/.a.yaml.swp-tmp",
        "model: mock/m\nprompt: three\n",
    );
    std::fs::rename(
        root.join("agents/.a.yaml.swp-tmp"),
        root.join("agents/a.yaml"),
    )
    .unwrap();
    let third = wait_hash(&daemon, "a", Some(&second)).await.unwrap();
    assert_ne!(third, first);

    std::fs::remove_file(root.join("agents/b.yaml")).unwrap();
    eventually("b removed", WAIT, || async {
        hash(&daemon, "b").await.is_none().then_some(())
    })
    .await;

    let metrics = daemon
        .client()
        .get(daemon.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("aurad_reloads_total"), "{metrics}");
    daemon.stop().await.unwrap();
}

/// Collects the daemon's log lines (the test runs on one thread, so the
/// daemon's tasks log through this thread's default subscriber). Other
/// tests of this file must not make a daemon log a skipped item or
/// `reload rejected` on other threads meanwhile: tracing's per-callsite interest cache can then
/// drop this thread's events (hence `tests/reload_mcp.rs`).
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn a_broken_edit_keeps_the_last_good_version_serving_and_is_logged_with_its_place() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: mock/m\nprompt: good\n");
    let root = dir.path();
    let daemon = start(root, watching()).await;
    let good = hash(&daemon, "a").await.unwrap();

    write(
        root,
        "agents/a.yaml",
        "model: mock/m\nprompt: good\nlimits: { max_iterations: zero }\n",
    );
    eventually("the kept version logged", WAIT, || async {
        logs.text()
            .contains("kept the last good version of agent `a`: agents/a.yaml:3:")
            .then_some(())
    })
    .await;
    assert_eq!(hash(&daemon, "a").await.as_deref(), Some(good.as_str()));
    let metrics = daemon
        .client()
        .get(daemon.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    // The reload went through (other files would have been picked up).
    assert!(metrics.contains("aurad_reload_errors_total 0"), "{metrics}");
    assert!(
        metrics.contains("aurad_config_skipped{kind=\"agent\"} 1"),
        "{metrics}"
    );

    // Fixing it is picked up.
    write(root, "agents/a.yaml", "model: mock/m\nprompt: fixed\n");
    wait_hash(&daemon, "a", Some(&good)).await.unwrap();
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_flight_finishes_on_the_definition_it_started_with() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: version one\ntools: [bash]\n");
    let root = dir.path();
    let gate = root.join("go");
    // The run's first turn waits in a tool until the test opens the gate.
    mock.push(Reply::tool_call(
        "c1",
        "bash",
        &serde_json::json!({ "command": format!("while [ ! -f '{}' ]; do sleep 0.02; done; echo open", gate.display()) }).to_string(),
    ));
    mock.set_fallback(Reply::Text("done".into()));
    let daemon = start(root, watching()).await;
    let old_hash = hash(&daemon, "a").await.unwrap();
    let client = daemon.client();
    let run = start_run(&client, &daemon, "go").await;
    let id = run["id"].as_str().unwrap().to_string();
    mock.wait_for_requests(1, WAIT).await;

    write(
        root,
        "agents/a.yaml",
        "model: mock/m\nsystem: version two\ntools: [bash]\n",
    );
    let new_hash = wait_hash(&daemon, "a", Some(&old_hash)).await.unwrap();
    std::fs::write(&gate, "").unwrap();

    let finished = eventually("the first run to end", WAIT, || async {
        let (_, run) = get(&daemon, &format!("/v1/runs/{id}")).await;
        (run["state"] != "queued" && run["state"] != "running").then_some(run)
    })
    .await;
    assert_eq!(finished["state"], "succeeded", "{finished}");
    assert_eq!(finished["definition_hash"], old_hash.as_str());
    let requests = mock.requests();
    let system = |i: usize| {
        requests[i].messages()[0]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(system(1), "version one", "the turn after the reload");

    let run = start_run(&client, &daemon, "again").await;
    assert_eq!(run["definition_hash"], new_hash.as_str());
    mock.wait_for_requests(3, WAIT).await;
    assert_eq!(mock.requests()[2].messages()[0]["content"], "version two");
    daemon.stop().await.unwrap();
}

/// Triggers a run whose model calls `t_pid` and returns the MCP server's
/// process id from the tool result the next request carries.
async fn mcp_server_pid(daemon: &InProc, mock: &MockLlm) -> String {
    let before = mock.request_count();
    mock.push(Reply::tool_call("p", "t_pid", "{}"));
    mock.push(Reply::Text("noted".into()));
    let response = daemon
        .client()
        .post(daemon.url("/v1/agents/a/runs"))
        .json(&serde_json::json!({ "input": "pid?" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let requests = mock.wait_for_requests(before + 2, WAIT).await;
    let last = requests[before + 1].messages().last().unwrap().clone();
    assert_eq!(last["role"], "tool", "{last}");
    last["content"].as_str().unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_changed_mcp_servers_reconnect() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\ntools: [\"t_*\"]\n");
    let root = dir.path();
    let mcp = |args: &[&str]| {
        serde_json::json!({ "mcpServers": { "t": { "command": support::mcp_test_server(), "args": args } } })
            .to_string()
    };
    write(root, "mcp.json", &mcp(&[]));
    let daemon = start(root, watching()).await;
    let first = mcp_server_pid(&daemon, &mock).await;

    // Another agent changes: the server keeps running.
    let old = hash(&daemon, "a").await.unwrap();
    write(
        root,
        "agents/a.yaml",
        "model: mock/m\nsystem: s2\ntools: [\"t_*\"]\n",
    );
    wait_hash(&daemon, "a", Some(&old)).await;
    assert_eq!(mcp_server_pid(&daemon, &mock).await, first);

    // Its own configuration changes: it is restarted.
    write(root, "mcp.json", &mcp(&["--startup-delay", "0"]));
    eventually("the MCP server to restart", WAIT, || async {
        let pid = mcp_server_pid(&daemon, &mock).await;
        (pid != first && pid.parse::<u32>().is_ok()).then_some(pid)
    })
    .await;
    daemon.stop().await.unwrap();
}
