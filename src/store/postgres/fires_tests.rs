//! PostgreSQL tests of what the scheduler records: runs that never ran,
//! interrupted and recovered runs (liveness from the caller), webhook
//! delivery dedup; and the races of two nodes: one delivery claimed by
//! both, both sweeping the same dead runs. Each test has a database of its
//! own on a real server.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::runs_tests::{block, count, fire_run, new_run, node, race, seqs, sid, text};
use super::testing::TestDb;
use crate::store::{NewRun, RunFilter, RunRecord, StoreError};
use crate::types::{RunEvent, RunState, Usage};

fn at(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 10, 26, h, m, 0).unwrap()
}

fn finished(state: RunState, reason: &str) -> RunEvent {
    RunEvent::Finished {
        state,
        reason: Some(reason.into()),
        output: None,
        usage: Usage::default(),
        cost_usd: None,
        result: None,
    }
}

fn with_owner(owner: &str, state: RunState) -> NewRun {
    NewRun {
        owner: owner.into(),
        state,
        ..new_run("a")
    }
}

#[test]
fn unrun_runs_are_final_at_once_and_take_their_fire() {
    let Some(db) = TestDb::create("pg_unrun") else {
        return;
    };
    let store = node(&db);
    let reason = "skipped: the previous run was still running";
    let run = fire_run("a", 0, at(1, 0));
    assert!(block(store.record_unrun(run.clone(), RunState::Skipped, reason.into())).unwrap());
    let record = block(store.get_run(&run.id)).unwrap().unwrap();
    assert_eq!(record.state, RunState::Skipped);
    assert_eq!(record.started_at, None);
    assert_eq!(record.finished_at, Some(record.created_at));
    assert_eq!(record.error.as_deref(), Some(reason));
    assert_eq!(record.schedule_id, Some(sid("a", 0)));
    assert_eq!(record.scheduled_for, Some(at(1, 0)));
    assert_eq!(
        block(store.run_events(&run.id)).unwrap(),
        vec![finished(RunState::Skipped, reason)]
    );
    assert!(matches!(
        block(store.claim_run(fire_run("a", 0, at(1, 0)))),
        Err(StoreError::FireTaken { .. })
    ));
    let again = fire_run("a", 0, at(1, 0));
    assert!(!block(store.record_unrun(again.clone(), RunState::Missed, "missed".into())).unwrap());
    assert_eq!(block(store.get_run(&again.id)).unwrap(), None);
    block(store.claim_run(fire_run("a", 0, at(2, 0)))).unwrap();
    assert!(
        !block(store.record_unrun(fire_run("a", 0, at(2, 0)), RunState::Missed, "x".into()))
            .unwrap()
    );
    for state in [
        RunState::Failed,
        RunState::BudgetExceeded,
        RunState::Cancelled,
    ] {
        assert!(block(store.record_unrun(new_run("a"), state, "never ran".into())).unwrap());
    }
    let reused = NewRun {
        id: run.id.clone(),
        ..new_run("a")
    };
    assert!(matches!(
        block(store.record_unrun(reused, RunState::Failed, "x".into())),
        Err(StoreError::Conflict(_))
    ));
    for state in [RunState::Queued, RunState::Running] {
        assert!(matches!(
            block(store.record_unrun(new_run("a"), state, "x".into())),
            Err(StoreError::Invalid(_))
        ));
    }
    assert_eq!(
        block(store.list_runs(&RunFilter::default())).unwrap().len(),
        5
    );
}

#[test]
fn stale_runs_of_dead_owners_are_interrupted() {
    let Some(db) = TestDb::create("pg_stale") else {
        return;
    };
    let store = node(&db);
    let dead = with_owner("pid:1", RunState::Running);
    let alive = with_owner("pid:2", RunState::Running);
    let dead_queued = with_owner("pid:1", RunState::Queued);
    let ownerless = with_owner("", RunState::Running);
    let done = with_owner("pid:1", RunState::Running);
    for run in [&dead, &alive, &dead_queued, &ownerless, &done] {
        block(store.claim_run(run.clone())).unwrap();
    }
    block(store.append_events(&dead.id, vec![text("a"), text("b")])).unwrap();
    block(store.finish_run(&done.id, RunState::Succeeded, None, None, Usage::default())).unwrap();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let changed = block(store.interrupt_stale_runs(move |owner| {
        log.lock().unwrap().push(owner.to_string());
        owner == "pid:2"
    }))
    .unwrap();
    let mut owners = asked.lock().unwrap().clone();
    owners.sort();
    assert_eq!(owners, ["pid:1", "pid:1", "pid:2"]);
    let ids: Vec<&str> = changed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, [&dead.id, &dead_queued.id, &ownerless.id]);
    for run in &changed {
        assert_eq!(run.state, RunState::Interrupted);
        assert!(run.finished_at.is_some());
        let error = run.error.as_deref().unwrap();
        assert_eq!(block(store.get_run(&run.id)).unwrap().as_ref(), Some(run));
        let events = block(store.run_events(&run.id)).unwrap();
        assert_eq!(events.last(), Some(&finished(RunState::Interrupted, error)));
    }
    assert_eq!(
        changed[0].error.as_deref(),
        Some(
            "interrupted: the process that ran it (pid:1) stopped (crash, kill or power loss) \
             before the run finished"
        )
    );
    assert!(
        changed[1]
            .error
            .as_deref()
            .unwrap()
            .contains("queued it (pid:1)")
    );
    assert!(
        changed[2]
            .error
            .as_deref()
            .unwrap()
            .contains("(no owner recorded)")
    );
    assert_eq!(seqs(&store, &dead.id), [1, 2, 3]);
    let alive_now = block(store.get_run(&alive.id)).unwrap().unwrap();
    assert_eq!(
        (alive_now.state, alive_now.finished_at),
        (RunState::Running, None)
    );
    let done_now = block(store.get_run(&done.id)).unwrap().unwrap();
    assert_eq!(
        (done_now.state, done_now.error),
        (RunState::Succeeded, None)
    );
    assert_eq!(
        block(store.interrupt_stale_runs(|o| o == "pid:2")).unwrap(),
        vec![]
    );
    let last = block(store.interrupt_stale_runs(|_| false)).unwrap();
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].id, alive.id);
}

