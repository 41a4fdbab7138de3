//! What to do with fires that passed while the daemon was down
//! (`on_missed` and `catch_up` of an agent file), and the failure backoff.
//!
//! Pure: the caller passes `last_checked` and `now`; nothing here reads a
//! clock or the store. Depends only on [`CronSchedule`] and [`OnMissed`] (in `types`).

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};

use crate::types::{CronSchedule, OnMissed};

/// `on_missed: all` runs at most this many fires.
pub const MAX_CATCH_UP_RUNS: usize = 100;

/// [`MissedPlan::missed`] lists at most this many fires, the newest ones. If
/// it is full, older missed fires may exist that are not listed.
pub const MAX_MISSED_LISTED: usize = 1000;

/// The outcome of [`plan_missed`]: fires to run now and fires to record as
/// `missed`, each in chronological order. Every fire in the window is in at
/// most one of the two, and every fire of `run` is newer than every fire of
/// `missed`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MissedPlan {
    pub run: Vec<DateTime<Utc>>,
    pub missed: Vec<DateTime<Utc>>,
}

/// Plans the fires in `(last_checked, now]` that were not run.
///
/// A fire `f` is *within catch_up* when `now - f <= catch_up`: the boundary
/// is inclusive, so a fire exactly `catch_up` old still runs (as Kubernetes'
/// `startingDeadlineSeconds`). A fire exactly at `last_checked` is not in the
/// window (it was handled before); one exactly at `now` is.
///
/// - `Latest`: runs the newest fire within catch_up; all others are missed.
/// - `All`: runs the newest [`MAX_CATCH_UP_RUNS`] fires within catch_up, in
///   order; older ones (beyond catch_up or beyond the cap) are missed.
/// - `Skip`: runs nothing; all are missed.
///
/// `missed` holds at most [`MAX_MISSED_LISTED`] fires, the newest. A zero
/// or negative `catch_up` leaves only a fire exactly at `now` runnable.
pub fn plan_missed(
    schedule: &CronSchedule,
    last_checked: DateTime<Utc>,
    now: DateTime<Utc>,
    catch_up: Duration,
    policy: OnMissed,
) -> MissedPlan {
    if now <= last_checked {
        return MissedPlan::default();
    }
    // Fires in (recent_from, now] are within catch_up; the -1 ns turns the
    // exclusive lower bound into the inclusive `now - f <= catch_up`.
    let recent_from = now
        .checked_sub_signed(catch_up.max(Duration::zero()))
        .and_then(|t| t.checked_sub_signed(Duration::nanoseconds(1)))
        .map_or(last_checked, |t| t.max(last_checked));
    let run = match policy {
        OnMissed::Latest => last_fires(schedule, recent_from, now, 1),
        OnMissed::All => last_fires(schedule, recent_from, now, MAX_CATCH_UP_RUNS),
        OnMissed::Skip => Vec::new(),
    };
    let missed_to = match run.first() {
        Some(first) => *first - Duration::nanoseconds(1),
        None => now,
    };
    let missed = last_fires(schedule, last_checked, missed_to, MAX_MISSED_LISTED);
    MissedPlan { run, missed }
}

/// Failure backoff: after 1, 2, 3, 4, 5+ consecutive failures
/// the schedule waits 30 s, 1 m, 5 m, 15 m, 60 m; after 0 it does not wait.
pub fn failure_backoff(consecutive_failures: u32) -> Option<StdDuration> {
    let seconds = match consecutive_failures {
        0 => return None,
        1 => 30,
        2 => 60,
        3 => 5 * 60,
        4 => 15 * 60,
        _ => 60 * 60,
    };
    Some(StdDuration::from_secs(seconds))
}

/// The newest `cap` fires in `(from, to]`, in chronological order. Works
/// backwards with [`last_fire`] so that a long window with many fires costs
/// O(cap * log(window)) searches, not one per fire.
fn last_fires(
    schedule: &CronSchedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    cap: usize,
) -> Vec<DateTime<Utc>> {
    let mut fires = Vec::new();
    let mut upper = to;
    while fires.len() < cap {
        let Some(fire) = last_fire(schedule, from, upper) else {
            break;
        };
        fires.push(fire);
        upper = fire - Duration::nanoseconds(1);
    }
    fires.reverse();
    fires
}

/// The newest fire in `(from, to]`, found by bisection on `next_after`
/// (which is monotonic), at whole-second resolution since fires fall on
/// whole seconds.
fn last_fire(
    schedule: &CronSchedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    if to <= from {
        return None;
    }
    // Invariant: `best` is a fire in (from, to] and no fire lies in (upper, to].
    let mut best = schedule.next_after(from).filter(|f| *f <= to)?;
    let mut upper = to;
    loop {
        match schedule.next_after(best) {
            Some(next) if next <= upper => {}
            _ => return Some(best),
        }
        // A fire lies in (best, upper]: narrow down.
        let half = Duration::seconds((upper - best).num_seconds() / 2);
        let mid = best + half;
        match schedule.next_after(mid) {
            Some(next) if next <= upper => best = next,
            _ => upper = mid,
        }
    }
}
