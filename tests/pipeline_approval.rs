//! `approve: true` on a pipeline step (issue #16, section 4), with the real
//! `aurad serve` binary and the real `aurad approve` CLI: the pipeline run
//! waits (`waiting_approval`) before the gated step runs, an approval lets
//! it run, a denial through the API fails the step and the run naming
//! both, nobody deciding denies it at `approval_timeout`, and a run waiting
//! at the step survives a SIGTERM and SIGKILLs with the same request, a decision taken
//! while no daemon runs applying at the restart.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::net::SocketAddr;
use std::path::Path;

use rusqlite::OptionalExtension;
use serde_json::{Value, json};
use support::serve::{
    DEADLINE, Serve, aurad, events, free_port, http_post_json, of_type, poll, run_of, wait_state,
    webhook_server,
};

/// Step 2 (`deploy`, gated) leaves a marker file, so a test sees whether
/// it ran.
fn pipeline(extra: &str) -> String {
    format!(
        r#"description: build, deploy after a person says yes, report
tools: [bash]
{extra}steps:
  - id: build
    tool: bash
    args: {{ command: "echo v42" }}
  - id: deploy
    approve: true
    tool: bash
    args: {{ command: "echo {{{{ steps.build.output | trim }}}} > marker.txt; echo deployed" }}
  - id: report
    template: "report: {{{{ steps.deploy.output | trim }}}}"
"#
    )
}

fn project(extra: &str) -> (tempfile::TempDir, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    std::fs::write(dir.path().join("aurad.yaml"), format!("listen: {addr}\n")).unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(dir.path().join("agents/release.yaml"), pipeline(extra)).unwrap();
    (dir, addr)
}

fn start_run(serve: &Serve) -> String {
    let (status, body) = http_post_json(
        serve.addr,
        "/v1/agents/release/runs",
        &json!({ "input": "go" }).to_string(),
    )
    .expect("the API answers");
    assert_eq!(status, 202, "{body}\n{}", serve.log());
    let run: Value = serde_json::from_str(&body).unwrap();
    run["id"].as_str().expect("run id").to_string()
}

