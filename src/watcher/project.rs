//! Turns debounced `notify` events on the project's configuration into
//! reload signals, nothing else.
//!
//! [`Watcher::start`] watches the project root non-recursively, the
//! `agents/`, `skills/`, `tools.d/`, `.agents/skills/` and `.claude/skills/`
//! trees recursively, and `.agents/` and `.claude/` non-recursively (so that
//! a `skills/` folder created in them is seen);
//! [`Watcher::changed`] yields each batch of changed paths (relative to the
//! root, deduplicated, sorted) that can affect the loaded configuration.
//! Deciding what to do with a batch (reload a snapshot) is the caller's job.
//!
//! The root itself is watched by [`RootWatch`] (the database's writes there
//! wake nothing), the rest by a [`TreeWatch`] (no thread wakes while nothing
//! changes); both deliver on one channel.
//!
//! May depend on `notify`, `libc`, `tokio` (sync only), `tracing`,
//! `batch`, `root` and `tree`; nothing else of ours.
//!
//! What counts as a change: anything under the trees, the folders holding
//! them (`.agents`, `.claude` themselves, not their other files), the root
//! files `mcp.json`, `.mcp.json` and `aurad.yaml`, and `.vscode/mcp.json`
//! (the `.vscode` directory is watched non-recursively for it). Everything else in the root (the SQLite
//! files, the lock file, editor leftovers) is ignored, as are `Access` events
//! (the daemon reading its own config opens files) and editor scratch files
//! anywhere (`*.swp`, `*.swo`, `*.swx`, `*~`, `.#*`, `4913`). A tree created
//! after start is watched from then on and reported itself. Watcher errors and
//! "events were dropped" notices are reported as [`WHOLE_TREE`], so a reload
//! happens rather than a change being lost.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use notify::{EventKind, RecursiveMode};
use tokio::sync::mpsc;

use super::batch::Batch;
use super::root::RootWatch;
use super::tree::TreeWatch;

/// The directories watched recursively (relative to the project root).
pub const TREES: [&str; 6] = [
    "agents",
    "channels",
    "skills",
    "tools.d",
    ".agents/skills",
    ".claude/skills",
];

/// The files of the project root that count as changes.
pub const ROOT_FILES: [&str; 3] = ["mcp.json", ".mcp.json", "aurad.yaml"];

/// Files one directory down that count as changes: (directory, file).
pub const NESTED_FILES: [(&str, &str); 1] = [(".vscode", "mcp.json")];

/// The path reported when the whole project must be considered changed: the
/// watcher reported an error or dropped events.
pub const WHOLE_TREE: &str = ".";

/// Debounce intervals below this are raised to it (a zero interval would
/// send each event on its own).
const MIN_DEBOUNCE: Duration = Duration::from_millis(10);

