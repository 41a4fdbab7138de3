//! The real `aurad serve` binary: start-up and the project lock, `aurad
//! trigger` / `runs` / `logs --follow` against it, a graceful SIGTERM, a
//! `kill -9` mid-run and the restart that records the run `interrupted`
//! (not a failure) and starts the queued one, a kill -9'd `aurad run` found
//! by the live daemon, webhook deliveries replayed at once or refused at
//! shutdown, and `aurad agents`. The model is the mock server on 127.0.0.1.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use aurad::store::{NewRun, Store};
use aurad::types::{RunEvent, RunState, Usage};
use chrono::{Timelike, Utc};
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;
use support::serve::{
    DEADLINE, KillOnDrop, Serve, aurad, free_port, poll, run, show, text, write_settings,
};

/// The run id `aurad trigger` printed (`run ID STATE`).
fn triggered(out: &Output) -> String {
    let stdout = text(&out.stdout);
    let words: Vec<&str> = stdout.split_whitespace().collect();
    match words.as_slice() {
        ["run", id, state] if ["queued", "running"].contains(state) => id.to_string(),
        _ => panic!("unexpected trigger output\n{}", show(out)),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn serve_answers_and_a_second_serve_on_the_directory_is_refused() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let addr = write_settings(dir.path(), &mock);
    let serve = Serve::start(dir.path(), addr, &[]);
    assert!(
        serve.log().contains("aurad serve is ready"),
        "{}",
        serve.log()
    );

    let second = run(dir.path(), &["serve", "--listen", "127.0.0.1:0"]);
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{}", show(&second));
    assert!(
        stderr.contains(&format!("another `aurad serve` (pid {})", serve.pid())),
        "{}",
        show(&second)
    );
    assert!(stderr.contains("error: "), "{}", show(&second));
    // The first one is unharmed.
    serve.wait_healthy();
}

#[test]
fn trigger_then_runs_and_logs_follow_see_the_run() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Delay(
        Duration::from_millis(800),
        Box::new(Reply::Text("hello from the daemon".into())),
    ));
    mock.push(Reply::Text("followed to the end".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: \"s {{ vars.who }}\"\n");
    let addr = write_settings(dir.path(), &mock);
    let _serve = Serve::start(dir.path(), addr, &[]);

    let out = run(
        dir.path(),
        &["trigger", "a", "--input", "hi", "--var", "who=me"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let id = triggered(&out);

    let runs = run(dir.path(), &["runs"]);
    // Listed by its short id, the random end of the id.
    assert!(
        text(&runs.stdout).contains(&id[id.len() - 8..]),
        "{}",
        show(&runs)
    );

    let logs = run(dir.path(), &["logs", &id, "--follow"]);
    assert_eq!(logs.status.code(), Some(0), "{}", show(&logs));
    assert!(
        text(&logs.stdout).contains("hello from the daemon"),
        "{}",
        show(&logs)
    );
    assert!(
        text(&logs.stderr).contains(&format!("run {id} succeeded")),
        "{}",
        show(&logs)
    );
    let first = &mock.requests()[0];
    assert_eq!(first.messages()[0]["content"], "s me", "{:?}", first.body);
    assert_eq!(first.messages()[1]["content"], "hi", "{:?}", first.body);

    // --follow streams the run's events and exits like the run.
    let follow = run(
        dir.path(),
        &["trigger", "a", "--input", "again", "--follow"],
    );
    assert_eq!(follow.status.code(), Some(0), "{}", show(&follow));
    assert!(
        text(&follow.stdout).contains("followed to the end"),
        "{}",
        show(&follow)
    );
    assert!(
        text(&follow.stderr).contains("succeeded"),
        "{}",
        show(&follow)
    );

    let unknown = run(dir.path(), &["trigger", "nope"]);
    assert_eq!(unknown.status.code(), Some(2), "{}", show(&unknown));
    assert!(text(&unknown.stderr).contains("nope"), "{}", show(&unknown));
}

#[test]
fn trigger_without_a_daemon_says_how_to_start_one() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", free_port());
    let out = run(dir.path(), &["trigger", "a", "--url", &url]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "error: no aurad serve is answering at {url}; start it with `aurad serve` (or pass --url)"
        )
    );
}

