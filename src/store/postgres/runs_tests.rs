//! PostgreSQL-only tests of runs (the interface cases run on both backends
//! in `store/runs_tests.rs`): times and fire instants kept to the
//! millisecond, and the races of several nodes: one fire claimed by two
//! nodes at once, one queued run started twice, events appended from two
//! nodes to one run and to different runs. Each test has a database of its
//! own on a real server; two `Postgres` handles on it stand for two nodes.
//! Also the helpers this group's PostgreSQL tests share.

use std::sync::Barrier;

use chrono::{DateTime, TimeZone, Utc};

use super::testing::TestDb;
use super::{Postgres, pg};
use crate::store::{NewRun, RunEnd, RunFilter, StoreError};
use crate::types::{RunEvent, RunState, Usage};

/// A node on the test database.
pub(super) fn node(db: &TestDb) -> Postgres {
    Postgres::connect(db.url()).expect("connecting to the test database")
}

/// Waits for a store future on this (non-async) test thread, as the
/// facade's blocking methods will.
pub(super) fn block<T>(f: impl std::future::Future<Output = T>) -> T {
    futures::executor::block_on(f)
}

pub(super) use crate::store::testing::{fire_run, new_run, sid, text, texts};

/// Runs raw SQL (a test editing rows behind the store's back).
pub(super) fn execute(store: &Postgres, statement: &str) {
    let statement = statement.to_owned();
    block(store.with_client(move |client| async move {
        client
            .batch_execute(&statement)
            .await
            .map_err(pg("test statement"))
    }))
    .unwrap();
}

/// The first column of a one-row query, as a number.
pub(super) fn count(store: &Postgres, query: &str) -> i64 {
    let query = query.to_owned();
    block(store.with_client(move |client| async move {
        let row = client
            .query_one(&query, &[])
            .await
            .map_err(pg("test query"))?;
        Ok(row.get::<_, i64>(0))
    }))
    .unwrap()
}

/// The stored seqs of a run's events, in order.
pub(super) fn seqs(store: &Postgres, run_id: &str) -> Vec<i64> {
    let run_id = run_id.to_owned();
    block(store.with_client(move |client| async move {
        let rows = client
            .query(
                "SELECT seq FROM events WHERE run_id = $1 ORDER BY seq",
                &[&run_id],
            )
            .await
            .map_err(pg("test query"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }))
    .unwrap()
}

/// Runs `a` on node `one` and `b` on node `two` at the same instant (two
/// threads released by one barrier) and returns both outcomes.
pub(super) fn race<A: Send, B: Send>(
    one: &Postgres,
    two: &Postgres,
    a: impl FnOnce(&Postgres) -> A + Send,
    b: impl FnOnce(&Postgres) -> B + Send,
) -> (A, B) {
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let left = s.spawn(|| {
            barrier.wait();
            a(one)
        });
        let right = s.spawn(|| {
            barrier.wait();
            b(two)
        });
        (left.join().unwrap(), right.join().unwrap())
    })
}

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 30, h, m, s).unwrap()
}

#[test]
fn claim_append_finish_round_trip() {
    let Some(db) = TestDb::create("pg_claim_round_trip") else {
        return;
    };
    let store = node(&db);
    let run = new_run("triage");
    let claimed = block(store.claim_run(run.clone())).unwrap();
    assert_eq!(
        block(store.get_run(&run.id)).unwrap(),
        Some(claimed.clone())
    );
    assert_eq!(claimed.state, RunState::Running);
    assert_eq!(claimed.owner.as_deref(), Some("pid:1"));
    assert_eq!(claimed.started_at, Some(claimed.created_at));
    assert_eq!(claimed.finished_at, None);
    assert_eq!(claimed.usage, Usage::default());
    // Stored to the millisecond, as SQLite keeps it.
    assert_eq!(claimed.created_at.timestamp_subsec_nanos() % 1_000_000, 0);
    let json = serde_json::to_value(&claimed).unwrap();
    let shown = json["created_at"].as_str().unwrap();
    assert!(shown.ends_with('Z') && shown.len() == 24, "{shown}");

    let usage = Usage {
        input_tokens: Some(12),
        output_tokens: Some(34),
        cached_input_tokens: Some(2),
    };
    let events = vec![
        RunEvent::Started {
            run_id: run.id.clone(),
            agent: run.agent.clone(),
            model: run.model.clone(),
            trigger: run.trigger,
            definition_hash: run.definition_hash.clone(),
            input: run.input.clone(),
        },
        text("Hi"),
        RunEvent::Finished {
            state: RunState::Succeeded,
            reason: None,
            output: Some("Hi".into()),
            usage,
            cost_usd: None,
            result: None,
        },
    ];
    assert_eq!(
        block(store.append_events(&run.id, events.clone())).unwrap(),
        3
    );
    let end = RunEnd {
        output: Some("Hi".into()),
        usage,
        cost_usd: Some(0.5),
        result: Some(serde_json::json!({"label": "bug"})),
        ..RunEnd::new(RunState::Succeeded, None)
    };
    assert_eq!(block(store.finish_run_as(&run.id, vec![], end)).unwrap(), 3);
    let done = block(store.get_run(&run.id)).unwrap().unwrap();
    assert_eq!(done.state, RunState::Succeeded);
    assert_eq!(done.output.as_deref(), Some("Hi"));
    assert_eq!(done.usage, usage);
    assert_eq!(done.cost_usd, Some(0.5));
    assert_eq!(done.result, Some(serde_json::json!({"label": "bug"})));
    assert!(done.finished_at.is_some());
    assert_eq!(block(store.run_events(&run.id)).unwrap(), events);
    assert_eq!(
        block(store.list_runs(&RunFilter::default())).unwrap(),
        vec![done.clone()]
    );
    // Another node reads the same.
    let other = node(&db);
    assert_eq!(block(other.get_run(&run.id)).unwrap(), Some(done));
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM events WHERE kind = 'text_delta'"
        ),
        1
    );
}

