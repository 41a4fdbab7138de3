//! Live events of one running run, for subscribers that join at any time
//! (SSE): what is stored, then what is pending (not yet committed), then
//! what comes next, each event exactly once and in order.
//!
//! Every event carries the sequence number it is (or will be) stored under;
//! text and reasoning deltas of one model turn share one (the store merges
//! them). The hub holds the events since the last commit; a subscriber takes
//! them together with a receiver for later events under one lock, and reads
//! the store only up to the commit point it saw, so nothing is lost or
//! doubled at the seams.

use std::sync::{Mutex, PoisonError};

use tokio::sync::broadcast;

use crate::types::RunEvent;

/// A numbered event.
pub type Numbered = (i64, RunEvent);

/// How many live events a slow subscriber may fall behind before it is cut
/// off (it can reconnect with `Last-Event-ID`). The channel allocates all its
/// slots when the first subscriber comes, so every watched run held 4,096
/// event slots at once while it ran: with 8 runs streamed at a time that was
/// the daemon's memory high-water. A subscriber 1,024 events behind is stuck
/// anyway.
const CAPACITY: usize = 1024;

pub struct Hub {
    inner: Mutex<Inner>,
}

struct Inner {
    /// Events up to this sequence number are in the store.
    committed: i64,
    /// Events not yet committed, in order.
    pending: Vec<Numbered>,
    /// Made by the first subscriber: most runs (scheduled ones) are never
    /// watched live, and a channel of [`CAPACITY`] slots is not free.
    tx: Option<broadcast::Sender<Numbered>>,
    finished: bool,
}

/// What a subscriber starts from.
pub struct Subscription {
    /// Read the store up to (and including) this sequence number.
    pub committed: i64,
    /// Then these.
    pub pending: Vec<Numbered>,
    /// Then these; closed when the run has finished and all were sent.
    pub live: broadcast::Receiver<Numbered>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            inner: Mutex::new(Inner {
                committed: 0,
                pending: Vec::new(),
                tx: None,
                finished: false,
            }),
        }
    }
}

impl Hub {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn publish(&self, seq: i64, event: &RunEvent) {
        let mut inner = self.lock();
        inner.pending.push((seq, event.clone()));
        if let Some(tx) = &inner.tx {
            // No receivers left is fine.
            let _ = tx.send((seq, event.clone()));
        }
    }

    pub fn committed(&self, last_seq: i64) {
        let mut inner = self.lock();
        inner.committed = inner.committed.max(last_seq);
        let committed = inner.committed;
        inner.pending.retain(|(seq, _)| *seq > committed);
    }

    /// The run has ended and its last events are stored: later subscribers
    /// read the store alone, and live receivers end after the last event.
    pub fn finish(&self) {
        let mut inner = self.lock();
        inner.finished = true;
        // Dropping the sender closes the receivers once they have read what
        // was sent.
        inner.tx = None;
    }

    /// `None` once the run has finished (read the store instead).
    pub fn subscribe(&self) -> Option<Subscription> {
        let mut inner = self.lock();
        if inner.finished {
            return None;
        }
        let live = inner
            .tx
            .get_or_insert_with(|| broadcast::channel(CAPACITY).0)
            .subscribe();
        Some(Subscription {
            committed: inner.committed,
            pending: inner.pending.clone(),
            live,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> RunEvent {
        RunEvent::TextDelta { text: t.into() }
    }

    #[tokio::test]
    async fn a_late_subscriber_gets_pending_then_live_then_the_end() {
        let hub = Hub::default();
        hub.publish(1, &text("a"));
        hub.committed(1);
        hub.publish(2, &text("b"));
        let mut sub = hub.subscribe().unwrap();
        assert_eq!(sub.committed, 1);
        assert_eq!(sub.pending, vec![(2, text("b"))]);
        hub.publish(2, &text("c"));
        hub.committed(2);
        hub.finish();
        assert_eq!(sub.live.recv().await.unwrap(), (2, text("c")));
        assert!(sub.live.recv().await.is_err(), "closed after the end");
        assert!(hub.subscribe().is_none());
    }
}
