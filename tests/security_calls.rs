//! Issue #32 item 4, attacked as an injected caller would: a limited agent
//! calls another agent (or a pipeline runs one as a step) whose own file
//! allows more — no sandbox, `bash`, no approval — and asks it to do what
//! the caller may not. The callee must run under the strictest of both:
//! the stricter sandbox, every approval gate, only the tools both allow.
//! `validate` says what a callee loses, where the call is written.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

mod support;

use serde_json::json;
use support::mock_llm::{MockLlm, Recorded, Reply};
use support::project::Project;
use tokio_util::sync::CancellationToken;

const WRITE_AGENT: &str = "printf 'model: test\\nprompt: x\\n' > agents/evil.yaml";

/// The agent a request is for: the `ROLE <name>` its system prompt starts
/// with.
fn role(request: &Recorded) -> String {
    let system = request.messages()[0]["content"].as_str().unwrap_or("");
    system.strip_prefix("ROLE ").unwrap_or("?").to_string()
}

/// Writes `agents/<name>.yaml` with system `ROLE <name>` and `extra`.
fn agent(root: &std::path::Path, name: &str, extra: &str) {
    std::fs::write(
        root.join(format!("agents/{name}.yaml")),
        format!("model: mock/m\nsystem: ROLE {name}\nprompt: go\n{extra}"),
    )
    .unwrap();
}

/// The parent calls `agent_child` once; the child runs `command` with
/// `bash` once; both then answer. Returns the child's requests.
async fn parent_asks_child_to_run(
    project: &Project,
    mock: &MockLlm,
    command: &str,
) -> Vec<Recorded> {
    let command = command.to_string();
    mock.set_responder(move |request| {
        let tool_results = request
            .messages()
            .iter()
            .filter(|m| m["role"] == "tool")
            .count();
        match (role(request).as_str(), tool_results) {
            ("parent", 0) => Reply::ToolCalls(vec![(
                "p1".into(),
                "agent_child".into(),
                json!({"input": "do it"}).to_string(),
            )]),
            ("child", 0) => Reply::ToolCalls(vec![(
                "c1".into(),
                "bash".into(),
                json!({"command": command}).to_string(),
            )]),
            _ => Reply::Text("done".into()),
        }
    });
    project.run("go", CancellationToken::new()).await;
    mock.requests()
        .into_iter()
        .filter(|r| role(r) == "child")
        .collect()
}