#[test]
fn a_fire_is_claimed_once_even_across_restarts() {
    let Some(db) = TestDb::create("pg_fire_once") else {
        return;
    };
    let store = node(&db);
    let first = fire_run("a", 0, at(1, 0, 0) + chrono::Duration::microseconds(1_250));
    block(store.claim_run(first.clone())).unwrap();
    // The instant is kept to the millisecond: the same fire.
    let err = block(store.claim_run(fire_run(
        "a",
        0,
        at(1, 0, 0) + chrono::Duration::milliseconds(1),
    )))
    .unwrap_err();
    assert_eq!(
        err,
        StoreError::FireTaken {
            agent: "a".into(),
            schedule_id: sid("a", 0),
            scheduled_for: "2025-03-30T01:00:00.001Z".into(),
        }
    );
    assert!(err.to_string().contains("at most once"), "{err}");
    block(store.claim_run(fire_run("a", 1, at(1, 0, 0)))).unwrap();
    block(store.claim_run(fire_run("b", 0, at(1, 0, 0)))).unwrap();
    block(store.claim_run(fire_run("a", 0, at(1, 0, 1)))).unwrap();
    block(store.claim_run(new_run("a"))).unwrap();
    block(store.claim_run(new_run("a"))).unwrap();
    // A queued claim takes its fire too.
    let queued = NewRun {
        state: RunState::Queued,
        ..fire_run("a", 2, at(2, 0, 0))
    };
    block(store.claim_run(queued)).unwrap();
    assert!(matches!(
        block(store.claim_run(fire_run("a", 2, at(2, 0, 0)))),
        Err(StoreError::FireTaken { .. })
    ));
    // An id in use stays a conflict, with or without a fire.
    let reused = NewRun {
        id: first.id.clone(),
        ..fire_run("a", 0, at(3, 0, 0))
    };
    assert!(matches!(
        block(store.claim_run(reused)),
        Err(StoreError::Conflict(_))
    ));
    let record = block(store.get_run(&first.id)).unwrap().unwrap();
    assert_eq!(record.schedule_id, Some(sid("a", 0)));
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(json["scheduled_for"], "2025-03-30T01:00:00.001Z");
    drop(store);

    let store = node(&db);
    assert!(matches!(
        block(store.claim_run(fire_run(
            "a",
            0,
            at(1, 0, 0) + chrono::Duration::milliseconds(1)
        ))),
        Err(StoreError::FireTaken { .. })
    ));
    assert_eq!(
        block(store.list_runs(&RunFilter::default())).unwrap().len(),
        7
    );
}

