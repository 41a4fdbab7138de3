//! The project's agents as MCP tools, through rmcp's client: `aurad mcp
//! serve` over stdio (the real binary as a child) and `/mcp` of `aurad
//! serve` over streamable HTTP with the API's bearer token (refused
//! without it). The tools are the agents `mcp_server.agents` offers; a call
//! runs the agent (recorded with trigger `mcp`) and answers with its text,
//! its JSON result for an `output_schema` agent, or `isError` for a run
//! that failed. The models are a mock server on 127.0.0.1.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::json;

use support::mcp_agents::{OFFERED, TOKEN, WRITER_ANSWER, runs_of, write_project};
use support::mock_llm::MockLlm;
use support::serve::{Serve, aurad, http_post_json};

type Client = RunningService<RoleClient, ()>;

/// `aurad mcp serve` of `root` as an rmcp client's child; its stderr goes
/// to `log`.
async fn stdio_client(root: &std::path::Path, log: &tempfile::NamedTempFile) -> Client {
    let mut command = tokio::process::Command::from(aurad(root));
    command.args(["mcp", "serve"]);
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(log.reopen().unwrap())
        .spawn()
        .unwrap();
    ().serve(transport).await.unwrap()
}

async fn call(client: &Client, tool: &str, input: &str) -> CallToolResult {
    let args = json!({ "input": input }).as_object().unwrap().clone();
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args))
        .await
        .unwrap()
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

fn run_id(result: &CallToolResult) -> String {
    let meta = result.meta.as_ref().expect("the result names its run");
    meta.0["aurad/run_id"].as_str().unwrap().to_string()
}

/// What every client sees, whatever the transport: the offered tools, an
/// answer, a structured result, a failure as `isError`.
async fn check_tools(client: &Client, root: &std::path::Path) {
    let tools: Vec<Tool> = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, OFFERED, "`hidden` is left out by mcp_server.agents");
    let writer = tools.iter().find(|t| t.name == "writer").unwrap();
    assert_eq!(writer.description.as_deref(), Some("Writes short texts."));
    assert_eq!(writer.input_schema["required"], json!(["input"]));
    assert_eq!(writer.input_schema["properties"]["input"]["type"], "string");
    assert_eq!(writer.output_schema, None);
    let slow = tools.iter().find(|t| t.name == "slow").unwrap();
    assert!(
        slow.description.as_deref().unwrap().contains("`slow`"),
        "a fallback description names the agent: {slow:?}"
    );
    let summary = tools.iter().find(|t| t.name == "summary").unwrap();
    assert_eq!(
        summary.output_schema.as_ref().unwrap()["required"],
        json!(["title"])
    );

    let answer = call(client, "writer", "write it").await;
    assert_eq!(answer.is_error, Some(false), "{answer:?}");
    assert_eq!(text(&answer), WRITER_ANSWER);
    let id = run_id(&answer);
    let stored = runs_of(root, "writer");
    let run = stored.iter().find(|r| r["id"] == id.as_str()).unwrap();
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(run["trigger"], "mcp", "{run}");
    assert_eq!(run["input"], "write it", "{run}");

    let structured = call(client, "summary", "sum it up").await;
    assert_eq!(structured.is_error, Some(false), "{structured:?}");
    assert_eq!(
        structured.structured_content,
        Some(json!({ "title": "A title" }))
    );

    let failed = call(client, "broken", "fail please").await;
    assert_eq!(failed.is_error, Some(true), "{failed:?}");
    let why = text(&failed);
    let id = run_id(&failed);
    assert!(
        why.contains(&format!("run {id} of agent `broken` ended failed")),
        "{why}"
    );
    assert!(why.contains("the mock refuses this request"), "{why}");

    let missing = client
        .call_tool(CallToolRequestParams::new("writer"))
        .await
        .unwrap();
    assert_eq!(missing.is_error, Some(true));
    assert!(text(&missing).contains("needs `input`"), "{missing:?}");

    let unknown = client
        .call_tool(CallToolRequestParams::new("hidden"))
        .await
        .unwrap_err();
    assert!(
        unknown.to_string().contains("no tool `hidden`"),
        "{unknown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_serves_the_offered_agents_as_tools() {
    let mock = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path(), &mock);
    let log = tempfile::NamedTempFile::new().unwrap();
    let client = stdio_client(dir.path(), &log).await;
    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "aurad");
    check_tools(&client, dir.path()).await;
    client.cancel().await.unwrap();
    let log = std::fs::read_to_string(log.path()).unwrap();
    assert!(
        log.contains("4 agent(s) offered as tools on stdin/stdout"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_offers_them_on_mcp_behind_the_token() {
    let mock = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let addr = write_project(dir.path(), &mock);
    let root = dir.path().to_path_buf();
    let _serve = tokio::task::spawn_blocking(move || {
        Serve::start_with_env(&root, addr, &[], &[("AURAD_TOKEN", TOKEN)])
    })
    .await
    .unwrap();
    let url = format!("http://{addr}/mcp");

    // Without the token, or with another, nothing is served.
    for token in [None, Some("wrong")] {
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::from_config(config);
        let refused = ().serve(transport).await;
        assert!(refused.is_err(), "token {token:?} was let in");
    }
    let raw = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 401);
    assert_eq!(raw.headers()["www-authenticate"], "Bearer");
    // A web page's request is refused before the token is looked at.
    let page = reqwest::Client::new()
        .post(&url)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("origin", "http://evil.example")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 403);

    let config = StreamableHttpClientTransportConfig::with_uri(url.as_str()).auth_header(TOKEN);
    let client = ().serve(StreamableHttpClientTransport::from_config(config)).await.unwrap();
    check_tools(&client, dir.path()).await;
    client.cancel().await.unwrap();
    // The routes table says where it is.
    let (status, body) =
        tokio::task::spawn_blocking(move || http_post_json(addr, "/nowhere", "{}").unwrap())
            .await
            .unwrap();
    assert_eq!(status, 404);
    assert!(body.contains("/mcp"), "{body}");
}

