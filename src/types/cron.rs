//! Cron expressions evaluated in an IANA time zone: parsing with clear
//! errors, and the next fire time under aurad's DST rules (docs/daemon-and-api.md,
//! "Schedules": a time skipped by spring-forward fires once after the
//! gap, a repeated one once).
//!
//! Pure: no clock, no I/O. Uses croner only to match the pattern against
//! *wall-clock* (naive) times; the mapping from wall-clock times to UTC
//! instants, and so the whole DST policy, is done here.
//!
//! The DST policy is documented on [`CronSchedule`].

use std::fmt;

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, TimeZone, Utc};
use chrono_tz::{GapInfo, Tz};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// How a schedule behaves in DST gaps and overlaps (see [`CronSchedule`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DstStyle {
    /// No `*` in the time-of-day fields: a skipped time fires once after the
    /// gap, a repeated time fires once (first occurrence).
    Fixed,
    /// A `*` in a time-of-day field: follows real elapsed time.
    Interval,
}

/// Naive fires examined by one walk before giving up (defensive bound; a
/// real walk stops after a handful, or a few thousand inside a DST overlap).
const MAX_WALK_STEPS: usize = 100_000;

/// The accepted format, appended to errors about the expression's shape.
const FORMAT_HINT: &str = "write 5 fields \"minute hour day-of-month month day-of-week\" \
     (e.g. \"*/15 9-17 * * MON-FRI\" or \"0 9 * * 1-5\"), 6 fields with a leading seconds \
     field (e.g. \"*/30 * * * * *\"), or a macro: @yearly, @annually, @monthly, @weekly, \
     @daily, @midnight, @hourly";

/// The macros and the 5-field expressions they stand for.
const MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAY_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// One field of a cron expression: its name and how to write it.
#[derive(Clone, Copy)]
struct Field {
    name: &'static str,
    hint: &'static str,
}

const SECOND: Field = Field {
    name: "second",
    hint: "0-59, e.g. \"0\", \"*/10\" or \"0,30\"",
};
const MINUTE: Field = Field {
    name: "minute",
    hint: "0-59, e.g. \"0\", \"*/15\" or \"0,30\"",
};
const HOUR: Field = Field {
    name: "hour",
    hint: "0-23, e.g. \"9\", \"9-17\" or \"*/2\"",
};
const DAY_OF_MONTH: Field = Field {
    name: "day-of-month",
    hint: "1-31 or L (last day), e.g. \"1\", \"1,15\" or \"*\"",
};
const MONTH: Field = Field {
    name: "month",
    hint: "1-12 or JAN-DEC, e.g. \"*\", \"1\" or \"JAN-MAR\"",
};
const DAY_OF_WEEK: Field = Field {
    name: "day-of-week",
    hint: "0-7 or SUN-SAT, where 0 and 7 are Sunday and 1 is Monday, \
           e.g. \"MON-FRI\", \"1-5\" or \"SAT,SUN\"",
};

/// A parsed cron schedule in a time zone.
///
/// # DST policy (what the code does)
///
/// A schedule is *interval-style* when one of its time-of-day fields (the
/// seconds field when present, minute, hour) contains `*` (`*`, `*/15`);
/// otherwise it is *fixed-time* (`30 2 * * *`, `0 9,17 * * *`,
/// `30 1-3 * * *`). This is Vixie cron's rule. croner has its own split
/// (fixed only when seconds, minute and hour each hold a single value), under
/// which `0 2,14 * * *` fires twice at fall-back and not at all in a
/// spring-forward gap; aurad does not use croner's time-zone mode for that
/// reason.
///
/// Each wall-clock time the pattern matches is mapped to instants:
/// - exists once: that instant;
/// - skipped by a spring-forward gap: fixed-time: the first instant after the
///   gap (e.g. `30 2 * * *` in Europe/Paris on 2026-03-29 fires at 03:00
///   CEST = 01:00 UTC); several matches in one gap, and a match at the gap's
///   end, are the same instant and so fire once. Interval-style: nothing (the
///   wall-clock hour did not happen, so real elapsed time keeps its rhythm:
///   `*/15 * * * *` fires 01:45 CET then 03:00 CEST, 15 minutes apart);
/// - repeated by a fall-back: fixed-time: the first occurrence only.
///   Interval-style: both occurrences, in real-time order (the whole first
///   pass, then the whole second pass), so `0 * * * *` fires every real hour
///   and `*/15 * * * *` every 15 real minutes, never the same instant twice.
///
/// A gap is attributed to the matching wall-clock time's own date even when
/// the gap ends on the next day (zones that shift at midnight).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSchedule {
    /// The expression as written (trimmed).
    expression: String,
    cron: Cron,
    tz: Tz,
    style: DstStyle,
}

impl fmt::Display for CronSchedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.expression, self.tz.name())
    }
}