#[test]
fn sigterm_lets_the_run_in_flight_finish_then_exits_0() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Delay(
        Duration::from_millis(1500),
        Box::new(Reply::Text("finished in time".into())),
    ));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let addr = write_settings(dir.path(), &mock);
    let mut serve = Serve::start(dir.path(), addr, &["--log-format", "json"]);
    let out = run(dir.path(), &["trigger", "a", "--input", "go"]);
    let id = triggered(&out);
    mock.wait_for_requests_blocking(1, DEADLINE);

    serve.signal(libc::SIGTERM);
    let status = serve.wait_exit();
    let log = serve.log();
    assert_eq!(status.code(), Some(0), "{log}");
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let run = store.get_run_blocking(&id).unwrap().unwrap();
    assert_eq!(run.state, RunState::Succeeded, "{log}");
    assert_eq!(run.output.as_deref(), Some("finished in time"));
    // --log-format json: every log line is one JSON object.
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let messages: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["fields"]["message"].as_str())
        .collect();
    assert!(
        messages.iter().any(|m| m.contains("SIGTERM received")),
        "{log}"
    );
    assert!(messages.iter().any(|m| m.contains("stopped")), "{log}");
}

#[test]
fn a_killed_serve_leaves_an_interrupted_run_and_a_sound_database() {
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Hang);
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let addr = write_settings(dir.path(), &mock);
    let mut serve = Serve::start(dir.path(), addr, &[]);
    let id = triggered(&run(dir.path(), &["trigger", "a", "--input", "hang"]));

    let db = dir.path().join("aurad.db");
    let store = Store::open(&db).unwrap();
    poll(
        "the run to be running with its `started` event stored",
        || serve.log(),
        || {
            let run = store.get_run_blocking(&id).ok()??;
            let events = store.run_events_blocking(&id).ok()?;
            (run.state == RunState::Running
                && events.iter().any(|e| matches!(e, RunEvent::Started { .. })))
            .then_some(())
        },
    );
    mock.wait_for_requests_blocking(1, DEADLINE);
    serve.kill_now();
    assert_eq!(
        store.get_run_blocking(&id).unwrap().unwrap().state,
        RunState::Running
    );

    let addr = write_settings(dir.path(), &mock);
    let mut again = Serve::start(dir.path(), addr, &[]);
    poll(
        "the run to be recorded interrupted",
        || again.log(),
        || {
            let run = store.get_run_blocking(&id).ok()??;
            (run.state == RunState::Interrupted).then_some(())
        },
    );
    let logs = run(dir.path(), &["logs", &id]);
    assert_eq!(logs.status.code(), Some(0), "{}", show(&logs));
    let stderr = text(&logs.stderr);
    assert!(
        stderr.contains(&format!("▶ a · mock/m · run {id}")),
        "{}",
        show(&logs)
    );
    assert!(
        stderr.contains(&format!("run {id} interrupted")),
        "{}",
        show(&logs)
    );

    again.signal(libc::SIGTERM);
    assert_eq!(again.wait_exit().code(), Some(0), "{}", again.log());
    store.close().unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let check: String = conn
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap();
    assert_eq!(check, "ok");
}

/// Records a run of `agent` that ended in `state` now.
fn record_run(store: &Store, agent: &str, state: RunState) {
    let rt = runtime();
    let id = aurad::store::new_run_id();
    rt.block_on(store.claim_run(NewRun {
        parent: None,
        id: id.clone(),
        agent: agent.into(),
        trigger: aurad::types::Trigger::Cli,
        input: "x".into(),
        model: "mock/m".into(),
        definition_hash: "h".into(),
        owner: String::new(),
        fire: None,
        state: RunState::Running,
        template_context: None,
        session_id: None,
    }))
    .unwrap();
    rt.block_on(store.finish_run(&id, state, Some("boom".into()), None, Usage::default()))
        .unwrap();
}

