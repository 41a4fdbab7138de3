//! Retention on a real SQLite file: runs are written through the store,
//! then aged by rewriting their times, then pruned.

use chrono::{Duration, Utc};
use rusqlite::params;

use super::super::tests::{db, fire_run, new_run, text};
use super::*;
use crate::store::*;
use crate::store::{NewRun, RunRecord, TriggerClaim};
use crate::types::{RunState, Usage};

/// Claims `run`, stores `events` texts and, when `state` is final,
/// finishes it with an output and usage.
async fn stored(store: &Sqlite, run: NewRun, events: usize, state: RunState) -> RunRecord {
    let id = run.id.clone();
    store.claim_run(run).await.unwrap();
    let texts = (0..events).map(|i| text(&format!("e{i}"))).collect();
    store.append_events(&id, texts).await.unwrap();
    if state.is_final() {
        let usage = Usage {
            input_tokens: Some(10),
            output_tokens: Some(5),
            cached_input_tokens: None,
        };
        store
            .finish_run_as(
                &id,
                Vec::new(),
                crate::store::RunEnd {
                    output: Some("the answer".into()),
                    usage,
                    ..crate::store::RunEnd::new(state, None)
                },
            )
            .await
            .unwrap();
    } else if state != RunState::Running {
        set(
            store,
            &id,
            "UPDATE runs SET state = ?2 WHERE id = ?1",
            state.as_str(),
        )
        .await;
    }
    store.get_run(&id).await.unwrap().unwrap()
}

async fn set(store: &Sqlite, id: &str, statement: &'static str, value: &str) {
    let (id, value) = (id.to_owned(), value.to_owned());
    store
        .call(move |conn| {
            conn.execute(statement, params![id, value])
                .map_err(sql("test update"))
        })
        .await
        .unwrap();
}

/// Moves run `id` `days` into the past (created, started and finished).
async fn age(store: &Sqlite, id: &str, days: i64) {
    let then = time_text(Utc::now() - Duration::days(days));
    set(
        store,
        id,
        "UPDATE runs SET created_at = ?2, started_at = ?2,
                         finished_at = CASE WHEN finished_at IS NULL THEN NULL ELSE ?2 END
         WHERE id = ?1",
        &then,
    )
    .await;
}

async fn rows(store: &Sqlite, query: &'static str, id: &str) -> i64 {
    let id = id.to_owned();
    store
        .read(move |conn| {
            conn.query_row(query, [id], |row| row.get(0))
                .map_err(sql("test count"))
        })
        .await
        .unwrap()
}

