//! Store tests of scheduled fires, queued runs, event seqs for streaming and
//! the reader thread; each uses a real SQLite file in a temporary directory.

use chrono::{TimeZone, Utc};

use super::tests::{db, fire_run, new_run, sid, text};
use super::*;
use crate::store::*;
use crate::types::{RunEvent, RunState, Usage};

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 30, h, m, s).unwrap()
}

#[tokio::test]
async fn a_fire_is_claimed_once_even_across_restarts() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let first = fire_run("a", 0, at(1, 0, 0));
    store.claim_run(first.clone()).await.unwrap();
    let err = store
        .claim_run(fire_run("a", 0, at(1, 0, 0)))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::FireTaken {
            agent: "a".into(),
            schedule_id: sid("a", 0),
            scheduled_for: "2025-03-30T01:00:00.000Z".into(),
        }
    );
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "schedule {} fire at 2025-03-30T01:00:00.000Z",
            sid("a", 0)
        )) && message.contains("at most once"),
        "{message}"
    );
    // The same instant for another schedule or agent, another instant, and
    // manual runs (no fire) are all fine.
    store
        .claim_run(fire_run("a", 1, at(1, 0, 0)))
        .await
        .unwrap();
    store
        .claim_run(fire_run("b", 0, at(1, 0, 0)))
        .await
        .unwrap();
    store
        .claim_run(fire_run("a", 0, at(1, 0, 1)))
        .await
        .unwrap();
    let manual = new_run("a");
    store.claim_run(manual.clone()).await.unwrap();
    store.claim_run(new_run("a")).await.unwrap();
    // A queued claim takes its fire too.
    let queued = NewRun {
        state: RunState::Queued,
        ..fire_run("a", 2, at(2, 0, 0))
    };
    store.claim_run(queued).await.unwrap();
    assert!(matches!(
        store.claim_run(fire_run("a", 2, at(2, 0, 0))).await,
        Err(StoreError::FireTaken { .. })
    ));
    // An id in use stays a conflict, with or without a fire.
    let reused = NewRun {
        id: first.id.clone(),
        ..fire_run("a", 0, at(3, 0, 0))
    };
    assert!(matches!(
        store.claim_run(reused).await,
        Err(StoreError::Conflict(_))
    ));
    let record = store.get_run(&first.id).await.unwrap().unwrap();
    assert_eq!(record.schedule_id, Some(sid("a", 0)));
    assert_eq!(
        record
            .scheduled_for
            .map(crate::types::timestamp::millis_text),
        Some("2025-03-30T01:00:00.000Z".to_string())
    );
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(json["schedule_id"], sid("a", 0).as_str());
    assert_eq!(json["scheduled_for"], "2025-03-30T01:00:00.000Z");
    let manual = store.get_run(&manual.id).await.unwrap().unwrap();
    assert_eq!((manual.schedule_id, manual.scheduled_for), (None, None));
    store.close().unwrap();

    let store = Store::open(&path).unwrap();
    assert!(matches!(
        store.claim_run(fire_run("a", 0, at(1, 0, 0))).await,
        Err(StoreError::FireTaken { .. })
    ));
    assert_eq!(
        store
            .list_runs_blocking(&RunFilter::default())
            .unwrap()
            .len(),
        7
    );
    store.close().unwrap();
}

#[tokio::test]
async fn claims_are_queued_or_running_only() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    for state in RunState::ALL.into_iter().filter(|s| s.is_final()) {
        let run = NewRun {
            state,
            ..new_run("a")
        };
        let err = store.claim_run(run).await.unwrap_err();
        assert!(
            matches!(&err, StoreError::Invalid(m) if m.contains("record_unrun")),
            "{err}"
        );
    }
    assert_eq!(
        store.list_runs(&RunFilter::default()).await.unwrap(),
        vec![]
    );
    store.close().unwrap();
}

