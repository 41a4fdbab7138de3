//! The real `aurad` binary on fixture projects: validate, run (with the
//! built-in test model and with the mock server), runs, logs, a run
//! killed mid-way whose stored events survive, the example project's own
//! plugin and MCP server, shell completions and log levels.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::cargo_bin_cmd;
use aurad::store::{RunFilter, Store};
use aurad::types::{RunEvent, RunState};
use predicates::prelude::*;
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn validate_reports_every_problem_with_its_place() {
    let assert = cargo_bin_cmd!("aurad")
        .args(["validate", "--dir"])
        .arg(fixture("broken"))
        .env_remove("AURAD_FIXTURE_UNSET_VAR")
        .assert()
        .code(2);
    let stderr = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    let expected = [
        "agents/bad_duration.yaml:3:20: limits.timeout: invalid duration \"10q\"",
        "agents/missing_env.yaml:2:20: environment variable AURAD_FIXTURE_UNSET_VAR is not set",
        "agents/unknown_field.yaml:3:1: unknown field `max_stpes`, expected one of `description`, `model`",
        "agents/unknown_provider.yaml:1:8: unknown provider `nope` in model \"nope/some-model\"; known providers: anthropic, gemini, local, openai, test",
        "agents/unknown_tool.yaml:3:8: tools: unknown tool \"bsh\"; known tools: bash, calculator",
        "agents/wrong_type.yaml:4:19: limits.max_iterations: invalid type: string \"lots\", expected u32",
        "aurad.yaml:3:16: unknown provider kind \"cohere\"",
    ];
    for line in expected {
        assert!(
            stderr.lines().any(|l| l.starts_with(line)),
            "missing {line:?} in:\n{stderr}"
        );
    }
    assert!(
        stderr.contains("7 error(s), 0 warning(s); 1 agent(s) valid"),
        "{stderr}"
    );
}

#[test]
fn validate_passes_on_the_example_project_with_dir_before_the_command() {
    cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .arg("validate")
        .assert()
        .code(0)
        .stderr(predicate::str::contains("ok: 3 agent(s)"));
}

#[test]
fn run_with_the_test_model_needs_no_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/hello.yaml"),
        dir.path().join("agents/hello.yaml"),
    )
    .unwrap();
    cargo_bin_cmd!("aurad")
        .args(["run", "hello", "--model", "test", "--dir"])
        .arg(dir.path())
        .env_remove("OPENAI_API_KEY")
        .assert()
        .code(0)
        .stdout(predicate::str::contains(
            "test model: called 2 tool(s).\n- calculator: ok: 14\n- current_time: ok: ",
        ))
        .stderr(predicate::str::contains(
            "→ calculator {\"expression\":\"2 * (3 + 4)\"}",
        ))
        .stderr(predicate::str::is_match("✓ run [0-9a-f-]{36} succeeded").unwrap());
}

#[test]
fn a_missing_key_is_a_clear_error() {
    cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "hello"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("OPENAI_API_KEY is not set")
                .and(predicate::str::contains("--model test")),
        );
}

