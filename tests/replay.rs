//! `aurad replay RUN|AGENT` end to end: a real `aurad run` against a mock LLM
//! server on 127.0.0.1 (one bash tool round that creates a file), recorded
//! in the project's SQLite store; then the real binary replays it. An
//! identical replay exits 0 with no request to the mock and no file
//! created by the tool; an agent changed so the recorded answers lead
//! elsewhere exits 3 naming the turn and both sides; an unknown run and a
//! run whose events are gone exit 1.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;

use assert_cmd::cargo::cargo_bin_cmd;
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;

const AGENT: &str = "model: mock/m\nsystem: You help.\ntools: [bash]\n";
const COMMAND: &str = r#"{"command":"touch made-by-tool && echo hi"}"#;

/// Records one run of agent `a` (a bash round, then "done: hi") and
/// returns its id; the tool really ran.
fn record(mock: &MockLlm, root: &Path) -> String {
    let before = mock.request_count();
    mock.push(Reply::tool_call("call_1", "bash", COMMAND));
    mock.push(Reply::Text("done: hi".into()));
    cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(root)
        .args(["run", "a", "--input", "make the file"])
        .assert()
        .code(0);
    assert_eq!(mock.request_count(), before + 2);
    let made = root.join("made-by-tool");
    assert!(made.exists(), "the recorded run's tool created the file");
    std::fs::remove_file(&made).unwrap();
    let out = cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(root)
        .args(["runs", "--json"])
        .output()
        .unwrap();
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    runs[0]["id"].as_str().unwrap().to_string()
}

fn replay(root: &Path, run: &str) -> (i32, String, String) {
    let out = cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(root)
        .args(["replay", run])
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn an_unchanged_agent_replays_identically_offline_and_without_side_effects() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, AGENT);
    let run = record(&mock, dir.path());
    let (code, stdout, stderr) = replay(dir.path(), &run);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("(2 model turn(s), 1 tool call(s) recorded)"),
        "{stdout}"
    );
    assert!(stdout.contains("identical"), "{stdout}");
    assert_eq!(mock.request_count(), 2, "replay made no model request");
    assert!(
        !dir.path().join("made-by-tool").exists(),
        "replay ran no real tool"
    );
}

#[test]
fn an_agent_name_replays_its_newest_run() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, AGENT);
    record(&mock, dir.path());
    let newest = record(&mock, dir.path());
    let (code, stdout, stderr) = replay(dir.path(), "a");
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("replayed run {newest} of agent `a`")),
        "{stdout}"
    );
}

#[test]
fn a_tool_taken_away_diverges_at_its_turn_with_both_sides() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, AGENT);
    let run = record(&mock, dir.path());
    std::fs::write(
        dir.path().join("agents/a.yaml"),
        "model: mock/m\nsystem: You help.\ntools: [read_file]\n",
    )
    .unwrap();
    let (code, stdout, stderr) = replay(dir.path(), &run);
    assert_eq!(code, 3, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("note: agents/a.yaml changed since this run"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "turn 1: `bash` gave a different result\n  recorded: hi\n\n  replay:   (error) error: tool `bash` is not available to this agent; available tools: read_file"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("diverged: 1 difference(s)"), "{stdout}");
    assert_eq!(mock.request_count(), 2);
    assert!(!dir.path().join("made-by-tool").exists());
}

#[test]
fn an_output_schema_added_asks_for_a_turn_the_recording_does_not_have() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, AGENT);
    let run = record(&mock, dir.path());
    std::fs::write(
        dir.path().join("agents/a.yaml"),
        "model: mock/m\nsystem: You help.\ntools: [bash]\noutput_schema: { type: object, required: [answer] }\n",
    )
    .unwrap();
    let (code, stdout, _) = replay(dir.path(), &run);
    assert_eq!(code, 3, "{stdout}");
    assert!(
        stdout.contains("more model turns\n  recorded: 2\n  replay:   3"),
        "{stdout}"
    );
    assert!(
        stdout.contains("a different end\n  recorded: succeeded: done: hi\n  replay:   failed (model call failed: bad response stream: no recorded answer for model turn 3: the recording has 2 turn(s))"),
        "{stdout}"
    );
    assert_eq!(mock.request_count(), 2);
}

#[test]
fn an_unknown_run_and_a_run_without_events_are_errors() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, AGENT);
    let (code, _, stderr) = replay(dir.path(), "no-such-run");
    assert_eq!(code, 1);
    assert!(stderr.contains("no run \"no-such-run\""), "{stderr}");
    let run = record(&mock, dir.path());
    // What retention does to an old run: its events go, the row stays.
    let db = rusqlite::Connection::open(dir.path().join("aurad.db")).unwrap();
    db.execute("DELETE FROM events WHERE run_id = ?1", [&run])
        .unwrap();
    drop(db);
    let (code, _, stderr) = replay(dir.path(), &run);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("has no complete record of events (pruned by retention, or cut off)"),
        "{stderr}"
    );
}
