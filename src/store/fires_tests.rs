//! Tests of what the scheduler records and asks through the [`Store`]
//! interface, each run on both backends (`store_test!`): runs that never
//! ran, interrupted and recovered runs, last fire and last run,
//! consecutive failures, webhook delivery dedup.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, TimeZone, Utc};

use crate::store::testing::{fire_run, new_run, sid, store_test, text};
use crate::store::{NewRun, RunFilter, RunRecord, Store, StoreError};
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

async fn seqs(store: &Store, run_id: &str) -> Vec<i64> {
    let events = store.run_events_after(run_id, 0).await.unwrap();
    events.into_iter().map(|(seq, _)| seq).collect()
}

store_test! {
    /// A run that never ran is final at once, with one `finished` event,
    /// and takes its fire.
    async fn unrun_runs_are_final_at_once_and_take_their_fire(store) {
        let reason = "skipped: the previous run was still running";
        let run = fire_run("a", 0, at(1, 0));
        assert!(store.record_unrun(run.clone(), RunState::Skipped, reason.into()).await.unwrap());
        let record = store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(record.state, RunState::Skipped);
        assert_eq!(record.started_at, None);
        assert_eq!(record.finished_at, Some(record.created_at));
        assert_eq!(record.error.as_deref(), Some(reason));
        assert_eq!(record.output, None);
        assert_eq!(record.schedule_id, Some(sid("a", 0)));
        assert_eq!(
            record.scheduled_for.map(crate::types::timestamp::millis_text),
            Some("2025-10-26T01:00:00.000Z".to_string())
        );
        assert_eq!(store.run_events(&run.id).await.unwrap(), vec![finished(RunState::Skipped, reason)]);
        assert!(matches!(
            store.claim_run(fire_run("a", 0, at(1, 0))).await,
            Err(StoreError::FireTaken { .. })
        ));
        let again = fire_run("a", 0, at(1, 0));
        assert!(!store.record_unrun(again.clone(), RunState::Missed, "missed".into()).await.unwrap());
        assert_eq!(store.get_run(&again.id).await.unwrap(), None);
        store.claim_run(fire_run("a", 0, at(2, 0))).await.unwrap();
        assert!(
            !store
                .record_unrun(fire_run("a", 0, at(2, 0)), RunState::Missed, "x".into())
                .await
                .unwrap()
        );
        for state in [RunState::Failed, RunState::BudgetExceeded, RunState::Cancelled] {
            assert!(store.record_unrun(new_run("a"), state, "never ran".into()).await.unwrap());
        }
        let reused = NewRun { id: run.id.clone(), ..new_run("a") };
        assert!(matches!(
            store.record_unrun(reused, RunState::Failed, "x".into()).await,
            Err(StoreError::Conflict(_))
        ));
        for state in [RunState::Queued, RunState::Running] {
            assert!(matches!(
                store.record_unrun(new_run("a"), state, "x".into()).await,
                Err(StoreError::Invalid(_))
            ));
        }
        assert_eq!(store.list_runs(&RunFilter::default()).await.unwrap().len(), 5);
    }
}

store_test! {
    /// Running and queued runs of owners `is_alive` says are gone become
    /// `interrupted` with a reason and a `finished` event; others stay.
    async fn stale_runs_of_dead_owners_are_interrupted(store) {
        let dead = with_owner("pid:1", RunState::Running);
        let alive = with_owner("pid:2", RunState::Running);
        let dead_queued = with_owner("pid:1", RunState::Queued);
        let ownerless = with_owner("", RunState::Running);
        let done = with_owner("pid:1", RunState::Running);
        for run in [&dead, &alive, &dead_queued, &ownerless, &done] {
            store.claim_run(run.clone()).await.unwrap();
        }
        store.append_events(&dead.id, vec![text("a"), text("b")]).await.unwrap();
        store.finish_run(&done.id, RunState::Succeeded, None, None, Usage::default()).await.unwrap();
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
        assert!(changed[1].error.as_deref().unwrap().contains("queued it (pid:1)"));
        assert!(changed[1].started_at.is_none());
        assert!(changed[2].error.as_deref().unwrap().contains("(no owner recorded)"));
        assert_eq!(seqs(&store, &dead.id).await, [1, 2, 3]);
        let alive_now = store.get_run(&alive.id).await.unwrap().unwrap();
        assert_eq!((alive_now.state, alive_now.finished_at), (RunState::Running, None));
        assert_eq!(store.run_events(&alive.id).await.unwrap(), vec![]);
        let done_now = store.get_run(&done.id).await.unwrap().unwrap();
        assert_eq!((done_now.state, done_now.error), (RunState::Succeeded, None));
        assert_eq!(store.interrupt_stale_runs(|o| o == "pid:2").await.unwrap(), vec![]);
        let last = store.interrupt_stale_runs(|_| false).await.unwrap();
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].id, alive.id);
        assert!(last[0].error.as_deref().unwrap().contains("ran it (pid:2)"));
    }
}

