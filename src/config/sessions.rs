//! `sessions:` in aurad.yaml: how long conversations are kept and how big
//! they may grow. `aurad serve`'s pruner deletes a session idle longer than
//! `expire_after` and, per agent, the least recently used ones beyond
//! `max_per_agent`; a session with `max_turns` turns takes no more (the
//! person starts a new one). Depends on `config::duration` and `diag`.

use std::time::Duration;

use serde::Deserialize;
use serde_yaml::Value;

use super::diag::Diagnostic;
use super::duration::{duration_value, format_duration};

/// The limits on sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLimits {
    /// A session no turn used for this long is deleted.
    pub expire_after: Duration,
    /// The most turns one session takes.
    pub max_turns: u64,
    /// The most sessions one agent keeps: beyond it, the least recently
    /// used go.
    pub max_per_agent: u64,
}

impl SessionLimits {
    /// The shortest `expire_after` accepted (a bare number is seconds).
    pub const MIN_EXPIRY: Duration = Duration::from_secs(3600);
}

impl Default for SessionLimits {
    /// 90 idle days, 1,000 turns, 1,000 sessions per agent.
    fn default() -> SessionLimits {
        SessionLimits {
            expire_after: Duration::from_secs(90 * 86_400),
            max_turns: 1_000,
            max_per_agent: 1_000,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSessionLimits {
    expire_after: Option<Value>,
    max_turns: Option<Value>,
    max_per_agent: Option<Value>,
}

pub(super) fn parse_sessions(
    raw: &RawSessionLimits,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
    diags: &mut Vec<Diagnostic>,
) -> SessionLimits {
    let mut limits = SessionLimits::default();
    if let Some(value) = &raw.expire_after {
        match duration_value(value) {
            Ok(d) if d >= SessionLimits::MIN_EXPIRY => limits.expire_after = d,
            Ok(d) => diags.push(err(
                &["sessions", "expire_after"],
                format!(
                    "sessions.expire_after: {} is shorter than the minimum of 1h; write e.g. 30d",
                    format_duration(d)
                ),
            )),
            Err(msg) => diags.push(err(
                &["sessions", "expire_after"],
                format!("sessions.expire_after: {msg}"),
            )),
        }
    }
    for (key, value, into) in [
        ("max_turns", &raw.max_turns, &mut limits.max_turns),
        (
            "max_per_agent",
            &raw.max_per_agent,
            &mut limits.max_per_agent,
        ),
    ] {
        let Some(value) = value else { continue };
        match value.as_u64().filter(|n| *n >= 1) {
            Some(n) => *into = n,
            None => diags.push(err(
                &["sessions", key],
                format!(
                    "sessions.{key} is {}: expected a whole number of at least 1",
                    super::yaml_value::describe_value(value)
                ),
            )),
        }
    }
    limits
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::settings::parse_settings;

    #[test]
    fn sessions_are_read_and_bad_values_are_located() {
        let text = "sessions:\n  expire_after: 30d\n  max_turns: 200\n  max_per_agent: 50\n";
        let (s, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(
            s.sessions,
            SessionLimits {
                expire_after: Duration::from_secs(30 * 86_400),
                max_turns: 200,
                max_per_agent: 50,
            }
        );
        let text = "sessions:\n  expire_after: 5m\n  max_turns: 0\n";
        let (s, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        let d: Vec<String> = d.iter().map(ToString::to_string).collect();
        assert!(
            d[0].starts_with(
                "aurad.yaml:2:17: sessions.expire_after: 5m is shorter than the minimum of 1h"
            ),
            "{d:?}"
        );
        assert!(
            d[1].starts_with(
                "aurad.yaml:3:14: sessions.max_turns is 0: expected a whole number of at least 1"
            ),
            "{d:?}"
        );
        assert_eq!(s.sessions, SessionLimits::default());
    }
}
