//! `watch:` under `aurad serve`: one run per created or changed file
//! matching an agent's globs, once the file has been quiet for the agent's
//! `debounce`. Each file version (path and SHA-256 of its content) runs
//! once per agent, even across restarts: the version is claimed with its
//! run in the store. At start and whenever the snapshot changes (a new or
//! edited `watch:`), the files already there are looked at too, so those
//! dropped while the daemon was down are processed; a file whose run was
//! cut off by a crash is run again.
//!
//! File runs are never skipped by `on_overlap`: each is submitted like an
//! API run (run now, or wait `queued` for a slot under
//! `max_concurrent_runs`), so every dropped file is processed.
//!
//! This is not the configuration's watch ([`crate::watcher::project`], reloads): it has its own
//! `notify` watcher on the globs' folders. The project root is watched too,
//! for the globs' folders created later; unless a glob matches files in the
//! root itself, by a [`RootWatch`], which leaves out writes to files kept
//! open: the database and its WAL live in the root, and `notify`'s watch of
//! it woke this loop at every write the store made. Depends on the
//! supervisor, the snapshot, the store and the root watch.
//!
//! Walking the folders (up to [`MAX_SCAN`] files), hashing files, moving
//! processed ones and adding `notify`'s recursive watches (which walk the
//! tree) run on blocking threads ([`blocking`]): on a runtime worker they
//! would stall every run and API request scheduled on it for as long as
//! the disk takes.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher as _};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::WatchTrigger;
use crate::config::watch::CONTROL_DIRS;
use crate::daemon::supervisor::{SubmitError, Supervisor};
use crate::registry::Snapshot;
use crate::run::RunRequest;
use crate::run::template::TriggerVars;
use crate::store::TriggerClaim;
use crate::types::Trigger;
use crate::watcher::batch::Batch;
use crate::watcher::root::RootWatch;

/// The most files looked at when scanning the folders of the globs.
const MAX_SCAN: usize = 100_000;
/// How deep a scan goes below a glob's folder.
const MAX_DEPTH: usize = 32;

/// The agents with `watch:` in a snapshot.
type WatchSets = BTreeMap<String, WatchTrigger>;

fn watch_sets(snapshot: &Snapshot) -> WatchSets {
    snapshot
        .project
        .agents
        .values()
        .filter_map(|a| Some((a.name.clone(), a.triggers.watch.clone()?)))
        .collect()
}

/// Follows the files of every agent's `watch:` until `stop`.
pub async fn run(
    supervisor: Arc<Supervisor>,
    mut snapshots: watch::Receiver<Arc<Snapshot>>,
    stop: CancellationToken,
) {
    let snapshot = snapshots.borrow_and_update().clone();
    let root = snapshot.project.root.clone();
    let (tx, mut events) = mpsc::unbounded_channel::<PathBuf>();
    let watched = Watched::new(tx.clone());
    let watcher = match folder_watcher(tx) {
        Ok(w) => w,
        Err(e) => {
            tracing::error!("`watch:` triggers are off: cannot start the file watcher: {e}");
            return;
        }
    };
    let canonical = root.canonicalize().unwrap_or_else(|_| root.clone());
    let mut sets = watch_sets(&snapshot);
    let mut files = Files {
        supervisor,
        snapshot,
        pending: HashMap::new(),
    };
    let mut watching = Watching { watcher, watched };
    watching = match watching.rewatch(&canonical, &sets).await {
        Some(w) => w,
        None => return,
    };
    files.scan(&sets).await;
    loop {
        let next = files.next_due(&sets);
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            Some(path) = events.recv() => {
                let mut paths = vec![path];
                while let Ok(more) = events.try_recv() {
                    paths.push(more);
                }
                // A glob's folder (or a folder above it) created since:
                // watch it and look inside. Other events at the root (the
                // database's journal, say) cost nothing more.
                let (root_now, sets_now) = (canonical.clone(), sets.clone());
                let missing: Vec<PathBuf> =
                    blocking("listing the folders", move || base_dirs(&root_now, &sets_now))
                        .await
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|d| !watching.watched.dirs.contains(&canonical.join(d)))
                        .collect();
                let appeared = paths.iter().any(|p| {
                    p.strip_prefix(&canonical).is_ok_and(|rel| {
                        !rel.as_os_str().is_empty() && missing.iter().any(|d| d.starts_with(rel))
                    })
                });
                if appeared {
                    watching = match watching.rewatch(&canonical, &sets).await {
                        Some(w) => w,
                        None => return,
                    };
                    files.scan(&sets).await;
                }
                let now = Instant::now();
                for path in paths {
                    let Ok(relative) = path.strip_prefix(&canonical) else { continue };
                    for (agent, set) in &sets {
                        if files.wanted(set, relative) {
                            files.pending.insert((agent.clone(), relative.to_path_buf()), now);
                        }
                    }
                }
            }
            () = sleep => files.run_due(&sets).await,
            changed = snapshots.changed() => {
                if changed.is_err() {
                    return;
                }
                files.snapshot = snapshots.borrow_and_update().clone();
                let new = watch_sets(&files.snapshot);
                if new != sets {
                    sets = new;
                    files.pending.retain(|(agent, _), _| sets.contains_key(agent));
                    watching = match watching.rewatch(&canonical, &sets).await {
                        Some(w) => w,
                        None => return,
                    };
                    files.scan(&sets).await;
                }
            }
        }
    }
}

