//! `notify`'s watcher with its events delivered in batches when they are due
//! (see [`super::batch`]), on the same channel and in the same form
//! ([`Batch`]) as the root's watch ([`super::root`]). Reads (`Access`
//! events, such as the daemon's own reading of a file it reloads) are left
//! out: they change nothing, and they would open a batch that a later save
//! then joins half-written.
//!
//! It replaces `notify-debouncer-full` (a dependency no more), whose
//! thread woke every quarter of the debounce interval whether or not
//! anything happened (27 times a second at the default 150 ms, for the life
//! of the daemon). This thread sleeps until an event arrives and then only
//! until its batch is due, so an idle daemon is not woken by its file watch
//! at all. The watcher needs the changed paths of a batch, not that crate's
//! merging of events per file (by file id), so nothing is lost by it.
//!
//! One thread per watch, ending when the [`TreeWatch`] is dropped (notify
//! then drops the event handler, which closes the thread's channel) or the
//! receiver is gone.
//!
//! May depend on `notify`, `tokio` (sync only) and `batch`; nothing else
//! of ours.

use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::mpsc::UnboundedSender;

use super::batch::{Batch, Gathering};

/// A `notify` watcher whose events go out in batches.
pub struct TreeWatch {
    watcher: RecommendedWatcher,
}

impl std::fmt::Debug for TreeWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeWatch").finish_non_exhaustive()
    }
}

impl TreeWatch {
    /// A watcher watching nothing yet, whose batches go to `tx`.
    pub fn start(debounce: Duration, tx: UnboundedSender<Batch>) -> Result<TreeWatch, String> {
        let (raw_tx, raw) = mpsc::channel::<(Instant, notify::Result<notify::Event>)>();
        let watcher = notify::recommended_watcher(move |event| {
            // The batching thread is gone only after the receiver was.
            let _ = raw_tx.send((Instant::now(), event));
        })
        .map_err(|e| format!("cannot start the file watcher: {e}"))?;
        std::thread::Builder::new()
            .name("aurad-trees".into())
            .spawn(move || batch(&raw, debounce, &tx))
            .map_err(|e| format!("cannot start the file watcher's thread: {e}"))?;
        Ok(TreeWatch { watcher })
    }

    /// Watches `path` (again: watching a watched path is harmless).
    pub fn watch(&mut self, path: &Path, mode: RecursiveMode) -> notify::Result<()> {
        self.watcher.watch(path, mode)
    }
}

