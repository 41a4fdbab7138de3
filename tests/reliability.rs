//! Reliability under crashes and store failures (issue #14, sections 4
//! and 7):
//!
//! - kill -9 cycles: a real `aurad serve` with a seconds cron and API runs
//!   against the mock LLM is killed (SIGKILL) at a random point and started
//!   again, `AURAD_RELIABILITY_CYCLES` times (default 10; set 100 for the
//!   long form). The points come from a seeded RNG whose seed is printed
//!   (`AURAD_RELIABILITY_SEED` replays one). After each kill: `PRAGMA
//!   integrity_check` is `ok`; after each restart: no run is left
//!   `running` or `queued` by a dead process (cut runs are `interrupted`,
//!   queued ones were taken over); at the end: no fire ran twice, every
//!   run the API accepted reached a final state, and the events of every
//!   finished run are numbered 1..n without a gap and end with `finished`.
//! - a failed event-batch write (injected with a SQLite trigger that
//!   refuses event rows for a moment) is retried, so the stored sequence
//!   numbers are the ones the live stream announced.

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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aurad::run::RunSink;
use aurad::run::{Job, RunRequest, execute, prepare, run_claimed};
use aurad::store::Store;
use aurad::types::{RunEvent, RunState};
use rand::{Rng, SeedableRng};
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;
use support::serve::{Serve, poll, write_settings};
use tokio_util::sync::CancellationToken;

