//! Secrets redacted by value. A [`Redactor`] knows a set of secret values,
//! each under the name it came from (an environment variable, a config
//! field), and replaces every occurrence of one in a text with
//! `[redacted:NAME]`. It is one Aho-Corasick automaton over every secret and
//! the escaped forms JSON and Rust debug strings give it (so a key with a
//! `"` or `\` is found in a JSON log line too), built once per snapshot and
//! shared behind an `Arc`.
//!
//! It is applied where text leaves the daemon's hands: tool results before
//! the model sees them (engine), events and run rows before they are stored
//! or streamed (daemon runner), and log lines (the CLI's log writer reads
//! [`for_logs`], the process-wide union of every redactor built). Which
//! values are secret is decided by `registry::secrets`; this module is only
//! the mechanism. Values shorter than [`MIN_SECRET_LEN`] characters are
//! never treated as secrets, so that a variable set to `1` or `true` does
//! not blank out every such word.
//!
//! Depends on `types` and the aho-corasick crate only.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use aho_corasick::{AhoCorasick, MatchKind};
use serde_json::Value;

use crate::types::RunEvent;

/// The fewest characters a value must have to be redacted.
pub const MIN_SECRET_LEN: usize = 8;

/// Replaces known secret values by `[redacted:NAME]`. `Debug` shows the
/// names only, never a value.
#[derive(Clone, Default)]
pub struct Redactor {
    /// `None` when there is nothing to redact.
    automaton: Option<AhoCorasick>,
    /// The replacement of each pattern of the automaton, by index.
    replacements: Vec<String>,
    /// The patterns (every form of every secret).
    patterns: Vec<String>,
    /// The bytes a pattern starts with: bit `b % 64` of word `b / 64`.
    starts: [u64; 4],
    /// The longest pattern, in bytes.
    longest: usize,
    /// Every secret value and the name it is redacted under (the first name
    /// it was given).
    secrets: BTreeMap<String, String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("names", &self.names())
            .finish()
    }
}

impl Redactor {
    /// A redactor of `secrets`, given as (name, value). A value shorter than
    /// [`MIN_SECRET_LEN`] characters (surrounding spaces not counted) is
    /// skipped; a value given twice keeps its first name.
    pub fn new(secrets: impl IntoIterator<Item = (String, String)>) -> Redactor {
        let mut known: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in secrets {
            let trimmed = value.trim();
            if trimmed.chars().count() < MIN_SECRET_LEN {
                continue;
            }
            // A value with a stray newline (`$(cat key)`) is printed
            // without it as often as with it.
            if trimmed.len() != value.len() {
                known
                    .entry(trimmed.to_string())
                    .or_insert_with(|| name.clone());
            }
            known.entry(value).or_insert(name);
        }
        Redactor::from_known(known)
    }

    fn from_known(secrets: BTreeMap<String, String>) -> Redactor {
        // Each form of each value once; a form shared by two values (never
        // in practice) keeps the first value's name.
        let mut forms: BTreeMap<String, &str> = BTreeMap::new();
        for (value, name) in &secrets {
            for form in escaped_forms(value) {
                forms.entry(form).or_insert(name);
            }
        }
        let replacements: Vec<String> = forms
            .values()
            .map(|name| format!("[redacted:{name}]"))
            .collect();
        let patterns: Vec<String> = forms.keys().cloned().collect();
        let mut starts = [0u64; 4];
        for pattern in &patterns {
            let first = pattern.as_bytes()[0];
            starts[usize::from(first / 64)] |= 1 << (first % 64);
        }
        let longest = patterns.iter().map(String::len).max().unwrap_or(0);
        let automaton = if forms.is_empty() {
            None
        } else {
            // Leftmost-longest: of two secrets where one contains the
            // other, the longer is replaced whole. Building fails only past
            // the automaton's size limit (2^31 states), far beyond any
            // environment's secrets.
            AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(forms.keys())
                .ok()
        };
        Redactor {
            automaton,
            replacements,
            patterns,
            starts,
            longest,
            secrets,
        }
    }

