//! How records' times are written: RFC 3339 in UTC with milliseconds and a
//! `Z` (`2026-03-01T09:00:00.000Z`), the form the store keeps and the API
//! has always shown. For `#[serde(serialize_with = ...)]` on
//! `DateTime<Utc>` fields; reading accepts any RFC 3339 (chrono's own).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serializer;

/// `t` as RFC 3339 UTC with milliseconds.
pub fn millis_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Serializes a time as [`millis_text`].
pub fn millis<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&millis_text(*t))
}

/// Serializes an optional time as [`millis_text`] or `null`.
pub fn millis_opt<S: Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&millis_text(*t)),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn whole_seconds_keep_their_milliseconds() {
        let t = Utc.with_ymd_and_hms(2026, 3, 1, 9, 0, 0).unwrap();
        assert_eq!(millis_text(t), "2026-03-01T09:00:00.000Z");
        let t = t + chrono::Duration::microseconds(1_234_567);
        assert_eq!(millis_text(t), "2026-03-01T09:00:01.234Z");
    }
}