#[test]
fn agents_shows_schedules_next_fire_last_run_and_backoff() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\nschedule: \"0 9 * * *\"\n");
    std::fs::write(
        dir.path().join("agents/b.yaml"),
        "model: mock/m\nsystem: s\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("agents/c.yaml"),
        "model: mock/m\nsystem: s\nbogus: 1\n",
    )
    .unwrap();
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    record_run(&store, "a", RunState::Failed);
    record_run(&store, "a", RunState::Failed);
    store.close().unwrap();

    let now = Utc::now();
    let today = now
        .with_hour(9)
        .and_then(|t| t.with_minute(0))
        .and_then(|t| t.with_second(0))
        .and_then(|t| t.with_nanosecond(0))
        .unwrap();
    let next = if today > now {
        today
    } else {
        today + chrono::Duration::days(1)
    };

    let out = run(dir.path(), &["agents"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("agents/c.yaml:3:1: unknown field `bogus`"),
        "{}",
        show(&out)
    );
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("NEXT FIRE"),
        "{stdout}"
    );
    let a = lines.iter().find(|l| l.starts_with("a ")).expect(&stdout);
    for part in [
        "0 9 * * * (UTC)",
        &next.format("%Y-%m-%d 09:00 UTC").to_string(),
        "failed just now",
        "backing off until",
        "(2 failures)",
    ] {
        assert!(a.contains(part), "{part:?} missing in {a:?}\n{stdout}");
    }
    let b = lines.iter().find(|l| l.starts_with("b ")).expect(&stdout);
    assert!(!b.contains("backing off"), "{stdout}");

    let out = run(dir.path(), &["agents", "--json"]);
    let agents: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", show(&out)));
    let names: Vec<&str> = agents
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"]);
    let a = &agents[0];
    assert_eq!(a["schedules"][0]["cron"], "0 9 * * *");
    assert_eq!(a["schedules"][0]["timezone"], "UTC");
    // Its identity, as its runs carry it in `schedule_id`.
    let id = aurad::types::ScheduleId::of("a", "0 9 * * *", "UTC", None);
    assert_eq!(a["schedules"][0]["id"], id.as_str());
    let first: chrono::DateTime<Utc> =
        serde_json::from_value(a["schedules"][0]["next_fires"][0].clone()).unwrap();
    assert_eq!(first, next);
    assert_eq!(a["consecutive_failures"], 2);
    assert!(a["backoff_until"].is_string(), "{a}");
    assert_eq!(a["last_run"]["state"], "failed");
    assert!(agents[1]["last_run"].is_null());
}