store_test! {
    /// The newest fire of a schedule (of any state) and an agent's newest
    /// run; sub-second instants keep their milliseconds.
    async fn last_fire_and_last_run(store) {
        assert_eq!(store.last_fire("a", &sid("a", 0)).await.unwrap(), None);
        assert_eq!(store.last_run("a").await.unwrap(), None);
        store.claim_run(fire_run("a", 0, at(1, 0))).await.unwrap();
        store.record_unrun(fire_run("a", 0, at(3, 0)), RunState::Missed, "m".into()).await.unwrap();
        store.claim_run(fire_run("a", 0, at(2, 0))).await.unwrap();
        store.claim_run(fire_run("a", 1, at(4, 0))).await.unwrap();
        store.claim_run(fire_run("b", 0, at(5, 0))).await.unwrap();
        let manual = new_run("a");
        store.claim_run(manual.clone()).await.unwrap();
        assert_eq!(store.last_fire("a", &sid("a", 0)).await.unwrap(), Some(at(3, 0)));
        assert_eq!(store.last_fire("a", &sid("a", 1)).await.unwrap(), Some(at(4, 0)));
        assert_eq!(store.last_fire("a", &sid("a", 2)).await.unwrap(), None);
        assert_eq!(store.last_fire("b", &sid("b", 0)).await.unwrap(), Some(at(5, 0)));
        assert_eq!(store.last_fire("c", &sid("c", 0)).await.unwrap(), None);
        assert_eq!(store.last_run("a").await.unwrap().unwrap().id, manual.id);
        assert_eq!(store.last_run("zzz").await.unwrap(), None);
        let precise = at(6, 0) + Duration::milliseconds(250);
        store.claim_run(fire_run("a", 0, precise)).await.unwrap();
        assert_eq!(store.last_fire("a", &sid("a", 0)).await.unwrap(), Some(precise));
    }
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
            store
                .claim_run(NewRun {
                    state,
                    ..new_run(agent)
                })
                .await
                .unwrap();
        }
    }
}

store_test! {
    /// Failures are counted back to the last success; other states neither
    /// count nor end the streak; at most 100.
    async fn consecutive_failures_count_back_to_the_last_success(store) {
        use RunState::*;
        assert_eq!(store.consecutive_failures("a").await.unwrap(), 0);
        history(&store, "a", &[Failed, Succeeded, Failed, Skipped, TimedOut]).await;
        assert_eq!(store.consecutive_failures("a").await.unwrap(), 2);
        history(&store, "a", &[Cancelled, Interrupted, Missed, BudgetExceeded, Running, Queued]).await;
        assert_eq!(store.consecutive_failures("a").await.unwrap(), 2);
        history(&store, "a", &[Interrupted, Interrupted, Interrupted, Failed]).await;
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
    }
}

