//! Retention on a real PostgreSQL server, on runs aged with SQL (the
//! interface tests both backends run, `store/retention_tests.rs`, cover
//! batches and live runs): events first with the run marked, whole runs
//! with every related row, what is never pruned, the newest fire of each
//! schedule kept, two nodes pruning at once, and freed space reused after
//! a vacuum.

use std::sync::{Arc, Barrier};

use chrono::{DateTime, Duration, Utc};
use futures::executor::block_on;

use super::Postgres;
use super::approvals_tests::{count, exec, insert_run, node, run};
use super::retention::NOT_FINAL;
use super::testing::TestDb;
use crate::store::{PruneScope, Pruned};
use crate::types::{RunState, ScheduleId};

/// Inserts run `id` in `state`, created (and, if final, finished) `days`
/// ago, with `events` event rows.
fn stored(store: &Postgres, id: &str, state: RunState, events: i64, days: i64) {
    insert_run(
        store,
        id,
        "a",
        state,
        None,
        Utc::now() - Duration::days(days),
    );
    exec(
        store,
        &format!(
            "INSERT INTO events (run_id, seq, at, kind, data)
             SELECT '{id}', g, now(), 'text_delta', '{{\"type\":\"text_delta\",\"text\":\"e\"}}'
             FROM generate_series(1, {events}) AS g"
        ),
    );
}

fn events_of(store: &Postgres, id: &str) -> i64 {
    count(
        store,
        &format!("SELECT COUNT(*) FROM events WHERE run_id = '{id}'"),
    )
}

/// Prunes `scope` before `before` to the end, in batches of `max_rows`.
fn prune_all(
    store: &Postgres,
    scope: PruneScope,
    before: DateTime<Utc>,
    max_rows: usize,
) -> Pruned {
    let mut total = Pruned::default();
    loop {
        let batch = block_on(store.prune_batch(scope, before, max_rows)).unwrap();
        if batch.pruned.runs_touched() == 0 {
            return total;
        }
        total.add(batch.pruned);
    }
}

fn days_ago(days: i64) -> DateTime<Utc> {
    Utc::now() - Duration::days(days)
}

#[test]
fn not_final_lists_exactly_the_states_that_are_not_final() {
    let listed: Vec<String> = RunState::ALL
        .iter()
        .filter(|s| !s.is_final())
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    assert_eq!(NOT_FINAL, format!("({})", listed.join(", ")));
}

#[test]
fn old_runs_lose_their_events_and_keep_their_record_marked() {
    let Some(db) = TestDb::create("prune_events") else {
        return;
    };
    let store = node(&db);
    stored(&store, "old", RunState::Succeeded, 3, 10);
    stored(&store, "recent", RunState::Failed, 2, 3);
    stored(&store, "running", RunState::Running, 2, 10);
    stored(&store, "skipped", RunState::Skipped, 0, 10);
    exec(
        &store,
        "UPDATE runs SET output = 'the answer', input_tokens = 10 WHERE id = 'old'",
    );

    let dry = block_on(store.prunable(PruneScope::Events, days_ago(7))).unwrap();
    assert_eq!((dry.runs_emptied, dry.events, dry.runs), (2, 3, 0));
    assert_eq!(events_of(&store, "old"), 3, "a dry run changes nothing");

    let pruned = prune_all(&store, PruneScope::Events, days_ago(7), 500);
    assert_eq!(pruned, dry);
    assert_eq!(events_of(&store, "old"), 0);
    // Marked, so readers say the events were pruned (and how many).
    assert_eq!(
        count(
            &store,
            "SELECT events_pruned FROM runs WHERE id = 'old' AND events_pruned_at IS NOT NULL"
        ),
        3
    );
    let kept = run(&store, "old").unwrap();
    assert_eq!(
        (kept.state, kept.output.as_deref(), kept.usage.input_tokens),
        (RunState::Succeeded, Some("the answer"), Some(10))
    );
    assert_eq!(events_of(&store, "recent"), 2);
    assert_eq!(events_of(&store, "running"), 2);
    assert_eq!(
        count(
            &store,
            "SELECT events_pruned FROM runs WHERE id = 'skipped'"
        ),
        0,
        "a run that had no events is marked with 0"
    );
    assert!(prune_all(&store, PruneScope::Events, days_ago(7), 500).is_empty());
}

