//! Tests for [`CronSchedule`]: parsing, errors, next fires, and the DST
//! rules in Europe/Paris and America/New_York, with fixed instants only.

use chrono::{DateTime, Datelike, Duration, TimeZone, Timelike, Utc, Weekday};
use chrono_tz::Tz;
use proptest::prelude::*;

use super::CronSchedule;

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).unwrap()
}

fn sched(expr: &str, tz: Option<&str>) -> CronSchedule {
    CronSchedule::parse(expr, tz).unwrap_or_else(|e| panic!("{expr}: {e}"))
}

/// Fires in (from, to] as "HH:MM" UTC strings, for compact assertions.
fn hm(s: &CronSchedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<String> {
    s.fires_between(from, to, 1000)
        .iter()
        .map(|t| t.format("%d %H:%M").to_string())
        .collect()
}

fn parse_err(expr: &str) -> String {
    CronSchedule::parse(expr, None).expect_err(expr)
}

#[test]
fn accepts_five_and_six_fields_macros_and_names() {
    for expr in [
        "* * * * *",
        "*/15 9-17 * * MON-FRI",
        "0 9 * * 1-5",
        "0 0 1,15 JAN-jun *",
        "5 4 * * sun",
        "0 */5 * * * *",
        "30 0 9 * * Mon",
        "0 0 L * *",
        "  0 9 * * 1-5  ",
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@HOURLY",
    ] {
        sched(expr, None);
    }
    let s = sched("  0 9 * * 1-5 ", Some("Europe/Paris"));
    assert_eq!(s.expression(), "0 9 * * 1-5");
    assert_eq!(s.timezone(), chrono_tz::Europe::Paris);
    assert_eq!(sched("@daily", None).timezone(), Tz::UTC);
}

#[test]
fn macros_match_their_expansions() {
    let from = utc(2026, 1, 1, 0, 0, 0);
    let to = utc(2028, 1, 1, 0, 0, 0);
    for (mac, expr) in [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ] {
        let (a, b) = (sched(mac, None), sched(expr, None));
        assert_eq!(
            a.fires_between(from, to, 200),
            b.fires_between(from, to, 200),
            "{mac}"
        );
    }
}

#[test]
fn seven_and_zero_are_sunday_and_one_to_five_is_monday_to_friday() {
    let from = utc(2026, 1, 1, 0, 0, 0); // a Thursday
    let to = utc(2026, 1, 31, 0, 0, 0);
    for expr in ["0 0 * * 7", "0 0 * * 0", "0 0 * * SUN", "@weekly"] {
        let fires = sched(expr, None).fires_between(from, to, 100);
        assert_eq!(fires.len(), 4, "{expr}");
        assert!(fires.iter().all(|t| t.weekday() == Weekday::Sun), "{expr}");
    }
    let weekdays = sched("0 9 * * 1-5", None).fires_between(from, to, 100);
    assert_eq!(weekdays.len(), 22);
    assert!(
        weekdays
            .iter()
            .all(|t| t.weekday().number_from_monday() <= 5)
    );
    assert_eq!(weekdays[1], utc(2026, 1, 2, 9, 0, 0)); // Friday
    assert_eq!(weekdays[2], utc(2026, 1, 5, 9, 0, 0)); // then Monday
    let named = sched("0 9 * * mon-fri", None).fires_between(from, to, 100);
    assert_eq!(weekdays, named);
}

#[test]
fn seconds_field_is_optional_and_leading() {
    let s = sched("*/20 * * * * *", None);
    let from = utc(2026, 5, 1, 12, 0, 0);
    let fires = s.fires_between(from, from + Duration::minutes(1), 10);
    assert_eq!(fires.len(), 3);
    assert_eq!(fires[0], utc(2026, 5, 1, 12, 0, 20));
    // Five fields means second 0.
    let next = sched("*/5 * * * *", None).next_after(from).unwrap();
    assert_eq!(next, utc(2026, 5, 1, 12, 5, 0));
}

#[test]
fn bad_expressions_name_the_field_and_the_syntax() {
    let cases = [
        ("61 * * * *", "minute field \"61\""),
        ("* 24 * * *", "hour field \"24\""),
        ("0 0 32 * *", "day-of-month field \"32\""),
        ("0 0 * 13 *", "month field \"13\""),
        ("0 0 * * 8", "day-of-week field \"8\""),
        ("0 9 * * MONDAY", "day-of-week field \"MONDAY\""),
        ("0 0 * MON *", "month field \"MON\""),
        ("0 0 JAN * *", "day-of-month field \"JAN\""),
        ("5/15 * * * *", "minute field \"5/15\""),
        ("x * * * *", "minute field \"x\""),
        ("60 * * * * *", "second field \"60\""),
        ("0 9 * * 1;5", "day-of-week field \"1;5\""),
    ];
    for (expr, needle) in cases {
        let err = parse_err(expr);
        assert!(err.contains(needle), "{expr}: {err}");
        assert!(err.contains("*/15 9-17 * * MON-FRI"), "{expr}: {err}");
    }
    let dow = parse_err("0 9 * * MONDAY");
    assert!(dow.contains("0 and 7 are Sunday"), "{dow}");
}

#[test]
fn bad_shapes_macros_and_zones_say_how_to_write_them() {
    for expr in ["* * * *", "1 2 3 4 5 6 7", ""] {
        let err = parse_err(expr);
        assert!(err.contains("5 fields"), "{expr}: {err}");
        assert!(err.contains("@daily"), "{expr}: {err}");
    }
    assert!(parse_err("* * * *").contains("has 4 fields"));
    let err = parse_err("@fortnightly");
    assert!(err.contains("unknown cron macro \"@fortnightly\""), "{err}");
    let err = parse_err("0 0 30 2 *");
    assert!(err.contains("never fires"), "{err}");
    let err = CronSchedule::parse("@daily", Some("Europe/Pari")).unwrap_err();
    assert!(err.contains("unknown time zone \"Europe/Pari\""), "{err}");
    assert!(err.contains("Europe/Paris"), "{err}");
    let err = CronSchedule::parse("@daily", Some("europe/paris")).unwrap_err();
    assert!(err.contains("did you mean \"Europe/Paris\""), "{err}");
}

#[test]
fn describe_is_human_and_names_the_zone() {
    let d = sched("0 9 * * 1-5", Some("Europe/Paris")).describe();
    assert!(d.contains("09:00") && d.contains("Monday"), "{d}");
    assert!(d.ends_with("(Europe/Paris)"), "{d}");
    let d = sched("*/15 9-17 * * MON-FRI", None).describe();
    assert!(d.contains("15 minutes") && d.contains("(UTC)"), "{d}");
}

#[test]
fn working_hours_in_paris_end_at_17_45_then_next_morning_cet() {
    let s = sched("*/15 9-17 * * MON-FRI", Some("Europe/Paris"));
    // Thursday 2026-01-15 17:20 CET = 16:20 UTC.
    let fires = s.fires_between(utc(2026, 1, 15, 16, 20, 0), utc(2026, 1, 16, 8, 0, 0), 10);
    assert_eq!(
        fires,
        vec![
            utc(2026, 1, 15, 16, 30, 0), // 17:30 CET
            utc(2026, 1, 15, 16, 45, 0), // 17:45 CET
            utc(2026, 1, 16, 8, 0, 0),   // 09:00 CET
        ]
    );
}

#[test]
fn strictly_after_even_with_subsecond_instants() {
    let s = sched("0 9 * * *", None);
    let at = utc(2026, 5, 1, 9, 0, 0);
    assert_eq!(s.next_after(at), Some(utc(2026, 5, 2, 9, 0, 0)));
    let just_before = at - Duration::nanoseconds(1);
    assert_eq!(s.next_after(just_before), Some(at));
    let just_after = at + Duration::milliseconds(500);
    assert_eq!(s.next_after(just_after), Some(utc(2026, 5, 2, 9, 0, 0)));
}

#[test]
fn fires_between_is_exclusive_inclusive_and_capped() {
    let s = sched("0 * * * *", None);
    let from = utc(2026, 5, 1, 10, 0, 0);
    let to = utc(2026, 5, 1, 15, 0, 0);
    let all = s.fires_between(from, to, 100);
    assert_eq!(all.len(), 5);
    assert_eq!(all.first(), Some(&utc(2026, 5, 1, 11, 0, 0)));
    assert_eq!(all.last(), Some(&to));
    assert_eq!(s.fires_between(from, to, 2), all[..2].to_vec());
    assert!(s.fires_between(from, to, 0).is_empty());
    assert!(s.fires_between(to, from, 10).is_empty());
}

#[test]
fn period_near_is_the_gap_between_the_next_two_fires() {
    let at = utc(2026, 5, 1, 10, 7, 0);
    let period = |e: &str| sched(e, None).period_near(at).unwrap();
    assert_eq!(period("*/15 * * * *"), Duration::minutes(15));
    assert_eq!(period("@hourly"), Duration::hours(1));
    assert_eq!(period("@daily"), Duration::days(1));
    assert_eq!(period("*/30 * * * * *"), Duration::seconds(30));
}

#[test]
fn spring_forward_fixed_time_in_the_gap_fires_once_right_after_it() {
    // Europe/Paris 2026-03-29: 02:00 CET -> 03:00 CEST (01:00 UTC).
    let paris = Some("Europe/Paris");
    let (from, to) = (utc(2026, 3, 27, 12, 0, 0), utc(2026, 3, 30, 12, 0, 0));
    let s = sched("30 2 * * *", paris);
    // 02:30 CET, 03:00 CEST (right after the gap), 02:30 CEST.
    assert_eq!(hm(&s, from, to), ["28 01:30", "29 01:00", "30 00:30"]);
    // Two times in the gap and one at its end are the same fire.
    let s = sched("0,30 2 * * *", paris);
    assert_eq!(
        hm(&s, from, to),
        ["28 01:00", "28 01:30", "29 01:00", "30 00:00", "30 00:30"]
    );
    let s = sched("0 2,3 * * *", paris);
    assert_eq!(
        hm(&s, from, to),
        ["28 01:00", "28 02:00", "29 01:00", "30 00:00", "30 01:00"]
    );
    // Fixed times given as a range are fixed too (croner alone skips 02:30).
    let s = sched("30 1-3 * * *", paris);
    let day = hm(&s, utc(2026, 3, 28, 23, 0, 0), utc(2026, 3, 29, 4, 0, 0));
    assert_eq!(day, ["29 00:30", "29 01:00", "29 01:30"]);
}

#[test]
fn fall_back_fixed_time_repeated_fires_once_at_its_first_occurrence() {
    // Europe/Paris 2026-10-25: 03:00 CEST -> 02:00 CET (01:00 UTC).
    let paris = Some("Europe/Paris");
    let (from, to) = (utc(2026, 10, 24, 12, 0, 0), utc(2026, 10, 26, 12, 0, 0));
    let s = sched("30 2 * * *", paris);
    assert_eq!(hm(&s, from, to), ["25 00:30", "26 01:30"]);
    // Asked from inside the second pass, the repeated time is already done.
    assert_eq!(
        s.next_after(utc(2026, 10, 25, 1, 10, 0)),
        Some(utc(2026, 10, 26, 1, 30, 0))
    );
    // Multi-valued fixed times (croner alone fires 02:00 twice).
    let s = sched("0 2,14 * * *", paris);
    assert_eq!(hm(&s, from, to), ["25 00:00", "25 13:00", "26 01:00"]);
    let s = sched("30 1-3 * * *", paris);
    let day = hm(&s, utc(2026, 10, 24, 22, 0, 0), utc(2026, 10, 25, 4, 0, 0));
    assert_eq!(day, ["24 23:30", "25 00:30", "25 02:30"]);
}

/// Consecutive gaps of the fires in (from, to].
fn steps(s: &CronSchedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Duration> {
    let fires = s.fires_between(from, to, 10_000);
    fires.windows(2).map(|w| w[1] - w[0]).collect()
}

#[test]
fn interval_styles_follow_real_time_through_both_transitions() {
    let transitions = [
        ("Europe/Paris", utc(2026, 3, 29, 1, 0, 0)),
        ("Europe/Paris", utc(2026, 10, 25, 1, 0, 0)),
        ("America/New_York", utc(2026, 3, 8, 7, 0, 0)),
        ("America/New_York", utc(2026, 11, 1, 6, 0, 0)),
    ];
    for (tz, at) in transitions {
        let (from, to) = (at - Duration::hours(6), at + Duration::hours(6));
        for (expr, every) in [
            ("0 * * * *", Duration::hours(1)),
            ("@hourly", Duration::hours(1)),
            ("*/15 * * * *", Duration::minutes(15)),
            ("*/20 * * * * *", Duration::seconds(20)),
        ] {
            let s = sched(expr, Some(tz));
            let gaps = steps(&s, from, to);
            assert!(!gaps.is_empty());
            assert!(
                gaps.iter().all(|g| *g == every),
                "{expr} in {tz} at {at}: {gaps:?}"
            );
        }
    }
}

#[test]
fn new_york_fixed_times_across_both_transitions() {
    let ny = Some("America/New_York");
    // 2026-03-08: 02:00 EST -> 03:00 EDT (07:00 UTC); 02:30 does not exist.
    let s = sched("30 2 * * *", ny);
    let spring = hm(&s, utc(2026, 3, 7, 0, 0, 0), utc(2026, 3, 10, 0, 0, 0));
    assert_eq!(spring, ["07 07:30", "08 07:00", "09 06:30"]);
    // 2026-11-01: 02:00 EDT -> 01:00 EST (06:00 UTC); 01:30 happens twice.
    let s = sched("30 1 * * *", ny);
    let fall = hm(&s, utc(2026, 10, 31, 0, 0, 0), utc(2026, 11, 3, 0, 0, 0));
    assert_eq!(fall, ["31 05:30", "01 05:30", "02 06:30"]);
    // The same wall time seen from a seconds-precision schedule.
    let s = sched("0 30 1 * * *", ny);
    assert_eq!(
        s.next_after(utc(2026, 11, 1, 5, 30, 0)),
        Some(utc(2026, 11, 2, 6, 30, 0))
    );
}

#[test]
fn interval_style_in_the_repeated_hour_fires_both_passes_in_order() {
    // `*/30 2 * * *` is interval-style (a `*`): both passes of 02:xx fire.
    let s = sched("*/30 2 * * *", Some("Europe/Paris"));
    let fires = hm(&s, utc(2026, 10, 24, 23, 0, 0), utc(2026, 10, 25, 3, 0, 0));
    assert_eq!(fires, ["25 00:00", "25 00:30", "25 01:00", "25 01:30"]);
    // Starting inside the first pass still reaches the second pass.
    let next = s.next_after(utc(2026, 10, 25, 0, 45, 0)).unwrap();
    assert_eq!(next, utc(2026, 10, 25, 1, 0, 0));
    // And in the gap it does not fire at all on that day.
    let spring = hm(&s, utc(2026, 3, 28, 23, 0, 0), utc(2026, 3, 29, 23, 0, 0));
    assert!(spring.is_empty(), "{spring:?}");
}

const EXPRS: [&str; 12] = [
    "* * * * *",
    "*/15 * * * *",
    "0 * * * *",
    "*/7 1-3 * * *",
    "30 2 * * *",
    "0,30 2 * * *",
    "30 1-3 * * *",
    "0 2,14 * * *",
    "*/15 9-17 * * MON-FRI",
    "0 0 * * *",
    "*/45 * * * * *",
    "15 30 0 * * *",
];
const ZONES: [&str; 6] = [
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Lord_Howe", // 30-minute DST shift
    "America/Santiago",    // shifts at midnight
    "Asia/Kolkata",
];

/// The instants (to within 15 minutes) where `zone`'s UTC offset changes in
/// 2026 and 2027.
fn transitions(zone: &str) -> Vec<DateTime<Utc>> {
    use chrono::Offset;
    let tz: Tz = zone.parse().unwrap();
    let offset = |t: DateTime<Utc>| t.with_timezone(&tz).offset().fix();
    let mut out = Vec::new();
    let mut t = utc(2026, 1, 1, 0, 0, 0);
    while t < utc(2028, 1, 1, 0, 0, 0) {
        let next = t + Duration::minutes(15);
        if offset(t) != offset(next) {
            out.push(next);
        }
        t = next;
    }
    out
}

/// Checks the chain properties of the schedule over (from, to].
fn check_chain(
    s: &CronSchedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(), TestCaseError> {
    let fires = s.fires_between(from, to, 400);
    let mut at = from;
    for fire in &fires {
        let next = s.next_after(at).unwrap();
        prop_assert_eq!(next, *fire);
        prop_assert!(next > at);
        prop_assert!(next <= to);
        at = next;
    }
    if fires.len() < 400 {
        prop_assert!(s.next_after(at).is_none_or(|n| n > to));
    }
    prop_assert!(fires.iter().all(|t| t.nanosecond() == 0));
    let fields: Vec<&str> = s.expression().split_whitespace().collect();
    let fixed = !fields[..fields.len() - 3].iter().any(|f| f.contains('*'));
    if fixed {
        // A fixed-time schedule never fires the same wall-clock time twice.
        let walls: std::collections::HashSet<_> = fires
            .iter()
            .map(|t| t.with_timezone(&s.timezone()).naive_local())
            .collect();
        prop_assert_eq!(walls.len(), fires.len());
    }
    Ok(())
}

/// An independent statement of the DST policy for 5-field expressions:
/// every wall-clock minute around the window that the pattern matches,
/// mapped to instants by the rules on [`CronSchedule`].
fn oracle(s: &CronSchedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    use chrono::LocalResult;
    let cron = croner::parser::CronParser::builder()
        .build()
        .parse(s.expression())
        .unwrap();
    let fields: Vec<&str> = s.expression().split_whitespace().collect();
    let fixed = !fields[..2].iter().any(|f| f.contains('*'));
    let tz = s.timezone();
    // UTC offsets lie within +-14 h, so this covers every wall-clock time
    // of the window.
    let mut wall = (from - Duration::hours(16)).naive_utc();
    wall = wall
        .with_second(0)
        .and_then(|w| w.with_nanosecond(0))
        .unwrap();
    let end = (to + Duration::hours(16)).naive_utc();
    let mut fires = std::collections::BTreeSet::new();
    while wall <= end {
        if cron.is_time_matching(&wall).unwrap() {
            match tz.from_local_datetime(&wall) {
                LocalResult::Single(t) => {
                    fires.insert(t.to_utc());
                }
                LocalResult::Ambiguous(first, second) => {
                    fires.insert(first.to_utc());
                    if !fixed {
                        fires.insert(second.to_utc());
                    }
                }
                LocalResult::None if fixed => {
                    let end = chrono_tz::GapInfo::new(&wall, &tz).unwrap().end.unwrap();
                    fires.insert(end.to_utc());
                }
                LocalResult::None => {}
            }
        }
        wall += Duration::minutes(1);
    }
    fires
        .into_iter()
        .filter(|t| *t > from && *t <= to)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Like the test below, but every window contains a DST transition.
    #[test]
    fn chain_properties_hold_across_transitions(
        e in 0..EXPRS.len(),
        z in 1..5usize,
        pick in 0usize..4,
        before in 0i64..(30 * 3600),
        nanos in 0i64..1_000_000_000,
        hours in 1i64..40,
    ) {
        let zone = ZONES[z];
        let all = transitions(zone);
        prop_assert!(all.len() >= 4, "{} has {} transitions", zone, all.len());
        let s = sched(EXPRS[e], Some(zone));
        let from = all[pick] - Duration::seconds(before) + Duration::nanoseconds(nanos);
        let to = from + Duration::hours(hours);
        check_chain(&s, from, to)?;
        if EXPRS[e].split_whitespace().count() == 5 {
            prop_assert_eq!(s.fires_between(from, to, 10_000), oracle(&s, from, to));
        }
    }

    /// `next_after` is strictly increasing, and `fires_between` is exactly
    /// the chain of `next_after`s; fixed-time schedules never fire the same
    /// wall-clock time twice.
    #[test]
    fn next_after_is_strictly_increasing_and_matches_fires_between(
        e in 0..EXPRS.len(),
        z in 0..ZONES.len(),
        // Anywhere in 2026 and 2027.
        offset in 0i64..(2 * 366 * 24 * 3600),
        nanos in 0i64..1_000_000_000,
        hours in 1i64..30,
    ) {
        let s = sched(EXPRS[e], Some(ZONES[z]));
        let from = utc(2026, 1, 1, 0, 0, 0) + Duration::seconds(offset) + Duration::nanoseconds(nanos);
        check_chain(&s, from, from + Duration::hours(hours))?;
    }
}

/// One row of `tests/fixtures/cron-croniter.json`.
#[derive(serde::Deserialize)]
struct CroniterCase {
    expression: String,
    timezone: String,
    start: DateTime<Utc>,
    croniter: Vec<DateTime<Utc>>,
    /// aurad's fires where they differ from croniter's on purpose ...
    aurad: Option<Vec<DateTime<Utc>>>,
    /// ... and why.
    why: Option<String>,
}

/// aurad's next 5 fires agree with Python's croniter on every expression of
/// the committed table (written by `tests/fixtures/cron-croniter.py`), save
/// the rows that say why they differ; those must still differ, so an
/// explanation cannot outlive its difference.
#[test]
fn next_fires_agree_with_croniter_except_where_explained() {
    #[derive(serde::Deserialize)]
    struct Table {
        cases: Vec<CroniterCase>,
    }
    let table: Table =
        serde_json::from_str(include_str!("../../tests/fixtures/cron-croniter.json")).unwrap();
    assert!(table.cases.len() >= 30, "{} cases", table.cases.len());
    let mut problems = Vec::new();
    for case in &table.cases {
        let schedule = sched(&case.expression, Some(&case.timezone));
        let mut ours = Vec::new();
        let mut at = case.start;
        for _ in 0..5 {
            at = schedule.next_after(at).unwrap();
            ours.push(at);
        }
        let label = format!(
            "`{}` in {} from {}",
            case.expression, case.timezone, case.start
        );
        match (&case.aurad, &case.why) {
            (None, None) if ours != case.croniter => {
                problems.push(format!(
                    "{label}: aurad {ours:?}, croniter {:?}",
                    case.croniter
                ));
            }
            (Some(expected), Some(why)) => {
                assert!(!why.trim().is_empty(), "{label}: empty `why`");
                if &ours != expected {
                    problems.push(format!(
                        "{label}: aurad {ours:?}, the table says {expected:?}"
                    ));
                }
                if expected == &case.croniter {
                    problems.push(format!(
                        "{label}: explained as a difference, but croniter agrees"
                    ));
                }
            }
            (None, None) => {}
            _ => problems.push(format!("{label}: `aurad` and `why` go together")),
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Vixie cron's rule: with both day-of-month and day-of-week restricted, a
/// day matches when EITHER matches; with one of them `*`, only the other
/// counts.
#[test]
fn day_of_month_and_day_of_week_both_restricted_match_either() {
    let days = |expr: &str| -> Vec<String> {
        sched(expr, None)
            .fires_between(
                utc(2026, 1, 31, 23, 0, 0),
                utc(2026, 3, 31, 23, 59, 59),
                100,
            )
            .iter()
            .map(|t| t.format("%a %d %b").to_string())
            .collect()
    };
    // February and March 2026: Fridays are 6, 13, 20, 27 Feb and 6, 13,
    // 20, 27 Mar; 13 March is itself a Friday.
    assert_eq!(
        days("0 0 13 * FRI"),
        [
            "Fri 06 Feb",
            "Fri 13 Feb",
            "Fri 20 Feb",
            "Fri 27 Feb",
            "Fri 06 Mar",
            "Fri 13 Mar",
            "Fri 20 Mar",
            "Fri 27 Mar"
        ]
    );
    assert_eq!(
        days("0 0 1 * MON"),
        [
            "Sun 01 Feb",
            "Mon 02 Feb",
            "Mon 09 Feb",
            "Mon 16 Feb",
            "Mon 23 Feb",
            "Sun 01 Mar",
            "Mon 02 Mar",
            "Mon 09 Mar",
            "Mon 16 Mar",
            "Mon 23 Mar",
            "Mon 30 Mar"
        ]
    );
    // Not "the first Monday": the first seven days and every Monday (7 + 3
    // later Mondays in February, 7 + 4 in March).
    assert_eq!(days("0 0 1-7 * MON").len(), 7 + 3 + 7 + 4);
    // One side `*`: the other alone.
    assert_eq!(days("0 0 13 * *"), ["Fri 13 Feb", "Fri 13 Mar"]);
    assert_eq!(days("0 0 * * FRI").len(), 8);
}

/// What docs/daemon-and-api.md says of `*/15 2 * * *`: a `*` in the minute makes it
/// follow real time, so it does not fire on a day whose 02:00-03:00 is
/// skipped and fires in both passes of a day that repeats it.
#[test]
fn a_star_minute_at_a_fixed_hour_follows_real_time_through_dst() {
    let paris = sched("*/15 2 * * *", Some("Europe/Paris"));
    let spring = paris.fires_between(utc(2026, 3, 28, 23, 0, 0), utc(2026, 3, 29, 22, 0, 0), 100);
    assert!(spring.is_empty(), "{spring:?}");
    let autumn = hm(
        &paris,
        utc(2026, 10, 24, 22, 0, 0),
        utc(2026, 10, 25, 22, 0, 0),
    );
    assert_eq!(
        autumn,
        [
            "25 00:00", "25 00:15", "25 00:30", "25 00:45", "25 01:00", "25 01:15", "25 01:30",
            "25 01:45"
        ]
    );
    let new_york = sched("*/15 2 * * *", Some("America/New_York"));
    let spring = new_york.fires_between(utc(2026, 3, 8, 5, 0, 0), utc(2026, 3, 9, 4, 0, 0), 100);
    assert!(spring.is_empty(), "{spring:?}");
}
