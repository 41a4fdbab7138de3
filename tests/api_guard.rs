//! The local API cannot be driven by a web page (issue #14 section 2): each
//! attack a page in the user's browser could make is performed against a
//! real daemon (`aurad::daemon::serve` in this process, on a free loopback
//! port) with the exact bytes a browser would send, written on a raw TCP
//! socket; each must be refused and start no run. Then the legitimate
//! clients (`aurad trigger`, a curl-like JSON request, a signed webhook
//! through a tunnel with a foreign `Host`) must still work.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use support::daemon::{Api, sign};
use support::mock_llm::{MockLlm, Reply};
use support::project::{add_settings, project_with_mock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(30);
const AGENT: &str = "model: mock/m\nprompt: \"check\"\nwebhook: { secret_env: HOOK_SECRET }\n";
const HOOK_SECRET: &str = "hook-secret-for-tests";

/// Sends `head` (request line and headers, without the final blank line)
/// and `body` as one HTTP/1.1 request; returns the status and the body.
async fn raw(addr: SocketAddr, head: &str, body: &str) -> (u16, String) {
    let text = exchange(
        addr,
        &format!(
            "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The error text of a JSON error body (chunked bodies are unwrapped by
/// looking for the JSON object).
fn error_of(body: &str) -> String {
    let start = body
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in {body:?}"));
    let end = body.rfind('}').unwrap() + 1;
    let value: Value = serde_json::from_str(&body[start..end]).unwrap();
    value["error"].as_str().unwrap_or_default().to_string()
}

/// Starts the daemon on a project with agent `a` (a webhook too).
async fn start(mock: &MockLlm, settings: &str) -> (tempfile::TempDir, Api) {
    let dir = project_with_mock(mock, AGENT);
    add_settings(dir.path(), settings);
    let api = Api::start(dir.path(), &[("HOOK_SECRET", HOOK_SECRET)]).await;
    (dir, api)
}

/// How many runs the store has, read through the API with a proper Host.
async fn run_count(api: &Api) -> usize {
    let (status, runs) = api.get_json("/v1/runs").await;
    assert_eq!(status, 200, "{runs}");
    runs["runs"].as_array().unwrap().len()
}

#[tokio::test]
async fn attacks_a_web_page_could_make_are_refused_and_start_no_run() {
    let mock = MockLlm::start().await;
    let (_dir, api) = start(&mock, "").await;
    let addr = api.daemon.addr;
    let post = "POST /v1/agents/a/runs HTTP/1.1";
    let body = "{\"input\": \"rm -rf\"}";

    // A form or fetch() with text/plain: no CORS preflight in a browser.
    let (status, answer) = raw(
        addr,
        &format!("{post}\r\nHost: {addr}\r\nContent-Type: text/plain;charset=UTF-8\r\nOrigin: http://{addr}"),
        body,
    )
    .await;
    assert_eq!(status, 415, "{answer}");
    assert!(
        error_of(&answer).contains("Content-Type: application/json"),
        "{answer}"
    );
    // The same without any Content-Type (fetch with a Blob, no body).
    let (status, answer) = raw(addr, &format!("{post}\r\nHost: {addr}"), "").await;
    assert_eq!(status, 415, "{answer}");
    // A form-encoded cancel.
    let (status, answer) = raw(
        addr,
        &format!("POST /v1/runs/x/cancel HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/x-www-form-urlencoded"),
        "a=b",
    )
    .await;
    assert_eq!(status, 415, "{answer}");

    // DNS rebinding: evil.example resolves to 127.0.0.1, the browser sends
    // its own name as Host, with a JSON body (same-origin for the browser).
    let (status, answer) = raw(
        addr,
        &format!(
            "{post}\r\nHost: evil.example:{}\r\nContent-Type: application/json\r\nOrigin: http://evil.example:{}",
            addr.port(),
            addr.port()
        ),
        body,
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(error_of(&answer).contains("allowed_hosts"), "{answer}");
    // Reading through the rebound name is refused too (runs, metrics).
    for path in ["/v1/runs", "/v1/status", "/metrics", "/healthz"] {
        let (status, answer) = raw(
            addr,
            &format!("GET {path} HTTP/1.1\r\nHost: evil.example:{}", addr.port()),
            "",
        )
        .await;
        assert_eq!(status, 403, "{path}: {answer}");
    }

    // A cross-origin page posting JSON (the browser would preflight, but
    // the request must not be acted on even if sent).
    let (status, answer) = raw(
        addr,
        &format!("{post}\r\nHost: {addr}\r\nContent-Type: application/json\r\nOrigin: http://evil.example"),
        body,
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(error_of(&answer).contains("Origin"), "{answer}");
    // A sandboxed frame or a file:// page.
    let (status, _) = raw(
        addr,
        &format!("{post}\r\nHost: {addr}\r\nContent-Type: application/json\r\nOrigin: null"),
        body,
    )
    .await;
    assert_eq!(status, 403);

    // Fetch metadata of a cross-site (and a same-site: another local port)
    // request, without an Origin header.
    for site in ["cross-site", "same-site"] {
        let (status, answer) = raw(
            addr,
            &format!(
                "{post}\r\nHost: {addr}\r\nContent-Type: application/json\r\nSec-Fetch-Site: {site}"
            ),
            body,
        )
        .await;
        assert_eq!(status, 403, "{site}: {answer}");
        assert!(error_of(&answer).contains("Sec-Fetch-Site"), "{answer}");
    }

    // Not one of them started a run or reached the model.
    assert_eq!(run_count(&api).await, 0);
    assert_eq!(mock.request_count(), 0);
    api.stop().await;
}

#[tokio::test]
async fn legitimate_clients_still_work() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let (dir, api) = start(&mock, "allowed_hosts: [aurad.example.com]\n").await;
    let addr = api.daemon.addr;

    // curl -H 'Content-Type: application/json' -d '{"input": ...}'
    let bearer = format!("Authorization: Bearer {}", api.daemon.token);
    let (status, answer) = raw(
        addr,
        &format!("POST /v1/agents/a/runs HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\nContent-Type: application/json\r\n{bearer}"),
        "{\"input\": \"from curl\"}",
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    // The same from a browser tab on the API's own origin, and through a
    // reverse proxy under an allowed name.
    let (status, answer) = raw(
        addr,
        &format!("POST /v1/agents/a/runs HTTP/1.1\r\nHost: localhost:{}\r\nContent-Type: application/json; charset=utf-8\r\nOrigin: http://localhost:{}\r\nSec-Fetch-Site: same-origin\r\n{bearer}", addr.port(), addr.port()),
        "{\"input\": \"same origin\"}",
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    let (status, answer) = raw(
        addr,
        &format!("GET /v1/runs HTTP/1.1\r\nHost: aurad.example.com\r\nX-Forwarded-For: 10.0.0.9\r\n{bearer}"),
        "",
    )
    .await;
    assert_eq!(status, 200, "{answer}");

    // `aurad trigger`, the real binary.
    let url = format!("http://{addr}");
    let root = dir.path().to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        support::serve::aurad(&root)
            .args(["trigger", "a", "--input", "from the cli", "--url", &url])
            .output()
            .expect("run aurad trigger")
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "aurad trigger failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("run "),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );

    // A signed webhook through a tunnel: a foreign Host, no JSON content
    // type; the signature is what counts.
    let payload = "{\"action\": \"opened\"}";
    let (status, answer) = raw(
        addr,
        &format!(
            "POST /hooks/a HTTP/1.1\r\nHost: abc123.tunnel.example\r\nContent-Type: application/octet-stream\r\nX-GitHub-Delivery: d-1\r\nX-Hub-Signature-256: {}",
            sign(HOOK_SECRET, payload.as_bytes())
        ),
        payload,
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    // And an unsigned one is still refused.
    let (status, _) = raw(
        addr,
        "POST /hooks/a HTTP/1.1\r\nHost: abc123.tunnel.example\r\nContent-Type: application/json\r\nX-GitHub-Delivery: d-2",
        payload,
    )
    .await;
    assert_eq!(status, 401);

    let (_, runs) = api.get_json("/v1/runs").await;
    let runs = runs["runs"].as_array().unwrap().clone();
    let mut triggers: Vec<&str> = runs
        .iter()
        .map(|r| r["trigger"].as_str().unwrap())
        .collect();
    triggers.sort();
    assert_eq!(triggers, ["api", "api", "api", "webhook"], "{runs:?}");
    for run in &runs {
        api.wait_run(run["id"].as_str().unwrap()).await;
    }
    api.stop().await;
}

/// The head of the answer to `GET path` (with the token), lowercased.
async fn head_of(addr: SocketAddr, token: &str, path: &str) -> String {
    let text = exchange(
        addr,
        &format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        ),
    )
    .await
    .to_lowercase();
    text.split_once("\r\n\r\n")
        .map_or(text.clone(), |(h, _)| h.to_string())
}

/// Sends `request` as it is; returns the whole answer as text.
async fn exchange(addr: SocketAddr, request: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut response))
        .await
        .expect("an answer in time")
        .unwrap();
    String::from_utf8_lossy(&response).into_owned()
}

/// Issue #32 item 11: the README said every answer carries `nosniff` and a
/// Content-Security-Policy; `/v1/*` answers carried neither.
#[tokio::test]
async fn every_answer_carries_the_security_headers() {
    let mock = MockLlm::start().await;
    let (_dir, api) = start(&mock, "").await;
    let addr = api.daemon.addr;
    let token = api.daemon.token.clone();
    for path in [
        "/v1/runs",
        "/v1/agents",
        "/healthz",
        "/metrics",
        "/v1/nope",
        "/",
    ] {
        let head = head_of(addr, &token, path).await;
        for want in [
            "x-content-type-options: nosniff",
            "x-frame-options: deny",
            "referrer-policy: no-referrer",
            "content-security-policy: default-src",
        ] {
            assert!(head.contains(want), "{path}: no `{want}` in\n{head}");
        }
        let api_policy = "content-security-policy: default-src 'none'; frame-ancestors 'none'";
        assert_eq!(head.contains(api_policy), path != "/", "{path}:\n{head}");
    }
}