    /// A redactor of this one's secrets and `other`'s (a value known to both
    /// keeps this one's name).
    pub fn merged(&self, other: &Redactor) -> Redactor {
        let mut secrets = self.secrets.clone();
        for (value, name) in &other.secrets {
            secrets.entry(value.clone()).or_insert_with(|| name.clone());
        }
        Redactor::from_known(secrets)
    }

    /// Knows every secret `other` knows.
    fn covers(&self, other: &Redactor) -> bool {
        other
            .secrets
            .keys()
            .all(|value| self.secrets.contains_key(value))
    }

    /// No secret is known.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// The names secrets are redacted under, sorted, each once.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.secrets.values().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        names
    }

    /// `text` with every secret replaced; borrowed when none is in it.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        match &self.automaton {
            Some(automaton) if automaton.is_match(text) => {
                Cow::Owned(automaton.replace_all(text, &self.replacements))
            }
            _ => Cow::Borrowed(text),
        }
    }

    /// The length in bytes of the longest end of `text` that is the
    /// beginning (not the whole) of a secret: text streamed piece by piece
    /// keeps that much back until the next piece shows whether a secret
    /// follows. 0 when no secret can start there.
    pub fn partial_secret_suffix(&self, text: &str) -> usize {
        let most = self.longest.saturating_sub(1).min(text.len());
        let bytes = text.as_bytes();
        (1..=most)
            .rev()
            .filter(|&k| {
                let byte = bytes[text.len() - k];
                self.starts[usize::from(byte / 64)] & (1 << (byte % 64)) != 0
            })
            .filter(|&k| text.is_char_boundary(text.len() - k))
            .find(|&k| {
                let tail = &text[text.len() - k..];
                self.patterns
                    .iter()
                    .any(|p| p.len() > k && p.starts_with(tail))
            })
            .unwrap_or(0)
    }

    /// Redacts `text` in place; true if it changed.
    pub fn redact_in_place(&self, text: &mut String) -> bool {
        match self.redact(text) {
            Cow::Owned(redacted) => {
                *text = redacted;
                true
            }
            Cow::Borrowed(_) => false,
        }
    }

    /// Redacts the texts of a conversation message (its content and its
    /// tool calls' arguments) in place.
    pub fn redact_message(&self, message: &mut crate::types::Message) {
        use crate::types::Message;
        match message {
            Message::System { content }
            | Message::User { content }
            | Message::Tool { content, .. } => {
                self.redact_in_place(content);
            }
            Message::Assistant {
                content,
                tool_calls,
                provider_items,
            } => {
                self.redact_in_place(content);
                for call in tool_calls {
                    self.redact_in_place(&mut call.arguments);
                }
                // Reasoning summaries are text like the rest; an encrypted
                // blob holds no secret's plain value, so it comes out as is.
                if let Some(items) = provider_items {
                    self.redact_json(items);
                }
            }
        }
    }

    /// Redacts every string of `value` (object keys too); true if any
    /// changed.
    pub fn redact_json(&self, value: &mut Value) -> bool {
        if self.automaton.is_none() {
            return false;
        }
        match value {
            Value::String(text) => self.redact_in_place(text),
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, item| self.redact_json(item) | changed),
            Value::Object(map) => {
                let mut changed = false;
                let entries = std::mem::take(map);
                for (mut key, mut item) in entries {
                    changed |= self.redact_in_place(&mut key);
                    changed |= self.redact_json(&mut item);
                    map.insert(key, item);
                }
                changed
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }

    /// `event` with every secret in its text replaced. Every string field
    /// of every kind of event is covered, including kinds added later: the
    /// event is redacted as JSON (except its `type` tag and `state`, which
    /// name the kind and the run state).
    pub fn redact_event(&self, event: RunEvent) -> RunEvent {
        if self.automaton.is_none() {
            return event;
        }
        match event {
            RunEvent::TextDelta { mut text } => {
                self.redact_in_place(&mut text);
                RunEvent::TextDelta { text }
            }
            RunEvent::ReasoningDelta { mut text } => {
                self.redact_in_place(&mut text);
                RunEvent::ReasoningDelta { text }
            }
            other => self.redact_event_as_json(other),
        }
    }

    fn redact_event_as_json(&self, event: RunEvent) -> RunEvent {
        let Ok(Value::Object(mut fields)) = serde_json::to_value(&event) else {
            return event;
        };
        let mut changed = false;
        for (key, field) in fields.iter_mut() {
            if key != "type" && key != "state" {
                changed |= self.redact_json(field);
            }
        }
        if !changed {
            return event;
        }
        // Only string contents changed, none that names a variant, so the
        // event reads back; were it not to, the unredacted event must not
        // go out: its text is replaced by a note.
        serde_json::from_value(Value::Object(fields)).unwrap_or_else(|_| RunEvent::TextDelta {
            text: "[redacted: an event that held a secret]".into(),
        })
    }
}