impl CronSchedule {
    /// Parses `expr`: standard 5-field crontab (minute hour day-of-month
    /// month day-of-week; 0 or 7 = Sunday, 1-5 = Monday..Friday; names
    /// MON..SUN / JAN..DEC in any case), 6 fields with a leading seconds
    /// field, or a macro (@yearly @annually @monthly @weekly @daily
    /// @midnight @hourly). croner's extensions (`L`, `W`, `#`, `?`) are
    /// accepted. Day-of-month and day-of-week combine with OR when both are
    /// restricted (Vixie). `timezone` is an IANA name, default "UTC".
    ///
    /// Errors name the bad field and say how to write it. An expression that
    /// can never fire (`0 0 30 2 *`) is an error too.
    pub fn parse(expr: &str, timezone: Option<&str>) -> Result<CronSchedule, String> {
        let tz = parse_timezone(timezone)?;
        let expression = expr.trim();
        let expanded = expand_macro(expression)?;
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let layout: &[Field] = match fields.len() {
            5 => &[MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK],
            6 => &[SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK],
            0 => return Err(format!("the cron expression is empty: {FORMAT_HINT}")),
            n => {
                return Err(format!(
                    "cron expression \"{expression}\" has {n} field{}: {FORMAT_HINT}",
                    if n == 1 { "" } else { "s" }
                ));
            }
        };
        for (text, field) in fields.iter().zip(layout) {
            check_names(text, *field).map_err(|why| field_error(expression, text, *field, &why))?;
        }
        let parser = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build();
        let cron = match parser.parse(&expanded) {
            Ok(cron) => cron,
            Err(whole) => return Err(blame_field(&parser, expression, &fields, layout, &whole)),
        };
        // Time-of-day fields are all but the last three (dom, month, dow).
        let time_of_day = &fields[..fields.len() - 3];
        let style = if time_of_day.iter().any(|f| f.contains('*')) {
            DstStyle::Interval
        } else {
            DstStyle::Fixed
        };
        // Without a year field every pattern repeats within 28 years, so one
        // search from any date tells whether it can ever fire.
        let reference = DateTime::UNIX_EPOCH.naive_utc();
        if cron.find_next_occurrence(&reference, true).is_err() {
            return Err(format!(
                "cron expression \"{expression}\" never fires: no date matches its day-of-month \
                 and month fields (e.g. February has no day 30); check those two fields"
            ));
        }
        Ok(CronSchedule {
            expression: expression.to_string(),
            cron,
            tz,
            style,
        })
    }

    /// The expression as written (trimmed, macros not expanded).
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The zone the expression is evaluated in.
    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// A human description, croner's English text plus the zone, e.g.
    /// "At 09:00, on Monday, Tuesday, Wednesday, Thursday, and Friday. (Europe/Paris)".
    pub fn describe(&self) -> String {
        format!("{} ({})", self.cron.describe(), self.tz.name())
    }

    /// The first fire strictly after `after`, as a UTC instant, under the DST
    /// policy documented on [`CronSchedule`]. `None` only past year 5000.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let wall = after.with_timezone(&self.tz).naive_local();
        let first = self.walk(wall, false, after);
        // `after` on the first pass of a repeated (fall-back) range: the
        // second pass, which starts earlier in wall-clock time, still lies
        // ahead. Walk it too from a wall-clock point before the range (its
        // length before `wall`) and keep the earlier answer.
        if self.style == DstStyle::Interval
            && let LocalResult::Ambiguous(earlier, later) = self.tz.from_local_datetime(&wall)
            && earlier.to_utc() == after
        {
            let repeated = later.to_utc() - earlier.to_utc();
            let second = self.walk(wall - repeated, true, after);
            return match (first, second) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        first
    }

    /// All fires in `(from, to]`, in order, at most `cap` of them (the
    /// earliest ones).
    pub fn fires_between(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
        cap: usize,
    ) -> Vec<DateTime<Utc>> {
        let mut fires = Vec::new();
        let mut at = from;
        while fires.len() < cap {
            match self.next_after(at) {
                Some(fire) if fire <= to => {
                    fires.push(fire);
                    at = fire;
                }
                _ => break,
            }
        }
        fires
    }

    /// The real time between the first two fires strictly after `at` (for
    /// the default `catch_up` = min(period, 1h)).
    pub fn period_near(&self, at: DateTime<Utc>) -> Option<Duration> {
        let first = self.next_after(at)?;
        let second = self.next_after(first)?;
        Some(second - first)
    }