#[tokio::test]
async fn a_queued_run_starts_once() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let run = NewRun {
        state: RunState::Queued,
        ..new_run("a")
    };
    store.claim_run(run.clone()).await.unwrap();
    let queued = store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(queued.state, RunState::Queued);
    assert_eq!(queued.started_at, None);
    assert_eq!(queued.owner.as_deref(), Some("pid:1"));
    // Events may be stored while it waits.
    store.append_events(&run.id, vec![text("x")]).await.unwrap();
    assert!(store.start_run(&run.id).await.unwrap());
    let running = store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(running.state, RunState::Running);
    let started = running.started_at.unwrap();
    assert!(started >= running.created_at, "{started}");
    // Not queued any more: no change.
    assert!(!store.start_run(&run.id).await.unwrap());
    assert_eq!(store.get_run(&run.id).await.unwrap().unwrap(), running);
    let err = store.start_run("nope").await.unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    store.close().unwrap();
}

#[tokio::test]
async fn a_run_cancelled_while_queued_never_starts() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let (a, b) = (
        NewRun {
            state: RunState::Queued,
            ..new_run("a")
        },
        NewRun {
            state: RunState::Queued,
            ..new_run("a")
        },
    );
    store.claim_run(a.clone()).await.unwrap();
    store.claim_run(b.clone()).await.unwrap();
    let reason = "cancelled while queued".to_string();
    let finished = RunEvent::Finished {
        state: RunState::Cancelled,
        reason: Some(reason.clone()),
        output: None,
        usage: Usage::default(),
        cost_usd: None,
        result: None,
    };
    let seq = store
        .finish_run_with_events(
            &a.id,
            vec![finished.clone()],
            RunState::Cancelled,
            Some(reason.clone()),
            None,
            Usage::default(),
        )
        .await
        .unwrap();
    assert_eq!(seq, 1);
    store
        .finish_run(&b.id, RunState::Cancelled, None, None, Usage::default())
        .await
        .unwrap();
    for id in [&a.id, &b.id] {
        assert!(!store.start_run(id).await.unwrap());
        let run = store.get_run(id).await.unwrap().unwrap();
        assert_eq!(run.state, RunState::Cancelled);
        assert_eq!(run.started_at, None);
        assert!(run.finished_at.is_some());
    }
    assert_eq!(
        store.get_run(&a.id).await.unwrap().unwrap().error,
        Some(reason)
    );
    assert_eq!(store.run_events(&a.id).await.unwrap(), vec![finished]);
    store.close().unwrap();
}

#[tokio::test]
async fn appends_return_seqs_and_events_after_a_seq_can_be_read() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let (run, other) = (new_run("a"), new_run("a"));
    store.claim_run(run.clone()).await.unwrap();
    store.claim_run(other.clone()).await.unwrap();
    let id = run.id.as_str();
    assert_eq!(store.append_events(id, vec![]).await.unwrap(), 0);
    assert_eq!(store.run_events_after(id, 0).await.unwrap(), vec![]);
    assert_eq!(
        store
            .append_events(id, vec![text("a"), text("b")])
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store
            .append_events(&other.id, vec![text("z")])
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.append_events(id, vec![text("c")]).await.unwrap(), 3);
    assert_eq!(store.append_events(id, vec![]).await.unwrap(), 3);
    assert_eq!(
        store.run_events_after(id, 0).await.unwrap(),
        vec![(1, text("a")), (2, text("b")), (3, text("c"))]
    );
    assert_eq!(
        store.run_events_after(id, 2).await.unwrap(),
        vec![(3, text("c"))]
    );
    assert_eq!(store.run_events_after(id, 3).await.unwrap(), vec![]);
    assert_eq!(store.run_events_after(id, -5).await.unwrap().len(), 3);
    let last = store
        .finish_run_with_events(
            id,
            vec![text("d")],
            RunState::Succeeded,
            None,
            None,
            Usage::default(),
        )
        .await
        .unwrap();
    assert_eq!(last, 4);
    // Finishing without events reports the last seq as it is.
    let last = store
        .finish_run_with_events(
            &other.id,
            vec![],
            RunState::Failed,
            None,
            None,
            Usage::default(),
        )
        .await
        .unwrap();
    assert_eq!(last, 1);
    assert_eq!(
        store.run_events_after_blocking(id, 3).unwrap(),
        vec![(4, text("d"))]
    );
    for err in [
        store.run_events_after("nope", 0).await.unwrap_err(),
        store.run_events_after_blocking("nope", 0).unwrap_err(),
        store.append_events("nope", vec![]).await.unwrap_err(),
    ] {
        assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    }
    store.close().unwrap();
}