/// A running file watcher on one project directory. Dropping it stops the
/// watching.
pub struct Watcher {
    /// The canonical project root; event paths are made relative to it.
    root: PathBuf,
    trees: TreeWatch,
    /// The root's own watch; dropped with the watcher.
    _root_watch: RootWatch,
    events: mpsc::UnboundedReceiver<Batch>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl Watcher {
    /// Starts watching the project at `root`; events closer together than
    /// `debounce` are merged into one batch.
    pub fn start(root: &Path, debounce: Duration) -> Result<Watcher, String> {
        let root = root.canonicalize().map_err(|e| {
            format!(
                "cannot watch project directory {}: {e}; check that it exists and is readable, \
                 or pass --dir with the right project",
                root.display()
            )
        })?;
        if !root.is_dir() {
            return Err(format!(
                "cannot watch {}: it is not a directory; pass the project directory with --dir",
                root.display()
            ));
        }
        let (tx, events) = mpsc::unbounded_channel();
        let debounce = debounce.max(MIN_DEBOUNCE);
        // The root first: a tree created between this and the loop below is
        // then seen as an event and watched in `changed`.
        let root_watch = RootWatch::start(&root, debounce, tx.clone()).map_err(|e| {
            // inotify's "no more watches" (ENOSPC), as `notify` reports it.
            let error = match e.raw_os_error() {
                Some(libc::ENOSPC) => notify::Error::new(notify::ErrorKind::MaxFilesWatch),
                _ => notify::Error::io(e),
            };
            watch_error(&root, &error)
        })?;
        let mut trees = TreeWatch::start(debounce, tx)?;
        for tree in TREES {
            if let Some(parent) = nested_parent(tree) {
                let dir = root.join(parent);
                if dir.is_dir() {
                    trees
                        .watch(&dir, RecursiveMode::NonRecursive)
                        .map_err(|e| watch_error(&dir, &e))?;
                }
            }
            let dir = root.join(tree);
            if dir.is_dir() {
                trees
                    .watch(&dir, RecursiveMode::Recursive)
                    .map_err(|e| watch_error(&dir, &e))?;
            }
        }
        for (dir, _) in NESTED_FILES {
            let dir = root.join(dir);
            if dir.is_dir() {
                trees
                    .watch(&dir, RecursiveMode::NonRecursive)
                    .map_err(|e| watch_error(&dir, &e))?;
            }
        }
        Ok(Watcher {
            root,
            trees,
            _root_watch: root_watch,
            events,
        })
    }

    /// The canonical project root the reported paths are relative to.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Waits for the next batch of changed paths, relative to the project
    /// root, deduplicated and sorted; batches holding only ignored paths are
    /// skipped. [`WHOLE_TREE`] in a batch means "reload everything". `None`
    /// when the watcher has stopped.
    ///
    /// Cancel-safe (usable in `tokio::select!`): the only `.await` is the
    /// channel receive, so a cancelled call loses no change.
    pub async fn changed(&mut self) -> Option<Vec<PathBuf>> {
        loop {
            let first = self.events.recv().await?;
            let mut batch = BTreeSet::new();
            self.absorb(first, &mut batch);
            // Whatever else is already waiting goes into the same batch.
            while let Ok(more) = self.events.try_recv() {
                self.absorb(more, &mut batch);
            }
            self.watch_new_trees(&mut batch);
            if !batch.is_empty() {
                return Some(batch.into_iter().collect());
            }
        }
    }

    /// Adds the paths of one delivery that count as changes.
    fn absorb(&self, result: Batch, batch: &mut BTreeSet<PathBuf>) {
        match result {
            Ok(events) => {
                for event in &events {
                    collect_event(&self.root, event, batch);
                }
            }
            Err(errors) => {
                for error in &errors {
                    tracing::warn!(
                        root = %self.root.display(),
                        "file watcher error: {error}; reloading the whole project"
                    );
                }
                batch.insert(PathBuf::from(WHOLE_TREE));
            }
        }
    }

    /// Starts (or refreshes) the recursive watch of every tree whose
    /// directory entry appears in `batch` (created, renamed into place), or of
    /// all of them after a whole-tree change. Watching an already watched
    /// directory again is harmless.
    fn watch_new_trees(&mut self, batch: &mut BTreeSet<PathBuf>) {
        let everything = batch.contains(Path::new(WHOLE_TREE));
        for tree in TREES {
            let parent = nested_parent(tree);
            let appeared = |p: &str| batch.contains(Path::new(p));
            if !everything && !appeared(tree) && !parent.is_some_and(appeared) {
                continue;
            }
            if let Some(parent) = parent {
                let dir = self.root.join(parent);
                if dir.is_dir()
                    && let Err(e) = self.trees.watch(&dir, RecursiveMode::NonRecursive)
                {
                    tracing::warn!("{}", watch_error(&dir, &e));
                    batch.insert(PathBuf::from(WHOLE_TREE));
                }
            }
            let dir = self.root.join(tree);
            if !dir.is_dir() {
                continue;
            }
            if let Err(e) = self.trees.watch(&dir, RecursiveMode::Recursive) {
                tracing::warn!("{}", watch_error(&dir, &e));
                batch.insert(PathBuf::from(WHOLE_TREE));
            }
        }
        for (dir, _) in NESTED_FILES {
            let path = self.root.join(dir);
            if (everything || batch.contains(Path::new(dir)))
                && path.is_dir()
                && let Err(e) = self.trees.watch(&path, RecursiveMode::NonRecursive)
            {
                tracing::warn!("{}", watch_error(&path, &e));
                batch.insert(PathBuf::from(WHOLE_TREE));
            }
        }
    }
}

/// An error message for a failed `watch` of `path`.
fn watch_error(path: &Path, error: &notify::Error) -> String {
    match error.kind {
        notify::ErrorKind::MaxFilesWatch => format!(
            "cannot watch {}: the system limit on watched directories is reached; raise it \
             (e.g. `sysctl fs.inotify.max_user_watches=524288`) or remove unneeded directories",
            path.display()
        ),
        _ => format!(
            "cannot watch {}: {error}; check that it is readable",
            path.display()
        ),
    }
}

/// Adds the paths of `event` that count as changes to `batch`.
fn collect_event(root: &Path, event: &notify::Event, batch: &mut BTreeSet<PathBuf>) {
    if event.need_rescan() {
        tracing::warn!(
            root = %root.display(),
            "the file watcher dropped events; reloading the whole project"
        );
        batch.insert(PathBuf::from(WHOLE_TREE));
        return;
    }
    if matches!(event.kind, EventKind::Access(_)) {
        return;
    }
    for path in &event.paths {
        if path == root {
            // The project directory itself was removed or moved away.
            if matches!(
                event.kind,
                EventKind::Remove(_) | EventKind::Modify(notify::event::ModifyKind::Name(_))
            ) {
                batch.insert(PathBuf::from(WHOLE_TREE));
            }
            continue;
        }
        if let Some(rel) = relevant(root, path) {
            batch.insert(rel);
        }
    }
}

/// `path` relative to `root` when a change of it can affect the loaded
/// configuration, else `None`.
fn relevant(root: &Path, path: &Path) -> Option<PathBuf> {
    let rel = path.strip_prefix(root).ok()?;
    let mut parts = Vec::new();
    for component in rel.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_str()?),
            _ => return None,
        }
    }
    let (first, last) = (*parts.first()?, *parts.last()?);
    let root_file = parts.len() == 1
        && (ROOT_FILES.contains(&last) || NESTED_FILES.iter().any(|(dir, _)| *dir == last));
    let nested_file = parts.len() == 2 && NESTED_FILES.contains(&(first, last));
    let counts = if root_file || nested_file {
        true
    } else {
        TREES.iter().any(|tree| {
            let tree: Vec<&str> = tree.split('/').collect();
            // The tree, a folder holding it, or a file in it.
            tree.starts_with(&parts)
                || (parts.starts_with(&tree)
                    && parts.len() > tree.len()
                    && !is_editor_scratch(last)
                    // `agents/NAME.test.yaml` is read by `aurad test` only.
                    && !(first == "agents" && crate::config::cases::is_test_file(rel)))
        })
    };
    counts.then(|| rel.to_path_buf())
}

