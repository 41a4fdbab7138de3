//! Tests for [`plan_missed`] under each `on_missed` policy, with the
//! `catch_up` boundaries, and for [`failure_backoff`].

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::{
    CronSchedule, MAX_CATCH_UP_RUNS, MAX_MISSED_LISTED, MissedPlan, OnMissed, failure_backoff,
    plan_missed,
};

fn utc(h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 5, 1, h, mi, s).unwrap()
}

fn quarter_hourly() -> CronSchedule {
    CronSchedule::parse("*/15 * * * *", None).unwrap()
}

fn plan(last: DateTime<Utc>, now: DateTime<Utc>, catch_up: Duration, p: OnMissed) -> MissedPlan {
    plan_missed(&quarter_hourly(), last, now, catch_up, p)
}

#[test]
fn latest_runs_the_newest_within_catch_up_and_misses_the_rest() {
    // Down from 10:00 to 11:07: fires 10:15, 10:30, 10:45, 11:00.
    let p = plan(
        utc(10, 0, 0),
        utc(11, 7, 0),
        Duration::minutes(30),
        OnMissed::Latest,
    );
    assert_eq!(p.run, [utc(11, 0, 0)]);
    assert_eq!(p.missed, [utc(10, 15, 0), utc(10, 30, 0), utc(10, 45, 0)]);
}

#[test]
fn all_runs_each_within_catch_up_in_order() {
    let p = plan(
        utc(10, 0, 0),
        utc(11, 7, 0),
        Duration::minutes(30),
        OnMissed::All,
    );
    assert_eq!(p.run, [utc(10, 45, 0), utc(11, 0, 0)]);
    assert_eq!(p.missed, [utc(10, 15, 0), utc(10, 30, 0)]);
}

#[test]
fn skip_records_everything_as_missed() {
    let p = plan(
        utc(10, 0, 0),
        utc(11, 7, 0),
        Duration::hours(5),
        OnMissed::Skip,
    );
    assert!(p.run.is_empty());
    assert_eq!(p.missed.len(), 4);
}

#[test]
fn nothing_within_catch_up_means_nothing_runs() {
    for policy in [OnMissed::Latest, OnMissed::All] {
        let p = plan(utc(10, 0, 0), utc(11, 14, 0), Duration::minutes(10), policy);
        assert!(p.run.is_empty(), "{policy:?}");
        assert_eq!(p.missed.len(), 4, "{policy:?}");
    }
}

#[test]
fn catch_up_boundary_is_inclusive() {
    // 10:45 is exactly 30 minutes before 11:15: it still runs.
    let p = plan(
        utc(10, 0, 0),
        utc(11, 15, 0),
        Duration::minutes(30),
        OnMissed::All,
    );
    assert_eq!(p.run, [utc(10, 45, 0), utc(11, 0, 0), utc(11, 15, 0)]);
    assert_eq!(p.missed, [utc(10, 15, 0), utc(10, 30, 0)]);
    // One second less of catch_up and it is missed.
    let p = plan(
        utc(10, 0, 0),
        utc(11, 15, 0),
        Duration::seconds(1799),
        OnMissed::All,
    );
    assert_eq!(p.run, [utc(11, 0, 0), utc(11, 15, 0)]);
    // catch_up zero still runs a fire exactly at now, and only that one.
    let p = plan(
        utc(10, 0, 0),
        utc(11, 15, 0),
        Duration::zero(),
        OnMissed::Latest,
    );
    assert_eq!(p.run, [utc(11, 15, 0)]);
    let p = plan(
        utc(10, 0, 0),
        utc(11, 15, 0),
        Duration::minutes(-5),
        OnMissed::All,
    );
    assert_eq!(p.run, [utc(11, 15, 0)]);
}

#[test]
fn last_checked_is_exclusive_and_now_inclusive() {
    let p = plan(
        utc(10, 15, 0),
        utc(10, 45, 0),
        Duration::hours(1),
        OnMissed::All,
    );
    assert_eq!(p.run, [utc(10, 30, 0), utc(10, 45, 0)]);
    assert!(p.missed.is_empty());
    let empty = MissedPlan::default();
    assert_eq!(
        plan(
            utc(10, 0, 0),
            utc(10, 0, 0),
            Duration::hours(1),
            OnMissed::All
        ),
        empty
    );
    assert_eq!(
        plan(
            utc(11, 0, 0),
            utc(10, 0, 0),
            Duration::hours(1),
            OnMissed::All
        ),
        empty
    );
    assert_eq!(
        plan(
            utc(10, 1, 0),
            utc(10, 14, 0),
            Duration::hours(1),
            OnMissed::All
        ),
        empty
    );
}

