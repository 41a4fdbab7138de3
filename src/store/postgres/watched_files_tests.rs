//! PostgreSQL tests of triggered claims: each `after:` follow-up and each
//! watched file version claims one run, an interrupted file run can be
//! claimed again, and two nodes claiming the same one at once make one
//! run. Each test has a database of its own on a real server.

use chrono::Utc;

use super::runs_tests::{block, count, execute, new_run, node, race};
use super::testing::TestDb;
use crate::store::{NewRun, TriggerClaim};
use crate::types::{RunState, Trigger};

fn watch_run(agent: &str) -> NewRun {
    NewRun {
        trigger: Trigger::Watch,
        owner: String::new(),
        ..new_run(agent)
    }
}

fn file(hash: &str) -> TriggerClaim {
    TriggerClaim::Watch {
        path: "inbox/a.md".into(),
        content_hash: hash.into(),
    }
}

#[test]
fn each_trigger_claims_one_run_and_an_interrupted_file_run_can_be_claimed_again() {
    let Some(db) = TestDb::create("pg_triggers") else {
        return;
    };
    let store = node(&db);
    let now = Utc::now();
    let after = || TriggerClaim::After {
        after_run_id: "r1".into(),
    };
    let claim = |run: NewRun, what: TriggerClaim| {
        block(store.claim_run_for_trigger(run, what, now)).unwrap()
    };
    assert!(claim(watch_run("b"), after()).is_some());
    assert!(claim(watch_run("b"), after()).is_none());
    assert!(claim(watch_run("c"), after()).is_some());

    let done = |hash: &str| block(store.watched_file_done("w", "inbox/a.md", hash)).unwrap();
    assert!(!done("h1"));
    let first = claim(watch_run("w"), file("h1")).unwrap();
    assert!(done("h1"));
    assert!(claim(watch_run("w"), file("h1")).is_none());
    assert!(claim(watch_run("w"), file("h2")).is_some());
    block(store.finish_run_as(
        &first.id,
        Vec::new(),
        crate::store::RunEnd {
            output: None,
            usage: Default::default(),
            ..crate::store::RunEnd::new(RunState::Interrupted, None)
        },
    ))
    .unwrap();
    assert!(!done("h1"));
    let again = claim(watch_run("w"), file("h1")).unwrap();
    assert!(claim(watch_run("w"), file("h1")).is_none());
    // A run retention pruned leaves the file processed.
    execute(
        &store,
        &format!("DELETE FROM runs WHERE id = '{}'", again.id),
    );
    assert!(done("h1"));
    assert!(claim(watch_run("w"), file("h1")).is_none());
    // A claim whose run cannot be stored remembers nothing.
    let taken = NewRun {
        id: first.id.clone(),
        ..watch_run("w")
    };
    assert!(block(store.claim_run_for_trigger(taken, file("h3"), now)).is_err());
    assert!(!done("h3"));
    let queued_only = NewRun {
        state: RunState::Succeeded,
        ..watch_run("w")
    };
    assert!(block(store.claim_run_for_trigger(queued_only, file("h4"), now)).is_err());
}

#[test]
fn two_nodes_claiming_one_trigger_make_one_run() {
    let Some(db) = TestDb::create("pg_trigger_race") else {
        return;
    };
    let (one, two) = (node(&db), node(&db));
    let now = Utc::now();
    let mut expected = 0;
    for i in 0..10 {
        let after = TriggerClaim::After {
            after_run_id: format!("r{i}"),
        };
        let version = file(&format!("h{i}"));
        for what in [after, version.clone()] {
            let (a, b) = race(
                &one,
                &two,
                |n| block(n.claim_run_for_trigger(watch_run("w"), what.clone(), now)).unwrap(),
                |n| block(n.claim_run_for_trigger(watch_run("w"), what.clone(), now)).unwrap(),
            );
            assert!(a.is_some() ^ b.is_some(), "{what:?}: {a:?} / {b:?}");
            expected += 1;
            // An interrupted file run: both nodes try to run it again.
            if let (TriggerClaim::Watch { .. }, Some(run)) = (&what, a.or(b)) {
                block(one.finish_run_as(
                    &run.id,
                    Vec::new(),
                    crate::store::RunEnd {
                        output: None,
                        usage: Default::default(),
                        ..crate::store::RunEnd::new(RunState::Interrupted, None)
                    },
                ))
                .unwrap();
                let (a, b) = race(
                    &one,
                    &two,
                    |n| block(n.claim_run_for_trigger(watch_run("w"), what.clone(), now)).unwrap(),
                    |n| block(n.claim_run_for_trigger(watch_run("w"), what.clone(), now)).unwrap(),
                );
                assert!(a.is_some() ^ b.is_some(), "again {what:?}: {a:?} / {b:?}");
                expected += 1;
            }
        }
    }
    assert_eq!(count(&one, "SELECT COUNT(*) FROM runs"), expected);
    assert_eq!(count(&one, "SELECT COUNT(*) FROM watched_files"), 10);
    assert_eq!(count(&one, "SELECT COUNT(*) FROM after_runs"), 10);
}