/// Every folder the globs of `sets` start from. A glob starting with a
/// wildcard that reaches below the root (`**/*.txt`) starts from the root
/// and from each of its folders as they are now (a folder created later is
/// seen by the root's watch and added then), except the hidden ones and
/// the project's own: watching the whole root recursively would follow
/// `agents/`, `.git/` and the database's journal.
fn base_dirs(root: &Path, sets: &WatchSets) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = sets.values().flat_map(WatchTrigger::base_dirs).collect();
    if sets.values().any(WatchTrigger::reaches_below_root)
        && let Ok(entries) = std::fs::read_dir(root)
    {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let text = name.to_string_lossy();
            if entry.file_type().is_ok_and(|t| t.is_dir())
                && !text.starts_with('.')
                && !CONTROL_DIRS.contains(&text.as_ref())
            {
                dirs.push(PathBuf::from(name));
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    dirs
}

/// A `notify` watcher sending the paths created or changed to `paths`.
fn folder_watcher(paths: mpsc::UnboundedSender<PathBuf>) -> notify::Result<RecommendedWatcher> {
    notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && is_change(&event.kind)
        {
            for path in event.paths {
                let _ = paths.send(path);
            }
        }
    })
}

/// Whether an event of `kind` is a file created or changed: what a
/// `watch:` trigger follows.
fn is_change(kind: &EventKind) -> bool {
    matches!(kind, EventKind::Create(_) | EventKind::Modify(_))
}

/// What is watched now.
struct Watched {
    /// Folders `notify` watches (the root among them when a glob matches
    /// files in it).
    dirs: Vec<PathBuf>,
    /// The root's own watch, when no glob matches files in the root.
    root: Option<RootWatch>,
    /// Where a [`RootWatch`] sends its events (see [`forward_root_events`]).
    root_events: mpsc::UnboundedSender<Batch>,
}

impl Watched {
    /// Nothing watched yet; what is seen will go to `paths`.
    fn new(paths: mpsc::UnboundedSender<PathBuf>) -> Watched {
        Watched {
            dirs: Vec::new(),
            root: None,
            root_events: forward_root_events(paths),
        }
    }
}

/// A channel for a [`RootWatch`]'s batches whose paths created or changed go
/// on to `paths`, as `notify`'s do; it ends when the last root watch and the
/// returned sender are gone.
fn forward_root_events(paths: mpsc::UnboundedSender<PathBuf>) -> mpsc::UnboundedSender<Batch> {
    let (tx, mut batches) = mpsc::unbounded_channel::<Batch>();
    tokio::spawn(async move {
        while let Some(batch) = batches.recv().await {
            match batch {
                Ok(events) => {
                    let changed = events
                        .into_iter()
                        .filter(|e| is_change(&e.kind))
                        .flat_map(|e| e.paths);
                    for path in changed {
                        let _ = paths.send(path);
                    }
                }
                Err(errors) => {
                    for e in errors {
                        tracing::error!(
                            "`watch:` triggers: the project folder's watch failed: {e}"
                        );
                    }
                }
            }
        }
    });
    tx
}