    /// Walks the pattern's wall-clock matches from `start` in wall-clock
    /// order, mapping each to instants, and returns the first instant after
    /// `after`. Matches in a repeated range yield their first-pass instant,
    /// or (interval-style) their second-pass one when the first is not after
    /// `after`: correct unless `after` itself is on a first pass, which
    /// [`Self::next_after`] handles with a second walk.
    fn walk(
        &self,
        start: NaiveDateTime,
        inclusive: bool,
        after: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let mut cursor = start;
        let mut inclusive = inclusive;
        for _ in 0..MAX_WALK_STEPS {
            let wall = self.cron.find_next_occurrence(&cursor, inclusive).ok()?;
            cursor = wall;
            inclusive = false;
            match self.tz.from_local_datetime(&wall) {
                LocalResult::Single(at) => {
                    let at = at.to_utc();
                    if at > after {
                        return Some(at);
                    }
                }
                LocalResult::Ambiguous(earlier, later) => {
                    let (earlier, later) = (earlier.to_utc(), later.to_utc());
                    if earlier > after {
                        return Some(earlier);
                    }
                    if self.style == DstStyle::Interval && later > after {
                        return Some(later);
                    }
                }
                LocalResult::None => {
                    let gap_end = GapInfo::new(&wall, &self.tz)?.end?;
                    if self.style == DstStyle::Fixed && gap_end.to_utc() > after {
                        return Some(gap_end.to_utc());
                    }
                    // Skip the rest of the gap: resume at its end, inclusive.
                    cursor = gap_end.naive_local();
                    inclusive = true;
                }
            }
        }
        None
    }
}

/// Reads an IANA zone name; `None` is UTC.
fn parse_timezone(timezone: Option<&str>) -> Result<Tz, String> {
    let Some(name) = timezone else {
        return Ok(Tz::UTC);
    };
    let name = name.trim();
    if let Ok(tz) = name.parse::<Tz>() {
        return Ok(tz);
    }
    let suggestion = chrono_tz::TZ_VARIANTS
        .iter()
        .find(|tz| tz.name().eq_ignore_ascii_case(name))
        .map(|tz| format!(" (did you mean \"{}\"?)", tz.name()))
        .unwrap_or_default();
    Err(format!(
        "unknown time zone \"{name}\"{suggestion}: use an IANA name such as \"UTC\", \
         \"Europe/Paris\" or \"America/New_York\""
    ))
}

/// Expands a leading `@macro` into its 5-field form; other text is returned
/// unchanged.
fn expand_macro(expression: &str) -> Result<String, String> {
    if !expression.starts_with('@') {
        return Ok(expression.to_string());
    }
    MACROS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(expression))
        .map(|(_, fields)| fields.to_string())
        .ok_or_else(|| format!("unknown cron macro \"{expression}\": {FORMAT_HINT}"))
}

/// Checks the characters and names of one field, so that a name is only
/// accepted where it means something (croner would read `MON` in the month
/// field as 1 = January).
fn check_names(text: &str, field: Field) -> Result<(), String> {
    let extra: &[char] = match field.name {
        "day-of-month" => &['?'],
        "day-of-week" => &['?', '#'],
        _ => &[],
    };
    if let Some(bad) = text.chars().find(|c| {
        !(c.is_ascii_alphanumeric() || matches!(c, '*' | ',' | '-' | '/') || extra.contains(c))
    }) {
        return Err(format!("character '{bad}' is not allowed"));
    }
    for word in text
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
    {
        let upper = word.to_ascii_uppercase();
        let ok = match field.name {
            "month" => MONTH_NAMES.contains(&upper.as_str()),
            "day-of-week" => DAY_NAMES.contains(&upper.as_str()) || upper == "L",
            "day-of-month" => matches!(upper.as_str(), "L" | "W" | "LW"),
            _ => return Err(format!("\"{word}\": letters are not allowed here")),
        };
        if !ok {
            return Err(format!("\"{word}\" is not a {} name", field.name));
        }
    }
    Ok(())
}

/// Finds which field croner rejects by parsing each one alone (the others
/// set to `*`), and words the error with that field's name and syntax.
fn blame_field(
    parser: &CronParser,
    expression: &str,
    fields: &[&str],
    layout: &[Field],
    whole: &croner::errors::CronError,
) -> String {
    for (i, (text, field)) in fields.iter().zip(layout).enumerate() {
        let alone: Vec<&str> = (0..fields.len())
            .map(|j| if j == i { *text } else { "*" })
            .collect();
        if let Err(err) = parser.parse(&alone.join(" ")) {
            return field_error(expression, text, *field, &croner_detail(&err));
        }
    }
    format!(
        "invalid cron expression \"{expression}\": {}; {FORMAT_HINT}",
        croner_detail(whole)
    )
}

/// croner's error text without its type prefix or final period.
fn croner_detail(err: &croner::errors::CronError) -> String {
    use croner::errors::CronError as E;
    let text = match err {
        E::InvalidPattern(msg) | E::IllegalCharacters(msg) | E::ComponentError(msg) => msg.clone(),
        other => other.to_string(),
    };
    let text = text.trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn field_error(expression: &str, text: &str, field: Field, why: &str) -> String {
    format!(
        "invalid cron expression \"{expression}\": the {} field \"{text}\" is not valid ({why}); \
         write it as {}. Fields are \"minute hour day-of-month month day-of-week\", e.g. \
         \"*/15 9-17 * * MON-FRI\", with an optional leading seconds field",
        field.name, field.hint
    )
}