#[test]
fn logs_follow_waits_for_a_run_written_by_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let rt = runtime();
    let id = aurad::store::new_run_id();
    rt.block_on(store.claim_run(NewRun {
        parent: None,
        id: id.clone(),
        agent: "a".into(),
        trigger: aurad::types::Trigger::Api,
        input: "x".into(),
        model: "mock/m".into(),
        definition_hash: "h".into(),
        owner: "pid:999999999".into(),
        fire: None,
        state: RunState::Running,
        template_context: None,
        session_id: None,
    }))
    .unwrap();
    let started = RunEvent::Started {
        run_id: id.clone(),
        agent: "a".into(),
        model: "mock/m".into(),
        trigger: aurad::types::Trigger::Api,
        definition_hash: "h".into(),
        input: "x".into(),
    };
    rt.block_on(store.append_events(&id, vec![started]))
        .unwrap();

    let stdout = tempfile::NamedTempFile::new().unwrap();
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut child = KillOnDrop(
        aurad(dir.path())
            .args(["logs", &id, "--follow"])
            .stdout(stdout.reopen().unwrap())
            .stderr(stderr.reopen().unwrap())
            .spawn()
            .unwrap(),
    );
    let read = |f: &tempfile::NamedTempFile| std::fs::read_to_string(f.path()).unwrap();
    poll(
        "logs --follow to wait for more events",
        || read(&stderr),
        || {
            read(&stderr)
                .contains("waiting for its next events")
                .then_some(())
        },
    );
    assert!(child.0.try_wait().unwrap().is_none(), "{}", read(&stderr));

    let words = RunEvent::TextDelta {
        text: "late words".into(),
    };
    rt.block_on(store.append_events(&id, vec![words])).unwrap();
    poll(
        "the new event to be printed",
        || read(&stderr),
        || read(&stdout).contains("late words").then_some(()),
    );
    let finished = RunEvent::Finished {
        state: RunState::Failed,
        reason: Some("boom".into()),
        output: None,
        usage: Usage::default(),
        cost_usd: None,
        result: None,
    };
    rt.block_on(store.finish_run_with_events(
        &id,
        vec![finished],
        RunState::Failed,
        Some("boom".into()),
        None,
        Usage::default(),
    ))
    .unwrap();
    let status = poll(
        "logs --follow to exit",
        || read(&stderr),
        || child.0.try_wait().unwrap(),
    );
    assert_eq!(status.code(), Some(1), "{}", read(&stderr));
    assert!(
        read(&stderr).contains(&format!("run {id} failed: boom")),
        "{}",
        read(&stderr)
    );
}

#[test]
fn a_second_signal_exits_at_once_with_130() {
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Hang);
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let addr = write_settings(dir.path(), &mock);
    let mut serve = Serve::start(dir.path(), addr, &[]);
    triggered(&run(dir.path(), &["trigger", "a", "--input", "hang"]));
    mock.wait_for_requests_blocking(1, DEADLINE);

    serve.signal(libc::SIGINT);
    poll(
        "the graceful shutdown to wait for the run",
        || serve.log(),
        || serve.log().contains("waiting up to").then_some(()),
    );
    serve.signal(libc::SIGTERM);
    let status = serve.wait_exit();
    let log = serve.log();
    assert_eq!(status.code(), Some(130), "{log}");
    assert!(
        log.contains(
            "second signal: exiting now; runs in flight will be recorded as interrupted at the next start"
        ),
        "{log}"
    );
}

/// The agents as `aurad agents --json` lists them, by name.
fn agents_json(root: &Path) -> serde_json::Value {
    let out = run(root, &["agents", "--json"]);
    let list: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", show(&out)));
    let mut by_name = serde_json::Map::new();
    for agent in list.as_array().expect("a list") {
        by_name.insert(agent["name"].as_str().unwrap().to_string(), agent.clone());
    }
    serde_json::Value::Object(by_name)
}

