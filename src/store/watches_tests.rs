//! Tests of schedule watches through the [`Store`] interface, each on both
//! backends (`store_test!`). Taking over watches stored by list place (a
//! SQLite database from before schedule ids) is tested in
//! `sqlite/watches_tests.rs`; nodes watching at once in
//! `postgres/watches_tests.rs`.

use chrono::{DateTime, Utc};

use crate::store::testing::store_test;
use crate::types::ScheduleId;

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

fn id(agent: &str, expression: &str, zone: &str) -> ScheduleId {
    ScheduleId::of(agent, expression, zone, None)
}

store_test! {
    /// A watch's `since` stays while its schedule is unchanged and present,
    /// across a reopen; an edited or removed schedule starts anew.
    async fn a_watch_lasts_while_its_schedule_is_unchanged_and_present(store, test) {
        let (t1, t2, t3) = (
            at("2026-06-01T10:00:00Z"),
            at("2026-06-01T11:00:00Z"),
            at("2026-06-01T12:00:00Z"),
        );
        let (a_daily, b_daily) = (id("a", "0 9 * * *", "UTC"), id("b", "0 9 * * *", "UTC"));
        let a_paris = id("a", "0 9 * * *", "Europe/Paris");
        let daily = "0 9 * * * (UTC)";
        assert_eq!(store.watch_schedule("a", &a_daily, daily, t1).await, Ok(t1));
        assert_eq!(store.watch_schedule("b", &b_daily, daily, t1).await, Ok(t1));
        // Unchanged: since stays, from another handle too.
        let store = test.reopen();
        assert_eq!(store.watch_schedule("a", &a_daily, daily, t2).await, Ok(t1));
        // Edited (another id): starts anew.
        let paris = "0 9 * * * (Europe/Paris)";
        assert_eq!(store.watch_schedule("a", &a_paris, paris, t2).await, Ok(t2));
        // `b` and the old `a` are gone; `b` comes back: starts anew.
        let keep = vec![("a".to_string(), a_paris.clone())];
        assert_eq!(store.unwatch_schedules_except(keep).await, Ok(2));
        assert_eq!(store.watch_schedule("b", &b_daily, daily, t3).await, Ok(t3));
        assert_eq!(store.watch_schedule("a", &a_paris, paris, t3).await, Ok(t2));
        // Edited back: the old state is gone, so it starts anew too.
        assert_eq!(store.watch_schedule("a", &a_daily, daily, t3).await, Ok(t3));
        // Nothing kept: all forgotten.
        assert_eq!(store.unwatch_schedules_except(Vec::new()).await, Ok(3));
        tokio::task::spawn_blocking(move || store.close()).await.unwrap().unwrap();
    }
}
