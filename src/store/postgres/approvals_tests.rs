//! Approvals on a real PostgreSQL server, beyond the interface tests both
//! backends run (`store/approvals_tests.rs`): states that cannot wait,
//! which call `waiting_runs` lists, a row written wrong, and two nodes
//! deciding the same approval at once.
//!
//! Also the small helpers the other tests of this group use (`node`,
//! `exec`, `count`, `insert_run`, `run`): runs are inserted with plain SQL
//! so these tests do not depend on the run operations of another file.
//! Operations are called as the store facade calls them from non-async
//! code: `futures::executor::block_on`.

use std::sync::{Arc, Barrier};

use chrono::{DateTime, Duration, Utc};
use futures::executor::block_on;

use super::run_rows::run_by_id;
use super::testing::TestDb;
use super::{Postgres, get, pg};
use crate::store::{RunRecord, StoreError};
use crate::types::RunState;
use crate::types::approval::{ApprovalRequest, DecidedBy, Decision};

/// A node: a handle of its own on the test's database.
pub(super) fn node(db: &TestDb) -> Postgres {
    Postgres::connect(db.url()).unwrap()
}

/// Runs `statements` (SQL, several allowed) on `store`'s database.
pub(super) fn exec(store: &Postgres, statements: &str) {
    let (pool, url, statements) = (store.pool(), store.url().clone(), statements.to_owned());
    store
        .blocking(async move {
            let client = get(&pool, &url).await?;
            client
                .batch_execute(&statements)
                .await
                .map_err(pg("test statements"))
        })
        .unwrap();
}

/// The single `bigint` `query` selects.
pub(super) fn count(store: &Postgres, query: &str) -> i64 {
    let (pool, url, query) = (store.pool(), store.url().clone(), query.to_owned());
    store
        .blocking(async move {
            let client = get(&pool, &url).await?;
            let row = client
                .query_one(&query, &[])
                .await
                .map_err(pg("test query"))?;
            Ok(row.get(0))
        })
        .unwrap()
}

/// Inserts run `id` of `agent` in `state`, owned by `owner`, created
/// `created` (finished then too when `state` is final).
pub(super) fn insert_run(
    store: &Postgres,
    id: &str,
    agent: &str,
    state: RunState,
    owner: Option<&str>,
    created: DateTime<Utc>,
) {
    let (pool, url) = (store.pool(), store.url().clone());
    let (id, agent, owner) = (id.to_owned(), agent.to_owned(), owner.map(str::to_owned));
    let finished = state.is_final().then_some(created);
    store
        .blocking(async move {
            let client = get(&pool, &url).await?;
            client
                .execute(
                    r#"INSERT INTO runs (id, agent, state, "trigger", input, model,
                                         definition_hash, owner, created_at, started_at,
                                         finished_at)
                       VALUES ($1, $2, $3, 'api', 'hi', 'test', 'h', $4, $5, $5, $6)"#,
                    &[&id, &agent, &state.as_str(), &owner, &created, &finished],
                )
                .await
                .map_err(pg("inserting a test run"))
        })
        .unwrap();
}

/// Run `id` as stored now.
pub(super) fn run(store: &Postgres, id: &str) -> Option<RunRecord> {
    let (pool, url, id) = (store.pool(), store.url().clone(), id.to_owned());
    store
        .blocking(async move {
            let client = get(&pool, &url).await?;
            run_by_id(&client, &id).await
        })
        .unwrap()
}

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
        at: super::run_rows::millis(Utc::now()),
    }
}

#[test]
fn only_a_running_or_waiting_run_can_wait_and_an_unknown_run_is_not_found() {
    let Some(db) = TestDb::create("wait_states") else {
        return;
    };
    let store = node(&db);
    let now = Utc::now();
    let missing =
        block_on(store.wait_for_approval("nope", "{}".into(), request(), now, now)).unwrap_err();
    assert!(
        matches!(&missing, StoreError::NotFound(m) if m.contains("nope")),
        "{missing}"
    );
    insert_run(&store, "done", "a", RunState::Cancelled, None, now);
    let done =
        block_on(store.wait_for_approval("done", "{}".into(), request(), now, now)).unwrap_err();
    assert!(
        matches!(&done, StoreError::Conflict(m) if m.contains("it is cancelled")),
        "{done}"
    );
    assert_eq!(count(&store, "SELECT COUNT(*) FROM approvals"), 0);
    assert_eq!(run(&store, "done").unwrap().state, RunState::Cancelled);
    // A run waiting with no call recorded (written by hand) has nothing to decide.
    insert_run(&store, "bare", "a", RunState::WaitingApproval, None, now);
    let bare =
        block_on(store.decide_approval("bare", "c1", decision(true, DecidedBy::Cli))).unwrap_err();
    assert!(
        matches!(&bare, StoreError::Conflict(m) if m.contains("no tool call waiting")),
        "{bare}"
    );
}

