//! The scheduler inside a real `aurad serve`, driven by a manual clock:
//! 5- and 6-field expressions, both DST transitions in Europe/Paris, each
//! `on_overlap`, missed fires after a downtime under each `on_missed`, no
//! double fire across a restart, one daemon per directory.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use aurad::daemon::ManualClock;
use aurad::store::{RunRecord, Store};
use aurad::types::{RunState, ScheduleId};
use chrono::{DateTime, Utc};
use support::inproc::{InProc, Start, eventually, metrics_text, runs, start, try_start};
use support::mock_llm::{MockLlm, Reply};
use support::project::{add_settings, project_with_mock};

const WAIT: Duration = Duration::from_secs(20);

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

/// A project whose agent `a` has `schedule_yaml` (and anything else in it),
/// with a short shutdown grace.
fn project(mock: &MockLlm, agent_extra: &str) -> tempfile::TempDir {
    let dir = project_with_mock(
        mock,
        &format!("model: mock/m\nprompt: scheduled work\n{agent_extra}"),
    );
    add_settings(dir.path(), "shutdown_grace: 1s\n");
    dir
}

fn start_options(clock: &ManualClock) -> Start {
    Start {
        clock: Arc::new(clock.clone()),
        ..Start::default()
    }
}

/// Starts the daemon and waits until its scheduler sleeps on `clock`: it
/// has planned from the clock's time, so a later `clock.set` is a move it
/// sees happen, not the time it starts at (where a fire due exactly then
/// would count as already checked).
async fn start_planned(root: &std::path::Path, clock: &ManualClock) -> InProc {
    let daemon = start(root, start_options(clock)).await;
    eventually("the scheduler to sleep on the clock", WAIT, || async {
        (clock.sleepers() > 0).then_some(())
    })
    .await;
    daemon
}

fn open_store(dir: &tempfile::TempDir) -> Store {
    Store::open(&dir.path().join("aurad.db")).unwrap()
}

/// Waits until agent `a` has `n` runs in final states; returns all runs
/// sorted by their scheduled instant.
async fn settled(store: &Store, n: usize) -> Vec<RunRecord> {
    let mut all = eventually(&format!("{n} finished runs"), WAIT, || async {
        let all = runs(store, "a").await;
        (all.len() >= n && all.iter().all(|r| r.state.is_final())).then_some(all)
    })
    .await;
    assert_eq!(all.len(), n, "{all:#?}");
    all.sort_by_key(|r| r.scheduled_for);
    all
}

fn fires(runs: &[RunRecord]) -> Vec<(String, RunState)> {
    runs.iter()
        .map(|r| {
            (
                r.scheduled_for
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
                    .unwrap_or_default(),
                r.state,
            )
        })
        .collect()
}

