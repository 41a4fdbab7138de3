//! The scheduler's notion of time, injectable so tests can move it: the
//! system clock in production, a manual clock in tests. Nothing else.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use tokio::sync::watch;

/// Reads the time and sleeps until an instant.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
    /// Resolves at `at` or later (or earlier, after at most [`MAX_NAP`]:
    /// callers re-read `now()` after waking, which notices wall-clock jumps
    /// and machine sleep).
    fn sleep_until(&self, at: DateTime<Utc>) -> BoxFuture<'static, ()>;
}

/// The longest single sleep of [`SystemClock`]: a wall-clock change (NTP
/// step, suspend) is noticed within this.
pub const MAX_NAP: Duration = Duration::from_secs(30);

/// [`MAX_NAP`] as a span of calendar time.
pub const MAX_NAP_SPAN: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }

    fn sleep_until(&self, at: DateTime<Utc>) -> BoxFuture<'static, ()> {
        let wait = (at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
        Box::pin(tokio::time::sleep(wait.min(MAX_NAP)))
    }
}

/// A clock that moves only when told (tests).
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
    changed: watch::Sender<DateTime<Utc>>,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> ManualClock {
        ManualClock {
            now: Arc::new(Mutex::new(start)),
            changed: watch::channel(start).0,
        }
    }

    /// Moves the clock to `to` (never backwards) and wakes the sleepers due.
    pub fn set(&self, to: DateTime<Utc>) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        if to > *now {
            *now = to;
            self.changed.send_replace(to);
        }
    }

    /// How many sleeps wait on this clock now: a test waits for the
    /// scheduler to be asleep (it has planned from the current time) before
    /// moving the clock, so the move is one the scheduler sees happen.
    pub fn sleepers(&self) -> usize {
        self.changed.receiver_count()
    }

    #[expect(
        clippy::expect_used,
        reason = "tests move a manual clock by durations of seconds to days, which chrono holds"
    )]
    pub fn advance(&self, by: Duration) {
        let now = self.now();
        self.set(now + chrono::Duration::from_std(by).expect("a test duration"));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sleep_until(&self, at: DateTime<Utc>) -> BoxFuture<'static, ()> {
        let mut rx = self.changed.subscribe();
        Box::pin(async move {
            // An error means the clock is gone: never wake.
            if rx.wait_for(|now| *now >= at).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_when_moved() {
        let t0 = DateTime::parse_from_rfc3339("2026-03-29T00:00:00Z")
            .unwrap()
            .to_utc();
        let clock = ManualClock::new(t0);
        let sleeper = tokio::spawn(clock.sleep_until(t0 + chrono::Duration::seconds(10)));
        clock.advance(Duration::from_secs(5));
        tokio::task::yield_now().await;
        assert!(!sleeper.is_finished());
        clock.advance(Duration::from_secs(5));
        tokio::time::timeout(Duration::from_secs(5), sleeper)
            .await
            .expect("woke")
            .unwrap();
        assert_eq!(clock.now(), t0 + chrono::Duration::seconds(10));
    }
}
