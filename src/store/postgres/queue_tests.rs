//! PostgreSQL-only tests of the shared queue: two nodes taking queued runs
//! at once share them out (`SKIP LOCKED`; none taken twice), and the
//! signals a node sends reach another node's listener (a queued run, a run
//! taken over, a cancel request).

use std::time::Duration;

use super::runs_tests::{block, new_run, node, race};
use super::testing::TestDb;
use crate::store::{ClusterSignal, NewRun, RunEnd};
use crate::types::RunState;

#[test]
fn two_nodes_taking_queued_runs_at_once_share_them_out() {
    let Some(db) = TestDb::create("pg_queue_share") else {
        return;
    };
    let (one, two, accepting) = (node(&db), node(&db), node(&db));
    let mut ids = Vec::new();
    for _ in 0..40 {
        let run = NewRun {
            state: RunState::Queued,
            owner: "node:A".into(),
            ..new_run("a")
        };
        ids.push(run.id.clone());
        block(accepting.claim_run(run)).unwrap();
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        let (x, y) = race(
            &one,
            &two,
            |n| block(n.claim_queued("node:B", 3, &["a".to_string()], &[])).unwrap(),
            |n| block(n.claim_queued("node:C", 3, &["a".to_string()], &[])).unwrap(),
        );
        assert!(x.len() <= 3 && y.len() <= 3);
        a.extend(x.into_iter().map(|t| t.run.id));
        b.extend(y.into_iter().map(|t| t.run.id));
    }
    let mut all: Vec<String> = a.iter().chain(&b).cloned().collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), a.len() + b.len(), "a run taken twice");
    assert_eq!(
        all.len(),
        40,
        "every queued run taken: {} + {}",
        a.len(),
        b.len()
    );
    for (ids, owner) in [(&a, "node:B"), (&b, "node:C")] {
        for id in ids {
            let run = block(one.get_run(id)).unwrap().unwrap();
            assert_eq!(
                (run.state, run.owner.as_deref()),
                (RunState::Running, Some(owner))
            );
            assert!(!block(one.start_run(id, "node:A")).unwrap());
        }
    }
}

/// The next signal on `rx` within 10 s.
fn next(rx: &mut tokio::sync::broadcast::Receiver<ClusterSignal>) -> ClusterSignal {
    block(async {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            match rx.try_recv() {
                Ok(signal) => return signal,
                Err(tokio::sync::broadcast::error::TryRecvError::Empty) => {}
                Err(e) => panic!("signals ended: {e}"),
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no signal within 10 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

#[test]
fn a_queued_run_and_a_cancel_request_reach_the_other_nodes() {
    let Some(db) = TestDb::create("pg_queue_signals") else {
        return;
    };
    let (listener, sender) = (node(&db), node(&db));
    let mut rx = listener.signals();
    // The listener is connected once a signal sent now arrives: send
    // cancel requests until one does (LISTEN is asynchronous to `signals`).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        block(sender.request_cancel("probe".into())).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        if let Ok(signal) = rx.try_recv() {
            assert_eq!(signal, ClusterSignal::Cancel("probe".into()));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never listening");
    }
    while rx.try_recv().is_ok() {}

    // A queued claim signals at its commit.
    block(sender.claim_run(new_run("a"))).unwrap();
    let queued = NewRun {
        state: RunState::Queued,
        ..new_run("a")
    };
    block(sender.claim_run(queued)).unwrap();
    assert_eq!(next(&mut rx), ClusterSignal::Queued);
    let taken = block(sender.claim_queued("node:B", 5, &["a".to_string()], &[])).unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(next(&mut rx), ClusterSignal::Taken(taken[0].run.id.clone()));
    block(sender.request_cancel("run-1".into())).unwrap();
    assert_eq!(next(&mut rx), ClusterSignal::Cancel("run-1".into()));
}

#[test]
fn a_cancel_request_is_kept_with_its_run_until_the_run_ends() {
    let Some(db) = TestDb::create("pg_queue_cancel_kept") else {
        return;
    };
    let store = node(&db);
    let (asked, other, queued) = (
        new_run("a"),
        new_run("a"),
        NewRun {
            state: RunState::Queued,
            owner: "node:A".into(),
            ..new_run("a")
        },
    );
    for run in [&asked, &other, &queued] {
        block(store.claim_run(run.clone())).unwrap();
    }
    // Nobody listens, so the notification reaches no one: the request
    // must still be found.
    block(store.request_cancel(asked.id.clone())).unwrap();
    block(store.request_cancel(queued.id.clone())).unwrap();
    block(store.request_cancel("no-such-run".into())).unwrap();
    let mut expected = vec![asked.id.clone(), queued.id.clone()];
    expected.sort();
    assert_eq!(block(store.cancels_requested()).unwrap(), expected);
    // Asked again: still listed once.
    block(store.request_cancel(asked.id.clone())).unwrap();
    assert_eq!(block(store.cancels_requested()).unwrap(), expected);
    // A run that ended is no longer anyone's to cancel.
    let end = RunEnd::new(RunState::Cancelled, Some("cancelled".into()));
    block(store.finish_run_as(&asked.id, vec![], end)).unwrap();
    assert_eq!(
        block(store.cancels_requested()).unwrap(),
        vec![queued.id.clone()]
    );
    // A request for a run that already ended is not kept.
    block(store.request_cancel(asked.id.clone())).unwrap();
    assert_eq!(
        block(store.cancels_requested()).unwrap(),
        vec![queued.id.clone()]
    );
}