/// The thread: gathers events into a [`Gathering`], sends each batch when
/// it is due, and waits with no timeout while nothing is pending.
fn batch(
    raw: &mpsc::Receiver<(Instant, notify::Result<notify::Event>)>,
    debounce: Duration,
    tx: &UnboundedSender<Batch>,
) {
    let mut batch = Gathering::new(debounce);
    loop {
        let next = match batch.wait() {
            None => raw.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(wait) => raw.recv_timeout(wait),
        };
        match next {
            Ok((_, Ok(event))) if matches!(event.kind, EventKind::Access(_)) => {}
            Ok((at, Ok(event))) => batch.event(event, at),
            Ok((at, Err(error))) => batch.error(error, at),
            Err(RecvTimeoutError::Timeout) => {
                if !batch.send(tx) {
                    return;
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                let _ = batch.send(tx);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::mpsc::unbounded_channel;

    const PATIENCE: Duration = Duration::from_secs(15);

    /// The voluntary context switches of this process's threads named
    /// `name`, by thread id.
    fn wakeups(name: &str) -> Vec<(String, u64)> {
        let mut found = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim() != name {
                continue;
            }
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            let switches = status
                .lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            found.push((task.file_name().to_string_lossy().into_owned(), switches));
        }
        found
    }

    #[tokio::test]
    async fn changes_come_in_one_batch_once_they_pause() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (tx, mut rx) = unbounded_channel();
        let mut watch = TreeWatch::start(Duration::from_millis(200), tx).unwrap();
        watch.watch(&root, RecursiveMode::Recursive).unwrap();
        let start = Instant::now();
        std::fs::write(root.join("a.yaml"), "a").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        let paths = next_paths(&mut rx).await;
        assert!(
            start.elapsed() >= Duration::from_millis(200),
            "sent before the changes paused for the debounce interval"
        );
        for want in [root.join("a.yaml"), root.join("sub")] {
            assert!(paths.contains(&want), "{want:?} missing from {paths:?}");
        }
        // The new folder is watched too (recursively).
        std::fs::write(root.join("sub/b.yaml"), "b").unwrap();
        let paths = next_paths(&mut rx).await;
        assert!(paths.contains(&root.join("sub/b.yaml")), "{paths:?}");
    }

    #[tokio::test]
    async fn a_read_opens_no_batch_for_a_later_save_to_join() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join("a.yaml"), "a").unwrap();
        let (tx, mut rx) = unbounded_channel();
        let debounce = Duration::from_millis(200);
        let mut watch = TreeWatch::start(debounce, tx).unwrap();
        watch.watch(&root, RecursiveMode::Recursive).unwrap();
        // The daemon reading a file it reloads, then a save a little later
        // (the gap is the scenario, not a wait for anything).
        let _ = std::fs::read_to_string(root.join("a.yaml")).unwrap();
        std::thread::sleep(Duration::from_millis(120));
        std::fs::write(root.join("b.yaml"), "b").unwrap();
        let saved = Instant::now();
        let batch = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("a batch within the deadline")
            .unwrap()
            .unwrap();
        // A batch opened by the read would have gone 80 ms after the save.
        assert!(
            saved.elapsed() >= debounce - Duration::from_millis(20),
            "the save was sent {:?} after it was made",
            saved.elapsed()
        );
        assert!(
            batch
                .iter()
                .all(|e| !matches!(e.kind, EventKind::Access(_))),
            "{batch:?}"
        );
        assert!(batch.iter().any(|e| e.paths.contains(&root.join("b.yaml"))));
    }

    /// The paths of the next batch.
    async fn next_paths(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<Batch>,
    ) -> Vec<std::path::PathBuf> {
        let batch = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("a batch within the deadline")
            .expect("the channel is open")
            .expect("no watch error");
        batch.iter().flat_map(|e| e.paths.clone()).collect()
    }

    #[tokio::test]
    async fn an_idle_watch_never_wakes_and_a_dropped_one_ends() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = unbounded_channel();
        let before: Vec<_> = wakeups("aurad-trees").into_iter().map(|(t, _)| t).collect();
        let mut watch = TreeWatch::start(Duration::from_millis(10), tx).unwrap();
        watch.watch(dir.path(), RecursiveMode::Recursive).unwrap();
        let deadline = Instant::now() + PATIENCE;
        let ours = loop {
            if let Some(t) = wakeups("aurad-trees")
                .into_iter()
                .find(|(t, _)| !before.contains(t))
            {
                break t;
            }
            assert!(Instant::now() < deadline, "the watch thread did not start");
            tokio::task::yield_now().await;
        };
        let count = |tid: &str| {
            wakeups("aurad-trees")
                .into_iter()
                .find(|(t, _)| t == tid)
                .map(|(_, n)| n)
        };
        let first = count(&ours.0).unwrap();
        // notify-debouncer-full's thread woke every 2.5 ms at this interval:
        // 40 times in this window.
        std::thread::sleep(Duration::from_millis(100));
        let idle = count(&ours.0).unwrap() - first;
        assert!(
            idle <= 1,
            "the idle watch thread woke {idle} times in 100 ms"
        );
        drop(watch);
        assert!(
            tokio::time::timeout(PATIENCE, rx.recv())
                .await
                .expect("the channel closes once the watch is dropped")
                .is_none()
        );
    }
}
