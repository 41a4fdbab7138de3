//! Turns the engine's event stream into what the store keeps: every event
//! with the secrets the snapshot knows redacted (before it is stored or
//! streamed), text and reasoning deltas merged per model turn (never one row
//! per token), and commits grouped at step boundaries (a model turn, tool
//! calls, a tool result, the end).

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;

use crate::redact::Redactor;
use crate::types::RunEvent;

/// Accumulates events between commits.
#[derive(Debug, Default)]
pub struct Recorder {
    redactor: Arc<Redactor>,
    /// The end of the streamed deltas not yet passed on, because a secret
    /// may begin there (a `TextDelta` or `ReasoningDelta`).
    held: Option<RunEvent>,
    /// Redacted events not yet handed out by [`Recorder::next`].
    ready: VecDeque<RunEvent>,
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

    /// A recorder for a run whose events up to `seq` are stored already
    /// (a run resumed after waiting for approval).
    pub fn after(redactor: Arc<Redactor>, seq: i64) -> Recorder {
        Recorder {
            taken: seq,
            ..Recorder::new(redactor)
        }
    }

    /// The next event of `events`, redacted (see [`Recorder::redact`]);
    /// `None` once the channel is closed and nothing is left.
    pub async fn next(&mut self, events: &mut UnboundedReceiver<RunEvent>) -> Option<RunEvent> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(event);
            }
            match events.recv().await {
                Some(raw) => {
                    let redacted = self.redact(raw);
                    self.ready.extend(redacted);
                }
                // The engine ends with `finished`, which lets anything held
                // go first; this is only for a stream cut short.
                None => return self.held.take(),
            }
        }
    }

    /// `event` with its secrets redacted, as the events to stream and push
    /// in its place, in order. A secret the model streams in pieces is
    /// caught too: the end of a delta that could begin a secret is held
    /// back until the next event shows whether it does (then it is
    /// redacted whole), so the pieces passed on never hold one.
    pub fn redact(&mut self, event: RunEvent) -> Vec<RunEvent> {
        let mut out = Vec::new();
        let (text, make): (String, fn(String) -> RunEvent) = match event {
            RunEvent::TextDelta { text } => (text, |text| RunEvent::TextDelta { text }),
            RunEvent::ReasoningDelta { text } => (text, |text| RunEvent::ReasoningDelta { text }),
            other => {
                out.extend(self.held.take());
                out.push(self.redactor.redact_event(other));
                return out;
            }
        };
        let kind = std::mem::discriminant(&make(String::new()));
        let mut stream = match self.held.take() {
            Some(held) if std::mem::discriminant(&held) == kind => delta_text(held),
            // A held delta of the other kind can no longer grow into a
            // secret: it goes first.
            Some(other_kind) => {
                out.push(other_kind);
                String::new()
            }
            None => String::new(),
        };
        stream.push_str(&text);
        self.redactor.redact_in_place(&mut stream);
        let keep = self.redactor.partial_secret_suffix(&stream);
        let held = stream.split_off(stream.len() - keep);
        if !stream.is_empty() {
            out.push(make(stream));
        }
        if !held.is_empty() {
            self.held = Some(make(held));
        }
        out
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

/// The text of a delta event.
fn delta_text(event: RunEvent) -> String {
    match event {
        RunEvent::TextDelta { text } | RunEvent::ReasoningDelta { text } => text,
        _ => String::new(),
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
            | RunEvent::ModelFallback { .. }
            | RunEvent::ApprovalRequested { .. }
            | RunEvent::ApprovalDecided { .. }
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
            model: None,
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
                    model: None,
                },
                RunEvent::TextDelta { text: "d".into() },
            ]
        );
        assert!(r.is_empty());
        assert_eq!(r.push(RunEvent::TextDelta { text: "e".into() }), 4);
    }

    #[tokio::test]
    async fn next_hands_out_redacted_events_in_order() {
        let redactor = Redactor::new([("K".to_string(), "split-secret-42".to_string())]);
        let mut r = Recorder::new(Arc::new(redactor));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for piece in ["x split-", "secret-42 y split"] {
            tx.send(delta(piece)).unwrap();
        }
        tx.send(RunEvent::ModelRetry {
            attempt: 1,
            delay_ms: 5,
            error: "401: bad key split-secret-42".into(),
            reason: crate::types::RetryReason::Status,
            discarded_output: false,
        })
        .unwrap();
        tx.send(delta(" sp")).unwrap();
        drop(tx);
        let mut out = Vec::new();
        while let Some(event) = r.next(&mut rx).await {
            out.push(event);
        }
        assert_eq!(
            out,
            [
                delta("x "),
                delta("[redacted:K] y "),
                delta("split"),
                RunEvent::ModelRetry {
                    attempt: 1,
                    delay_ms: 5,
                    error: "401: bad key [redacted:K]".into(),
                    reason: crate::types::RetryReason::Status,
                    discarded_output: false,
                },
                delta(" "),
                delta("sp"),
            ]
        );
    }

    fn delta(text: &str) -> RunEvent {
        RunEvent::TextDelta { text: text.into() }
    }

    #[test]
    fn secrets_streamed_in_pieces_are_never_passed_on() {
        let redactor = Redactor::new([("K".to_string(), "split-secret-42".to_string())]);
        let mut r = Recorder::new(Arc::new(redactor));
        let mut streamed = Vec::new();
        let pieces = [
            "a split-secret-42",
            " spl",
            "it-sec",
            "ret-42 b",
            " split-s",
        ];
        for piece in pieces {
            streamed.extend(r.redact(delta(piece)));
        }
        // The start of a secret waits for the next event.
        assert_eq!(
            streamed,
            [
                delta("a [redacted:K]"),
                delta(" "),
                delta("[redacted:K] b"),
                delta(" ")
            ]
        );
        let usage = RunEvent::Usage {
            iteration: 1,
            usage: Default::default(),
            cost_usd: None,
            model: None,
        };
        streamed.extend(r.redact(usage.clone()));
        assert_eq!(streamed[4..], [delta("split-s"), usage.clone()]);
        // A reasoning delta ends a held text delta, and is held itself.
        let mut other = Recorder::new(r.redactor.clone());
        assert_eq!(other.redact(delta("x split")), [delta("x ")]);
        let reasoning = other.redact(RunEvent::ReasoningDelta {
            text: "y split".into(),
        });
        assert_eq!(
            reasoning,
            [
                delta("split"),
                RunEvent::ReasoningDelta { text: "y ".into() }
            ]
        );
        for event in streamed {
            r.push(event);
        }
        let stored = r.take();
        assert_eq!(
            stored,
            [delta("a [redacted:K] [redacted:K] b split-s"), usage]
        );
    }
}
