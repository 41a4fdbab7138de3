//! `tools.d` plugins end to end: fixture files are loaded with
//! `load_plugins`, turned into `PluginTool`s and called through the real
//! path (`ToolRegistry::select(..).execute(..)`, which validates arguments
//! first). Command plugins run the fixture scripts; HTTP plugins talk to a
//! tiny HTTP server started on 127.0.0.1 by the test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aurad::config::plugins::{PluginConfig, load_plugins};
use aurad::tools::plugin::PluginTool;
use aurad::tools::{DEFAULT_OUTPUT_CAP, Tool, ToolContext, ToolOutcome, ToolRegistry};
use aurad::types::ToolCall;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load(env: &dyn Fn(&str) -> Option<String>) -> (PathBuf, Vec<PluginConfig>) {
    let root = fixture("plugins");
    let (plugins, diags) = load_plugins(&root, env);
    let errors: Vec<String> = diags
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");
    (root, plugins)
}

fn registry(root: &Path, plugins: Vec<PluginConfig>) -> ToolRegistry {
    let tools: Vec<Arc<dyn Tool>> = plugins
        .into_iter()
        .map(|cfg| Arc::new(PluginTool::new(cfg, root)) as Arc<dyn Tool>)
        .collect();
    ToolRegistry::new(tools)
}

fn context(root: &Path) -> ToolContext {
    ToolContext {
        root: root.to_path_buf(),
        cancel: CancellationToken::new(),
        output_cap: DEFAULT_OUTPUT_CAP,
        sandbox: Default::default(),
    }
}

async fn call(reg: &ToolRegistry, ctx: &ToolContext, name: &str, args: Value) -> ToolOutcome {
    let call = ToolCall {
        id: "call_1".into(),
        name: name.into(),
        arguments: args.to_string(),
    };
    let set = reg.select(&["*".into()]);
    tokio::time::timeout(Duration::from_secs(10), set.execute(&call, ctx))
        .await
        .unwrap_or_else(|_| panic!("the call of `{name}` hung"))
}

/// True once `pid` no longer runs (gone, or a zombie nobody reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
    }
}

async fn poll_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn read_pid(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

#[test]
fn the_fixture_loads_with_one_warning() {
    let root = fixture("plugins");
    let (plugins, diags) = load_plugins(&root, &|_| None);
    let names: Vec<&str> = plugins.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "crash",
            "echo",
            "fail",
            "get_echo",
            "greet",
            "http_fail",
            "http_slow",
            "marker",
            "missing",
            "post_echo",
            "slow"
        ]
    );
    let diags: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert!(
        diags[0].starts_with(
            "tools.d/missing.yaml:3:10: warning: the program \"./not_there.sh\" does not exist"
        ),
        "{diags:?}"
    );
    let greet = plugins.iter().find(|p| p.name == "greet").unwrap();
    assert_eq!(greet.path, Path::new("tools.d/greet.yaml"));
    assert_eq!(greet.timeout, Duration::from_secs(5));
}

#[tokio::test]
async fn stdin_json_reaches_the_script_and_stdout_comes_back() {
    let (root, plugins) =
        load(&|name| (name == "AURAD_FIXTURE_GREETING").then(|| "Bonjour".to_string()));
    let reg = registry(&root, plugins);
    let ctx = context(&root);
    let out = call(&reg, &ctx, "greet", json!({"name": "Ada"})).await;
    assert!(!out.is_error, "{}", out.output);
    assert_eq!(out.output, "Bonjour, Ada! (tool greet)");

    let args = json!({"nested": {"list": [1, 2]}, "text": "é \"quoted\""});
    let out = call(&reg, &ctx, "echo", args.clone()).await;
    assert!(!out.is_error, "{}", out.output);
    assert_eq!(serde_json::from_str::<Value>(&out.output).unwrap(), args);
}

