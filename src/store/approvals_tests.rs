//! Tests of approvals through the [`Store`] interface, each on both
//! backends (`store_test!`): a run goes to `waiting_approval` with its
//! call, a decision is made once and only while the run waits, a re-asked
//! call keeps its first times, and the run goes on. Races between nodes
//! are tested on PostgreSQL in `postgres/approvals_tests.rs`.

use chrono::{DateTime, Duration, Utc};

use crate::store::StoreError;
use crate::store::testing::{new_run, store_test};
use crate::types::RunState;
use crate::types::approval::{ApprovalRequest, DecidedBy, Decision};

fn request() -> ApprovalRequest {
    ApprovalRequest {
        call_id: "call_1".into(),
        tool: "bash".into(),
        arguments: r#"{"command":"ls"}"#.into(),
    }
}

/// Now, to the millisecond (as both backends store it).
fn now() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap()
}

fn decision(approved: bool, by: DecidedBy) -> Decision {
    Decision {
        approved,
        reason: (!approved).then(|| "no".to_string()),
        by,
        at: now(),
    }
}

store_test! {
    /// The whole life of an approval, with the reads `aurad approve` uses.
    async fn a_decision_is_made_once_and_only_while_the_run_waits(store) {
        let run = store.claim_run(new_run("a")).await.unwrap();
        let idle = store
            .decide_approval(&run.id, "call_1", decision(true, DecidedBy::Cli))
            .await
            .unwrap_err();
        assert!(
            matches!(&idle, StoreError::Conflict(m) if m.contains("not waiting for approval (it is running)")),
            "{idle}"
        );
        let asked = now();
        let timeout_at = asked + Duration::hours(1);
        let stored = store
            .wait_for_approval(&run.id, r#"{"turn":1}"#.into(), request(), asked, timeout_at)
            .await
            .unwrap();
        assert_eq!(stored.request, request());
        assert_eq!((stored.requested_at, stored.timeout_at), (asked, timeout_at));
        assert!(stored.decision.is_none());
        assert_eq!(
            store.get_run(&run.id).await.unwrap().unwrap().state,
            RunState::WaitingApproval
        );
        assert_eq!(
            store.approval_checkpoint(&run.id).await.unwrap().as_deref(),
            Some(r#"{"turn":1}"#)
        );
        // Asked again (a resumed run): the first times stand.
        let again = store
            .wait_for_approval(
                &run.id,
                "{}".into(),
                request(),
                asked + Duration::hours(2),
                timeout_at + Duration::hours(2),
            )
            .await
            .unwrap();
        assert_eq!(again.timeout_at, stored.timeout_at);
        let waiting = store.waiting_runs().await.unwrap();
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].run.id, run.id);
        assert_eq!(waiting[0].approval, stored);

        // A decision names the call it was shown: another is refused.
        let other = store
            .decide_approval(&run.id, "call_2", decision(true, DecidedBy::Api))
            .await
            .unwrap_err();
        assert!(
            matches!(&other, StoreError::Conflict(m) if m.contains("waits on call call_1") && m.contains("not on call \"call_2\"")),
            "{other}"
        );
        let decided = store
            .decide_approval(&run.id, "call_1", decision(false, DecidedBy::Api))
            .await
            .unwrap();
        assert_eq!(decided.decision.as_ref().unwrap().by, DecidedBy::Api);
        let twice = store
            .decide_approval(&run.id, "call_1", decision(true, DecidedBy::Cli))
            .await
            .unwrap_err();
        assert!(
            matches!(&twice, StoreError::Conflict(m) if m.contains("already denied by api")),
            "{twice}"
        );
        let read = store.approval(&run.id, "call_1").await.unwrap().unwrap();
        assert_eq!(read.decision, decided.decision);
        assert_eq!(store.approval(&run.id, "other").await.unwrap(), None);
        // Decided, not resumed yet: still listed, with its decision.
        let waiting = store.waiting_runs().await.unwrap();
        assert_eq!(waiting[0].approval.decision, decided.decision);
        assert!(store.resume_after_approval(&run.id, "pid:2").await.unwrap());
        assert!(!store.resume_after_approval(&run.id, "pid:2").await.unwrap());
        let run = store.get_run(&run.id).await.unwrap().unwrap();
        assert_eq!(
            (run.state, run.owner.as_deref()),
            (RunState::Running, Some("pid:2"))
        );
        assert!(store.approval_checkpoint(&run.id).await.unwrap().is_none());
        assert!(store.waiting_runs().await.unwrap().is_empty());
        let missing = store
            .decide_approval("0000000000000000-none", "call_1", decision(true, DecidedBy::Cli))
            .await
            .unwrap_err();
        assert!(matches!(missing, StoreError::NotFound(_)), "{missing}");
    }
}

store_test! {
    /// `aurad approve` decides and lists from a second handle (another
    /// process or node) with the blocking twins, and the first sees it.
    async fn a_decision_from_another_handle_is_seen(store, test) {
        let run = store.claim_run(new_run("a")).await.unwrap();
        let asked = now();
        store
            .wait_for_approval(&run.id, "{}".into(), request(), asked, asked + Duration::hours(1))
            .await
            .unwrap();
        let other = test.reopen();
        let id = run.id.clone();
        let (listed, decided) = tokio::task::spawn_blocking(move || {
            let listed = other.waiting_runs_blocking().unwrap();
            let decided = other.decide_approval_blocking(&id, "call_1", decision(true, DecidedBy::Cli));
            other.close().unwrap();
            (listed, decided)
        })
        .await
        .unwrap();
        assert_eq!(listed.len(), 1);
        let decided = decided.unwrap();
        let seen = store.approval(&run.id, "call_1").await.unwrap().unwrap();
        assert_eq!(seen.decision, decided.decision);
    }
}

store_test! {
    /// Two processes (nodes) adopting one run left waiting by a gone owner
    /// at once: one wins, and the run is then its; a run not waiting, or
    /// owned by someone else than the caller says, is not adopted.
    async fn a_waiting_run_is_adopted_once(store, test) {
        let run = store.claim_run(new_run("a")).await.unwrap();
        assert!(!store.adopt_waiting(&run.id, Some("pid:1"), "node-b").await.unwrap());
        let asked = now();
        store
            .wait_for_approval(&run.id, "{}".into(), request(), asked, asked + Duration::hours(1))
            .await
            .unwrap();
        assert!(!store.adopt_waiting(&run.id, Some("pid:9"), "node-b").await.unwrap());
        let other = test.reopen();
        let (one, two) = tokio::join!(
            store.adopt_waiting(&run.id, Some("pid:1"), "node-b"),
            other.adopt_waiting(&run.id, Some("pid:1"), "node-c"),
        );
        let (one, two) = (one.unwrap(), two.unwrap());
        assert!(one ^ two, "exactly one adoption: {one} {two}");
        let owner = store.get_run(&run.id).await.unwrap().unwrap().owner;
        assert_eq!(owner.as_deref(), Some(if one { "node-b" } else { "node-c" }));
        assert_eq!(
            store.get_run(&run.id).await.unwrap().unwrap().state,
            RunState::WaitingApproval
        );
        tokio::task::spawn_blocking(move || other.close()).await.unwrap().unwrap();
    }
}
