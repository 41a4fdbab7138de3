//! The real binary on projects with `tools.d/` plugins and `mcp.json`:
//! `validate` reports their problems with places, `aurad mcp` shows server
//! states, `aurad tools` lists what an agent sees, and `aurad run` reaches an
//! MCP tool in a real child process.

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
use predicates::prelude::*;
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;

fn write_mcp(dir: &Path, servers: serde_json::Value) {
    std::fs::write(
        dir.join("mcp.json"),
        serde_json::json!({ "mcpServers": servers }).to_string(),
    )
    .unwrap();
}

#[test]
fn validate_reports_plugin_and_mcp_problems_with_their_places() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/broken_tools");
    let out = cargo_bin_cmd!("aurad")
        .args(["validate", "--dir"])
        .arg(&dir)
        .assert()
        .code(2)
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    for line in [
        "agents/a.yaml:3:8: tools: unknown tool \"nothing_here\"",
        "mcp.json:4:45: server `search` has both `command` and `url`",
        "mcp.json:5:37: warning: server `db`: `timeout` is accepted and ignored: its unit differs between clients",
        "MCP servers: 2 from mcp.json",
        "tools.d/bash.yaml:1:1: tool name `bash` is taken twice: by builtin and by plugin tools.d/bash.yaml",
        "tools.d/lookup.yaml:2:21: `parameters` must have `type: object`",
        "tools.d/weather.yaml:7:7: give either `command` (run a program) or `http` (call a URL), not both",
    ] {
        assert!(
            stderr.lines().any(|l| l.starts_with(line)),
            "missing {line:?} in:\n{stderr}"
        );
    }
    // `files_*` and `files_read_file` may name tools of the `files` server.
    assert!(!stderr.contains("files_read_file"), "{stderr}");
    assert!(stderr.contains("5 error(s), 1 warning(s)"), "{stderr}");
}

#[test]
fn mcp_lists_servers_with_state_protocol_and_tools() {
    let dir = tempfile::tempdir().unwrap();
    write_mcp(
        dir.path(),
        serde_json::json!({
            "good": { "command": support::mcp_test_server() },
            "broken": { "command": support::mcp_test_server(), "args": ["--exit", "4"] },
        }),
    );
    let out = cargo_bin_cmd!("aurad")
        .args(["mcp", "--dir"])
        .arg(dir.path())
        .assert()
        .code(1)
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("good  connected"), "{stdout}");
    assert!(stdout.contains("protocol:  20"), "{stdout}");
    assert!(stdout.contains("- good_echo: "), "{stdout}");
    assert!(
        stdout.contains("broken  failed: ") && stdout.contains("code 4"),
        "{stdout}"
    );

    let json = cargo_bin_cmd!("aurad")
        .args(["mcp", "--json", "--dir"])
        .arg(dir.path())
        .assert()
        .code(1)
        .get_output()
        .stdout
        .clone();
    let servers: Vec<serde_json::Value> = serde_json::from_slice(&json).unwrap();
    let by_name = |name: &str| servers.iter().find(|s| s["name"] == name).unwrap().clone();
    let good = by_name("good");
    assert_eq!(good["state"], "connected");
    assert!(
        good["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "good_add" && t["original_name"] == "add")
    );
    assert_eq!(by_name("broken")["state"], "failed");
}

#[test]
fn tools_lists_what_an_agent_sees_with_source_and_schema() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\ntools: [calculator, \"t_e*\", greet]\n",
    );
    write_mcp(
        dir.path(),
        serde_json::json!({ "t": { "command": support::mcp_test_server() } }),
    );
    std::fs::create_dir(dir.path().join("tools.d")).unwrap();
    std::fs::write(
        dir.path().join("tools.d/greet.yaml"),
        "description: Greets.\nparameters: { type: object, properties: { name: { type: string } } }\ncommand: [cat]\n",
    )
    .unwrap();
    let json = cargo_bin_cmd!("aurad")
        .args(["tools", "--agent", "a", "--json", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let tools: Vec<serde_json::Value> = serde_json::from_slice(&json).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["calculator", "greet", "t_echo"]);
    assert_eq!(tools[0]["source"], "builtin");
    assert_eq!(tools[1]["source"], "plugin tools.d/greet.yaml");
    assert!(
        tools[2]["source"]
            .as_str()
            .unwrap()
            .starts_with("mcp server t")
    );
    assert_eq!(
        tools[2]["parameters"]["properties"]["text"]["type"],
        "string"
    );
}