#[tokio::test]
async fn failures_carry_the_exit_code_signal_and_stderr_tail() {
    let (root, plugins) = load(&|_| None);
    let reg = registry(&root, plugins);
    let ctx = context(&root);
    let out = call(&reg, &ctx, "fail", json!({})).await;
    assert!(out.is_error);
    assert_eq!(
        out.output,
        "error: tool `fail` exited with code 3. stderr:\nthe disk is on fire"
    );
    let out = call(&reg, &ctx, "crash", json!({})).await;
    assert!(out.is_error);
    assert_eq!(
        out.output,
        "error: tool `crash` was killed by signal 15 (SIGTERM) and printed nothing"
    );
    let out = call(&reg, &ctx, "missing", json!({})).await;
    assert!(out.is_error);
    assert!(
        out.output.starts_with(
            "error: could not start `./not_there.sh` (the command of tools.d/missing.yaml): "
        ),
        "{}",
        out.output
    );
    assert!(
        out.output
            .ends_with("check that tools.d/not_there.sh exists"),
        "{}",
        out.output
    );
}

#[tokio::test]
async fn the_timeout_kills_the_grandchild_too() {
    let (root, plugins) = load(&|_| None);
    let reg = registry(&root, plugins);
    let ctx = context(&root);
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let started = Instant::now();
    let out = call(&reg, &ctx, "slow", json!({"pidfile": pidfile})).await;
    assert!(out.is_error);
    assert_eq!(out.output, "error: timed out after 1s");
    assert!(started.elapsed() < Duration::from_secs(5));
    let pid = read_pid(&pidfile).expect("the script wrote no pid");
    poll_until("the background sleep to die", || gone(pid)).await;
}

#[tokio::test]
async fn cancelling_the_run_stops_the_script_and_its_grandchild() {
    let (root, plugins) = load(&|_| None);
    let reg = registry(&root, plugins);
    let ctx = context(&root);
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let (out, pid) = tokio::join!(
        call(&reg, &ctx, "slow", json!({"pidfile": pidfile})),
        async {
            poll_until("the script to write its pid", || pidfile.exists()).await;
            ctx.cancel.cancel();
            read_pid(&pidfile).unwrap()
        }
    );
    assert_eq!(out.output, "error: cancelled");
    poll_until("the background sleep to die", || gone(pid)).await;
}

#[tokio::test]
async fn schema_invalid_arguments_never_reach_the_script() {
    let (root, plugins) = load(&|_| None);
    let reg = registry(&root, plugins);
    let ctx = context(&root);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("marker");
    let out = call(
        &reg,
        &ctx,
        "marker",
        json!({"path": marker, "count": "three"}),
    )
    .await;
    assert!(out.is_error);
    assert!(
        out.output
            .starts_with("error: invalid arguments for `marker`: at /count:"),
        "{}",
        out.output
    );
    assert!(out.output.contains("integer"), "{}", out.output);
    assert!(!marker.exists(), "the script ran with invalid arguments");

    // The same call with valid arguments does run it.
    let out = call(&reg, &ctx, "marker", json!({"path": marker, "count": 3})).await;
    assert_eq!(out.output, "marker written");
    assert!(marker.exists());
}

/// One request as the echo server saw it.
struct Seen {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: String,
}

/// A tiny HTTP/1.1 server: `/fail...` answers 500, `/hang...` never answers,
/// everything else 200 with a JSON echo of the request.
async fn echo_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let Some(seen) = read_request(&mut stream).await else {
                    return;
                };
                if seen.target.starts_with("/hang") {
                    std::future::pending::<()>().await;
                }
                let (status, body) = if seen.target.starts_with("/fail") {
                    (
                        "500 Internal Server Error",
                        "{\"error\":\"boom\"}".to_string(),
                    )
                } else {
                    let headers: serde_json::Map<String, Value> = seen
                        .headers
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect();
                    let echo = json!({
                        "method": seen.method,
                        "target": seen.target,
                        "headers": headers,
                        "body": seen.body,
                    });
                    ("200 OK", echo.to_string())
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    base
}

