//! Tests of triggered claims through the [`Store`] interface, on both
//! backends (`store_test!`): each `after:` follow-up and each watched file
//! version claims one run; an interrupted file run can be claimed again.

use chrono::Utc;

use crate::store::testing::{new_run, store_test};
use crate::store::{NewRun, TriggerClaim};
use crate::types::{RunState, Trigger};

fn watch_run(agent: &str) -> NewRun {
    NewRun {
        trigger: Trigger::Watch,
        owner: String::new(),
        ..new_run(agent)
    }
}

store_test! {
    /// One run per follow-up and per file version; a file whose run was
    /// interrupted was not processed and is claimed again.
    async fn each_trigger_claims_one_run_and_an_interrupted_file_run_can_be_claimed_again(store) {
        let now = Utc::now();
        let after = || TriggerClaim::After { after_run_id: "r1".into() };
        assert!(store.claim_run_for_trigger(watch_run("b"), after(), now).await.unwrap().is_some());
        assert!(store.claim_run_for_trigger(watch_run("b"), after(), now).await.unwrap().is_none());
        assert!(store.claim_run_for_trigger(watch_run("c"), after(), now).await.unwrap().is_some());
        let file = |hash: &str| TriggerClaim::Watch {
            path: "inbox/a.md".into(),
            content_hash: hash.into(),
        };
        assert!(!store.watched_file_done("w", "inbox/a.md", "h1").await.unwrap());
        let first = store
            .claim_run_for_trigger(watch_run("w"), file("h1"), now)
            .await
            .unwrap()
            .unwrap();
        assert!(store.watched_file_done("w", "inbox/a.md", "h1").await.unwrap());
        assert!(store.claim_run_for_trigger(watch_run("w"), file("h1"), now).await.unwrap().is_none());
        assert!(store.claim_run_for_trigger(watch_run("w"), file("h2"), now).await.unwrap().is_some());
        store
            .finish_run(&first.id, RunState::Interrupted, None, None, Default::default())
            .await
            .unwrap();
        assert!(!store.watched_file_done("w", "inbox/a.md", "h1").await.unwrap());
        assert!(store.claim_run_for_trigger(watch_run("w"), file("h1"), now).await.unwrap().is_some());
        assert!(store.claim_run_for_trigger(watch_run("w"), file("h1"), now).await.unwrap().is_none());
    }
}
