//! The SQLite backend (the default, one node): runs and their events,
//! scheduled fires, webhook deliveries, tool calls waiting for approval,
//! pipeline steps and long-term memory, as typed methods on [`Sqlite`] that
//! `Store` routes to. Nothing outside `store` sees a `rusqlite` type. Files: `runs` (claiming, events, final states),
//! `run_reads` (every read of runs and events), `page_reads` (runs,
//! scheduled fires and memory namespaces a page at a time, for browsing), `approvals` (runs waiting
//! for a person, decisions), `fires` (runs that never ran,
//! interrupted runs, webhook deliveries), `steps` (pipeline runs' steps), `watches` (schedules watched since
//! when), `retention` (pruning old runs and events), `memory`, `migrations`, `worker`.
//!
//! Two threads, each owning one connection ([`worker`]): the writer runs
//! every write (and memory recall, which counts accesses); the reader, a
//! `query_only` connection opened after the migrations, runs the reads of
//! runs, events and memories, so they never queue behind a long write. Every method
//! sends a closure to one of them and waits for the reply: async methods
//! await a oneshot (no blocking on async threads), `*_blocking` methods wait
//! on a plain channel (for non-async CLI code). Each thread runs its work in
//! the order it was sent, and work once sent completes even if its caller
//! stops waiting. A read sees every write committed before it started (WAL),
//! so a caller that awaited a write reads its result.
//!
//! Durability: WAL; run claims and final states are
//! committed with `synchronous=FULL` ([`Sqlite::call_durable`]), event
//! batches with `synchronous=NORMAL`. The writer groups the jobs queued at
//! one moment into one transaction and answers their callers after its
//! commit ([`worker`]): one fsync for many claims and final states. Jobs
//! run inside that transaction, so they use savepoints, never `BEGIN`.
//!
//! Shutdown: [`Sqlite::close`] finishes the work already sent, closes both
//! connections and reports any error. Dropping the last clone does the same
//! (waiting for each thread unless dropped on that thread itself). Closing
//! leaves a small WAL in place for the next open instead of copying it into
//! the database file ([`settle_wal`]).

mod approvals;
pub(super) mod backup;
mod channels;
mod file_guard;
use file_guard::FileGuard;
mod fires;
#[cfg(test)]
mod fires_tests;
mod memory;
#[cfg(test)]
mod memory_tests;
mod migrations;
#[cfg(test)]
mod open_tests;
mod page_reads;
mod queue;
mod retention;
mod run_reads;
mod runs;
#[cfg(test)]
mod runs_tests;
mod sessions;
mod steps;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod upgrade_tests;
mod watched_files;
mod watches;
mod worker;
#[cfg(test)]
mod worker_tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::config::DbConfig;
use rusqlite::ffi::ErrorCode;
use rusqlite::{Connection, OpenFlags};

pub(crate) use super::{NewRun, RunFilter, RunRecord, StoreError};
use worker::{Role, Worker};

/// The schema version this build writes (`PRAGMA user_version` after its
/// migrations).
pub(super) const SCHEMA_VERSION: i64 = migrations::MIGRATIONS.len() as i64;

/// How long a statement waits for another process's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 64;

impl StoreError {
    /// Wraps a SQLite error with what was being done and, where one helps,
    /// what to do about it.
    pub(super) fn sqlite(context: &str, error: rusqlite::Error) -> StoreError {
        let hint = match error.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                "; another process held the database for more than 5 s: retry, or stop it"
            }
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                "; the file is not a usable aurad database: move it aside, or point \
                 `database:` in aurad.yaml at another file"
            }
            Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly | ErrorCode::PermissionDenied) => {
                "; check that the file and its directory exist and are writable"
            }
            Some(ErrorCode::DiskFull) => "; free some disk space",
            _ => "",
        };
        StoreError::Database(format!("{context}: {error}{hint}"))
    }
}

/// `map_err` helper: `.map_err(sql("inserting the run"))`.
fn sql(context: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |e| StoreError::sqlite(context, e)
}

/// How hard a commit is pushed to disk (`PRAGMA synchronous`, a cheap
/// per-connection setting switched before each transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Durability {
    /// Survives power loss: run claims, final states, migrations.
    Full,
    /// Survives a crash of aurad (not of the machine): event batches.
    Normal,
}