/// The folder holding `tree` when it is not the project root (`.agents` for
/// `.agents/skills`).
fn nested_parent(tree: &str) -> Option<&str> {
    tree.rsplit_once('/').map(|(parent, _)| parent)
}

/// Editor swap, backup, lock and probe files, which are never configuration.
fn is_editor_scratch(name: &str) -> bool {
    name == "4913"
        || name.ends_with('~')
        || name.starts_with(".#")
        || name.ends_with(".swp")
        || name.ends_with(".swo")
        || name.ends_with(".swx")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const DEBOUNCE: Duration = Duration::from_millis(100);
    const PATIENCE: Duration = Duration::from_secs(15);

    fn project() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("create a temp dir");
        let root = dir.path().canonicalize().expect("canonical temp dir");
        (dir, root)
    }

    /// The next batch, failing the test if none arrives in time.
    async fn next_batch(watcher: &mut Watcher) -> Vec<PathBuf> {
        tokio::time::timeout(PATIENCE, watcher.changed())
            .await
            .expect("no change reported in time")
            .expect("the watcher stopped")
    }

    /// Batches until one holds `want`; returns that batch.
    async fn wait_for(watcher: &mut Watcher, want: &str) -> Vec<PathBuf> {
        let deadline = Instant::now() + PATIENCE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let batch = tokio::time::timeout(left, watcher.changed())
                .await
                .unwrap_or_else(|_| panic!("{want} never reported; batches seen: {seen:?}"))
                .expect("the watcher stopped");
            if batch.iter().any(|p| p == Path::new(want)) {
                return batch;
            }
            seen.push(batch);
        }
    }

    fn paths(list: &[&str]) -> Vec<PathBuf> {
        list.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn only_config_paths_count() {
        let root = Path::new("/p");
        let rel = |p: &str| relevant(root, &root.join(p)).map(|r| r.display().to_string());
        for yes in [
            "mcp.json",
            ".mcp.json",
            ".vscode",
            ".vscode/mcp.json",
            "aurad.yaml",
            "agents",
            "agents/a.yaml",
            "skills/web/SKILL.md",
            "skills/web",
            "tools.d/w.yaml",
            "tools.d",
            ".agents",
            ".agents/skills",
            ".agents/skills/web/SKILL.md",
            ".claude",
            ".claude/skills/web/SKILL.md",
        ] {
            assert_eq!(rel(yes).as_deref(), Some(yes), "{yes} must count");
        }
        for no in [
            "aurad.db",
            "aurad.db-wal",
            "aurad.db-shm",
            ".aurad.lock",
            "mcp.json.swp",
            ".mcp.json.swp",
            "aurad.yaml~",
            ".#mcp.json",
            "4913",
            "README.md",
            "other/agents/a.yaml",
            "agents/.a.yaml.swp",
            "agents/a.yaml~",
            "agents/a.test.yaml",
            "skills/web/.#SKILL.md",
            "skills/web/4913",
            ".claude/settings.json",
            ".claude/commands/x.md",
            ".agents/skills/web/SKILL.md~",
            "other/.claude/skills/web/SKILL.md",
            ".vscode/settings.json",
            ".vscode/x/mcp.json",
        ] {
            assert_eq!(rel(no), None, "{no} must be ignored");
        }
        assert_eq!(relevant(root, Path::new("/elsewhere/mcp.json")), None);
    }

    #[test]
    fn access_events_are_ignored_and_rescans_reload_everything() {
        let root = Path::new("/p");
        let event =
            |kind: EventKind, path: &str| notify::Event::new(kind).add_path(root.join(path));
        let mut batch = BTreeSet::new();
        let open = notify::event::AccessKind::Open(notify::event::AccessMode::Any);
        collect_event(
            root,
            &event(EventKind::Access(open), "mcp.json"),
            &mut batch,
        );
        assert!(batch.is_empty());

        let rename = EventKind::Modify(notify::event::ModifyKind::Name(
            notify::event::RenameMode::Both,
        ));
        let both = notify::Event::new(rename)
            .add_path(root.join("agents/.a.yaml.swp"))
            .add_path(root.join("agents/a.yaml"));
        collect_event(root, &both, &mut batch);
        assert_eq!(
            batch.iter().cloned().collect::<Vec<_>>(),
            paths(&["agents/a.yaml"])
        );

        let mut batch = BTreeSet::new();
        let rescan = notify::Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        collect_event(root, &rescan, &mut batch);
        assert!(batch.contains(Path::new(WHOLE_TREE)));
    }

    #[tokio::test]
    async fn watcher_errors_become_a_whole_tree_change() {
        let (_dir, root) = project();
        let watcher = Watcher::start(&root, DEBOUNCE).unwrap();
        let mut batch = BTreeSet::new();
        watcher.absorb(Err(vec![notify::Error::generic("boom")]), &mut batch);
        assert_eq!(batch.into_iter().collect::<Vec<_>>(), paths(&[WHOLE_TREE]));
    }

    #[test]
    fn a_missing_root_is_a_clear_error() {
        let (_dir, root) = project();
        let err = Watcher::start(&root.join("nope"), DEBOUNCE).unwrap_err();
        assert!(err.contains("nope"), "{err}");
        assert!(err.contains("check that it exists"), "{err}");
    }

    #[test]
    fn watcher_is_send() {
        fn send<T: Send>() {}
        send::<Watcher>();
    }

    #[tokio::test]
    async fn agent_files_created_modified_saved_atomically_and_deleted() {
        let (_dir, root) = project();
        let agents = root.join("agents");
        std::fs::create_dir(&agents).unwrap();
        for name in ["b.yaml", "c.yaml", "d.yaml"] {
            std::fs::write(agents.join(name), "description: old\n").unwrap();
        }
        let mut watcher = Watcher::start(&root, DEBOUNCE).unwrap();

        std::fs::write(agents.join("a.yaml"), "description: new\n").unwrap();
        wait_for(&mut watcher, "agents/a.yaml").await;

        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(agents.join("b.yaml"))
            .unwrap();
        std::io::Write::write_all(&mut file, b"model: openai/gpt-4o\n").unwrap();
        drop(file);
        wait_for(&mut watcher, "agents/b.yaml").await;

        // Save as editors do: write a temp file, rename it over the target.
        let tmp = agents.join(".c.yaml.tmp1234");
        std::fs::write(&tmp, "description: saved\n").unwrap();
        std::fs::rename(&tmp, agents.join("c.yaml")).unwrap();
        wait_for(&mut watcher, "agents/c.yaml").await;

        std::fs::remove_file(agents.join("d.yaml")).unwrap();
        wait_for(&mut watcher, "agents/d.yaml").await;
    }

    #[tokio::test]
    async fn a_new_skill_directory_and_its_file_are_seen() {
        let (_dir, root) = project();
        std::fs::create_dir(root.join("skills")).unwrap();
        let mut watcher = Watcher::start(&root, DEBOUNCE).unwrap();

        let skill = root.join("skills/new-skill");
        std::fs::create_dir(&skill).unwrap();
        std::fs::write(skill.join("SKILL.md"), "---\nname: new-skill\n---\n").unwrap();
        let batch = next_batch(&mut watcher).await;
        assert!(
            batch.iter().all(|p| p.starts_with("skills/new-skill")) && !batch.is_empty(),
            "{batch:?}"
        );

        // The new directory is watched: a later edit inside it is reported.
        std::fs::write(skill.join("SKILL.md"), "---\nname: new-skill\n---\nbody\n").unwrap();
        wait_for(&mut watcher, "skills/new-skill/SKILL.md").await;
    }

    #[tokio::test]
    async fn database_lock_and_scratch_files_produce_no_batch() {
        let (_dir, root) = project();
        std::fs::create_dir(root.join("agents")).unwrap();
        let mut watcher = Watcher::start(&root, DEBOUNCE).unwrap();

        for noise in [
            "aurad.db",
            "aurad.db-wal",
            "aurad.db-shm",
            ".aurad.lock",
            ".mcp.json.swp",
            "4913",
            "notes.txt",
            "agents/.a.yaml.swp",
        ] {
            std::fs::write(root.join(noise), "x").unwrap();
        }
        std::fs::write(root.join("mcp.json"), "{\"servers\": []}").unwrap();
        assert_eq!(next_batch(&mut watcher).await, paths(&["mcp.json"]));
    }

    #[tokio::test]
    async fn a_tree_created_after_start_is_reported_and_watched() {
        let (_dir, root) = project();
        let mut watcher = Watcher::start(&root, DEBOUNCE).unwrap();

        std::fs::create_dir(root.join("agents")).unwrap();
        wait_for(&mut watcher, "agents").await;

        std::fs::write(root.join("agents/late.yaml"), "description: late\n").unwrap();
        wait_for(&mut watcher, "agents/late.yaml").await;
    }

    #[tokio::test]
    async fn claude_and_agents_skill_folders_are_watched_even_when_created_later() {
        let (_dir, root) = project();
        std::fs::create_dir_all(root.join(".agents/skills/a")).unwrap();
        std::fs::create_dir(root.join(".claude")).unwrap();
        let mut watcher = Watcher::start(&root, DEBOUNCE).unwrap();

        std::fs::write(root.join(".agents/skills/a/SKILL.md"), "---\n").unwrap();
        wait_for(&mut watcher, ".agents/skills/a/SKILL.md").await;

        // `.claude/skills` appears after start, inside an existing `.claude`.
        std::fs::create_dir(root.join(".claude/skills")).unwrap();
        wait_for(&mut watcher, ".claude/skills").await;
        std::fs::create_dir(root.join(".claude/skills/b")).unwrap();
        wait_for(&mut watcher, ".claude/skills/b").await;
        // The new folder is watched (recursively): an edit inside it is seen.
        std::fs::write(root.join(".claude/skills/b/SKILL.md"), "---\n").unwrap();
        wait_for(&mut watcher, ".claude/skills/b/SKILL.md").await;
    }

    #[tokio::test]
    async fn the_other_mcp_files_are_reported_even_in_a_late_vscode_directory() {
        let (_dir, root) = project();
        let mut watcher = Watcher::start(&root, DEBOUNCE).unwrap();

        std::fs::write(root.join(".mcp.json"), "{}").unwrap();
        wait_for(&mut watcher, ".mcp.json").await;
        std::fs::create_dir(root.join(".vscode")).unwrap();
        wait_for(&mut watcher, ".vscode").await;
        std::fs::write(root.join(".vscode/settings.json"), "{}").unwrap();
        std::fs::write(root.join(".vscode/mcp.json"), "{\"servers\": {}}").unwrap();
        let batch = wait_for(&mut watcher, ".vscode/mcp.json").await;
        assert!(!batch.contains(&PathBuf::from(".vscode/settings.json")));
    }

    #[tokio::test]
    async fn aurad_yaml_saved_by_rename_is_reported() {
        let (_dir, root) = project();
        std::fs::write(root.join("aurad.yaml"), "listen: 127.0.0.1:7777\n").unwrap();
        let mut watcher = Watcher::start(&root, DEBOUNCE).unwrap();

        std::fs::write(root.join("aurad.yaml.tmp"), "listen: 127.0.0.1:7778\n").unwrap();
        std::fs::rename(root.join("aurad.yaml.tmp"), root.join("aurad.yaml")).unwrap();
        assert_eq!(next_batch(&mut watcher).await, paths(&["aurad.yaml"]));
    }
}
