//! Tests of retention through the [`Store`] interface, each on both
//! backends (`store_test!`). A cutoff in the future makes every final run
//! old enough, so runs are written through the store as they are in
//! service. Aged runs, what is never pruned, the newest fire and nodes
//! pruning at once are tested per backend (`sqlite/retention_tests.rs`,
//! `postgres/retention_tests.rs`), which rewrite times with SQL.

use chrono::{Duration, Utc};

use crate::store::testing::{new_run, store_test, text};
use crate::store::{PruneScope, Pruned, RunRecord, Store, StoreError};
use crate::types::{RunEvent, RunState, Usage};

/// A run claimed with `events` text events, then finished `succeeded`.
async fn finished(store: &Store, events: usize) -> RunRecord {
    let run = store.claim_run(new_run("a")).await.unwrap();
    let texts = (0..events).map(|i| text(&format!("e{i}"))).collect();
    store.append_events(&run.id, texts).await.unwrap();
    store
        .finish_run(
            &run.id,
            RunState::Succeeded,
            None,
            Some("ok".into()),
            Usage::default(),
        )
        .await
        .unwrap();
    store.get_run(&run.id).await.unwrap().unwrap()
}

store_test! {
    /// Pruning events of every final run leaves a live run's events alone
    /// (and it can go on writing them); readers of a pruned run are told.
    async fn live_events_of_a_recent_run_are_untouched(store) {
        let run = finished(&store, 2).await;
        let live = store.claim_run(new_run("a")).await.unwrap();
        store.append_events(&live.id, vec![text("x")]).await.unwrap();
        let later = Utc::now() + Duration::days(1);
        let batch = store.prune_batch(PruneScope::Events, later, 500).await.unwrap();
        assert_eq!((batch.pruned.runs_emptied, batch.pruned.events), (1, 2));
        store
            .append_events(&live.id, vec![RunEvent::TextDelta { text: "y".into() }])
            .await
            .unwrap();
        assert_eq!(store.run_events(&live.id).await.unwrap().len(), 2);
        assert!(matches!(
            store.run_events(&run.id).await,
            Err(StoreError::EventsPruned { events: 2, .. })
        ));
    }
}

store_test! {
    /// Batches of `max_rows` rows add up to the dry run, events first,
    /// then the runs.
    async fn batches_stay_small_and_add_up_to_the_dry_run(store) {
        for _ in 0..12 {
            finished(&store, 9).await;
        }
        let before = Utc::now() + Duration::days(1);
        let dry = store.prunable(PruneScope::Events, before).await.unwrap();
        assert_eq!((dry.runs_emptied, dry.events), (12, 108));
        // 9 events + the run's row = 10 rows a run: 5 runs per 50-row batch.
        let first = store.prune_batch(PruneScope::Events, before, 50).await.unwrap();
        assert_eq!((first.pruned.runs_emptied, first.pruned.events), (5, 45));
        let mut total = first.pruned;
        loop {
            let batch = store.prune_batch(PruneScope::Events, before, 50).await.unwrap();
            if batch.pruned.runs_touched() == 0 {
                break;
            }
            total.add(batch.pruned);
        }
        assert_eq!(total, dry);
        let dry = store.prunable(PruneScope::Runs, before).await.unwrap();
        assert_eq!(dry, Pruned { runs: 12, ..Pruned::default() });
        let mut runs = Pruned::default();
        loop {
            let batch = store.prune_batch(PruneScope::Runs, before, 7).await.unwrap();
            if batch.pruned.runs_touched() == 0 {
                break;
            }
            assert!(batch.pruned.runs <= 7);
            runs.add(batch.pruned);
        }
        assert_eq!(runs, dry);
        assert!(store.prunable(PruneScope::Runs, before).await.unwrap().is_empty());
    }
}