fn set_durability(conn: &Connection, level: Durability) -> Result<(), StoreError> {
    let value = match level {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", value)
        .map_err(sql("setting PRAGMA synchronous"))
}

/// A time as stored: RFC 3339 UTC with milliseconds (sorts lexically).
fn time_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Now, as stored.
fn now_text() -> String {
    time_text(Utc::now())
}

/// Handle to the store. Cheap to clone; all clones share one writer thread
/// and one reader thread.
#[derive(Clone)]
pub struct Sqlite {
    shared: Arc<Shared>,
}

struct Shared {
    writer: Worker,
    reader: Worker,
    path: PathBuf,
    guard: Arc<FileGuard>,
}

impl std::fmt::Debug for Sqlite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sqlite")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

impl Sqlite {
    /// Opens (creating if needed) the database at `path`, brings its schema
    /// up to date and starts the writer and reader threads. Synchronous and
    /// cheap. The path must name a file: reads use a second connection, which
    /// would not see an in-memory database.
    pub fn open(path: &Path) -> Result<Sqlite, StoreError> {
        let name = path.as_os_str();
        if name.is_empty() || name == ":memory:" {
            return Err(StoreError::Invalid(
                "the store needs a database file, not an in-memory database: give a path".into(),
            ));
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
            && !dir.exists()
        {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Io(format!("cannot create directory {}: {e}", dir.display()))
            })?;
        }
        let mut conn = Connection::open(path).map_err(sql("cannot open the database"))?;
        configure(&conn)?;
        migrations::migrate(&mut conn)?;
        // Opened after the migrations, so it never sees an older schema.
        let reader = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql("cannot open the database for reading"))?;
        configure_reader(&reader)?;
        let guard = Arc::new(FileGuard::new(path));
        let writer = Worker::start(Role::Writer, conn, Some(guard.clone()))?;
        let reader = Worker::start(Role::Reader, reader, None)?;
        Ok(Sqlite {
            shared: Arc::new(Shared {
                writer,
                reader,
                path: path.to_path_buf(),
                guard,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// `Err(StoreError::Lost)` once the database's files were deleted or
    /// replaced under this store ([`file_guard`]).
    pub fn intact(&self) -> Result<(), StoreError> {
        self.shared.guard.check()
    }

    /// Finishes the work already sent (by any clone), closes both
    /// connections and returns once both threads have ended, so everything
    /// is on disk. Blocking: call it outside async code (after `block_on`).
    /// Other clones get [`StoreError::Closed`] afterwards.
    pub fn close(&self) -> Result<(), StoreError> {
        let Shared { writer, reader, .. } = &*self.shared;
        if writer.is_current() || reader.is_current() {
            return Err(StoreError::Invalid(
                "Sqlite::close was called from one of the store's own threads".into(),
            ));
        }
        writer.request_shutdown();
        reader.request_shutdown();
        let wrote = writer.join();
        let read = reader.join();
        wrote.and(read)
    }

    /// Runs `f` on the writer thread and awaits its result, which comes once
    /// its transaction committed with `synchronous=NORMAL` at least (it
    /// survives a crash of aurad, not of the machine).
    async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        on(&self.shared.writer, Durability::Normal, f).await
    }

    /// [`Sqlite::call`] for writes that must survive power loss: the result
    /// comes once the transaction committed with `synchronous=FULL`.
    async fn call_durable<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        on(&self.shared.writer, Durability::Full, f).await
    }

    /// Runs `f` on the writer thread and blocks until its result. For
    /// non-async code; on an async thread use the async methods instead.
    fn call_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        on_blocking(&self.shared.writer, f)
    }

    /// Runs the read-only `f` on the reader thread and awaits its result. It
    /// sees every write committed before it started (WAL), and never waits
    /// for the writer thread's queue.
    async fn read<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        on(&self.shared.reader, Durability::Normal, f).await
    }

    /// Runs the read-only `f` on the reader thread and blocks until its
    /// result.
    fn read_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        on_blocking(&self.shared.reader, f)
    }
}

async fn on<R: Send + 'static>(
    worker: &Worker,
    durability: Durability,
    f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    let (reply, rx) = tokio::sync::oneshot::channel();
    worker.submit(worker::job(durability, f, move |result| {
        let _ = reply.send(result);
    }))?;
    rx.await.map_err(|_| StoreError::Closed)?
}

