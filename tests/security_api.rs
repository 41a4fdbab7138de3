//! No sandboxed tool can act as the daemon's API client (issue "Hardening
//! II", item 1). With no `AURAD_TOKEN` (the loopback default), a `bash`
//! under `sandbox: read-only-project` once drove the API with `curl
//! 127.0.0.1:PORT`: it started an unsandboxed agent with its own input and
//! approved another run's waiting call. Now every request but `/healthz`,
//! the dashboard's files and the signed webhooks carries a token the daemon
//! makes at start and writes where only the person's CLI reads it: the
//! sandboxed shell's requests are refused (401), it cannot read the token
//! (Landlock denies reading aurad's private folder), and no run is started.
//! An unsandboxed shell has the user's power and can read it: the control
//! that shows the attempt is real. `aurad trigger` and `aurad dashboard`
//! find the running daemon and its token for the person.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::mock_llm::{MockLlm, Reply};
use support::serve::{Serve, aurad, http_get, http_post, poll, start_run, text, wait_state};

fn write(root: &Path, file: &str, content: &str) {
    let path = root.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// What the injected shell runs: a POST that would start `victim`, then
/// an attempt to read the daemon's credential.
fn attack(addr: std::net::SocketAddr, api_file: &Path) -> String {
    format!(
        "curl -s -o /dev/null -w 'start=%{{http_code}}\\n' -X POST -H 'Content-Type: application/json' \
         -d '{{\"input\":\"pwn\"}}' http://{addr}/v1/agents/victim/runs; \
         if cat {file} >/dev/null 2>&1; then echo read=yes; else echo read=no; fi; \
         token=$(sed -n 's/.*\"token\":\"\\([0-9a-f]*\\)\".*/\\1/p' {file} 2>/dev/null); \
         curl -s -o /dev/null -w 'with-token=%{{http_code}}\\n' -X POST -H 'Content-Type: application/json' \
         -H \"Authorization: Bearer $token\" -d '{{\"input\":\"pwn\"}}' http://{addr}/v1/agents/victim/runs",
        file = api_file.display()
    )
}

#[test]
fn a_sandboxed_shell_cannot_drive_the_api_and_an_unsandboxed_one_has_the_users_power() {
    let mock = MockLlm::start_in_thread();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let addr = support::serve::write_settings(root, &mock);
    for (name, sandbox) in [("confined", "read-only-project"), ("free", "none")] {
        write(
            root,
            &format!("agents/{name}.yaml"),
            &format!("model: mock/m\nsystem: s\ntools: [bash]\nsandbox: {sandbox}\n"),
        );
    }
    write(root, "agents/victim.yaml", "model: test\nprompt: hi\n");
    let serve = Serve::start(root, addr, &[]);
    let api_file = aurad::config::private::api_file(root, addr.port(), &|n| std::env::var(n).ok());
    assert!(
        api_file.is_file(),
        "the daemon wrote {}",
        api_file.display()
    );
    // Loopback is no credential: the test itself, without the token.
    let (status, body) = http_post(
        addr,
        "/v1/agents/victim/runs",
        &[
            ("Content-Type", "application/json"),
            ("Authorization", "Bearer not-the-token-at-all-0000"),
        ],
        "{}",
    )
    .unwrap();
    assert_eq!(status, 401, "{body}");
    let shell = |agent: &str| {
        mock.push(Reply::tool_call(
            "c1",
            "bash",
            &json!({ "command": attack(addr, &api_file) }).to_string(),
        ));
        mock.push(Reply::Text("done".into()));
        let id = start_run(addr, agent, "go");
        wait_state(&serve, &id, "succeeded");
        let requests = mock.requests();
        let last = requests.last().unwrap();
        last.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let confined = shell("confined");
    assert!(confined.contains("start=401"), "{confined}");
    assert!(confined.contains("read=no"), "{confined}");
    assert!(confined.contains("with-token=401"), "{confined}");
    let victims = |serve: &Serve| {
        poll(
            "the run list",
            || serve.log(),
            || {
                let (status, body) = http_get(addr, "/v1/runs?agent=victim")?;
                (status == 200).then(|| {
                    serde_json::from_str::<Value>(&body).unwrap()["runs"]
                        .as_array()
                        .unwrap()
                        .len()
                })
            },
        )
    };
    assert_eq!(victims(&serve), 0, "a sandboxed shell started a run");
    // The control: without a sandbox the shell has the user's power.
    let free = shell("free");
    assert!(free.contains("read=yes"), "{free}");
    assert!(free.contains("with-token=202"), "{free}");
    assert_eq!(victims(&serve), 1);
}

#[test]
fn the_cli_finds_the_running_daemon_and_its_token() {
    let mock = MockLlm::start_in_thread();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // A port other than the one in aurad.yaml: the CLI must use where the
    // daemon really listens.
    support::serve::write_settings(root, &mock);
    write(root, "agents/a.yaml", "model: test\nprompt: hi\n");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", support::serve::free_port())
        .parse()
        .unwrap();
    let listen = addr.to_string();
    let serve = Serve::start(root, addr, &["--listen", &listen]);
    let out = aurad(root)
        .args(["trigger", "a", "--follow"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let out = aurad(root).arg("dashboard").output().unwrap();
    let url = text(&out.stdout);
    assert!(url.starts_with(&format!("http://{addr}/#token=")), "{url}");
    let token = url.trim().rsplit('=').next().unwrap().to_string();
    assert!(token.len() >= 32, "{token}");
    let out = aurad(root)
        .args(["dashboard", "--print-token"])
        .output()
        .unwrap();
    assert_eq!(text(&out.stdout).trim(), token);
    // What the daemon logged never shows it.
    assert!(!serve.log().contains(&token), "{}", serve.log());
}

#[test]
fn a_short_token_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "agents/a.yaml", "model: test\nprompt: hi\n");
    let out = aurad(dir.path())
        .env("AURAD_TOKEN", "x")
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{}", support::serve::free_port()),
        ])
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("AURAD_TOKEN is 1 character(s) long, which can be guessed"),
        "{stderr}"
    );
}
