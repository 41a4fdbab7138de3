//! Group commit on the writer thread: which `synchronous` a group commits
//! with, that a failing job is rolled back alone, and that every job of a
//! group is answered after its commit. A gate job holds the writer thread
//! while the jobs under test queue up, so they form one group for certain.

use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc;

use super::tests::{db, new_run, raw};
use super::*;
use crate::store::*;
use crate::types::{RunState, Usage};

type Pending<'a, R> = Pin<Box<dyn Future<Output = Result<R, StoreError>> + 'a>>;

/// Holds the writer thread in a job until `open` is called.
struct Gate<'a> {
    held: Pending<'a, ()>,
    release: mpsc::Sender<()>,
}

impl<'a> Gate<'a> {
    async fn close(store: &'a Sqlite) -> Gate<'a> {
        let (release, wait) = mpsc::channel::<()>();
        let (entered, inside) = tokio::sync::oneshot::channel();
        let mut held: Pending<'a, ()> = Box::pin(store.call(move |_| {
            let _ = entered.send(());
            let _ = wait.recv();
            Ok(())
        }));
        assert!(futures::poll!(&mut held).is_pending());
        inside.await.expect("the gate job runs");
        Gate { held, release }
    }

    async fn open(self) {
        self.release.send(()).unwrap();
        self.held.await.unwrap();
    }
}

/// Sends `f`'s job now (its first poll submits it) and returns the rest.
async fn queued<'a, R>(f: impl Future<Output = Result<R, StoreError>> + 'a) -> Pending<'a, R> {
    let mut f: Pending<'a, R> = Box::pin(f);
    assert!(futures::poll!(&mut f).is_pending());
    f
}

fn synchronous(conn: &mut Connection) -> Result<i64, StoreError> {
    conn.query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0))
        .map_err(sql("reading PRAGMA synchronous"))
}

const FULL: i64 = 2;
const NORMAL: i64 = 1;

/// Runs `write` in one group with a job reading `PRAGMA synchronous`;
/// returns what that job read.
async fn synchronous_of_group_with<R: std::fmt::Debug>(
    store: &Sqlite,
    write: impl Future<Output = Result<R, StoreError>>,
) -> i64 {
    let gate = Gate::close(store).await;
    let write = queued(write).await;
    let seen = queued(store.call(synchronous)).await;
    gate.open().await;
    write.await.unwrap();
    seen.await.unwrap()
}

#[tokio::test]
async fn claims_starts_and_final_states_make_their_group_commit_with_full_sync() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    assert_eq!(store.call(synchronous).await, Ok(NORMAL));
    assert_eq!(store.call_durable(synchronous).await, Ok(FULL));

    let run = new_run("a");
    let claim = store.claim_run(run.clone());
    assert_eq!(synchronous_of_group_with(&store, claim).await, FULL);
    let append = store.append_events(&run.id, vec![super::tests::text("x")]);
    assert_eq!(synchronous_of_group_with(&store, append).await, NORMAL);
    let finish = store.finish_run_as(
        &run.id,
        Vec::new(),
        crate::store::RunEnd {
            output: None,
            usage: Usage::default(),
            ..crate::store::RunEnd::new(RunState::Succeeded, None)
        },
    );
    assert_eq!(synchronous_of_group_with(&store, finish).await, FULL);

    let queued_run = NewRun {
        state: RunState::Queued,
        ..new_run("b")
    };
    store.claim_run(queued_run.clone()).await.unwrap();
    let start = store.start_run(&queued_run.id, "pid:1");
    assert_eq!(synchronous_of_group_with(&store, start).await, FULL);
    let unrun = store.record_unrun(new_run("c"), RunState::Missed, "down".into());
    assert_eq!(synchronous_of_group_with(&store, unrun).await, FULL);
    let delivery = store.claim_delivery("a", "d1", chrono::Utc::now());
    assert_eq!(synchronous_of_group_with(&store, delivery).await, NORMAL);
    store.close().unwrap();
}