fn on_blocking<R: Send + 'static>(
    worker: &Worker,
    f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
) -> Result<R, StoreError> {
    let (reply, rx) = mpsc::sync_channel(1);
    worker.submit(worker::job(Durability::Normal, f, move |result| {
        let _ = reply.send(result);
    }))?;
    rx.recv().map_err(|_| StoreError::Closed)?
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the channels lets the threads drain them and end.
        let path = self.path.display();
        for outcome in [self.writer.close_and_join(), self.reader.close_and_join()] {
            if let Err(e) = outcome {
                tracing::error!(path = %path, "{e}");
            }
        }
    }
}

/// Settings both connections need: how long to wait for a lock, and
/// prepared statements that stay prepared.
fn configure_common(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sql("setting the busy timeout"))?;
    // Every statement of a run's path, the group's own and memory recall's
    // stay prepared (rusqlite keeps 16 by default).
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Query plans that do not depend on the values bound. Without this,
    // SQLite (3.54) marks a statement with a `column = ?` term it estimates
    // as one whose plan might change with the value, and
    // `sqlite3_clear_bindings`, which rusqlite's statement cache calls on
    // every statement it takes back, then expires it: each execution
    // compiled the statement again (9 times per run, 14% of a warm run's
    // instructions, in `last_seq` alone). The plans never depended on the
    // values here (no `ANALYZE` statistics, no `LIKE ?`).
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(sql("fixing the query plans"))?;
    // The last connection to close does not copy the WAL into the database
    // file: see [`settle_wal`], which the writer runs instead.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(sql("keeping the WAL at close"))?;
    Ok(())
}

/// The most WAL (bytes of the `-wal` file) a closing store leaves for the
/// next process, whose first connection reads all of it at open to rebuild
/// its index (about 0.5 ms per MiB here).
const WAL_LEFT_AT_CLOSE: u64 = 1 << 20;

/// Run by the writer just before it closes. SQLite's default, a checkpoint
/// by the last connection to close, then deleting the WAL, cost a one-shot
/// `aurad run` three fsyncs and two unlinks at exit, and the next process
/// a new WAL file (a directory fsync and a header fsync before its claim
/// commits). Commits are durable in the WAL already,
/// so a small WAL is left as it is, for the next process to go on
/// appending to; a large one is checkpointed and truncated here (fsyncs
/// first, as every checkpoint does), so a run of short processes leaves at
/// most about [`WAL_LEFT_AT_CLOSE`] behind. The file's size bounds what is
/// in it: only a checkpoint ends the WAL, and this one truncates it. While
/// another connection (a daemon on the same database) reads or writes, the
/// checkpoint gives up at once instead of waiting for it, and the WAL stays
/// for that connection's own checkpoints.
fn settle_wal(conn: &Connection) -> Result<(), StoreError> {
    let Some(path) = conn.path().filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let size = std::fs::metadata(format!("{path}-wal")).map_or(0, |m| m.len());
    if size <= WAL_LEFT_AT_CLOSE {
        return Ok(());
    }
    conn.busy_timeout(Duration::ZERO)
        .map_err(sql("setting the busy timeout"))?;
    match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(())) {
        Err(e)
            if matches!(
                e.sqlite_error_code(),
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
            ) =>
        {
            Ok(())
        }
        other => other.map_err(sql("checkpointing the WAL before closing")),
    }
}

/// Reads the schema into the connection now (SQLite parses every `CREATE`
/// of `sqlite_schema` before its first statement), so the first statement
/// that needs it does not wait for that.
fn load_schema(conn: &Connection) -> Result<(), StoreError> {
    conn.prepare("SELECT 1 FROM sqlite_schema LIMIT 0")
        .map(drop)
        .map_err(sql("reading the schema"))
}

/// Per-connection settings, applied at open.
fn configure(conn: &Connection) -> Result<(), StoreError> {
    configure_common(conn)?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(sql("enabling WAL"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(
            mode,
            "SQLite refused WAL mode; the store keeps working, less concurrently"
        );
    }
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(sql("enabling foreign keys"))?;
    set_durability(conn, Durability::Normal)
}

/// Settings of the reader connection: it only reads, and waits for locks
/// as long as the writer does.
fn configure_reader(conn: &Connection) -> Result<(), StoreError> {
    configure_common(conn)?;
    conn.pragma_update(None, "query_only", "ON")
        .map_err(sql("making the reader connection read-only"))
}
