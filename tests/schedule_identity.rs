//! Schedules are keyed by what they are, not by their place in the list
//! (docs/daemon-and-api.md, "Schedules"), under a live `aurad serve` with hot reload
//! and a manual clock: editing a schedule replays nothing and does not fire
//! at once, deleting the first of two does not fire the second twice,
//! reordering changes nothing, and a schedule edited while the daemon was
//! down starts at its load while an unchanged one catches up per
//! `on_missed`. Each test counts every stored run.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use aurad::daemon::ManualClock;
use aurad::store::{RunRecord, Store};
use aurad::types::{RunState, ScheduleId};
use chrono::{DateTime, Utc};
use support::inproc::{InProc, Start, eventually, runs, start};
use support::mock_llm::{MockLlm, Reply};
use support::project::{add_settings, project_with_mock};

const WAIT: Duration = Duration::from_secs(20);

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

/// `12:05` on the tests' day, as stored.
fn iso(hhmm: &str) -> String {
    at(&format!("2026-06-01T{hhmm}:00Z")).to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The identity of agent `a`'s schedule `expression` in UTC, no input.
fn id(expression: &str) -> ScheduleId {
    ScheduleId::of("a", expression, "UTC", None)
}

/// Agent `a` with `schedules` (YAML list items), overlapping runs allowed
/// so that two schedules never skip each other.
fn agent_yaml(schedules: &[&str]) -> String {
    let items: String = schedules.iter().map(|s| format!("  - \"{s}\"\n")).collect();
    format!("model: mock/m\nprompt: scheduled work\non_overlap: allow\nschedule:\n{items}")
}

fn write_agent(root: &Path, schedules: &[&str]) {
    std::fs::write(root.join("agents/a.yaml"), agent_yaml(schedules)).unwrap();
}

fn project(mock: &MockLlm, schedules: &[&str]) -> tempfile::TempDir {
    let dir = project_with_mock(mock, &agent_yaml(schedules));
    add_settings(dir.path(), "shutdown_grace: 1s\n");
    dir
}

/// Waits until the scheduler sleeps on `clock`: it has handled every fire
/// due at the clock's time and planned from it.
async fn asleep(clock: &ManualClock) {
    eventually("the scheduler to sleep on the clock", WAIT, || async {
        (clock.sleepers() > 0).then_some(())
    })
    .await;
}

/// Starts the daemon (watching files when `watch`) and waits until the
/// scheduler sleeps on `clock`.
async fn start_planned(root: &Path, clock: &ManualClock, watch: bool) -> InProc {
    let daemon = start(
        root,
        Start {
            clock: Arc::new(clock.clone()),
            watch,
            ..Start::default()
        },
    )
    .await;
    asleep(clock).await;
    daemon
}

/// The schedules of agent `a` the store says are watched.
fn watched(root: &Path) -> BTreeSet<String> {
    let conn = rusqlite::Connection::open(root.join("aurad.db")).unwrap();
    let mut stmt = conn
        .prepare("SELECT schedule_id FROM schedule_watches WHERE agent = 'a'")
        .unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Waits until the scheduler has taken up a reload whose schedules are
/// `ids` (its watches are those, written when it syncs), and then handled
/// what was due and gone back to sleep.
async fn reloaded(root: &Path, clock: &ManualClock, ids: &[ScheduleId]) {
    let want: BTreeSet<String> = ids.iter().map(|i| i.to_string()).collect();
    eventually("the scheduler to take up the reload", WAIT, || async {
        (watched(root) == want).then_some(())
    })
    .await;
    asleep(clock).await;
}

/// Waits until agent `a` has exactly `n` runs, all final; returns them
/// sorted by scheduled instant, then schedule.
async fn settled(store: &Store, n: usize) -> Vec<RunRecord> {
    let mut all = eventually(&format!("{n} finished runs"), WAIT, || async {
        let all = runs(store, "a").await;
        (all.len() >= n && all.iter().all(|r| r.state.is_final())).then_some(all)
    })
    .await;
    assert_eq!(all.len(), n, "{all:#?}");
    all.sort_by(|a, b| (&a.scheduled_for, &a.schedule_id).cmp(&(&b.scheduled_for, &b.schedule_id)));
    all
}

/// (scheduled instant, schedule, state) of each run.
fn fires(runs: &[RunRecord]) -> Vec<(String, ScheduleId, RunState)> {
    runs.iter()
        .map(|r| {
            (
                aurad::types::timestamp::millis_text(r.scheduled_for.expect("a scheduled run")),
                r.schedule_id.clone().expect("a schedule id"),
                r.state,
            )
        })
        .collect()
}

fn fire(hhmm: &str, schedule: &ScheduleId, state: RunState) -> (String, ScheduleId, RunState) {
    (iso(hhmm), schedule.clone(), state)
}

fn open_store(root: &Path) -> Store {
    Store::open(&root.join("aurad.db")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_cron_neither_replays_nor_fires_at_once() {
    use RunState::Succeeded as S;
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(&mock, &["*/10 * * * *"]);
    let root = dir.path();
    let clock = ManualClock::new(at("2026-06-01T12:05:00Z"));
    let daemon = start_planned(root, &clock, true).await;
    let store = open_store(root);
    clock.set(at("2026-06-01T12:10:00Z"));
    settled(&store, 1).await;
    clock.set(at("2026-06-01T12:18:00Z"));
    asleep(&clock).await;

    // Edited at 12:18: the new expression's 12:15 is before it existed.
    write_agent(root, &["*/5 * * * *"]);
    reloaded(root, &clock, &[id("*/5 * * * *")]).await;
    assert_eq!(runs(&store, "a").await.len(), 1, "no fire at the edit");
    clock.set(at("2026-06-01T12:20:00Z"));
    settled(&store, 2).await;
    clock.set(at("2026-06-01T12:25:00Z"));
    let all = settled(&store, 3).await;
    daemon.stop().await.unwrap();
    let (old, new) = (id("*/10 * * * *"), id("*/5 * * * *"));
    assert_eq!(
        fires(&all),
        vec![
            fire("12:10", &old, S),
            fire("12:20", &new, S),
            fire("12:25", &new, S),
        ]
    );
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_edited_away_and_back_starts_anew_without_catch_up() {
    use RunState::Succeeded as S;
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let (every_ten, yearly) = ("*/10 * * * *", "0 0 1 1 *");
    let dir = project(&mock, &[every_ten]);
    let root = dir.path();
    let clock = ManualClock::new(at("2026-06-01T12:05:00Z"));
    let daemon = start_planned(root, &clock, true).await;
    let store = open_store(root);
    clock.set(at("2026-06-01T12:10:00Z"));
    settled(&store, 1).await;
    clock.set(at("2026-06-01T12:12:00Z"));
    asleep(&clock).await;
    write_agent(root, &[yearly]);
    reloaded(root, &clock, &[id(yearly)]).await;
    // 12:20 passes while the schedule is another one.
    clock.set(at("2026-06-01T12:25:00Z"));
    asleep(&clock).await;

    // Written back at 12:25: its stored 12:10 fire is from an earlier life,
    // so 12:20 is not a missed fire of this one.
    write_agent(root, &[every_ten]);
    reloaded(root, &clock, &[id(every_ten)]).await;
    assert_eq!(runs(&store, "a").await.len(), 1, "no catch-up at the edit");
    clock.set(at("2026-06-01T12:30:00Z"));
    let all = settled(&store, 2).await;
    daemon.stop().await.unwrap();
    assert_eq!(
        fires(&all),
        vec![
            fire("12:10", &id(every_ten), S),
            fire("12:30", &id(every_ten), S),
        ]
    );
    assert_eq!(mock.requests().len(), 2);
}

/// The two schedules of [`two_schedules_fired`].
const FIRST: &str = "0,20,40 * * * *";
const SECOND: &str = "10,30,50 * * * *";

/// A live daemon, watching files, whose agent `a` has schedules [FIRST,
/// SECOND]; each has fired once (12:20, 12:30) and the clock is at 12:35.
struct TwoFired {
    mock: MockLlm,
    dir: tempfile::TempDir,
    clock: ManualClock,
    daemon: InProc,
    store: Store,
}

async fn two_schedules_fired() -> TwoFired {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project(&mock, &[FIRST, SECOND]);
    let clock = ManualClock::new(at("2026-06-01T12:15:00Z"));
    let daemon = start_planned(dir.path(), &clock, true).await;
    let store = open_store(dir.path());
    clock.set(at("2026-06-01T12:20:00Z"));
    settled(&store, 1).await;
    clock.set(at("2026-06-01T12:30:00Z"));
    settled(&store, 2).await;
    clock.set(at("2026-06-01T12:35:00Z"));
    asleep(&clock).await;
    TwoFired {
        mock,
        dir,
        clock,
        daemon,
        store,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_first_schedule_never_fires_the_second_twice() {
    use RunState::Succeeded as S;
    let TwoFired {
        mock,
        dir,
        clock,
        daemon,
        store,
    } = two_schedules_fired().await;
    let root = dir.path();

    // The second schedule moves to the first place; its 12:30 is done.
    write_agent(root, &[SECOND]);
    reloaded(root, &clock, &[id(SECOND)]).await;
    assert_eq!(runs(&store, "a").await.len(), 2, "nothing fired again");
    clock.set(at("2026-06-01T12:40:00Z")); // the deleted one's time
    asleep(&clock).await;
    clock.set(at("2026-06-01T12:50:00Z"));
    let all = settled(&store, 3).await;
    daemon.stop().await.unwrap();
    assert_eq!(
        fires(&all),
        vec![
            fire("12:20", &id(FIRST), S),
            fire("12:30", &id(SECOND), S),
            fire("12:50", &id(SECOND), S),
        ]
    );
    // The deleted schedule left no watch behind.
    assert_eq!(watched(root), BTreeSet::from([id(SECOND).to_string()]));
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reordering_schedules_adds_and_loses_no_fire() {
    use RunState::Succeeded as S;
    let yearly = "0 0 1 1 *";
    let TwoFired {
        mock,
        dir,
        clock,
        daemon,
        store,
    } = two_schedules_fired().await;
    let root = dir.path();

    // Reordered; a third schedule (no fire today) is added so that the
    // scheduler's watches show when it has taken the reorder up.
    write_agent(root, &[SECOND, FIRST, yearly]);
    reloaded(root, &clock, &[id(FIRST), id(SECOND), id(yearly)]).await;
    assert_eq!(runs(&store, "a").await.len(), 2, "nothing fired again");
    clock.set(at("2026-06-01T12:40:00Z"));
    settled(&store, 3).await;
    clock.set(at("2026-06-01T12:50:00Z"));
    let all = settled(&store, 4).await;
    daemon.stop().await.unwrap();
    assert_eq!(
        fires(&all),
        vec![
            fire("12:20", &id(FIRST), S),
            fire("12:30", &id(SECOND), S),
            fire("12:40", &id(FIRST), S),
            fire("12:50", &id(SECOND), S),
        ]
    );
    assert_eq!(mock.requests().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_an_edited_schedule_starts_at_load_and_an_unchanged_one_catches_up() {
    use RunState::{Missed as M, Succeeded as S};
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let (kept, edited, edit) = ("*/10 * * * *", "*/15 * * * *", "*/20 * * * *");
    let dir = project(&mock, &[kept, edited]);
    let root = dir.path();
    let clock = ManualClock::new(at("2026-06-01T11:59:30Z"));
    let daemon = start_planned(root, &clock, false).await;
    let store = open_store(root);
    clock.set(at("2026-06-01T12:00:00Z"));
    settled(&store, 2).await;
    daemon.stop().await.unwrap();

    // Edited while the daemon is down; it restarts at 12:45. The edited
    // schedule's 12:20 and 12:40 are before it was loaded: not caught up.
    // The unchanged one missed 12:10 ... 12:40: `latest` runs 12:40.
    write_agent(root, &[kept, edit]);
    let clock = ManualClock::new(at("2026-06-01T12:45:00Z"));
    let daemon = start_planned(root, &clock, false).await;
    settled(&store, 6).await;
    assert_eq!(
        watched(root),
        BTreeSet::from([id(kept).to_string(), id(edit).to_string()]),
        "the edited-away schedule left no watch behind"
    );
    clock.set(at("2026-06-01T12:50:00Z"));
    settled(&store, 7).await;
    clock.set(at("2026-06-01T13:00:00Z"));
    let all = settled(&store, 9).await;
    daemon.stop().await.unwrap();
    let (kept, edited, edit) = (id(kept), id(edited), id(edit));
    let mut expected = vec![
        fire("12:00", &kept, S),
        fire("12:00", &edited, S),
        fire("12:10", &kept, M),
        fire("12:20", &kept, M),
        fire("12:30", &kept, M),
        fire("12:40", &kept, S),
        fire("12:50", &kept, S),
        fire("13:00", &kept, S),
        fire("13:00", &edit, S),
    ];
    let by_fire = |a: &(String, ScheduleId, RunState), b: &(String, ScheduleId, RunState)| {
        (&a.0, &a.1).cmp(&(&b.0, &b.1))
    };
    expected.sort_by(by_fire);
    let mut got = fires(&all);
    got.sort_by(by_fire);
    assert_eq!(got, expected);
    assert_eq!(mock.requests().len(), 6);
}
