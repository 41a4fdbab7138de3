//! [`ScheduleId`]: what a schedule is, as a short stable hash. Fires, fire state and watches are keyed by it, never by
//! the schedule's place in its agent's list, so reordering or deleting
//! schedules changes nothing for the others, and an edited schedule is a new
//! one. Plain data like the rest of `types`: config computes it, the
//! scheduler and the store key by it; it depends on nothing of ours.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// Hex digits kept of the SHA-256 (64 bits): ids only need to differ among
/// one agent's schedules, and the agent's name is hashed in too.
const HEX_LEN: usize = 16;

/// The identity of one schedule of one agent: the first 16 hex digits of
/// the SHA-256 of (agent, expression with its whitespace collapsed, IANA
/// zone, `input` template). Stable across releases: it is stored.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScheduleId(String);

impl ScheduleId {
    /// The identity of the schedule `expression` in `timezone` (an IANA
    /// name; callers pass the resolved zone, so an omitted zone and `UTC`
    /// are the same schedule) with `input`, of `agent`. Runs of whitespace
    /// in the expression count as one space and leading or trailing
    /// whitespace is ignored; everything else counts as written.
    pub fn of(agent: &str, expression: &str, timezone: &str, input: Option<&str>) -> ScheduleId {
        let expression = expression.split_whitespace().collect::<Vec<_>>().join(" ");
        let mut hash = Sha256::new();
        // Each part is length-prefixed, so no two tuples feed the same bytes.
        for part in [agent, &expression, timezone] {
            hash.update((part.len() as u64).to_le_bytes());
            hash.update(part.as_bytes());
        }
        match input {
            None => hash.update([0u8]),
            Some(input) => {
                hash.update([1u8]);
                hash.update((input.len() as u64).to_le_bytes());
                hash.update(input.as_bytes());
            }
        }
        let mut hex = hex::encode(hash.finalize());
        hex.truncate(HEX_LEN);
        ScheduleId(hex)
    }

    /// An id as stored or shown (16 lowercase hex digits); an error saying
    /// what is wrong otherwise.
    pub fn parse(text: &str) -> Result<ScheduleId, String> {
        if text.len() == HEX_LEN
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(ScheduleId(text.to_owned()))
        } else {
            Err(format!(
                "`{text}` is not a schedule id: expected {HEX_LEN} lowercase hex digits"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ScheduleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for ScheduleId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ScheduleId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ScheduleId, D::Error> {
        let text = String::deserialize(deserializer)?;
        ScheduleId::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_schedule_is_decides_its_id() {
        let base = ScheduleId::of("a", "0 9 * * *", "UTC", None);
        assert_eq!(base.as_str().len(), HEX_LEN);
        // Stable across releases: this value is stored in databases.
        assert_eq!(base, ScheduleId::of("a", "0 9 * * *", "UTC", None));
        assert_eq!(base.as_str(), "a1e04c004b353de3");
        // Whitespace in the expression does not count.
        assert_eq!(base, ScheduleId::of("a", "  0   9 *\t* * ", "UTC", None));
        // Every other part does.
        for other in [
            ScheduleId::of("b", "0 9 * * *", "UTC", None),
            ScheduleId::of("a", "0 10 * * *", "UTC", None),
            ScheduleId::of("a", "0 9 * * *", "Europe/Paris", None),
            ScheduleId::of("a", "0 9 * * *", "UTC", Some("")),
            ScheduleId::of("a", "0 9 * * *", "UTC", Some("hi")),
        ] {
            assert_ne!(base, other);
        }
        // Parts cannot be shifted into each other.
        assert_ne!(
            ScheduleId::of("ab", "c", "UTC", None),
            ScheduleId::of("a", "bc", "UTC", None)
        );
    }

    #[test]
    fn parse_and_serde_round_trip_and_reject_junk() {
        let id = ScheduleId::of("a", "@daily", "UTC", Some("x"));
        assert_eq!(ScheduleId::parse(id.as_str()), Ok(id.clone()));
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, format!("\"{id}\""));
        assert_eq!(serde_json::from_str::<ScheduleId>(&json).unwrap(), id);
        for junk in [
            "",
            "0",
            "A1E04C004B353DE3",
            "a1e04c004b353deg",
            "a1e04c004b353de30",
        ] {
            let err = ScheduleId::parse(junk).unwrap_err();
            assert!(err.contains("16 lowercase hex digits"), "{err}");
        }
        assert!(serde_json::from_str::<ScheduleId>("\"nope\"").is_err());
    }
}
