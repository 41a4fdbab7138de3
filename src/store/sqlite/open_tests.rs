//! Store tests of opening, migrations, durability settings and shutdown,
//! each on a real SQLite file in a temporary directory.

use super::migrations::{MIGRATIONS, Migration, migrate_with};
use super::tests::{db, new_run, raw, text, user_version};
use super::*;
use crate::store::*;
use crate::types::{RunState, Usage};

#[test]
fn migrations_apply_once_and_reopen_is_idempotent() {
    let (_dir, path) = db();
    Sqlite::open(&path).unwrap().close().unwrap();
    assert_eq!(user_version(&path), MIGRATIONS.len() as i64);
    let mode: String = raw(&path)
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    raw(&path)
        .execute(
            "INSERT INTO runs (id, agent, state, \"trigger\", input, model, definition_hash, created_at)
             VALUES ('marker', 'a', 'running', 'cli', '', 'm', 'h', '2020-01-01T00:00:00.000Z')",
            [],
        )
        .unwrap();
    let store = Sqlite::open(&path).unwrap();
    assert_eq!(user_version(&path), MIGRATIONS.len() as i64);
    let run = store.get_run_blocking("marker").unwrap().unwrap();
    assert_eq!(run.state, RunState::Running);
    store.close().unwrap();
}

#[test]
fn memory_times_of_an_older_store_are_rewritten_in_one_form() {
    let (_dir, path) = db();
    let before = MIGRATIONS
        .iter()
        .position(|m| m.name == "memory times in one form")
        .unwrap();
    migrate_with(&mut raw(&path), &MIGRATIONS[..before]).unwrap();
    raw(&path)
        .execute_batch(
            "INSERT INTO memories (namespace, content, category, importance, created_at, updated_at, impact)
             VALUES ('n', 'kept as given', 'fact', 5, '2025-01-10T01:30:00+02:00', '2025-05-05T05:05:05.123456Z', 0),
                    ('n', 'unreadable', 'fact', 5, 'yesterday', 'yesterday', 0);",
        )
        .unwrap();
    let store = Sqlite::open(&path).unwrap();
    assert_eq!(user_version(&path), MIGRATIONS.len() as i64);
    let stored: Vec<(String, String)> = raw(&path)
        .prepare("SELECT created_at, updated_at FROM memories ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        stored,
        [
            (
                "2025-01-09T23:30:00.000Z".to_string(),
                "2025-05-05T05:05:05.123Z".to_string()
            ),
            ("yesterday".to_string(), "yesterday".to_string()),
        ]
    );
    let memory = store.memory_get_blocking("n", 1).unwrap().unwrap();
    assert_eq!(memory.created_at.to_rfc3339(), "2025-01-09T23:30:00+00:00");
    let err = store.memory_get_blocking("n", 2).unwrap_err().to_string();
    assert!(
        err.contains("memory 2: stored time \"yesterday\" is not RFC 3339")
            && err.contains("aurad memory forget 2"),
        "{err}"
    );
    store.close().unwrap();
}

#[test]
fn later_migrations_apply_and_failed_ones_roll_back() {
    let (_dir, path) = db();
    Sqlite::open(&path).unwrap().close().unwrap();
    let mut conn = raw(&path);
    let mut more: Vec<Migration> = MIGRATIONS
        .iter()
        .map(|m| Migration {
            name: m.name,
            sql: m.sql,
        })
        .collect();
    more.push(Migration {
        name: "extra",
        sql: "CREATE TABLE extra (x INTEGER);",
    });
    more.push(Migration {
        name: "broken",
        sql: "CREATE TABLE half (x); SELECT no_such_function();",
    });
    let known = MIGRATIONS.len() as i64;
    let err = migrate_with(&mut conn, &more).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("schema migration {} (broken)", known + 2)),
        "{err}"
    );
    assert_eq!(user_version(&path), known + 1);
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(tables.contains(&"extra".to_string()));
    assert!(!tables.contains(&"half".to_string()), "{tables:?}");
}

#[test]
fn newer_schema_is_refused() {
    let (_dir, path) = db();
    raw(&path).pragma_update(None, "user_version", 99).unwrap();
    let err = Sqlite::open(&path).unwrap_err();
    let known = MIGRATIONS.len() as i64;
    assert_eq!(err, StoreError::NewerSchema { found: 99, known });
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "created by a newer aurad (schema 99, this build knows {known})"
        )),
        "{message}"
    );
}

#[test]
fn not_a_database_says_what_to_do() {
    let (_dir, path) = db();
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    let err = Sqlite::open(&path).unwrap_err().to_string();
    assert!(err.contains("not a usable aurad database"), "{err}");
}

#[test]
fn open_creates_missing_directories() {
    let (dir, _) = db();
    let path = dir.path().join("data/sub/aurad.db");
    Sqlite::open(&path).unwrap().close().unwrap();
    assert!(path.exists());
}

#[test]
fn dropping_the_store_flushes_pending_work() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let clone = store.clone();
    let id = new_run_id();
    let sent = id.clone();
    // Sent without waiting for the reply, then every handle is dropped.
    store
        .shared
        .writer
        .submit(super::worker::job(
            Durability::Normal,
            move |conn| {
                conn.execute(
                    "INSERT INTO runs (id, agent, state, \"trigger\", input, model, definition_hash, created_at)
                     VALUES (?1, 'a', 'running', 'cli', '', 'm', 'h', '2020-01-01T00:00:00.000Z')",
                    [sent],
                )
                .map_err(sql("insert"))
            },
            |result: Result<usize, StoreError>| assert_eq!(result, Ok(1)),
        ))
        .unwrap();
    drop(store);
    drop(clone);
    let store = Sqlite::open(&path).unwrap();
    assert_eq!(
        store.get_run_blocking(&id).unwrap().unwrap().state,
        RunState::Running
    );
    store.close().unwrap();
}

