//! Which schedules the daemon watches, and since when (`schedule_watches`,
//! keyed by agent and [`ScheduleId`]). A schedule that never fired has no
//! run to say when the daemon started waiting for it; this table does, so a
//! first fire missed while the daemon was down is found after a restart
//! like any later one. An edited schedule has a new id and so a new watch:
//! it starts from the moment it was loaded. Writer thread.
//!
//! Databases from before schedule ids keep their watches by list place in
//! `schedule_watches_by_index` (see the migration): the first watch of a
//! schedule written the same way takes one over, once. A PostgreSQL
//! database starts with schedule ids, so it has none; there, nodes
//! watching a new schedule at once are all told the instant stored first.

use crate::types::ScheduleId;
use chrono::{DateTime, Utc};

use super::{Store, StoreError};

impl Store {
    /// Records that schedule `schedule` of `agent` is watched, and returns
    /// since when: the stored instant when it was watched already, else
    /// `now` (a new or edited schedule starts when it is loaded).
    ///
    /// `cron` is the schedule's expression and zone as
    /// `CronSchedule`'s `Display` writes them (`0 9 * * * (UTC)`): a watch
    /// an older aurad stored by list place for the same agent and `cron` is
    /// taken over instead, resuming from the later of its `since` and the
    /// newest fire stored at that place, and then forgotten.
    pub async fn watch_schedule(
        &self,
        agent: &str,
        schedule: &ScheduleId,
        cron: &str,
        now: DateTime<Utc>,
    ) -> Result<DateTime<Utc>, StoreError> {
        route!(self.watch_schedule(agent, schedule, cron, now))
    }

    /// Forgets the watches of schedules that are gone (an agent removed, a
    /// schedule edited or taken out of its list), and every watch by list
    /// place not taken over yet: if one comes back, it starts anew. `keep`
    /// holds every (agent, schedule) still scheduled. Call it after
    /// [`Store::watch_schedule`] for each of them.
    pub async fn unwatch_schedules_except(
        &self,
        keep: Vec<(String, ScheduleId)>,
    ) -> Result<usize, StoreError> {
        route!(self.unwatch_schedules_except(keep))
    }
}
