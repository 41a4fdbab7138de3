//! SQLite store tests of corrupt rows, and the helpers the SQLite tests
//! share; each uses a real SQLite file in a temporary directory. The
//! interface tests of runs run on both backends in `store/runs_tests.rs`.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use tempfile::TempDir;

use crate::store::*;

pub(super) fn db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("aurad.db");
    (dir, path)
}

pub(super) use crate::store::testing::{fire_run, new_run, sid, text};

pub(super) fn raw(path: &Path) -> Connection {
    Connection::open(path).expect("raw open")
}

pub(super) fn user_version(path: &Path) -> i64 {
    raw(path)
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}
#[tokio::test]
async fn corrupt_rows_are_errors_naming_the_run() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let run = new_run("a");
    store.claim_run(run.clone()).await.unwrap();
    store
        .append_events(&run.id, vec![text("ok")])
        .await
        .unwrap();
    let conn = raw(&path);
    conn.execute(
        "UPDATE events SET data = '{\"type\":' WHERE run_id = ?1",
        [&run.id],
    )
    .unwrap();
    let err = store.run_events(&run.id).await.unwrap_err();
    assert!(matches!(&err, StoreError::CorruptEvent { run_id, seq: 1, .. } if *run_id == run.id));
    assert!(
        err.to_string()
            .contains(&format!("run {}: stored event 1", run.id)),
        "{err}"
    );
    conn.execute("UPDATE runs SET state = 'weird' WHERE id = ?1", [&run.id])
        .unwrap();
    let err = store.get_run(&run.id).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptRun { run_id, .. } if *run_id == run.id),
        "{err}"
    );
    assert!(store.list_runs(&RunFilter::default()).await.is_err());
    // The store still works after the errors.
    store.claim_run(new_run("b")).await.unwrap();
}