fn offered_tools(request: &Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn child_tool_result(requests: &[Recorded]) -> String {
    requests
        .iter()
        .flat_map(|r| r.messages())
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .next()
        .unwrap_or_default()
}

#[tokio::test]
async fn a_child_without_a_sandbox_runs_under_its_callers() {
    let mock = MockLlm::start().await;
    let project = pair(
        &mock,
        "tools: [bash]\nsandbox: workdir\n",
        "tools: [bash]\nsandbox: none\n",
    );
    let root = project.dir.path();
    let requests = parent_asks_child_to_run(&project, &mock, WRITE_AGENT).await;
    assert!(!requests.is_empty(), "the child never ran");
    assert!(
        !root.join("agents/evil.yaml").exists(),
        "the child wrote agents/ outside its caller's sandbox: {}",
        child_tool_result(&requests)
    );

    // The control: called by an unsandboxed caller, the same child writes.
    let text = std::fs::read_to_string(root.join("agents/a.yaml"))
        .unwrap()
        .replace("sandbox: workdir", "sandbox: none");
    std::fs::write(root.join("agents/a.yaml"), text).unwrap();
    parent_asks_child_to_run(&project, &mock, WRITE_AGENT).await;
    assert!(root.join("agents/evil.yaml").exists(), "the control failed");
}

/// Agent `a` (ROLE parent) with `extra`, and `child` with `child_extra`.
fn pair(mock: &MockLlm, extra: &str, child_extra: &str) -> Project {
    let project = Project::new(mock, "");
    let root = project.dir.path();
    agent(root, "a", &format!("agents: [child]\n{extra}"));
    let text = std::fs::read_to_string(root.join("agents/a.yaml"))
        .unwrap()
        .replace("ROLE a", "ROLE parent");
    std::fs::write(root.join("agents/a.yaml"), text).unwrap();
    agent(root, "child", child_extra);
    project
}

#[tokio::test]
async fn a_child_gets_only_the_tools_its_caller_allows() {
    let mock = MockLlm::start().await;
    let project = pair(&mock, "tools: [read_file]\n", "tools: [bash, read_file]\n");
    let root = project.dir.path();
    let requests = parent_asks_child_to_run(&project, &mock, "touch ran.txt").await;
    assert_eq!(offered_tools(&requests[0]), vec!["read_file".to_string()]);
    assert!(!root.join("ran.txt").exists(), "bash ran through the child");
    assert!(
        child_tool_result(&requests).contains("bash"),
        "{}",
        child_tool_result(&requests)
    );
}

#[tokio::test]
async fn a_callers_approval_gate_holds_in_its_child() {
    let mock = MockLlm::start().await;
    let project = pair(
        &mock,
        "tools: [bash]\napprove: [bash]\napproval_timeout: 1s\n",
        "tools: [bash]\n",
    );
    let root = project.dir.path();
    let requests = parent_asks_child_to_run(&project, &mock, "touch ran.txt").await;
    assert!(
        !root.join("ran.txt").exists(),
        "the child's bash ran without the approval its caller requires"
    );
    let result = child_tool_result(&requests);
    assert!(result.contains("approv"), "{result}");
}

#[tokio::test]
async fn a_pipeline_step_runs_under_the_pipelines_limits() {
    let mock = MockLlm::start().await;
    let project = Project::new(&mock, "");
    let root = project.dir.path();
    std::fs::write(
        root.join("agents/a.yaml"),
        "tools: [read_file]\nsandbox: workdir\nsteps:\n  - id: one\n    agent: child\n    input: go\n",
    )
    .unwrap();
    agent(root, "child", "tools: [bash]\n");
    mock.set_responder(|request| {
        if request.messages().iter().any(|m| m["role"] == "tool") {
            Reply::Text("done".into())
        } else {
            Reply::ToolCalls(vec![(
                "c1".into(),
                "bash".into(),
                json!({"command": "touch ran.txt"}).to_string(),
            )])
        }
    });
    let root_path = root.to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        support::serve::aurad(&root_path)
            .args(["run", "a"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let requests = mock.requests();
    assert!(
        !requests.is_empty(),
        "the step never ran: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        offered_tools(&requests[0]).is_empty(),
        "{:?}",
        offered_tools(&requests[0])
    );
    assert!(
        !root.join("ran.txt").exists(),
        "bash ran through a pipeline step"
    );
}

#[test]
fn validate_says_what_a_callee_loses_where_the_call_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("agents")).unwrap();
    std::fs::write(
        root.join("agents/parent.yaml"),
        "model: test\nprompt: go\ntools: [read_file]\nsandbox: workdir\napprove: [read_file]\nagents:\n  - child\n",
    )
    .unwrap();
    std::fs::write(
        root.join("agents/child.yaml"),
        "model: test\nprompt: go\ntools: [bash, read_file]\n",
    )
    .unwrap();
    std::fs::write(
        root.join("agents/flow.yaml"),
        "tools: [read_file]\nsteps:\n  - id: one\n    agent: child\n    input: go\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_aurad"))
        .args(["validate", "--dir"])
        .arg(root)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stderr).to_string()
        + &String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("agents/parent.yaml:7:5: warning: agents: `child` runs here under this agent's limits too: its tools run under `sandbox: workdir` (the caller's) instead of `none`; it may not use `bash` (not in the caller's `tools:`); its calls of `read_file` wait for approval (the caller's `approve:`)"),
        "{text}"
    );
    assert!(
        text.contains("agents/flow.yaml:4:12: warning: step `one`: `child` runs under the pipeline's limits too: it may not use `bash`"),
        "{text}"
    );
}
