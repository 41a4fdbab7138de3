//! Store tests of what the scheduler records and asks: runs that never ran,
//! interrupted runs, last fire and last run, consecutive failures and
//! webhook delivery dedup; each on a real SQLite file in a temporary
//! directory.

use std::sync::{Arc, Mutex};

use chrono::{Duration, TimeZone, Utc};

use super::tests::{db, fire_run, new_run, raw, seqs, sid, text};
use super::*;
use crate::store::*;
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

#[tokio::test]
async fn unrun_runs_are_final_at_once_and_take_their_fire() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let reason = "skipped: the previous run was still running";
    let run = fire_run("a", 0, at(1, 0));
    assert!(
        store
            .record_unrun(run.clone(), RunState::Skipped, reason.into())
            .await
            .unwrap()
    );
    let record = store.get_run(&run.id).await.unwrap().unwrap();
    assert_eq!(record.state, RunState::Skipped);
    assert_eq!(record.started_at, None);
    assert_eq!(record.finished_at, Some(record.created_at));
    assert_eq!(record.error.as_deref(), Some(reason));
    assert_eq!(record.output, None);
    assert_eq!(record.schedule_id, Some(sid("a", 0)));
    assert_eq!(
        record
            .scheduled_for
            .map(crate::types::timestamp::millis_text),
        Some("2025-10-26T01:00:00.000Z".to_string())
    );
    assert_eq!(
        store.run_events(&run.id).await.unwrap(),
        vec![finished(RunState::Skipped, reason)]
    );
    // The fire is taken: neither a claim nor another record may use it.
    assert!(matches!(
        store.claim_run(fire_run("a", 0, at(1, 0))).await,
        Err(StoreError::FireTaken { .. })
    ));
    let again = fire_run("a", 0, at(1, 0));
    assert!(
        !store
            .record_unrun(again.clone(), RunState::Missed, "missed".into())
            .await
            .unwrap()
    );
    assert_eq!(store.get_run(&again.id).await.unwrap(), None);
    // A fire taken by a claim cannot be recorded as unrun either.
    store.claim_run(fire_run("a", 0, at(2, 0))).await.unwrap();
    assert!(
        !store
            .record_unrun(fire_run("a", 0, at(2, 0)), RunState::Missed, "x".into())
            .await
            .unwrap()
    );
    // Manual runs have no fire; an id in use is still a conflict.
    for state in [
        RunState::Failed,
        RunState::BudgetExceeded,
        RunState::Cancelled,
    ] {
        let manual = new_run("a");
        assert!(
            store
                .record_unrun(manual, state, "never ran".into())
                .await
                .unwrap()
        );
    }
    let reused = NewRun {
        id: run.id.clone(),
        ..new_run("a")
    };
    assert!(matches!(
        store
            .record_unrun(reused, RunState::Failed, "x".into())
            .await,
        Err(StoreError::Conflict(_))
    ));
    for state in [RunState::Queued, RunState::Running] {
        assert!(matches!(
            store.record_unrun(new_run("a"), state, "x".into()).await,
            Err(StoreError::Invalid(_))
        ));
    }
    assert_eq!(
        store.list_runs(&RunFilter::default()).await.unwrap().len(),
        5
    );
    store.close().unwrap();
}

