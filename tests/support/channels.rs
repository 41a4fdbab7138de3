//! What the channel tests share: a project whose agent `a` talks to the
//! mock model and a channel file pointing at a platform's fake, the daemon
//! started with the channel's secrets, and a channel's state read from
//! `GET /v1/status`.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::inproc::{self, InProc, Start, eventually};
use super::mock_llm::MockLlm;

/// How long anything may take before a test fails.
pub const WAIT: Duration = Duration::from_secs(30);

/// A project with agent `a` (`agent` is its YAML) and `channels/NAME.yaml`
/// holding `channel`.
pub fn project_with_channel(
    mock: &MockLlm,
    agent: &str,
    name: &str,
    channel: &str,
) -> tempfile::TempDir {
    let dir = super::project::project_with_mock(mock, agent);
    std::fs::create_dir(dir.path().join("channels")).unwrap();
    std::fs::write(dir.path().join(format!("channels/{name}.yaml")), channel).unwrap();
    dir
}

/// Starts the daemon on `root` with the environment `vars` (the channel's
/// secrets).
pub async fn start(root: &Path, vars: &[(&str, &str)]) -> InProc {
    inproc::start(
        root,
        Start {
            env: super::daemon::env_of(vars),
            ..Start::default()
        },
    )
    .await
}

/// Channel `name` as `GET /v1/status` shows it.
pub async fn status(daemon: &InProc, name: &str) -> Value {
    let (code, status) = inproc::get(daemon, "/v1/status").await;
    assert_eq!(code, 200, "{status}");
    status["channels"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == name))
        .cloned()
        .unwrap_or(Value::Null)
}

/// Waits until channel `name`'s status satisfies `check`; that status.
pub async fn wait_status(
    daemon: &InProc,
    name: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    eventually(what, WAIT, || async {
        let s = status(daemon, name).await;
        check(&s).then_some(s)
    })
    .await
}

/// The two-turn conversation every channel test holds: the mock answered
/// two requests, and the second holds the first turn.
pub fn assert_second_turn_holds_the_first(mock: &MockLlm) {
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].conversation(),
        vec![
            (
                "user".to_string(),
                "What is the capital of France?".to_string()
            ),
            (
                "assistant".to_string(),
                "Paris is the **capital** of France.".to_string()
            ),
            ("user".to_string(), "How many live there?".to_string()),
        ]
    );
}

/// The daemon's two runs are turns of one session, started by a channel.
pub async fn assert_two_turns_of_one_session(daemon: &InProc) {
    let (_, runs) = inproc::get(daemon, "/v1/runs").await;
    let runs = runs["runs"].as_array().cloned().unwrap_or_default();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert!(runs.iter().all(|r| r["trigger"] == "channel"), "{runs:?}");
    assert_eq!(runs[0]["session_id"], runs[1]["session_id"]);
}