#[test]
fn recovery_interrupts_running_runs_and_hands_queued_ones_to_the_new_owner() {
    let Some(db) = TestDb::create("pg_recover") else {
        return;
    };
    let store = node(&db);
    let cut = with_owner("pid:1", RunState::Running);
    let accepted = with_owner("pid:1", RunState::Queued);
    let others = with_owner("pid:2", RunState::Queued);
    for run in [&cut, &accepted, &others] {
        block(store.claim_run(run.clone())).unwrap();
    }
    let recovered =
        block(store.recover_stale_runs(|owner| owner == "pid:2", "pid:3 boot b start 1")).unwrap();
    let ids = |runs: &[RunRecord]| runs.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&recovered.interrupted), vec![cut.id.clone()]);
    assert_eq!(ids(&recovered.requeued), vec![accepted.id.clone()]);
    let requeued = &recovered.requeued[0];
    assert_eq!(requeued.state, RunState::Queued);
    assert_eq!(requeued.owner.as_deref(), Some("pid:3 boot b start 1"));
    assert_eq!(requeued.finished_at, None);
    assert_eq!(block(store.run_events(&accepted.id)).unwrap(), vec![]);
    let kept = block(store.get_run(&others.id)).unwrap().unwrap();
    assert_eq!(
        (kept.state, kept.owner.as_deref()),
        (RunState::Queued, Some("pid:2"))
    );
}

#[test]
fn the_live_sweep_interrupts_only_running_runs_of_dead_owners() {
    let Some(db) = TestDb::create("pg_live_sweep") else {
        return;
    };
    let store = node(&db);
    let dead = with_owner("pid:1", RunState::Running);
    let mine = with_owner("pid:9", RunState::Running);
    let queued = with_owner("pid:1", RunState::Queued);
    let ownerless = with_owner("", RunState::Running);
    for run in [&dead, &mine, &queued, &ownerless] {
        block(store.claim_run(run.clone())).unwrap();
    }
    block(store.append_events(&dead.id, vec![text("a")])).unwrap();
    // `is_alive` need not be Send: it runs on the caller's side.
    let local = std::rc::Rc::new("pid:9".to_string());
    let changed = block(store.interrupt_dead_running_runs(|owner| owner == *local)).unwrap();
    let mut ids: Vec<&str> = changed.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    let mut want = [dead.id.as_str(), ownerless.id.as_str()];
    want.sort();
    assert_eq!(ids, want);
    assert!(changed.iter().all(|r| r.state == RunState::Interrupted));
    assert_eq!(seqs(&store, &dead.id), [1, 2]);
    let error = changed
        .iter()
        .find(|r| r.id == dead.id)
        .and_then(|r| r.error.clone())
        .unwrap();
    assert!(error.contains("the process that ran it (pid:1)"), "{error}");
    for (run, state) in [(&mine, RunState::Running), (&queued, RunState::Queued)] {
        assert_eq!(block(store.get_run(&run.id)).unwrap().unwrap().state, state);
    }
    assert_eq!(
        block(store.interrupt_dead_running_runs(|o| o == "pid:9")).unwrap(),
        vec![]
    );
}

