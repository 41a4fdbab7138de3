//! Pipeline runs and steps on a real PostgreSQL server: the first context
//! stays, steps are upserted with their events in seq order, rows written
//! wrong are `CorruptRun`, take-over takes only runs of owners that are
//! gone, and two nodes taking over (or writing one run's step events) at
//! once never share a run (or a seq).

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

use chrono::{Duration, Utc};
use futures::executor::block_on;

use super::approvals_tests::{count, exec, insert_run, node, run};
use super::testing::TestDb;
use crate::store::{StepEnd, StoreError};
use crate::types::{RunEvent, RunState, StepState, Usage};

fn event(text: &str) -> RunEvent {
    RunEvent::TextDelta { text: text.into() }
}

fn end(state: StepState, child: Option<&str>) -> StepEnd {
    StepEnd {
        state,
        output: Some("out".into()),
        error: (state == StepState::Failed).then(|| "boom".into()),
        usage: Usage {
            input_tokens: Some(7),
            output_tokens: Some(3),
            cached_input_tokens: None,
        },
        cost_usd: Some(0.5),
        child_run_id: child.map(str::to_owned),
    }
}

#[test]
fn a_pipeline_run_keeps_its_first_context() {
    let Some(db) = TestDb::create("pipeline_context") else {
        return;
    };
    let store = node(&db);
    insert_run(&store, "p", "a", RunState::Running, None, Utc::now());
    insert_run(&store, "plain", "a", RunState::Running, None, Utc::now());
    block_on(store.begin_pipeline("p", Some(r#"{"x":1}"#.into()))).unwrap();
    block_on(store.begin_pipeline("p", Some(r#"{"x":2}"#.into()))).unwrap();
    assert_eq!(
        block_on(store.pipeline_context("p")).unwrap().as_deref(),
        Some(r#"{"x":1}"#)
    );
    assert_eq!(block_on(store.pipeline_context("plain")).unwrap(), None);
    assert!(block_on(store.steps_of("plain")).unwrap().is_empty());
    block_on(store.begin_pipeline("plain", None)).unwrap();
    assert_eq!(block_on(store.pipeline_context("plain")).unwrap(), None);
}

#[test]
fn steps_are_written_with_their_events_and_read_in_order() {
    let Some(db) = TestDb::create("steps_written") else {
        return;
    };
    let store = node(&db);
    insert_run(&store, "p", "a", RunState::Running, None, Utc::now());
    exec(
        &store,
        "INSERT INTO events (run_id, seq, at, kind, data) VALUES ('p', 1, now(), 'started', '{}')",
    );
    block_on(store.begin_pipeline("p", None)).unwrap();
    let items = vec!["x".to_string(), "y".to_string()];
    let seq = block_on(store.step_started("p", "fan", None, 1, Some(&items), event("1"))).unwrap();
    assert_eq!(seq, 2, "after the run's last event");
    assert_eq!(
        block_on(store.step_started("p", "fan", Some(1), 1, None, event("2"))).unwrap(),
        3
    );
    assert_eq!(
        block_on(store.step_finished(
            "p",
            "fan",
            Some(1),
            end(StepState::Failed, Some("c1")),
            event("3")
        ))
        .unwrap(),
        4
    );
    let first = block_on(store.steps_of("p")).unwrap();
    let item = first.iter().find(|s| s.item == Some(1)).unwrap();
    assert_eq!(
        (item.state, item.error.as_deref(), item.attempts),
        (StepState::Failed, Some("boom"), 1)
    );
    // Retried: attempt 2, the first start and child stay, the error goes.
    block_on(store.step_started("p", "fan", Some(1), 2, Some(&["z".to_string()]), event("4")))
        .unwrap();
    let retried = block_on(store.steps_of("p")).unwrap();
    let again = retried.iter().find(|s| s.item == Some(1)).unwrap();
    assert_eq!(
        (again.state, again.attempts, again.error.as_deref()),
        (StepState::Running, 2, None)
    );
    assert_eq!(again.started_at, item.started_at);
    assert_eq!(
        again.items,
        Some(vec!["z".to_string()]),
        "first items of the item row"
    );
    block_on(store.step_finished(
        "p",
        "fan",
        Some(1),
        end(StepState::Succeeded, None),
        event("5"),
    ))
    .unwrap();
    block_on(store.step_finished(
        "p",
        "fan",
        None,
        end(StepState::Succeeded, None),
        event("6"),
    ))
    .unwrap();
    // A step that never started (skipped) gets its row when it ends.
    block_on(store.step_finished(
        "p",
        "later",
        None,
        end(StepState::Skipped, None),
        event("7"),
    ))
    .unwrap();
    let steps = block_on(store.steps_of("p")).unwrap();
    let order: Vec<(&str, Option<usize>)> =
        steps.iter().map(|s| (s.step.as_str(), s.item)).collect();
    assert_eq!(order, [("fan", None), ("fan", Some(1)), ("later", None)]);
    let fan = &steps[0];
    assert_eq!(fan.items, Some(items));
    assert_eq!(
        (
            fan.state,
            fan.output.as_deref(),
            fan.usage.input_tokens,
            fan.cost_usd
        ),
        (StepState::Succeeded, Some("out"), Some(7), Some(0.5))
    );
    assert_eq!(
        steps[1].child_run_id.as_deref(),
        Some("c1"),
        "kept when the end names none"
    );
    assert!(steps[1].finished_at.is_some());
    assert_eq!((steps[2].started_at, steps[2].attempts), (None, 0));
    assert_eq!(
        count(&store, "SELECT MAX(seq) FROM events WHERE run_id = 'p'"),
        8
    );
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM events WHERE run_id = 'p' AND kind = 'text_delta'"
        ),
        7
    );
}

#[test]
fn a_step_of_a_missing_run_is_not_found_and_a_bad_row_is_corrupt() {
    let Some(db) = TestDb::create("steps_missing") else {
        return;
    };
    let store = node(&db);
    let err = block_on(store.step_started("nope", "s", None, 1, None, event("x"))).unwrap_err();
    assert!(
        matches!(&err, StoreError::NotFound(m) if m.contains("nope")),
        "{err}"
    );
    let err =
        block_on(store.step_finished("nope", "s", None, end(StepState::Failed, None), event("x")))
            .unwrap_err();
    assert!(matches!(err, StoreError::NotFound(_)), "{err}");
    assert_eq!(count(&store, "SELECT COUNT(*) FROM pipeline_steps"), 0);

    insert_run(&store, "p", "a", RunState::Running, None, Utc::now());
    block_on(store.step_started("p", "s", None, 1, None, event("x"))).unwrap();
    exec(&store, "UPDATE pipeline_steps SET state = 'dancing'");
    let err = block_on(store.steps_of("p")).unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptRun { run_id, message } if run_id == "p" && message.contains("dancing")),
        "{err}"
    );
    exec(
        &store,
        "UPDATE pipeline_steps SET state = 'running', items = 'not json'",
    );
    let err = block_on(store.steps_of("p")).unwrap_err();
    assert!(matches!(err, StoreError::CorruptRun { .. }), "{err}");
}

#[test]
fn take_over_takes_the_open_pipeline_runs_of_owners_that_are_gone() {
    let Some(db) = TestDb::create("take_over") else {
        return;
    };
    let store = node(&db);
    let t0 = Utc::now() - Duration::minutes(10);
    let runs = [
        ("dead", RunState::Running, Some("gone")),
        ("waiting", RunState::WaitingApproval, Some("gone")),
        ("nobody", RunState::Running, None),
        ("alive", RunState::Running, Some("live")),
        ("done", RunState::Succeeded, Some("gone")),
        ("queued", RunState::Queued, None),
    ];
    for (i, (id, state, owner)) in runs.iter().enumerate() {
        insert_run(
            &store,
            id,
            "a",
            *state,
            *owner,
            t0 + Duration::seconds(10 - i as i64),
        );
        block_on(store.begin_pipeline(id, None)).unwrap();
    }
    insert_run(&store, "plain", "a", RunState::Running, Some("gone"), t0);
    let taken = block_on(store.take_over_pipelines(|owner| owner == "live", "me")).unwrap();
    let ids: Vec<&str> = taken.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["nobody", "waiting", "dead"], "oldest first");
    assert!(taken.iter().all(|r| r.owner.as_deref() == Some("me")));
    assert_eq!(taken[1].state, RunState::WaitingApproval, "state kept");
    for (id, owner) in [("alive", "live"), ("done", "gone"), ("plain", "gone")] {
        assert_eq!(
            run(&store, id).unwrap().owner.as_deref(),
            Some(owner),
            "{id}"
        );
    }
    // Now owned by a live node: nothing more to take.
    let alive = |o: &str| o == "me" || o == "live";
    assert!(
        block_on(store.take_over_pipelines(alive, "other"))
            .unwrap()
            .is_empty()
    );
}

/// Two nodes start at once after a third died: each of its pipeline runs is
/// taken by exactly one of them.
#[test]
fn two_nodes_taking_over_at_once_take_each_pipeline_once() {
    let Some(db) = TestDb::create("take_over_race") else {
        return;
    };
    let nodes = [Arc::new(node(&db)), Arc::new(node(&db))];
    let t0 = Utc::now() - Duration::minutes(10);
    for round in 0..4 {
        let ids: BTreeSet<String> = (0..15).map(|i| format!("r{round}-{i:02}")).collect();
        for (i, id) in ids.iter().enumerate() {
            insert_run(
                &nodes[0],
                id,
                "a",
                RunState::Running,
                Some("dead"),
                t0 + Duration::seconds(i as i64),
            );
            block_on(nodes[0].begin_pipeline(id, None)).unwrap();
        }
        let barrier = Arc::new(Barrier::new(2));
        let takers: Vec<_> = nodes
            .iter()
            .zip(["n1", "n2"])
            .map(|(store, me)| {
                let (store, barrier) = (Arc::clone(store), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    let alive = |owner: &str| owner == "n1" || owner == "n2";
                    let taken = block_on(store.take_over_pipelines(alive, me)).unwrap();
                    (me, taken)
                })
            })
            .collect();
        let mut all = BTreeSet::new();
        for taker in takers {
            let (me, taken) = taker.join().unwrap();
            for r in taken {
                assert_eq!(r.owner.as_deref(), Some(me));
                assert_eq!(
                    run(&nodes[0], &r.id).unwrap().owner.as_deref(),
                    Some(me),
                    "{}",
                    r.id
                );
                assert!(
                    all.insert(r.id.clone()),
                    "round {round}: {} taken twice",
                    r.id
                );
            }
        }
        assert_eq!(all, ids, "round {round}: every run taken");
    }
}

/// Two nodes writing step events of one run at once (a pipeline's steps
/// run in parallel; a take-over racing a slow writer) never share a seq.
#[test]
fn step_events_written_at_once_get_distinct_seqs() {
    let Some(db) = TestDb::create("step_seq_race") else {
        return;
    };
    let nodes = [Arc::new(node(&db)), Arc::new(node(&db))];
    insert_run(&nodes[0], "p", "a", RunState::Running, None, Utc::now());
    let barrier = Arc::new(Barrier::new(2));
    let writers: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(n, store)| {
            let (store, barrier) = (Arc::clone(store), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                (0..20)
                    .map(|i| {
                        let step = format!("s{n}");
                        block_on(store.step_started("p", &step, Some(i), 1, None, event("x")))
                            .unwrap()
                    })
                    .collect::<Vec<i64>>()
            })
        })
        .collect();
    let mut seqs: Vec<i64> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=40).collect::<Vec<_>>());
    assert_eq!(count(&nodes[0], "SELECT COUNT(*) FROM pipeline_steps"), 40);
}
