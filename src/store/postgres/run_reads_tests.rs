//! PostgreSQL tests of the run reads: id prefix lookups (bytewise, at most
//! 11 matches, read while another node inserts), events after a seq and
//! pruned events, last fire and last run, consecutive failures, and
//! corrupt rows. Each test has a database of its own on a real server.

use chrono::{Duration, TimeZone, Utc};

use super::runs_tests::{block, execute, fire_run, new_run, node, race, sid, text};
use super::testing::TestDb;
use crate::store::{NewRun, RunFilter, StoreError};
use crate::types::{RunState, Usage};

fn with_id(id: &str) -> NewRun {
    NewRun {
        id: id.into(),
        ..new_run("a")
    }
}

#[test]
fn prefix_lookup_and_ambiguity() {
    let Some(db) = TestDb::create("pg_prefix") else {
        return;
    };
    let store = node(&db);
    // `abc-d999` and `abcD` sort near `abcd` in natural-language
    // collations; compared bytewise they are not under the prefix `abcd`.
    for id in ["abcd1111", "abcd2222", "abce3333", "abc-d999", "abcD0000"] {
        block(store.claim_run(with_id(id))).unwrap();
    }
    assert_eq!(
        block(store.get_run("abcd1")).unwrap().unwrap().id,
        "abcd1111"
    );
    assert_eq!(
        block(store.get_run("abce")).unwrap().unwrap().id,
        "abce3333"
    );
    assert_eq!(
        block(store.get_run("abcd2222")).unwrap().unwrap().id,
        "abcd2222"
    );
    assert_eq!(
        block(store.get_run("abcD")).unwrap().unwrap().id,
        "abcD0000"
    );
    assert_eq!(block(store.get_run("abcf")).unwrap(), None);
    assert_eq!(block(store.get_run("ffffffff")).unwrap(), None);
    let err = block(store.get_run("abcd")).unwrap_err();
    assert_eq!(
        err,
        StoreError::Ambiguous {
            prefix: "abcd".into(),
            matches: vec!["abcd1111".into(), "abcd2222".into()]
        }
    );
    assert!(err.to_string().contains("abcd1111, abcd2222"), "{err}");
    assert!(matches!(
        block(store.get_run("abc")),
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(block(store.get_run("abcd\0")).unwrap(), None);
    // A whole id that is also a prefix of another id is found exactly.
    block(store.claim_run(with_id("abcd"))).unwrap();
    assert_eq!(block(store.get_run("abcd")).unwrap().unwrap().id, "abcd");
    // At most 11 matches, in id order.
    for n in 0..15 {
        block(store.claim_run(with_id(&format!("wxyz{n:02}")))).unwrap();
    }
    let Err(StoreError::Ambiguous { matches, .. }) = block(store.get_run("wxyz")) else {
        panic!("not ambiguous")
    };
    let want: Vec<String> = (0..11).map(|n| format!("wxyz{n:02}")).collect();
    assert_eq!(matches, want);
    assert!(
        StoreError::Ambiguous {
            prefix: "wxyz".into(),
            matches
        }
        .to_string()
        .contains(", ...")
    );
}

#[test]
fn prefix_lookups_while_another_node_inserts() {
    let Some(db) = TestDb::create("pg_prefix_race") else {
        return;
    };
    let (one, two) = (node(&db), node(&db));
    let (looked, ()) = race(
        &one,
        &two,
        |n| {
            let mut seen = Vec::new();
            for _ in 0..40 {
                seen.push(block(n.get_run("race")));
            }
            seen
        },
        |n| {
            for i in 0..20 {
                block(n.claim_run(with_id(&format!("race{i:02}")))).unwrap();
            }
        },
    );
    // Each answer is what some committed state gives: none, the first run,
    // or the first matches in order.
    for answer in looked {
        match answer {
            Ok(None) => {}
            Ok(Some(run)) => assert_eq!(run.id, "race00"),
            Err(StoreError::Ambiguous { matches, .. }) => {
                let want: Vec<String> = (0..matches.len()).map(|i| format!("race{i:02}")).collect();
                assert!(matches.len() <= 11 && matches == want, "{matches:?}");
            }
            Err(e) => panic!("{e}"),
        }
    }
    // Once committed, the other node finds each run by its prefix.
    assert_eq!(block(one.get_run("race07")).unwrap().unwrap().id, "race07");
}

#[test]
fn events_pruned_by_retention_are_an_error_not_an_empty_log() {
    let Some(db) = TestDb::create("pg_events_pruned") else {
        return;
    };
    let store = node(&db);
    let (run, quiet) = (new_run("a"), new_run("a"));
    block(store.claim_run(run.clone())).unwrap();
    block(store.claim_run(quiet.clone())).unwrap();
    block(store.append_events(&run.id, vec![text("a"), text("b")])).unwrap();
    let pruned_at = Utc.with_ymd_and_hms(2025, 1, 2, 3, 4, 5).unwrap();
    execute(
        &store,
        &format!(
            "DELETE FROM events WHERE run_id = '{id}';
             UPDATE runs SET events_pruned_at = '2025-01-02T03:04:05Z', events_pruned = 2
             WHERE id = '{id}'",
            id = run.id
        ),
    );
    let err = block(store.run_events(&run.id)).unwrap_err();
    assert_eq!(
        err,
        StoreError::EventsPruned {
            run_id: run.id.clone(),
            pruned_at,
            events: 2
        }
    );
    assert!(matches!(
        block(store.run_events_after(&run.id, 1)),
        Err(StoreError::EventsPruned { .. })
    ));
    // A run that never had events reads as empty; no run is NotFound.
    assert_eq!(block(store.run_events(&quiet.id)).unwrap(), vec![]);
    assert!(matches!(
        block(store.run_events("nope")),
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        block(store.run_events("no\0pe")),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn last_fire_and_last_run() {
    let Some(db) = TestDb::create("pg_last_fire") else {
        return;
    };
    let store = node(&db);
    let at = |h: u32| Utc.with_ymd_and_hms(2025, 10, 26, h, 0, 0).unwrap();
    assert_eq!(block(store.last_fire("a", &sid("a", 0))).unwrap(), None);
    assert_eq!(block(store.last_run("a")).unwrap(), None);
    block(store.claim_run(fire_run("a", 0, at(1)))).unwrap();
    block(store.record_unrun(fire_run("a", 0, at(3)), RunState::Missed, "m".into())).unwrap();
    block(store.claim_run(fire_run("a", 0, at(2)))).unwrap();
    block(store.claim_run(fire_run("a", 1, at(4)))).unwrap();
    block(store.claim_run(fire_run("b", 0, at(5)))).unwrap();
    let manual = new_run("a");
    block(store.claim_run(manual.clone())).unwrap();
    assert_eq!(
        block(store.last_fire("a", &sid("a", 0))).unwrap(),
        Some(at(3))
    );
    assert_eq!(
        block(store.last_fire("a", &sid("a", 1))).unwrap(),
        Some(at(4))
    );
    assert_eq!(block(store.last_fire("a", &sid("a", 2))).unwrap(), None);
    assert_eq!(
        block(store.last_fire("b", &sid("b", 0))).unwrap(),
        Some(at(5))
    );
    assert_eq!(block(store.last_run("a")).unwrap().unwrap().id, manual.id);
    assert_eq!(block(store.last_run("zzz")).unwrap(), None);
    let precise = at(6) + Duration::milliseconds(250);
    block(store.claim_run(fire_run("a", 0, precise))).unwrap();
    assert_eq!(
        block(store.last_fire("a", &sid("a", 0))).unwrap(),
        Some(precise)
    );
    // Equal creation times: the greatest id is the newest.
    execute(
        &store,
        r#"INSERT INTO runs (id, agent, state, "trigger", input, model, definition_hash, created_at)
           VALUES ('zz-2', 't', 'succeeded', 'cli', '', 'm', 'h', '2099-01-01T00:00:00Z'),
                  ('zz-1', 't', 'succeeded', 'cli', '', 'm', 'h', '2099-01-01T00:00:00Z')"#,
    );
    assert_eq!(block(store.last_run("t")).unwrap().unwrap().id, "zz-2");
}

#[test]
fn corrupt_rows_are_errors_naming_the_run() {
    let Some(db) = TestDb::create("pg_corrupt") else {
        return;
    };
    let store = node(&db);
    let run = new_run("a");
    block(store.claim_run(run.clone())).unwrap();
    block(store.append_events(&run.id, vec![text("ok")])).unwrap();
    execute(
        &store,
        &format!(
            "UPDATE events SET data = '{{\"type\":' WHERE run_id = '{}'",
            run.id
        ),
    );
    let err = block(store.run_events(&run.id)).unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptEvent { run_id, seq: 1, .. } if *run_id == run.id),
        "{err}"
    );
    execute(
        &store,
        &format!("UPDATE runs SET state = 'weird' WHERE id = '{}'", run.id),
    );
    let err = block(store.get_run(&run.id)).unwrap_err();
    assert!(
        matches!(&err, StoreError::CorruptRun { run_id, .. } if *run_id == run.id),
        "{err}"
    );
    assert!(block(store.list_runs(&RunFilter::default())).is_err());
    assert!(block(store.last_run("a")).is_err());
    // The store still works after the errors.
    block(store.claim_run(new_run("b"))).unwrap();
    block(store.finish_run_as(
        &run.id,
        Vec::new(),
        crate::store::RunEnd {
            output: None,
            usage: Usage::default(),
            ..crate::store::RunEnd::new(RunState::Failed, None)
        },
    ))
    .unwrap();
    assert_eq!(
        block(store.get_run(&run.id)).unwrap().unwrap().state,
        RunState::Failed
    );
}