fn usage_event(input: u64, output: u64, cost_usd: Option<f64>) -> RunEvent {
    RunEvent::Usage {
        iteration: 1,
        usage: Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            cached_input_tokens: None,
        },
        cost_usd,
    }
}

#[tokio::test]
async fn a_running_run_carries_what_its_stored_usage_events_spent() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let (run, queued) = (
        new_run("a"),
        NewRun {
            state: RunState::Queued,
            ..new_run("a")
        },
    );
    store.claim_run(run.clone()).await.unwrap();
    store.claim_run(queued.clone()).await.unwrap();
    let id = run.id.as_str();
    let read = |id: &str| {
        let (store, id) = (store.clone(), id.to_owned());
        async move { store.get_run(&id).await.unwrap().unwrap() }
    };
    // Nothing spent yet: unknown, not zero.
    store.append_events(id, vec![text("a")]).await.unwrap();
    let row = read(id).await;
    assert_eq!((row.usage, row.cost_usd), (Usage::default(), None));

    // Two model calls in one batch, a third in another; one of unknown cost.
    store
        .append_events(
            id,
            vec![
                usage_event(10, 5, Some(0.25)),
                text("b"),
                usage_event(20, 1, None),
            ],
        )
        .await
        .unwrap();
    store
        .append_events(id, vec![usage_event(1, 1, Some(0.5))])
        .await
        .unwrap();
    let row = read(id).await;
    assert_eq!(row.usage.input_tokens, Some(31));
    assert_eq!(row.usage.output_tokens, Some(7));
    assert_eq!(row.usage.cached_input_tokens, None);
    assert_eq!(row.cost_usd, Some(0.75));
    let since = Utc::now() - chrono::Duration::hours(1);
    assert_eq!(store.cost_since("a", since, "other").await.unwrap(), 0.75);
    assert_eq!(store.cost_since("a", since, id).await.unwrap(), 0.0);

    // The final totals are the engine's own, and a finished run's row is
    // no longer added to.
    let end = RunEnd {
        usage: Usage {
            input_tokens: Some(31),
            output_tokens: Some(7),
            cached_input_tokens: None,
        },
        cost_usd: Some(0.75),
        ..RunEnd::new(RunState::Succeeded, None)
    };
    store.finish_run_as(id, vec![], end).await.unwrap();
    store
        .append_events(id, vec![usage_event(100, 100, Some(9.0))])
        .await
        .unwrap();
    assert_eq!(read(id).await.cost_usd, Some(0.75));
    // A queued run is not added to either.
    store
        .append_events(&queued.id, vec![usage_event(1, 1, Some(1.0))])
        .await
        .unwrap();
    assert_eq!(read(&queued.id).await.cost_usd, None);

    // A run finished without totals (`aurad run` stopped at once by a
    // second Ctrl-C) keeps what its events stored: it still counts.
    let stopped = new_run("a");
    store.claim_run(stopped.clone()).await.unwrap();
    store
        .append_events(&stopped.id, vec![usage_event(4, 2, Some(0.125))])
        .await
        .unwrap();
    store
        .finish_run(
            &stopped.id,
            RunState::Cancelled,
            Some("cancelled".into()),
            None,
            Usage::default(),
        )
        .await
        .unwrap();
    let row = read(&stopped.id).await;
    assert_eq!(row.state, RunState::Cancelled);
    assert_eq!(
        (row.usage.input_tokens, row.cost_usd),
        (Some(4), Some(0.125))
    );
    store.close().unwrap();
}

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
    assert_eq!(clone.start_run("abcd").await, Err(StoreError::Closed));
    clone.close().unwrap();
}

#[test]
fn in_memory_databases_are_refused() {
    for name in ["", ":memory:"] {
        let err = Store::open(Path::new(name)).unwrap_err();
        assert!(err.to_string().contains("needs a database file"), "{err}");
    }
}
