//! Notices the database's files going away under a running store: the
//! database file, its `-wal` and `-shm` deleted or replaced (by a person,
//! a cleanup script, a tool). SQLite keeps writing to the open, deleted
//! files without an error, so every run accepted afterwards would be gone
//! at the next start. The guard remembers each file's device and inode
//! (the `-wal` and `-shm` from when they first exist) and compares them
//! after every write transaction's commit; once a difference is seen the
//! store is lost for good: each later write is refused with
//! [`StoreError::Lost`], naming the file and what to do. A few `stat`
//! calls per transaction. Depends on std and `store::error`.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::store::error::StoreError;

/// What SQLite keeps beside the database file while it is open.
const COMPANIONS: [&str; 2] = ["-wal", "-shm"];

/// The files of one database and who they were.
pub(super) struct FileGuard {
    state: Mutex<State>,
}

struct State {
    /// The database file, then its companions, with the identity each had
    /// when first seen (`None`: not seen yet).
    files: Vec<(PathBuf, Option<(u64, u64)>)>,
    /// Why the store is lost, once it is.
    lost: Option<String>,
}

impl FileGuard {
    /// The guard of the database at `path`, opened just now.
    pub(super) fn new(path: &Path) -> FileGuard {
        let mut files = vec![(path.to_path_buf(), None)];
        for suffix in COMPANIONS {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            files.push((PathBuf::from(name), None));
        }
        let guard = FileGuard {
            state: Mutex::new(State { files, lost: None }),
        };
        // Remembers who the files are now; nothing can be lost yet.
        let _ = guard.check();
        guard
    }

    /// [`StoreError::Lost`] once a check found the files gone; no system
    /// call (the writer asks before each transaction).
    pub(super) fn lost(&self) -> Option<StoreError> {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.lost.clone().map(StoreError::Lost)
    }

    /// `Ok` while every file seen so far is still the same file at its
    /// path; else (from then on) [`StoreError::Lost`].
    pub(super) fn check(&self) -> Result<(), StoreError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(reason) = &state.lost {
            return Err(StoreError::Lost(reason.clone()));
        }
        let mut lost = None;
        for (path, known) in &mut state.files {
            let now = std::fs::symlink_metadata(&*path)
                .ok()
                .map(|m| (m.dev(), m.ino()));
            match (*known, now) {
                (None, now) => *known = now,
                (Some(_), None) => {
                    lost = Some(format!("{} was deleted", path.display()));
                    break;
                }
                (Some(before), Some(now)) if before != now => {
                    lost = Some(format!("{} was replaced by another file", path.display()));
                    break;
                }
                _ => {}
            }
        }
        match lost {
            None => Ok(()),
            Some(what) => {
                let reason = format!(
                    "the database is gone: {what} while aurad had it open; nothing more can be stored \
                     in it. Stop aurad (runs accepted since cannot be kept), restore the file from a \
                     backup if you have one, and start it again"
                );
                tracing::error!("{reason}");
                state.lost = Some(reason.clone());
                Err(StoreError::Lost(reason))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_or_replaced_file_is_lost_for_good() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a.db");
        std::fs::write(&db, "x").unwrap();
        let guard = FileGuard::new(&db);
        assert!(guard.check().is_ok());
        // A companion appearing later is remembered, then watched.
        std::fs::write(dir.path().join("a.db-wal"), "w").unwrap();
        assert!(guard.check().is_ok());
        std::fs::remove_file(dir.path().join("a.db-wal")).unwrap();
        let e = guard.check().unwrap_err().to_string();
        assert!(e.contains("a.db-wal was deleted"), "{e}");
        // Sticky, even once a file of that name is back.
        std::fs::write(dir.path().join("a.db-wal"), "w").unwrap();
        assert!(guard.check().is_err());

        let db2 = dir.path().join("b.db");
        std::fs::write(&db2, "x").unwrap();
        let guard = FileGuard::new(&db2);
        std::fs::write(dir.path().join("c.db"), "y").unwrap();
        std::fs::rename(dir.path().join("c.db"), &db2).unwrap();
        let e = guard.check().unwrap_err().to_string();
        assert!(e.contains("b.db was replaced"), "{e}");
    }
}
