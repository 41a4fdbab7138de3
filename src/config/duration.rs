//! Human durations in config files, read and written with `humantime`:
//! `500ms`, `30s`, `10m`, `2h`, `1d`, `1.5s`, combinations such as `1h30m`
//! or `1h 30m`, and (our addition) a bare number of seconds. At most 365
//! days. Depends on `humantime` and `serde_yaml` only.

use std::time::Duration;

/// No duration in a config file needs more than a year; anything longer is
/// a mistake (and would overflow deadlines).
const MAX: Duration = Duration::from_secs(365 * 86_400);

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return checked(text, Duration::from_secs(secs));
    }
    match humantime::parse_duration(s) {
        Ok(d) => checked(text, d),
        Err(humantime::DurationError::NumberOverflow) => {
            Err(format!("duration {text:?} is too long: at most 365d"))
        }
        Err(e) => {
            let why = match e {
                humantime::DurationError::UnknownUnit { unit, .. } if !unit.is_empty() => {
                    format!(" ({unit:?} is not a unit)")
                }
                _ => String::new(),
            };
            Err(format!(
                "invalid duration {text:?}: use a number with a unit, e.g. 500ms, 30s, 10m, 2h, \
                 1d, 1h30m{why}"
            ))
        }
    }
}

fn checked(text: &str, d: Duration) -> Result<Duration, String> {
    if d > MAX {
        return Err(format!("duration {text:?} is too long: at most 365d"));
    }
    Ok(d)
}

/// A duration written in YAML: a string such as `30s`, or a bare number of
/// seconds.
pub fn duration_value(value: &serde_yaml::Value) -> Result<Duration, String> {
    match value {
        serde_yaml::Value::Number(n) => n
            .as_u64()
            .map(Duration::from_secs)
            .ok_or_else(|| format!("invalid duration {n}: use e.g. 30s or 10m")),
        serde_yaml::Value::String(s) => parse_duration(s),
        _ => Err("invalid duration: use e.g. 30s or 10m".into()),
    }
}

/// Renders a duration the way a user would write it (`10m`, `1h 30m`,
/// `1s 500ms`); `parse_duration` reads it back.
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_combinations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("2 mins").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2hr").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
        assert_eq!(
            parse_duration(" 1w ").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
    }

    #[test]
    fn rejects_garbage() {
        for long in [
            "999999999999999d",
            "18446744073709551615s1s",
            "366d",
            "2y",
            "31536001",
        ] {
            let err = parse_duration(long).unwrap_err();
            assert!(err.contains("too long"), "{long}: {err}");
        }
        for bad in ["", "ten", "10x", "m", "1h 2q", "-5s"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("invalid duration"), "{bad}: {err}");
            assert!(err.contains("e.g. 500ms"), "{bad}: {err}");
        }
        assert_eq!(
            parse_duration("10x").unwrap_err(),
            "invalid duration \"10x\": use a number with a unit, e.g. 500ms, 30s, 10m, 2h, 1d, \
             1h30m (\"x\" is not a unit)"
        );
        assert_eq!(
            parse_duration("soon").unwrap_err(),
            "invalid duration \"soon\": use a number with a unit, e.g. 500ms, 30s, 10m, 2h, 1d, \
             1h30m"
        );
    }

    #[test]
    fn formats_back() {
        for (d, text) in [
            (Duration::from_secs(600), "10m"),
            (Duration::from_millis(1500), "1s 500ms"),
            (Duration::from_secs(7200), "2h"),
            (Duration::from_secs(5400), "1h 30m"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(format_duration(d), text);
            assert_eq!(parse_duration(text).unwrap(), d, "{text} reads back");
        }
    }
}