async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Seen> {
    let mut data = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split(' ');
    let (method, target) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = data[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some(Seen {
        method,
        target,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

#[tokio::test]
async fn http_plugins_send_body_query_and_headers() {
    let base = echo_server().await;
    let env = move |name: &str| (name == "AURAD_TEST_HTTP_BASE").then(|| base.clone());
    let (root, plugins) = load(&env);
    let reg = registry(&root, plugins);
    let ctx = context(&root);

    let out = call(&reg, &ctx, "post_echo", json!({"city": "Paris", "days": 2})).await;
    assert!(!out.is_error, "{}", out.output);
    let echo: Value = serde_json::from_str(&out.output).unwrap();
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["target"], "/echo");
    let body: Value = serde_json::from_str(echo["body"].as_str().unwrap()).unwrap();
    assert_eq!(body, json!({"city": "Paris", "days": 2}));
    assert_eq!(echo["headers"]["authorization"], "Bearer fixture-token");
    assert_eq!(echo["headers"]["x-extra"], "yes");
    assert_eq!(echo["headers"]["content-type"], "application/json");

    let args = json!({"q": "rust & tokio", "limit": 5, "tags": ["a", "b"]});
    let out = call(&reg, &ctx, "get_echo", args).await;
    assert!(!out.is_error, "{}", out.output);
    let echo: Value = serde_json::from_str(&out.output).unwrap();
    assert_eq!(echo["method"], "GET");
    assert_eq!(
        echo["target"],
        "/search?lang=en&limit=5&q=rust+%26+tokio&tags=%5B%22a%22%2C%22b%22%5D"
    );
    assert_eq!(echo["body"], "");
}

#[tokio::test]
async fn http_errors_come_back_as_error_outcomes() {
    let base = echo_server().await;
    let env = move |name: &str| (name == "AURAD_TEST_HTTP_BASE").then(|| base.clone());
    let (root, plugins) = load(&env);
    let reg = registry(&root, plugins.clone());
    let ctx = context(&root);
    let out = call(&reg, &ctx, "http_fail", json!({"x": 1})).await;
    assert!(out.is_error);
    assert!(
        out.output
            .contains("answered HTTP 500 Internal Server Error; body:\n{\"error\":\"boom\"}"),
        "{}",
        out.output
    );

    let started = Instant::now();
    let out = call(&reg, &ctx, "http_slow", json!({})).await;
    assert_eq!(out.output, "error: timed out after 500ms");
    assert!(started.elapsed() < Duration::from_secs(3));

    // Nothing listens on the default port 9: connecting fails, quickly.
    let (root, plugins) = load(&|_| None);
    let reg = registry(&root, plugins);
    let out = call(&reg, &ctx, "http_fail", json!({})).await;
    assert!(out.is_error);
    assert!(
        out.output
            .starts_with("error: tool `http_fail`: the request to http://127.0.0.1:9 failed:"),
        "{}",
        out.output
    );
    // The URL beyond its origin is never shown: it may hold secrets.
    assert!(!out.output.contains("/fail"), "{}", out.output);
}

#[test]
fn every_broken_file_gets_its_diagnostic_with_a_place() {
    let root = fixture("broken_plugins");
    let (plugins, diags) = load_plugins(&root, &|_| None);
    assert!(plugins.is_empty(), "{plugins:?}");
    let diags: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
    let expected = [
        "tools.d/bad.name.yaml: tool name \"bad.name\" (the file name) must match [A-Za-z0-9_-]{1,64}; rename the file, e.g. to bad_name.yaml",
        "tools.d/bad_timeout.yaml:4:10: timeout: invalid duration \"soon\"",
        "tools.d/both.yaml:4:7: give either `command` (run a program) or `http` (call a URL), not both",
        "tools.d/invalid_schema.yaml:5:19: `parameters` is not a valid JSON Schema at /properties/city/type: ",
        "tools.d/missing_env.yaml:5:11: ",
        "tools.d/neither.yaml:1:1: the tool does nothing",
        "tools.d/not_object.yaml:3:9: `parameters` must have `type: object`",
        "tools.d/unknown_field.yaml:4:1: unknown field `timout`: did you mean `timeout`?",
    ];
    assert_eq!(diags.len(), expected.len(), "{diags:#?}");
    for (diag, prefix) in diags.iter().zip(expected) {
        assert!(
            diag.starts_with(prefix),
            "{diag}\ndoes not start with\n{prefix}"
        );
    }
    assert!(
        diags[4].contains("AURAD_FIXTURE_UNSET_PLUGIN_VAR"),
        "{}",
        diags[4]
    );
}