#[tokio::test]
async fn stale_runs_of_dead_owners_are_interrupted() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let with_owner = |owner: &str, state: RunState| NewRun {
        owner: owner.into(),
        state,
        ..new_run("a")
    };
    let dead = with_owner("pid:1", RunState::Running);
    let alive = with_owner("pid:2", RunState::Running);
    let dead_queued = with_owner("pid:1", RunState::Queued);
    let ownerless = with_owner("", RunState::Running);
    let done = with_owner("pid:1", RunState::Running);
    for run in [&dead, &alive, &dead_queued, &ownerless, &done] {
        store.claim_run(run.clone()).await.unwrap();
    }
    store
        .append_events(&dead.id, vec![text("a"), text("b")])
        .await
        .unwrap();
    store
        .finish_run(&done.id, RunState::Succeeded, None, None, Usage::default())
        .await
        .unwrap();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    let changed = store
        .interrupt_stale_runs(move |owner| {
            log.lock().unwrap().push(owner.to_string());
            owner == "pid:2"
        })
        .await
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
        assert!(
            error.starts_with("interrupted: the process that")
                && error.contains("stopped (crash, kill or power loss)"),
            "{error}"
        );
        assert_eq!(store.get_run(&run.id).await.unwrap().as_ref(), Some(run));
        let events = store.run_events(&run.id).await.unwrap();
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
    assert!(changed[1].started_at.is_none());
    assert!(
        changed[2]
            .error
            .as_deref()
            .unwrap()
            .contains("(no owner recorded)")
    );
    // The finished event follows the events stored before.
    assert_eq!(seqs(&path, &dead.id), [1, 2, 3]);
    // The live owner's run and the finished run are untouched.
    let alive_now = store.get_run(&alive.id).await.unwrap().unwrap();
    assert_eq!(
        (alive_now.state, alive_now.finished_at),
        (RunState::Running, None)
    );
    assert_eq!(store.run_events(&alive.id).await.unwrap(), vec![]);
    let done_now = store.get_run(&done.id).await.unwrap().unwrap();
    assert_eq!(
        (done_now.state, done_now.error),
        (RunState::Succeeded, None)
    );
    // Nothing is left to interrupt while pid:2 lives; then its run goes.
    let again = store.interrupt_stale_runs(|o| o == "pid:2").await.unwrap();
    assert_eq!(again, vec![]);
    let last = store.interrupt_stale_runs(|_| false).await.unwrap();
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].id, alive.id);
    assert!(last[0].error.as_deref().unwrap().contains("ran it (pid:2)"));
    store.close().unwrap();
}

#[tokio::test]
async fn last_fire_and_last_run() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.last_fire("a", &sid("a", 0)).await.unwrap(), None);
    assert_eq!(store.last_run("a").await.unwrap(), None);
    store.claim_run(fire_run("a", 0, at(1, 0))).await.unwrap();
    store
        .record_unrun(fire_run("a", 0, at(3, 0)), RunState::Missed, "m".into())
        .await
        .unwrap();
    store.claim_run(fire_run("a", 0, at(2, 0))).await.unwrap();
    store.claim_run(fire_run("a", 1, at(4, 0))).await.unwrap();
    store.claim_run(fire_run("b", 0, at(5, 0))).await.unwrap();
    let manual = new_run("a");
    store.claim_run(manual.clone()).await.unwrap();
    assert_eq!(
        store.last_fire("a", &sid("a", 0)).await.unwrap(),
        Some(at(3, 0))
    );
    assert_eq!(
        store.last_fire("a", &sid("a", 1)).await.unwrap(),
        Some(at(4, 0))
    );
    assert_eq!(store.last_fire("a", &sid("a", 2)).await.unwrap(), None);
    assert_eq!(
        store.last_fire("b", &sid("b", 0)).await.unwrap(),
        Some(at(5, 0))
    );
    assert_eq!(store.last_fire("c", &sid("c", 0)).await.unwrap(), None);
    assert_eq!(store.last_run("a").await.unwrap().unwrap().id, manual.id);
    assert_eq!(store.last_run("zzz").await.unwrap(), None);
    // Sub-second instants keep their milliseconds.
    let precise = at(6, 0) + Duration::milliseconds(250);
    store.claim_run(fire_run("a", 0, precise)).await.unwrap();
    assert_eq!(
        store.last_fire("a", &sid("a", 0)).await.unwrap(),
        Some(precise)
    );
    // Equal creation times: the greatest id is the newest.
    let conn = raw(&path);
    for id in ["zz-2", "zz-1"] {
        conn.execute(
            "INSERT INTO runs (id, agent, state, \"trigger\", input, model, definition_hash,
                               created_at)
             VALUES (?1, 't', 'succeeded', 'cli', '', 'm', 'h', '2099-01-01T00:00:00.000Z')",
            [id],
        )
        .unwrap();
    }
    assert_eq!(store.last_run("t").await.unwrap().unwrap().id, "zz-2");
    conn.execute(
        "UPDATE runs SET scheduled_for = 'yesterday', schedule_id = ?1 WHERE id = 'zz-1'",
        [sid("t", 9).as_str()],
    )
    .unwrap();
    let err = store.last_fire("t", &sid("t", 9)).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptRun { run_id, .. } if run_id == "zz-1"),
        "{err}"
    );
    store.close().unwrap();
}

