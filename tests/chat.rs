//! `aurad chat` driven as a person would: the real binary in a real
//! pseudo-terminal (rexpect), a mock model on loopback. Two turns (the
//! second request holds the first), Ctrl-C mid-turn stops the turn and not
//! the chat, `--continue` and `/resume` after the process ended, the slash
//! commands; and the same chat scripted through a pipe. (rexpect reads the
//! terminal byte by byte, so what the test waits for is ASCII.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use rexpect::session::{PtySession, spawn_command};
use support::mock_llm::{MockLlm, Recorded, Reply};

const AGENT: &str = "model: mock/m\nsystem: s\n";

fn chat_command(root: &std::path::Path, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_aurad"));
    command
        .arg("--dir")
        .arg(root)
        .arg("chat")
        .arg("a")
        .args(args)
        .env("XDG_STATE_HOME", root.join(".state"))
        .env("NO_COLOR", "1")
        .env("TERM", "xterm");
    command
}

fn spawn_chat(root: &std::path::Path, args: &[&str]) -> PtySession {
    spawn_command(chat_command(root, args), Some(20_000)).expect("aurad chat starts in a pty")
}

/// (role, content) of a request's messages, without the system prompt.
fn conversation(request: &Recorded) -> Vec<(String, String)> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn pair(role: &str, content: &str) -> (String, String) {
    (role.to_string(), content.to_string())
}

#[test]
fn a_chat_in_a_terminal_keeps_its_session_across_turns_ctrl_c_and_restarts() {
    let mock = MockLlm::start_in_thread();
    let dir = support::project::project_with_mock(&mock, AGENT);
    let root = dir.path();
    let mut chat = spawn_chat(root, &[]);
    let (_, id) = chat.exp_regex(r"session ([0-9a-f-]{36})").unwrap();
    let id = id.trim_start_matches("session ").to_string();
    chat.exp_string("> ").unwrap();
    // Turn one.
    mock.push(Reply::Text("first answer".into()));
    chat.send_line("hello").unwrap();
    chat.exp_string("first answer").unwrap();
    chat.exp_string("> ").unwrap();
    // Turn two hangs; Ctrl-C stops it and the chat goes on.
    mock.push(Reply::Hang);
    chat.send_line("second").unwrap();
    mock.wait_for_requests_blocking(2, Duration::from_secs(20));
    chat.send_control('c').unwrap();
    chat.exp_string("stopped; your message stays in the session")
        .unwrap();
    chat.exp_string("> ").unwrap();
    // Turn three holds everything before it.
    mock.push(Reply::Text("third answer".into()));
    chat.send_line("third").unwrap();
    chat.exp_string("third answer").unwrap();
    chat.exp_string("> ").unwrap();
    let third = mock.requests().pop().unwrap();
    assert_eq!(
        conversation(&third),
        [
            pair("user", "hello"),
            pair("assistant", "first answer"),
            pair("user", "second"),
            pair("user", "third"),
        ]
    );
    // Commands.
    chat.send_line("/history").unwrap();
    chat.exp_string("you: hello").unwrap();
    chat.exp_string("agent: first answer").unwrap();
    chat.exp_string("agent: third answer").unwrap();
    chat.send_line("/cost").unwrap();
    chat.exp_string("3 turns").unwrap();
    chat.send_line("/nonsense").unwrap();
    chat.exp_string("unknown command /nonsense").unwrap();
    // Ctrl-D leaves.
    chat.send_control('d').unwrap();
    chat.exp_eof().unwrap();

    // A new process goes on in the last session with --continue.
    let mut chat = spawn_chat(root, &["--continue"]);
    chat.exp_string(&format!("session {id} (3 turns so far"))
        .unwrap();
    chat.exp_string("> ").unwrap();
    mock.push(Reply::Text("fourth answer".into()));
    chat.send_line("fourth").unwrap();
    chat.exp_string("fourth answer").unwrap();
    chat.exp_string("> ").unwrap();
    let fourth = mock.requests().pop().unwrap();
    assert_eq!(
        conversation(&fourth).len(),
        6,
        "{:?}",
        conversation(&fourth)
    );
    // /new starts afresh; /resume with the start of the id goes back.
    chat.send_line("/new").unwrap();
    chat.exp_string("new session").unwrap();
    mock.push(Reply::Text("fresh".into()));
    chat.send_line("fresh start").unwrap();
    chat.exp_string("fresh").unwrap();
    chat.exp_string("> ").unwrap();
    assert_eq!(
        conversation(&mock.requests().pop().unwrap()),
        [pair("user", "fresh start")]
    );
    chat.send_line(&format!("/resume {}", &id[..13])).unwrap();
    chat.exp_string(&format!("session {id}")).unwrap();
    chat.exp_string("4 turns").unwrap();
    chat.send_line("/sessions").unwrap();
    chat.exp_string("fresh start").unwrap();
    chat.send_line("/exit").unwrap();
    chat.exp_eof().unwrap();

    // And by id, with --session.
    let mut chat = spawn_chat(root, &["--session", &id]);
    chat.exp_string(&format!("session {id} (4 turns so far"))
        .unwrap();
    chat.send_control('d').unwrap();
    chat.exp_eof().unwrap();
}

#[test]
fn a_piped_chat_reads_one_message_per_line_and_prints_the_answers() {
    let mock = MockLlm::start_in_thread();
    let dir = support::project::project_with_mock(&mock, AGENT);
    mock.push(Reply::Text("answer one".into()));
    mock.push(Reply::Text("answer two".into()));
    let mut child = chat_command(dir.path(), &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"first question\n\nsecond question\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "answer one\nanswer two\n"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        conversation(&requests[1]),
        [
            pair("user", "first question"),
            pair("assistant", "answer one"),
            pair("user", "second question"),
        ]
    );
}

#[test]
fn chat_refuses_an_unknown_session_and_a_pipeline_clearly() {
    let mock = MockLlm::start_in_thread();
    let dir = support::project::project_with_mock(&mock, AGENT);
    let out = chat_command(dir.path(), &["--session", "nope"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("agent `a` has no session `nope`; list them with /sessions"),
        "{err}"
    );
    std::fs::write(
        dir.path().join("agents/flow.yaml"),
        "steps:\n  - id: one\n    agent: a\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_aurad"))
        .arg("--dir")
        .arg(dir.path())
        .args(["chat", "flow"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is a pipeline"), "{err}");
    assert_ne!(out.status.code(), Some(0));
}

#[test]
fn a_gated_call_is_asked_about_inline_and_runs_once_allowed() {
    let mock = MockLlm::start_in_thread();
    let dir = support::project::project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\ntools: [calculator]\napprove: [calculator]\n",
    );
    let mut chat = spawn_chat(dir.path(), &[]);
    chat.exp_string("> ").unwrap();
    mock.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "calculator".into(),
        r#"{"expression":"2+3"}"#.into(),
    )]));
    mock.push(Reply::Text("five".into()));
    chat.send_line("add 2 and 3").unwrap();
    chat.exp_string("`calculator` wants to run with").unwrap();
    chat.exp_string("allow it? [y/N] ").unwrap();
    chat.send_line("y").unwrap();
    chat.exp_string("five").unwrap();
    chat.exp_string("> ").unwrap();
    let last = mock.requests().pop().unwrap();
    let tool = last
        .messages()
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the call ran and its result went back");
    assert_eq!(tool["content"], "5");
    chat.send_control('d').unwrap();
    chat.exp_eof().unwrap();
}
