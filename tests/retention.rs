//! Retention with the real `aurad` binary: `aurad runs prune` by hand (a
//! dry run changes nothing), `aurad logs` and the API saying that events
//! were pruned, the background pruner of `aurad serve`, a bad `retention:`
//! value, and `aurad logs -f AGENT` following two runs started through the
//! API. Old runs are written through the store, then aged by rewriting
//! their times in the SQLite file. The model is the mock server on
//! 127.0.0.1.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;
use std::time::Duration;

use aurad::store::{NewRun, RunRecord, Store};
use aurad::types::{RunEvent, RunState, Usage};
use support::mock_llm::{MockLlm, Reply};
use support::project::{add_settings, project_with_mock};
use support::serve::{
    KillOnDrop, Serve, aurad, http_get, http_post_json, poll, run, show, text, write_settings,
};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Writes a run of agent `a` with `events` text events, finished in
/// `state` unless that is `running`, then moves it `days` into the past.
fn old_run(root: &Path, days: i64, events: usize, state: RunState) -> String {
    let store = Store::open(&root.join("aurad.db")).unwrap();
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
        owner: "pid:1".into(),
        fire: None,
        state: RunState::Running,
        template_context: None,
        session_id: None,
    }))
    .unwrap();
    let texts = (0..events)
        .map(|i| RunEvent::TextDelta {
            text: format!("word{i} "),
        })
        .collect();
    rt.block_on(store.append_events(&id, texts)).unwrap();
    if state.is_final() {
        rt.block_on(store.finish_run(
            &id,
            state,
            None,
            Some("kept output".into()),
            Usage::default(),
        ))
        .unwrap();
    }
    store.close().unwrap();
    let then = (chrono::Utc::now() - chrono::Duration::days(days))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let conn = rusqlite::Connection::open(root.join("aurad.db")).unwrap();
    conn.execute(
        "UPDATE runs SET created_at = ?2, started_at = ?2,
                         finished_at = CASE WHEN finished_at IS NULL THEN NULL ELSE ?2 END
         WHERE id = ?1",
        rusqlite::params![id, then],
    )
    .unwrap();
    id
}

fn get_run(root: &Path, id: &str) -> Option<RunRecord> {
    let store = Store::open(&root.join("aurad.db")).unwrap();
    let run = store.get_run_blocking(id).unwrap();
    store.close().unwrap();
    run
}

fn event_count(root: &Path, id: &str) -> i64 {
    let conn = rusqlite::Connection::open(root.join("aurad.db")).unwrap();
    conn.query_row("SELECT COUNT(*) FROM events WHERE run_id = ?1", [id], |r| {
        r.get(0)
    })
    .unwrap()
}

#[test]
fn runs_prune_by_hand_dry_run_changes_nothing_and_logs_say_events_were_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let ancient = old_run(root, 40, 3, RunState::Succeeded);
    let older = old_run(root, 10, 2, RunState::Failed);
    let recent = old_run(root, 0, 2, RunState::Succeeded);
    let unfinished = old_run(root, 40, 1, RunState::Running);

    let dry = run(root, &["runs", "prune", "--older-than", "30d", "--dry-run"]);
    assert_eq!(dry.status.code(), Some(0), "{}", show(&dry));
    assert!(
        text(&dry.stdout).starts_with(
            "would delete 1 run (3 events, 0 pipeline steps, 0 approvals) that ended before "
        ),
        "{}",
        show(&dry)
    );
    assert!(
        text(&dry.stdout).contains("nothing was changed"),
        "{}",
        show(&dry)
    );
    assert!(get_run(root, &ancient).is_some());
    assert_eq!(event_count(root, &ancient), 3);

    let events = run(
        root,
        &["runs", "prune", "--older-than", "7d", "--events-only"],
    );
    assert_eq!(events.status.code(), Some(0), "{}", show(&events));
    assert!(
        text(&events.stdout)
            .starts_with("deleted the events of 2 runs (5 events) that ended before"),
        "{}",
        show(&events)
    );
    assert_eq!(event_count(root, &older), 0);
    assert_eq!(event_count(root, &recent), 2);
    assert_eq!(
        event_count(root, &unfinished),
        1,
        "a run not final keeps all"
    );

    // `aurad logs` says so, and still shows the run's record.
    let logs = run(root, &["logs", &older]);
    assert_eq!(logs.status.code(), Some(0), "{}", show(&logs));
    let stderr = text(&logs.stderr);
    assert!(
        stderr.contains(&format!(
            "run {older}: its 2 events were pruned by retention"
        )),
        "{}",
        show(&logs)
    );
    assert!(
        stderr.contains(&format!("run {older} failed")),
        "{}",
        show(&logs)
    );
    let json = run(root, &["logs", &older, "--json"]);
    assert_eq!(text(&json.stdout), "", "{}", show(&json));
    assert!(
        text(&json.stderr).contains("pruned by retention"),
        "{}",
        show(&json)
    );

    let runs = run(root, &["runs", "prune", "--older-than", "30d"]);
    assert_eq!(runs.status.code(), Some(0), "{}", show(&runs));
    assert!(
        text(&runs.stdout).starts_with("deleted 1 run (0 events, 0 pipeline steps, 0 approvals)"),
        "{}",
        show(&runs)
    );
    assert_eq!(get_run(root, &ancient), None);
    let kept = get_run(root, &older).expect("younger than 30 days");
    assert_eq!(kept.output.as_deref(), Some("kept output"));
    assert_eq!(
        get_run(root, &unfinished).map(|r| r.state),
        Some(RunState::Running)
    );
    let listed = run(root, &["runs", "--json"]);
    assert!(
        !text(&listed.stdout).contains(&ancient),
        "{}",
        show(&listed)
    );

    let short = run(root, &["runs", "prune", "--older-than", "10m"]);
    assert_eq!(short.status.code(), Some(2), "{}", show(&short));
    assert!(
        text(&short.stderr).contains("10m is shorter than the minimum of 1h"),
        "{}",
        show(&short)
    );
}