/// Runs `work` on a blocking thread and waits for it. `None` when it
/// panicked (logged): the caller then goes on without its result.
pub(crate) async fn blocking<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => Some(value),
        Err(e) => {
            tracing::error!("`watch:`: {what} failed on its thread: {e}");
            None
        }
    }
}

/// The `notify` watcher and what it watches, handed to a blocking thread
/// and back while watches are added.
struct Watching {
    watcher: RecommendedWatcher,
    watched: Watched,
}

impl Watching {
    /// [`rewatch`] on a blocking thread; `None` (logged) when it panicked:
    /// `watch:` triggers are then off until the next start.
    async fn rewatch(mut self, root: &Path, sets: &WatchSets) -> Option<Watching> {
        let (root, sets) = (root.to_path_buf(), sets.clone());
        blocking("adding the folder watches", move || {
            rewatch(&mut self.watcher, &root, &sets, &mut self.watched);
            self
        })
        .await
    }
}

/// Watches every folder the globs of `sets` start from (or the deepest
/// part of it that exists), until what exists is what is watched.
fn rewatch(watcher: &mut RecommendedWatcher, root: &Path, sets: &WatchSets, watched: &mut Watched) {
    // A folder created between looking for it and watching the folder
    // above it (or while the root's watch was being renewed) told nobody:
    // look again until what exists is what was watched.
    for _ in 0..MAX_REWATCH {
        let seen = existing(root, sets);
        watch_once(watcher, root, sets, watched);
        if existing(root, sets) == seen {
            return;
        }
    }
}

/// How many times [`rewatch`] looks again while folders keep appearing.
const MAX_REWATCH: usize = 8;

/// For each folder the globs of `sets` start from, the deepest part of it
/// that exists.
fn existing(root: &Path, sets: &WatchSets) -> Vec<PathBuf> {
    base_dirs(root, sets)
        .iter()
        .filter_map(|dir| {
            root.join(dir)
                .ancestors()
                .find(|a| a.is_dir())
                .map(Path::to_path_buf)
        })
        .collect()
}

/// One pass of [`rewatch`].
fn watch_once(
    watcher: &mut RecommendedWatcher,
    root: &Path,
    sets: &WatchSets,
    watched: &mut Watched,
) {
    for dir in watched.dirs.drain(..) {
        let _ = watcher.unwatch(&dir);
    }
    let _ = watcher.unwatch(root);
    if sets.is_empty() {
        watched.root = None;
        return;
    }
    for dir in base_dirs(root, sets) {
        let full = root.join(&dir);
        if dir.as_os_str().is_empty() {
            continue;
        }
        if !full.is_dir() {
            // Not there yet: its nearest folder that is (below the root)
            // is watched, so each level is seen when it is created.
            if let Some(parent) = full
                .ancestors()
                .skip(1)
                .take_while(|a| *a != root)
                .find(|a| a.is_dir())
                && watcher.watch(parent, RecursiveMode::NonRecursive).is_ok()
            {
                watched.dirs.push(parent.to_path_buf());
            }
            continue;
        }
        match watcher.watch(&full, RecursiveMode::Recursive) {
            Ok(()) => watched.dirs.push(full),
            Err(e) => {
                tracing::error!(dir = %full.display(), "cannot watch the folder of a `watch:` glob: {e}")
            }
        }
    }
    // The root itself: folders created after start and, for globs without
    // a folder, its files. Those are followed by `notify`, which also sees
    // writes to a file still open, so a file being written runs once it is
    // quiet; otherwise the root's own watch, which stays on across passes.
    if base_dirs(root, sets)
        .iter()
        .any(|d| d.as_os_str().is_empty())
    {
        watched.root = None;
        match watcher.watch(root, RecursiveMode::NonRecursive) {
            Ok(()) => watched.dirs.push(root.to_path_buf()),
            Err(e) => {
                tracing::error!(dir = %root.display(), "cannot watch the project folder for `watch:`: {e}")
            }
        }
    } else if watched.root.is_none() {
        match RootWatch::start(root, Duration::ZERO, watched.root_events.clone()) {
            Ok(watch) => watched.root = Some(watch),
            Err(e) => {
                tracing::error!(dir = %root.display(), "cannot watch the project folder for `watch:`: {e}")
            }
        }
    }
}

