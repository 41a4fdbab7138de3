//! Human approval (`approve:`, `approval_timeout:`, `notify:`) end to end,
//! on the real `aurad serve` binary and the real `aurad approve` CLI, with
//! the scripted mock model: a gated `bash` call waits (holding no slot),
//! is approved, denied or timed out, also across a SIGKILL and restart, and
//! `notify:` reaches a real HTTP server on 127.0.0.1.

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
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::mock_llm::{MockLlm, Reply};
use support::serve::{
    DEADLINE, Serve, aurad, events, http_get, http_post, http_post_json, of_type, poll, run_of,
    wait_state, webhook_server, write_settings,
};

/// The gated call: it leaves a marker file, so a test sees whether it ran.
const CALL: &str = r#"{"command":"echo ran > marker.txt && echo ran"}"#;

fn gated(extra: &str) -> String {
    format!("model: mock/m\nprompt: hi\ntools: [bash]\napprove: [bash, \"github_*\"]\n{extra}")
}

/// A mock model that asks for the gated call when the input says `gated`,
/// fails when it says `fail`, answers `quick` otherwise, and echoes a tool
/// result back as its final answer.
fn mock() -> MockLlm {
    let mock = MockLlm::start_in_thread();
    mock.set_responder(|request| {
        let messages = request.messages();
        let last = messages.last().cloned().unwrap_or_default();
        let first_user = messages
            .iter()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string();
        if last["role"] == "tool" && !first_user.contains("mixed") {
            Reply::Text(format!("done: {}", last["content"].as_str().unwrap_or("")))
        } else if first_user.contains("fail") {
            Reply::error(400, "the mock refuses this request")
        } else if first_user.contains("mixed") && last["role"] != "tool" {
            Reply::ToolCalls(vec![
                ("call_1".into(), "bash".into(), CALL.into()),
                (
                    "call_2".into(),
                    "calculator".into(),
                    r#"{"expression":"6*7"}"#.into(),
                ),
            ])
        } else if first_user.contains("twice") && last["role"] != "tool" {
            Reply::ToolCalls(vec![
                (
                    "call_1".into(),
                    "bash".into(),
                    r#"{"command":"echo one >> calls.txt"}"#.into(),
                ),
                (
                    "call_2".into(),
                    "bash".into(),
                    r#"{"command":"echo two >> calls.txt"}"#.into(),
                ),
            ])
        } else if first_user.contains("gated") {
            Reply::tool_call("call_1", "bash", CALL)
        } else {
            Reply::Text("quick".into())
        }
    });
    mock
}

