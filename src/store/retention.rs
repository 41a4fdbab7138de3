//! Retention: deleting old run data in small batches (`retention:` in
//! aurad.yaml, `aurad runs prune`). Two scopes, each by age against a
//! cutoff instant the caller computes:
//!
//! - [`PruneScope::Events`]: a final run that ended before the cutoff
//!   loses its event rows; its `runs` row (state, times, usage, cost,
//!   output, error), steps and approvals stay, and it is marked
//!   (`events_pruned_at`, `events_pruned`) so readers say the events were
//!   pruned instead of showing an empty log ([`StoreError::EventsPruned`]).
//! - [`PruneScope::Runs`]: a final run that ended before the cutoff is
//!   deleted with everything recorded about it: events, approvals, pipeline
//!   steps and the pipeline row, and the `after_runs` record of follow-ups
//!   of it.
//!
//! Never pruned: a run that is not final (queued, running, waiting for
//! approval), whatever its age; a final run whose parent run is not final
//! (a pipeline or agent call still going); and, per schedule, the run of
//! its newest fire, from which the scheduler resumes after a restart (with
//! it gone, fires already handled would look missed). Memory is not run
//! data and is never touched; `watched_files` records are kept (a file
//! whose run was pruned stays processed), webhook deliveries expire on
//! their own after 24 hours.
//!
//! Each batch is one job on the writer thread touching about `max_rows`
//! rows (the runs it selects and their events), so writes queued behind it
//! wait for one small transaction, not the whole prune. Space: SQLite puts
//! freed pages on its freelist and new writes reuse them, so under steady
//! retention the file stops growing (measured by `benches/retention.rs`);
//! the file does not shrink on disk.
//!
//! Dry runs ([`Store::prunable`]) count on the reader thread.
//!
//! On PostgreSQL the same rules and counts hold; a batch is one
//! transaction that locks the runs it takes (`FOR UPDATE SKIP LOCKED`), so
//! nodes pruning at once take disjoint runs and never delete or count a row
//! twice. [`PruneBatch::held`] is then how long that transaction worked
//! before its commit. Freed space: deleted rows become dead tuples that
//! (auto)vacuum turns into free space later rows reuse, so the tables stop
//! growing; they shrink on disk only with `VACUUM FULL`.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Store, StoreError};

/// What retention removes from a run older than the cutoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneScope {
    /// Its events only; the run's record stays.
    Events,
    /// The run and everything recorded about it.
    Runs,
}

/// What a prune removed (or, for a dry run, would remove).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pruned {
    /// Runs deleted with all their rows.
    pub runs: u64,
    /// Runs kept whose events were deleted.
    pub runs_emptied: u64,
    /// Event rows deleted (of both).
    pub events: u64,
    /// Pipeline step rows deleted with their runs.
    pub steps: u64,
    /// Approval rows deleted with their runs.
    pub approvals: u64,
}

impl Pruned {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: Pruned) {
        self.runs += other.runs;
        self.runs_emptied += other.runs_emptied;
        self.events += other.events;
        self.steps += other.steps;
        self.approvals += other.approvals;
    }

    /// True when nothing was (or would be) removed.
    pub fn is_empty(&self) -> bool {
        *self == Pruned::default()
    }

    /// Runs touched: deleted or emptied. A batch that touched none means
    /// the prune is done.
    pub fn runs_touched(&self) -> u64 {
        self.runs + self.runs_emptied
    }
}

/// One batch: what it removed and how long its work held the writer
/// thread (before the commit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneBatch {
    pub pruned: Pruned,
    pub held: std::time::Duration,
}

impl Store {
    /// Prunes one batch of `scope` for runs that ended before `before`:
    /// oldest first, about `max_rows` rows (at least one run), in one
    /// transaction on the writer thread. Call it until
    /// [`Pruned::runs_touched`] is 0.
    pub async fn prune_batch(
        &self,
        scope: PruneScope,
        before: DateTime<Utc>,
        max_rows: usize,
    ) -> Result<PruneBatch, StoreError> {
        route!(self.prune_batch(scope, before, max_rows))
    }

    /// [`Store::prune_batch`], blocking (CLI).
    pub fn prune_batch_blocking(
        &self,
        scope: PruneScope,
        before: DateTime<Utc>,
        max_rows: usize,
    ) -> Result<PruneBatch, StoreError> {
        route_blocking!(self.prune_batch_blocking / prune_batch(scope, before, max_rows))
    }

    /// What pruning `scope` before `before` would remove now (a dry run;
    /// reader thread, changes nothing).
    pub async fn prunable(
        &self,
        scope: PruneScope,
        before: DateTime<Utc>,
    ) -> Result<Pruned, StoreError> {
        route!(self.prunable(scope, before))
    }

    /// [`Store::prunable`], blocking (CLI).
    pub fn prunable_blocking(
        &self,
        scope: PruneScope,
        before: DateTime<Utc>,
    ) -> Result<Pruned, StoreError> {
        route_blocking!(self.prunable_blocking / prunable(scope, before))
    }
}
