//! What a run started by a trigger other than the clock is for, claimed in
//! the transaction that claims the run, so each happens at most once even
//! across restarts: the follow-up of one finished run (`after_runs`, keyed
//! by agent and the finished run) and the run of one version of a watched
//! file (`watched_files`, keyed by agent, path and content hash). A file
//! whose run was cut off by a crash (`interrupted`) may be claimed again:
//! it was never processed to an end. A file whose run retention pruned
//! stays processed (these records are kept). Writer thread for claims.

use chrono::{DateTime, Utc};

use super::{Store, StoreError};
use crate::store::{NewRun, RunRecord};

/// What a triggered run is for, remembered with its claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerClaim {
    /// A follow-up (`after:`) of run `after_run_id`.
    After { after_run_id: String },
    /// The run for file `path` (relative to the project) with content
    /// `content_hash` (`watch:`).
    Watch { path: String, content_hash: String },
}

impl Store {
    /// Claims `run` (as [`Store::claim_run`]) for `what`, remembering it
    /// in the same transaction: `None` (nothing stored) when `what` has a
    /// run already (for a file, one that was not interrupted).
    pub async fn claim_run_for_trigger(
        &self,
        run: NewRun,
        what: TriggerClaim,
        now: DateTime<Utc>,
    ) -> Result<Option<RunRecord>, StoreError> {
        route!(self.claim_run_for_trigger(run, what, now))
    }

    /// Whether file `path` with `content_hash` has had its run for `agent`
    /// (one not interrupted): it needs none.
    pub async fn watched_file_done(
        &self,
        agent: &str,
        path: &str,
        content_hash: &str,
    ) -> Result<bool, StoreError> {
        route!(self.watched_file_done(agent, path, content_hash))
    }
}
