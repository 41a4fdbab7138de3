//! The background pruner of `aurad serve`: applies `retention:` and
//! `sessions:` of aurad.yaml (re-read from the current snapshot at each
//! pass, so a reload changes them) shortly after start and then every
//! [`EVERY`]. A pass deletes whole runs past `retention.runs`, then the
//! events of runs past `retention.events` (`store::retention` says what is
//! never pruned), then the sessions idle past `sessions.expire_after` or
//! beyond an agent's `sessions.max_per_agent` (never one with a turn not
//! ended), in
//! batches of about [`BATCH_ROWS`] rows, one writer transaction each, with
//! [`PAUSE`] between batches: the runs' own writes queue behind one small
//! batch at most, never behind a whole prune.
//!
//! Depends on the store, the settings (`config`), the snapshot and the
//! clock.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::sessions::SessionLimits;
use crate::config::settings::Retention;
use crate::registry::Snapshot;
use crate::scheduler::clock::Clock;
use crate::store::{PruneScope, Pruned, SessionsPruned, Store, StoreError};

/// The first pass, after start (after the daemon's own recovery work).
pub const FIRST_PASS_AFTER: Duration = Duration::from_secs(2);
/// The passes after it.
pub const EVERY: Duration = Duration::from_secs(3600);
/// About how many rows one batch (one writer transaction) deletes.
pub const BATCH_ROWS: usize = 500;
/// The pause between two batches of a pass, leaving the writer to the runs.
pub const PAUSE: Duration = Duration::from_millis(20);

/// Runs a pass at [`FIRST_PASS_AFTER`] and then every [`EVERY`] until
/// `stop`.
pub async fn run(
    store: Store,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    clock: Arc<dyn Clock>,
    stop: CancellationToken,
) {
    let mut wait = FIRST_PASS_AFTER;
    loop {
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return,
        }
        wait = EVERY;
        let (retention, sessions) = {
            let snapshot = snapshots.borrow();
            let settings = &snapshot.project.settings;
            (settings.retention, settings.sessions)
        };
        match prune_sessions(&store, sessions, clock.now(), PAUSE, &stop).await {
            Ok(pruned) if pruned.sessions > 0 => tracing::info!(
                sessions = pruned.sessions,
                messages = pruned.messages,
                "retention: pruned idle and surplus sessions"
            ),
            Ok(_) => {}
            Err(e) => tracing::error!("retention: pruning sessions failed: {e}"),
        }
        match pass(&store, retention, clock.now(), PAUSE, &stop).await {
            Ok(pruned) if pruned.is_empty() => {
                tracing::debug!("retention: nothing to prune");
            }
            Ok(pruned) => tracing::info!(
                runs_deleted = pruned.runs,
                runs_emptied = pruned.runs_emptied,
                events = pruned.events,
                steps = pruned.steps,
                approvals = pruned.approvals,
                "retention: pruned old runs"
            ),
            Err(e) => tracing::error!("retention: pruning old runs failed: {e}"),
        }
    }
}

/// One pass at `now`: every batch of runs, then of events, until none is
/// left or `stop` (pausing `pause` between batches). Returns what it
/// removed.
pub async fn pass(
    store: &Store,
    retention: Retention,
    now: DateTime<Utc>,
    pause: Duration,
    stop: &CancellationToken,
) -> Result<Pruned, StoreError> {
    let mut total = Pruned::default();
    for (scope, keep) in [
        (PruneScope::Runs, retention.runs),
        (PruneScope::Events, retention.events),
    ] {
        let before = cutoff(now, keep);
        loop {
            if stop.is_cancelled() {
                return Ok(total);
            }
            let batch = store.prune_batch(scope, before, BATCH_ROWS).await?;
            total.add(batch.pruned);
            if batch.pruned.runs_touched() == 0 {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = stop.cancelled() => return Ok(total),
            }
        }
    }
    Ok(total)
}

/// Sessions idle past `limits.expire_after` or beyond an agent's
/// `limits.max_per_agent`, in batches of [`SESSION_BATCH`] sessions,
/// pausing `pause` between them, until none is left or `stop`.
pub async fn prune_sessions(
    store: &Store,
    limits: SessionLimits,
    now: DateTime<Utc>,
    pause: Duration,
    stop: &CancellationToken,
) -> Result<SessionsPruned, StoreError> {
    let idle_before = cutoff(now, limits.expire_after);
    let mut total = SessionsPruned::default();
    while !stop.is_cancelled() {
        let batch = store
            .prune_sessions(idle_before, limits.max_per_agent, SESSION_BATCH, false)
            .await?;
        total.sessions += batch.sessions;
        total.messages += batch.messages;
        if batch.sessions == 0 {
            break;
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => break,
        }
    }
    Ok(total)
}

/// How many sessions one batch deletes (with their messages).
pub const SESSION_BATCH: usize = 50;

/// `now - keep`; the earliest time when `keep` reaches past it.
pub fn cutoff(now: DateTime<Utc>, keep: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(keep)
        .ok()
        .and_then(|keep| now.checked_sub_signed(keep))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}