#[test]
fn two_nodes_sweeping_at_once_interrupt_each_run_once() {
    let Some(db) = TestDb::create("pg_sweep_race") else {
        return;
    };
    let (one, two) = (node(&db), node(&db));
    let runs: Vec<NewRun> = (0..12)
        .map(|i| {
            with_owner(
                if i % 3 == 0 { "pid:live" } else { "pid:dead" },
                RunState::Running,
            )
        })
        .collect();
    for run in &runs {
        block(one.claim_run(run.clone())).unwrap();
    }
    for round in 0..2 {
        let (a, b) = race(
            &one,
            &two,
            |n| {
                if round == 0 {
                    block(n.interrupt_dead_running_runs(|o| o == "pid:live")).unwrap()
                } else {
                    block(n.interrupt_stale_runs(|o| o == "pid:dead")).unwrap()
                }
            },
            |n| {
                if round == 0 {
                    block(n.interrupt_dead_running_runs(|o| o == "pid:live")).unwrap()
                } else {
                    block(n.interrupt_stale_runs(|o| o == "pid:dead")).unwrap()
                }
            },
        );
        let mut ids: Vec<String> = a.iter().chain(&b).map(|r| r.id.clone()).collect();
        ids.sort();
        let mut want: Vec<String> = runs
            .iter()
            .enumerate()
            .filter(|(i, _)| (i % 3 == 0) == (round == 1))
            .map(|(_, r)| r.id.clone())
            .collect();
        want.sort();
        assert_eq!(ids, want, "round {round}");
    }
    // One `finished` event each: nobody interrupted a run twice.
    assert_eq!(count(&one, "SELECT COUNT(*) FROM events"), 12);
    assert_eq!(
        count(
            &one,
            "SELECT COUNT(*) FROM runs WHERE state = 'interrupted'"
        ),
        12
    );
}

#[test]
fn webhook_deliveries_are_deduplicated_for_a_day() {
    let Some(db) = TestDb::create("pg_deliveries") else {
        return;
    };
    let store = node(&db);
    let t0 = at(12, 0);
    assert!(block(store.claim_delivery("a", "d1", t0)).unwrap());
    assert!(!block(store.claim_delivery("a", "d1", t0)).unwrap());
    assert!(block(store.claim_delivery("b", "d1", t0)).unwrap());
    assert!(block(store.claim_delivery("a", "d2", t0)).unwrap());
    let day = Duration::hours(24);
    assert!(!block(store.claim_delivery("a", "d1", t0 + day)).unwrap());
    let store = node(&db);
    assert!(!block(store.claim_delivery("a", "d1", t0 + Duration::hours(1))).unwrap());
    let later = t0 + day + Duration::milliseconds(1);
    assert!(block(store.claim_delivery("a", "d1", later)).unwrap());
    assert!(!block(store.claim_delivery("a", "d1", later)).unwrap());
    assert_eq!(count(&store, "SELECT COUNT(*) FROM webhook_deliveries"), 1);
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM webhook_deliveries WHERE agent = 'a' AND delivery_id = 'd1'"
        ),
        1
    );
}

#[test]
fn a_delivery_is_remembered_exactly_when_its_run_is_claimed() {
    let Some(db) = TestDb::create("pg_delivery_claim") else {
        return;
    };
    let store = node(&db);
    let now = at(12, 0);
    let claims = (0..16).map(|_| store.claim_run_for_delivery(new_run("a"), "d1", now));
    let claimed = block(futures::future::join_all(claims));
    let won: Vec<RunRecord> = claimed.into_iter().filter_map(|c| c.unwrap()).collect();
    assert_eq!(won.len(), 1);
    assert_eq!(count(&store, "SELECT COUNT(*) FROM runs"), 1);
    let taken = NewRun {
        id: won[0].id.clone(),
        ..new_run("a")
    };
    assert!(matches!(
        block(store.claim_run_for_delivery(taken, "d2", now)),
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM webhook_deliveries WHERE delivery_id = 'd2'"
        ),
        0
    );
    assert!(
        block(store.claim_run_for_delivery(new_run("a"), "d2", now))
            .unwrap()
            .is_some()
    );
    assert_eq!(
        block(store.claim_run_for_delivery(new_run("a"), "d2", now)).unwrap(),
        None
    );
    let finished_state = NewRun {
        state: RunState::Failed,
        ..new_run("a")
    };
    assert!(matches!(
        block(store.claim_run_for_delivery(finished_state, "d3", now)),
        Err(StoreError::Invalid(_))
    ));
}

#[test]
fn two_nodes_claiming_one_delivery_make_one_run() {
    let Some(db) = TestDb::create("pg_delivery_race") else {
        return;
    };
    let (one, two) = (node(&db), node(&db));
    let now = at(12, 0);
    for i in 0..20 {
        let delivery = format!("d{i}");
        // Every other delivery is an old one coming again after a day.
        let when = if i % 2 == 0 {
            now
        } else {
            assert!(block(one.claim_delivery("a", &delivery, now - Duration::days(2))).unwrap());
            now
        };
        let (a, b) = race(
            &one,
            &two,
            |n| block(n.claim_run_for_delivery(new_run("a"), &delivery, when)).unwrap(),
            |n| block(n.claim_run_for_delivery(new_run("a"), &delivery, when)).unwrap(),
        );
        assert!(
            a.is_some() ^ b.is_some(),
            "delivery {delivery}: {a:?} / {b:?}"
        );
    }
    assert_eq!(count(&one, "SELECT COUNT(*) FROM runs"), 20);
    assert_eq!(count(&one, "SELECT COUNT(*) FROM webhook_deliveries"), 20);
}
