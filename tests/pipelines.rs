//! Pipelines (issue #16, section 3), with the real binary: a pipeline
//! killed with SIGKILL mid-way resumes after `aurad serve` starts again
//! without re-running finished steps (re-runs are observable: each tool
//! step appends a line to a file), independent steps overlap, `when:`,
//! `retry:`, `timeout:`, a failing step names itself, and load errors are
//! located.

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
use std::time::Duration;

use aurad::store::Store;
use aurad::types::StepState;
use serde_json::Value;
use support::serve::{Serve, aurad, free_port, http_get, poll};

fn write(root: &Path, file: &str, text: &str) {
    let path = root.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A project listening on a free port; no provider needed (tool, template
/// and `test`-model steps only).
fn project() -> (tempfile::TempDir, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    write(dir.path(), "aurad.yaml", &format!("listen: {addr}\n"));
    (dir, addr)
}

/// POSTs a run of `agent`; the run id when accepted.
fn start_run(addr: SocketAddr, agent: &str) -> Option<String> {
    use std::io::{Read, Write};
    let body = serde_json::json!({ "input": "go" }).to_string();
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "POST /v1/agents/{agent}/runs HTTP/1.1\r\nHost: {addr}\r\n{}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        support::serve::authorization(addr),
        body.len()
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let json = response.split_once("\r\n\r\n")?.1;
    let value: Value = serde_json::from_str(json).ok()?;
    value["id"].as_str().map(str::to_string)
}

fn run_state(addr: SocketAddr, id: &str) -> Option<Value> {
    let (status, body) = http_get(addr, &format!("/v1/runs/{id}"))?;
    (status == 200).then(|| serde_json::from_str(&body).ok())?
}

fn lines(root: &Path, file: &str) -> Vec<String> {
    std::fs::read_to_string(root.join(file))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// How many `for_each` items of step `read` of run `id` are stored
/// succeeded (read while the daemon writes: WAL).
fn items_done(root: &Path, id: &str) -> i64 {
    let Ok(conn) = rusqlite::Connection::open(root.join("aurad.db")) else {
        return 0;
    };
    conn.query_row(
        "SELECT COUNT(*) FROM pipeline_steps WHERE run_id = ?1 AND step = 'read'
         AND item >= 0 AND state = 'succeeded'",
        [id],
        |row| row.get(0),
    )
    .unwrap_or(0)
}

fn count(lines: &[String], line: &str) -> usize {
    lines.iter().filter(|l| *l == line).count()
}

/// Step 1 lists five items, step 2 runs, step 3 fans out over them (items
/// 2..4 wait for a gate file), step 4 joins them. Killed with SIGKILL once
/// steps 1-2 and items 0-1 are done and items 2-4 are running, then
/// started again with the gate open: the run (same id) completes, steps
/// 1-2 and items 0-1 ran once, items 2-4 ran again (attempt 2).
#[test]
fn a_pipeline_killed_mid_way_resumes_without_rerunning_finished_steps() {
    let (dir, addr) = project();
    let root = dir.path();
    write(
        root,
        "agents/digest.yaml",
        r#"description: four steps, a fan-out of five
tools: [bash]
steps:
  - id: list
    tool: bash
    args: { command: "echo list >> trace.log; printf 'a\nb\nc\nd\ne\n'" }
  - id: prepare
    tool: bash
    args: { command: "echo prepare >> trace.log; echo ready" }
  - id: read
    for_each: "{{ steps.list.output }}"
    concurrency: 5
    tool: bash
    args:
      command: "echo 'start {{ item }}' >> trace.log; if [ {{ index }} -ge 2 ]; then while [ ! -f gate ]; do sleep 0.02; done; fi; echo 'end {{ item }}' >> trace.log; echo 'read {{ item }}'"
  - id: write
    template: "{{ steps.prepare.output | trim }}: {{ steps.read.outputs | map('trim') | join(', ') }}"
"#,
    );
    let mut serve = Serve::start(root, addr, &[]);
    let id = poll(
        "the run to be accepted",
        || serve.log(),
        || start_run(addr, "digest"),
    );
    poll(
        "items 0-1 done and items 2-4 started",
        || format!("{:?}\n{}", lines(root, "trace.log"), serve.log()),
        || {
            let trace = lines(root, "trace.log");
            let started = ["start c", "start d", "start e"]
                .iter()
                .all(|l| trace.iter().any(|t| t == l));
            (started && items_done(root, &id) == 2).then_some(())
        },
    );
    serve.kill_now();
    let before = lines(root, "trace.log");
    assert_eq!(count(&before, "list"), 1, "{before:?}");
    assert_eq!(count(&before, "prepare"), 1, "{before:?}");
    assert!(!before.iter().any(|l| l == "end c"), "{before:?}");

    write(root, "gate", "open");
    let serve = Serve::start(root, addr, &[]);
    let run = poll(
        "the resumed run to end",
        || serve.log(),
        || run_state(addr, &id).filter(|r| r["state"] != "running"),
    );
    assert_eq!(run["state"], "succeeded", "{run}\n{}", serve.log());
    assert_eq!(
        run["output"],
        "ready: read a, read b, read c, read d, read e"
    );
    let after = lines(root, "trace.log");
    assert_eq!(count(&after, "list"), 1, "step 1 ran again: {after:?}");
    assert_eq!(count(&after, "prepare"), 1, "step 2 ran again: {after:?}");
    for item in ["a", "b"] {
        assert_eq!(count(&after, &format!("start {item}")), 1, "{after:?}");
    }
    for item in ["c", "d", "e"] {
        // (The first attempt's process outlives the SIGKILLed daemon and
        // ends too once the gate opens: tool processes are not tied to it.)
        assert_eq!(count(&after, &format!("start {item}")), 2, "{after:?}");
    }
    drop(serve);

    // The stored steps: each done once, items 2-4 on their second attempt.
    let store = Store::open(&root.join("aurad.db")).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let steps = runtime.block_on(store.steps_of(&id)).unwrap();
    assert!(
        steps.iter().all(|s| s.state == StepState::Succeeded),
        "{steps:#?}"
    );
    let attempts = |step: &str, item: Option<usize>| {
        steps
            .iter()
            .find(|s| s.step == step && s.item == item)
            .map(|s| s.attempts)
    };
    assert_eq!(attempts("list", None), Some(1));
    assert_eq!(attempts("prepare", None), Some(1));
    assert_eq!(attempts("read", Some(0)), Some(1));
    assert_eq!(attempts("read", Some(3)), Some(2));
    assert_eq!(attempts("write", None), Some(1));
    store.close().unwrap();

    // `aurad logs` shows the step tree.
    let out = aurad(root).args(["logs", &id]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for line in ["list", "prepare", "read", "read[4]", "write"] {
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{line} "))),
            "no step {line} in:\n{text}"
        );
    }
}

/// `aurad run NAME --json`: the events, parsed.
fn run_json(root: &Path, agent: &str) -> (bool, Vec<Value>) {
    let out = aurad(root).args(["run", agent, "--json"]).output().unwrap();
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (out.status.success(), events)
}

fn finished<'a>(events: &'a [Value], step: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["type"] == "step_finished" && e["step"] == step)
        .collect()
}

#[test]
fn independent_steps_overlap_and_a_false_when_skips() {
    let (dir, _) = project();
    let root = dir.path();
    write(root, "agents/helper.yaml", "model: test\nprompt: hi\n");
    // Each of `left` and `right` waits for the other to have started: they
    // finish only if they run at the same time.
    write(
        root,
        "agents/fan.yaml",
        r#"tools: [bash]
steps:
  - id: left
    needs: []
    tool: bash
    args: { command: "touch left; for i in $(seq 500); do [ -f right ] && echo L && exit 0; sleep 0.02; done; exit 1" }
  - id: right
    needs: []
    tool: bash
    args: { command: "touch right; for i in $(seq 500); do [ -f left ] && echo R && exit 0; sleep 0.02; done; exit 1" }
  - id: never
    needs: [left]
    when: "steps.left.state == 'failed'"
    template: "not shown"
  - id: ask
    needs: [left, right]
    agent: helper
    input: "{{ steps.left.output | trim }}{{ steps.right.output | trim }}"
"#,
    );
    let (ok, events) = run_json(root, "fan");
    assert!(ok, "{events:#?}");
    assert_eq!(finished(&events, "left")[0]["state"], "succeeded");
    assert_eq!(finished(&events, "right")[0]["state"], "succeeded");
    assert_eq!(finished(&events, "never")[0]["state"], "skipped");
    let ask = finished(&events, "ask")[0];
    assert_eq!(ask["state"], "succeeded");
    assert!(ask["output"].as_str().unwrap().contains("LR"), "{ask}");
    assert!(ask["child_run_id"].is_string(), "{ask}");
    let last = events.last().unwrap();
    assert_eq!(last["type"], "finished");
    assert_eq!(last["state"], "succeeded");
    assert_eq!(
        last["output"], ask["output"],
        "the leaf's output is the run's"
    );
}

#[test]
fn a_retried_step_succeeds_on_its_second_attempt() {
    let (dir, _) = project();
    let root = dir.path();
    write(
        root,
        "agents/flaky.yaml",
        r#"tools: [bash]
steps:
  - id: flaky
    tool: bash
    args: { command: "if [ -f tried ]; then echo fine; else touch tried; exit 1; fi" }
    retry: { attempts: 3, backoff: 10ms }
"#,
    );
    let (ok, events) = run_json(root, "flaky");
    assert!(ok, "{events:#?}");
    let ends = finished(&events, "flaky");
    assert_eq!(ends.len(), 2, "{ends:#?}");
    assert_eq!(ends[0]["retrying"], true);
    assert_eq!(ends[0]["attempt"], 1);
    assert_eq!(ends[1]["state"], "succeeded");
    assert_eq!(ends[1]["attempt"], 2);
}

#[test]
fn a_timed_out_step_fails_the_run_naming_it_and_later_steps_are_skipped() {
    let (dir, _) = project();
    let root = dir.path();
    write(
        root,
        "agents/slow.yaml",
        r#"tools: [bash]
steps:
  - id: first
    template: "ok"
  - id: slow
    tool: bash
    args: { command: "sleep 20" }
    timeout: 300ms
  - id: after
    template: "never"
"#,
    );
    let started = std::time::Instant::now();
    let (ok, events) = run_json(root, "slow");
    assert!(!ok);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the timeout did not cut the step"
    );
    let slow = finished(&events, "slow")[0];
    assert_eq!(slow["state"], "failed");
    assert!(
        slow["error"]
            .as_str()
            .unwrap()
            .contains("timed out after 300ms"),
        "{slow}"
    );
    assert_eq!(finished(&events, "after")[0]["state"], "skipped");
    let last = events.last().unwrap();
    assert_eq!(last["state"], "failed");
    assert!(
        last["reason"]
            .as_str()
            .unwrap()
            .starts_with("step `slow` failed: timed out"),
        "{last}"
    );
}

