//! SQLite-only store tests: reads on the reader thread never wait behind a
//! long write, the reader connection only reads, statements stay compiled
//! from one execution to the next, closing stops both threads, in-memory
//! databases are refused. The interface tests of runs
//! run on both backends in `store/runs_tests.rs`.

use chrono::Utc;
use rusqlite::Connection;

use super::tests::{db, new_run, sid, text};
use super::*;
use crate::store::*;
use crate::types::RunState;

#[tokio::test]
async fn reads_do_not_wait_for_a_long_write() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let run = new_run("a");
    store.claim_run(run.clone()).await.unwrap();
    let hidden = new_run_id();
    let (began, began_rx) = tokio::sync::oneshot::channel();
    let (release, release_rx) = std::sync::mpsc::channel::<()>();
    let writer = store.clone();
    let sent = hidden.clone();
    // Holds the writer thread, inside a write transaction, until released.
    let long_write = tokio::spawn(async move {
        writer
            .call(move |conn| {
                let tx = conn.savepoint().map_err(sql("begin"))?;
                tx.execute(
                    "INSERT INTO runs (id, agent, state, \"trigger\", input, model,
                                       definition_hash, created_at)
                     VALUES (?1, 'a', 'running', 'cli', '', 'm', 'h', '2099-01-01T00:00:00.000Z')",
                    [sent],
                )
                .map_err(sql("insert"))?;
                let _ = began.send(());
                release_rx.recv().map_err(|_| StoreError::Closed)?;
                tx.commit().map_err(sql("commit"))
            })
            .await
    });
    began_rx.await.unwrap();
    // Queued behind the long write on the writer thread.
    let queued_write = tokio::spawn({
        let store = store.clone();
        let id = run.id.clone();
        async move { store.append_events(&id, vec![text("late")]).await }
    });
    let guard = std::time::Duration::from_secs(30);
    let reads = async {
        let got = store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(got.state, RunState::Running);
        // The uncommitted row is not visible.
        assert_eq!(store.get_run(&hidden).await.unwrap(), None);
        assert_eq!(
            store.list_runs(&RunFilter::default()).await.unwrap().len(),
            1
        );
        assert_eq!(store.run_events(&run.id).await.unwrap(), vec![]);
        assert_eq!(store.consecutive_failures("a").await.unwrap(), 0);
        assert_eq!(store.last_run("a").await.unwrap().unwrap().id, run.id);
        let day = Utc::now() - chrono::Duration::days(1);
        assert_eq!(store.cost_since("a", day, "").await.unwrap(), 0.0);
        // A recall with nothing to find (no memories in the namespace).
        let recalled = store.memory_recall("empty", "what was decided", 5, 0.05, Utc::now());
        assert_eq!(recalled.await.unwrap(), vec![]);
        let blocking = store.clone();
        let id = run.id.clone();
        tokio::task::spawn_blocking(move || blocking.get_run_blocking(&id))
            .await
            .unwrap()
            .unwrap()
            .unwrap()
    };
    let got = tokio::time::timeout(guard, reads)
        .await
        .expect("reads waited for the writer thread");
    assert_eq!(got.id, run.id);
    assert!(!queued_write.is_finished());
    release.send(()).unwrap();
    long_write.await.unwrap().unwrap();
    assert_eq!(queued_write.await.unwrap().unwrap(), 1);
    // Once the write is committed, reads see it.
    assert!(store.get_run(&hidden).await.unwrap().is_some());
    assert_eq!(store.run_events(&run.id).await.unwrap(), vec![text("late")]);
    store.close().unwrap();
}

#[tokio::test]
async fn the_reader_connection_only_reads() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let (query_only, timeout): (i64, i64) = store
        .read(|conn| {
            let q = conn.query_row("PRAGMA query_only", [], |r| r.get(0));
            let t = conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0));
            Ok((q.map_err(sql("q"))?, t.map_err(sql("t"))?))
        })
        .await
        .unwrap();
    assert_eq!((query_only, timeout), (1, 5000));
    let write = store
        .read(|conn| {
            conn.execute("DELETE FROM runs", [])
                .map_err(sql("deleting"))
        })
        .await;
    assert!(matches!(write, Err(StoreError::Database(_))), "{write:?}");
    store.close().unwrap();
}

#[tokio::test]
async fn close_stops_both_threads() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let clone = store.clone();
    store.close().unwrap();
    assert_eq!(clone.get_run("abcd").await, Err(StoreError::Closed));
    assert_eq!(
        clone.last_fire("a", &sid("a", 0)).await,
        Err(StoreError::Closed)
    );
    assert_eq!(
        clone.start_run("abcd", "pid:1").await,
        Err(StoreError::Closed)
    );
    clone.close().unwrap();
}

#[test]
fn in_memory_databases_are_refused() {
    for name in ["", ":memory:"] {
        let err = Store::open(Path::new(name)).unwrap_err();
        assert!(err.to_string().contains("needs a database file"), "{err}");
    }
}

/// Each statement prepared on `conn` with how many times SQLite compiled it
/// again since (`SQLITE_STMTSTATUS_REPREPARE`).
fn recompiled(conn: &mut Connection) -> Result<Vec<(String, i32)>, StoreError> {
    use rusqlite::ffi;
    let mut seen = Vec::new();
    // SAFETY: `conn` is borrowed mutably on its own thread for the whole
    // walk, so no statement is finalized or prepared meanwhile; every
    // pointer comes from `sqlite3_next_stmt` on this connection, and the
    // SQL text is copied before the next call.
    unsafe {
        let db = conn.handle();
        let mut stmt = ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
        while !stmt.is_null() {
            let count = ffi::sqlite3_stmt_status(stmt, ffi::SQLITE_STMTSTATUS_REPREPARE, 0);
            let text = std::ffi::CStr::from_ptr(ffi::sqlite3_sql(stmt));
            seen.push((text.to_string_lossy().into_owned(), count));
            stmt = ffi::sqlite3_next_stmt(db, stmt);
        }
    }
    Ok(seen)
}

#[tokio::test]
async fn statements_are_compiled_once_per_connection() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    // A run's path, twice over, so every cached statement runs again with
    // other values bound: claim, event batches (each reads the last seq),
    // the final state, and the reads a run and its watchers make.
    for _ in 0..2 {
        let run = new_run("a");
        store.claim_run(run.clone()).await.unwrap();
        for word in ["one", "two", "three"] {
            store
                .append_events(&run.id, vec![text(word)])
                .await
                .unwrap();
        }
        store.append_events(&run.id, Vec::new()).await.unwrap();
        store
            .finish_run_as(
                &run.id,
                vec![text("end")],
                RunEnd::new(RunState::Succeeded, None),
            )
            .await
            .unwrap();
        store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(store.run_events(&run.id).await.unwrap().len(), 4);
        store.consecutive_failures("a").await.unwrap();
    }
    let writer = store.call(recompiled).await.unwrap();
    let reader = store.read(recompiled).await.unwrap();
    assert!(
        writer.iter().any(|(sql, _)| sql.contains("MAX(seq)")),
        "the last seq's statement is not cached: {writer:?}"
    );
    let again: Vec<_> = writer
        .iter()
        .chain(&reader)
        .filter(|(_, n)| *n > 0)
        .collect();
    assert!(again.is_empty(), "statements compiled again: {again:?}");
    store.close().unwrap();
}