fn cycles() -> usize {
    std::env::var("AURAD_RELIABILITY_CYCLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10)
}

fn seed() -> u64 {
    std::env::var("AURAD_RELIABILITY_SEED")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

fn sqlite(db: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn
}

fn integrity(db: &Path) -> String {
    sqlite(db)
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .unwrap()
}

/// `(id, state, owner)` of the runs in `states`.
fn runs_in(db: &Path, states: &[&str]) -> Vec<(String, String, Option<String>)> {
    let conn = sqlite(db);
    let mut stmt = conn
        .prepare("SELECT id, state, owner FROM runs ORDER BY created_at, id")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<Vec<(String, String, Option<String>)>, _>>()
        .unwrap()
        .into_iter()
        .filter(|(_, state, _)| states.contains(&state.as_str()))
        .collect()
}

/// The database of the project at `dir`, opened, with `prepared`'s run
/// claimed `running` in it; and that run's id.
async fn claimed(
    dir: &Path,
    prepared: &aurad::run::PreparedRun,
) -> (std::path::PathBuf, Store, String) {
    let db = dir.join("aurad.db");
    let store = Store::open(&db).unwrap();
    store
        .claim_run(prepared.new_run(RunState::Running))
        .await
        .unwrap();
    (db, store, prepared.spec.run_id.clone())
}

/// One column of run `id`'s stored events, in order.
fn event_column<T: rusqlite::types::FromSql>(db: &Path, id: &str, column: &str) -> Vec<T> {
    sqlite(db)
        .prepare(&format!(
            "SELECT {column} FROM events WHERE run_id = ?1 ORDER BY seq"
        ))
        .unwrap()
        .query_map([id], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

fn state_of(db: &Path, id: &str) -> Option<String> {
    sqlite(db)
        .query_row("SELECT state FROM runs WHERE id = ?1", [id], |r| r.get(0))
        .ok()
}

/// POSTs a run of `agent`; the run id when it was accepted (202).
fn start_api_run(addr: SocketAddr, agent: &str, input: &str) -> Option<String> {
    use std::io::{Read, Write};
    let body = serde_json::json!({ "input": input }).to_string();
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
    if !response.starts_with("HTTP/1.1 202") {
        return None;
    }
    let json = response.split_once("\r\n\r\n")?.1;
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    value["id"].as_str().map(str::to_string)
}

#[test]
fn kill_9_cycles_leave_a_sound_store_and_exact_runs() {
    let seed = seed();
    let cycles = cycles();
    println!(
        "reliability: {cycles} kill -9 cycles, seed {seed} (AURAD_RELIABILITY_SEED={seed} replays them)"
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let began = Instant::now();
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Delay(
        Duration::from_millis(250),
        Box::new(Reply::Text("tick done".into())),
    ));
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\nprompt: tick\nschedule: \"* * * * * *\"\non_overlap: allow\n",
    );
    std::fs::write(
        dir.path().join("agents/b.yaml"),
        "model: mock/m\nsystem: s\n",
    )
    .unwrap();
    let db = dir.path().join("aurad.db");
    let settings = || {
        let addr = write_settings(dir.path(), &mock);
        let path = dir.path().join("aurad.yaml");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("max_concurrent_runs: 2\n");
        std::fs::write(path, text).unwrap();
        addr
    };
    let mut accepted: Vec<String> = Vec::new();
    let mut cut_total = 0;
    let mut requeued_total = 0;
    for cycle in 0..cycles {
        let serve = Serve::start(dir.path(), settings(), &[]);
        let me = format!("pid:{} ", serve.pid());
        // Recovery happens before the API answers: nothing of a dead
        // process is left running or queued.
        for (id, state, owner) in runs_in(&db, &["running", "queued"]) {
            assert!(
                owner.as_deref().is_some_and(|o| o.starts_with(&me)),
                "cycle {cycle} (seed {seed}): run {id} is {state} under {owner:?}, not the new daemon\n{}",
                serve.log()
            );
        }
        for n in 0..rng.random_range(0..4) {
            if let Some(id) = start_api_run(serve.addr, "b", &format!("cycle {cycle} run {n}")) {
                accepted.push(id);
            }
        }
        // The kill point: a random instant in the daemon's life, not a
        // wait for anything.
        std::thread::sleep(Duration::from_millis(rng.random_range(50..1500)));
        let mut serve = serve;
        serve.kill_now();
        let check = integrity(&db);
        assert_eq!(check, "ok", "cycle {cycle} (seed {seed})");
        let cut = runs_in(&db, &["running"]);
        let queued = runs_in(&db, &["queued"]);
        cut_total += cut.len();
        requeued_total += queued.len();
        // The next start records the cut runs interrupted.
        let again = Serve::start(dir.path(), settings(), &[]);
        for (id, _, _) in &cut {
            assert_eq!(
                state_of(&db, id).as_deref(),
                Some("interrupted"),
                "cycle {cycle} (seed {seed}): run {id} was cut off"
            );
        }
        for (id, _, _) in &queued {
            assert_ne!(
                state_of(&db, id).as_deref(),
                Some("interrupted"),
                "cycle {cycle} (seed {seed}): queued run {id} was not taken over"
            );
        }
        drop(again); // kill -9 again at once: recovery itself is cut too.
        assert_eq!(integrity(&db), "ok", "cycle {cycle} (seed {seed})");
    }
    // A last daemon, stopped gracefully, lets every accepted run end.
    let mut last = Serve::start(dir.path(), settings(), &[]);
    for id in &accepted {
        poll(
            &format!("accepted run {id} to end (seed {seed})"),
            || last.log(),
            || state_of(&db, id).filter(|s| !["queued", "running"].contains(&s.as_str())),
        );
    }
    last.signal(libc::SIGTERM);
    assert_eq!(last.wait_exit().code(), Some(0), "{}", last.log());
    assert_eq!(integrity(&db), "ok");
    assert_eq!(runs_in(&db, &["running", "queued"]), vec![], "seed {seed}");

    let conn = sqlite(&db);
    let twice: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM (SELECT 1 FROM runs WHERE scheduled_for IS NOT NULL
             GROUP BY agent, schedule_index, scheduled_for HAVING COUNT(*) > 1)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(twice, 0, "a fire ran twice (seed {seed})");
    // Every finished run's events: 1..n, one `finished`, last.
    let finished: Vec<String> = runs_in(
        &db,
        &[
            "succeeded",
            "failed",
            "interrupted",
            "cancelled",
            "timed_out",
            "skipped",
            "missed",
        ],
    )
    .into_iter()
    .map(|(id, _, _)| id)
    .collect();
    let mut stmt = conn
        .prepare("SELECT seq, kind FROM events WHERE run_id = ?1 ORDER BY seq")
        .unwrap();
    for id in &finished {
        let events: Vec<(i64, String)> = stmt
            .query_map([id], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let seqs: Vec<i64> = events.iter().map(|(seq, _)| *seq).collect();
        let want: Vec<i64> = (1..=events.len() as i64).collect();
        assert_eq!(seqs, want, "run {id}: events with a gap (seed {seed})");
        let kinds: Vec<&str> = events.iter().map(|(_, k)| k.as_str()).collect();
        assert_eq!(
            kinds.iter().filter(|k| **k == "finished").count(),
            1,
            "run {id}: {kinds:?} (seed {seed})"
        );
        assert_eq!(kinds.last(), Some(&"finished"), "run {id} (seed {seed})");
    }
    let interrupted_api: Vec<&String> = accepted
        .iter()
        .filter(|id| state_of(&db, id).as_deref() == Some("interrupted"))
        .collect();
    println!(
        "reliability: {cycles} cycles in {:?}: {} runs, {} accepted by the API ({} cut while running), {cut_total} cut, {requeued_total} queued at a kill and taken over, 0 integrity errors, 0 double fires",
        began.elapsed(),
        finished.len(),
        accepted.len(),
        interrupted_api.len(),
    );
}

/// Records what a run's live stream announces: `(seq, kind)` per event.
#[derive(Default)]
struct Announced(Vec<(i64, &'static str)>);

impl RunSink for Announced {
    fn event(&mut self, seq: i64, event: &RunEvent) {
        if self.0.last().map(|(s, _)| *s) != Some(seq) {
            self.0.push((seq, event.kind()));
        }
    }
}

#[tokio::test]
async fn a_failed_event_write_is_retried_and_no_sequence_number_is_skipped() {
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call(
        "c1",
        "read_file",
        r#"{"path": "missing.txt"}"#,
    ));
    mock.push(Reply::Text("done despite the store".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\ntools: [read_file]\n");
    let loaded = aurad::config::load(dir.path(), &|_| None);
    let (snapshot, diags) = aurad::registry::build(loaded, &|_| None);
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    let request = RunRequest {
        input: Some("go".into()),
        ..RunRequest::new("a", aurad::types::Trigger::Test)
    };
    let prepared = prepare(&snapshot, request, &|_| None).unwrap();
    let (db, store, id) = claimed(dir.path(), &prepared).await;
    // For the next 0.8 s, every write of event rows fails as a full disk
    // or an I/O error would: the transaction is refused.
    let window_end: f64 = {
        let conn = sqlite(&db);
        conn.execute_batch(
            "CREATE TABLE inject_until (t REAL NOT NULL);
             INSERT INTO inject_until VALUES (julianday('now') + 0.8 / 86400.0);
             CREATE TRIGGER inject_event_write_failure BEFORE INSERT ON events
             WHEN julianday('now') < (SELECT t FROM inject_until)
             BEGIN SELECT RAISE(ABORT, 'injected: disk I/O error'); END;",
        )
        .unwrap();
        conn.query_row("SELECT t FROM inject_until", [], |r| r.get(0))
            .unwrap()
    };
    let mut announced = Announced::default();
    let outcome = run_claimed(
        Job::Agent(Box::new(prepared)),
        &store,
        CancellationToken::new(),
        &mut announced,
    )
    .await
    .expect("every batch stored in the end");
    assert_eq!(outcome.state, RunState::Succeeded);
    let conn = sqlite(&db);
    // The first batch (`started`) was written inside the window, so it
    // failed at least once before it was stored.
    let first_at: f64 = conn
        .query_row(
            "SELECT julianday(at) FROM events WHERE run_id = ?1 AND seq = 1",
            [&id],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        first_at >= window_end,
        "the injected failure did not happen"
    );
    let stored: Vec<(i64, String)> = conn
        .prepare("SELECT seq, kind FROM events WHERE run_id = ?1 ORDER BY seq")
        .unwrap()
        .query_map([&id], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let stored: Vec<(i64, &str)> = stored.iter().map(|(s, k)| (*s, k.as_str())).collect();
    assert_eq!(stored, announced.0, "stored vs announced");
    let kinds: Vec<&str> = stored.iter().map(|(_, k)| *k).collect();
    for kind in ["started", "tool_call", "tool_result", "finished"] {
        assert!(kinds.contains(&kind), "{kind} missing: {kinds:?}");
    }
    store.close().unwrap();
}

/// What a run's live stream shows, shared with the test while the run
/// goes on: each event's kind (merged deltas once, as stored), and
/// `committed` where the store confirmed a batch.
#[derive(Clone, Default)]
struct Live(Arc<Mutex<Vec<(i64, String)>>>);

impl Live {
    fn seen(&self) -> Vec<String> {
        let seen = self.0.lock().unwrap();
        seen.iter().map(|(_, k)| k.clone()).collect()
    }

    /// The sequence number of the last event of `kind`.
    fn last_seq_of(&self, kind: &str) -> Option<i64> {
        let seen = self.0.lock().unwrap();
        seen.iter().rev().find(|(_, k)| k == kind).map(|(s, _)| *s)
    }

    /// The sequence numbers the store confirmed, in order.
    fn committed(&self) -> Vec<i64> {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .filter(|(_, k)| k == "committed")
            .map(|(s, _)| *s)
            .collect()
    }
}

impl RunSink for Live {
    fn event(&mut self, seq: i64, event: &RunEvent) {
        let mut seen = self.0.lock().unwrap();
        let last = seen.iter().rev().find(|(_, k)| k != "committed");
        if last.map(|(s, _)| *s) != Some(seq) {
            seen.push((seq, event.kind().to_string()));
        }
    }

    fn committed(&mut self, last_seq: i64) {
        self.0.lock().unwrap().push((last_seq, "committed".into()));
    }
}

/// A batch of events being written does not hold back the events after
/// it: with the database's write lock held by another connection once the
/// run is claimed, no batch can be stored, yet the run's events, `finished`
/// included, reach the live stream (an SSE client ends on `finished`).
/// Once the lock is let go, every event is stored, in order.
#[tokio::test]
async fn a_batch_being_written_does_not_hold_back_the_live_stream() {
    let mock = MockLlm::start().await;
    let (dir, prepared) = answering_run(&mock);
    let (db, store, id) = claimed(dir.path(), &prepared).await;
    let lock = sqlite(&db);
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let live = Live::default();
    let run = tokio::spawn({
        let (store, mut live) = (store.clone(), live.clone());
        async move {
            run_claimed(
                Job::Agent(Box::new(prepared)),
                &store,
                CancellationToken::new(),
                &mut live,
            )
            .await
        }
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !live.seen().iter().any(|k| k == "finished") {
        assert!(
            Instant::now() < deadline,
            "`finished` never reached the live stream while a batch waited: {:?}",
            live.seen()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        !live.seen().iter().any(|k| k == "committed"),
        "a batch was stored while the write lock was held: {:?}",
        live.seen()
    );
    lock.execute_batch("ROLLBACK").unwrap();
    let outcome = run.await.unwrap().expect("the run is recorded");
    assert_eq!(outcome.state, RunState::Succeeded);
    let kinds: Vec<String> = event_column(&db, &id, "kind");
    let streamed: Vec<String> = live
        .seen()
        .into_iter()
        .filter(|k| k != "committed")
        .collect();
    assert_eq!(kinds, streamed, "stored vs streamed");
    assert_eq!(state_of(&db, &id).as_deref(), Some("succeeded"));
    store.close().unwrap();
}

/// The last model turn's `usage` is stored with `finished` and the final
/// state, in the one `synchronous=FULL` commit a run ends with, not in a
/// commit of its own just before it (a write in series at the end of
/// every run).
#[tokio::test]
async fn the_last_turn_is_stored_with_the_final_state() {
    let mock = MockLlm::start().await;
    let (dir, prepared) = answering_run(&mock);
    let (db, store, id) = claimed(dir.path(), &prepared).await;
    let mut live = Live::default();
    let outcome = run_claimed(
        Job::Agent(Box::new(prepared)),
        &store,
        CancellationToken::new(),
        &mut live,
    )
    .await
    .unwrap();
    assert_eq!(outcome.state, RunState::Succeeded);
    let usage = live.last_seq_of("usage").expect("a usage event");
    let finished = live.last_seq_of("finished").expect("a finished event");
    let committed = live.committed();
    assert!(
        !committed.contains(&usage),
        "the last turn was committed before the final state: {:?}",
        live.seen()
    );
    assert_eq!(committed.last(), Some(&finished));
    assert_eq!(state_of(&db, &id).as_deref(), Some("succeeded"));
    store.close().unwrap();
}

/// A project whose agent `a`'s model calls `bash` to create `marker` once,
/// then answers.
fn marker_project(mock: &MockLlm) -> tempfile::TempDir {
    mock.push(Reply::tool_call(
        "c1",
        "bash",
        r#"{"command": "touch marker"}"#,
    ));
    mock.push(Reply::Text("made".into()));
    project_with_mock(mock, "model: mock/m\nsystem: s\ntools: [bash]\n")
}

/// A project whose agent `a` (no tools) answers "done" at once, and its
/// run, prepared.
fn answering_run(mock: &MockLlm) -> (tempfile::TempDir, aurad::run::PreparedRun) {
    mock.push(Reply::Text("done".into()));
    let dir = project_with_mock(mock, "model: mock/m\nsystem: s\n");
    let prepared = support::project::prepare_agent(dir.path(), "go");
    (dir, prepared)
}

/// [`marker_project`] and its run, prepared.
fn marker_run(mock: &MockLlm) -> (tempfile::TempDir, aurad::run::PreparedRun) {
    let dir = marker_project(mock);
    let prepared = support::project::prepare_agent(dir.path(), "go");
    (dir, prepared)
}

/// While a claim cannot commit: the model got its first call, and nothing
/// more happened (no tool, no second call).
fn only_the_first_call(dir: &Path, mock: &MockLlm) {
    assert!(!dir.join("marker").exists(), "a tool ran before the claim");
    assert_eq!(
        mock.requests().len(),
        1,
        "a second call went out before the claim"
    );
}

/// `execute` (`aurad run`) lets the claim's commit overlap the first model
/// call, but nothing the run does needs the row before it is durable: with
/// the database's write lock held by another connection, the first model
/// request goes out, yet no tool runs and no row or event is written until
/// the lock is let go; then the run goes on and is recorded whole.
#[tokio::test]
async fn a_run_whose_claim_waits_calls_its_model_but_runs_no_tool_until_it_is_durable() {
    let mock = MockLlm::start().await;
    let (dir, prepared) = marker_run(&mock);
    let db = dir.path().join("aurad.db");
    let store = Store::open(&db).unwrap();
    let id = prepared.spec.run_id.clone();
    let lock = sqlite(&db);
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let run = tokio::spawn({
        let store = store.clone();
        async move {
            execute(
                Job::Agent(Box::new(prepared)),
                &store,
                CancellationToken::new(),
                |_| {},
            )
            .await
        }
    });
    mock.wait_for_requests(1, Duration::from_secs(10)).await;
    // The answer (a `bash` call) is back well within this window; the call
    // must still wait for the claim.
    let window = Instant::now() + Duration::from_millis(500);
    while Instant::now() < window {
        only_the_first_call(dir.path(), &mock);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(state_of(&db, &id), None);
    lock.execute_batch("ROLLBACK").unwrap();
    let outcome = run.await.unwrap().expect("the run is recorded");
    assert_eq!(outcome.state, RunState::Succeeded);
    assert!(dir.path().join("marker").exists());
    assert_eq!(state_of(&db, &id).as_deref(), Some("succeeded"));
    let seqs: Vec<i64> = event_column(&db, &id, "seq");
    assert!(seqs.len() > 3, "{seqs:?}");
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
}

/// A claim that fails (the run's id is taken) is `execute`'s error: the
/// overlapping model call goes no further, no tool runs, and the row that
/// holds the id keeps its state and events.
#[tokio::test]
async fn a_run_whose_claim_fails_runs_no_tool_and_touches_no_other_run() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("first".into()));
    let (dir, mut prepared) = marker_run(&mock);
    let db = dir.path().join("aurad.db");
    let store = Store::open(&db).unwrap();
    // An earlier run holds the id the new one will claim.
    let earlier = support::project::prepare_agent(dir.path(), "earlier");
    let taken = earlier.spec.run_id.clone();
    execute(
        Job::Agent(Box::new(earlier)),
        &store,
        CancellationToken::new(),
        |_| {},
    )
    .await
    .unwrap();
    let before = store.run_events(&taken).await.unwrap().len();
    prepared.spec.run_id = taken.clone();
    let failed = execute(
        Job::Agent(Box::new(prepared)),
        &store,
        CancellationToken::new(),
        |_| {},
    )
    .await;
    assert!(failed.is_err(), "{failed:?}");
    assert!(!dir.path().join("marker").exists(), "a tool ran unrecorded");
    assert!(mock.requests().len() <= 2, "{:?}", mock.requests().len());
    assert_eq!(state_of(&db, &taken).as_deref(), Some("succeeded"));
    assert_eq!(store.run_events(&taken).await.unwrap().len(), before);
}

/// The daemon's API runs start their first model call while their claim
/// commits too, but the 202 still comes only once the claim is durable:
/// with the database's write lock held by another connection, the model
/// gets the first call, yet the POST is not answered, no tool runs and no
/// row is there; let go, the run is accepted and runs whole.
#[test]
fn an_api_run_is_accepted_only_once_its_claim_is_durable_and_runs_no_tool_before() {
    let mock = MockLlm::start_in_thread();
    let dir = marker_project(&mock);
    let addr = write_settings(dir.path(), &mock);
    let serve = Serve::start(dir.path(), addr, &[]);
    let db = dir.path().join("aurad.db");
    let lock = sqlite(&db);
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let post = std::thread::spawn(move || start_api_run(addr, "a", "go"));
    mock.wait_for_requests_blocking(1, Duration::from_secs(10));
    let window = Instant::now() + Duration::from_millis(500);
    while Instant::now() < window {
        assert!(!post.is_finished(), "answered before the claim was durable");
        only_the_first_call(dir.path(), &mock);
        std::thread::sleep(Duration::from_millis(20));
    }
    let runs: i64 = lock
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert_eq!(runs, 0);
    lock.execute_batch("ROLLBACK").unwrap();
    let id = post
        .join()
        .unwrap()
        .expect("accepted once the lock is let go");
    poll(
        "the run to succeed",
        || serve.log(),
        || (state_of(&db, &id).as_deref() == Some("succeeded")).then_some(()),
    );
    assert!(dir.path().join("marker").exists());
}