#[tokio::test]
async fn a_failing_job_in_a_group_is_rolled_back_alone() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let first = new_run("a");
    let twin = NewRun {
        agent: "twin".into(),
        ..first.clone()
    };
    let last = new_run("b");
    let gate = Gate::close(&store).await;
    let a = queued(store.claim_run(first.clone())).await;
    // Writes a row, then fails: its row must not stay.
    let half = queued(store.call(|conn| {
        conn.execute("DELETE FROM runs", [])
            .map_err(sql("delete"))?;
        Err::<(), _>(StoreError::Invalid("changed my mind".into()))
    }))
    .await;
    let dup = queued(store.claim_run(twin)).await;
    let panics = queued(store.call(|_| -> Result<(), StoreError> { panic!("boom") })).await;
    let b = queued(store.claim_run(last.clone())).await;
    gate.open().await;
    a.await.unwrap();
    assert_eq!(
        half.await,
        Err(StoreError::Invalid("changed my mind".into()))
    );
    assert!(matches!(dup.await, Err(StoreError::Conflict(_))));
    assert!(matches!(panics.await, Err(StoreError::Internal(_))));
    b.await.unwrap();
    store.close().unwrap();

    // Both good claims are on disk, from another connection.
    let conn = raw(&path);
    let mut agents: Vec<String> = conn
        .prepare("SELECT agent FROM runs ORDER BY agent")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    agents.sort();
    assert_eq!(agents, ["a", "b"]);
}

#[tokio::test]
async fn every_job_of_a_group_is_answered_after_the_commit() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let runs: Vec<NewRun> = (0..20).map(|i| new_run(&format!("agent{i}"))).collect();
    let gate = Gate::close(&store).await;
    let mut claims = Vec::new();
    for run in &runs {
        claims.push(queued(store.claim_run(run.clone())).await);
    }
    gate.open().await;
    for (claim, run) in claims.into_iter().zip(&runs) {
        claim.await.unwrap();
        // Answered, so committed: a separate connection sees it.
        let found: i64 = raw(&path)
            .query_row("SELECT COUNT(*) FROM runs WHERE id = ?1", [&run.id], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(found, 1, "run {} answered before it was committed", run.id);
    }
    store.close().unwrap();
}

#[tokio::test]
async fn a_transaction_lost_mid_group_fails_every_job_of_it_and_the_store_goes_on() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let (before, after) = (new_run("before"), new_run("after"));
    let gate = Gate::close(&store).await;
    let first = queued(store.claim_run(before.clone())).await;
    // What SQLite does on its own after an I/O error or a full disk: the
    // whole transaction is gone, including the claim before this job.
    let rogue =
        queued(store.call(|conn| conn.execute_batch("ROLLBACK").map_err(sql("rollback")))).await;
    let last = queued(store.claim_run(after.clone())).await;
    gate.open().await;
    // The jobs that ran lost their work; the one after was never tried.
    let results = [first.await.map(|_| ()), rogue.await, last.await.map(|_| ())];
    let messages: Vec<String> = results
        .into_iter()
        .map(|result| match result {
            Err(StoreError::Database(message)) => message,
            other => panic!("expected a rolled-back write, got {other:?}"),
        })
        .collect();
    for ran in &messages[..2] {
        assert!(
            ran.starts_with("the write was rolled back") && ran.ends_with("; retry"),
            "{ran}"
        );
    }
    assert!(
        messages[2]
            .starts_with("not written: another write of the same transaction failed first (")
            && messages[2].ends_with("in the same transaction); retry"),
        "{}",
        messages[2]
    );
    assert_eq!(store.get_run(&before.id).await, Ok(None));
    assert_eq!(store.get_run(&after.id).await, Ok(None));
    // The next group starts afresh.
    store.claim_run(new_run("later")).await.unwrap();
    store.close().unwrap();
}
