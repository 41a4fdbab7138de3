//! The MCP config dialects of the ecosystem, loaded through the real
//! loader: one fixture per real-world shape in
//! `tests/fixtures/mcp-dialects/` (see its README for the sources), each
//! placed where its editor writes it, must give the expected servers and
//! transports, or its precise located error. Then servers written in each
//! main dialect are started: stdio ones against the test server's process,
//! HTTP ones against the test server on 127.0.0.1, which answers 401
//! unless the header the config sends arrives.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use aurad::config::mcp::{McpServerConfig, McpTransport, load_mcp};
use aurad::config::{Diagnostic, Severity};
use aurad::mcp::{McpManager, ServerState};
use serde_json::json;
use support::mcp_server::HttpServer;

const FIXTURES: &str = "tests/fixtures/mcp-dialects";

/// The environment every fixture is loaded with.
fn env(name: &str) -> Option<String> {
    match name {
        "API_KEY" => Some("k3y-from-env".into()),
        "AURAD_INPUT_API_KEY" => Some("gh-token-from-env".into()),
        "HOME" => Some("/home/tester".into()),
        _ => None,
    }
}

enum Expect {
    /// Accepted: (name, transport) of each server, `stdio <command>` or
    /// `http <url>`.
    Servers(&'static [(&'static str, &'static str)]),
    /// Refused: the one error, as printed.
    Error(&'static str),
}

/// (fixture, where its editor puts it, what the loader must make of it).
const SHAPES: [(&str, &str, Expect); 26] = [
    (
        "aurad-list",
        "mcp.json",
        Expect::Servers(&[
            ("fs", "stdio npx"),
            ("web", "http http://127.0.0.1:9000/mcp"),
        ]),
    ),
    (
        "claude-desktop",
        "mcp.json",
        Expect::Servers(&[("filesystem", "stdio npx")]),
    ),
    (
        "claude-desktop-spaced-name",
        "mcp.json",
        Expect::Servers(&[("My_Files", "stdio npx")]),
    ),
    (
        "claude-code",
        ".mcp.json",
        Expect::Servers(&[
            ("local", "stdio npx"),
            ("remote", "http https://api.example.com/mcp"),
        ]),
    ),
    (
        "claude-code-extras",
        ".mcp.json",
        Expect::Servers(&[("docs", "http https://docs.example.com/mcp")]),
    ),
    (
        "claude-code-sse",
        ".mcp.json",
        Expect::Error(
            ".mcp.json:4:15: server `legacy`: the legacy HTTP+SSE transport (`\"type\": \"sse\"`, MCP 2024-11-05, deprecated since 2025-03-26) is not supported: aurad's MCP client (rmcp 3.11) has none. If the server also speaks Streamable HTTP, set `\"type\": \"http\"` and point `url` at that endpoint (often `/mcp` rather than `/sse`); otherwise run a stdio bridge to it as a `command`",
        ),
    ),
    (
        "claude-code-ws",
        ".mcp.json",
        Expect::Error(
            ".mcp.json:3:25: server `socket`: the WebSocket transport (`\"type\": \"ws\"`) is not a standard MCP transport and aurad has no client for it; use a stdio `command` or a Streamable HTTP `url` (`\"type\": \"http\"`)",
        ),
    ),
    (
        "cursor-stdio",
        "mcp.json",
        Expect::Servers(&[("db", "stdio <root>/bin/db-server")]),
    ),
    (
        "cursor-remote",
        "mcp.json",
        Expect::Servers(&[("linear", "http https://mcp.example.com/mcp")]),
    ),
    (
        "vscode-stdio",
        ".vscode/mcp.json",
        Expect::Servers(&[("memory", "stdio npx")]),
    ),
    (
        "vscode-http-inputs",
        ".vscode/mcp.json",
        Expect::Servers(&[("github", "http https://api.githubcopilot.com/mcp/")]),
    ),
    (
        "vscode-sse",
        ".vscode/mcp.json",
        Expect::Error(
            ".vscode/mcp.json:3:22: server `old`: the legacy HTTP+SSE transport (`\"type\": \"sse\"`, MCP 2024-11-05, deprecated since 2025-03-26) is not supported: aurad's MCP client (rmcp 3.11) has none. If the server also speaks Streamable HTTP, set `\"type\": \"http\"` and point `url` at that endpoint (often `/mcp` rather than `/sse`); otherwise run a stdio bridge to it as a `command`",
        ),
    ),
    (
        "vscode-dev-sandbox",
        ".vscode/mcp.json",
        Expect::Servers(&[("dev", "stdio node")]),
    ),
    (
        "windsurf-serverUrl",
        "mcp.json",
        Expect::Servers(&[("figma", "http https://figma.example.com/mcp")]),
    ),
    (
        "windsurf-stdio",
        "mcp.json",
        Expect::Servers(&[("github", "stdio npx")]),
    ),
    (
        "zed-command-object",
        "mcp.json",
        Expect::Servers(&[("postgres", "stdio /usr/local/bin/postgres-mcp")]),
    ),
    (
        "zed-source-custom",
        "mcp.json",
        Expect::Servers(&[("fetch", "stdio uvx")]),
    ),
    (
        "zed-stdio-current",
        "mcp.json",
        Expect::Servers(&[("git", "stdio uvx")]),
    ),
    (
        "zed-http",
        "mcp.json",
        Expect::Servers(&[("remote", "http https://zed.example.com/mcp")]),
    ),
    (
        "zed-extension",
        "mcp.json",
        Expect::Error(
            "mcp.json:3:5: server `mcp-server-github` has only `settings`: it is a Zed extension server, which only Zed can run; give it a `command` (and `args`) to run it as a stdio server",
        ),
    ),
    (
        "cline-stdio",
        "mcp.json",
        Expect::Servers(&[("weather", "stdio node")]),
    ),
    (
        "cline-streamableHttp",
        "mcp.json",
        Expect::Servers(&[("remote", "http https://cline.example.com/mcp")]),
    ),
    (
        "cline-transportType",
        "mcp.json",
        Expect::Servers(&[("older", "http https://cline.example.com/mcp")]),
    ),
    (
        "cline-url-without-type",
        "mcp.json",
        Expect::Servers(&[("plain", "http http://127.0.0.1:8931/mcp")]),
    ),
    (
        "cline-disabled",
        "mcp.json",
        Expect::Servers(&[("on", "stdio node")]),
    ),
    (
        "roo-streamable-http",
        "mcp.json",
        Expect::Servers(&[
            ("search", "http https://roo.example.com/mcp"),
            ("files", "stdio npx"),
        ]),
    ),
];

/// A project holding `fixture` at `place` (and its `.env`, if any).
fn project(fixture: &str, place: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURES);
    let target = dir.path().join(place);
    std::fs::create_dir_all(target.parent().expect("a parent")).expect("mkdir");
    std::fs::copy(src.join(format!("{fixture}.json")), &target).expect("copy the fixture");
    let env_file = src.join(format!("{fixture}.env"));
    if env_file.exists() {
        std::fs::copy(env_file, dir.path().join(".env")).expect("copy the env file");
    }
    dir
}

fn describe(root: &Path, server: &McpServerConfig) -> String {
    let text = match &server.transport {
        McpTransport::Stdio { command, .. } => format!("stdio {command}"),
        McpTransport::Http { url, .. } => format!("http {url}"),
    };
    text.replace(&root.display().to_string(), "<root>")
}

fn errors(diags: &[Diagnostic]) -> Vec<String> {
    diags
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(ToString::to_string)
        .collect()
}

/// Loads `fixture` placed at `place`.
fn load(fixture: &str, place: &str) -> (tempfile::TempDir, Vec<McpServerConfig>, Vec<Diagnostic>) {
    let dir = project(fixture, place);
    let (servers, diags) = load_mcp(dir.path(), &env);
    (dir, servers, diags)
}

#[test]
fn every_shape_is_accepted_or_refused_precisely() {
    let mut accepted = 0;
    let mut table = String::from("| fixture | file | result |\n|---|---|---|\n");
    for (fixture, place, expect) in &SHAPES {
        let (dir, servers, diags) = load(fixture, place);
        let got: Vec<(String, String)> = servers
            .iter()
            .map(|s| (s.name.clone(), describe(dir.path(), s)))
            .collect();
        for s in &servers {
            assert_eq!(
                s.source,
                Path::new(place),
                "{fixture}: the source of {}",
                s.name
            );
        }
        match expect {
            Expect::Servers(want) => {
                let want: Vec<(String, String)> = want
                    .iter()
                    .map(|(n, t)| (n.to_string(), t.to_string()))
                    .collect();
                assert_eq!(got, want, "{fixture}: servers; diagnostics {diags:#?}");
                assert_eq!(errors(&diags), Vec::<String>::new(), "{fixture}");
                accepted += 1;
                table.push_str(&format!(
                    "| {fixture} | {place} | accepted: {} server(s) |\n",
                    got.len()
                ));
            }
            Expect::Error(want) => {
                assert!(got.is_empty(), "{fixture}: no server expected, got {got:?}");
                assert_eq!(errors(&diags), [want.to_string()], "{fixture}");
                table.push_str(&format!("| {fixture} | {place} | error |\n"));
            }
        }
    }
    println!("{table}");
    assert_eq!(accepted, 22, "{table}");
}

#[test]
fn stdio_details_of_cursor_and_vscode() {
    let (dir, servers, diags) = load("cursor-stdio", "mcp.json");
    let root = dir.path().display().to_string();
    let McpTransport::Stdio { args, env, .. } = &servers[0].transport else {
        panic!("stdio expected");
    };
    assert_eq!(args, &["--root", &root, "--home", "/home/tester"]);
    // `env` wins over `envFile`.
    assert_eq!(env["DB_TOKEN"], "k3y-from-env");
    assert_eq!(env["FROM_FILE"], "1");
    assert!(diags.is_empty(), "{diags:?}");

    let (dir, servers, diags) = load("vscode-stdio", ".vscode/mcp.json");
    let root = dir.path();
    let McpTransport::Stdio { env, cwd, .. } = &servers[0].transport else {
        panic!("stdio expected");
    };
    assert_eq!(cwd, root);
    let want: BTreeMap<String, String> = [
        ("FROM_FILE", "yes".to_string()),
        ("MEMORY_FILE", format!("{}/memory.json", root.display())),
        ("PORT", "8080".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(env, &want);
    let notes: Vec<String> = diags.iter().map(ToString::to_string).collect();
    assert_eq!(
        notes,
        [
            ".vscode/mcp.json:8:91: warning: `UNSET_ME` is null: left out of the server's environment"
        ]
    );
}

#[test]
fn headers_carry_the_substituted_secrets() {
    let header = |fixture: &str, place: &str, name: &str| {
        let (_dir, servers, _) = load(fixture, place);
        let http = servers
            .iter()
            .find(|s| matches!(s.transport, McpTransport::Http { .. }));
        match &http.expect("an http server").transport {
            McpTransport::Http { headers, .. } => headers[name].clone(),
            other => panic!("{fixture}: http expected, got {other:?}"),
        }
    };
    assert_eq!(
        header("vscode-http-inputs", ".vscode/mcp.json", "Authorization"),
        "Bearer gh-token-from-env"
    );
    assert_eq!(
        header("claude-code", ".mcp.json", "Authorization"),
        "Bearer k3y-from-env"
    );
    assert_eq!(
        header("windsurf-serverUrl", "mcp.json", "X-Figma-Token"),
        "k3y-from-env"
    );
    assert_eq!(
        header("roo-streamable-http", "mcp.json", "X-Api-Key"),
        "k3y-from-env"
    );
}

#[test]
fn an_unset_input_is_refused_with_what_to_set() {
    let dir = project("vscode-http-inputs", ".vscode/mcp.json");
    let (servers, diags) = load_mcp(dir.path(), &|_| None);
    assert!(servers.is_empty());
    assert_eq!(
        errors(&diags),
        [
            ".vscode/mcp.json:9:45: `${input:api-key}` (GitHub token) is a value VS Code would prompt for; aurad has no prompt: set the environment variable AURAD_INPUT_API_KEY"
        ]
    );
}

#[test]
fn notes_for_what_is_skipped_or_ignored() {
    let (_dir, _, diags) = load("cline-disabled", "mcp.json");
    let notes: Vec<String> = diags.iter().map(ToString::to_string).collect();
    assert_eq!(
        notes,
        ["mcp.json:4:76: warning: server `off` is switched off (`\"disabled\": true`): skipped"]
    );
    let (_dir, _, diags) = load("zed-stdio-current", "mcp.json");
    let notes: Vec<String> = diags.iter().map(ToString::to_string).collect();
    assert_eq!(
        notes,
        [
            "mcp.json:3:71: warning: server `git`: `timeout` is accepted and ignored: its unit differs between clients (milliseconds in Claude Code, seconds in Cline, Roo and Zed); set `call_timeout` (e.g. \"60s\") instead",
            "mcp.json:4:61: warning: server `off` is switched off (`\"enabled\": false`): skipped",
        ]
    );
    let (_dir, _, diags) = load("vscode-dev-sandbox", ".vscode/mcp.json");
    let notes: Vec<String> = diags.iter().map(ToString::to_string).collect();
    assert!(notes[0].starts_with(".vscode/mcp.json:2:3: warning: `sandbox` (VS Code) is accepted and ignored: aurad does not sandbox MCP servers"), "{notes:?}");
    assert!(
        notes.iter().any(|n| n.contains(
            "`sandboxEnabled` is accepted and ignored: aurad does not sandbox MCP servers"
        )),
        "{notes:?}"
    );
    let (_dir, _, diags) = load("claude-desktop-spaced-name", "mcp.json");
    assert_eq!(
        diags.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            "mcp.json:3:5: warning: server name \"My Files\" has characters tool names cannot: aurad calls it `My_Files` (its tools are `My_Files_<tool>`)"
        ]
    );
}

#[test]
fn the_first_mcp_file_is_used_and_the_others_named() {
    let dir = project("claude-code", ".mcp.json");
    std::fs::create_dir(dir.path().join(".vscode")).unwrap();
    std::fs::write(dir.path().join(".vscode/mcp.json"), "{\"servers\": {}}").unwrap();
    let (servers, diags) = load_mcp(dir.path(), &env);
    assert_eq!(servers.len(), 2);
    assert_eq!(
        diags.iter().map(ToString::to_string).collect::<Vec<_>>(),
        [
            ".mcp.json: warning: MCP servers are read from `.mcp.json` only; `.vscode/mcp.json` is ignored (aurad reads the first of mcp.json, .mcp.json, .vscode/mcp.json): merge its servers into `.mcp.json`, or delete it"
        ]
    );
    std::fs::write(
        dir.path().join("mcp.json"),
        "{\"mcpServers\": {\"a\": {\"command\": 1}}}",
    )
    .unwrap();
    let (servers, diags) = load_mcp(dir.path(), &env);
    assert!(servers.is_empty());
    let shown: Vec<String> = diags.iter().map(ToString::to_string).collect();
    assert!(shown[0].starts_with("mcp.json: warning: MCP servers are read from `mcp.json` only; `.mcp.json` and `.vscode/mcp.json` are ignored"), "{shown:?}");
    assert_eq!(
        shown[1],
        "mcp.json:1:34: `command` must be a string, got a number"
    );
}

#[test]
fn substituted_variables_are_recorded_as_secrets() {
    let dir = project("vscode-http-inputs", ".vscode/mcp.json");
    let loaded = aurad::config::load(dir.path(), &env);
    let names: Vec<&str> = loaded
        .project
        .substituted
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(names, ["AURAD_INPUT_API_KEY"]);
    let secrets = aurad::registry::secrets::secrets(&loaded.project, &env, &[]);
    assert!(
        secrets.contains(&(
            "AURAD_INPUT_API_KEY".to_string(),
            "gh-token-from-env".to_string()
        )),
        "{secrets:?}"
    );
}

/// A project whose MCP file, at `place`, is `text` with `@SERVER@` replaced
/// by the test server's path.
fn project_with(place: &str, text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join(place);
    std::fs::create_dir_all(target.parent().expect("a parent")).expect("mkdir");
    let server = support::mcp_test_server().display().to_string();
    std::fs::write(&target, text.replace("@SERVER@", &server)).expect("write the MCP file");
    dir
}

/// Loads each (place, text), starts every server, and checks each answers
/// `echo` through its namespaced tool.
async fn connect_all(files: &[(&str, &str)], env: &dyn Fn(&str) -> Option<String>) {
    let mut servers = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut keep = Vec::new();
    for (place, text) in files {
        let dir = project_with(place, text);
        let (loaded, diags) = load_mcp(dir.path(), env);
        assert!(errors(&diags).is_empty(), "{place}: {diags:?}");
        assert_eq!(loaded.len(), 1, "{place}: {text}");
        servers.extend(loaded);
        dirs.push(dir.path().to_path_buf());
        keep.push(dir);
    }
    let names: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
    let manager = McpManager::start(servers).await;
    for status in manager.status() {
        assert_eq!(
            status.state,
            ServerState::Connected,
            "{}: {status:?}",
            status.name
        );
    }
    let tools = manager.tools();
    for name in names {
        let tool = tools
            .iter()
            .find(|t| t.spec().name == format!("{name}_echo"))
            .unwrap_or_else(|| panic!("no {name}_echo"));
        let answer = tool
            .call(json!({"text": format!("hi {name}")}), &support::tool_ctx())
            .await;
        assert_eq!(answer, Ok(format!("hi {name}")));
    }
    manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_of_each_main_dialect_connects() {
    let env = |name: &str| match name {
        "TEST_SERVER" => Some(support::mcp_test_server().display().to_string()),
        _ => None,
    };
    connect_all(
        &[
            ("mcp.json", r#"{"mcpServers": {"desktop": {"command": "@SERVER@", "args": [], "env": {"A": "1"}}}}"#),
            (".mcp.json", r#"{"mcpServers": {"code": {"type": "stdio", "command": "${TEST_SERVER}", "args": []}}}"#),
            ("mcp.json", r#"{"mcpServers": {"cursor": {"type": "stdio", "command": "${env:TEST_SERVER}", "cwd": "${workspaceFolder}"}}}"#),
            (".vscode/mcp.json", r#"{"inputs": [], "servers": {"vscode": {"type": "stdio", "command": "${env:TEST_SERVER}", "env": {"PORT": 1}}}}"#),
            ("mcp.json", r#"{"mcpServers": {"windsurf": {"command": "${env:TEST_SERVER}", "env": {}}}}"#),
            ("mcp.json", r#"{"context_servers": {"zed_old": {"command": {"path": "@SERVER@", "args": [], "env": {}}, "settings": {}}}}"#),
            ("mcp.json", r#"{"context_servers": {"zed": {"command": "@SERVER@", "args": [], "enabled": true, "timeout": 60}}}"#),
            ("mcp.json", r#"{"mcpServers": {"cline": {"command": "${env:TEST_SERVER}", "disabled": false, "autoApprove": ["echo"]}}}"#),
            ("mcp.json", r#"{"mcpServers": {"roo": {"type": "stdio", "command": "${env:TEST_SERVER}", "alwaysAllow": ["*"]}}}"#),
        ],
        &env,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_headers_with_variables_reach_the_server() {
    let server = HttpServer::start("127.0.0.1:0", "X-Test-Token: t0ken-42").await;
    let url = format!("http://{}/mcp", server.addr);
    let env = |name: &str| match name {
        "AURAD_INPUT_TOKEN" | "TEST_TOKEN" => Some("t0ken-42".to_string()),
        _ => None,
    };
    let vscode = format!(
        r#"{{"inputs": [{{"type": "promptString", "id": "token", "password": true}}],
            "servers": {{"vscode": {{"type": "http", "url": "{url}", "headers": {{"X-Test-Token": "${{input:token}}"}}}}}}}}"#
    );
    let windsurf = format!(
        r#"{{"mcpServers": {{"windsurf": {{"serverUrl": "{url}", "headers": {{"X-Test-Token": "${{env:TEST_TOKEN}}"}}}}}}}}"#
    );
    let code = format!(
        r#"{{"mcpServers": {{"code": {{"type": "http", "url": "{url}", "headers": {{"X-Test-Token": "${{TEST_TOKEN}}"}}}}}}}}"#
    );
    let zed = format!(
        r#"{{"context_servers": {{"zed": {{"url": "{url}", "headers": {{"X-Test-Token": "t0ken-42"}}}}}}}}"#
    );
    connect_all(
        &[
            (".vscode/mcp.json", &vscode),
            ("mcp.json", &windsurf),
            (".mcp.json", &code),
            ("mcp.json", &zed),
        ],
        &env,
    )
    .await;

    // The same file with another value: the server refuses it.
    let dir = project_with(".vscode/mcp.json", &vscode);
    let wrong = |name: &str| (name == "AURAD_INPUT_TOKEN").then(|| "other".to_string());
    let (servers, _) = load_mcp(dir.path(), &wrong);
    let manager = McpManager::start(servers).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let reason = loop {
        match manager.status()[0].state.clone() {
            ServerState::Restarting { reason, .. } | ServerState::Failed { reason } => {
                break reason;
            }
            _ => {}
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the wrong header was not refused"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(reason.starts_with("HTTP 401 Unauthorized"), "{reason}");
    manager.shutdown().await;
    server.kill().await;
}
