//! Schedule watches on a real PostgreSQL server, beyond the interface
//! test both backends run (`store/watches_tests.rs`): `since` kept to the
//! millisecond, and two nodes watching or unwatching at once.

use std::sync::{Arc, Barrier};

use chrono::{DateTime, Duration, Utc};
use futures::executor::block_on;

use super::approvals_tests::{count, node};
use super::testing::TestDb;
use crate::types::ScheduleId;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

fn id(agent: &str, expression: &str, zone: &str) -> ScheduleId {
    ScheduleId::of(agent, expression, zone, None)
}

#[test]
fn since_is_kept_to_the_millisecond_as_in_sqlite() {
    let Some(db) = TestDb::create("watch_millis") else {
        return;
    };
    let store = node(&db);
    let now = at("2026-06-01T10:00:00.123456789Z");
    let daily = id("a", "0 9 * * *", "UTC");
    let since = block_on(store.watch_schedule("a", &daily, "0 9 * * * (UTC)", now)).unwrap();
    assert_eq!(since, at("2026-06-01T10:00:00.123Z"));
    let later = now + Duration::hours(1);
    assert_eq!(
        block_on(store.watch_schedule("a", &daily, "0 9 * * * (UTC)", later)),
        Ok(since)
    );
}

/// Two nodes load the same new schedules at once, each with its own clock:
/// both are told the same `since` (the one stored first, SQLite's rule),
/// and it stays.
#[test]
fn two_nodes_watching_a_new_schedule_at_once_agree_on_since() {
    let Some(db) = TestDb::create("watch_race") else {
        return;
    };
    let nodes = [Arc::new(node(&db)), Arc::new(node(&db))];
    let t0 = at("2026-06-01T10:00:00Z");
    let clocks = [t0, t0 + Duration::seconds(1)];
    let schedules: Vec<ScheduleId> = (0..20)
        .map(|m| id("a", &format!("{m} 9 * * *"), "UTC"))
        .collect();
    let barrier = Arc::new(Barrier::new(2));
    let watchers: Vec<_> = nodes
        .iter()
        .zip(clocks)
        .map(|(store, now)| {
            let (store, barrier, schedules) =
                (Arc::clone(store), Arc::clone(&barrier), schedules.clone());
            std::thread::spawn(move || {
                schedules
                    .iter()
                    .map(|s| {
                        barrier.wait();
                        block_on(store.watch_schedule("a", s, "cron", now)).unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let seen: Vec<Vec<DateTime<Utc>>> = watchers.into_iter().map(|w| w.join().unwrap()).collect();
    for (n, schedule) in schedules.iter().enumerate() {
        let since = seen[0][n];
        assert_eq!(
            seen[1][n], since,
            "{schedule}: both nodes are told the same"
        );
        assert!(clocks.contains(&since), "{schedule}: {since}");
        let later = t0 + Duration::hours(1);
        assert_eq!(
            block_on(nodes[1].watch_schedule("a", schedule, "cron", later)),
            Ok(since),
            "{schedule}: it stays"
        );
    }
    assert_eq!(
        count(&nodes[0], "SELECT COUNT(*) FROM schedule_watches"),
        20
    );
}

/// Two nodes forgetting gone schedules at once: each watch is forgotten
/// once, without an error, and the counts add up.
#[test]
fn two_nodes_unwatching_at_once_forget_each_watch_once() {
    let Some(db) = TestDb::create("unwatch_race") else {
        return;
    };
    let nodes = [Arc::new(node(&db)), Arc::new(node(&db))];
    let t0 = at("2026-06-01T10:00:00Z");
    let kept = id("a", "0 9 * * *", "UTC");
    block_on(nodes[0].watch_schedule("a", &kept, "cron", t0)).unwrap();
    for m in 0..30 {
        let gone = id("b", &format!("{m} 9 * * *"), "UTC");
        block_on(nodes[0].watch_schedule("b", &gone, "cron", t0)).unwrap();
    }
    let barrier = Arc::new(Barrier::new(2));
    let forgetters: Vec<_> = nodes
        .iter()
        .map(|store| {
            let (store, barrier, kept) = (Arc::clone(store), Arc::clone(&barrier), kept.clone());
            std::thread::spawn(move || {
                barrier.wait();
                block_on(store.unwatch_schedules_except(vec![("a".to_string(), kept)])).unwrap()
            })
        })
        .collect();
    let total: usize = forgetters.into_iter().map(|f| f.join().unwrap()).sum();
    assert_eq!(total, 30);
    assert_eq!(count(&nodes[0], "SELECT COUNT(*) FROM schedule_watches"), 1);
    assert_eq!(
        block_on(nodes[1].watch_schedule("a", &kept, "cron", t0 + Duration::hours(1))),
        Ok(t0)
    );
}
