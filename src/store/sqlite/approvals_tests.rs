//! Store tests of approvals: a run goes to `waiting_approval` with its call,
//! a decision is made once and only while the run waits, a re-asked call
//! keeps its first times, and the run goes on.

use chrono::{Duration, Utc};

use super::tests::{db, new_run};
use crate::store::*;
use crate::types::RunState;
use crate::types::approval::{ApprovalRequest, DecidedBy, Decision};

fn request() -> ApprovalRequest {
    ApprovalRequest {
        call_id: "call_1".into(),
        tool: "bash".into(),
        arguments: r#"{"command":"ls"}"#.into(),
    }
}

fn decision(approved: bool, by: DecidedBy) -> Decision {
    Decision {
        approved,
        reason: (!approved).then(|| "no".to_string()),
        by,
        at: Utc::now(),
    }
}

#[tokio::test]
async fn a_decision_is_made_once_and_only_while_the_run_waits() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let run = store.claim_run(new_run("a")).await.unwrap();
    let idle = store
        .decide_approval(&run.id, decision(true, DecidedBy::Cli))
        .await
        .unwrap_err();
    assert!(
        matches!(&idle, StoreError::Conflict(m) if m.contains("not waiting for approval (it is running)")),
        "{idle}"
    );
    let asked = Utc::now();
    let timeout_at = asked + Duration::hours(1);
    let stored = store
        .wait_for_approval(&run.id, "{}".into(), request(), asked, timeout_at)
        .await
        .unwrap();
    assert_eq!(stored.request, request());
    assert!(stored.decision.is_none());
    assert_eq!(
        store.get_run(&run.id).await.unwrap().unwrap().state,
        RunState::WaitingApproval
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

    let decided = store
        .decide_approval(&run.id, decision(false, DecidedBy::Api))
        .await
        .unwrap();
    assert_eq!(decided.decision.as_ref().unwrap().by, DecidedBy::Api);
    let twice = store
        .decide_approval(&run.id, decision(true, DecidedBy::Cli))
        .await
        .unwrap_err();
    assert!(
        matches!(&twice, StoreError::Conflict(m) if m.contains("already denied by api")),
        "{twice}"
    );
    let read = store.approval(&run.id, "call_1").await.unwrap().unwrap();
    assert!(!read.decision.unwrap().approved);
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
        .decide_approval("0000000000000000-none", decision(true, DecidedBy::Cli))
        .await
        .unwrap_err();
    assert!(matches!(missing, StoreError::NotFound(_)), "{missing}");
}