/// Records one run of `agent` per state, oldest first.
async fn history(store: &Store, agent: &str, states: &[RunState]) {
    for &state in states {
        if state.is_final() {
            store
                .record_unrun(new_run(agent), state, "x".into())
                .await
                .unwrap();
        } else {
            let run = NewRun {
                state,
                ..new_run(agent)
            };
            store.claim_run(run).await.unwrap();
        }
    }
}

#[tokio::test]
async fn consecutive_failures_count_back_to_the_last_success() {
    use RunState::*;
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.consecutive_failures("a").await.unwrap(), 0);
    history(&store, "a", &[Failed, Succeeded, Failed, Skipped, TimedOut]).await;
    assert_eq!(store.consecutive_failures("a").await.unwrap(), 2);
    // Interrupted (cut off by a crash: not a failure), skipped, missed,
    // cancelled, budget_exceeded, queued and running runs neither count
    // nor break the streak.
    history(
        &store,
        "a",
        &[
            Cancelled,
            Interrupted,
            Missed,
            BudgetExceeded,
            Running,
            Queued,
        ],
    )
    .await;
    assert_eq!(store.consecutive_failures("a").await.unwrap(), 2);
    history(
        &store,
        "a",
        &[Interrupted, Interrupted, Interrupted, Failed],
    )
    .await;
    assert_eq!(store.consecutive_failures("a").await.unwrap(), 3);
    history(&store, "b", &[Failed]).await;
    assert_eq!(store.consecutive_failures("a").await.unwrap(), 3);
    assert_eq!(store.consecutive_failures("b").await.unwrap(), 1);
    history(&store, "a", &[Succeeded]).await;
    assert_eq!(store.consecutive_failures("a").await.unwrap(), 0);
    history(&store, "a", &[Failed]).await;
    assert_eq!(store.consecutive_failures("a").await.unwrap(), 1);
    history(&store, "c", &[Failed; 120]).await;
    assert_eq!(store.consecutive_failures("c").await.unwrap(), 100);
    store.close().unwrap();
}

#[tokio::test]
async fn webhook_deliveries_are_deduplicated_for_a_day() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let t0 = at(12, 0);
    assert!(store.claim_delivery("a", "d1", t0).await.unwrap());
    assert!(!store.claim_delivery("a", "d1", t0).await.unwrap());
    // Another agent or delivery id is new.
    assert!(store.claim_delivery("b", "d1", t0).await.unwrap());
    assert!(store.claim_delivery("a", "d2", t0).await.unwrap());
    // Still remembered 24 hours later, to the millisecond.
    let day = Duration::hours(24);
    assert!(!store.claim_delivery("a", "d1", t0 + day).await.unwrap());
    store.close().unwrap();
    let store = Store::open(&path).unwrap();
    assert!(
        !store
            .claim_delivery("a", "d1", t0 + Duration::hours(1))
            .await
            .unwrap()
    );
    // Forgotten after that: it counts as new, and old rows are deleted.
    let later = t0 + day + Duration::milliseconds(1);
    assert!(store.claim_delivery("a", "d1", later).await.unwrap());
    assert!(!store.claim_delivery("a", "d1", later).await.unwrap());
    let left: Vec<(String, String)> = raw(&path)
        .prepare("SELECT agent, delivery_id FROM webhook_deliveries ORDER BY agent, delivery_id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(left, [("a".to_string(), "d1".to_string())]);
    store.close().unwrap();
}