#[test]
fn old_final_runs_go_with_every_related_row_and_unfinished_ones_stay() {
    let Some(db) = TestDb::create("prune_runs") else {
        return;
    };
    let store = node(&db);
    stored(&store, "done", RunState::Failed, 4, 40);
    exec(
        &store,
        "INSERT INTO approvals (run_id, call_id, tool, arguments, requested_at, timeout_at)
             VALUES ('done', 'c1', 'bash', '{}', now(), now());
         INSERT INTO pipeline_runs (run_id, context) VALUES ('done', NULL);
         INSERT INTO pipeline_steps (run_id, step, item, state) VALUES ('done', 's', -1, 'succeeded');
         INSERT INTO after_runs (agent, after_run_id, run_id) VALUES ('b', 'done', 'f1');
         INSERT INTO watched_files (agent, path, content_hash, run_id, claimed_at)
             VALUES ('a', 'in/x.txt', 'h1', 'done', now());",
    );
    stored(&store, "running", RunState::Running, 1, 40);
    stored(&store, "queued", RunState::Queued, 0, 40);
    stored(&store, "waiting", RunState::WaitingApproval, 1, 40);
    // A finished child of a run still going stays with its parent.
    stored(&store, "child", RunState::Succeeded, 1, 40);
    exec(
        &store,
        "UPDATE runs SET parent_run_id = 'running', depth = 1 WHERE id = 'child'",
    );

    let dry = block_on(store.prunable(PruneScope::Runs, days_ago(30))).unwrap();
    let expected = Pruned {
        runs: 1,
        events: 4,
        steps: 1,
        approvals: 1,
        ..Pruned::default()
    };
    assert_eq!(dry, expected);
    assert_eq!(
        prune_all(&store, PruneScope::Runs, days_ago(30), 500),
        expected
    );
    assert_eq!(run(&store, "done"), None);
    for table in [
        "events WHERE run_id",
        "approvals WHERE run_id",
        "pipeline_runs WHERE run_id",
        "pipeline_steps WHERE run_id",
        "after_runs WHERE after_run_id",
    ] {
        assert_eq!(
            count(&store, &format!("SELECT COUNT(*) FROM {table} = 'done'")),
            0,
            "{table}"
        );
    }
    // The file's record stays: the file counts as processed.
    assert_eq!(count(&store, "SELECT COUNT(*) FROM watched_files"), 1);
    for (id, state) in [
        ("running", RunState::Running),
        ("queued", RunState::Queued),
        ("waiting", RunState::WaitingApproval),
        ("child", RunState::Succeeded),
    ] {
        assert_eq!(run(&store, id).map(|r| r.state), Some(state), "{id}");
    }
    // Once its parent ended, the child goes too.
    exec(
        &store,
        "UPDATE runs SET state = 'interrupted' WHERE id = 'running'",
    );
    let later = prune_all(&store, PruneScope::Runs, days_ago(30), 500);
    assert_eq!((later.runs, later.events), (2, 2));
}

