//! Run slots: the `max_concurrent_runs` runs of this process may hold at
//! once. Runs wait for one ([`Supervisor::wait_turn`]: queued runs, and
//! fires held by `on_overlap: queue` behind the agent's earlier runs), give
//! it back when they end or wait for approval, and the task taking over
//! other nodes' queued runs reserves free ones ([`Supervisor::reserve_slots`]).
//! The counts shown by `/healthz` and the metrics come from here too.

use super::*;

impl Supervisor {
    /// Takes up to `wanted` free slots for runs about to be taken over
    /// from the shared queue; returns how many it took (none once closing).
    /// Give back what is not used with [`Supervisor::unreserve_slots`].
    pub fn reserve_slots(&self, wanted: usize) -> usize {
        let mut s = self.lock();
        if !s.accepting {
            return 0;
        }
        let waiting = s
            .runs
            .values()
            .filter(|l| !l.slot && !l.held && !l.waiting_approval)
            .count();
        let free = s.limit.saturating_sub(s.running + waiting);
        let took = wanted.min(free);
        s.running += took;
        took
    }

    /// Gives back `n` slots [`Supervisor::reserve_slots`] took and no run
    /// used.
    pub fn unreserve_slots(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut s = self.lock();
        s.running = s.running.saturating_sub(n);
        drop(s);
        // Only this process's waiting runs: waking the task that reserved
        // them would have it reserve and give back again, in a loop.
        self.changed.notify_waiters();
    }

    /// Returns once a slot was given back or a run ended (or at once if
    /// that happened since the last call returned: none may be missed).
    pub async fn slot_change(&self) {
        self.freed.notified().await;
    }

    /// Waits until the run may start: (held runs) the agent's earlier runs
    /// have ended, and a slot is free; takes the slot. False if cancelled
    /// first (the slot is not taken).
    pub(super) async fn wait_turn(&self, id: &str, cancel: &CancellationToken) -> bool {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut s = self.lock();
                let Some(live) = s.runs.get(id) else {
                    return false;
                };
                let blocked_by_agent = live.held
                    && s.by_agent
                        .get(&live.agent)
                        .is_some_and(|ids| ids.first().is_some_and(|first| first != id));
                if !blocked_by_agent && s.running < s.limit {
                    s.running += 1;
                    if let Some(live) = s.runs.get_mut(id) {
                        live.held = false;
                        live.slot = true;
                        live.waiting_approval = false;
                    }
                    return true;
                }
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = cancel.cancelled() => return false,
            }
        }
    }

    /// Wakes the runs waiting for a slot, and the task taking over other
    /// nodes' queued runs.
    pub(super) fn wake(&self) {
        self.changed.notify_waiters();
        self.freed.notify_one();
    }

    /// Gives a run's slot back and wakes the runs waiting for one.
    pub(super) fn release_slot(&self) {
        let mut s = self.lock();
        s.running = s.running.saturating_sub(1);
        drop(s);
        self.wake();
    }

    /// Gives back the slot run `id` holds, if it holds one; `waiting`: it
    /// now waits for approval.
    pub(super) fn release_slot_of(&self, id: &str, waiting: bool) {
        let mut s = self.lock();
        let held = s.runs.get_mut(id).is_some_and(|live| {
            live.waiting_approval = waiting;
            std::mem::take(&mut live.slot)
        });
        if held {
            s.running = s.running.saturating_sub(1);
        }
        drop(s);
        self.wake();
        self.publish_counts();
    }

    /// Removes a run that was entered but not claimed, and gives back its
    /// slot if it took one, under one lock: nobody sees a slot counted for
    /// a run that is gone.
    pub(super) fn forget(&self, id: &str, slot: bool) {
        let mut s = self.lock();
        s.remove(id);
        if slot {
            s.running = s.running.saturating_sub(1);
        }
        drop(s);
        self.wake();
    }
}

impl Slots for Supervisor {
    fn release(&self, run_id: &str) {
        self.release_slot_of(run_id, true);
    }

    fn acquire<'a>(&'a self, run_id: &'a str) -> futures::future::BoxFuture<'a, bool> {
        Box::pin(async move {
            let Some(cancel) = self.lock().runs.get(run_id).map(|l| l.cancel.clone()) else {
                return false;
            };
            let took = self.wait_turn(run_id, &cancel).await;
            self.publish_counts();
            took
        })
    }
}

impl State {
    /// (running, queued): runs holding a slot, and the other runs in
    /// flight. Saturating, so a moment where a slot is counted for a run
    /// already gone reads as none queued, never as an overflow.
    pub(super) fn counts(&self) -> (usize, usize) {
        let waiting = self.waiting_approval();
        (
            self.running,
            self.runs
                .len()
                .saturating_sub(self.running)
                .saturating_sub(waiting),
        )
    }

    /// Runs waiting for a person's approval.
    pub(super) fn waiting_approval(&self) -> usize {
        self.runs.values().filter(|l| l.waiting_approval).count()
    }

    pub(super) fn insert(&mut self, id: &str, live: Live) {
        self.by_agent
            .entry(live.agent.clone())
            .or_default()
            .push(id.to_string());
        self.runs.insert(id.to_string(), live);
    }

    pub(super) fn remove(&mut self, id: &str) {
        let Some(live) = self.runs.remove(id) else {
            return;
        };
        if let Some(ids) = self.by_agent.get_mut(&live.agent) {
            ids.retain(|r| r != id);
            if ids.is_empty() {
                self.by_agent.remove(&live.agent);
            }
        }
    }
}
