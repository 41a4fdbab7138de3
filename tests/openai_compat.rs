//! The OpenAI-compatible endpoint with the official `openai` Python
//! package as the client (`tests/clients/openai_client.py`): a real daemon
//! in this process, the mock model answering in the order the script asks.
//! The script asserts what the client gets (models, plain and streamed
//! completions, the usage, errors as the package's exceptions); this test
//! asserts what the model was sent (the client's conversation, a stored
//! session's history). Skipped (said so) when the package is missing,
//! unless `CI` is set: then it fails.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::time::Duration;

use serde_json::Value;
use support::daemon::Api;
use support::mock_llm::{MockLlm, Recorded, Reply};
use support::project::project_with_mock;

/// The longest the script may take.
const SCRIPT_WAIT: Duration = Duration::from_secs(120);

/// Whether `python3` can import `openai`; without it the test is skipped,
/// except under CI.
fn openai_package() -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "the `openai` Python package is missing and CI is set: install it with `python3 -m pip install openai`"
        );
        eprintln!(
            "skipped: the `openai` Python package is missing (python3 -m pip install openai)"
        );
    }
    found
}

/// A request's messages as (role, content).
fn conversation(request: &Recorded) -> Vec<(String, String)> {
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

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(r, c)| (r.to_string(), c.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_package_talks_to_agents() {
    if !openai_package() {
        return;
    }
    let mock = MockLlm::start().await;
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: You are aurad's agent.\ntools: [calculator]\n",
    );
    // A pipeline is no model.
    std::fs::write(
        dir.path().join("agents/flow.yaml"),
        "description: a pipeline\nsteps:\n  - id: one\n    template: hello\n",
    )
    .unwrap();
    // The replies, in the order the script's steps ask for them.
    for reply in [
        Reply::Text("Hi there.".into()),
        Reply::Text("streamed answer".into()),
        Reply::Text("Your name is Ada.".into()),
        Reply::tool_call("c1", "calculator", r#"{"expression":"6*7"}"#),
        Reply::Text("It is 42.".into()),
        Reply::Text("first answer".into()),
        Reply::Text("second answer".into()),
        Reply::error(400, "mock: this request is refused"),
        Reply::error(400, "mock: this request is refused"),
    ] {
        mock.push(reply);
    }
    let api = Api::start(dir.path(), &[]).await;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/openai_client.py"
    );
    let run = tokio::process::Command::new("python3")
        .arg(script)
        .arg(api.url("/v1"))
        .arg(api.token.as_deref().unwrap())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(SCRIPT_WAIT, run)
        .await
        .expect("the client script ended in time")
        .expect("python3 ran");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the client script failed ({:?})\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.lines().any(|l| l == "ok"), "{stdout}");

    let requests = mock.requests();
    assert_eq!(requests.len(), 9, "one model request per reply");
    let system = ("system", "You are aurad's agent.");
    assert_eq!(
        conversation(&requests[0]),
        pairs(&[system, ("user", "hello")])
    );
    // The client's conversation: its system message after the agent's.
    assert_eq!(
        conversation(&requests[2]),
        pairs(&[
            system,
            ("system", "Call me by my name."),
            ("user", "My name is Ada."),
            ("assistant", "Hello Ada."),
            ("user", "What is my name?"),
        ])
    );
    // The tool ran inside aurad: its result went back to the model.
    let tool = &requests[4].messages()[3];
    assert_eq!(
        (tool["role"].as_str(), tool["content"].as_str()),
        (Some("tool"), Some("42"))
    );
    // The session's second turn: the first turn from the store, not the
    // client's other messages.
    assert_eq!(
        conversation(&requests[6]),
        pairs(&[
            system,
            ("user", "one"),
            ("assistant", "first answer"),
            ("user", "two"),
        ])
    );
    // The session keeps both turns, and its runs are API runs.
    let session = stdout
        .lines()
        .find_map(|l| l.strip_prefix("session "))
        .expect("the script printed its session");
    let (status, body) = api.get_json(&format!("/v1/sessions/{session}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["session"]["turns"], 2, "{body}");
    let run = body["messages"][3]["run_id"].as_str().unwrap();
    let (_, run) = api.get_json(&format!("/v1/runs/{run}")).await;
    assert_eq!(run["trigger"], "api", "{run}");
    assert_eq!(run["session_id"], Value::from(session), "{run}");
    api.stop().await;
}

/// The endpoint is guarded like the rest of the API, and the guard's
/// refusals come in OpenAI's error shape too.
#[tokio::test]
async fn the_guard_refuses_web_pages_in_openai_s_shape() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: mock/m\n");
    let api = Api::start(dir.path(), &[]).await;
    let body = r#"{"model": "a", "messages": [{"role": "user", "content": "hi"}]}"#;
    let cross_site = api
        .post("/v1/chat/completions")
        .header("content-type", "application/json")
        .header("origin", "https://elsewhere.example")
        .body(body)
        .send()
        .await
        .unwrap();
    let (status, error) = support::daemon::json_of(cross_site).await;
    assert_eq!(status, 403, "{error}");
    assert_eq!(error["error"]["type"], "permission_error", "{error}");
    let form = api
        .post("/v1/chat/completions")
        .header("content-type", "text/plain")
        .body(body)
        .send()
        .await
        .unwrap();
    let (status, error) = support::daemon::json_of(form).await;
    assert_eq!(status, 415, "{error}");
    assert_eq!(error["error"]["type"], "invalid_request_error", "{error}");
    assert!(error["error"]["message"].is_string(), "{error}");
    assert_eq!(mock.request_count(), 0, "no run started");
    api.stop().await;
}