#[test]
fn a_run_queued_when_serve_was_killed_runs_after_restart_and_interrupted_is_no_failure() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Hang);
    mock.set_fallback(Reply::Text("resumed after the crash".into()));
    // The queued run's variables are rendered after the restart too.
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: \"s for {{ vars.who | default('nobody') }}\"\n",
    );
    std::fs::write(
        dir.path().join("agents/b.yaml"),
        "model: mock/m\nsystem: s\nschedule: \"0 0 1 1 *\"\n",
    )
    .unwrap();
    let db = dir.path().join("aurad.db");
    let store = Store::open(&db).unwrap();
    // One real failure of `b` before: its streak is 1.
    record_run(&store, "b", RunState::Failed);
    let settings = |mock: &MockLlm| {
        let addr = write_settings(dir.path(), mock);
        let path = dir.path().join("aurad.yaml");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("max_concurrent_runs: 1\n");
        std::fs::write(path, text).unwrap();
        addr
    };
    let mut serve = Serve::start(dir.path(), settings(&mock), &[]);
    let cut = triggered(&run(dir.path(), &["trigger", "b", "--input", "hang"]));
    mock.wait_for_requests_blocking(1, DEADLINE);
    let queued = triggered(&run(
        dir.path(),
        &[
            "trigger",
            "a",
            "--input",
            "wait your turn",
            "--var",
            "who=alice",
        ],
    ));
    assert_eq!(
        store.get_run_blocking(&queued).unwrap().unwrap().state,
        RunState::Queued
    );
    serve.kill_now();

    let again = Serve::start(dir.path(), settings(&mock), &[]);
    let resumed = poll(
        "the queued run to run to its end after the restart",
        || again.log(),
        || {
            let run = store.get_run_blocking(&queued).ok()??;
            run.state.is_final().then_some(run)
        },
    );
    assert_eq!(resumed.state, RunState::Succeeded, "{}", again.log());
    assert_eq!(resumed.output.as_deref(), Some("resumed after the crash"));
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].messages()[1]["content"], "wait your turn");
    assert_eq!(requests[1].messages()[0]["content"], "s for alice");
    let cut = store.get_run_blocking(&cut).unwrap().unwrap();
    assert_eq!(cut.state, RunState::Interrupted);

    // The interrupted run is no failure: `b` still has the one failure it
    // had, and its backoff counts from that failure alone.
    let agents = agents_json(dir.path());
    assert_eq!(agents["b"]["consecutive_failures"], 1, "{agents}");
    assert_eq!(agents["a"]["consecutive_failures"], 0, "{agents}");
    assert_eq!(agents["b"]["last_run"]["state"], "interrupted", "{agents}");
}