#[test]
fn validate_warns_of_an_offered_agent_that_does_not_exist() {
    let mock = MockLlm::start_in_thread();
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path(), &mock);
    let settings = dir.path().join("aurad.yaml");
    let text = std::fs::read_to_string(&settings)
        .unwrap()
        .replace("[writer, summary, slow, broken]", "[writer, ghost]");
    std::fs::write(&settings, text).unwrap();
    let out = aurad(dir.path()).arg("validate").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a warning stops nothing: {stderr}");
    assert!(
        stderr.lines().any(|l| l.starts_with("aurad.yaml:6:20:")
            && l.contains("mcp_server.agents: there is no agent `ghost` (no agents/ghost.yaml)")),
        "{stderr}"
    );
}

/// The client leaves (closes stdin) while a call's run waits on the model:
/// `aurad mcp serve` cancels the run, records it `cancelled`, and exits 0,
/// having written nothing on stdout but JSON-RPC lines.
#[test]
fn stdio_records_the_runs_in_flight_cancelled_when_the_client_leaves() {
    use std::io::{BufRead, BufReader, Write};
    let mock = MockLlm::start_in_thread();
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path(), &mock);
    let mut child = aurad(dir.path())
        .args(["mcp", "serve"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let stderr = child.stderr.take().unwrap();
    let mut child = support::serve::KillOnDrop(child);
    let log = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}});
    writeln!(stdin, "{initialize}").unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["result"]["serverInfo"]["name"], "aurad", "{line}");
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
    )
    .unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "slow", "arguments": {"input": "take your time"}}});
    writeln!(stdin, "{call}").unwrap();
    mock.wait_for_requests_blocking(1, support::serve::DEADLINE);
    drop(stdin);
    let status = support::serve::poll("aurad mcp serve to exit", String::new, || {
        child.0.try_wait().unwrap()
    });
    let log = log.join().unwrap();
    assert!(status.success(), "{status:?}\n{log}");
    let rest = std::io::read_to_string(stdout).unwrap();
    for line in rest.lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "stdout holds only the protocol: {line:?}"
        );
    }
    let runs = runs_of(dir.path(), "slow");
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0]["state"], "cancelled", "{runs:#?}\n{log}");
    assert_eq!(runs[0]["trigger"], "mcp");
}
