//! Tests of pipeline runs and their steps through the [`Store`] interface,
//! each on both backends (`store_test!`). Rows written wrong and nodes
//! taking over at once are tested on PostgreSQL in
//! `postgres/steps_tests.rs`.

use crate::store::testing::{new_run, store_test, text};
use crate::store::{StepEnd, StoreError};
use crate::types::{RunState, StepState, Usage};

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

store_test! {
    /// A pipeline run keeps its first context; its steps (and `for_each`
    /// items) are written with their events in seq order, a retry keeps
    /// the first start, items and child run, and they read back in order.
    async fn steps_are_written_with_their_events_and_read_in_order(store) {
        let run = store.claim_run(new_run("p")).await.unwrap();
        let id = run.id.as_str();
        store.begin_pipeline(id, Some(r#"{"x":1}"#.into())).await.unwrap();
        store.begin_pipeline(id, Some(r#"{"x":2}"#.into())).await.unwrap();
        assert_eq!(store.pipeline_context(id).await.unwrap().as_deref(), Some(r#"{"x":1}"#));
        let items = vec!["a".to_string(), "b".to_string()];
        let mut seqs = vec![
            store.step_started(id, "fan", None, 1, Some(&items), text("1")).await.unwrap(),
            store.step_started(id, "fan", Some(0), 1, None, text("2")).await.unwrap(),
            store
                .step_finished(id, "fan", Some(0), end(StepState::Failed, Some("c1")), text("3"))
                .await
                .unwrap(),
            store.step_started(id, "fan", Some(0), 2, None, text("4")).await.unwrap(),
        ];
        let retried = store.steps_of(id).await.unwrap();
        let item = retried.iter().find(|s| s.item == Some(0)).unwrap();
        assert_eq!(
            (item.state, item.attempts, item.error.as_deref(), item.child_run_id.as_deref()),
            (StepState::Running, 2, None, Some("c1"))
        );
        seqs.push(
            store
                .step_finished(id, "fan", Some(0), end(StepState::Succeeded, None), text("5"))
                .await
                .unwrap(),
        );
        seqs.push(
            store
                .step_finished(id, "fan", None, end(StepState::Succeeded, None), text("6"))
                .await
                .unwrap(),
        );
        // A step that never started gets its row when it ends.
        seqs.push(
            store
                .step_finished(id, "later", None, end(StepState::Skipped, None), text("7"))
                .await
                .unwrap(),
        );
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        let steps = store.steps_of(id).await.unwrap();
        let order: Vec<(&str, Option<usize>)> =
            steps.iter().map(|s| (s.step.as_str(), s.item)).collect();
        assert_eq!(order, [("fan", None), ("fan", Some(0)), ("later", None)]);
        assert_eq!(steps[0].items, Some(items));
        assert_eq!(
            (steps[0].state, steps[0].usage.input_tokens, steps[0].cost_usd),
            (StepState::Succeeded, Some(7), Some(0.5))
        );
        assert_eq!(steps[1].started_at, item.started_at, "the first start stays");
        assert_eq!(steps[1].child_run_id.as_deref(), Some("c1"));
        assert_eq!((steps[2].started_at, steps[2].attempts), (None, 0));
        assert!(steps[2].finished_at.is_some());
    }
}

store_test! {
    /// A step of a run that does not exist is `NotFound` on both backends,
    /// saying what to do, and leaves no row and no event.
    async fn a_step_of_a_run_that_does_not_exist_is_not_found(store) {
        let started = store.step_started("nope", "s", None, 1, None, text("x")).await;
        let finished = store
            .step_finished("nope", "s", None, end(StepState::Succeeded, None), text("y"))
            .await;
        for outcome in [started, finished] {
            match outcome {
                Err(StoreError::NotFound(m)) => {
                    assert!(m.contains("nope") && m.contains("claim a run"), "{m}");
                }
                other => panic!("want NotFound, got {other:?}"),
            }
        }
        assert_eq!(store.steps_of("nope").await, Ok(Vec::new()));
        // The run's own steps are unaffected.
        let run = store.claim_run(new_run("p")).await.unwrap();
        store.step_started(&run.id, "s", None, 1, None, text("1")).await.unwrap();
        assert_eq!(store.steps_of(&run.id).await.unwrap().len(), 1);
    }
}

store_test! {
    /// Pipeline runs left open by an owner that is gone are taken over in
    /// their state; runs of live owners and plain runs are not.
    async fn take_over_takes_open_pipeline_runs_of_owners_that_are_gone(store) {
        let dead = store.claim_run(new_run("p")).await.unwrap();
        store.begin_pipeline(&dead.id, None).await.unwrap();
        let live = store.claim_run(crate::store::NewRun {
            owner: "live".into(),
            ..new_run("p")
        }).await.unwrap();
        store.begin_pipeline(&live.id, None).await.unwrap();
        let plain = store.claim_run(new_run("p")).await.unwrap();
        let taken = store.take_over_pipelines(|owner| owner == "live", "me").await.unwrap();
        let ids: Vec<&str> = taken.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, [dead.id.as_str()]);
        assert_eq!(
            (taken[0].state, taken[0].owner.as_deref()),
            (RunState::Running, Some("me"))
        );
        for (id, owner) in [(&live.id, "live"), (&plain.id, "pid:1")] {
            let now = store.get_run(id).await.unwrap().unwrap();
            assert_eq!(now.owner.as_deref(), Some(owner));
        }
        let again = store.take_over_pipelines(|o| o == "me" || o == "live", "other").await;
        assert_eq!(again, Ok(Vec::new()));
    }
}
