//! Turns the engine's event stream into what the store keeps: every event
//! with the secrets the snapshot knows redacted (before it is stored or
//! streamed), text and reasoning deltas merged per model turn (never one row
//! per token), and commits grouped at step boundaries (a model turn, tool
//! calls, a tool result, the end).

use std::sync::Arc;

use crate::redact::Redactor;
use crate::types::RunEvent;

/// Accumulates events between commits.
#[derive(Debug, Default)]
pub struct Recorder {
    redactor: Arc<Redactor>,
    pending: Vec<RunEvent>,
    /// A step boundary is among the pending events.
    boundary: bool,
    /// Events taken so far: the store numbers events from 1 in order, so
    /// pending event `i` will be stored as `taken + i + 1`.
    taken: i64,
}

impl Recorder {
    /// A recorder redacting `redactor`'s secrets.
    pub fn new(redactor: Arc<Redactor>) -> Recorder {
        Recorder {
            redactor,
            ..Recorder::default()
        }
    }

    /// `event` with its secrets redacted, as it may be streamed and pushed.
    pub fn redact(&self, event: RunEvent) -> RunEvent {
        self.redactor.redact_event(event)
    }

    /// Adds an event, merging it into the previous one when both are deltas
    /// of the same kind. Returns the sequence number the (merged) event will
    /// be stored under.
    pub fn push(&mut self, event: RunEvent) -> i64 {
        self.boundary |= is_boundary(&event);
        match (self.pending.last_mut(), event) {
            (Some(RunEvent::TextDelta { text: acc }), RunEvent::TextDelta { text }) => {
                acc.push_str(&text)
            }
            (Some(RunEvent::ReasoningDelta { text: acc }), RunEvent::ReasoningDelta { text }) => {
                acc.push_str(&text)
            }
            (_, event) => self.pending.push(event),
        }
        self.taken + self.pending.len() as i64
    }

    /// True when a completed step is pending, so the batch should be
    /// committed (unless more events are already waiting).
    pub fn at_boundary(&self) -> bool {
        self.boundary
    }

    /// The pending events, to be stored. Merged deltas are redacted once
    /// more, whole: a secret split across two deltas is not stored either.
    pub fn take(&mut self) -> Vec<RunEvent> {
        self.boundary = false;
        self.taken += self.pending.len() as i64;
        let mut events = std::mem::take(&mut self.pending);
        for event in &mut events {
            if let RunEvent::TextDelta { text } | RunEvent::ReasoningDelta { text } = event {
                self.redactor.redact_in_place(text);
            }
        }
        events
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// Events that close a step: a model turn, a tool call or result, a retry,
/// the start and the end.
fn is_boundary(event: &RunEvent) -> bool {
    matches!(
        event,
        RunEvent::Started { .. }
            | RunEvent::MemoryRecalled { .. }
            | RunEvent::SkillsActivated { .. }
            | RunEvent::Usage { .. }
            | RunEvent::ToolCall { .. }
            | RunEvent::ToolResult { .. }
            | RunEvent::ModelRetry { .. }
            | RunEvent::Finished { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_deltas_per_turn() {
        let mut r = Recorder::default();
        for t in ["a", "b", "c"] {
            assert_eq!(r.push(RunEvent::TextDelta { text: t.into() }), 1);
        }
        assert!(!r.at_boundary());
        let seq = r.push(RunEvent::Usage {
            iteration: 1,
            usage: Default::default(),
            cost_usd: None,
        });
        assert_eq!(seq, 2);
        assert!(r.at_boundary());
        r.push(RunEvent::TextDelta { text: "d".into() });
        // A later non-boundary event does not hide the pending boundary.
        assert!(r.at_boundary());
        assert_eq!(
            r.take(),
            vec![
                RunEvent::TextDelta { text: "abc".into() },
                RunEvent::Usage {
                    iteration: 1,
                    usage: Default::default(),
                    cost_usd: None,
                },
                RunEvent::TextDelta { text: "d".into() },
            ]
        );
        assert!(r.is_empty());
        assert_eq!(r.push(RunEvent::TextDelta { text: "e".into() }), 4);
    }

    #[test]
    fn secrets_are_redacted_even_split_across_deltas() {
        let redactor = Redactor::new([("K".to_string(), "split-secret-42".to_string())]);
        let mut r = Recorder::new(Arc::new(redactor));
        let whole = r.redact(RunEvent::TextDelta {
            text: "a split-secret-42".into(),
        });
        assert_eq!(
            whole,
            RunEvent::TextDelta {
                text: "a [redacted:K]".into()
            }
        );
        r.push(whole);
        for part in [" split-sec", "ret-42 b"] {
            let event = r.redact(RunEvent::TextDelta { text: part.into() });
            r.push(event);
        }
        assert_eq!(
            r.take(),
            vec![RunEvent::TextDelta {
                text: "a [redacted:K] [redacted:K] b".into()
            }]
        );
    }
}
