//! PostgreSQL-only tests of what the scheduler records (the interface
//! cases run on both backends in `store/fires_tests.rs`): the live sweep's
//! `is_alive` runs on the caller's side, old delivery rows are deleted; and
//! the races of two nodes: one delivery claimed by both, both sweeping the
//! same dead runs. Each test has a database of its own on a real server.

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::runs_tests::{block, count, new_run, node, race, seqs, text};
use super::testing::TestDb;
use crate::store::NewRun;
use crate::types::RunState;

fn at(h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 10, 26, h, m, 0).unwrap()
}

fn with_owner(owner: &str, state: RunState) -> NewRun {
    NewRun {
        owner: owner.into(),
        state,
        ..new_run("a")
    }
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
