//! Secrets are redacted by value (issue #14 section 1): secrets are planted
//! in the environment of a real `aurad serve` (a credential-looking
//! variable, a provider's `api_key_env`, a webhook's `secret_env`, `${VAR}`
//! substitutions into a tools.d plugin's `env`, `DATABASE_URL`, a
//! `*_WEBHOOK_URL`, a URL with a password), the mock model scripts tool
//! calls that print every one of them (a plugin dumping its environment,
//! `read_file` of a file holding a key, a `read_file` error naming one, a
//! failing `bash` command echoing one) and a final answer quoting some, and
//! a broken agent file makes the daemon log a diagnostic that quotes one.
//! Then the database file's bytes (and its WAL), the captured log, the SSE
//! streams and every model request body are searched: no secret occurs,
//! and `[redacted:NAME]` stands where each was. The same for `aurad run`:
//! its terminal output (the streamed answer quoting a key in 3-character
//! chunks), its log, the model requests and the database.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mock_llm::{MockLlm, Reply};
use support::serve::{KillOnDrop, aurad, free_port};

const DEADLINE: Duration = Duration::from_secs(30);

/// (variable, value): every planted secret.
const SECRETS: [(&str, &str); 8] = [
    ("OPENAI_API_KEY", "sk-planted-openai-7f3a9c1e5b"),
    ("MY_TOKEN", "tok-planted-my-token-4d2e8a"),
    ("DEPLOY_PHRASE", "phrase-planted-deploy-0c4d"),
    ("GH_HOOK", "hook-planted-gh-secret-91b7"),
    ("MOCK_API_KEY", "mock-planted-provider-key-55ab"),
    (
        "DATABASE_URL",
        "postgres://app:db-planted-pass-3c@db.internal:5432/app",
    ),
    (
        "SLACK_WEBHOOK_URL",
        "https://hooks.slack.example/services/T0/B0/planted-slack-7e",
    ),
    (
        "PROXY_URL",
        "http://proxyuser:proxy-planted-pass-2f@proxy.internal:3128",
    ),
];

/// What must never appear anywhere: each value, and the parts of URL
/// credentials that could appear alone.
fn forbidden() -> Vec<&'static str> {
    let mut all: Vec<&str> = SECRETS.iter().map(|(_, v)| *v).collect();
    all.extend(["db-planted-pass-3c", "proxy-planted-pass-2f"]);
    all
}

fn value(name: &str) -> &'static str {
    SECRETS.iter().find(|(n, _)| *n == name).unwrap().1
}

/// Asserts no secret is in `haystack` (bytes of `what`).
fn assert_clean(what: &str, haystack: &[u8]) {
    for secret in forbidden() {
        let found = haystack
            .windows(secret.len())
            .filter(|w| *w == secret.as_bytes())
            .count();
        assert_eq!(
            found, 0,
            "{what} holds the secret {secret:?} {found} time(s)"
        );
    }
}

fn assert_redacted(what: &str, text: &str, names: &[&str]) {
    for name in names {
        assert!(
            text.contains(&format!("[redacted:{name}]")),
            "{what} lacks [redacted:{name}]:\n{text}"
        );
    }
}

fn write(root: &Path, file: &str, text: &str) {
    let path = root.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The project: provider `mock` keyed by MOCK_API_KEY, agent `a` with a
/// webhook keyed by GH_HOOK, plugin `envdump` given MY_TOKEN and
/// DEPLOY_PHRASE through `${VAR}`, a file holding two keys.
fn project(mock: &MockLlm, port: u16) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "aurad.yaml",
        &format!(
            "providers:\n  mock: {{ kind: openai, base_url: \"{}\", api_key_env: MOCK_API_KEY }}\nlisten: 127.0.0.1:{port}\nshutdown_grace: 20s\n",
            mock.base_url()
        ),
    );
    write(
        root,
        "agents/a.yaml",
        "model: mock/m\nsystem: Be brief.\ntools: [envdump, read_file, bash]\nwebhook: { secret_env: GH_HOOK }\n",
    );
    write(
        root,
        "tools.d/envdump.yaml",
        "description: Prints its environment.\nparameters: { type: object }\ncommand: [\"sh\", \"-c\", \"env\"]\nenv:\n  PLUGIN_SECRET: \"${MY_TOKEN}\"\n  PHRASE: \"${DEPLOY_PHRASE}\"\n  PROXY: \"${PROXY_URL}\"\n",
    );
    write(
        root,
        "notes.txt",
        &format!(
            "openai: {}\nprovider: {}\n",
            value("OPENAI_API_KEY"),
            value("MOCK_API_KEY")
        ),
    );
    dir
}

