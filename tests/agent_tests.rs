//! `aurad test` end to end with the real binary: a passing and a failing
//! case (the failure names the expectation, expected vs got, and the case's
//! file:line), the JUnit XML read back, a scripted shell call that runs
//! nothing, a case replaying a recorded run, `--update` re-recording from a
//! mock LLM server on 127.0.0.1, located errors for a malformed test file,
//! and the shipped examples passing offline.

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
use quick_junit::{NonSuccessKind, Report, TestCaseStatus};
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;

const AGENT: &str = "model: mock/m\nsystem: You help.\ntools: [bash]\n";

fn aurad_test(root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(root)
        .arg("test")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

const CASES: &str = "\
cases:
  - name: passes
    input: make the file
    turns:
      - tool_calls:
          - name: bash
            arguments: { command: touch made-by-tool }
            result: \"\"
      - text: done
    expect:
      tools_called: [{ name: bash, arguments: { command: touch made-by-tool } }]
      answer_contains: done
      max_iterations: 2
  - name: fails
    input: make the file
    turns:
      - text: done
    expect:
      answer_contains: nope
";

#[test]
fn cases_pass_and_fail_with_their_place_and_junit_reads_back() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, AGENT);
    std::fs::write(dir.path().join("agents/a.test.yaml"), CASES).unwrap();
    let junit = dir.path().join("report.xml");
    let (code, stdout, stderr) = aurad_test(dir.path(), &["--junit", junit.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(stdout.contains("ok    a/passes"), "{stdout}");
    assert!(
        stdout.contains(
            "FAIL  a/fails (agents/a.test.yaml:14)\n  expectation `answer_contains` not met\n    expected: an answer containing \"nope\"\n    got:      \"done\""
        ),
        "{stdout}"
    );
    assert!(stdout.contains("1 case(s) passed, 1 failed"), "{stdout}");
    assert_eq!(mock.request_count(), 0, "no model request offline");
    assert!(
        !dir.path().join("made-by-tool").exists(),
        "the scripted bash call ran nothing"
    );
    let report = Report::deserialize_from_str(&std::fs::read_to_string(&junit).unwrap()).unwrap();
    assert_eq!(report.tests, 2);
    assert_eq!(report.failures, 1);
    let suite = &report.test_suites[0];
    assert_eq!(suite.name.as_str(), "a");
    let cases: Vec<_> = suite.test_cases.iter().collect();
    assert_eq!(cases[0].name.as_str(), "passes");
    assert!(matches!(cases[0].status, TestCaseStatus::Success { .. }));
    assert_eq!(cases[1].name.as_str(), "fails");
    match &cases[1].status {
        TestCaseStatus::NonSuccess {
            kind,
            message,
            description,
            ..
        } => {
            assert_eq!(*kind, NonSuccessKind::Failure);
            assert_eq!(
                message.as_ref().unwrap().as_str(),
                "agents/a.test.yaml:14: expectation `answer_contains` not met"
            );
            assert!(
                description.as_ref().unwrap().contains("got:      \"done\""),
                "{description:?}"
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    // One agent's cases alone; the test file is no agent of its own.
    let (code, stdout, _) = aurad_test(dir.path(), &["b"]);
    assert_eq!(code, 2, "{stdout}");
    cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(dir.path())
        .arg("validate")
        .assert()
        .code(0)
        .stderr(predicates::str::contains("ok: 1 agent(s), 0 warning(s)"));
}

#[test]
fn a_case_replays_a_recorded_run() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, AGENT);
    mock.push(Reply::tool_call(
        "call_1",
        "bash",
        r#"{"command":"echo recorded"}"#,
    ));
    mock.push(Reply::Text("it said recorded".into()));
    cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(dir.path())
        .args(["run", "a", "--input", "say it", "--json"])
        .assert()
        .code(0);
    let out = cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(dir.path())
        .args(["runs", "--json"])
        .output()
        .unwrap();
    let runs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let run = runs[0]["id"].as_str().unwrap();
    std::fs::write(
        dir.path().join("agents/a.test.yaml"),
        format!(
            "cases:\n  - name: from-the-store\n    input: say it\n    run: {run}\n    expect:\n      tools_called: [{{ name: bash, arguments: {{ command: echo recorded }} }}]\n      answer_contains: recorded\n"
        ),
    )
    .unwrap();
    let (code, stdout, stderr) = aurad_test(dir.path(), &[]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("ok    a/from-the-store"), "{stdout}");
    assert_eq!(
        mock.request_count(),
        2,
        "only the recorded run asked the model"
    );
}

#[test]
fn update_rerecords_the_answers_from_the_real_provider() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, AGENT);
    let file = dir.path().join("agents/a.test.yaml");
    std::fs::write(
        &file,
        "cases:\n  - name: greets\n    input: say hi\n    turns:\n      - tool_calls:\n          - { name: bash, arguments: { command: echo hi }, result: \"hi\\n\" }\n      - text: old answer\n    expect:\n      answer_contains: fresh\n",
    )
    .unwrap();
    let (code, stdout, _) = aurad_test(dir.path(), &[]);
    assert_eq!(code, 1, "the old script fails the expectation: {stdout}");
    mock.push(Reply::tool_call("c9", "bash", r#"{"command":"echo hi"}"#));
    mock.push(Reply::Text("a fresh answer".into()));
    let (code, stdout, stderr) = aurad_test(dir.path(), &["--update"]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("updated agents/a.test.yaml: 1 case(s) re-recorded"),
        "{stdout}"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "one request per model turn");
    assert_eq!(requests[0].body["model"], "m");
    let written: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let turns = &written["cases"][0]["turns"];
    assert_eq!(turns[0]["tool_calls"][0]["name"].as_str(), Some("bash"));
    assert_eq!(turns[0]["tool_calls"][0]["result"].as_str(), Some("hi\n"));
    assert_eq!(turns[1]["text"].as_str(), Some("a fresh answer"));
    assert_eq!(
        written["cases"][0]["expect"]["answer_contains"][0].as_str(),
        Some("fresh")
    );
    // The re-recorded case passes offline.
    let (code, stdout, _) = aurad_test(dir.path(), &[]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(mock.request_count(), 2);
}

#[test]
fn a_malformed_test_file_is_a_located_error() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, AGENT);
    std::fs::write(
        dir.path().join("agents/a.test.yaml"),
        "cases:\n  - name: x\n    turns: [{ text: hi }]\n    expect:\n      answer_contain: hi\n",
    )
    .unwrap();
    let (code, _, stderr) = aurad_test(dir.path(), &[]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("agents/a.test.yaml:5:7: ")
            && stderr.contains("unknown field `answer_contain`"),
        "{stderr}"
    );
    let out = cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(dir.path())
        .arg("validate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("agents/a.test.yaml:5:7: "), "{stderr}");
    assert!(stderr.contains("1 agent(s) valid"), "{stderr}");
    std::fs::write(dir.path().join("agents/ghost.test.yaml"), "cases: []\n").unwrap();
    let (code, _, stderr) = aurad_test(dir.path(), &[]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("agents/ghost.test.yaml: there is no agent `ghost`"),
        "{stderr}"
    );
}

#[test]
fn the_shipped_examples_pass_offline() {
    for project in [".", "examples/workflows"] {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(project);
        let (code, stdout, stderr) = aurad_test(&root, &[]);
        assert_eq!(code, 0, "{project}: {stdout}\n{stderr}");
        assert!(!stdout.contains("FAIL"), "{stdout}");
    }
}
