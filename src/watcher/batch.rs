//! One batch of file events being gathered, shared by the root's watch
//! ([`super::root`]) and the trees' ([`super::tree`]): it is
//! due once no event came for the debounce interval, or, under changes that
//! never pause, once its first event is [`MAX_HOLD`] intervals old. So the
//! events of one save (an editor's temporary file, its rename into place)
//! go out together, and an unrelated event a moment earlier cannot open a
//! batch that a save then joins half-done.
//!
//! May depend on `notify`'s event types and `tokio` (sync only); nothing
//! of ours.

use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

/// What a watch sends: the events of one batch, or the errors it met
/// (their own batch).
pub type Batch = Result<Vec<notify::Event>, Vec<notify::Error>>;

/// How many debounce intervals a batch is held at most while changes keep
/// coming.
pub const MAX_HOLD: u32 = 10;

/// The events and errors gathered so far, and when the first and the last
/// came.
pub struct Gathering {
    debounce: Duration,
    events: Vec<notify::Event>,
    errors: Vec<notify::Error>,
    window: Option<(Instant, Instant)>,
}

impl Gathering {
    pub fn new(debounce: Duration) -> Gathering {
        Gathering {
            debounce,
            events: Vec::new(),
            errors: Vec::new(),
            window: None,
        }
    }

    /// Adds an event that happened at `at`.
    pub fn event(&mut self, event: notify::Event, at: Instant) {
        self.events.push(event);
        self.seen(at);
    }

    /// Adds a watch error that came at `at`.
    pub fn error(&mut self, error: notify::Error, at: Instant) {
        self.errors.push(error);
        self.seen(at);
    }

    fn seen(&mut self, at: Instant) {
        let first = self.window.map_or(at, |(first, _)| first);
        self.window = Some((first, at));
    }

    /// How long until the batch is due; `None` while it is empty.
    pub fn wait(&self) -> Option<Duration> {
        self.window.map(|(first, last)| {
            let due = (last + self.debounce).min(first + self.debounce * MAX_HOLD);
            due.saturating_duration_since(Instant::now())
        })
    }

    /// Sends what was gathered (errors first, as their own batch) and starts
    /// afresh; false once the receiver is gone.
    pub fn send(&mut self, tx: &UnboundedSender<Batch>) -> bool {
        self.window = None;
        if !self.errors.is_empty() && tx.send(Err(std::mem::take(&mut self.errors))).is_err() {
            return false;
        }
        self.events.is_empty() || tx.send(Ok(std::mem::take(&mut self.events))).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::{Event, EventKind};

    #[test]
    fn due_once_quiet_and_at_most_max_hold_after_the_first() {
        let debounce = Duration::from_secs(10);
        let mut batch = Gathering::new(debounce);
        assert_eq!(batch.wait(), None);
        let start = Instant::now();
        batch.event(Event::new(EventKind::Any), start);
        assert!(batch.wait().unwrap() > debounce - Duration::from_secs(1));
        // A later event moves the deadline, but not past MAX_HOLD intervals
        // after the first.
        batch.event(
            Event::new(EventKind::Any),
            start + debounce * (MAX_HOLD - 1),
        );
        let wait = batch.wait().unwrap();
        assert!(
            wait > debounce * (MAX_HOLD - 1) && wait <= debounce * MAX_HOLD,
            "{wait:?}"
        );
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        batch.error(notify::Error::generic("lost"), start);
        assert!(batch.send(&tx));
        assert!(rx.try_recv().unwrap().is_err(), "errors go first");
        assert_eq!(rx.try_recv().unwrap().unwrap().len(), 2);
        assert_eq!(batch.wait(), None, "sent: empty again");
        drop(rx);
        batch.event(Event::new(EventKind::Any), start);
        assert!(!batch.send(&tx), "the receiver is gone");
    }
}