#[test]
fn load_errors_are_located() {
    let (dir, _) = project();
    let root = dir.path();
    write(root, "agents/helper.yaml", "model: test\nprompt: hi\n");
    write(
        root,
        "agents/bad.yaml",
        "prompt: hi\nsteps:\n  - id: a\n    agent: nobody\n  - id: b\n    tool: bash\n    args: { command: ls }\n  - id: c\n    needs: [zz]\n    template: x\n",
    );
    write(
        root,
        "agents/loop.yaml",
        "steps:\n  - id: a\n    needs: [b]\n    template: x\n  - id: b\n    template: y\n",
    );
    write(
        root,
        "agents/refs.yaml",
        "steps:\n  - id: a\n    agent: nobody\n  - id: b\n    tool: bash\n    args: { command: ls }\n",
    );
    let out = aurad(root).arg("validate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    for want in [
        "agents/bad.yaml:1:9: `prompt` does not apply to a pipeline",
        "agents/bad.yaml:9:12: step `c`: needs unknown step \"zz\"",
        "agents/loop.yaml:3:12: steps form a cycle through `needs`: a -> b -> a",
        "agents/refs.yaml:3:12: step `a`: no agent named \"nobody\"",
        "agents/refs.yaml:5:11: step `b`: tool \"bash\" is not allowed",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}