/// Prunes `scope` before `days` ago to the end, in batches of `max_rows`.
async fn prune_all(store: &Sqlite, scope: PruneScope, days: i64, max_rows: usize) -> Pruned {
    let before = Utc::now() - Duration::days(days);
    let mut total = Pruned::default();
    loop {
        let batch = store.prune_batch(scope, before, max_rows).await.unwrap();
        if batch.pruned.runs_touched() == 0 {
            return total;
        }
        total.add(batch.pruned);
    }
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

#[tokio::test]
async fn old_runs_lose_their_events_keep_their_record_and_readers_say_so() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let old = stored(&store, new_run("a"), 3, RunState::Succeeded).await;
    let recent = stored(&store, new_run("a"), 2, RunState::Failed).await;
    let running = stored(&store, new_run("a"), 2, RunState::Running).await;
    let skipped = stored(&store, new_run("a"), 0, RunState::Skipped).await;
    for id in [&old.id, &running.id, &skipped.id] {
        age(&store, id, 10).await;
    }
    age(&store, &recent.id, 3).await;

    let dry = store
        .prunable(PruneScope::Events, Utc::now() - Duration::days(7))
        .await
        .unwrap();
    assert_eq!((dry.runs_emptied, dry.events, dry.runs), (2, 3, 0));
    assert_eq!(store.run_events(&old.id).await.unwrap().len(), 3, "dry run");

    let pruned = prune_all(&store, PruneScope::Events, 7, 500).await;
    assert_eq!(pruned, dry);
    let err = store.run_events(&old.id).await.unwrap_err();
    let StoreError::EventsPruned { run_id, events, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!((run_id.as_str(), *events), (old.id.as_str(), 3));
    assert!(err.to_string().contains("pruned by retention"), "{err}");
    assert_eq!(
        store.run_events_after(&old.id, 2).await.unwrap_err(),
        err,
        "a resumed stream is told too"
    );
    // The record stays as it was.
    let kept = store.get_run(&old.id).await.unwrap().unwrap();
    assert_eq!(
        (kept.state, kept.output.as_deref(), kept.usage.input_tokens),
        (RunState::Succeeded, Some("the answer"), Some(10))
    );
    assert_eq!(store.run_events(&recent.id).await.unwrap().len(), 2);
    assert_eq!(store.run_events(&running.id).await.unwrap().len(), 2);
    // A run that never had events is not reported as pruned.
    assert_eq!(store.run_events(&skipped.id).await.unwrap(), Vec::new());
    assert!(
        prune_all(&store, PruneScope::Events, 7, 500)
            .await
            .is_empty()
    );
    store.close().unwrap();
}

#[tokio::test]
async fn old_final_runs_go_with_every_related_row_and_unfinished_ones_stay() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let done = stored(&store, new_run("a"), 4, RunState::Failed).await;
    let id = done.id.clone();
    store
        .call(move |conn| {
            conn.execute_batch(&format!(
                "INSERT INTO approvals (run_id, call_id, tool, arguments, requested_at, timeout_at)
                     VALUES ('{id}', 'c1', 'bash', '{{}}', 'x', 'y');
                 INSERT INTO pipeline_runs (run_id, context) VALUES ('{id}', NULL);
                 INSERT INTO pipeline_steps (run_id, step, item, state) VALUES ('{id}', 's', -1, 'succeeded');
                 INSERT INTO after_runs (agent, after_run_id, run_id) VALUES ('b', '{id}', 'f1');
                 INSERT INTO watched_files (agent, path, content_hash, run_id, claimed_at)
                     VALUES ('a', 'in/x.txt', 'h1', '{id}', 'x');"
            ))
            .map_err(sql("test rows"))
        })
        .await
        .unwrap();
    let running = stored(&store, new_run("a"), 1, RunState::Running).await;
    let queued = stored(&store, new_run("a"), 0, RunState::Queued).await;
    let waiting = stored(&store, new_run("a"), 1, RunState::WaitingApproval).await;
    // A finished child of a run still going stays with its parent.
    let child = NewRun {
        parent: Some(crate::store::RunParent {
            run_id: running.id.clone(),
            depth: 1,
        }),
        ..new_run("b")
    };
    let child = stored(&store, child, 1, RunState::Succeeded).await;
    for run in [&done, &running, &queued, &waiting, &child] {
        age(&store, &run.id, 40).await;
    }

    let dry = store
        .prunable(PruneScope::Runs, Utc::now() - Duration::days(30))
        .await
        .unwrap();
    let expected = Pruned {
        runs: 1,
        events: 4,
        steps: 1,
        approvals: 1,
        ..Pruned::default()
    };
    assert_eq!(dry, expected);
    assert_eq!(prune_all(&store, PruneScope::Runs, 30, 500).await, expected);

    assert_eq!(store.get_run(&done.id).await.unwrap(), None);
    for (table, query) in [
        ("events", "SELECT COUNT(*) FROM events WHERE run_id = ?1"),
        (
            "approvals",
            "SELECT COUNT(*) FROM approvals WHERE run_id = ?1",
        ),
        (
            "pipeline_runs",
            "SELECT COUNT(*) FROM pipeline_runs WHERE run_id = ?1",
        ),
        (
            "pipeline_steps",
            "SELECT COUNT(*) FROM pipeline_steps WHERE run_id = ?1",
        ),
        (
            "after_runs",
            "SELECT COUNT(*) FROM after_runs WHERE after_run_id = ?1",
        ),
    ] {
        assert_eq!(rows(&store, query, &done.id).await, 0, "{table}");
    }
    // The file's record stays, and the file counts as processed.
    assert!(
        store
            .watched_file_done("a", "in/x.txt", "h1")
            .await
            .unwrap()
    );
    let again = store
        .claim_run_for_trigger(
            new_run("a"),
            TriggerClaim::Watch {
                path: "in/x.txt".into(),
                content_hash: "h1".into(),
            },
            Utc::now(),
        )
        .await
        .unwrap();
    assert_eq!(again, None, "a pruned file run is not run again");
    for kept in [&running, &queued, &waiting, &child] {
        let now = store.get_run(&kept.id).await.unwrap();
        assert_eq!(now.map(|r| r.state), Some(kept.state), "{}", kept.agent);
    }
    store.close().unwrap();
}

#[tokio::test]
async fn the_newest_fire_of_each_schedule_is_kept() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let base = Utc::now() - Duration::days(50);
    let mut ids = Vec::new();
    for (n, hours) in [(0, 0), (0, 1), (0, 2), (1, 0)] {
        let run = fire_run("a", n, base + Duration::hours(hours));
        let run = stored(&store, run, 1, RunState::Succeeded).await;
        age(&store, &run.id, 45).await;
        ids.push(run.id);
    }
    let pruned = prune_all(&store, PruneScope::Runs, 30, 500).await;
    assert_eq!(pruned.runs, 2);
    let left: Vec<bool> = futures::future::join_all(ids.iter().map(|id| store.get_run(id)))
        .await
        .into_iter()
        .map(|r| r.unwrap().is_some())
        .collect();
    assert_eq!(left, [false, false, true, true]);
    let last = store
        .last_fire("a", &super::super::tests::sid("a", 0))
        .await
        .unwrap();
    assert_eq!(
        last.map(time_text),
        Some(time_text(base + Duration::hours(2)))
    );
    store.close().unwrap();
}

#[tokio::test]
async fn pruned_pages_are_reused_so_the_file_stops_growing() {
    let (_dir, path) = db();
    let store = Sqlite::open(&path).unwrap();
    let page_count = || {
        store.read(|conn| {
            conn.query_row("PRAGMA page_count", [], |row| row.get::<_, i64>(0))
                .map_err(sql("page_count"))
        })
    };
    let mut pages = Vec::new();
    for _ in 0..3 {
        let runs = (0..150).map(|_| stored(&store, new_run("a"), 12, RunState::Succeeded));
        futures::future::join_all(runs).await;
        pages.push(page_count().await.unwrap());
        // A cutoff in the future: every run written so far is old enough.
        let later = Utc::now() + Duration::days(1);
        while store
            .prune_batch(PruneScope::Runs, later, 500)
            .await
            .unwrap()
            .pruned
            .runs_touched()
            > 0
        {}
    }
    // The second and third rounds fill the pages the first one freed.
    assert!(
        pages[2] <= pages[0] + pages[0] / 10,
        "pages after each round: {pages:?}"
    );
    store.close().unwrap();
}
