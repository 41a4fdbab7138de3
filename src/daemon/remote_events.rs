//! The events of a run this process does not run (another node of a
//! PostgreSQL cluster, or an `aurad run` process beside the daemon): read
//! from the store, then read again every [`POLL`] until its `finished`
//! event (or the run is final with nothing more to read, or gone). A live
//! run of this process is followed through its hub instead
//! (`Daemon::events`).

use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};

use super::hub::Numbered;
use crate::store::Store;
use crate::types::RunEvent;

/// How often the store is read again for new events.
pub const POLL: Duration = Duration::from_millis(200);

/// `stored` (the events after `after`, read already), then the later ones
/// as they are stored, ending after `finished`.
pub fn follow(
    store: Store,
    run_id: String,
    stored: Vec<Numbered>,
    after: i64,
) -> BoxStream<'static, Numbered> {
    let ended = stored
        .iter()
        .any(|(_, e)| matches!(e, RunEvent::Finished { .. }));
    let last = stored.last().map(|(seq, _)| *seq).unwrap_or(after);
    let head = stream::iter(stored);
    if ended {
        return head.boxed();
    }
    let tail = stream::unfold(Some((store, run_id, last)), |state| async move {
        let (store, run_id, mut last) = state?;
        loop {
            // Whether the run was final before this read: if so, what this
            // read returns is all there will ever be.
            let final_before = match store.get_run(&run_id).await {
                Ok(Some(run)) => run.state.is_final(),
                _ => return None,
            };
            let batch = match store.run_events_after(&run_id, last).await {
                Ok(batch) => batch,
                Err(e) => {
                    tracing::warn!(run = %run_id, "cannot read the run's events: {e}");
                    return None;
                }
            };
            if !batch.is_empty() {
                let ended = final_before
                    || batch
                        .iter()
                        .any(|(_, e)| matches!(e, RunEvent::Finished { .. }));
                last = batch.last().map(|(seq, _)| *seq).unwrap_or(last);
                let next = (!ended).then_some((store, run_id, last));
                return Some((stream::iter(batch), next));
            }
            if final_before {
                return None;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .flatten();
    head.chain(tail).boxed()
}
