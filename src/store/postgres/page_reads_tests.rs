//! PostgreSQL tests of the paged reads: runs by agent, state, parent and
//! trigger, newest first with ties in insertion order, limits and offsets;
//! fires newest instant first. Each test has a database of its own.

use chrono::{TimeZone, Utc};

use super::runs_tests::{block, execute, fire_run, new_run, node};
use super::testing::TestDb;
use crate::store::{FirePage, NewRun, RunFilter, RunPage, RunParent};
use crate::types::{RunState, Trigger, Usage};

#[test]
fn list_filters_limit_offset_and_order() {
    let Some(db) = TestDb::create("pg_list_runs") else {
        return;
    };
    let store = node(&db);
    let mut ids = Vec::new();
    for agent in ["a", "b", "a", "b", "a"] {
        let run = new_run(agent);
        block(store.claim_run(run.clone())).unwrap();
        ids.push(run.id);
    }
    // Several runs created in the same millisecond keep insertion order.
    execute(
        &store,
        "UPDATE runs SET created_at = '2025-01-01T00:00:00Z'",
    );
    block(store.finish_run_as(
        &ids[2],
        Vec::new(),
        crate::store::RunEnd {
            output: None,
            usage: Usage::default(),
            ..crate::store::RunEnd::new(RunState::Failed, Some("boom".into()))
        },
    ))
    .unwrap();
    let list = |agent: Option<&str>, state: Option<RunState>, limit: usize| {
        let filter = RunFilter {
            parent: None,
            agent: agent.map(String::from),
            state,
            limit,
        };
        block(store.list_runs(&filter))
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(list(None, None, 0), newest_first);
    assert_eq!(list(None, None, 2), newest_first[..2]);
    assert_eq!(
        list(Some("a"), None, 0),
        [ids[4].clone(), ids[2].clone(), ids[0].clone()]
    );
    assert_eq!(list(Some("a"), None, 1), [ids[4].clone()]);
    assert_eq!(list(None, Some(RunState::Failed), 0), [ids[2].clone()]);
    assert_eq!(
        list(Some("b"), Some(RunState::Failed), 0),
        Vec::<String>::new()
    );
    assert_eq!(
        list(Some("b"), Some(RunState::Running), 0),
        [ids[3].clone(), ids[1].clone()]
    );
    assert_eq!(list(Some("zzz"), None, 0), Vec::<String>::new());

    // Pages: trigger, parent, offset.
    let child = NewRun {
        trigger: Trigger::Api,
        parent: Some(RunParent {
            run_id: ids[0].clone(),
            depth: 1,
        }),
        ..new_run("a")
    };
    block(store.claim_run(child.clone())).unwrap();
    let page = |page: RunPage| {
        block(store.list_run_page(&page))
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        page(RunPage {
            trigger: Some(Trigger::Api),
            ..Default::default()
        }),
        vec![child.id.clone()]
    );
    let children = page(RunPage {
        filter: RunFilter {
            parent: Some(ids[0].clone()),
            ..Default::default()
        },
        ..Default::default()
    });
    assert_eq!(children, vec![child.id.clone()]);
    assert_eq!(block(store.get_run(&child.id)).unwrap().unwrap().depth, 1);
    assert_eq!(
        page(RunPage {
            filter: RunFilter {
                agent: Some("a".into()),
                limit: 2,
                ..Default::default()
            },
            offset: 1,
            ..Default::default()
        }),
        [ids[4].clone(), ids[2].clone()]
    );
    assert_eq!(
        page(RunPage {
            offset: 100,
            ..Default::default()
        }),
        Vec::<String>::new()
    );
}

#[test]
fn fires_are_listed_newest_instant_first() {
    let Some(db) = TestDb::create("pg_list_fires") else {
        return;
    };
    let store = node(&db);
    let at = |h: u32| Utc.with_ymd_and_hms(2025, 10, 26, h, 0, 0).unwrap();
    let first = fire_run("a", 0, at(1));
    block(store.claim_run(first.clone())).unwrap();
    let missed = fire_run("a", 0, at(3));
    block(store.record_unrun(missed.clone(), RunState::Missed, "missed: down".into())).unwrap();
    let other = fire_run("b", 0, at(2));
    block(store.claim_run(other.clone())).unwrap();
    block(store.claim_run(new_run("a"))).unwrap();
    let fires = |page: FirePage| {
        block(store.list_fires(&page))
            .unwrap()
            .into_iter()
            .map(|r| (r.id, r.error))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        fires(FirePage::default()),
        [
            (missed.id.clone(), Some("missed: down".to_string())),
            (other.id.clone(), None),
            (first.id.clone(), None)
        ]
    );
    assert_eq!(
        fires(FirePage {
            agent: Some("a".into()),
            limit: 1,
            offset: 1
        }),
        [(first.id.clone(), None)]
    );
    assert_eq!(
        fires(FirePage {
            agent: Some("zzz".into()),
            ..Default::default()
        }),
        []
    );
}