#[tokio::test]
async fn close_flushes_and_later_calls_fail_cleanly() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let clone = store.clone();
    let run = new_run("a");
    store.claim_run(run.clone()).await.unwrap();
    store.append_events(&run.id, vec![text("x")]).await.unwrap();
    store.close().unwrap();
    assert_eq!(clone.claim_run(new_run("b")).await, Err(StoreError::Closed));
    assert_eq!(clone.get_run_blocking(&run.id), Err(StoreError::Closed));
    clone.close().unwrap();
    let store = Sqlite::open(&path).unwrap();
    assert_eq!(store.run_events_blocking(&run.id).unwrap(), vec![text("x")]);
    store.close().unwrap();
}

#[tokio::test]
async fn a_panicking_job_is_an_error_and_the_store_keeps_working() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let result: Result<(), StoreError> = store.call(|_| panic!("boom")).await;
    assert!(matches!(result, Err(StoreError::Internal(_))));
    store.claim_run(new_run("a")).await.unwrap();
    store.close().unwrap();
}

#[tokio::test]
async fn the_writer_connection_enforces_foreign_keys_and_waits_for_locks() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let (fk, timeout): (i64, i64) = store
        .call(|conn| {
            let fk = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0));
            let timeout = conn.query_row("PRAGMA busy_timeout", [], |r| r.get(0));
            Ok((fk.map_err(sql("fk"))?, timeout.map_err(sql("timeout"))?))
        })
        .await
        .unwrap();
    assert_eq!((fk, timeout), (1, 5000));
    store.close().unwrap();
}

/// The daemon spawns runs as tokio tasks: every async method's future must
/// be `Send`, and `Store` must be shareable.
#[test]
fn futures_are_send_and_store_is_sync() {
    fn send<T: Send>(_: &T) {}
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<Store>();
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let filter = RunFilter::default();
    send(&store.claim_run(new_run("a")));
    send(&store.append_events("x", vec![]));
    send(&store.finish_run_as(
        "x",
        Vec::new(),
        crate::store::RunEnd {
            output: None,
            usage: Usage::default(),
            ..crate::store::RunEnd::new(RunState::Failed, None)
        },
    ));
    send(&store.list_runs(&filter));
    send(&store.get_run("x"));
    send(&store.run_events("x"));
    send(&store.start_run("x", "pid:1"));
    send(&store.record_unrun(new_run("a"), RunState::Missed, String::new()));
    send(&store.interrupt_stale_runs(|_| true));
    send(&store.claim_delivery("a", "d", chrono::Utc::now()));
    send(&store.run_events_after("x", 0));
    send(&store.last_fire("a", &super::tests::sid("a", 0)));
    send(&store.last_run("a"));
    send(&store.consecutive_failures("a"));
    store.close().unwrap();
}

/// The size of the `-wal` file beside the database at `path` (0: none).
fn wal_size(path: &std::path::Path) -> u64 {
    std::fs::metadata(path.with_file_name("aurad.db-wal")).map_or(0, |m| m.len())
}

/// Appends 64 KiB events to run `id` until the WAL is past
/// [`WAL_LEFT_AT_CLOSE`]; how many it stored.
async fn fill_wal(store: &Sqlite, path: &std::path::Path, id: &str) -> usize {
    let big = "x".repeat(64 * 1024);
    let mut stored = 0;
    while wal_size(path) <= WAL_LEFT_AT_CLOSE {
        store.append_events(id, vec![text(&big)]).await.unwrap();
        stored += 1;
    }
    stored
}

#[tokio::test]
async fn closing_leaves_a_small_wal_and_checkpoints_a_large_one() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let run = new_run("a");
    store.claim_run(run.clone()).await.unwrap();
    store.close().unwrap();
    // The claim stays in the WAL, where it was durable already; the next
    // open reads it from there.
    let left = wal_size(&path);
    assert!(
        left > 0 && left <= WAL_LEFT_AT_CLOSE,
        "WAL left: {left} bytes"
    );
    let store = Sqlite::open(&path).unwrap();
    let got = store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(got.state, RunState::Running);
    // Past the limit, closing copies the WAL into the database file and
    // truncates it.
    let stored = fill_wal(&store, &path, &run.id).await;
    store.close().unwrap();
    assert_eq!(wal_size(&path), 0);
    let store = Sqlite::open(&path).unwrap();
    assert_eq!(store.run_events(&run.id).await.unwrap().len(), stored);
    store.close().unwrap();
}

#[tokio::test]
async fn a_large_wal_stays_while_another_connection_reads() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let run = new_run("a");
    store.claim_run(run.clone()).await.unwrap();
    let stored = fill_wal(&store, &path, &run.id).await;
    // Another process's connection in the middle of a read: the closing
    // store's checkpoint cannot truncate the WAL, gives up and closes.
    let mut other = raw(&path);
    let reading = other.transaction().unwrap();
    let seen: i64 = reading
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(seen, stored as i64);
    store.close().unwrap();
    assert!(wal_size(&path) > WAL_LEFT_AT_CLOSE);
    drop(reading);
    let store = Sqlite::open(&path).unwrap();
    assert_eq!(store.run_events(&run.id).await.unwrap().len(), stored);
    store.close().unwrap();
}