#[test]
fn serve_prunes_in_the_background_and_the_api_says_events_were_pruned() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let root = dir.path();
    let ancient = old_run(root, 40, 3, RunState::Succeeded);
    let older = old_run(root, 10, 4, RunState::Succeeded);
    let recent = old_run(root, 1, 2, RunState::Succeeded);
    let addr = write_settings(root, &mock);
    add_settings(root, "retention: { runs: 30d, events: 7d }\n");
    let serve = Serve::start(root, addr, &[]);

    poll(
        "the background pruner to delete the 40-day-old run",
        || serve.log(),
        || (get_run(root, &ancient).is_none() && event_count(root, &older) == 0).then_some(()),
    );
    poll(
        "the pruner to log what it removed",
        || serve.log(),
        || {
            serve
                .log()
                .contains("retention: pruned old runs")
                .then_some(())
        },
    );
    assert!(serve.log().contains("runs_deleted=1"), "{}", serve.log());
    assert_eq!(event_count(root, &recent), 2);

    let (status, body) = http_get(addr, &format!("/v1/runs/{older}/events")).unwrap();
    assert_eq!(status, 410, "{body}");
    assert!(
        body.contains("its 4 events were pruned by retention"),
        "{body}"
    );
    let (status, body) = http_get(addr, &format!("/v1/runs/{older}")).unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("kept output"), "{body}");
    let (status, _) = http_get(addr, &format!("/v1/runs/{recent}/events")).unwrap();
    assert_eq!(status, 200);
}

#[test]
fn a_bad_retention_value_is_a_located_error() {
    let mock = MockLlm::start_in_thread();
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    add_settings(dir.path(), "retention:\n  runs: 30d\n  events: a week\n");
    let out = run(dir.path(), &["validate"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(
        text(&out.stderr)
            .contains("aurad.yaml:5:11: retention.events: invalid duration \"a week\""),
        "{}",
        show(&out)
    );
    let serve = run(dir.path(), &["serve", "--listen", "127.0.0.1:0"]);
    assert_ne!(serve.status.code(), Some(0), "{}", show(&serve));
    assert!(
        text(&serve.stderr).contains("retention.events"),
        "{}",
        show(&serve)
    );
}

/// The `id` of the run a `POST /v1/agents/a/runs` accepted.
fn start_run(addr: std::net::SocketAddr, input: &str) -> String {
    let body = format!("{{\"input\": \"{input}\"}}");
    let (status, body) = http_post_json(addr, "/v1/agents/a/runs", &body).unwrap();
    assert_eq!(status, 202, "{body}");
    let run: serde_json::Value = serde_json::from_str(&body).unwrap();
    run["id"].as_str().unwrap().to_string()
}

#[test]
fn logs_follow_agent_follows_two_consecutive_runs_started_through_the_api() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Delay(
        Duration::from_millis(500),
        Box::new(Reply::Text("first answer".into())),
    ));
    mock.push(Reply::Text("second answer".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let root = dir.path();
    // A run from before is not replayed: following starts with the next.
    let before = old_run(root, 1, 1, RunState::Succeeded);
    let addr = write_settings(root, &mock);
    let serve = Serve::start(root, addr, &[]);

    let stdout = tempfile::NamedTempFile::new().unwrap();
    let stderr = tempfile::NamedTempFile::new().unwrap();
    let mut child = KillOnDrop(
        aurad(root)
            .args(["logs", "-f", "a"])
            .stdout(stdout.reopen().unwrap())
            .stderr(stderr.reopen().unwrap())
            .spawn()
            .unwrap(),
    );
    let read = |f: &tempfile::NamedTempFile| std::fs::read_to_string(f.path()).unwrap();
    let context = || format!("stdout:\n{}\nstderr:\n{}", read(&stdout), read(&stderr));
    poll("logs -f to wait for a run", context, || {
        read(&stderr)
            .contains("waiting for a run of a to start")
            .then_some(())
    });

    let first = start_run(addr, "one");
    poll("the first run's answer", context, || {
        read(&stdout).contains("first answer").then_some(())
    });
    poll("the first run's closing line", context, || {
        read(&stderr)
            .contains(&format!("run {first} succeeded"))
            .then_some(())
    });
    let second = start_run(addr, "two");
    poll("the second run's answer", context, || {
        read(&stdout).contains("second answer").then_some(())
    });
    poll("the second run's closing line", context, || {
        read(&stderr)
            .contains(&format!("run {second} succeeded"))
            .then_some(())
    });
    let out = read(&stdout);
    let (at_first, at_second) = (
        out.find(&format!("── run {first} of a (api")).expect(&out),
        out.find(&format!("── run {second} of a (api")).expect(&out),
    );
    assert!(at_first < out.find("first answer").unwrap(), "{out}");
    assert!(at_first < at_second, "{out}");
    assert!(!out.contains(&before), "{out}");
    assert!(child.0.try_wait().unwrap().is_none(), "still following");
    drop(serve);
}
