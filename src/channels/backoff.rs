//! How long a connector waits before it connects again: exponential from
//! one second to one minute, with jitter so many channels dropped at once
//! do not all come back in the same instant, and reset once a connection
//! has held for a minute.

use std::time::{Duration, Instant};

use rand::Rng;

const FIRST: Duration = Duration::from_secs(1);
const MOST: Duration = Duration::from_secs(60);
/// A connection that held this long was a good one: start over.
const HELD: Duration = Duration::from_secs(60);

/// The waits between a connector's connection attempts.
#[derive(Debug)]
pub struct Backoff {
    failures: u32,
    connected_at: Option<Instant>,
    first: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::starting_at(FIRST)
    }
}

impl Backoff {
    /// Waits that start at `first` (tests use milliseconds).
    pub fn starting_at(first: Duration) -> Self {
        Backoff {
            failures: 0,
            connected_at: None,
            first,
        }
    }

    /// A connection is up.
    pub fn connected(&mut self) {
        self.connected_at = Some(Instant::now());
    }

    /// The connection dropped or could not be made: how long to wait
    /// before the next attempt.
    pub fn next_wait(&mut self) -> Duration {
        if self
            .connected_at
            .take()
            .is_some_and(|at| at.elapsed() >= HELD)
        {
            self.failures = 0;
        }
        let exp = self.first.saturating_mul(1 << self.failures.min(10));
        self.failures = self.failures.saturating_add(1);
        let wait = exp.min(MOST);
        // 75% to 100% of the wait.
        let jitter = rand::rng().random_range(0.75..=1.0);
        wait.mul_f64(jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_to_a_minute() {
        let mut b = Backoff::default();
        let waits: Vec<Duration> = (0..10).map(|_| b.next_wait()).collect();
        assert!(waits[0] <= Duration::from_secs(1));
        assert!(waits[3] >= Duration::from_secs(6));
        assert!(waits[9] <= MOST && waits[9] >= MOST.mul_f64(0.75));
    }
}