#[test]
fn the_newest_fire_of_each_schedule_is_kept() {
    let Some(db) = TestDb::create("prune_fires") else {
        return;
    };
    let store = node(&db);
    let base = Utc::now() - Duration::days(50);
    let s0 = ScheduleId::of("a", "0 * * * *", "UTC", None);
    let s1 = ScheduleId::of("a", "1 * * * *", "UTC", None);
    for (id, schedule, hours) in [
        ("f0", &s0, 0),
        ("f1", &s0, 1),
        ("f2", &s0, 2),
        ("g0", &s1, 0),
    ] {
        stored(&store, id, RunState::Succeeded, 1, 45);
        let at = super::run_rows::millis(base + Duration::hours(hours));
        exec(
            &store,
            &format!(
                "UPDATE runs SET schedule_id = '{schedule}', scheduled_for = '{}' WHERE id = '{id}'",
                at.to_rfc3339()
            ),
        );
    }
    // Another agent's schedule with the same id does not hide `a`'s fires.
    insert_run(
        &store,
        "other",
        "b",
        RunState::Succeeded,
        None,
        base + Duration::hours(5),
    );
    exec(
        &store,
        &format!(
            "UPDATE runs SET schedule_id = '{s0}', scheduled_for = '{}' WHERE id = 'other'",
            (base + Duration::hours(5)).to_rfc3339()
        ),
    );
    let dry = block_on(store.prunable(PruneScope::Runs, days_ago(30))).unwrap();
    assert_eq!(dry.runs, 2);
    let pruned = prune_all(&store, PruneScope::Runs, days_ago(30), 500);
    assert_eq!(pruned, dry);
    let left: Vec<bool> = ["f0", "f1", "f2", "g0", "other"]
        .iter()
        .map(|id| run(&store, id).is_some())
        .collect();
    assert_eq!(left, [false, false, true, true, true]);
}

/// Two nodes prune the same old runs at once, events then runs: each run
/// is emptied once and deleted once, the counts add up to the dry run, and
/// neither node fails.
#[test]
fn two_nodes_pruning_at_once_prune_each_run_once() {
    let Some(db) = TestDb::create("prune_race") else {
        return;
    };
    let nodes = [Arc::new(node(&db)), Arc::new(node(&db))];
    for n in 0..60 {
        stored(&nodes[0], &format!("r{n:02}"), RunState::Succeeded, 5, 20);
    }
    stored(&nodes[0], "live", RunState::Running, 5, 20);
    let before = days_ago(10);
    for scope in [PruneScope::Events, PruneScope::Runs] {
        let dry = block_on(nodes[0].prunable(scope, before)).unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let pruners: Vec<_> = nodes
            .iter()
            .map(|store| {
                let (store, barrier) = (Arc::clone(store), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    prune_all(&store, scope, before, 12)
                })
            })
            .collect();
        let mut total = Pruned::default();
        for pruner in pruners {
            total.add(pruner.join().unwrap());
        }
        assert_eq!(total, dry, "{scope:?}");
    }
    assert_eq!(count(&nodes[0], "SELECT COUNT(*) FROM runs"), 1);
    assert_eq!(events_of(&nodes[0], "live"), 5);
}

/// PostgreSQL has no file pages to count: deleted rows leave dead tuples
/// that vacuum turns into free space, which later rows fill. After each
/// round of writing and pruning (and a vacuum, which autovacuum does on
/// its own in service), the events table stops growing: its rows reuse the
/// freed space at once, its index's freed pages a couple of vacuums later.
#[test]
fn pruned_space_is_reused_after_a_vacuum() {
    let Some(db) = TestDb::create("prune_space") else {
        return;
    };
    let store = node(&db);
    let mut sizes = Vec::new();
    for round in 0..5 {
        for n in 0..150 {
            stored(&store, &format!("r{round}-{n}"), RunState::Succeeded, 12, 2);
        }
        sizes.push((
            count(&store, "SELECT pg_relation_size('events')"),
            count(&store, "SELECT pg_total_relation_size('events')"),
        ));
        let pruned = prune_all(&store, PruneScope::Runs, days_ago(1), 500);
        assert_eq!(pruned.runs, 150);
        exec(&store, "VACUUM events");
    }
    let (heap, total): (Vec<i64>, Vec<i64>) = sizes.iter().copied().unzip();
    assert!(
        heap[4] <= heap[0] + heap[0] / 10,
        "events rows' bytes after each round: {heap:?}"
    );
    assert!(
        total[4] <= total[2] + total[2] / 10,
        "events bytes with its index after each round: {total:?}"
    );
}
