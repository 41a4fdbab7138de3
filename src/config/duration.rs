//! Human durations in config files: `500ms`, `30s`, `10m`, `2h`, `1d`,
//! combinations such as `1h30m`, or a bare number of seconds.

use std::time::Duration;

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let bad = || {
        format!(
            "invalid duration {text:?}: use a number with a unit, e.g. 500ms, 30s, 10m, 2h, 1d, 1h30m"
        )
    };
    if s.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let number: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = rest[..unit_len].trim();
        let seconds = match unit {
            "ms" => number / 1000.0,
            "s" | "sec" | "secs" => number,
            "m" | "min" | "mins" => number * 60.0,
            "h" | "hr" | "hours" => number * 3600.0,
            "d" | "days" => number * 86400.0,
            _ => return Err(bad()),
        };
        total = Duration::try_from_secs_f64(seconds)
            .ok()
            .and_then(|d| total.checked_add(d))
            .ok_or_else(|| format!("duration {text:?} is too long"))?;
        rest = &rest[unit_len..];
    }
    if total > MAX {
        return Err(format!("duration {text:?} is too long: at most 365d"));
    }
    Ok(total)
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

/// No duration in a config file needs more than a year; anything longer is
/// a mistake (and would overflow deadlines).
const MAX: Duration = Duration::from_secs(365 * 86_400);

/// Renders a duration the way a user would write it.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    match s {
        s if s.is_multiple_of(3600) && s > 0 => format!("{}h", s / 3600),
        s if s.is_multiple_of(60) && s > 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_combinations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("45").unwrap(), Duration::from_secs(45));
    }

    #[test]
    fn rejects_garbage() {
        assert!(
            parse_duration("999999999999999d")
                .unwrap_err()
                .contains("too long")
        );
        assert!(
            parse_duration("18446744073709551615s1s")
                .unwrap_err()
                .contains("too long")
        );
        for bad in ["", "ten", "10x", "m", "1h 2q"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(err.contains("invalid duration"), "{bad}: {err}");
        }
    }

    #[test]
    fn formats_back() {
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
    }
}