/// A project with `agents` (name, YAML) and `settings` added to its
/// aurad.yaml; returns it and the daemon's address.
fn project(
    mock: &MockLlm,
    agents: &[(&str, &str)],
    settings: &str,
) -> (tempfile::TempDir, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    let addr = write_settings(dir.path(), mock);
    let path = dir.path().join("aurad.yaml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(settings);
    std::fs::write(path, text).unwrap();
    for (name, yaml) in agents {
        std::fs::write(dir.path().join(format!("agents/{name}.yaml")), yaml).unwrap();
    }
    (dir, addr)
}

fn start_run(serve: &Serve, agent: &str, input: &str) -> String {
    let (status, body) = http_post_json(
        serve.addr,
        &format!("/v1/agents/{agent}/runs"),
        &json!({ "input": input }).to_string(),
    )
    .expect("the API answers");
    assert_eq!(status, 202, "{body}\n{}", serve.log());
    let run: Value = serde_json::from_str(&body).unwrap();
    run["id"].as_str().expect("run id").to_string()
}

/// `aurad approve ARGS` on the project: exit code, stdout, stderr.
fn approve(root: &Path, args: &[&str]) -> (i32, String, String) {
    let out = aurad(root).arg("approve").args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The tool message the model got for the gated call, from the mock's
/// last request.
fn tool_result_seen(mock: &MockLlm) -> String {
    mock.requests()
        .iter()
        .rev()
        .flat_map(|r| r.messages().clone())
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .expect("the model got a tool result")
}

#[test]
fn a_gated_call_waits_without_its_slot_and_runs_once_approved_by_the_cli() {
    let mock = mock();
    let (dir, addr) = project(
        &mock,
        &[
            ("gated", &gated("")),
            ("quick", "model: mock/m\nprompt: hi\n"),
        ],
        "max_concurrent_runs: 1\n",
    );
    let root = dir.path();
    let serve = Serve::start(root, addr, &[]);
    let id = start_run(&serve, "gated", "gated: clean up");
    wait_state(&serve, &id, "waiting_approval");
    assert!(
        !root.join("marker.txt").exists(),
        "the call ran before approval"
    );
    // The exact call is stored and listed.
    // Listed by its short id (the id's end, which tells runs apart).
    let (code, out, err) = approve(root, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&id[id.len() - 8..]) && out.contains("bash") && out.contains("marker.txt"),
        "{out}"
    );
    // The slot is free: another run runs to its end meanwhile.
    let quick = start_run(&serve, "quick", "hello");
    wait_state(&serve, &quick, "succeeded");
    let metrics = http_get(addr, "/metrics").unwrap().1;
    assert!(
        metrics.contains("aurad_runs_waiting_approval 1"),
        "{metrics}"
    );

    let (code, out, err) = approve(root, &[&id[..13], "--call", "call_1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("approved: bash"), "{out}");
    let run = wait_state(&serve, &id, "succeeded");
    assert_eq!(run["output"], "done: ran\n", "{run}");
    assert!(root.join("marker.txt").exists());
    // Decided once: a second decision is refused.
    let (code, _, err) = approve(root, &[&id, "--call", "call_1", "--deny", "too late"]);
    assert_ne!(code, 0);
    assert!(err.contains("not waiting for approval"), "{err}");
    let events = events(root, &id);
    let requested = of_type(&events, "approval_requested");
    assert_eq!(requested.len(), 1, "{events:?}");
    assert_eq!(requested[0]["arguments"], CALL);
    let decided = of_type(&events, "approval_decided");
    assert_eq!(decided[0]["approved"], true);
    assert_eq!(decided[0]["by"], "cli");
    let seqs: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(seqs.last(), Some(&"finished"), "{seqs:?}");
}

#[test]
fn a_denial_through_the_api_reaches_the_model_and_the_run_goes_on() {
    let mock = mock();
    // The time spent waiting does not count against limits.timeout.
    let (dir, addr) = project(&mock, &[("gated", &gated("limits: { timeout: 1s }\n"))], "");
    let root = dir.path();
    let serve = Serve::start(root, addr, &[]);
    let started = Instant::now();
    let id = start_run(&serve, "gated", "gated: deploy");
    wait_state(&serve, &id, "waiting_approval");
    let path = format!("/v1/runs/{id}/approval");
    let body =
        json!({ "call_id": "call_1", "approve": false, "reason": "not on a Friday" }).to_string();
    // The guard: a web page cannot decide.
    let cross_site = http_post(
        addr,
        &path,
        &[
            ("Content-Type", "application/json"),
            ("Origin", "http://evil.example"),
        ],
        &body,
    )
    .unwrap();
    assert_eq!(cross_site.0, 403, "{cross_site:?}");
    let not_json = http_post(addr, &path, &[("Content-Type", "text/plain")], &body).unwrap();
    assert_eq!(not_json.0, 415, "{not_json:?}");
    assert_eq!(run_of(&serve, &id).unwrap()["state"], "waiting_approval");

    poll("the run's own timeout to pass", String::new, || {
        (started.elapsed() > Duration::from_millis(1500)).then_some(())
    });
    assert_eq!(run_of(&serve, &id).unwrap()["state"], "waiting_approval");
    let (status, answer) = http_post_json(addr, &path, &body).unwrap();
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["approval"]["decision"]["by"], "api");
    let again = http_post_json(addr, &path, &body).unwrap();
    assert_eq!(again.0, 409, "{again:?}");
    let run = wait_state(&serve, &id, "succeeded");
    assert_eq!(
        tool_result_seen(&mock),
        "denied by a person: not on a Friday"
    );
    assert_eq!(run["output"], "done: denied by a person: not on a Friday");
    assert!(!root.join("marker.txt").exists(), "a denied call ran");
    let unknown = http_post_json(addr, "/v1/runs/0000000000000000/approval", &body).unwrap();
    assert_eq!(unknown.0, 404, "{unknown:?}");
}

#[test]
fn nobody_deciding_denies_the_call_at_the_timeout() {
    let mock = mock();
    let (dir, addr) = project(&mock, &[("gated", &gated("approval_timeout: 1s\n"))], "");
    let root = dir.path();
    let serve = Serve::start(root, addr, &[]);
    let id = start_run(&serve, "gated", "gated: wait");
    let run = wait_state(&serve, &id, "succeeded");
    assert_eq!(
        tool_result_seen(&mock),
        "denied: approval timed out after 1s"
    );
    assert_eq!(run["output"], "done: denied: approval timed out after 1s");
    assert!(!root.join("marker.txt").exists());
    let events = events(root, &id);
    assert_eq!(of_type(&events, "approval_decided")[0]["by"], "timeout");
}

#[test]
fn a_waiting_run_survives_a_sigkill_and_completes_when_approved_after_restart() {
    let mock = mock();
    let (dir, addr) = project(&mock, &[("gated", &gated(""))], "");
    let root = dir.path();
    let mut serve = Serve::start(root, addr, &[]);
    let id = start_run(&serve, "gated", "gated: survive");
    wait_state(&serve, &id, "waiting_approval");
    // A graceful stop leaves it waiting too (not cancelled).
    serve.signal(libc::SIGTERM);
    assert!(serve.wait_exit().success(), "{}", serve.log());
    let mut serve = Serve::start(root, addr, &[]);
    wait_state(&serve, &id, "waiting_approval");
    serve.kill_now();
    // The CLI works with no daemon: the decision waits in the store.
    let listed = approve(root, &[]);
    assert!(listed.1.contains(&id[id.len() - 8..]), "{listed:?}");
    let serve = Serve::start(root, addr, &[]);
    wait_state(&serve, &id, "waiting_approval");
    let (status, body) = http_post_json(
        addr,
        &format!("/v1/runs/{id}/approval"),
        &json!({ "call_id": "call_1", "approve": true }).to_string(),
    )
    .unwrap();
    assert_eq!(status, 200, "{body}\n{}", serve.log());
    let run = wait_state(&serve, &id, "succeeded");
    assert_eq!(run["output"], "done: ran\n");
    assert!(root.join("marker.txt").exists());
    let events = events(root, &id);
    assert_eq!(of_type(&events, "started").len(), 1, "{events:?}");
    assert_eq!(
        of_type(&events, "approval_requested").len(),
        1,
        "{events:?}"
    );
    assert_eq!(of_type(&events, "tool_result").len(), 1, "{events:?}");
}

#[test]
fn the_approval_timeout_counts_from_the_request_across_a_restart() {
    let mock = mock();
    let (dir, addr) = project(&mock, &[("gated", &gated("approval_timeout: 4s\n"))], "");
    let root = dir.path();
    let mut serve = Serve::start(root, addr, &[]);
    let id = start_run(&serve, "gated", "gated: slow");
    wait_state(&serve, &id, "waiting_approval");
    let requested = poll("the approval_requested event", String::new, || {
        of_type(&events(root, &id), "approval_requested")
            .first()
            .map(|e| e["timeout_at"].as_str().unwrap().to_string())
    });
    serve.kill_now();
    let timeout_at = chrono::DateTime::parse_from_rfc3339(&requested).unwrap();
    // The daemon is down past the timeout.
    poll("the approval timeout to pass", String::new, || {
        (chrono::Utc::now() > timeout_at).then_some(())
    });
    let restarted = Instant::now();
    let serve = Serve::start(root, addr, &[]);
    wait_state(&serve, &id, "succeeded");
    assert!(
        restarted.elapsed() < Duration::from_secs(4),
        "the timeout started again at the restart: {:?}",
        restarted.elapsed()
    );
    assert_eq!(
        tool_result_seen(&mock),
        "denied: approval timed out after 4s"
    );
    assert!(!root.join("marker.txt").exists());
}

#[test]
fn notify_tells_a_webhook_of_approvals_and_failures() {
    let mock = mock();
    let (url, received) = webhook_server();
    let notify = "notify: \"${OPS_WEBHOOK_URL}\"\n";
    let (dir, addr) = project(
        &mock,
        &[
            ("gated", &gated(notify)),
            ("failing", &format!("model: mock/m\nprompt: hi\n{notify}")),
            (
                "spender",
                &format!(
                    "model: mock/m\nprompt: hi\ntools: [calculator]\nlimits: {{ max_tokens_per_run: 10 }}\n{notify}"
                ),
            ),
        ],
        "",
    );
    let root = dir.path();
    let serve = Serve::start_with_env(root, addr, &[], &[("OPS_WEBHOOK_URL", &url)]);
    let id = start_run(&serve, "gated", "gated: notify me");
    let message = received.recv_timeout(DEADLINE).expect("an approval notice");
    assert_eq!(message["event"], "approval_requested", "{message}");
    assert_eq!(message["agent"], "gated");
    assert_eq!(message["run_id"], id.as_str());
    assert_eq!(message["state"], "waiting_approval");
    assert_eq!(message["tool"], "bash");
    assert_eq!(message["arguments"], CALL);
    assert_eq!(
        message["decide"]["approve"],
        format!("aurad approve {id} --call call_1")
    );
    assert_eq!(message["decide"]["call_id"], "call_1");
    assert_eq!(
        message["decide"]["api"],
        format!("POST /v1/runs/{id}/approval")
    );

    let failed = start_run(&serve, "failing", "fail now");
    wait_state(&serve, &failed, "failed");
    let message = received.recv_timeout(DEADLINE).expect("a failure notice");
    assert_eq!(message["event"], "failed", "{message}");
    assert_eq!(message["run_id"], failed.as_str());
    assert!(
        message["reason"]
            .as_str()
            .unwrap()
            .contains("the mock refuses"),
        "{message}"
    );
    let spent = start_run(&serve, "spender", "mixed: spend");
    wait_state(&serve, &spent, "budget_exceeded");
    let message = received.recv_timeout(DEADLINE).expect("a budget notice");
    assert_eq!(message["event"], "budget_exceeded", "{message}");
    assert_eq!(message["run_id"], spent.as_str());
    assert_eq!(message["state"], "budget_exceeded");
    // The URL is a secret: it never reaches the stored events.
    for run in [&id, &failed, &spent] {
        let text = serde_json::to_string(&events(root, run)).unwrap();
        assert!(!text.contains(&url), "{text}");
    }
}

#[test]
fn validate_reports_bad_approval_fields_with_their_place() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("agents/a.yaml"),
        "model: test\nprompt: hi\napprove: bash\napproval_timeout: soon\nnotify: { url: \"ftp://x\", on: [approval, paged] }\n",
    )
    .unwrap();
    let out = aurad(dir.path()).arg("validate").output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("agents/a.yaml:3:10: `approve` is \"bash\""),
        "{text}"
    );
    assert!(
        text.contains("agents/a.yaml:4:19: approval_timeout: "),
        "{text}"
    );
    assert!(
        text.contains("agents/a.yaml:5:17: notify: the URL is not an http"),
        "{text}"
    );
    assert!(!text.contains("ftp://x"), "the URL may be a secret: {text}");
    assert!(
        text.contains("notify.on[1]: \"paged\" is not one of"),
        "{text}"
    );
}

