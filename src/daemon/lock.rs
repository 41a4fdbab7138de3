//! One daemon per project directory when the store is a SQLite file: an
//! exclusive lock on `<root>/.aurad.lock` (std's `File::try_lock`, which is
//! `flock` on Linux), held for the life of the process. With PostgreSQL the
//! daemons are nodes that coordinate through the database, so several may
//! serve one project directory (a shared volume, or a read-only one such as
//! a Kubernetes ConfigMap): nothing is locked or written in the project;
//! each daemon's own lock is on its address record in its private folder
//! (`config::private`).
//!
//! May depend on std, the `config` constant of its name and `types`' `Database`. The
//! lock belongs to the open file, so the kernel releases it when the process
//! ends in any way (crash, `kill -9`);
//! there is no stale lock to clean up. The file is opened close-on-exec (std
//! does that), so tool and MCP child processes never inherit the lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::types::Database;

/// The lock file's name inside the project directory.
pub use crate::config::settings::LOCK_FILE;

/// Holds the project lock until dropped. Dropping it closes the file, which
/// releases the lock; the file itself stays (deleting it would race with a
/// new daemon that has just opened it).
#[derive(Debug)]
pub struct ProjectLock {
    /// Kept open: closing it releases the lock.
    _file: Option<File>,
    path: Option<PathBuf>,
}

impl ProjectLock {
    /// The lock `database` calls for: the project's (`acquire`) for a
    /// SQLite file, none for PostgreSQL (`root` must still be a directory).
    pub fn for_store(root: &Path, database: &Database) -> Result<ProjectLock, String> {
        match database {
            Database::Sqlite(_) => ProjectLock::acquire(root),
            Database::Postgres(_) => {
                must_be_dir(root)?;
                Ok(ProjectLock {
                    _file: None,
                    path: None,
                })
            }
        }
    }

    /// Takes the lock of the project at `root` without waiting, and writes
    /// our pid into the lock file. Fails with a message naming the other
    /// daemon's pid when the project is already served.
    pub fn acquire(root: &Path) -> Result<ProjectLock, String> {
        must_be_dir(root)?;
        let path = root.join(LOCK_FILE);
        // No truncation here: the file may hold the running daemon's pid,
        // which the error message below reads.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| {
                format!(
                    "cannot open the lock file {}: {e}; check that the project directory is \
                     writable (with a SQLite store one daemon per project directory holds \
                     it; with `database: postgres://...` several nodes may share a \
                     read-only project directory)",
                    path.display()
                )
            })?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let who = match read_pid(&mut file) {
                    Some(pid) => format!("another `aurad serve` (pid {pid})"),
                    None => "another process".to_owned(),
                };
                return Err(format!(
                    "{who} is already running on {}; stop it first, or use --dir for another \
                     project",
                    root.display()
                ));
            }
            Err(TryLockError::Error(e)) => {
                return Err(format!(
                    "cannot lock {}: {e}; the file system may not support locks (e.g. some \
                     network mounts): run the project from a local directory",
                    path.display()
                ));
            }
        }
        file.set_len(0)
            .and_then(|()| file.write_all_at(format!("{}\n", std::process::id()).as_bytes(), 0))
            .map_err(|e| {
                format!(
                    "cannot write our pid into the lock file {}: {e}; check free space and \
                     permissions",
                    path.display()
                )
            })?;
        Ok(ProjectLock {
            _file: Some(file),
            path: Some(path),
        })
    }

    /// The lock file's path; `None` when the store needs no project lock.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
}

fn must_be_dir(root: &Path) -> Result<(), String> {
    if root.is_dir() {
        return Ok(());
    }
    Err(format!(
        "project directory {} does not exist or is not a directory; create it, \
         or pass --dir with an existing project",
        root.display()
    ))
}

