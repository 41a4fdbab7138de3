//! `aurad backup` on SQLite: a consistent copy of a live database, taken
//! with `VACUUM INTO` on a connection of its own (never the store's, and
//! without migrating: a backup before an upgrade keeps the old schema),
//! then checked (`PRAGMA integrity_check`) and counted.
//!
//! Why `VACUUM INTO` and not the online backup API: it reads the whole
//! database in one read transaction, which under WAL is a snapshot of the
//! last commit before it began, however fast `aurad serve` writes
//! meanwhile, and it never restarts. The backup API copies pages in steps
//! and starts over whenever another connection writes between two steps,
//! so a daemon that writes continuously can keep it from ever finishing
//! (or, in one step, it holds the same read snapshot `VACUUM INTO` does,
//! and copies free pages too). The copy is compacted as a bonus.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use crate::store::StoreError;

/// How long the copy waits for a lock (a checkpoint, a migration).
const BUSY: Duration = Duration::from_secs(30);

/// What a copy holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupCopy {
    /// Its size in bytes.
    pub bytes: u64,
    /// Its runs (all of them: queued, running and ended).
    pub runs: u64,
    /// Its schema version (`PRAGMA user_version`).
    pub schema: i64,
}

/// Copies the SQLite database `source` into `dest`, which must not exist,
/// and checks the copy. `dest` is left in place only when it is whole and
/// intact; the caller syncs and renames it.
pub fn backup(source: &Path, dest: &Path) -> Result<BackupCopy, StoreError> {
    if !source.is_file() {
        return Err(StoreError::NotFound(format!(
            "{}: no such database file; nothing to back up (has aurad run in this project? `database:` in aurad.yaml names the file)",
            source.display()
        )));
    }
    let db = |what: &str, path: &Path, e: rusqlite::Error| {
        StoreError::Database(format!("{}: {what}: {e}", path.display()))
    };
    let target = dest.to_str().ok_or_else(|| {
        StoreError::Invalid(format!(
            "{}: the backup's path must be UTF-8",
            dest.display()
        ))
    })?;
    let copied = (|| {
        let conn = Connection::open_with_flags(
            source,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY)?;
        conn.execute("VACUUM INTO ?1", [target])?;
        Ok(())
    })();
    copied.map_err(|e| db("copying", source, e))?;
    let check = |e| db("checking the copy", dest, e);
    let conn =
        Connection::open_with_flags(dest, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(check)?;
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(check)?;
    if integrity != "ok" {
        return Err(StoreError::Database(format!(
            "{}: the copy fails its integrity check ({integrity}); the source may be damaged: run `sqlite3 {} 'PRAGMA integrity_check'`",
            dest.display(),
            source.display()
        )));
    }
    let schema: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(check)?;
    let has_runs: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runs')",
            [],
            |r| r.get(0),
        )
        .map_err(check)?;
    let runs: i64 = if has_runs {
        conn.query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
            .map_err(check)?
    } else {
        0
    };
    drop(conn);
    let bytes = std::fs::metadata(dest)
        .map_err(|e| StoreError::Io(format!("{}: {e}", dest.display())))?
        .len();
    Ok(BackupCopy {
        bytes,
        runs: u64::try_from(runs).unwrap_or(0),
        schema,
    })
}