struct Files {
    supervisor: Arc<Supervisor>,
    snapshot: Arc<Snapshot>,
    /// (agent, relative path) -> the last event: its run starts once the
    /// agent's debounce has passed since.
    pending: HashMap<(String, PathBuf), Instant>,
}

impl Files {
    /// Whether `relative` is a file of `set` and not the database, its
    /// journal, the lock file or a `.env` file (which no glob written is
    /// let to match, but the database may be anywhere).
    fn wanted(&self, set: &WatchTrigger, relative: &Path) -> bool {
        if !set.matches(relative) {
            return false;
        }
        let project = &self.snapshot.project;
        let full = project.root.join(relative);
        let database = project
            .settings
            .database
            .sqlite_path()
            .map(|p| p.as_os_str().to_owned())
            .unwrap_or_default();
        let name = relative.file_name().unwrap_or_default().to_string_lossy();
        let control = [
            database.to_owned(),
            {
                let mut wal = database.to_owned();
                wal.push("-wal");
                wal
            },
            {
                let mut shm = database.to_owned();
                shm.push("-shm");
                shm
            },
        ];
        !(control.iter().any(|c| *c == full.as_os_str())
            || relative == Path::new(crate::config::settings::LOCK_FILE)
            || name.starts_with(".env"))
    }

    /// When the next pending file is due.
    fn next_due(&self, sets: &WatchSets) -> Option<Instant> {
        self.pending
            .iter()
            .filter_map(|((agent, _), last)| Some(*last + sets.get(agent)?.debounce))
            .min()
    }

    /// Starts the runs of the pending files whose debounce has passed.
    async fn run_due(&mut self, sets: &WatchSets) {
        let now = Instant::now();
        let due: Vec<(String, PathBuf)> = self
            .pending
            .iter()
            .filter(|((agent, _), last)| {
                sets.get(agent)
                    .is_none_or(|set| **last + set.debounce <= now)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for key in due {
            self.pending.remove(&key);
            if sets.contains_key(&key.0) {
                self.file_changed(&key.0, &key.1).await;
            }
        }
    }

    /// Looks at every file under the folders of `sets` and starts the runs
    /// of those not processed yet.
    async fn scan(&mut self, sets: &WatchSets) {
        let root = self.snapshot.project.root.clone();
        let sets_now = sets.clone();
        let found = blocking("scanning the folders", move || {
            let mut found = Vec::new();
            for dir in base_dirs(&root, &sets_now) {
                let depth = if dir.as_os_str().is_empty() {
                    1
                } else {
                    MAX_DEPTH
                };
                walk(&root, &dir, depth, &mut found);
            }
            found.sort();
            found.dedup();
            found
        })
        .await
        .unwrap_or_default();
        for relative in found {
            for (agent, set) in sets {
                if self.wanted(set, &relative) {
                    self.file_changed(agent, &relative).await;
                }
            }
        }
    }

    /// Starts the run of `agent` for the file `relative` as it is now,
    /// unless this version has had one.
    async fn file_changed(&self, agent: &str, relative: &Path) {
        let root = &self.snapshot.project.root;
        let Some(path) = relative.to_str().map(str::to_string) else {
            tracing::warn!(file = %relative.display(), "file name is not UTF-8; not processed");
            return;
        };
        let content_hash = match file_hash_blocking(root.join(relative)).await {
            Ok(Some(hash)) => hash,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(file = %path, "cannot read the file: {e}; not processed");
                return;
            }
        };
        let store = self.supervisor.store();
        match store.watched_file_done(agent, &path, &content_hash).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                tracing::error!(file = %path, "cannot look up the file's run: {e}");
                return;
            }
        }
        let request = RunRequest {
            origin: Some(TriggerVars::Watch {
                path: path.clone(),
                content_hash: content_hash.clone(),
            }),
            claim: Some(TriggerClaim::Watch {
                path: path.clone(),
                content_hash,
            }),
            ..RunRequest::new(agent, Trigger::Watch)
        };
        match self
            .supervisor
            .submit(self.snapshot.clone(), request, None)
            .await
        {
            Ok(run) => {
                tracing::info!(file = %path, agent = %agent, run = %run.id, state = %run.state, "file run started (watch:)")
            }
            Err(SubmitError::AlreadyTriggered) => {}
            Err(e) => {
                tracing::error!(file = %path, agent = %agent, "cannot start the file's run: {e}")
            }
        }
    }
}

