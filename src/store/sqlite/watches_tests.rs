//! Tests of schedule watches by id, and of taking over the watches and fires
//! a database from before schedule ids stored by list place.

use super::super::migrations::{MIGRATIONS, migrate_with};
use super::super::tests::{db, raw};
use super::*;
use crate::store::RunFilter;
use crate::store::*;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

fn id(agent: &str, expression: &str, zone: &str) -> ScheduleId {
    ScheduleId::of(agent, expression, zone, None)
}

/// A database written before schedule ids: its watches and fires are keyed
/// by list place. Opening it migrates; the first sync takes each watch over
/// for the schedule written the same way, resuming after its last fire, and
/// forgets the rest. No stored run is lost.
#[tokio::test]
async fn watches_and_fires_stored_by_place_are_taken_over_once() {
    let (_dir, path) = db();
    let ids_at = MIGRATIONS
        .iter()
        .position(|m| m.name.starts_with("schedules keyed by what they are"))
        .expect("the schedule id migration");
    let mut conn = raw(&path);
    migrate_with(&mut conn, &MIGRATIONS[..ids_at]).unwrap();
    conn.execute_batch(
        r#"
INSERT INTO schedule_watches (agent, schedule_index, cron, since) VALUES
    ('a', 0, '0 * * * * (UTC)', '2026-06-01T08:00:00.000Z'),
    ('a', 1, '30 * * * * (UTC)', '2026-06-01T08:00:00.000Z'),
    ('a', 2, '*/5 * * * * (UTC)', '2026-06-01T08:00:00.000Z'),
    ('gone', 0, '0 * * * * (UTC)', '2026-06-01T08:00:00.000Z');
INSERT INTO runs (id, agent, state, "trigger", input, model, definition_hash, created_at,
                  schedule_index, scheduled_for) VALUES
    ('r1', 'a', 'succeeded', 'schedule', '', 'test', 'h', '2026-06-01T09:00:00.000Z',
     0, '2026-06-01T09:00:00.000Z'),
    ('r2', 'a', 'succeeded', 'schedule', '', 'test', 'h', '2026-06-01T10:00:00.000Z',
     0, '2026-06-01T10:00:00.000Z'),
    ('r3', 'a', 'missed', 'schedule', '', 'test', 'h', '2026-06-01T07:30:00.000Z',
     1, '2026-06-01T07:30:00.000Z');
"#,
    )
    .unwrap();
    drop(conn);

    let store = Store::open(&path).unwrap();
    let now = at("2026-06-01T12:00:00Z");
    let (hourly, half, five) = (
        id("a", "0 * * * *", "UTC"),
        id("a", "30 * * * *", "UTC"),
        id("a", "*/5 * * * *", "UTC"),
    );
    // Place 0 fired at 10:00: resume there (11:00 was missed).
    assert_eq!(
        store
            .watch_schedule("a", &hourly, "0 * * * * (UTC)", now)
            .await,
        Ok(at("2026-06-01T10:00:00Z"))
    );
    // Place 1's only fire is older than its watch (another schedule held the
    // place then): resume from the watch.
    assert_eq!(
        store
            .watch_schedule("a", &half, "30 * * * * (UTC)", now)
            .await,
        Ok(at("2026-06-01T08:00:00Z"))
    );
    // Place 2 was edited while the daemon was down: starts now.
    assert_eq!(
        store
            .watch_schedule("a", &five, "*/10 * * * * (UTC)", now)
            .await,
        Ok(now)
    );
    // The old fires are history; a fire by id is new and unique by id.
    assert_eq!(store.last_fire("a", &hourly).await, Ok(None));
    let keep = vec![
        ("a".to_string(), hourly.clone()),
        ("a".to_string(), half.clone()),
        ("a".to_string(), five.clone()),
    ];
    // Unclaimed watches by place (`a` place 2, `gone`) are forgotten.
    assert_eq!(store.unwatch_schedules_except(keep).await, Ok(2));
    let left: i64 = raw(&path)
        .query_row("SELECT COUNT(*) FROM schedule_watches_by_index", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(left, 0);
    // Taken over once: a later watch reads its own row.
    assert_eq!(
        store
            .watch_schedule("a", &hourly, "0 * * * * (UTC)", at("2026-06-02T00:00:00Z"))
            .await,
        Ok(at("2026-06-01T10:00:00Z"))
    );
    let runs = store.list_runs(&RunFilter::default()).await.unwrap();
    assert_eq!(runs.len(), 3, "no stored run is lost");
    assert!(runs.iter().all(|r| r.schedule_id.is_none()));
    store.close().unwrap();
}