#[test]
fn run_reaches_an_mcp_tool_through_the_binary() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "t_echo".into(),
        r#"{"text":"via the binary"}"#.into(),
    )]));
    mock.push(Reply::Text("done".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\ntools: [\"t_*\"]\n");
    write_mcp(
        dir.path(),
        serde_json::json!({ "t": { "command": support::mcp_test_server() } }),
    );
    cargo_bin_cmd!("aurad")
        .args(["run", "a", "--input", "go", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .stderr(
            predicate::str::contains("← t_echo").and(predicate::str::contains("via the binary")),
        );
    let requests = mock.requests();
    assert_eq!(requests[1].messages()[3]["content"], "via the binary");
}

#[test]
fn tools_includes_the_memory_tools_of_an_agent_with_memory_tools() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\ntools: [calculator]\nmemory: { namespace: notes, tools: true }\n",
    );
    let json = cargo_bin_cmd!("aurad")
        .args(["tools", "--agent", "a", "--json", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let tools: Vec<serde_json::Value> = serde_json::from_slice(&json).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "calculator",
            "memory_save",
            "memory_search",
            "memory_delete"
        ]
    );
    assert_eq!(tools[1]["source"], "memory (namespace notes)");
}

#[test]
fn an_mcp_tool_taking_a_plugins_name_is_reported_at_its_server() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\ntools: [\"t_*\"]\n");
    write_mcp(
        dir.path(),
        serde_json::json!({ "t": { "command": support::mcp_test_server() } }),
    );
    std::fs::create_dir(dir.path().join("tools.d")).unwrap();
    std::fs::write(
        dir.path().join("tools.d/t_echo.yaml"),
        "description: Echoes.\nparameters: { type: object }\ncommand: [cat]\n",
    )
    .unwrap();
    let out = cargo_bin_cmd!("aurad")
        .args(["tools", "--dir"])
        .arg(dir.path())
        .assert()
        .code(1)
        .get_output()
        .clone();
    let stderr = String::from_utf8(out.stderr).unwrap();
    // `{"mcpServers":{"t":...`: the server's name key is at column 16.
    assert!(
        stderr.lines().any(|l| l.starts_with("mcp.json:1:16: tool name `t_echo` is taken twice: by plugin tools.d/t_echo.yaml and by mcp server t")),
        "{stderr}"
    );
}

#[test]
fn tools_lists_what_loaded_when_an_unrelated_file_is_broken() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\ntools: [calculator, greet]\n",
    );
    std::fs::create_dir(dir.path().join("tools.d")).unwrap();
    std::fs::write(
        dir.path().join("tools.d/greet.yaml"),
        "description: Greets.\nparameters: { type: object }\ncommand: [cat]\n",
    )
    .unwrap();
    // A broken plugin and a broken agent that agent `a` does not use.
    std::fs::write(
        dir.path().join("tools.d/weather.yaml"),
        "description: Weather.\nparameters: { type: array }\ncommand: [cat]\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("agents/b.yaml"), "model: [\n").unwrap();

    // With `--agent a`: its tools, exit 0, the other errors counted.
    let out = cargo_bin_cmd!("aurad")
        .args(["tools", "--agent", "a", "--json", "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .get_output()
        .clone();
    let tools: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["calculator", "greet"]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("warning: 2 error(s) in files `a` does not use"),
        "{stderr}"
    );

    // Without `--agent`: every tool that loaded, every error, exit 2.
    let out = cargo_bin_cmd!("aurad")
        .args(["tools", "--dir"])
        .arg(dir.path())
        .assert()
        .code(2)
        .get_output()
        .clone();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("greet  [plugin tools.d/greet.yaml]"),
        "{stdout}"
    );
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("tools.d/weather.yaml:2:"), "{stderr}");
    assert!(stderr.contains("agents/b.yaml:"), "{stderr}");

    // Agent `b` never loaded: asking for its tools is an error.
    cargo_bin_cmd!("aurad")
        .args(["tools", "--agent", "b", "--dir"])
        .arg(dir.path())
        .assert()
        .code(2);
}