fn iso(t: &str) -> String {
    at(t).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

async fn wait_state(store: &Store, n: usize, state: RunState) -> Vec<RunRecord> {
    eventually(&format!("{n} runs {state}"), WAIT, || async {
        let all = runs(store, "a").await;
        (all.iter().filter(|r| r.state == state).count() >= n).then_some(all)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_and_six_field_expressions_fire_on_time() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(
        &mock,
        "schedule:\n  - \"*/5 * * * *\"\n  - \"*/20 * * * * *\"\non_overlap: allow\n",
    );
    let clock = ManualClock::new(at("2026-06-01T12:04:30Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    clock.set(at("2026-06-01T12:04:40Z"));
    settled(&store, 1).await;
    clock.set(at("2026-06-01T12:05:00Z"));
    let all = settled(&store, 3).await;
    assert_eq!(
        fires(&all),
        vec![
            (iso("2026-06-01T12:04:40Z"), RunState::Succeeded),
            (iso("2026-06-01T12:05:00Z"), RunState::Succeeded),
            (iso("2026-06-01T12:05:00Z"), RunState::Succeeded),
        ]
    );
    let ids: Vec<Option<ScheduleId>> = all.iter().map(|r| r.schedule_id.clone()).collect();
    for expression in ["*/5 * * * *", "*/20 * * * * *"] {
        assert!(ids.contains(&Some(ScheduleId::of("a", expression, "UTC", None))));
    }
    assert!(
        all.iter()
            .all(|r| r.trigger == aurad::types::Trigger::Schedule)
    );
    assert_eq!(mock.requests().len(), 3);
    // Each fire is counted under its agent.
    let metrics = metrics_text(&daemon).await;
    assert!(
        metrics.contains("\naurad_schedule_fires_total{agent=\"a\"} 3\n"),
        "{metrics}"
    );
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paris_spring_forward_gap_fires_once_right_after_it() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(
        &mock,
        "schedule:\n  - { cron: \"30 2 * * *\", timezone: Europe/Paris }\n",
    );
    // 01:50 CET on the night 02:00-03:00 does not exist.
    let clock = ManualClock::new(at("2026-03-29T00:50:00Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    clock.set(at("2026-03-29T01:00:00Z")); // 03:00 CEST, right after the gap
    settled(&store, 1).await;
    clock.set(at("2026-03-30T00:30:00Z")); // 02:30 CEST the next day
    let all = settled(&store, 2).await;
    assert_eq!(
        fires(&all),
        vec![
            (iso("2026-03-29T01:00:00Z"), RunState::Succeeded),
            (iso("2026-03-30T00:30:00Z"), RunState::Succeeded),
        ]
    );
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paris_fall_back_repeated_time_fires_once() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(
        &mock,
        "schedule:\n  - { cron: \"30 2 * * *\", timezone: Europe/Paris }\n",
    );
    let clock = ManualClock::new(at("2026-10-25T00:00:00Z")); // 02:00 CEST
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    clock.set(at("2026-10-25T00:30:00Z")); // 02:30 CEST, first pass
    settled(&store, 1).await;
    clock.set(at("2026-10-25T01:30:00Z")); // 02:30 CET, the repeat: no fire
    clock.set(at("2026-10-26T01:30:00Z")); // 02:30 CET the next day
    let all = settled(&store, 2).await;
    assert_eq!(
        fires(&all),
        vec![
            (iso("2026-10-25T00:30:00Z"), RunState::Succeeded),
            (iso("2026-10-26T01:30:00Z"), RunState::Succeeded),
        ]
    );
    daemon.stop().await.unwrap();
}

/// Starts a daemon whose first model call hangs (until the run's 3 s
/// timeout), fires once, waits until that run is running, then fires again.
async fn overlap_case(policy: &str, extra: &str) -> (Vec<RunRecord>, tempfile::TempDir) {
    let mock = MockLlm::start().await;
    mock.push(Reply::Hang);
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(
        &mock,
        &format!(
            "schedule: \"* * * * *\"\non_overlap: {policy}\nlimits: {{ timeout: 3s }}\n{extra}"
        ),
    );
    let clock = ManualClock::new(at("2026-06-01T12:00:30Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    clock.set(at("2026-06-01T12:01:00Z"));
    wait_state(&store, 1, RunState::Running).await;
    mock.wait_for_requests(1, WAIT).await;
    clock.set(at("2026-06-01T12:02:00Z"));
    (settle_then_stop(&store, daemon, policy).await, dir)
}

async fn settle_then_stop(
    store: &Store,
    daemon: support::inproc::InProc,
    policy: &str,
) -> Vec<RunRecord> {
    let n = if policy == "queue" { 3 } else { 2 };
    let all = settled(store, n).await;
    daemon.stop().await.unwrap();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_records_a_skipped_run() {
    let (all, _dir) = overlap_case("skip", "").await;
    assert_eq!(all[0].state, RunState::TimedOut);
    assert_eq!(all[1].state, RunState::Skipped);
    let reason = all[1].error.as_deref().unwrap();
    assert!(
        reason.contains(&all[0].id) && reason.contains("on_overlap: skip"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_replace_cancels_the_running_one() {
    let (all, _dir) = overlap_case("replace", "").await;
    assert_eq!(all[0].state, RunState::Cancelled);
    assert_eq!(all[1].state, RunState::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_allow_runs_both_at_once() {
    let (all, _dir) = overlap_case("allow", "").await;
    // The second ran (and finished) while the first still hung.
    assert_eq!(all[0].state, RunState::TimedOut);
    assert_eq!(all[1].state, RunState::Succeeded);
    assert!(all[1].finished_at < all[0].finished_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_queue_holds_one_and_skips_the_rest() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Hang);
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(
        &mock,
        "schedule: \"* * * * *\"\non_overlap: queue\nlimits: { timeout: 3s }\n",
    );
    let clock = ManualClock::new(at("2026-06-01T12:00:30Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    clock.set(at("2026-06-01T12:01:00Z"));
    wait_state(&store, 1, RunState::Running).await;
    clock.set(at("2026-06-01T12:02:00Z"));
    wait_state(&store, 1, RunState::Queued).await;
    clock.set(at("2026-06-01T12:03:00Z"));
    let all = settle_then_stop(&store, daemon, "queue").await;
    assert_eq!(
        all.iter().map(|r| r.state).collect::<Vec<_>>(),
        vec![RunState::TimedOut, RunState::Succeeded, RunState::Skipped]
    );
    // The held run started only after the first ended.
    assert!(all[1].started_at >= all[0].finished_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_runs_queues_the_rest() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Hang);
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(
        &mock,
        "schedule: \"* * * * *\"\non_overlap: allow\nlimits: { timeout: 3s }\n",
    );
    add_settings(dir.path(), "max_concurrent_runs: 1\n");
    let clock = ManualClock::new(at("2026-06-01T12:00:30Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    clock.set(at("2026-06-01T12:01:00Z"));
    wait_state(&store, 1, RunState::Running).await;
    clock.set(at("2026-06-01T12:02:00Z"));
    wait_state(&store, 1, RunState::Queued).await;
    let all = settle_then_stop(&store, daemon, "allow").await;
    assert_eq!(all[0].state, RunState::TimedOut);
    assert_eq!(all[1].state, RunState::Succeeded);
    assert!(all[1].started_at >= all[0].finished_at);
}

/// Fires once at 12:00, stops, restarts at 12:31 (six fires of `*/5`
/// missed: 12:05 ... 12:30) under `on_missed: policy`.
async fn downtime_case(policy: &str, extra: &str) -> Vec<(String, RunState)> {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(
        &mock,
        &format!("schedule: \"*/5 * * * *\"\non_missed: {policy}\n{extra}"),
    );
    let clock = ManualClock::new(at("2026-06-01T11:59:50Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    clock.set(at("2026-06-01T12:00:00Z"));
    settled(&store, 1).await;
    daemon.stop().await.unwrap();

    let clock = ManualClock::new(at("2026-06-01T12:31:00Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let all = settled(&store, 7).await;
    daemon.stop().await.unwrap();
    fires(&all[1..])
}

fn downtime_fires(states: [RunState; 6]) -> Vec<(String, RunState)> {
    ["12:05", "12:10", "12:15", "12:20", "12:25", "12:30"]
        .iter()
        .zip(states)
        .map(|(t, s)| (iso(&format!("2026-06-01T{t}:00Z")), s))
        .collect()
}

/// Starts at 11:50 with agent `a` scheduled `*/30` (first fire 12:00)
/// when `watched_before` (else with no schedule), stops before 12:00, and
/// restarts at 12:10 with the schedule; the runs once settled (`expect`).
async fn first_fire_case(watched_before: bool, expect: usize) -> Vec<RunRecord> {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let schedule = "schedule: \"*/30 * * * *\"\non_missed: latest\n";
    let dir = project(&mock, if watched_before { schedule } else { "" });
    let clock = ManualClock::new(at("2026-06-01T11:50:00Z"));
    let daemon = start(dir.path(), start_options(&clock)).await;
    if watched_before {
        eventually("the scheduler to sleep on the clock", WAIT, || async {
            (clock.sleepers() > 0).then_some(())
        })
        .await;
    }
    daemon.stop().await.unwrap();
    let store = open_store(&dir);
    assert!(runs(&store, "a").await.is_empty());

    std::fs::write(
        dir.path().join("agents/a.yaml"),
        format!("model: mock/m\nprompt: scheduled work\n{schedule}"),
    )
    .unwrap();
    let clock = ManualClock::new(at("2026-06-01T12:10:00Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let all = if expect == 0 {
        // The scheduler claims every fire due at start-up before it first
        // sleeps on the clock, which `start_planned` waited for.
        runs(&store, "a").await
    } else {
        settled(&store, expect).await
    };
    daemon.stop().await.unwrap();
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_fire_missed_while_down_is_found_after_a_restart() {
    let all = first_fire_case(true, 1).await;
    assert_eq!(
        fires(&all),
        vec![(iso("2026-06-01T12:00:00Z"), RunState::Succeeded)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_first_seen_after_a_downtime_starts_then() {
    assert_eq!(fires(&first_fire_case(false, 0).await), vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_latest_runs_the_newest_within_catch_up() {
    use RunState::{Missed as M, Succeeded as S};
    assert_eq!(
        downtime_case("latest", "").await,
        downtime_fires([M, M, M, M, M, S])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_all_runs_each_within_catch_up() {
    use RunState::{Missed as M, Succeeded as S};
    assert_eq!(
        downtime_case("all", "catch_up: 17m\n").await,
        downtime_fires([M, M, S, S, S, S])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missed_skip_records_them_all() {
    use RunState::Missed as M;
    assert_eq!(
        downtime_case("skip", "").await,
        downtime_fires([M, M, M, M, M, M])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_never_fires_twice() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(&mock, "schedule: \"*/5 * * * *\"\n");
    let clock = ManualClock::new(at("2026-06-01T11:59:50Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    clock.set(at("2026-06-01T12:00:00Z"));
    settled(&store, 1).await;
    daemon.stop().await.unwrap();
    // Restarted at the same instant, and a little later in the period.
    for now in ["2026-06-01T12:00:00Z", "2026-06-01T12:00:20Z"] {
        let clock = ManualClock::new(at(now));
        let daemon = start_planned(dir.path(), &clock).await;
        clock.set(at("2026-06-01T12:04:59Z"));
        daemon.stop().await.unwrap();
    }
    let clock = ManualClock::new(at("2026-06-01T12:04:59Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    clock.set(at("2026-06-01T12:05:00Z"));
    let all = settled(&store, 2).await;
    daemon.stop().await.unwrap();
    assert_eq!(
        fires(&all),
        vec![
            (iso("2026-06-01T12:00:00Z"), RunState::Succeeded),
            (iso("2026-06-01T12:05:00Z"), RunState::Succeeded),
        ]
    );
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_back_off_the_schedule() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::error(400, "bad request"));
    let dir = project(&mock, "schedule: \"*/10 * * * * *\"\n");
    let clock = ManualClock::new(at("2026-06-01T12:00:05Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    clock.set(at("2026-06-01T12:00:10Z"));
    settled(&store, 1).await;
    let agent_url = daemon.url("/v1/agents/a");
    let agent: serde_json::Value = eventually("the failure counted", WAIT, || async {
        let agent: serde_json::Value = daemon
            .client()
            .get(&agent_url)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (agent["consecutive_failures"] == 1).then_some(agent)
    })
    .await;
    assert_eq!(agent["backoff_until"], "2026-06-01T12:00:40Z", "{agent}");
    // Failed once: fires in the next 30 s are skipped.
    clock.set(at("2026-06-01T12:00:20Z"));
    let all = settled(&store, 2).await;
    assert_eq!(all[0].state, RunState::Failed);
    assert_eq!(all[1].state, RunState::Skipped);
    assert!(
        all[1]
            .error
            .as_deref()
            .unwrap()
            .contains("backing off after 1 consecutive failures"),
        "{:?}",
        all[1].error
    );
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_the_same_directory_is_refused() {
    let mock = MockLlm::start().await;
    let dir = project(&mock, "");
    let daemon = start(dir.path(), Start::default()).await;
    let err = try_start(dir.path(), Start::default())
        .await
        .err()
        .expect("refused");
    assert!(
        err.contains("already running") && err.contains(&std::process::id().to_string()),
        "{err}"
    );
    daemon.stop().await.unwrap();
    // Once the first has stopped, the directory is free again.
    start(dir.path(), Start::default())
        .await
        .stop()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_a_dead_process_are_interrupted_and_retried_once_when_asked() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(&mock, "on_interrupt: retry\n");
    // A process that has exited: its pid names no live process.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let store = open_store(&dir);
    store
        .claim_run(aurad::store::NewRun {
            parent: None,
            id: aurad::store::new_run_id(),
            agent: "a".into(),
            trigger: aurad::types::Trigger::Api,
            input: "unfinished work".into(),
            model: "mock/m".into(),
            definition_hash: "h".into(),
            owner: format!("pid:{dead}"),
            fire: None,
            state: RunState::Running,
            template_context: None,
            session_id: None,
        })
        .await
        .unwrap();
    let daemon = start(dir.path(), Start::default()).await;
    let all = settled(&store, 2).await;
    daemon.stop().await.unwrap();
    let interrupted = all
        .iter()
        .find(|r| r.trigger == aurad::types::Trigger::Api)
        .unwrap();
    assert_eq!(interrupted.state, RunState::Interrupted);
    assert!(
        interrupted
            .error
            .as_deref()
            .unwrap()
            .contains(&format!("pid:{dead}")),
        "{interrupted:?}"
    );
    let retry = all
        .iter()
        .find(|r| r.trigger == aurad::types::Trigger::Retry)
        .unwrap();
    assert_eq!(retry.state, RunState::Succeeded);
    assert_eq!(retry.input, "unfinished work");
    // A second start retries nothing more.
    let daemon = start(dir.path(), Start::default()).await;
    daemon.stop().await.unwrap();
    assert_eq!(runs(&store, "a").await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_run_over_the_daily_budget_is_recorded_without_a_model_call() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    // Each answer (10 in / 5 out tokens) costs $0.00002; the day allows
    // $0.00003, so the third fire finds the budget spent.
    let dir = project(
        &mock,
        "schedule: \"* * * * *\"\nlimits: { max_cost_usd_per_day: 0.00003 }\n",
    );
    add_settings(
        dir.path(),
        "prices:\n  mock/m: { input_per_mtok: 1.0, output_per_mtok: 2.0 }\n",
    );
    let clock = ManualClock::new(at("2026-06-01T12:00:30Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    for (minute, n) in [("01", 1), ("02", 2), ("03", 3)] {
        clock.set(at(&format!("2026-06-01T12:{minute}:00Z")));
        settled(&store, n).await;
    }
    let all = settled(&store, 3).await;
    assert_eq!(
        fires(&all),
        vec![
            (iso("2026-06-01T12:01:00Z"), RunState::Succeeded),
            (iso("2026-06-01T12:02:00Z"), RunState::Succeeded),
            (iso("2026-06-01T12:03:00Z"), RunState::BudgetExceeded),
        ]
    );
    assert_eq!(
        mock.requests().len(),
        2,
        "the third fire made no model call"
    );
    let reason = all[2].error.as_deref().unwrap();
    assert!(reason.contains("max_cost_usd_per_day"), "{reason}");
    assert!(all[..2].iter().all(|r| r.cost_usd.is_some()));
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_replace_cancels_only_a_run_of_the_same_schedule() {
    let mock = MockLlm::start().await;
    // The API run and the first fire hang (until the 3 s timeout).
    mock.push(Reply::Hang);
    mock.push(Reply::Hang);
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(
        &mock,
        "schedule: \"* * * * *\"\non_overlap: replace\nlimits: { timeout: 3s }\n",
    );
    let clock = ManualClock::new(at("2026-06-01T12:00:30Z"));
    let daemon = start_planned(dir.path(), &clock).await;
    let store = open_store(&dir);
    let client = daemon.client();
    let api_run = support::inproc::start_run(&client, &daemon, "by hand").await;
    let api_id = api_run["id"].as_str().expect("a run id").to_string();
    mock.wait_for_requests(1, WAIT).await;

    // A fire with `replace` while the API run is in flight: the API run is
    // not the schedule's to cancel.
    clock.set(at("2026-06-01T12:01:00Z"));
    wait_state(&store, 2, RunState::Running).await;
    mock.wait_for_requests(2, WAIT).await;
    // The next fire of the same schedule replaces the first fire.
    clock.set(at("2026-06-01T12:02:00Z"));
    let all = settled(&store, 3).await;
    daemon.stop().await.unwrap();
    let api = all.iter().find(|r| r.id == api_id).expect("the API run");
    assert_eq!(api.trigger, aurad::types::Trigger::Api);
    assert_eq!(api.state, RunState::TimedOut, "{api:#?}");
    let fired: Vec<(String, RunState)> = fires(&all)
        .into_iter()
        .filter(|(instant, _)| !instant.is_empty())
        .collect();
    assert_eq!(
        fired,
        vec![
            (iso("2026-06-01T12:01:00Z"), RunState::Cancelled),
            (iso("2026-06-01T12:02:00Z"), RunState::Succeeded),
        ]
    );
}