#[test]
fn the_live_daemon_marks_a_killed_aurad_run_interrupted_within_seconds() {
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Hang);
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let addr = write_settings(dir.path(), &mock);
    let serve = Serve::start(dir.path(), addr, &[]);
    let mut child = KillOnDrop(
        aurad(dir.path())
            .args(["run", "a", "--input", "slow"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let id = poll(
        "`aurad run` to claim its run and call the model",
        || serve.log(),
        || {
            let runs = store
                .list_runs_blocking(&aurad::store::RunFilter::default())
                .ok()?;
            let run = runs
                .into_iter()
                .find(|r| r.trigger == aurad::types::Trigger::Cli)?;
            (run.state == RunState::Running && mock.request_count() == 1).then_some(run.id)
        },
    );
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let killed_at = std::time::Instant::now();
    let run = poll(
        "the daemon to record the killed run interrupted",
        || serve.log(),
        || {
            let run = store.get_run_blocking(&id).ok()??;
            (run.state == RunState::Interrupted).then_some(run)
        },
    );
    let took = killed_at.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let error = run.error.unwrap();
    assert!(error.contains("the process that ran it"), "{error}");
    assert!(
        serve
            .log()
            .contains("run's process is gone; recorded as interrupted"),
        "{}",
        serve.log()
    );
    // The daemon's own runs are not its sweep's to interrupt.
    mock.push(Reply::Delay(
        Duration::from_millis(4500),
        Box::new(Reply::Text("outlived two sweeps".into())),
    ));
    let own = triggered(&run_ok(dir.path(), &["trigger", "a", "--input", "mine"]));
    let own = poll(
        "the daemon's own run to finish",
        || serve.log(),
        || {
            let run = store.get_run_blocking(&own).ok()??;
            run.state.is_final().then_some(run)
        },
    );
    assert_eq!(own.state, RunState::Succeeded, "{}", serve.log());
}

fn run_ok(root: &Path, args: &[&str]) -> Output {
    let out = run(root, args);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    out
}

const HOOK_SECRET: &str = "hook-secret-for-tests";

/// POSTs a signed webhook delivery `delivery` of `body` to agent `a`: the
/// status and JSON answer.
async fn deliver(
    client: &reqwest::Client,
    addr: std::net::SocketAddr,
    delivery: &str,
    body: &str,
) -> (u16, serde_json::Value) {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(HOOK_SECRET.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    let hex = hex::encode(mac.finalize().into_bytes());
    let response = client
        .post(format!("http://{addr}/hooks/a"))
        .header("content-type", "application/json")
        .header("x-hub-signature-256", format!("sha256={hex}"))
        .header("x-github-delivery", delivery)
        .body(body.to_string())
        .send()
        .await
        .expect("the daemon answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

fn webhook_runs(store: &Store) -> Vec<aurad::store::RunRecord> {
    store
        .list_runs_blocking(&aurad::store::RunFilter::default())
        .unwrap()
        .into_iter()
        .filter(|r| r.trigger == aurad::types::Trigger::Webhook)
        .collect()
}

#[test]
fn webhook_replays_run_once_and_a_delivery_refused_at_shutdown_runs_when_sent_again() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Text("replayed once".into()));
    mock.push(Reply::Hang);
    mock.set_fallback(Reply::Text("delivered again".into()));
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nprompt: \"Issue {{ payload.n }}\"\nwebhook: { secret_env: HOOK_SECRET }\n",
    );
    let env = [("HOOK_SECRET", HOOK_SECRET)];
    let mut serve = Serve::start_with_env(dir.path(), write_settings(dir.path(), &mock), &[], &env);
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let rt = runtime();
    let client = reqwest::Client::new();

    // 24 copies of one delivery at once: exactly one run.
    let answers = rt.block_on(futures::future::join_all(
        (0..24).map(|_| deliver(&client, serve.addr, "d-replayed", r#"{"n": 1}"#)),
    ));
    let started: Vec<&(u16, serde_json::Value)> = answers
        .iter()
        .filter(|(status, _)| *status == 202)
        .collect();
    assert_eq!(started.len(), 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|(status, body)| *status == 202 || (*status == 200 && body["duplicate"] == true)),
        "{answers:?}"
    );
    poll(
        "the replayed delivery's run to succeed",
        || serve.log(),
        || {
            let runs = webhook_runs(&store);
            (runs.len() == 1 && runs[0].state == RunState::Succeeded).then_some(())
        },
    );

    // A delivery that arrives while the daemon shuts down is refused
    // before its run is claimed, so it is not remembered either.
    triggered(&run_ok(dir.path(), &["trigger", "a", "--input", "hang"]));
    mock.wait_for_requests_blocking(2, DEADLINE);
    serve.signal(libc::SIGTERM);
    poll(
        "the graceful shutdown to wait for the run",
        || serve.log(),
        || serve.log().contains("waiting up to").then_some(()),
    );
    let (status, body) = rt.block_on(deliver(&client, serve.addr, "d-refused", r#"{"n": 2}"#));
    assert_eq!(status, 503, "{body}");
    serve.kill_now();

    let again = Serve::start_with_env(dir.path(), write_settings(dir.path(), &mock), &[], &env);
    let (status, body) = rt.block_on(deliver(&client, again.addr, "d-refused", r#"{"n": 2}"#));
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().expect("a run id").to_string();
    let done = poll(
        "the redelivered run to finish",
        || again.log(),
        || {
            let run = store.get_run_blocking(&id).ok()??;
            run.state.is_final().then_some(run)
        },
    );
    assert_eq!(done.state, RunState::Succeeded, "{}", again.log());
    assert_eq!(done.input, "Issue 2");
    let (status, body) = rt.block_on(deliver(&client, again.addr, "d-refused", r#"{"n": 2}"#));
    assert_eq!(
        (status, &body["duplicate"]),
        (200, &serde_json::json!(true)),
        "{body}"
    );
    let (status, _) = rt.block_on(deliver(&client, again.addr, "d-replayed", r#"{"n": 1}"#));
    assert_eq!(status, 200);
    assert_eq!(webhook_runs(&store).len(), 2);
}