/// Polls `check` every 20 ms until it returns `Some`, for up to DEADLINE.
async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The bytes of the database and its WAL and shared-memory files.
fn database_bytes(root: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for suffix in ["", "-wal", "-shm"] {
        if let Ok(b) = std::fs::read(root.join(format!("aurad.db{suffix}"))) {
            bytes.extend(b);
        }
    }
    assert!(!bytes.is_empty(), "no database file");
    bytes
}

#[tokio::test]
async fn planted_secrets_reach_neither_the_store_nor_logs_nor_sse_nor_the_model() {
    let mock = MockLlm::start().await;
    let port = free_port();
    let dir = project(&mock, port);
    let root = dir.path();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut command = aurad(root);
    command
        .args(["--log-format", "json", "serve"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap());
    for (name, value) in SECRETS {
        command.env(name, value);
    }
    let mut daemon = KillOnDrop(command.spawn().expect("spawn aurad serve"));
    let client = reqwest::Client::new();
    let base = format!("http://127.0.0.1:{port}");
    let read_log = || std::fs::read_to_string(log.path()).unwrap_or_default();
    eventually("aurad serve to answer /healthz", async || {
        let answer = client.get(format!("{base}/healthz")).send().await.ok()?;
        answer.status().is_success().then_some(())
    })
    .await;
    // The daemon's token, as it wrote it for the person.
    let client = support::inproc::client_with(
        &support::inproc::api_token(root, port).expect("the daemon's token"),
    );

    // The model asks for every way of printing a secret, then quotes two.
    mock.push(Reply::ToolCalls(vec![
        ("c1".into(), "envdump".into(), "{}".into()),
        (
            "c2".into(),
            "read_file".into(),
            json!({ "path": "notes.txt" }).to_string(),
        ),
        (
            "c3".into(),
            "read_file".into(),
            json!({ "path": format!("{}.txt", value("OPENAI_API_KEY")) }).to_string(),
        ),
        (
            "c4".into(),
            "bash".into(),
            json!({ "command": "echo \"hook=$GH_HOOK url=$SLACK_WEBHOOK_URL\" >&2; exit 3" })
                .to_string(),
        ),
    ]));
    mock.push(Reply::Text(format!(
        "Done. The key is {} and the hook secret {}.",
        value("OPENAI_API_KEY"),
        value("GH_HOOK")
    )));

    // The run, streamed live as SSE from its start.
    let response = client
        .post(format!("{base}/v1/agents/a/runs"))
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "collect the configuration" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let live = tokio::time::timeout(DEADLINE, response.bytes())
        .await
        .expect("the run's stream ended in time")
        .unwrap();
    let live = String::from_utf8_lossy(&live).into_owned();
    assert!(live.contains("event: finished"), "{live}");
    let run_id = live
        .lines()
        .find_map(|l| {
            let data: Value = serde_json::from_str(l.strip_prefix("data: ")?).ok()?;
            data["run_id"].as_str().map(str::to_string)
        })
        .expect("a started event with the run id");

    // What the model was sent: the tool results, redacted.
    let requests = mock.wait_for_requests(2, DEADLINE).await;
    let bodies: String = requests.iter().map(|r| r.body.to_string()).collect();
    assert_clean("the model requests", bodies.as_bytes());
    let tool_results = requests[1].body.to_string();
    assert_redacted(
        "the tool results sent to the model",
        &tool_results,
        &[
            "MY_TOKEN",
            "DEPLOY_PHRASE",
            "PROXY_URL",
            "OPENAI_API_KEY",
            "MOCK_API_KEY",
        ],
    );
    // The redaction is real: each tool did print its secret's place.
    assert!(tool_results.contains("PLUGIN_SECRET=[redacted:MY_TOKEN]"));
    assert!(
        tool_results.contains("PROXY=[redacted:PROXY_URL]"),
        "{tool_results}"
    );
    // What no tool was given, no tool has: tools start from an allow-list
    // of aurad's environment (tests/security_env.rs has the rest).
    assert!(tool_results.contains("hook= url="), "{tool_results}");
    for name in ["DATABASE_URL", "SLACK_WEBHOOK_URL", "GH_HOOK"] {
        assert!(
            !tool_results.contains(&format!("{name}=")),
            "{tool_results}"
        );
    }

    // The live stream, the stored replay and the run row.
    assert_clean("the live SSE stream", live.as_bytes());
    assert_redacted("the live SSE stream", &live, &["MY_TOKEN", "GH_HOOK"]);
    let replay = client
        .get(format!("{base}/v1/runs/{run_id}/events"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_clean("the stored SSE replay", replay.as_bytes());
    assert_redacted("the stored SSE replay", &replay, &["DEPLOY_PHRASE"]);
    let run: Value = client
        .get(format!("{base}/v1/runs/{run_id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(
        run["output"],
        "Done. The key is [redacted:OPENAI_API_KEY] and the hook secret [redacted:GH_HOOK]."
    );

    // A broken agent quoting a secret in its diagnostic, logged on reload.
    write(
        root,
        "agents/broken.yaml",
        "model: \"${MY_TOKEN}\"\nprompt: x\n",
    );
    let logged = eventually("the broken agent to be logged", async || {
        let log = read_log();
        // The diagnostic (`path:line:column: ...`), not the change notice.
        log.contains("agents/broken.yaml:1:").then_some(log)
    })
    .await;
    assert_redacted("the log", &logged, &["MY_TOKEN"]);

    let before_stop = database_bytes(root);
    // SAFETY: kill sends SIGTERM to our own child.
    assert_eq!(
        unsafe { libc::kill(daemon.0.id() as i32, libc::SIGTERM) },
        0
    );
    let status = tokio::task::spawn_blocking(move || {
        let status = daemon.0.wait();
        (status, daemon)
    })
    .await
    .unwrap()
    .0
    .unwrap();
    assert!(status.success(), "aurad serve exited with {status}");

    let log = read_log();
    assert_clean("the log", log.as_bytes());
    assert_clean("the database while running", &before_stop);
    let after_stop = database_bytes(root);
    assert_clean("the database after shutdown", &after_stop);
    let stored = String::from_utf8_lossy(&after_stop);
    assert_redacted(
        "the database",
        &stored,
        &["MY_TOKEN", "PROXY_URL", "OPENAI_API_KEY", "GH_HOOK"],
    );
}

#[tokio::test]
async fn aurad_run_shows_and_stores_no_planted_secret() {
    let mock = MockLlm::start().await;
    let dir = project(&mock, free_port());
    let root = dir.path().to_path_buf();
    mock.push(Reply::ToolCalls(vec![
        ("c1".into(), "envdump".into(), "{}".into()),
        (
            "c2".into(),
            "read_file".into(),
            json!({ "path": "notes.txt" }).to_string(),
        ),
    ]));
    mock.push(Reply::Text(format!(
        "Found {} in the notes.",
        value("OPENAI_API_KEY")
    )));
    let output = tokio::task::spawn_blocking(move || {
        let mut command = aurad(&root);
        command.args(["run", "a", "--input", "collect the configuration"]);
        for (name, value) in SECRETS {
            command.env(name, value);
        }
        command.output().expect("run aurad run")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert_clean("aurad run's output", stdout.as_bytes());
    assert_clean("aurad run's log", stderr.as_bytes());
    assert!(
        stdout.contains("Found [redacted:OPENAI_API_KEY] in the notes."),
        "{stdout}"
    );
    let requests = mock.wait_for_requests(2, DEADLINE).await;
    let bodies: String = requests.iter().map(|r| r.body.to_string()).collect();
    assert_clean("the model requests", bodies.as_bytes());
    assert_redacted(
        "the tool results sent to the model",
        &bodies,
        &["MY_TOKEN", "DEPLOY_PHRASE", "OPENAI_API_KEY"],
    );
    let stored = database_bytes(dir.path());
    assert_clean("the database", &stored);
    assert_redacted(
        "the database",
        &String::from_utf8_lossy(&stored),
        &["MY_TOKEN", "OPENAI_API_KEY"],
    );
}