#[test]
fn waiting_runs_lists_each_runs_latest_call_oldest_request_first() {
    let Some(db) = TestDb::create("waiting_runs") else {
        return;
    };
    let store = node(&db);
    let t0 = super::run_rows::millis(Utc::now()) - Duration::minutes(10);
    insert_run(&store, "older", "a", RunState::Running, None, t0);
    insert_run(&store, "newer", "b", RunState::Running, None, t0);
    insert_run(&store, "other", "b", RunState::Running, None, t0);
    let ask = |id: &str, call: &str, at: DateTime<Utc>| {
        let request = ApprovalRequest {
            call_id: call.into(),
            ..request()
        };
        block_on(store.wait_for_approval(id, "{}".into(), request, at, at + Duration::hours(1)))
            .unwrap()
    };
    ask("newer", "c1", t0 + Duration::minutes(1));
    ask("older", "c1", t0 + Duration::minutes(2));
    // `newer` asks about a second call later: that one is listed.
    ask("newer", "c2", t0 + Duration::minutes(3));
    ask("other", "c1", t0 + Duration::minutes(4));
    exec(
        &store,
        "UPDATE runs SET state = 'cancelled' WHERE id = 'other'",
    );
    let listed: Vec<(String, String)> = block_on(store.waiting_runs())
        .unwrap()
        .into_iter()
        .map(|w| (w.run.id, w.approval.request.call_id))
        .collect();
    assert_eq!(
        listed,
        [("older".into(), "c1".into()), ("newer".into(), "c2".into())]
    );
    // A decision on `newer` names its latest call; its earlier one is refused.
    let earlier =
        block_on(store.decide_approval("newer", "c1", decision(true, DecidedBy::Api))).unwrap_err();
    assert!(
        matches!(&earlier, StoreError::Conflict(m) if m.contains("waits on call c2")),
        "{earlier}"
    );
    let decided =
        block_on(store.decide_approval("newer", "c2", decision(true, DecidedBy::Api))).unwrap();
    assert_eq!(decided.request.call_id, "c2");
    // A row written wrong is an error naming the run, not a panic.
    exec(
        &store,
        "UPDATE approvals SET decided_by = 'robot' WHERE run_id = 'newer'",
    );
    let err = block_on(store.waiting_runs()).unwrap_err();
    assert!(
        matches!(&err, StoreError::Internal(m) if m.contains("newer")),
        "{err}"
    );
}

/// Two nodes decide the same approval at the same moment (a person on
/// one, the timeout on the other): exactly one decision is stored, the
/// other node gets a `Conflict`.
#[test]
fn two_nodes_deciding_one_approval_make_one_decision() {
    let Some(db) = TestDb::create("decide_race") else {
        return;
    };
    let nodes = [Arc::new(node(&db)), Arc::new(node(&db))];
    let now = Utc::now();
    for round in 0..8 {
        let id = format!("r{round}");
        insert_run(&nodes[0], &id, "a", RunState::Running, Some("n1"), now);
        block_on(nodes[0].wait_for_approval(
            &id,
            "{}".into(),
            request(),
            now,
            now + Duration::hours(1),
        ))
        .unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let deciders: Vec<_> = nodes
            .iter()
            .zip([DecidedBy::Cli, DecidedBy::Timeout])
            .map(|(store, by)| {
                let (store, barrier, id) = (Arc::clone(store), Arc::clone(&barrier), id.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    block_on(store.decide_approval(
                        &id,
                        "call_1",
                        decision(by == DecidedBy::Cli, by),
                    ))
                })
            })
            .collect();
        let outcomes: Vec<_> = deciders.into_iter().map(|t| t.join().unwrap()).collect();
        let won: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {outcomes:?}");
        let lost = outcomes.iter().find_map(|o| o.as_ref().err()).unwrap();
        assert!(
            matches!(lost, StoreError::Conflict(m) if m.contains("already")),
            "round {round}: {lost}"
        );
        let stored = block_on(nodes[1].approval(&id, "call_1")).unwrap().unwrap();
        assert_eq!(stored.decision, won[0].decision, "round {round}");
    }
}