/// [`file_hash`] on a blocking thread.
async fn file_hash_blocking(path: PathBuf) -> std::io::Result<Option<String>> {
    blocking("hashing a file", move || file_hash(&path))
        .await
        .unwrap_or_else(|| Err(std::io::Error::other("hashing the file failed")))
}

/// The SHA-256 (hex) of the regular file at `path`; `None` when it is not
/// one (gone, a folder).
fn file_hash(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    }
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(Some(hex::encode(hasher.finalize())))
}

/// Adds the regular files under `root/dir` (relative to `root`), at most
/// `depth` levels down, to `found`. Symbolic links are not followed.
fn walk(root: &Path, dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if depth == 0 || found.len() >= MAX_SCAN {
        return;
    }
    let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let relative = dir.join(entry.file_name());
        if kind.is_file() {
            found.push(relative);
        } else if kind.is_dir() {
            walk(root, &relative, depth - 1, found);
        }
        if found.len() >= MAX_SCAN {
            tracing::warn!(
                "more than {MAX_SCAN} files under the `watch:` folders; the rest are looked at when they change"
            );
            return;
        }
    }
}

/// Moves the processed file `path` (relative to `root`) into the folder
/// `move_to`, unless its content is no longer `content_hash` (it changed
/// during the run: the new version is new work) or it is gone. A file of
/// the same name there is kept: the moved one gets a numbered name.
/// Returns where it went.
pub(crate) fn move_processed(
    root: &Path,
    path: &str,
    content_hash: &str,
    move_to: &Path,
) -> std::io::Result<Option<PathBuf>> {
    let from = root.join(path);
    if file_hash(&from)?.as_deref() != Some(content_hash) {
        return Ok(None);
    }
    let dir = root.join(move_to);
    std::fs::create_dir_all(&dir)?;
    let name = Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (stem, ext) = match name.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => (stem.to_string(), format!(".{ext}")),
        _ => (name.clone(), String::new()),
    };
    let mut to = dir.join(&name);
    let mut n = 1;
    while to.exists() {
        to = dir.join(format!("{stem}.{n}{ext}"));
        n += 1;
    }
    std::fs::rename(&from, &to)?;
    Ok(Some(move_to.join(to.file_name().unwrap_or_default())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(glob: &str) -> WatchSets {
        let text = format!("model: test\nprompt: p\nwatch: {{ paths: \"{glob}\" }}\n");
        let (agent, diags) = crate::config::agent::parse_agent(
            "a",
            Path::new("agents/a.yaml"),
            &text,
            String::new(),
        );
        let watch = agent.and_then(|a| a.triggers.watch);
        BTreeMap::from([(
            "a".to_string(),
            watch.unwrap_or_else(|| panic!("{diags:?}")),
        )])
    }

    /// A folder watcher and nothing watched, sending to the receiver, as
    /// [`run`] has them.
    fn watching() -> (
        RecommendedWatcher,
        Watched,
        mpsc::UnboundedReceiver<PathBuf>,
    ) {
        let (tx, paths) = mpsc::unbounded_channel::<PathBuf>();
        let watched = Watched::new(tx.clone());
        (folder_watcher(tx).unwrap(), watched, paths)
    }

    /// The next path sent, or a panic after a generous deadline.
    async fn next(paths: &mut mpsc::UnboundedReceiver<PathBuf>) -> PathBuf {
        tokio::time::timeout(Duration::from_secs(15), paths.recv())
            .await
            .expect("no file event within 15 s")
            .expect("the event channel closed")
    }

    #[tokio::test]
    async fn the_root_of_folder_globs_ignores_writes_to_open_files_and_sees_new_folders() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (mut watcher, mut watched, mut paths) = watching();
        rewatch(&mut watcher, &root, &sets("inbox/*.md"), &mut watched);
        assert!(watched.root.is_some(), "the root has its own watch");
        assert!(
            !watched.dirs.contains(&root),
            "notify does not watch the root"
        );
        // A database's WAL: one file kept open and written, as the store
        // does. Then a folder appears; it must be the first event.
        let mut wal = std::fs::File::create(root.join("aurad.db-wal")).unwrap();
        let seen = next(&mut paths).await;
        assert_eq!(seen, root.join("aurad.db-wal"), "its creation is seen");
        for _ in 0..20 {
            std::io::Write::write_all(&mut wal, &[0u8; 4096]).unwrap();
            wal.sync_data().unwrap();
        }
        std::fs::create_dir(root.join("inbox")).unwrap();
        assert_eq!(
            next(&mut paths).await,
            root.join("inbox"),
            "the writes to the open file raised no event before the new folder"
        );
        drop(wal);
    }

    #[tokio::test]
    async fn the_root_of_root_globs_is_watched_by_notify_and_no_root_watch_runs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (mut watcher, mut watched, _paths) = watching();
        rewatch(&mut watcher, &root, &sets("inbox/*.md"), &mut watched);
        assert!(watched.root.is_some());
        // A glob of the root's own files: writes to a file still open must
        // be seen (the file runs once quiet), so notify watches the root.
        rewatch(&mut watcher, &root, &sets("*.csv"), &mut watched);
        assert!(watched.root.is_none(), "the root watch was stopped");
        assert!(watched.dirs.contains(&root));
        rewatch(&mut watcher, &root, &WatchSets::new(), &mut watched);
        assert!(watched.root.is_none() && watched.dirs.is_empty());
    }

    /// Hashing runs on a blocking thread: on a runtime with one thread, a
    /// task woken while a large file is hashed runs before the hash is
    /// done. Hashed on that thread instead, the task would wait for it.
    #[tokio::test(flavor = "current_thread")]
    async fn hashing_a_file_leaves_the_runtime_free() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.bin");
        // Sparse: no disk used, but every byte is read and hashed.
        std::fs::File::create(&big)
            .unwrap()
            .set_len(32 << 20)
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let hashing = file_hash_blocking(big);
        tokio::pin!(hashing);
        tokio::spawn(async move {
            let _ = tx.send(());
        });
        tokio::select! {
            biased;
            hashed = &mut hashing => panic!("the hash ({hashed:?}) was done before a task that was ready could run"),
            _ = rx => {}
        }
        let hash = hashing.await.unwrap().unwrap();
        assert_eq!(hash.len(), 64);
    }

    #[test]
    fn a_processed_file_moves_unless_it_changed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("inbox")).unwrap();
        std::fs::write(root.join("inbox/a.md"), "one").unwrap();
        let hash = file_hash(&root.join("inbox/a.md")).unwrap().unwrap();
        let done = Path::new("inbox/done");
        // Changed since its run started: stays.
        assert_eq!(
            move_processed(root, "inbox/a.md", "other", done).unwrap(),
            None
        );
        assert!(root.join("inbox/a.md").exists());
        assert_eq!(
            move_processed(root, "inbox/a.md", &hash, done).unwrap(),
            Some(PathBuf::from("inbox/done/a.md"))
        );
        assert_eq!(
            std::fs::read_to_string(root.join("inbox/done/a.md")).unwrap(),
            "one"
        );
        // A second file of the same name keeps the first.
        std::fs::write(root.join("inbox/a.md"), "one").unwrap();
        assert_eq!(
            move_processed(root, "inbox/a.md", &hash, done).unwrap(),
            Some(PathBuf::from("inbox/done/a.1.md"))
        );
        // Gone: nothing to move.
        assert_eq!(
            move_processed(root, "inbox/a.md", &hash, done).unwrap(),
            None
        );
    }
}