#[test]
fn two_nodes_claiming_one_fire_make_one_run() {
    let Some(db) = TestDb::create("pg_fire_race") else {
        return;
    };
    let (one, two) = (node(&db), node(&db));
    for minute in 0..20 {
        let fire = at(4, minute, 0);
        let (a, b) = race(
            &one,
            &two,
            |n| block(n.claim_run(fire_run("a", 0, fire))),
            |n| {
                // Half the rounds the other node records the fire missed.
                if minute % 2 == 0 {
                    block(n.claim_run(fire_run("a", 0, fire))).map(|_| true)
                } else {
                    block(n.record_unrun(fire_run("a", 0, fire), RunState::Missed, "m".into()))
                }
            },
        );
        match (a, b) {
            (Ok(_), Err(StoreError::FireTaken { .. })) | (Ok(_), Ok(false)) => {}
            (Err(StoreError::FireTaken { .. }), Ok(true)) => {}
            other => panic!("minute {minute}: not exactly one run: {other:?}"),
        }
    }
    assert_eq!(count(&one, "SELECT COUNT(*) FROM runs"), 20);
    assert_eq!(
        count(
            &one,
            "SELECT COUNT(*) FROM (SELECT scheduled_for FROM runs GROUP BY scheduled_for \
             HAVING COUNT(*) = 1) f"
        ),
        20
    );
}

#[test]
fn a_queued_run_starts_once_even_when_two_nodes_start_it() {
    let Some(db) = TestDb::create("pg_start_once") else {
        return;
    };
    let (one, two) = (node(&db), node(&db));
    let run = NewRun {
        state: RunState::Queued,
        template_context: Some(r#"{"x":1}"#.into()),
        session_id: None,
        ..new_run("a")
    };
    let queued = block(one.claim_run(run.clone())).unwrap();
    assert_eq!(queued.state, RunState::Queued);
    assert_eq!(queued.started_at, None);
    assert_eq!(
        block(two.queued_template_context(&run.id))
            .unwrap()
            .as_deref(),
        Some(r#"{"x":1}"#)
    );
    // Events may be stored while it waits.
    block(one.append_events(&run.id, vec![text("x")])).unwrap();
    let (a, b) = race(
        &one,
        &two,
        |n| block(n.start_run(&run.id, "pid:1")).unwrap(),
        |n| block(n.start_run(&run.id, "pid:1")).unwrap(),
    );
    assert!(a ^ b, "started {a} and {b}");
    let running = block(one.get_run(&run.id)).unwrap().unwrap();
    assert_eq!(running.state, RunState::Running);
    assert!(running.started_at.unwrap() >= running.created_at);
    assert_eq!(block(one.queued_template_context(&run.id)).unwrap(), None);
    assert!(!block(one.start_run(&run.id, "pid:1")).unwrap());
    assert_eq!(block(one.get_run(&run.id)).unwrap().unwrap(), running);
    let err = block(one.start_run("nope", "pid:1")).unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    // A running claim keeps no template variables.
    let running_claim = NewRun {
        template_context: Some("{}".into()),
        session_id: None,
        ..new_run("a")
    };
    block(one.claim_run(running_claim.clone())).unwrap();
    assert_eq!(
        block(one.queued_template_context(&running_claim.id)).unwrap(),
        None
    );
}

#[test]
fn two_nodes_appending_keep_seqs_unique_and_batches_whole() {
    let Some(db) = TestDb::create("pg_append_race") else {
        return;
    };
    let (one, two) = (node(&db), node(&db));
    let shared = new_run("a");
    block(one.claim_run(shared.clone())).unwrap();
    let own: Vec<NewRun> = (0..8).map(|_| new_run("a")).collect();
    for run in &own {
        block(two.claim_run(run.clone())).unwrap();
    }
    let barrier = Barrier::new(8);
    std::thread::scope(|s| {
        for (task, mine) in own.iter().enumerate() {
            let (handle, barrier, shared) =
                (if task % 2 == 0 { &one } else { &two }, &barrier, &shared);
            s.spawn(move || {
                barrier.wait();
                for i in 0..10 {
                    let batch = vec![
                        text(&format!("{task}.{i}.x")),
                        text(&format!("{task}.{i}.y")),
                    ];
                    block(handle.append_events(&shared.id, batch)).unwrap();
                    // Another run at the same time: its own seqs.
                    let last =
                        block(handle.append_events(&mine.id, vec![text(&format!("{i}"))])).unwrap();
                    assert_eq!(last, i + 1);
                }
            });
        }
    });
    let events = texts(&block(one.run_events(&shared.id)).unwrap());
    assert_eq!(events.len(), 160);
    for pair in events.chunks(2) {
        assert_eq!(
            pair[0].trim_end_matches(".x"),
            pair[1].trim_end_matches(".y"),
            "{pair:?}"
        );
    }
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
    assert_eq!(seqs(&one, &shared.id), (1..=160).collect::<Vec<i64>>());
    for run in &own {
        assert_eq!(seqs(&two, &run.id), (1..=10).collect::<Vec<i64>>());
        let texts = texts(&block(one.run_events(&run.id)).unwrap());
        assert_eq!(texts, (0..10).map(|i| i.to_string()).collect::<Vec<_>>());
    }
}