#[tokio::test]
async fn recovery_interrupts_running_runs_and_hands_queued_ones_to_the_new_owner() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let with_owner = |owner: &str, state: RunState| NewRun {
        owner: owner.into(),
        state,
        ..new_run("a")
    };
    let cut = with_owner("pid:1", RunState::Running);
    let accepted = with_owner("pid:1", RunState::Queued);
    let others = with_owner("pid:2", RunState::Queued);
    for run in [&cut, &accepted, &others] {
        store.claim_run(run.clone()).await.unwrap();
    }
    let recovered = store
        .recover_stale_runs(|owner| owner == "pid:2", "pid:3 boot b start 1")
        .await
        .unwrap();
    let ids = |runs: &[RunRecord]| runs.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&recovered.interrupted), vec![cut.id.clone()]);
    assert_eq!(ids(&recovered.requeued), vec![accepted.id.clone()]);
    let requeued = &recovered.requeued[0];
    assert_eq!(requeued.state, RunState::Queued);
    assert_eq!(requeued.owner.as_deref(), Some("pid:3 boot b start 1"));
    assert_eq!(requeued.finished_at, None);
    assert_eq!(store.run_events(&accepted.id).await.unwrap(), vec![]);
    // A live owner's queued run is left alone.
    let kept = store.get_run(&others.id).await.unwrap().unwrap();
    assert_eq!(
        (kept.state, kept.owner.as_deref()),
        (RunState::Queued, Some("pid:2"))
    );
    store.close().unwrap();
}

#[tokio::test]
async fn the_live_sweep_interrupts_only_running_runs_of_dead_owners() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let with_owner = |owner: &str, state: RunState| NewRun {
        owner: owner.into(),
        state,
        ..new_run("a")
    };
    let dead = with_owner("pid:1", RunState::Running);
    let mine = with_owner("pid:9", RunState::Running);
    let queued = with_owner("pid:1", RunState::Queued);
    let ownerless = with_owner("", RunState::Running);
    for run in [&dead, &mine, &queued, &ownerless] {
        store.claim_run(run.clone()).await.unwrap();
    }
    store
        .append_events(&dead.id, vec![text("a")])
        .await
        .unwrap();
    let changed = store
        .interrupt_dead_running_runs(|owner| owner == "pid:9")
        .await
        .unwrap();
    let mut ids: Vec<&str> = changed.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    let mut want = [dead.id.as_str(), ownerless.id.as_str()];
    want.sort();
    assert_eq!(ids, want);
    assert!(changed.iter().all(|r| r.state == RunState::Interrupted));
    assert_eq!(seqs(&path, &dead.id), [1, 2]);
    let error = changed
        .iter()
        .find(|r| r.id == dead.id)
        .and_then(|r| r.error.clone())
        .unwrap();
    assert!(error.contains("the process that ran it (pid:1)"), "{error}");
    for (run, state) in [(&mine, RunState::Running), (&queued, RunState::Queued)] {
        assert_eq!(store.get_run(&run.id).await.unwrap().unwrap().state, state);
    }
    // Nothing left: a second sweep writes nothing.
    assert_eq!(
        store
            .interrupt_dead_running_runs(|owner| owner == "pid:9")
            .await
            .unwrap(),
        vec![]
    );
    store.close().unwrap();
}

#[tokio::test]
async fn a_delivery_is_remembered_exactly_when_its_run_is_claimed() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let now = at(12, 0);
    // Concurrent replays of one delivery: one run, one remembered id.
    let claims = (0..16).map(|_| store.claim_run_for_delivery(new_run("a"), "d1", now));
    let claimed = futures::future::join_all(claims).await;
    let won: Vec<RunRecord> = claimed.into_iter().filter_map(|c| c.unwrap()).collect();
    assert_eq!(won.len(), 1);
    let count = |sql: &str| -> i64 { raw(&path).query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(count("SELECT COUNT(*) FROM runs"), 1);
    // A claim that fails (the run id is taken) remembers nothing, so the
    // delivery can come again and run.
    let taken = NewRun {
        id: won[0].id.clone(),
        ..new_run("a")
    };
    assert!(matches!(
        store.claim_run_for_delivery(taken, "d2", now).await,
        Err(StoreError::Conflict(_))
    ));
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_deliveries WHERE delivery_id = 'd2'"),
        0
    );
    let again = store
        .claim_run_for_delivery(new_run("a"), "d2", now)
        .await
        .unwrap();
    assert!(again.is_some());
    assert_eq!(
        store
            .claim_run_for_delivery(new_run("a"), "d2", now)
            .await
            .unwrap(),
        None
    );
    store.close().unwrap();
}
