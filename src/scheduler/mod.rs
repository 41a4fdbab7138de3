//! The core of the scheduler: the plan for fires missed while the daemon
//! was down and the failure backoff, over the cron expressions of
//! `types::cron` (IANA time zones, aurad's DST rules; there so `config` can
//! check an expression where it is written without depending on the
//! scheduler), and the [`clock`] the daemon's scheduling runs on, which
//! tests replace with a manual one.
//!
//! The rules read no clock, sleep nowhere and touch no store: callers pass
//! the instants in, which keeps every rule testable with fixed times.
//! Depends on `types` only; the daemon loop, fire claims and the store live
//! elsewhere.
//!
//! - [`CronSchedule`]: parse an expression (5 or 6 fields, or a macro) in a
//!   zone; [`CronSchedule::next_after`] and friends give UTC fire instants
//!   under the DST policy documented on [`CronSchedule`].
//! - [`plan_missed`]: `on_missed` (`latest`, `all`, `skip`) within `catch_up`.
//! - [`failure_backoff`]: 30 s, 1 m, 5 m, 15 m, 60 m.

pub mod clock;
mod missed;

pub use crate::types::{CronSchedule, OnMissed};
pub use missed::{MAX_CATCH_UP_RUNS, MAX_MISSED_LISTED, MissedPlan, failure_backoff, plan_missed};

#[cfg(test)]
mod missed_tests;
