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
//! This is not the config watcher (`watcher.rs`, reloads): it has its own
//! `notify` watcher on the globs' folders. Depends on the supervisor, the
//! snapshot and the store.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher as _};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::runner::RunRequest;
use super::supervisor::{SubmitError, Supervisor};
use super::template::TriggerVars;
use crate::config::WatchTrigger;
use crate::registry::Snapshot;
use crate::store::TriggerClaim;

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
    let mut watcher =
        match notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if let Ok(event) = event
                && matches!(event.kind, EventKind::Create(_) | EventKind::Modify(_))
            {
                for path in event.paths {
                    let _ = tx.send(path);
                }
            }
        }) {
            Ok(w) => w,
            Err(e) => {
                tracing::error!("`watch:` triggers are off: cannot start the file watcher: {e}");
                return;
            }
        };
    let canonical = root.canonicalize().unwrap_or_else(|_| root.clone());
    let mut sets = watch_sets(&snapshot);
    let mut watched: Vec<PathBuf> = Vec::new();
    let mut files = Files {
        supervisor,
        snapshot,
        pending: HashMap::new(),
    };
    rewatch(&mut watcher, &canonical, &sets, &mut watched);
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
                let missing: Vec<PathBuf> = base_dirs(&sets)
                    .into_iter()
                    .filter(|d| !watched.contains(&canonical.join(d)))
                    .collect();
                let appeared = paths.iter().any(|p| {
                    p.strip_prefix(&canonical).is_ok_and(|rel| {
                        !rel.as_os_str().is_empty() && missing.iter().any(|d| d.starts_with(rel))
                    })
                });
                if appeared {
                    rewatch(&mut watcher, &canonical, &sets, &mut watched);
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
                    rewatch(&mut watcher, &canonical, &sets, &mut watched);
                    files.scan(&sets).await;
                }
            }
        }
    }
}

/// Every folder the globs of `sets` start from.
fn base_dirs(sets: &WatchSets) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = sets.values().flat_map(WatchTrigger::base_dirs).collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Watches the folders of `sets` that exist (recursively), and the root
/// (for folders created later); `watched` is what is watched now.
fn rewatch(
    watcher: &mut RecommendedWatcher,
    root: &Path,
    sets: &WatchSets,
    watched: &mut Vec<PathBuf>,
) {
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
    base_dirs(sets)
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
    watched: &mut Vec<PathBuf>,
) {
    for dir in watched.drain(..) {
        let _ = watcher.unwatch(&dir);
    }
    let _ = watcher.unwatch(root);
    if sets.is_empty() {
        return;
    }
    for dir in base_dirs(sets) {
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
                watched.push(parent.to_path_buf());
            }
            continue;
        }
        match watcher.watch(&full, RecursiveMode::Recursive) {
            Ok(()) => watched.push(full),
            Err(e) => {
                tracing::error!(dir = %full.display(), "cannot watch the folder of a `watch:` glob: {e}")
            }
        }
    }
    // The root itself: files of globs without a folder, and folders
    // created after start.
    if let Err(e) = watcher.watch(root, RecursiveMode::NonRecursive) {
        tracing::error!(dir = %root.display(), "cannot watch the project folder for `watch:`: {e}");
    }
    if base_dirs(sets).iter().any(|d| d.as_os_str().is_empty()) {
        watched.push(root.to_path_buf());
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
        let mut found = Vec::new();
        for dir in base_dirs(sets) {
            let depth = if dir.as_os_str().is_empty() {
                1
            } else {
                MAX_DEPTH
            };
            walk(&root, &dir, depth, &mut found);
        }
        found.sort();
        found.dedup();
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
        let content_hash = match file_hash(&root.join(relative)) {
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
            agent: agent.to_string(),
            trigger: "watch".into(),
            origin: Some(TriggerVars::Watch {
                path: path.clone(),
                content_hash: content_hash.clone(),
            }),
            claim: Some(TriggerClaim::Watch {
                path: path.clone(),
                content_hash,
            }),
            ..RunRequest::default()
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
pub(super) fn move_processed(
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
