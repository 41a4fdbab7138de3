//! `tool_calls: text` end to end: the real `aurad run` against a mock
//! OpenAI-compatible server that ignores `tools` and writes its calls as
//! `<tool_call>` text, as many local models do. The tool runs, its result
//! goes back as text, the run ends with the answer; a malformed call gets
//! one repair request that says what was wrong.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

mod support;

use serde_json::Value;
use support::mock_llm::{MockLlm, Recorded, Reply};
use support::serve::{run, show, text};

const AGENT: &str = "model: local/m\nsystem: You compute.\ntools: [calculator]\n";
const CALL: &str =
    r#"<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>"#;

/// A project whose provider `local` is the mock, with `tool_calls: text`.
fn project(mock: &MockLlm) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("aurad.yaml"),
        format!(
            "providers:\n  local: {{ kind: openai, base_url: \"{}\", tool_calls: text }}\n",
            mock.base_url()
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("agents/a.yaml"), AGENT).unwrap();
    dir
}

/// (role, content) of each message of a request.
fn messages(request: &Recorded) -> Vec<(String, String)> {
    request
        .messages()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Every request is plain chat: no `tools`, no tool roles, no native calls.
fn assert_plain_chat(request: &Recorded) {
    assert!(request.body.get("tools").is_none(), "{}", request.body);
    for m in request.messages() {
        assert_ne!(m["role"], "tool", "{m}");
        assert!(m.get("tool_calls").is_none_or(Value::is_null), "{m}");
    }
}

#[test]
fn a_call_written_as_text_runs_the_tool_and_the_run_answers() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Text(format!("I will compute it.\n{CALL}\n")));
    mock.push(Reply::Text("The answer is 42.".into()));
    let dir = project(&mock);
    let out = run(dir.path(), &["run", "a", "--input", "what is 6*7?"]);
    assert!(out.status.success(), "{}", show(&out));
    let stdout = text(&out.stdout);
    assert!(stdout.ends_with("The answer is 42.\n"), "{}", show(&out));
    assert!(!stdout.contains("tool_call"), "{}", show(&out));
    assert!(text(&out.stderr).contains("calculator"), "{}", show(&out));

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    requests.iter().for_each(assert_plain_chat);
    let first = messages(&requests[0]);
    assert_eq!(first[0], ("system".into(), "You compute.".into()));
    assert_eq!(first[1].0, "system");
    assert!(first[1].1.contains("## calculator"), "{}", first[1].1);
    assert!(first[1].1.contains("<tool_call>"), "{}", first[1].1);
    let second = messages(&requests[1]);
    let (role, content) = &second[3];
    assert_eq!(role, "assistant");
    assert!(
        content.starts_with("I will compute it.\n<tool_call>{\"name\": \"calculator\""),
        "{content}"
    );
    let (role, content) = &second[4];
    assert_eq!(role, "user");
    assert!(
        content.starts_with("<tool_result name=\"calculator\" id=\"text_call_")
            && content.contains("\n42\n</tool_result>"),
        "{content}"
    );
}

#[test]
fn a_malformed_call_is_repaired_once_and_the_run_succeeds() {
    let mock = MockLlm::start_in_thread();
    let bad = r#"<tool_call>{"name": "calculator", "arguments": {"expr": "6*7"}}</tool_call>"#;
    mock.push(Reply::Text(bad.into()));
    mock.push(Reply::Text(CALL.into()));
    mock.push(Reply::Text("The answer is 42.".into()));
    let dir = project(&mock);
    let out = run(dir.path(), &["run", "a", "--input", "what is 6*7?"]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).ends_with("The answer is 42.\n"),
        "{}",
        show(&out)
    );

    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    requests.iter().for_each(assert_plain_chat);
    let repair = messages(&requests[1]);
    let n = repair.len();
    assert_eq!(repair[n - 2], ("assistant".into(), bad.into()));
    let (role, told) = &repair[n - 1];
    assert_eq!(role, "user");
    assert!(
        told.contains("tool call 1: the arguments of `calculator` do not match its schema")
            && told.contains("expression")
            && told.contains("<tool_call>{\"name\": \"TOOL_NAME\""),
        "{told}"
    );
    // The conversation goes on from the repaired call, not the bad one.
    let last = messages(&requests[2]);
    assert!(!last.iter().any(|(_, c)| c.contains("expr\"")), "{last:?}");
    assert!(
        last.iter().any(|(_, c)| c.contains("\n42\n</tool_result>")),
        "{last:?}"
    );
    // Both calls of the repaired turn count in the run's tokens (the mock
    // reports 10 in / 5 out per request).
    let runs = run(dir.path(), &["runs", "--agent", "a"]);
    assert!(
        text(&runs.stdout).contains("30 in / 15 out tokens"),
        "{}",
        show(&runs)
    );
}
