//! Where a running run's events go: to its [`RunSink`] (the live stream)
//! the moment the engine emits them, and to the store in batches, one step
//! at a time. A failed batch write is retried with backoff, and a batch
//! that still cannot be written goes with the next one, so the stored
//! sequence numbers are the ones the live stream announced, without a gap.
//!
//! One batch is written at a time, in order, while the next events are
//! already passed on: an SSE client sees `finished` as soon as the engine
//! emits it, not after the batch before it is written. The batch that
//! holds `finished` is left to the caller, which writes it with the run's
//! final state.
//!
//! Depends on the store, the run's [`PendingClaim`], the [`Recorder`] and
//! `types` (`RunEvent`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use tokio::sync::mpsc::UnboundedReceiver;

use super::claim::PendingClaim;
use super::recorder::Recorder;
use crate::store::{Store, StoreError};
use crate::telemetry::metrics::Metrics;
use crate::types::RunEvent;

/// Where a run's events go as it runs: `event` for each event with the
/// sequence number it will be stored under (merged deltas share one),
/// `committed` once the events up to a sequence number are on disk.
pub trait RunSink: Send {
    fn event(&mut self, seq: i64, event: &RunEvent);
    fn committed(&mut self, _last_seq: i64) {}
    /// The daemon's metrics, when the run's model calls are counted there
    /// (each attempt's outcome and latency, which no event carries).
    fn metrics(&self) -> Option<Arc<Metrics>> {
        None
    }
}

/// How a failed event-batch write (or the final state) is retried: 50 ms
/// doubling to at most 1 s, with jitter, 6 times (about 3 s in all), before
/// the batch waits for the next one.
pub(super) fn batch_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(1))
        .with_max_times(6)
        .with_jitter()
}

/// Whether a failed write may succeed when tried again: SQLite errors (a
/// busy lock, an I/O error, a transaction rolled back by another job) may;
/// a closed store, a missing run or bad input will not.
pub(super) fn is_transient(error: &StoreError) -> bool {
    matches!(error, StoreError::Database(_) | StoreError::Io(_))
}

/// Appends `events` to run `run_id`, retrying transient failures with
/// [`batch_backoff`]; the last error when every try failed.
pub(super) async fn append_retrying(
    store: &Store,
    run_id: &str,
    events: &[RunEvent],
) -> Result<i64, StoreError> {
    (|| store.append_events(run_id, events.to_vec()))
        .retry(batch_backoff())
        .sleep(tokio::time::sleep)
        .when(is_transient)
        .notify(|e: &StoreError, wait: Duration| {
            tracing::warn!(run = %run_id, "storing run events failed, retrying in {wait:?}: {e}");
        })
        .await
}

/// A batch being written, and what it holds (kept for the next try if the
/// write fails).
type Writing<'a> =
    Pin<Box<dyn Future<Output = (Vec<RunEvent>, Result<i64, StoreError>)> + Send + 'a>>;

/// Passes each event of `events` (redacted by `recorder`) to `sink` and
/// stores them a step at a time, as described in the module docs, until
/// the engine closes the channel. Nothing is stored before the run's claim
/// is durable. Returns the events not stored yet: the last batch (with
/// `finished`), after any batch whose write failed even after retries,
/// under the numbers already announced.
pub(super) async fn record(
    mut events: UnboundedReceiver<RunEvent>,
    mut recorder: Recorder,
    sink: &mut dyn RunSink,
    store: &Store,
    run_id: &str,
    claim: Option<&PendingClaim>,
) -> Vec<RunEvent> {
    // Events taken from the recorder but not stored yet.
    let mut unstored: Vec<RunEvent> = Vec::new();
    let mut writing: Option<Writing<'_>> = None;
    let mut ended = false;
    loop {
        tokio::select! {
            biased;
            Some((batch, written)) = async {
                match writing.as_mut() {
                    Some(write) => Some(write.await),
                    None => None,
                }
            }, if writing.is_some() => {
                writing = None;
                match written {
                    Ok(last_seq) => sink.committed(last_seq),
                    Err(e) => {
                        tracing::error!(run = %run_id, "cannot store run events, they will go with the next batch: {e}");
                        unstored = batch;
                    }
                }
            }
            event = recorder.next(&mut events), if !ended => match event {
                Some(event) => {
                    let seq = recorder.push(event.clone());
                    sink.event(seq, &event);
                    // The last batch (with `finished`) is committed with
                    // the final state.
                    ended = matches!(event, RunEvent::Finished { .. });
                }
                None => ended = true,
            },
            else => break,
        }
        if ended && writing.is_none() {
            break;
        }
        if writing.is_none()
            && !ended
            && recorder.at_boundary()
            && events.is_empty()
            && durable(claim).await.is_ok()
        {
            unstored.extend(recorder.take());
            let batch = std::mem::take(&mut unstored);
            writing = Some(Box::pin(async move {
                let written = append_retrying(store, run_id, &batch).await;
                (batch, written)
            }));
        }
    }
    unstored.extend(recorder.take());
    unstored
}

/// Waits until the run's row is there to write to: at once unless its
/// claim is still committing; an error if that claim failed (the run then
/// ends at its first model answer).
pub(super) async fn durable(claim: Option<&PendingClaim>) -> Result<(), StoreError> {
    match claim {
        Some(claim) => claim.wait().await,
        None => Ok(()),
    }
}
