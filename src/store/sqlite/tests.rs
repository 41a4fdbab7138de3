//! Store tests of runs and events, and the helpers all store tests share;
//! each test uses a real SQLite file in a temporary directory.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use tempfile::TempDir;

use crate::store::*;
use crate::types::{RunState, Usage};

pub(super) fn db() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("aurad.db");
    (dir, path)
}

pub(super) use crate::store::testing::{fire_run, new_run, sid, text, texts};

pub(super) fn raw(path: &Path) -> Connection {
    Connection::open(path).expect("raw open")
}

pub(super) fn user_version(path: &Path) -> i64 {
    raw(path)
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap()
}

pub(super) fn seqs(path: &Path, run_id: &str) -> Vec<i64> {
    let conn = raw(path);
    let mut stmt = conn
        .prepare("SELECT seq FROM events WHERE run_id = ?1 ORDER BY seq")
        .unwrap();
    stmt.query_map([run_id], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn errors_for_unknown_runs_duplicates_and_bad_states() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let run = new_run("a");
    store.claim_run(run.clone()).await.unwrap();
    assert!(matches!(
        store.claim_run(run.clone()).await,
        Err(StoreError::Conflict(_))
    ));
    assert!(matches!(
        store.append_events("nope", vec![text("x")]).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store
            .finish_run("nope", RunState::Failed, None, None, Usage::default())
            .await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store
            .finish_run(&run.id, RunState::Running, None, None, Usage::default())
            .await,
        Err(StoreError::Invalid(_))
    ));
    assert!(matches!(
        store.run_events("nope").await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(store.run_events(&run.id).await.unwrap(), vec![]);
    store.append_events(&run.id, vec![]).await.unwrap();
    assert_eq!(store.get_run("ffffffff").await.unwrap(), None);
    assert!(matches!(
        store.get_run("abc").await,
        Err(StoreError::Invalid(_))
    ));
}

#[tokio::test]
async fn prefix_lookup_and_ambiguity() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    for id in ["abcd1111", "abcd2222", "abce3333"] {
        store
            .claim_run(NewRun {
                id: id.into(),
                ..new_run("a")
            })
            .await
            .unwrap();
    }
    assert_eq!(
        store.get_run_blocking("abcd1").unwrap().unwrap().id,
        "abcd1111"
    );
    assert_eq!(
        store.get_run_blocking("abce").unwrap().unwrap().id,
        "abce3333"
    );
    assert_eq!(
        store.get_run_blocking("abcd2222").unwrap().unwrap().id,
        "abcd2222"
    );
    assert_eq!(store.get_run_blocking("abcf").unwrap(), None);
    let err = store.get_run_blocking("abcd").unwrap_err();
    assert_eq!(
        err,
        StoreError::Ambiguous {
            prefix: "abcd".into(),
            matches: vec!["abcd1111".into(), "abcd2222".into()]
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("abcd1111, abcd2222") && message.contains("more characters"),
        "{message}"
    );
    // A whole id that is also a prefix of another id is found exactly.
    store
        .claim_run(NewRun {
            id: "abcd".into(),
            ..new_run("a")
        })
        .await
        .unwrap();
    assert_eq!(store.get_run_blocking("abcd").unwrap().unwrap().id, "abcd");
}

#[tokio::test]
async fn seq_continues_across_appends_and_reopen_without_mixing_runs() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let (a, b) = (new_run("a"), new_run("b"));
    store.claim_run(a.clone()).await.unwrap();
    store.claim_run(b.clone()).await.unwrap();
    store
        .append_events(&a.id, vec![text("a1"), text("a2")])
        .await
        .unwrap();
    store.append_events(&b.id, vec![text("b1")]).await.unwrap();
    store.append_events(&a.id, vec![text("a3")]).await.unwrap();
    store.close().unwrap();

    let store = Store::open(&path).unwrap();
    store.append_events(&a.id, vec![text("a4")]).await.unwrap();
    store
        .append_events(&b.id, vec![text("b2"), text("b3")])
        .await
        .unwrap();
    assert_eq!(
        texts(&store.run_events(&a.id).await.unwrap()),
        ["a1", "a2", "a3", "a4"]
    );
    assert_eq!(
        texts(&store.run_events(&b.id).await.unwrap()),
        ["b1", "b2", "b3"]
    );
    store.close().unwrap();
    assert_eq!(seqs(&path, &a.id), [1, 2, 3, 4]);
    assert_eq!(seqs(&path, &b.id), [1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_keep_seq_unique() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    // A second handle on the same file stands for a second process.
    let other = Store::open(&path).unwrap();
    let run = new_run("a");
    store.claim_run(run.clone()).await.unwrap();
    let mut tasks = Vec::new();
    for task in 0..8 {
        let handle = if task % 2 == 0 {
            store.clone()
        } else {
            other.clone()
        };
        let id = run.id.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10 {
                let batch = vec![
                    text(&format!("{task}.{i}.x")),
                    text(&format!("{task}.{i}.y")),
                ];
                handle.append_events(&id, batch).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let events = texts(&store.run_events(&run.id).await.unwrap());
    assert_eq!(events.len(), 160);
    // Each batch is one transaction: its two events are adjacent.
    for pair in events.chunks(2) {
        assert_eq!(
            pair[0].trim_end_matches(".x"),
            pair[1].trim_end_matches(".y"),
            "{pair:?}"
        );
    }
    // Each task's batches keep their order.
    for task in 0..8 {
        let mine: Vec<&String> = events
            .iter()
            .filter(|e| e.starts_with(&format!("{task}.")))
            .collect();
        let expected: Vec<String> = (0..10)
            .flat_map(|i| [format!("{task}.{i}.x"), format!("{task}.{i}.y")])
            .collect();
        assert_eq!(mine, expected.iter().collect::<Vec<_>>());
    }
    store.close().unwrap();
    other.close().unwrap();
    assert_eq!(seqs(&path, &run.id), (1..=160).collect::<Vec<i64>>());
}

#[tokio::test]
async fn list_filters_limit_and_order() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let mut ids = Vec::new();
    for agent in ["a", "b", "a", "b", "a"] {
        let run = new_run(agent);
        store.claim_run(run.clone()).await.unwrap();
        ids.push(run.id);
    }
    store
        .finish_run(
            &ids[2],
            RunState::Failed,
            Some("boom".into()),
            None,
            Usage::default(),
        )
        .await
        .unwrap();
    let list = |agent: Option<&str>, state: Option<RunState>, limit: usize| {
        let filter = RunFilter {
            parent: None,
            agent: agent.map(String::from),
            state,
            limit,
        };
        store
            .list_runs_blocking(&filter)
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(list(None, None, 0), newest_first);
    assert_eq!(list(None, None, 2), newest_first[..2]);
    assert_eq!(
        list(Some("a"), None, 0),
        [ids[4].clone(), ids[2].clone(), ids[0].clone()]
    );
    assert_eq!(list(Some("a"), None, 1), [ids[4].clone()]);
    assert_eq!(list(None, Some(RunState::Failed), 0), [ids[2].clone()]);
    assert_eq!(
        list(Some("b"), Some(RunState::Failed), 0),
        Vec::<String>::new()
    );
    assert_eq!(
        list(Some("b"), Some(RunState::Running), 0),
        [ids[3].clone(), ids[1].clone()]
    );
    assert_eq!(list(Some("zzz"), None, 0), Vec::<String>::new());
    let failed = store.get_run_blocking(&ids[2]).unwrap().unwrap();
    assert_eq!(failed.error.as_deref(), Some("boom"));
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
