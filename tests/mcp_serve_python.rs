//! The project's agents as MCP tools, driven by the official MCP Python
//! SDK as a real client (`tests/clients/mcp_client.py`): over stdio
//! (`aurad mcp serve` as the SDK's child) and over streamable HTTP (`/mcp`
//! of `aurad serve`, with the bearer token). It lists the tools, calls
//! them with a progress callback (progress notifications arrive), reads
//! a structured result, and cancels a call whose model never answers: the
//! run must be stored `cancelled` while the session is still open, and
//! the server must still answer afterwards.
//!
//! Needs `python3` with the `mcp` package (`python3 -m pip install mcp`).
//! Without it each test says so and passes, unless `CI` is set: then it
//! fails, so CI never skips it silently.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;

use serde_json::Value;

use support::mcp_agents::{OFFERED, TOKEN, WRITER_ANSWER, wait_stored, write_project};
use support::mock_llm::MockLlm;
use support::serve::{DEADLINE, KillOnDrop, Serve};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/mcp_client.py");

/// Whether the SDK can be imported; `false` (after saying so) only when it
/// is missing outside CI.
fn sdk_available() -> bool {
    let probe = Command::new("python3").args(["-c", "import mcp"]).output();
    let missing = match probe {
        Ok(out) if out.status.success() => return true,
        Ok(out) => String::from_utf8_lossy(&out.stderr).into_owned(),
        Err(e) => format!("python3 cannot be started: {e}"),
    };
    if std::env::var_os("CI").is_some() {
        panic!("the MCP Python SDK is needed in CI (python3 -m pip install mcp): {missing}");
    }
    // Written to stderr directly, not through the test's captured output,
    // so the skip shows even when the test passes.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: the MCP Python SDK is not installed ({}); install it with `python3 -m pip install mcp` to run this test",
        missing.trim().lines().last().unwrap_or_default()
    );
    false
}

/// The client script's arguments for a transport.
enum Via<'a> {
    Stdio(&'a Path),
    Http(SocketAddr),
}

fn client(via: &Via<'_>, scenario: &str) -> Command {
    let mut command = Command::new("python3");
    command.arg(SCRIPT);
    match via {
        Via::Stdio(root) => {
            command
                .arg("stdio")
                .arg(assert_cmd::cargo::cargo_bin!("aurad"))
                .arg(root);
        }
        Via::Http(addr) => {
            command
                .arg("http")
                .arg(format!("http://{addr}/mcp"))
                .arg(TOKEN);
        }
    }
    command.arg(scenario);
    command
}

/// The `call` scenario's report.
fn call_scenario(via: &Via<'_>) -> Value {
    let out = client(via, "call").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the client failed:\n{stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)))
}

fn check_call(report: &Value) {
    let names: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, OFFERED, "{report:#}");
    assert_eq!(
        report["answer"],
        serde_json::json!({ "text": WRITER_ANSWER, "is_error": false })
    );
    assert_eq!(
        report["structured"],
        serde_json::json!({ "content": { "title": "A title" }, "is_error": false })
    );
    let messages: Vec<&str> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["message"].as_str().unwrap_or_default())
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("of `writer` started")),
        "{messages:?}"
    );
    assert!(messages.contains(&"model turn 1 done"), "{messages:?}");
    let values: Vec<f64> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "progress increases: {values:?}"
    );
}

/// The `cancel` scenario: the call is cancelled mid-run; the run must be
/// stored `cancelled` while the session is open; then the server answers
/// another call.
fn cancel_scenario(via: &Via<'_>, root: &Path) {
    let mut child = client(via, "cancel")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut child = KillOnDrop(child);
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let log = std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
    let line = received.recv_timeout(DEADLINE);
    let Ok(line) = line else {
        let _ = child.0.kill();
        panic!(
            "no `cancelled` line from the client:\n{}",
            log.join().unwrap()
        );
    };
    let run_id = line
        .strip_prefix("cancelled ")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .to_string();
    let run = wait_stored(root, "slow", &run_id, "cancelled");
    assert_eq!(run["trigger"], "mcp", "{run}");
    writeln!(stdin, "go on").unwrap();
    let after = received.recv_timeout(DEADLINE);
    let Ok(after) = after else {
        let _ = child.0.kill();
        panic!("no answer after the cancel:\n{}", log.join().unwrap());
    };
    assert_eq!(after, format!("after {WRITER_ANSWER}"));
    drop(stdin);
    let status = support::serve::poll("the client to exit", String::new, || {
        child.0.try_wait().unwrap()
    });
    assert!(status.success(), "{}", log.join().unwrap());
}

#[test]
fn python_sdk_over_stdio_lists_calls_and_gets_progress() {
    if !sdk_available() {
        return;
    }
    let mock = MockLlm::start_in_thread();
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path(), &mock);
    check_call(&call_scenario(&Via::Stdio(dir.path())));
}

#[test]
fn python_sdk_over_stdio_cancels_the_run() {
    if !sdk_available() {
        return;
    }
    let mock = MockLlm::start_in_thread();
    let dir = tempfile::tempdir().unwrap();
    write_project(dir.path(), &mock);
    cancel_scenario(&Via::Stdio(dir.path()), dir.path());
}

#[test]
fn python_sdk_over_http_lists_calls_and_gets_progress() {
    if !sdk_available() {
        return;
    }
    let mock = MockLlm::start_in_thread();
    let dir = tempfile::tempdir().unwrap();
    let addr = write_project(dir.path(), &mock);
    let _serve = Serve::start_with_env(dir.path(), addr, &[], &[("AURAD_TOKEN", TOKEN)]);
    check_call(&call_scenario(&Via::Http(addr)));
}

#[test]
fn python_sdk_over_http_cancels_the_daemons_run() {
    if !sdk_available() {
        return;
    }
    let mock = MockLlm::start_in_thread();
    let dir = tempfile::tempdir().unwrap();
    let addr = write_project(dir.path(), &mock);
    let _serve = Serve::start_with_env(dir.path(), addr, &[], &[("AURAD_TOKEN", TOKEN)]);
    cancel_scenario(&Via::Http(addr), dir.path());
}
