//! The events of a run this process does not run (another node of a
//! PostgreSQL cluster, or an `aurad run` process beside the daemon): read
//! from the store, then read again until its `finished` event (or the run
//! is final with nothing more to read, or gone). On PostgreSQL the store
//! reads again as soon as the node storing them says so
//! ([`ClusterSignal::Events`], LISTEN/NOTIFY), and at the latest every
//! [`SIGNALLED_POLL`] in case a signal was lost; on SQLite every [`POLL`].
//! A live run of this process is followed through its hub instead
//! (`Daemon::events`).

use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};

use tokio::sync::broadcast;

use crate::run::hub::Numbered;
use crate::store::{ClusterSignal, Store};
use crate::types::RunEvent;

/// How often the store is read again for new events, without signals.
pub const POLL: Duration = Duration::from_millis(200);

/// How often it is read again with signals (a lost one costs this much).
pub const SIGNALLED_POLL: Duration = Duration::from_secs(2);

/// `stored` (the events after `after`, read already), then the later ones
/// as they are stored, ending after `finished`.
pub fn follow(
    store: Store,
    run_id: String,
    stored: Vec<Numbered>,
    after: i64,
) -> BoxStream<'static, Numbered> {
    let signals = store.signals();
    let poll = if signals.is_some() {
        SIGNALLED_POLL
    } else {
        POLL
    };
    follow_with(store, run_id, stored, after, signals, poll)
}

/// [`follow`] with its signals (if any) and the longest pause between
/// two reads.
fn follow_with(
    store: Store,
    run_id: String,
    stored: Vec<Numbered>,
    after: i64,
    signals: Option<broadcast::Receiver<ClusterSignal>>,
    poll: Duration,
) -> BoxStream<'static, Numbered> {
    let ended = stored
        .iter()
        .any(|(_, e)| matches!(e, RunEvent::Finished { .. }));
    let last = stored.last().map(|(seq, _)| *seq).unwrap_or(after);
    let head = stream::iter(stored);
    if ended {
        return head.boxed();
    }
    let tail = stream::unfold(
        Some((store, run_id, last, signals)),
        move |state| async move {
            let (store, run_id, mut last, mut signals) = state?;
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
                    let next = (!ended).then_some((store, run_id, last, signals));
                    return Some((stream::iter(batch), next));
                }
                if final_before {
                    return None;
                }
                pause(&mut signals, &run_id, poll).await;
            }
        },
    )
    .flatten();
    head.chain(tail).boxed()
}

/// Waits `poll`, or less when `signals` says `run_id` has new events (or
/// may have: a lagging receiver missed some signals).
async fn pause(
    signals: &mut Option<broadcast::Receiver<ClusterSignal>>,
    run_id: &str,
    poll: Duration,
) {
    let Some(rx) = signals else {
        tokio::time::sleep(poll).await;
        return;
    };
    let told = async {
        loop {
            match rx.recv().await {
                Ok(ClusterSignal::Events(id)) if id == run_id => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                // The store closed: only the poll is left.
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    };
    tokio::select! {
        () = told => {}
        () = tokio::time::sleep(poll) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::testing::{Kind, TestStore, new_run, text};
    use crate::types::{RunState, Usage};

    /// A run stored by another node is followed on its signals: a follower
    /// waiting with an hour-long poll is woken by the run's stored events,
    /// and the stream gives them and ends after `finished`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_stored_by_another_node_arrive_on_its_signal() {
        let opened = tokio::task::spawn_blocking(|| {
            TestStore::open(Kind::Postgres, "remote_events_signalled").map(|t| (t.reopen(), t))
        })
        .await
        .unwrap();
        let Some((writer, test)) = opened else {
            return;
        };
        let follower = test.store.clone();
        let run = new_run("a");
        writer.claim_run(run.clone()).await.unwrap();
        // Listening once a signal sent now arrives.
        let mut probe = follower.signals().expect("PostgreSQL has signals");
        let listening = async {
            loop {
                writer.request_cancel("probe").await.unwrap();
                let got = tokio::time::timeout(Duration::from_millis(100), probe.recv()).await;
                if let Ok(Ok(ClusterSignal::Cancel(id))) = got
                    && id == "probe"
                {
                    return;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), listening)
            .await
            .expect("the listener never connected");

        // Stored after the follower subscribed, before it waits: the
        // signal is waiting for it, and wakes it well before the hour.
        let mut signals = follower.signals();
        writer
            .append_events(&run.id, vec![text("a")])
            .await
            .unwrap();
        let hour = Duration::from_secs(3600);
        tokio::time::timeout(Duration::from_secs(10), pause(&mut signals, &run.id, hour))
            .await
            .expect("the follower was not woken by the run's stored events");

        let mut events = follow_with(
            follower.clone(),
            run.id.clone(),
            Vec::new(),
            0,
            signals,
            hour,
        );
        assert_eq!(next(&mut events).await, Some((1, text("a"))));
        let finished = RunEvent::Finished {
            state: RunState::Succeeded,
            reason: None,
            output: Some("a".into()),
            usage: Usage::default(),
            cost_usd: None,
            result: None,
        };
        writer
            .finish_run_with_events(
                &run.id,
                vec![finished.clone()],
                RunState::Succeeded,
                None,
                Some("a".into()),
                Usage::default(),
            )
            .await
            .unwrap();
        assert_eq!(next(&mut events).await, Some((2, finished)));
        assert_eq!(next(&mut events).await, None);
        tokio::task::spawn_blocking(move || {
            let _ = writer.close();
            drop(test);
        })
        .await
        .unwrap();
    }

    /// The stream's next item within 10 s.
    async fn next(events: &mut BoxStream<'static, Numbered>) -> Option<Numbered> {
        tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("the event came on its signal, not after the hour-long poll")
    }
}
