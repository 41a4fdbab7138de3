//! The scheduler loop: sleeps until the next fire of any agent's schedule,
//! then hands each due fire to the supervisor. Fires that passed while the
//! daemon was down or the machine slept go through `on_missed` within
//! `catch_up`; fires during a failure backoff are recorded `skipped`.
//!
//! Per schedule it keeps `last_checked`: every fire in `(last_checked,
//! now]` is handled exactly once, and the store's unique fire identity
//! makes that hold across restarts too. A reload keeps the state of
//! schedules whose expression and zone did not change (so they are not
//! rescheduled) and starts new ones from now. After a restart a schedule
//! resumes from its newest stored fire or, if it never fired, from when the
//! store says it began to be watched (`Store::watch_schedule`), so even a
//! first fire missed while the daemon was down is handled by `on_missed`.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::clock::{Clock, MAX_NAP};
use super::metrics::Metrics;
use super::runner::RunRequest;
use super::supervisor::{SubmitError, Supervisor};
use crate::registry::Snapshot;
use crate::scheduler::{CronSchedule, MAX_MISSED_LISTED, OnMissed, plan_missed};
use crate::store::{Fire, NewRun, Store};
use crate::types::RunState;

/// A fire handled within this long of its time is on time; older ones were
/// missed (the daemon was down, the machine slept, the clock jumped).
pub const ON_TIME: Duration = Duration::seconds(30);

/// Schedules are keyed by (agent, index in its `schedule` list).
type Key = (String, usize);

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
                .unwrap_or(now + Duration::from_std(MAX_NAP).expect("small"));
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

    /// Brings the table in line with `snapshot`: unchanged schedules keep
    /// their state; new or changed ones start from their newest stored fire
    /// (after a restart), else from when the store says the same schedule
    /// began to be watched (so a first fire missed while the daemon was
    /// down is found), else from now.
    async fn sync(&mut self, snapshot: &Snapshot) {
        let mut wanted: BTreeMap<Key, CronSchedule> = BTreeMap::new();
        for agent in snapshot.project.agents.values() {
            for (i, s) in agent.triggers.schedules.iter().enumerate() {
                wanted.insert((agent.name.clone(), i), s.cron.clone());
            }
        }
        self.entries
            .retain(|key, entry| wanted.get(key).is_some_and(|c| *c == entry.cron));
        let now = self.clock.now();
        if let Err(e) = self
            .store
            .unwatch_schedules_except(wanted.keys().cloned().collect())
            .await
        {
            tracing::error!("cannot forget the schedules that are gone: {e}");
        }
        for (key, cron) in wanted {
            if self.entries.contains_key(&key) {
                continue;
            }
            let last = match self.store.last_fire(&key.0, key.1).await {
                Ok(last) => last,
                Err(e) => {
                    tracing::error!(agent = %key.0, schedule = key.1, "cannot read the last fire: {e}");
                    None
                }
            };
            // Since when this schedule (same expression and zone) has been
            // watched: for one that never fired, where missed fires start.
            let since = match self
                .store
                .watch_schedule(&key.0, key.1, &cron.to_string(), now)
                .await
            {
                Ok(since) => since,
                Err(e) => {
                    tracing::error!(agent = %key.0, schedule = key.1, "cannot record the schedule as watched: {e}");
                    now
                }
            };
            // A stored instant in the future (the clock went back) must not
            // hold the schedule back for that long.
            let last_checked = last.or(Some(since)).filter(|t| *t <= now).unwrap_or(now);
            tracing::debug!(agent = %key.0, schedule = key.1, %cron, %last_checked, "schedule loaded");
            self.entries.insert(key, Entry { cron, last_checked });
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
                Duration::from_std(triggers.catch_up_for(key.1, now)).unwrap_or(Duration::hours(1)),
                triggers.on_missed,
            );
            let on_time = cron.fires_between(on_time_from, now, 1000);
            if !on_time.is_empty() && triggers.on_missed == OnMissed::Latest {
                // `latest` runs once: the on-time fire is that once.
                plan.missed.append(&mut plan.run);
                plan.missed.sort();
            }
            if plan.missed.len() == MAX_MISSED_LISTED {
                tracing::warn!(agent = %key.0, schedule = key.1, "more than {MAX_MISSED_LISTED} fires were missed; only the newest are recorded");
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
        self.metrics.scheduled_fire();
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
            agent: key.0.clone(),
            trigger: "schedule".into(),
            fire: Some(Fire {
                schedule_index: key.1,
                scheduled_for: at,
            }),
            ..RunRequest::default()
        };
        match self
            .supervisor
            .submit(snapshot.clone(), request, Some(overlap))
            .await
        {
            Ok(run) => {
                tracing::info!(agent = %key.0, schedule = key.1, fire = %at, run = %run.id, state = %run.state, "scheduled fire")
            }
            Err(SubmitError::AlreadyFired) => {
                tracing::debug!(agent = %key.0, schedule = key.1, fire = %at, "fire already claimed")
            }
            Err(e) => {
                tracing::error!(agent = %key.0, schedule = key.1, fire = %at, "scheduled fire not started: {e}")
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
            id: crate::store::new_run_id(),
            agent: key.0.clone(),
            trigger: "schedule".into(),
            input: String::new(),
            model: agent.model.clone(),
            definition_hash: agent.hash.clone(),
            owner: String::new(),
            fire: Some(Fire {
                schedule_index: key.1,
                scheduled_for: at,
            }),
            state: RunState::Queued,
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