store_test! {
    /// A delivery id is new once per agent, remembered for 24 hours to the
    /// millisecond (across handles), then new again.
    async fn webhook_deliveries_are_deduplicated_for_a_day(store, test) {
        let t0 = at(12, 0);
        assert!(store.claim_delivery("a", "d1", t0).await.unwrap());
        assert!(!store.claim_delivery("a", "d1", t0).await.unwrap());
        assert!(store.claim_delivery("b", "d1", t0).await.unwrap());
        assert!(store.claim_delivery("a", "d2", t0).await.unwrap());
        let day = Duration::hours(24);
        assert!(!store.claim_delivery("a", "d1", t0 + day).await.unwrap());
        let other = test.reopen();
        assert!(!other.claim_delivery("a", "d1", t0 + Duration::hours(1)).await.unwrap());
        let later = t0 + day + Duration::milliseconds(1);
        assert!(other.claim_delivery("a", "d1", later).await.unwrap());
        assert!(!other.claim_delivery("a", "d1", later).await.unwrap());
        // The others were forgotten too.
        assert!(other.claim_delivery("b", "d1", later).await.unwrap());
        tokio::task::spawn_blocking(move || other.close()).await.unwrap().unwrap();
    }
}

store_test! {
    /// At start-up, running runs of gone owners are interrupted and their
    /// queued runs become the new owner's, still queued.
    async fn recovery_interrupts_running_runs_and_hands_queued_ones_to_the_new_owner(store) {
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
        let kept = store.get_run(&others.id).await.unwrap().unwrap();
        assert_eq!((kept.state, kept.owner.as_deref()), (RunState::Queued, Some("pid:2")));
    }
}

store_test! {
    /// The live sweep interrupts running runs of dead owners only, once.
    async fn the_live_sweep_interrupts_only_running_runs_of_dead_owners(store) {
        let dead = with_owner("pid:1", RunState::Running);
        let mine = with_owner("pid:9", RunState::Running);
        let queued = with_owner("pid:1", RunState::Queued);
        let ownerless = with_owner("", RunState::Running);
        for run in [&dead, &mine, &queued, &ownerless] {
            store.claim_run(run.clone()).await.unwrap();
        }
        store.append_events(&dead.id, vec![text("a")]).await.unwrap();
        let changed = store.interrupt_dead_running_runs(|owner| owner == "pid:9").await.unwrap();
        let mut ids: Vec<&str> = changed.iter().map(|r| r.id.as_str()).collect();
        ids.sort();
        let mut want = [dead.id.as_str(), ownerless.id.as_str()];
        want.sort();
        assert_eq!(ids, want);
        assert!(changed.iter().all(|r| r.state == RunState::Interrupted));
        assert_eq!(seqs(&store, &dead.id).await, [1, 2]);
        let error = changed.iter().find(|r| r.id == dead.id).and_then(|r| r.error.clone()).unwrap();
        assert!(error.contains("the process that ran it (pid:1)"), "{error}");
        for (run, state) in [(&mine, RunState::Running), (&queued, RunState::Queued)] {
            assert_eq!(store.get_run(&run.id).await.unwrap().unwrap().state, state);
        }
        assert_eq!(store.interrupt_dead_running_runs(|owner| owner == "pid:9").await.unwrap(), vec![]);
    }
}

store_test! {
    /// Concurrent replays of one delivery make one run; a claim that fails
    /// remembers nothing, so the delivery can come again and run.
    async fn a_delivery_is_remembered_exactly_when_its_run_is_claimed(store) {
        let now = at(12, 0);
        let claims = (0..16).map(|_| store.claim_run_for_delivery(new_run("a"), "d1", now));
        let claimed = futures::future::join_all(claims).await;
        let won: Vec<RunRecord> = claimed.into_iter().filter_map(|c| c.unwrap()).collect();
        assert_eq!(won.len(), 1);
        assert_eq!(store.list_runs(&RunFilter::default()).await.unwrap().len(), 1);
        let taken = NewRun { id: won[0].id.clone(), ..new_run("a") };
        assert!(matches!(
            store.claim_run_for_delivery(taken, "d2", now).await,
            Err(StoreError::Conflict(_))
        ));
        assert!(store.claim_run_for_delivery(new_run("a"), "d2", now).await.unwrap().is_some());
        assert_eq!(store.claim_run_for_delivery(new_run("a"), "d2", now).await.unwrap(), None);
    }
}
