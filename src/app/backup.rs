//! `aurad backup FILE`: a consistent copy of the project's SQLite store,
//! taken while `aurad serve` may be writing (`store::backup_sqlite`:
//! `VACUUM INTO`, checked), written to `FILE.tmp`, synced, renamed over
//! `FILE` and the directory synced, so `FILE` is either the old file or a
//! whole copy. On PostgreSQL nothing is copied: the caller says to use
//! `pg_dump`. Uses `config` (the settings) and `store`.

use std::path::{Path, PathBuf};

use crate::config::{self, Diagnostic};
use crate::store::BackupCopy;
use crate::types::Database;

/// Why no copy was made.
#[derive(Debug)]
pub enum BackupError {
    /// `aurad.yaml` has errors (the caller shows them).
    Settings(Vec<Diagnostic>),
    /// The store is PostgreSQL: `command` is the `pg_dump` to run (the
    /// password masked).
    Postgres { command: String },
    /// Anything else, said with what to do.
    Other(String),
}

/// A copy made.
#[derive(Debug)]
pub struct Backup {
    pub source: PathBuf,
    pub file: PathBuf,
    pub copy: BackupCopy,
}

/// Copies the project's store into `file`; an existing `file` is replaced
/// only with `force`.
pub fn backup(root: &Path, file: &Path, force: bool) -> Result<Backup, BackupError> {
    let (settings, diagnostics) = config::load_settings(root, &config::process_env);
    if diagnostics.iter().any(Diagnostic::is_error) {
        return Err(BackupError::Settings(diagnostics));
    }
    let source = match settings.database {
        Database::Sqlite(path) => path,
        Database::Postgres(url) => {
            return Err(BackupError::Postgres {
                command: format!(
                    "pg_dump --format=custom --file '{}' '{url}'",
                    file.display()
                ),
            });
        }
    };
    let other = BackupError::Other;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same(&source, file) {
        return Err(other(format!(
            "{} is the store itself: give another file",
            file.display()
        )));
    }
    if file.exists() && !force {
        return Err(other(format!(
            "{} exists: not replaced. Give another name, or --force to replace it",
            file.display()
        )));
    }
    if file.is_dir() {
        return Err(other(format!(
            "{} is a directory: give a file name",
            file.display()
        )));
    }
    let mut tmp = file.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    // A FILE.tmp is ours, left by a backup that was killed.
    match std::fs::remove_file(&tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(other(format!(
                "cannot remove the stale {}: {e}",
                tmp.display()
            )));
        }
    }
    let written = crate::store::backup_sqlite(&source, &tmp)
        .map_err(|e| e.to_string())
        .and_then(|copy| {
            sync_and_rename(&tmp, file)?;
            Ok(copy)
        });
    match written {
        Ok(copy) => Ok(Backup {
            source,
            file: file.to_path_buf(),
            copy,
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(other(e))
        }
    }
}

/// fsyncs `tmp`, renames it to `file` and fsyncs their directory, so the
/// rename survives a crash.
fn sync_and_rename(tmp: &Path, file: &Path) -> Result<(), String> {
    let io = |what: &str, path: &Path, e: std::io::Error| format!("{what} {}: {e}", path.display());
    std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("cannot sync", tmp, e))?;
    std::fs::rename(tmp, file).map_err(|e| io("cannot rename the copy to", file, e))?;
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("cannot sync the directory", dir, e))
}
