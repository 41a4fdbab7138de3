//! The pure core of the scheduler (DESIGN.md 3 "Scheduling"): cron
//! expressions in IANA time zones with aurad's DST rules, the plan for fires
//! missed while the daemon was down, and the failure backoff.
//!
//! Nothing here reads a clock, sleeps or touches the store: callers pass the
//! instants in, which keeps every rule testable with fixed times. Depends on
//! nothing of ours; the daemon loop, fire claims and the store live
//! elsewhere.
//!
//! - [`CronSchedule`]: parse an expression (5 or 6 fields, or a macro) in a
//!   zone; [`CronSchedule::next_after`] and friends give UTC fire instants
//!   under the DST policy documented on [`CronSchedule`].
//! - [`plan_missed`]: `on_missed` (`latest`, `all`, `skip`) within `catch_up`.
//! - [`failure_backoff`]: 30 s, 1 m, 5 m, 15 m, 60 m.

mod cron;
mod missed;

pub use cron::CronSchedule;
pub use missed::{
    MAX_CATCH_UP_RUNS, MAX_MISSED_LISTED, MissedPlan, OnMissed, failure_backoff, plan_missed,
};

#[cfg(test)]
mod cron_tests;
#[cfg(test)]
mod missed_tests;
