//! The scheduler loop: sleeps until the next fire of any agent's schedule,
//! then hands each due fire to the supervisor. Fires that passed while the
//! daemon was down or the machine slept go through `on_missed` within
//! `catch_up`; fires during a failure backoff are recorded `skipped`.
//!
//! Schedules are keyed by agent and [`ScheduleId`] (what the schedule is:
//! expression, zone, input), never by their place in the list: reordering
//! or deleting schedules changes nothing for the others, and an edited
//! schedule is a new one.
//!
//! Per schedule it keeps `last_checked`: every fire in `(last_checked,
//! now]` is handled exactly once, and the store's unique fire identity
//! makes that hold across restarts too. A reload keeps the state of
//! schedules still present (so they are not rescheduled) and starts new or
//! edited ones from the moment they are loaded: no catch-up for times before
//! they existed. A schedule that is gone leaves no watch behind. After a
//! restart a schedule resumes from the later of its newest stored fire and
//! when the store says it began to be watched (`Store::watch_schedule`), so
//! even a first fire missed while the daemon was down is handled by
//! `on_missed`, and a schedule edited while it was down starts at load.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::supervisor::{SubmitError, Supervisor};
use crate::registry::Snapshot;
use crate::run::RunRequest;
use crate::scheduler::clock::{Clock, MAX_NAP_SPAN};
use crate::scheduler::{CronSchedule, MAX_MISSED_LISTED, OnMissed, plan_missed};
use crate::store::{Fire, NewRun, Store};
use crate::telemetry::metrics::Metrics;
use crate::types::{RunState, ScheduleId, Trigger};

/// A fire handled within this long of its time is on time; older ones were
/// missed (the daemon was down, the machine slept, the clock jumped).
pub const ON_TIME: Duration = Duration::seconds(30);

/// Schedules are keyed by (agent, what the schedule is).
type Key = (String, ScheduleId);

struct Entry {
    cron: CronSchedule,
    last_checked: DateTime<Utc>,
}

pub struct Scheduler {
    store: Store,
    supervisor: Arc<Supervisor>,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
    entries: BTreeMap<Key, Entry>,
    /// Whether the store's watches match `entries` (false until the first
    /// sync): they are written only when the set of schedules changes.
    watches_synced: bool,
}