#[test]
fn all_is_capped_at_the_newest_hundred() {
    let every_minute = CronSchedule::parse("* * * * *", None).unwrap();
    let (last, now) = (utc(6, 0, 0), utc(11, 0, 0)); // 300 fires
    let p = plan_missed(&every_minute, last, now, Duration::hours(3), OnMissed::All);
    assert_eq!(p.run.len(), MAX_CATCH_UP_RUNS);
    assert_eq!(p.run.first(), Some(&(now - Duration::minutes(99))));
    assert_eq!(p.run.last(), Some(&now));
    assert!(
        p.run
            .windows(2)
            .all(|w| w[1] - w[0] == Duration::minutes(1))
    );
    assert_eq!(p.missed.len(), 200);
    assert_eq!(p.missed.first(), Some(&utc(6, 1, 0)));
    assert_eq!(p.missed.last(), Some(&(now - Duration::minutes(100))));
}

#[test]
fn missed_list_keeps_the_newest_thousand() {
    let every_second = CronSchedule::parse("* * * * * *", None).unwrap();
    let (last, now) = (utc(8, 0, 0), utc(10, 0, 0)); // 7200 fires
    let p = plan_missed(&every_second, last, now, Duration::hours(1), OnMissed::Skip);
    assert!(p.run.is_empty());
    assert_eq!(p.missed.len(), MAX_MISSED_LISTED);
    assert_eq!(p.missed.last(), Some(&now));
    assert_eq!(p.missed.first(), Some(&(now - Duration::seconds(999))));
    assert!(p.missed.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn sparse_fires_over_a_long_downtime() {
    let weekdays = CronSchedule::parse("0 9 * * 1-5", Some("Europe/Paris")).unwrap();
    let last = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
    let now = Utc.with_ymd_and_hms(2026, 3, 2, 8, 30, 0).unwrap(); // Monday 09:30 CET
    let p = plan_missed(&weekdays, last, now, Duration::hours(1), OnMissed::Latest);
    assert_eq!(p.run, [Utc.with_ymd_and_hms(2026, 3, 2, 8, 0, 0).unwrap()]);
    assert_eq!(
        p.missed,
        weekdays.fires_between(last, p.run[0], 1000)[..p.missed.len()]
    );
    assert_eq!(
        p.missed.len() + 1,
        weekdays.fires_between(last, now, 1000).len()
    );
}

#[test]
fn missed_fires_across_the_spring_gap() {
    let s = CronSchedule::parse("30 2 * * *", Some("Europe/Paris")).unwrap();
    let last = Utc.with_ymd_and_hms(2026, 3, 28, 12, 0, 0).unwrap();
    let now = Utc.with_ymd_and_hms(2026, 3, 29, 1, 30, 0).unwrap();
    let p = plan_missed(&s, last, now, Duration::hours(1), OnMissed::Latest);
    // 02:30 did not exist; it fired at 03:00 CEST = 01:00 UTC.
    assert_eq!(p.run, [Utc.with_ymd_and_hms(2026, 3, 29, 1, 0, 0).unwrap()]);
    assert!(p.missed.is_empty());
}

#[test]
fn on_missed_reads_lowercase_words_and_defaults_to_latest() {
    assert_eq!(OnMissed::default(), OnMissed::Latest);
    for (word, policy) in [
        ("latest", OnMissed::Latest),
        ("all", OnMissed::All),
        ("skip", OnMissed::Skip),
    ] {
        let parsed: OnMissed = serde_json::from_str(&format!("\"{word}\"")).unwrap();
        assert_eq!(parsed, policy);
    }
    assert!(serde_json::from_str::<OnMissed>("\"some\"").is_err());
}

#[test]
fn failure_backoff_table() {
    let minutes = |m: u64| Some(StdDuration::from_secs(m * 60));
    assert_eq!(failure_backoff(0), None);
    assert_eq!(failure_backoff(1), Some(StdDuration::from_secs(30)));
    assert_eq!(failure_backoff(2), minutes(1));
    assert_eq!(failure_backoff(3), minutes(5));
    assert_eq!(failure_backoff(4), minutes(15));
    assert_eq!(failure_backoff(5), minutes(60));
    assert_eq!(failure_backoff(6), minutes(60));
    assert_eq!(failure_backoff(u32::MAX), minutes(60));
}