/// Whether a daemon holds the lock of the project at `root`, without
/// taking it for longer than the question (a shared lock, released at
/// once, so a daemon starting meanwhile is not refused): `Some` with the
/// pid it wrote (if readable) when one runs, `None` when none does.
pub fn holder(root: &Path) -> Option<Option<u32>> {
    let mut file = File::open(root.join(LOCK_FILE)).ok()?;
    match file.try_lock_shared() {
        Err(TryLockError::WouldBlock) => Some(read_pid(&mut file)),
        Ok(()) | Err(TryLockError::Error(_)) => None,
    }
}

/// The pid the lock holder wrote, if the file holds one.
fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok().filter(|pid| *pid > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_acquire_fails_naming_our_pid_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = ProjectLock::acquire(dir.path()).unwrap();
        assert_eq!(first.path().unwrap(), dir.path().join(LOCK_FILE));
        let sqlite = Database::Sqlite(dir.path().join("aurad.db"));
        let err = ProjectLock::for_store(dir.path(), &sqlite).unwrap_err();
        assert!(err.contains("already running"), "{err}");
        let written = std::fs::read_to_string(first.path().unwrap()).unwrap();
        assert_eq!(written, format!("{}\n", std::process::id()));

        let err = ProjectLock::acquire(dir.path()).unwrap_err();
        let pid = std::process::id();
        assert!(
            err.contains(&format!(
                "another `aurad serve` (pid {pid}) is already running"
            )),
            "{err}"
        );
        assert!(err.contains(&dir.path().display().to_string()), "{err}");
        assert!(err.contains("--dir"), "{err}");
        // A failed attempt leaves the holder's pid in place.
        assert_eq!(
            std::fs::read_to_string(first.path().unwrap()).unwrap(),
            written
        );

        drop(first);
        let again = ProjectLock::acquire(dir.path()).unwrap();
        assert!(again.path().unwrap().exists(), "the lock file stays");
    }

    #[test]
    fn the_holder_is_named_while_the_lock_is_held() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(holder(dir.path()), None, "no lock file");
        let lock = ProjectLock::acquire(dir.path()).unwrap();
        assert_eq!(holder(dir.path()), Some(Some(std::process::id())));
        drop(lock);
        assert_eq!(holder(dir.path()), None);
        // Asking took no lock that a daemon would trip over.
        ProjectLock::acquire(dir.path()).unwrap();
    }

    #[test]
    fn an_unreadable_pid_says_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let first = ProjectLock::acquire(dir.path()).unwrap();
        std::fs::write(first.path().unwrap(), "garbage").unwrap();
        let err = ProjectLock::acquire(dir.path()).unwrap_err();
        assert!(
            err.starts_with("another process is already running on"),
            "{err}"
        );
    }

    #[test]
    fn a_stale_file_from_a_dead_daemon_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_FILE), "999999999\n").unwrap();
        let lock = ProjectLock::acquire(dir.path()).unwrap();
        let written = std::fs::read_to_string(lock.path().unwrap()).unwrap();
        assert_eq!(written, format!("{}\n", std::process::id()));
    }

    #[test]
    fn with_postgresql_nothing_is_locked_or_written_in_the_project() {
        let dir = tempfile::tempdir().unwrap();
        let pg = Database::from_setting("postgres://127.0.0.1/x", dir.path());
        let first = ProjectLock::for_store(dir.path(), &pg).unwrap();
        let second = ProjectLock::for_store(dir.path(), &pg).unwrap();
        assert_eq!((first.path(), second.path()), (None, None));
        assert!(!dir.path().join(LOCK_FILE).exists());
        let missing = dir.path().join("gone");
        let err = ProjectLock::for_store(&missing, &pg).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
    }

    #[test]
    fn a_missing_root_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-project");
        let err = ProjectLock::acquire(&missing).unwrap_err();
        assert!(err.contains("no-such-project"), "{err}");
        assert!(err.contains("does not exist"), "{err}");
        assert!(!missing.exists());
    }
}