#[test]
fn calls_of_the_same_turn_that_need_no_approval_run_and_results_keep_call_order() {
    let mock = mock();
    let agent = "model: mock/m\nprompt: hi\ntools: [bash, calculator]\napprove: [bash]\n";
    let (dir, addr) = project(&mock, &[("mixed", agent)], "");
    let root = dir.path();
    let serve = Serve::start(root, addr, &[]);
    let id = start_run(&serve, "mixed", "mixed: both");
    wait_state(&serve, &id, "waiting_approval");
    let (code, out, err) = approve(root, &[&id, "--call", "call_1", "--deny", "no shell"]);
    assert_eq!(code, 0, "{out}{err}");
    wait_state(&serve, &id, "succeeded");
    let last = mock.requests().last().cloned().expect("a model request");
    let tools: Vec<(String, String)> = last
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        tools,
        [
            (
                "call_1".to_string(),
                "denied by a person: no shell".to_string()
            ),
            ("call_2".to_string(), "42".to_string()),
        ],
        "{:?}",
        last.messages()
    );
    let events = events(root, &id);
    let requested = of_type(&events, "approval_requested");
    assert_eq!(requested.len(), 1, "only bash waits: {events:?}");
    assert_eq!(requested[0]["name"], "bash");
}

/// A decision names the call it was shown. Two gated calls in one turn: the
/// first approved, a second click on it (or on the dashboard's stale page)
/// must not approve the next call, which nobody was shown; nor may a
/// decision with no call named, or `aurad approve RUN` from a script.
#[test]
fn a_decision_reaches_only_the_call_it_names() {
    let mock = mock();
    let (dir, addr) = project(&mock, &[("gated", &gated(""))], "");
    let root = dir.path();
    let serve = Serve::start(root, addr, &[]);
    let id = start_run(&serve, "gated", "gated twice");
    wait_state(&serve, &id, "waiting_approval");
    let path = format!("/v1/runs/{id}/approval");
    let decide = |call: &str, approve: bool| {
        http_post_json(
            addr,
            &path,
            &json!({ "call_id": call, "approve": approve }).to_string(),
        )
        .unwrap()
    };
    let waiting = |call: &str| {
        poll(
            &format!("the run to wait on {call}"),
            || serve.log(),
            || {
                let (status, body) = http_get(addr, "/v1/approvals")?;
                let listed: Value = serde_json::from_str(&body).ok()?;
                (status == 200
                    && listed["approvals"]
                        .as_array()?
                        .iter()
                        .any(|a| a["run_id"] == id.as_str() && a["call_id"] == call))
                .then_some(listed)
            },
        )
    };
    let listed = waiting("call_1");
    assert_eq!(listed["approvals"][0]["tool"], "bash", "{listed}");
    // No call named: refused, saying what to send.
    let (status, body) = http_post_json(addr, &path, r#"{"approve": true}"#).unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("call_id"), "{body}");
    // The call shown, approved; the same click again, refused.
    let (status, body) = decide("call_1", true);
    assert_eq!(status, 200, "{body}");
    let (status, body) = decide("call_1", true);
    assert_eq!(status, 409, "{body}");
    // The run goes on to the second call, which waits: a decision for the
    // first still reaches nothing.
    waiting("call_2");
    let (status, body) = decide("call_1", true);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("waits on call call_2"), "{body}");
    let (code, _, err) = approve(root, &[&id]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "name the call you approve: aurad approve {id} --call call_2"
        )),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("calls.txt")).unwrap(),
        "one\n",
        "only the approved call ran"
    );
    let (status, body) = decide("call_2", false);
    assert_eq!(status, 200, "{body}");
    wait_state(&serve, &id, "succeeded");
    assert_eq!(
        std::fs::read_to_string(root.join("calls.txt")).unwrap(),
        "one\n"
    );
}