/// `value` as written, as inside a JSON string, as inside a Rust debug
/// string (`{:?}`), and as a debug string inside a JSON string (a log field
/// recorded with `?` in a JSON log line), each once.
fn escaped_forms(value: &str) -> Vec<String> {
    let json = |text: &str| serde_json::to_string(text).unwrap_or_default();
    let inner = |quoted: &str| {
        quoted
            .strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .unwrap_or(quoted)
            .to_string()
    };
    let debug = inner(&format!("{value:?}"));
    let mut forms = vec![value.to_string()];
    for form in [inner(&json(value)), inner(&json(&debug)), debug] {
        if !forms.contains(&form) {
            forms.push(form);
        }
    }
    forms
}

/// Every secret any redactor was built with in this process, for log lines
/// (logging is process-wide, so is what it redacts).
static FOR_LOGS: LazyLock<RwLock<Arc<Redactor>>> = LazyLock::new(Default::default);

/// Adds `redactor`'s secrets to those redacted from log lines. A secret is
/// never removed: a value once known stays redacted for the process's life.
pub fn add_to_logs(redactor: &Redactor) {
    if FOR_LOGS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .covers(redactor)
    {
        return;
    }
    let mut current = FOR_LOGS.write().unwrap_or_else(PoisonError::into_inner);
    let merged = current.merged(redactor);
    *current = Arc::new(merged);
}