impl Scheduler {
    pub fn new(
        store: Store,
        supervisor: Arc<Supervisor>,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> Scheduler {
        Scheduler {
            store,
            supervisor,
            clock,
            metrics,
            entries: BTreeMap::new(),
            watches_synced: false,
        }
    }

    /// Runs until `stop`: follows `snapshots` (reloads) and fires.
    pub async fn run(
        mut self,
        mut snapshots: watch::Receiver<Arc<Snapshot>>,
        stop: CancellationToken,
    ) {
        loop {
            let snapshot = snapshots.borrow_and_update().clone();
            self.sync(&snapshot).await;
            self.fire_due(&snapshot).await;
            let now = self.clock.now();
            let wake = self
                .entries
                .values()
                .filter_map(|e| e.cron.next_after(e.last_checked))
                .min()
                .unwrap_or(now + MAX_NAP_SPAN);
            tokio::select! {
                _ = self.clock.sleep_until(wake) => {}
                changed = snapshots.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Brings the table in line with `snapshot`: schedules still present
    /// keep their state; the others start from the later of their newest
    /// stored fire and when the store says they began to be watched (after
    /// a restart: so a first fire missed while the daemon was down is
    /// found), which for a new or edited schedule is now. Watches of
    /// schedules that are gone are forgotten.
    async fn sync(&mut self, snapshot: &Snapshot) {
        let mut wanted: BTreeMap<Key, CronSchedule> = BTreeMap::new();
        for agent in snapshot.project.agents.values() {
            for s in &agent.triggers.schedules {
                wanted.insert((agent.name.clone(), s.id.clone()), s.cron.clone());
            }
        }
        if self.watches_synced && self.entries.keys().eq(wanted.keys()) {
            return;
        }
        self.entries.retain(|key, _| wanted.contains_key(key));
        let now = self.clock.now();
        for (key, cron) in &wanted {
            if self.entries.contains_key(key) {
                continue;
            }
            let (agent, id) = key;
            // Since when this schedule has been watched: for one that never
            // fired, where missed fires start; for a new one, now.
            let since = match self
                .store
                .watch_schedule(agent, id, &cron.to_string(), now)
                .await
            {
                Ok(since) => since,
                Err(e) => {
                    tracing::error!(%agent, schedule = %id, "cannot record the schedule as watched: {e}");
                    now
                }
            };
            let last = match self.store.last_fire(agent, id).await {
                Ok(last) => last,
                Err(e) => {
                    tracing::error!(%agent, schedule = %id, "cannot read the last fire: {e}");
                    None
                }
            };
            // Fires before `since` belong to an earlier life of the same
            // schedule (deleted, then written again): not this one's to
            // catch up. A stored instant in the future (the clock went
            // back) must not hold the schedule back for that long.
            let last_checked = last.map_or(since, |last| last.max(since)).min(now);
            tracing::debug!(%agent, schedule = %id, %cron, %last_checked, "schedule loaded");
            self.entries.insert(
                key.clone(),
                Entry {
                    cron: cron.clone(),
                    last_checked,
                },
            );
        }
        match self
            .store
            .unwatch_schedules_except(wanted.into_keys().collect())
            .await
        {
            Ok(_) => self.watches_synced = true,
            Err(e) => tracing::error!("cannot forget the schedules that are gone: {e}"),
        }
    }

    /// Handles every fire in `(last_checked, now]` of every schedule.
    async fn fire_due(&mut self, snapshot: &Arc<Snapshot>) {
        let now = self.clock.now();
        let keys: Vec<Key> = self.entries.keys().cloned().collect();
        for key in keys {
            let Some(agent) = snapshot.project.agents.get(&key.0) else {
                continue;
            };
            let entry = &self.entries[&key];
            if entry
                .cron
                .next_after(entry.last_checked)
                .is_none_or(|f| f > now)
            {
                continue;
            }
            let cron = entry.cron.clone();
            let from = entry.last_checked;
            let triggers = &agent.triggers;
            let on_time_from = (now - ON_TIME).max(from);
            let mut plan = plan_missed(
                &cron,
                from,
                on_time_from,
                Duration::from_std(triggers.catch_up_for(triggers.schedule(&key.1), now))
                    .unwrap_or(Duration::hours(1)),
                triggers.on_missed,
            );
            let on_time = cron.fires_between(on_time_from, now, 1000);
            if !on_time.is_empty() && triggers.on_missed == OnMissed::Latest {
                // `latest` runs once: the on-time fire is that once.
                plan.missed.append(&mut plan.run);
                plan.missed.sort();
            }
            if plan.missed.len() == MAX_MISSED_LISTED {
                tracing::warn!(agent = %key.0, schedule = %key.1, "more than {MAX_MISSED_LISTED} fires were missed; only the newest are recorded");
            }
            for at in &plan.missed {
                self.record(&key, *at, agent, RunState::Missed, format!(
                    "missed: the daemon was not running (or the machine slept) at {at}; on_missed: {}",
                    on_missed_word(triggers.on_missed)
                )).await;
            }
            // `on_missed: all` runs every catch-up fire: they may overlap
            // each other (still under max_concurrent_runs, queued beyond).
            let catch_up_overlap = if plan.run.len() > 1 {
                crate::config::OnOverlap::Allow
            } else {
                triggers.on_overlap
            };
            for at in &plan.run {
                self.fire(snapshot, &key, *at, catch_up_overlap).await;
            }
            for at in &on_time {
                self.fire(snapshot, &key, *at, triggers.on_overlap).await;
            }
            if let Some(entry) = self.entries.get_mut(&key) {
                entry.last_checked = now;
            }
        }
    }

    async fn fire(
        &self,
        snapshot: &Arc<Snapshot>,
        key: &Key,
        at: DateTime<Utc>,
        overlap: crate::config::OnOverlap,
    ) {
        self.metrics.scheduled_fire(&key.0);
        let agent = &snapshot.project.agents[&key.0];
        let health = self.supervisor.health(&key.0);
        if let Some(until) = health.backoff_until().filter(|u| *u > at) {
            let reason = format!(
                "skipped: backing off after {} consecutive failures until {until}; a successful run ends the backoff",
                health.consecutive_failures
            );
            self.record(key, at, agent, RunState::Skipped, reason).await;
            return;
        }
        let request = RunRequest {
            fire: Some(Fire {
                schedule_id: key.1.clone(),
                scheduled_for: at,
            }),
            schedule_id: Some(key.1.clone()),
            ..RunRequest::new(&key.0, Trigger::Schedule)
        };
        match self
            .supervisor
            .submit(snapshot.clone(), request, Some(overlap))
            .await
        {
            Ok(run) => {
                tracing::info!(agent = %key.0, schedule = %key.1, fire = %at, run = %run.id, state = %run.state, "scheduled fire")
            }
            Err(SubmitError::AlreadyFired) => {
                tracing::debug!(agent = %key.0, schedule = %key.1, fire = %at, "fire already claimed")
            }
            Err(e) => {
                tracing::error!(agent = %key.0, schedule = %key.1, fire = %at, "scheduled fire not started: {e}")
            }
        }
    }

    /// Records a fire that does not run (`missed`, or `skipped` in backoff).
    async fn record(
        &self,
        key: &Key,
        at: DateTime<Utc>,
        agent: &crate::config::Agent,
        state: RunState,
        reason: String,
    ) {
        let run = NewRun {
            parent: None,
            id: crate::store::new_run_id(),
            agent: key.0.clone(),
            trigger: Trigger::Schedule,
            input: String::new(),
            model: agent.model.clone(),
            definition_hash: agent.hash.clone(),
            owner: String::new(),
            fire: Some(Fire {
                schedule_id: key.1.clone(),
                scheduled_for: at,
            }),
            state: RunState::Queued,
            template_context: None,
            session_id: None,
        };
        match self.store.record_unrun(run, state, reason).await {
            Ok(true) => self.metrics.run_recorded(&key.0, state.as_str()),
            Ok(false) => {}
            Err(e) => {
                tracing::error!(agent = %key.0, fire = %at, "cannot record a {state} fire: {e}")
            }
        }
    }
}

fn on_missed_word(policy: OnMissed) -> &'static str {
    match policy {
        OnMissed::Latest => "latest",
        OnMissed::All => "all",
        OnMissed::Skip => "skip",
    }
}
