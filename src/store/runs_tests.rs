//! Tests of runs and their events through the [`Store`] interface, each run
//! on both backends (`store_test!`).

use crate::store::testing::{new_run, store_test, text};
use crate::store::{RunFilter, Store};
use crate::types::{RunEvent, RunState, Usage};

store_test! {
    /// A run claimed, given events and finished reads back as written, by
    /// the async methods and by their blocking twins from a second handle.
    async fn claim_append_finish_round_trip(store, test) {
        let run = new_run("triage");
        store.claim_run(run.clone()).await.unwrap();

        let claimed = store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(claimed.state, RunState::Running);
        assert_eq!(claimed.owner.as_deref(), Some("pid:1"));
        assert_eq!(claimed.started_at, Some(claimed.created_at));
        assert!(claimed.finished_at.is_none());
        assert_eq!(claimed.usage, Usage::default());
        // Shown as RFC 3339 UTC with milliseconds, as stored.
        let json = serde_json::to_value(&claimed).unwrap();
        let shown = json["created_at"].as_str().unwrap();
        assert!(shown.ends_with('Z') && shown.len() == 24, "{shown}");
        assert_eq!(
            chrono::DateTime::parse_from_rfc3339(shown).unwrap(),
            claimed.created_at
        );
        assert_eq!(json["finished_at"], serde_json::Value::Null);

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
                trigger: run.trigger.clone(),
                definition_hash: run.definition_hash.clone(),
                input: run.input.clone(),
            },
            text("Hi"),
            RunEvent::Usage {
                iteration: 1,
                usage,
                cost_usd: None,
            },
            RunEvent::Finished {
                state: RunState::Succeeded,
                reason: None,
                output: Some("Hi".into()),
                usage,
                cost_usd: None,
                result: None,
            },
        ];
        store.append_events(&run.id, events.clone()).await.unwrap();
        store
            .finish_run(&run.id, RunState::Succeeded, None, Some("Hi".into()), usage)
            .await
            .unwrap();

        let done = store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(done.state, RunState::Succeeded);
        assert_eq!(done.output.as_deref(), Some("Hi"));
        assert_eq!(done.usage, usage);
        assert!(done.finished_at.is_some());
        assert_eq!(store.run_events(&run.id).await.unwrap(), events);
        assert_eq!(
            store.list_runs(&RunFilter::default()).await.unwrap(),
            vec![done.clone()]
        );

        // The blocking twins, from a second handle (another process or node).
        let other: Store = test.reopen();
        let id = run.id.clone();
        let (got, got_events) = tokio::task::spawn_blocking(move || {
            let got = other.get_run_blocking(&id).unwrap();
            let got_events = other.run_events_blocking(&id).unwrap();
            other.close().unwrap();
            (got, got_events)
        })
        .await
        .unwrap();
        assert_eq!(got, Some(done));
        assert_eq!(got_events, events);
    }
}