/// What log lines are redacted with now.
pub fn for_logs() -> Arc<Redactor> {
    FOR_LOGS
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{RunState, Usage};

    fn redactor(pairs: &[(&str, &str)]) -> Redactor {
        Redactor::new(pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())))
    }

    #[test]
    fn replaces_every_occurrence_by_its_name() {
        let r = redactor(&[
            ("OPENAI_API_KEY", "sk-live-123456"),
            ("DB", "hunter2hunter2"),
        ]);
        assert_eq!(
            r.redact("key=sk-live-123456, again sk-live-123456; pw hunter2hunter2"),
            "key=[redacted:OPENAI_API_KEY], again [redacted:OPENAI_API_KEY]; pw [redacted:DB]"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        assert_eq!(r.names(), ["DB", "OPENAI_API_KEY"]);
        assert!(!format!("{r:?}").contains("sk-live"), "{r:?}");
    }

    #[test]
    fn short_values_are_not_secrets() {
        let r = redactor(&[("DEBUG", "1"), ("MODE", "  true  "), ("SEVEN", "1234567")]);
        assert!(r.is_empty());
        assert_eq!(r.redact("1 true 1234567"), "1 true 1234567");
        assert!(!redactor(&[("EIGHT", "12345678")]).is_empty());
        let padded = redactor(&[("PADDED", "key-with-newline\n")]);
        assert_eq!(
            padded.redact("a key-with-newline\nb key-with-newline"),
            "a [redacted:PADDED]b [redacted:PADDED]"
        );
    }

    #[test]
    fn the_longer_of_two_overlapping_secrets_wins() {
        let r = redactor(&[("SHORT", "abcdefgh"), ("LONG", "abcdefgh-ijkl")]);
        assert_eq!(
            r.redact("x abcdefgh-ijkl y abcdefgh"),
            "x [redacted:LONG] y [redacted:SHORT]"
        );
    }

    #[test]
    fn the_beginning_of_a_secret_at_the_end_is_found() {
        let r = redactor(&[("K", "abcdefgh")]);
        assert_eq!(r.partial_secret_suffix("xx abcd"), 4);
        assert_eq!(r.partial_secret_suffix("xx abcdefg"), 7);
        assert_eq!(r.partial_secret_suffix("xx abcdefgh"), 0);
        assert_eq!(r.partial_secret_suffix("xx abd"), 0);
        assert_eq!(r.partial_secret_suffix("a"), 1);
        assert_eq!(r.partial_secret_suffix("é"), 0);
        assert_eq!(Redactor::default().partial_secret_suffix("abc"), 0);
    }

    #[test]
    fn escaped_forms_are_found() {
        let secret = "pa\"ss\\wo\nrd";
        let r = redactor(&[("PW", secret)]);
        let json = serde_json::to_string(&serde_json::json!({ "v": secret })).unwrap();
        assert_eq!(r.redact(&json), "{\"v\":\"[redacted:PW]\"}");
        assert_eq!(r.redact(&format!("{secret:?}")), "\"[redacted:PW]\"");
    }

    #[test]
    fn json_values_are_redacted_deeply_keys_included() {
        let r = redactor(&[("TOKEN", "tok-abcdefgh")]);
        let mut v = serde_json::json!({
            "a": ["x tok-abcdefgh", 1, null, { "tok-abcdefgh": "ok" }],
            "b": "clean"
        });
        assert!(r.redact_json(&mut v));
        assert_eq!(
            v,
            serde_json::json!({
                "a": ["x [redacted:TOKEN]", 1, null, { "[redacted:TOKEN]": "ok" }],
                "b": "clean"
            })
        );
        assert!(!r.redact_json(&mut v));
    }

    #[test]
    fn events_of_every_kind_are_redacted() {
        let r = redactor(&[("K", "secret-value-1")]);
        let tool = r.redact_event(RunEvent::ToolResult {
            id: "c1".into(),
            name: "env".into(),
            output: "K=secret-value-1".into(),
            is_error: false,
            duration_ms: 3,
        });
        assert_eq!(
            tool,
            RunEvent::ToolResult {
                id: "c1".into(),
                name: "env".into(),
                output: "K=[redacted:K]".into(),
                is_error: false,
                duration_ms: 3,
            }
        );
        let finished = r.redact_event(RunEvent::Finished {
            state: RunState::Failed,
            reason: Some("tool said secret-value-1".into()),
            output: None,
            usage: Usage::default(),
            cost_usd: Some(0.5),
            result: Some(serde_json::json!({ "k": "secret-value-1" })),
        });
        assert_eq!(
            finished,
            RunEvent::Finished {
                state: RunState::Failed,
                reason: Some("tool said [redacted:K]".into()),
                output: None,
                usage: Usage::default(),
                cost_usd: Some(0.5),
                result: Some(serde_json::json!({ "k": "[redacted:K]" })),
            }
        );
        let delta = r.redact_event(RunEvent::TextDelta {
            text: "secret-value-1".into(),
        });
        assert_eq!(
            delta,
            RunEvent::TextDelta {
                text: "[redacted:K]".into()
            }
        );
    }

    #[test]
    fn merging_keeps_the_first_name_and_adds_the_rest() {
        let a = redactor(&[("A", "value-aaaaaaa")]);
        let b = redactor(&[("B", "value-aaaaaaa"), ("C", "value-ccccccc")]);
        let m = a.merged(&b);
        assert_eq!(
            m.redact("value-aaaaaaa value-ccccccc"),
            "[redacted:A] [redacted:C]"
        );
        assert!(m.covers(&a) && m.covers(&b) && !a.covers(&b));
    }

    #[test]
    fn log_redaction_only_grows() {
        add_to_logs(&redactor(&[("LOG_TEST_ONE", "log-secret-one")]));
        add_to_logs(&redactor(&[("LOG_TEST_TWO", "log-secret-two")]));
        let logs = for_logs();
        assert_eq!(
            logs.redact("log-secret-one log-secret-two"),
            "[redacted:LOG_TEST_ONE] [redacted:LOG_TEST_TWO]"
        );
    }
}