/// The stored state and error of step `step` of run `id`, if it has a row.
fn step_row(root: &Path, id: &str, step: &str) -> Option<(String, Option<String>)> {
    let conn = rusqlite::Connection::open(root.join("aurad.db")).unwrap();
    conn.query_row(
        "SELECT state, error FROM pipeline_steps WHERE run_id = ?1 AND step = ?2 AND item = -1",
        [id, step],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .optional()
    .unwrap()
}

fn step_state(root: &Path, id: &str, step: &str) -> String {
    step_row(root, id, step).expect("a stored step").0
}

fn approve(root: &Path, args: &[&str]) -> (bool, String) {
    let out = aurad(root).arg("approve").args(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// A project with `extra` in the pipeline file, its daemon, and a run of
/// the pipeline started and waiting at step `deploy`.
fn waiting_run(extra: &str) -> (tempfile::TempDir, Serve, String) {
    let (dir, addr) = project(extra);
    let serve = Serve::start(dir.path(), addr, &[]);
    let id = start_run(&serve);
    wait_state(&serve, &id, "waiting_approval");
    (dir, serve, id)
}

#[test]
fn a_gated_step_waits_and_runs_once_approved_by_the_cli() {
    let (dir, serve, id) = waiting_run("");
    let root = dir.path();
    assert!(!root.join("marker.txt").exists(), "the step ran unapproved");
    // `aurad approve` lists it with what will run, rendered.
    let (ok, listed) = approve(root, &[]);
    assert!(ok, "{listed}");
    // Listed by its short id, the random end of the id.
    assert!(listed.contains(&id[id.len() - 8..]), "{listed}");
    assert!(listed.contains("step deploy: tool bash"), "{listed}");
    assert!(listed.contains("echo v42 > marker.txt"), "{listed}");
    assert_eq!(step_row(root, &id, "deploy"), None);

    let (ok, out) = approve(root, &[&id, "--call", "deploy"]);
    assert!(ok, "{out}");
    let run = wait_state(&serve, &id, "succeeded");
    assert_eq!(run["output"], "report: deployed");
    assert_eq!(
        std::fs::read_to_string(root.join("marker.txt")).unwrap(),
        "v42\n"
    );
    let events = events(root, &id);
    let requested = of_type(&events, "approval_requested");
    assert_eq!(requested.len(), 1, "{events:?}");
    assert_eq!(requested[0]["id"], "deploy");
    let decided = of_type(&events, "approval_decided");
    assert_eq!(decided.len(), 1, "{events:?}");
    assert_eq!(decided[0]["approved"], true);
    assert_eq!(decided[0]["by"], "cli");
}

#[test]
fn a_denial_through_the_api_fails_the_step_and_the_run_naming_both() {
    // The time spent waiting does not count against limits.timeout.
    let (dir, serve, id) = waiting_run("limits: { timeout: 2s }\n");
    let (root, addr) = (dir.path(), serve.addr);
    let waited = std::time::Instant::now();
    poll("the pipeline's own timeout to pass", String::new, || {
        (waited.elapsed() > std::time::Duration::from_millis(2500)).then_some(())
    });
    assert_eq!(run_of(&serve, &id).unwrap()["state"], "waiting_approval");
    let (status, body) = http_post_json(
        addr,
        &format!("/v1/runs/{id}/approval"),
        &json!({ "call_id": "deploy", "approve": false, "reason": "not on a Friday" }).to_string(),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}\n{}", serve.log());
    let run = wait_state(&serve, &id, "failed");
    assert_eq!(
        run["error"], "step `deploy` failed: denied by a person: not on a Friday",
        "{run}"
    );
    assert!(!root.join("marker.txt").exists());
    let (state, error) = step_row(root, &id, "deploy").unwrap();
    assert_eq!(state, "failed");
    assert_eq!(
        error.as_deref(),
        Some("denied by a person: not on a Friday")
    );
    assert_eq!(step_state(root, &id, "report"), "skipped");
    let events = events(root, &id);
    let decided = of_type(&events, "approval_decided");
    assert_eq!(decided.len(), 1, "{events:?}");
    assert_eq!(decided[0]["by"], "api");
    assert_eq!(decided[0]["approved"], false);
}

#[test]
fn nobody_deciding_denies_the_step_at_the_approval_timeout_and_notify_is_told() {
    let (url, received) = webhook_server();
    let (dir, addr) = project(&format!(
        "approval_timeout: 1s\nnotify: {{ url: \"{url}\", on: [approval] }}\n"
    ));
    let root = dir.path();
    let serve = Serve::start(root, addr, &[]);
    let id = start_run(&serve);
    let run = wait_state(&serve, &id, "failed");
    assert_eq!(
        run["error"], "step `deploy` failed: denied: approval timed out after 1s",
        "{run}"
    );
    let message = received
        .recv_timeout(DEADLINE)
        .expect("the webhook is told");
    assert_eq!(message["event"], "approval_requested", "{message}");
    assert_eq!(message["run_id"], id.as_str());
    assert_eq!(message["tool"], "step deploy: tool bash");
    assert_eq!(
        message["decide"]["approve"],
        format!("aurad approve {id} --call deploy")
    );
    assert!(!root.join("marker.txt").exists());
    assert_eq!(step_state(root, &id, "report"), "skipped");
}

#[test]
fn a_pipeline_waiting_at_a_step_survives_a_sigkill_with_the_same_request() {
    let (dir, mut serve, id) = waiting_run("");
    let (root, addr) = (dir.path(), serve.addr);
    let first = poll("the approval_requested event", String::new, || {
        of_type(&events(root, &id), "approval_requested")
            .first()
            .map(|e| e["timeout_at"].clone())
    });
    // A graceful stop leaves it waiting too (not cancelled, not failed).
    serve.signal(libc::SIGTERM);
    assert!(serve.wait_exit().success(), "{}", serve.log());
    let mut serve = Serve::start(root, addr, &[]);
    wait_state(&serve, &id, "waiting_approval");
    serve.kill_now();
    let serve = Serve::start(root, addr, &[]);
    // Taken over: waiting on for the same request, not asked again.
    poll(
        "the restarted daemon to take the run over",
        || serve.log(),
        || serve.log().contains(&id).then_some(()),
    );
    wait_state(&serve, &id, "waiting_approval");
    assert!(!root.join("marker.txt").exists());
    let mut serve = serve;
    serve.kill_now();
    // Decided with no daemon up: the decision waits in the store and
    // applies when the pipeline is resumed.
    let (ok, out) = approve(root, &[&id, "--call", "deploy"]);
    assert!(ok, "{out}");
    let serve = Serve::start(root, addr, &[]);
    let run = wait_state(&serve, &id, "succeeded");
    assert_eq!(run["output"], "report: deployed");
    assert!(root.join("marker.txt").exists());
    let events = events(root, &id);
    assert_eq!(of_type(&events, "started").len(), 1, "{events:?}");
    let requested = of_type(&events, "approval_requested");
    assert_eq!(requested.len(), 1, "{events:?}");
    assert_eq!(requested[0]["timeout_at"], first);
    assert_eq!(of_type(&events, "approval_decided").len(), 1, "{events:?}");
    assert_eq!(step_state(root, &id, "build"), "succeeded");
}
