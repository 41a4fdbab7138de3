//! Watches the project root itself (not its subdirectories) for what a
//! [`super::Watcher`] needs of it: entries created, removed or
//! renamed, attributes changed, a file closed after it was written, and
//! the root itself removed or moved. Unlike `notify`'s watch, whose inotify
//! mask always holds `IN_MODIFY` and `IN_OPEN`, it leaves out writes to a
//! file that stays open and every open: the root holds the SQLite
//! database, its WAL and the lock file, and each write the store made to
//! the WAL woke `notify`'s thread, and the debouncer and reload loop after
//! it (about 0.37 ms of CPU per served run, BENCHMARKS.md, issue #17). An
//! editor saving a file closes it, renames it into place or creates it, so
//! no configuration change is missed.
//!
//! Events go out as the tree watch's do ([`Batch`] on the same
//! channel), each batch when it is due ([`super::batch`]). One thread per
//! watch, stopped when the [`RootWatch`] is dropped.
//!
//! May depend on `inotify`, `libc`, `notify`'s event types, `tokio` (sync
//! only), `tracing` and `batch`; nothing else of ours.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use inotify::{EventMask, Inotify, WatchMask};
use notify::event::{
    CreateKind, DataChange, Flag, MetadataKind, ModifyKind, RemoveKind, RenameMode,
};
use notify::{Event, EventKind};
use tokio::sync::mpsc::UnboundedSender;

use super::batch::{Batch, Gathering};

/// What the root is watched for: no `IN_MODIFY`, `IN_OPEN` or `IN_ACCESS`.
const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::CLOSE_WRITE)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::ONLYDIR);

/// A running watch of one directory; dropping it stops its thread.
#[derive(Debug)]
pub struct RootWatch {
    /// The thread's end sees a hang-up when this one is dropped.
    _stop: UnixStream,
}

impl RootWatch {
    /// Starts watching `root` (a directory), sending batches to `tx`.
    pub fn start(
        root: &Path,
        debounce: Duration,
        tx: UnboundedSender<Batch>,
    ) -> io::Result<RootWatch> {
        let inotify = Inotify::init()?;
        inotify.watches().add(root, MASK)?;
        let (stop, stopped) = UnixStream::pair()?;
        let root = root.to_path_buf();
        std::thread::Builder::new()
            .name("aurad-root-watch".into())
            .spawn(move || watch(inotify, &root, debounce, &stopped, &tx))?;
        Ok(RootWatch { _stop: stop })
    }
}