#[test]
fn an_unknown_agent_lists_the_known_ones() {
    cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(["run", "helo"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("no agent named `helo`")
                .and(predicate::str::contains("agents: demo, hello, shell")),
        );
}

#[test]
fn run_streams_then_runs_and_logs_show_it() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::ToolCalls(vec![(
        "call_1".into(),
        "calculator".into(),
        r#"{"expression":"6*7"}"#.into(),
    )]));
    mock.push(Reply::Text("The answer is 42.".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\ntools: [calculator]\n");
    let out = cargo_bin_cmd!("aurad")
        .args(["run", "a", "--input", "what is 6*7?", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .stdout("The answer is 42.\n")
        .stderr(predicate::str::contains("← calculator").and(predicate::str::contains("42")))
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let run_id = stderr
        .lines()
        .last()
        .unwrap()
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_string();

    cargo_bin_cmd!("aurad")
        .args(["runs", "--agent", "a", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .stdout(
            // The short id: the id's end.
            predicate::str::contains(&run_id[28..])
                .and(predicate::str::contains("succeeded"))
                .and(predicate::str::contains("20 in / 10 out tokens")),
        );

    cargo_bin_cmd!("aurad")
        .args(["logs", &run_id[..8], "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .stdout("The answer is 42.\n")
        .stderr(predicate::str::contains(
            "→ calculator {\"expression\":\"6*7\"}",
        ))
        .stderr(predicate::str::contains(format!(
            "✓ run {run_id} succeeded"
        )));

    let json = cargo_bin_cmd!("aurad")
        .args(["logs", &run_id, "--json", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let kinds: Vec<String> = String::from_utf8(json)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "started",
            "usage",
            "tool_call",
            "tool_result",
            "text_delta",
            "usage",
            "finished"
        ]
    );
}

#[test]
fn run_json_prints_one_event_per_line_and_a_failed_run_exits_non_zero() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Raw {
        status: 401,
        headers: vec![],
        body: r#"{"error":{"message":"Incorrect API key provided"}}"#.into(),
    });
    let dir = project_with_mock(&mock, "model: mock/m\nprompt: hello\n");
    let out = cargo_bin_cmd!("aurad")
        .args(["run", "a", "--json", "--dir"])
        .arg(dir.path())
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let events: Vec<RunEvent> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(matches!(&events[0], RunEvent::Started { input, .. } if input == "hello"));
    match events.last().unwrap() {
        RunEvent::Finished { state, reason, .. } => {
            assert_eq!(*state, RunState::Failed);
            assert!(
                reason
                    .as_deref()
                    .unwrap()
                    .contains("Incorrect API key provided")
            );
        }
        other => panic!("last event {other:?}"),
    }
}

#[test]
fn input_from_stdin() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Text("ok".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    cargo_bin_cmd!("aurad")
        .args(["run", "a", "--input", "-", "--dir"])
        .arg(dir.path())
        .write_stdin("from stdin\n")
        .assert()
        .code(0);
    assert_eq!(mock.requests()[0].messages()[1]["content"], "from stdin\n");
}

#[test]
fn events_of_a_killed_run_survive() {
    // First turn: a tool call that takes long; the process is killed during it.
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "bash".into(),
        r#"{"command":"sleep 60"}"#.into(),
    )]));
    mock.set_fallback(Reply::Hang);
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\ntools: [bash]\n");
    let mut child = Command::new(assert_cmd::cargo::cargo_bin!("aurad"))
        .args(["run", "a", "--input", "go", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let db = dir.path().join("aurad.db");
    let deadline = Instant::now() + Duration::from_secs(30);
    let run_id = loop {
        assert!(
            Instant::now() < deadline,
            "the tool call never reached the store"
        );
        if db.exists()
            && let Ok(store) = Store::open(&db)
            && let Ok(runs) = store.list_runs_blocking(&RunFilter {
                parent: None,
                agent: None,
                state: None,
                limit: 1,
            })
            && let Some(run) = runs.first()
            && let Ok(events) = store.run_events_blocking(&run.id)
            && events
                .iter()
                .any(|e| matches!(e, RunEvent::ToolCall { .. }))
        {
            break run.id.clone();
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    let store = Store::open(&db).unwrap();
    let run = store.get_run_blocking(&run_id).unwrap().unwrap();
    assert_eq!(run.state, RunState::Running);
    let events = store.run_events_blocking(&run_id).unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, ["started", "usage", "tool_call"]);
}

#[test]
fn ctrl_c_cancels_the_run_and_records_it() {
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Hang);
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let child = Command::new(assert_cmd::cargo::cargo_bin!("aurad"))
        .args(["run", "a", "--input", "go", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(mock.wait_for_requests(1, Duration::from_secs(30)));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("cancelled"), "{stderr}");
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let runs = store
        .list_runs_blocking(&RunFilter {
            parent: None,
            agent: None,
            state: None,
            limit: 1,
        })
        .unwrap();
    assert_eq!(runs[0].state, RunState::Cancelled);
}

#[test]
fn commands_run_by_the_model_do_not_see_secrets() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "bash".into(),
        r#"{"command":"echo \"key=[$OPENAI_API_KEY] token=[$GITHUB_TOKEN] home=[${HOME:+set}]\""}"#
            .into(),
    )]));
    mock.push(Reply::Text("done".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\ntools: [bash]\n");
    cargo_bin_cmd!("aurad")
        .args(["run", "a", "--input", "go", "--dir"])
        .arg(dir.path())
        .env("OPENAI_API_KEY", "sk-must-not-leak")
        .env("GITHUB_TOKEN", "ghp-must-not-leak")
        .assert()
        .code(0);
    let requests = mock.requests();
    let result = requests[1].messages()[3]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(result.trim_end(), "key=[] token=[] home=[set]");
}

/// A copy of the example project's own `agents/demo.yaml`, `tools.d/` and
/// `mcp.json`, unchanged, with two Markdown files (4 lines) to count.
fn example_project() -> tempfile::TempDir {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path();
    for sub in ["agents", "tools.d", "docs"] {
        std::fs::create_dir(project.join(sub)).unwrap();
    }
    for file in [
        "agents/demo.yaml",
        "tools.d/file_count.yaml",
        "tools.d/file_count.sh",
        "mcp.json",
    ] {
        std::fs::copy(repo.join(file), project.join(file)).unwrap();
    }
    // Where `cargo build --example mcp_test_server` leaves the server that
    // mcp.json names, whatever this build's target directory is.
    let server = project.join("target/debug/examples/mcp_test_server");
    std::fs::create_dir_all(server.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(support::mcp_test_server(), &server).unwrap();
    std::fs::write(project.join("notes.md"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(project.join("docs/guide.md"), "four\n").unwrap();
    dir
}

/// The example agent, run with the test model, calls the `tools.d` plugin
/// and both MCP tools it allows, and each answers.
#[test]
fn the_example_agent_uses_the_example_plugin_and_mcp_server() {
    let dir = example_project();
    cargo_bin_cmd!("aurad")
        .args(["run", "demo", "--model", "test", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("test model: called 3 tool(s).")
                .and(predicate::str::is_match(r"- demo_add: ok: -?[0-9]+\n").unwrap())
                .and(predicate::str::contains("- demo_echo: ok: "))
                .and(predicate::str::contains(
                    "- file_count: ok: 2 .md file(s), 4 line(s)",
                )),
        );
}

#[test]
fn completions_for_every_shell() {
    let script = |args: &[&str]| {
        let out = cargo_bin_cmd!("aurad")
            .arg("completions")
            .args(args)
            .current_dir(std::env::temp_dir())
            .assert()
            .code(0)
            .get_output()
            .stdout
            .clone();
        String::from_utf8(out).unwrap()
    };
    // The registration of the dynamic engine: the shell calls aurad back.
    for (shell, marker) in [
        (
            "bash",
            "complete -o nospace -o bashdefault -F _clap_complete_aurad aurad",
        ),
        ("zsh", "compdef _clap_dynamic_completer_aurad aurad"),
        (
            "fish",
            "complete --keep-order --exclusive --command aurad --arguments \"(COMPLETE=fish ",
        ),
        (
            "powershell",
            "Register-ArgumentCompleter -Native -CommandName aurad",
        ),
        ("elvish", "set edit:completion:arg-completer[aurad]"),
    ] {
        let script = script(&[shell]);
        assert!(script.contains(marker), "{shell}: {script}");
    }
    // `--static`: the self-contained script.
    for (shell, marker) in [
        ("bash", "complete -F _aurad"),
        ("zsh", "#compdef aurad"),
        ("fish", "complete -c aurad"),
        ("powershell", "Register-ArgumentCompleter"),
        ("elvish", "edit:completion:arg-completer[aurad]"),
    ] {
        let script = script(&[shell, "--static"]);
        assert!(script.contains(marker), "{shell}: {script}");
        // Subcommands and their flags are in it.
        for word in ["serve", "validate", "completions", "input", "model"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    cargo_bin_cmd!("aurad")
        .args(["completions", "tcsh"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("invalid value 'tcsh'"));
}

#[test]
fn the_prompt_may_follow_the_agent_name_but_not_with_input() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Text("ok".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    cargo_bin_cmd!("aurad")
        .args(["run", "a", "what is new?", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0);
    assert_eq!(mock.requests()[0].messages()[1]["content"], "what is new?");
    cargo_bin_cmd!("aurad")
        .args(["run", "a", "text", "--input", "other", "--dir"])
        .arg(dir.path())
        .assert()
        .code(2)
        .stderr(predicate::str::contains("cannot be used with"));
    assert_eq!(mock.requests().len(), 1);
}

/// Outside `aurad serve`, info lines (here: the MCP server connecting)
/// show only with `-v`.
#[test]
fn info_logs_only_under_serve_or_with_verbose() {
    let dir = example_project();
    let run = |verbose: bool| {
        let mut cmd = cargo_bin_cmd!("aurad");
        cmd.args(["run", "demo", "--model", "test", "--dir"])
            .arg(dir.path())
            .env_remove("RUST_LOG");
        if verbose {
            cmd.arg("-v");
        }
        let out = cmd.assert().code(0).get_output().stderr.clone();
        String::from_utf8(out).unwrap()
    };
    let quiet = run(false);
    assert!(!quiet.contains("INFO"), "{quiet}");
    let verbose = run(true);
    assert!(
        verbose
            .lines()
            .any(|l| l.contains("INFO") && l.contains("demo")),
        "{verbose}"
    );
}

#[test]
fn validate_warns_about_an_unset_webhook_secret() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nprompt: hi\nwebhook: { secret_env: AURAD_TEST_UNSET_HOOK }\n",
    );
    cargo_bin_cmd!("aurad")
        .args(["validate", "--dir"])
        .arg(dir.path())
        .env_remove("AURAD_TEST_UNSET_HOOK")
        .assert()
        .code(0)
        .stderr(
            predicate::str::contains(
                "agents/a.yaml:3:24: warning: webhook: `secret_env` names AURAD_TEST_UNSET_HOOK, which is not set",
            )
            .and(predicate::str::contains("ok: 1 agent(s), 1 warning(s)")),
        );
    cargo_bin_cmd!("aurad")
        .args(["validate", "--dir"])
        .arg(dir.path())
        .env("AURAD_TEST_UNSET_HOOK", "a-long-hook-secret")
        .assert()
        .code(0)
        .stderr(predicate::str::contains("ok: 1 agent(s), 0 warning(s)"));
}

#[test]
fn logs_of_an_agent_name_show_its_newest_run_and_empty_listings_say_why() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Text("first answer".into()));
    mock.push(Reply::Text("second answer".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    std::fs::write(
        dir.path().join("agents/idle.yaml"),
        "model: mock/m\nsystem: s\n",
    )
    .unwrap();
    for input in ["one", "two"] {
        cargo_bin_cmd!("aurad")
            .args(["run", "a", "--input", input, "--dir"])
            .arg(dir.path())
            .assert()
            .code(0);
    }
    cargo_bin_cmd!("aurad")
        .args(["logs", "a", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .stdout("second answer\n");
    cargo_bin_cmd!("aurad")
        .args(["logs", "idle", "--dir"])
        .arg(dir.path())
        .assert()
        .code(1)
        .stderr(predicate::str::contains(
            "agent `idle` has no runs yet; start one with `aurad run idle`",
        ));
    cargo_bin_cmd!("aurad")
        .args(["logs", "nobody", "--dir"])
        .arg(dir.path())
        .assert()
        .code(1)
        .stderr(predicate::str::contains("no run"));
    // An empty listing says what it was filtered by, not "no runs yet".
    cargo_bin_cmd!("aurad")
        .args(["runs", "--agent", "idle", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .stderr(predicate::str::contains("agent `idle` has no runs;"));
    cargo_bin_cmd!("aurad")
        .args(["runs", "--agent", "a", "--state", "failed", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .stderr(predicate::str::contains("no failed runs of agent `a`;"));
}

/// Issue #32 item 11: `aurad run` and `aurad logs` printed a model's
/// terminal escape sequences raw: a window title, the clipboard (OSC 52),
/// a carriage return that hides a line. They are shown as visible escapes.
#[test]
fn terminal_escapes_from_a_model_are_printed_inert() {
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Text(
        "hi\u{1b}]0;pwned\u{7}\u{1b}]52;c;ZXZpbA==\u{7} \u{202e}txt.exe\rhidden".into(),
    ));
    let dir = project_with_mock(&mock, "model: mock/m\nprompt: go\n");
    let run = cargo_bin_cmd!("aurad")
        .args(["run", "a", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let logs = cargo_bin_cmd!("aurad")
        .args(["logs", "a", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    for (what, out) in [("run", &run), ("logs", &logs)] {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "aurad {what}: {text}");
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\r'),
            "aurad {what} printed a raw control character: {text:?}"
        );
        assert!(
            text.contains("\\x1b]52;c;ZXZpbA==\\x07"),
            "aurad {what}: {text:?}"
        );
        assert!(
            text.contains("\\u{202e}txt.exe\\x0dhidden"),
            "aurad {what}: {text:?}"
        );
    }
}