/// The thread: reads events, sends each batch when it is due (see
/// [`super::batch`]), and ends when `stopped` hangs up, the receiver is gone or
/// reading fails (after sending the error, which makes the watcher reload
/// everything).
fn watch(
    mut inotify: Inotify,
    root: &Path,
    debounce: Duration,
    stopped: &UnixStream,
    tx: &UnboundedSender<Batch>,
) {
    let mut buffer = [0u8; 4096];
    let mut batch = Gathering::new(debounce);
    loop {
        match ready(&inotify, stopped, batch.wait()) {
            Ready::Stop => return,
            Ready::Timeout => {
                if !batch.send(tx) {
                    return;
                }
            }
            Ready::Events => match inotify.read_events(&mut buffer) {
                Ok(events) => {
                    let now = Instant::now();
                    for event in events.filter_map(|e| translate(root, e.mask, e.name)) {
                        batch.event(event, now);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.send(Err(vec![notify::Error::io(e).add_path(root.into())]));
                    return;
                }
            },
        }
    }
}

enum Ready {
    Events,
    Timeout,
    Stop,
}

/// Waits until `inotify` has events, `stopped` hangs up, or `wait` (if
/// any) passes.
fn ready(inotify: &Inotify, stopped: &UnixStream, wait: Option<Duration>) -> Ready {
    let mut fds = [
        libc::pollfd {
            fd: inotify.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: stopped.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // Rounded up, so that a batch is never sent a moment early.
    let timeout = wait.map_or(-1, |w| {
        i32::try_from(w.as_micros().div_ceil(1000)).unwrap_or(i32::MAX)
    });
    // SAFETY: `fds` is a valid array of two pollfd for the whole call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
    if n < 0 {
        // EINTR: look again (the batch's deadline is recomputed). Any other
        // error shows in the read that follows, which reports it and stops.
        return Ready::Events;
    }
    if fds[1].revents != 0 {
        Ready::Stop
    } else if fds[0].revents != 0 {
        Ready::Events
    } else {
        Ready::Timeout
    }
}

/// The `notify` event for one inotify event on the root, `None` for those
/// that say nothing (`IN_IGNORED` after the root went away, which
/// `IN_DELETE_SELF` or `IN_MOVE_SELF` already said).
fn translate(root: &Path, mask: EventMask, name: Option<&std::ffi::OsStr>) -> Option<Event> {
    if mask.contains(EventMask::Q_OVERFLOW) {
        return Some(Event::new(EventKind::Other).set_flag(Flag::Rescan));
    }
    let path: PathBuf = match name {
        Some(name) => root.join(name),
        None => root.to_path_buf(),
    };
    let kind = if mask.contains(EventMask::CREATE) {
        EventKind::Create(if mask.contains(EventMask::ISDIR) {
            CreateKind::Folder
        } else {
            CreateKind::Any
        })
    } else if mask.intersects(EventMask::DELETE | EventMask::DELETE_SELF) {
        EventKind::Remove(RemoveKind::Any)
    } else if mask.contains(EventMask::MOVED_FROM) {
        EventKind::Modify(ModifyKind::Name(RenameMode::From))
    } else if mask.contains(EventMask::MOVED_TO) {
        EventKind::Modify(ModifyKind::Name(RenameMode::To))
    } else if mask.contains(EventMask::MOVE_SELF) {
        EventKind::Modify(ModifyKind::Name(RenameMode::Any))
    } else if mask.contains(EventMask::CLOSE_WRITE) {
        EventKind::Modify(ModifyKind::Data(DataChange::Any))
    } else if mask.contains(EventMask::ATTRIB) {
        EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any))
    } else {
        return None;
    };
    Some(Event::new(kind).add_path(path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use tokio::sync::mpsc;

    const DEBOUNCE: Duration = Duration::from_millis(50);
    const PATIENCE: Duration = Duration::from_secs(15);

    /// The names of the paths of the next batch (of events, not errors).
    async fn next_names(rx: &mut mpsc::UnboundedReceiver<Batch>) -> Vec<String> {
        let batch = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .expect("no batch in time")
            .expect("the watch stopped")
            .expect("the watch failed");
        batch
            .iter()
            .flat_map(|e| e.paths.iter())
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn writes_to_an_open_file_raise_no_event() {
        let dir = tempfile::tempdir().unwrap();
        // Like the database's WAL: created before the watch, kept open.
        let mut wal = std::fs::File::create(dir.path().join("aurad.db-wal")).unwrap();
        let mut inotify = Inotify::init().unwrap();
        inotify.watches().add(dir.path(), MASK).unwrap();
        for _ in 0..50 {
            wal.write_all(&[0u8; 4096]).unwrap();
            wal.sync_data().unwrap();
            std::fs::File::open(dir.path().join("aurad.db-wal")).unwrap();
        }
        let mut buffer = [0u8; 4096];
        let events: Vec<String> = match inotify.read_events(&mut buffer) {
            Ok(events) => events
                .map(|e| format!("{:?} {:?}", e.mask, e.name))
                .collect(),
            Err(e) => {
                assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{e}");
                Vec::new()
            }
        };
        assert!(events.is_empty(), "{events:?}");
    }

    #[tokio::test]
    async fn a_saved_file_is_seen_once_the_batch_is_old_enough() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _watch = RootWatch::start(dir.path(), DEBOUNCE, tx).unwrap();
        let written = Instant::now();
        std::fs::write(dir.path().join("aurad.yaml"), "listen: 127.0.0.1:0\n").unwrap();
        // Created, then closed after writing: one batch naming it.
        let names = next_names(&mut rx).await;
        assert!(written.elapsed() >= DEBOUNCE);
        assert_eq!(names, ["aurad.yaml", "aurad.yaml"]);
    }

    #[tokio::test]
    async fn renames_removals_and_new_folders_are_seen() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("mcp.json.tmp"), "{}").unwrap();
        std::fs::write(dir.path().join(".mcp.json"), "{}").unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _watch = RootWatch::start(dir.path(), DEBOUNCE, tx).unwrap();
        std::fs::rename(dir.path().join("mcp.json.tmp"), dir.path().join("mcp.json")).unwrap();
        std::fs::remove_file(dir.path().join(".mcp.json")).unwrap();
        std::fs::create_dir(dir.path().join("agents")).unwrap();
        let mut names = Vec::new();
        while !["mcp.json.tmp", "mcp.json", ".mcp.json", "agents"]
            .iter()
            .all(|n| names.iter().any(|m: &String| m == n))
        {
            names.extend(next_names(&mut rx).await);
        }
    }

    #[tokio::test]
    async fn the_root_going_away_is_reported_as_the_root() {
        let parent = tempfile::tempdir().unwrap();
        let root = parent.path().join("project");
        std::fs::create_dir(&root).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _watch = RootWatch::start(&root, DEBOUNCE, tx).unwrap();
        std::fs::rename(&root, parent.path().join("moved")).unwrap();
        let batch = tokio::time::timeout(PATIENCE, rx.recv())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(
            batch.iter().any(|e| e.paths == [root.clone()]
                && matches!(e.kind, EventKind::Modify(ModifyKind::Name(_)))),
            "{batch:?}"
        );
    }

    #[tokio::test]
    async fn dropping_the_watch_ends_its_thread() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let watch = RootWatch::start(dir.path(), DEBOUNCE, tx).unwrap();
        drop(watch);
        // The thread held the only sender: once it ended, the channel closes.
        let closed = tokio::time::timeout(PATIENCE, rx.recv()).await.unwrap();
        assert!(closed.is_none());
    }
}
