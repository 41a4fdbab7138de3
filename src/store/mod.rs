//! The SQLite store: runs and their events, scheduled fires, webhook
//! deliveries, tool calls waiting for approval and long-term memory.
//!
//! All SQL lives in this module, behind typed methods on [`Store`], so a
//! second backend can later be added here alone. Nothing outside `store` sees
//! a `rusqlite` type. Files: `runs` (claiming, events, final states),
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
//! Durability (DESIGN.md section 3): WAL; run claims and final states are
//! committed with `synchronous=FULL` ([`Store::call_durable`]), event
//! batches with `synchronous=NORMAL`. The writer groups the jobs queued at
//! one moment into one transaction and answers their callers after its
//! commit ([`worker`]): one fsync for many claims and final states. Jobs
//! run inside that transaction, so they use savepoints, never `BEGIN`.
//!
//! Shutdown: [`Store::close`] finishes the work already sent, closes both
//! connections and reports any error. Dropping the last clone does the same
//! (waiting for each thread unless dropped on that thread itself).

mod approvals;
#[cfg(test)]
mod approvals_tests;
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
// Wired into `Store` by the backend facade; until then only its tests use it.
#[allow(dead_code)]
mod postgres;
mod retention;
mod run_reads;
mod runs;
#[cfg(test)]
mod runs_tests;
mod steps;
#[cfg(test)]
mod tests;
mod watched_files;
mod watches;
mod worker;
#[cfg(test)]
mod worker_tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::ffi::ErrorCode;
use rusqlite::{Connection, OpenFlags};

pub use approvals::WaitingRun;
pub use fires::Recovered;
pub use memory::score as memory_score;
#[doc(hidden)]
pub use postgres::memory_bench as pg_memory_bench;
pub use page_reads::{FirePage, MemoryNamespace, RunPage};
pub use retention::{PruneBatch, PruneScope, Pruned};
pub use runs::{Fire, NewRun, RunEnd, RunFilter, RunParent, RunRecord};
pub use steps::{StepEnd, StepRecord};
pub use watched_files::TriggerClaim;
use worker::{Role, Worker};

/// How long a statement waits for another process's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 64;

/// Everything that can go wrong in the store. Messages say what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// The database failed; the text says which, what was being done and
    /// why it failed.
    #[error("{0}")]
    Database(String),
    /// The file or its directory could not be created.
    #[error("{0}")]
    Io(String),
    #[error(
        "the database was created by a newer aurad (schema {found}, this build knows {known}): \
         upgrade aurad, or point `database:` in aurad.yaml at another file"
    )]
    NewerSchema { found: i64, known: i64 },
    /// An id prefix matches several runs; `matches` holds the first ids in
    /// order (at most 11: the message shows 10 and `...` when there are more).
    #[error(
        "run id prefix `{prefix}` is ambiguous, it matches {}: give more characters",
        list_matches(matches)
    )]
    Ambiguous {
        prefix: String,
        matches: Vec<String>,
    },
    /// Something named by the caller does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Something the caller wants to create exists already.
    #[error("{0}")]
    Conflict(String),
    /// A scheduled fire has a run already (this process or an earlier one
    /// took it): the fire must not run again. `scheduled_for` is as stored.
    #[error(
        "agent `{agent}`: schedule {schedule_id} fire at {scheduled_for} has a run already; \
         each scheduled fire runs at most once, so skip it"
    )]
    FireTaken {
        agent: String,
        schedule_id: crate::types::ScheduleId,
        scheduled_for: String,
    },
    /// The caller asked for something the store cannot do.
    #[error("{0}")]
    Invalid(String),
    #[error(
        "run {run_id}: stored row is unreadable ({message}); the database was edited by hand \
         or written by another program"
    )]
    CorruptRun { run_id: String, message: String },
    #[error(
        "run {run_id}: stored event {seq} is unreadable ({message}); the database was edited \
         by hand or written by an incompatible aurad"
    )]
    CorruptEvent {
        run_id: String,
        seq: i64,
        message: String,
    },
    /// Retention deleted the run's events (`retention: events:` in
    /// aurad.yaml, or `aurad runs prune --events-only`); the run's record
    /// is kept.
    #[error(
        "run {run_id}: its {events} events were pruned by retention on {} (`retention: events:` \
         in aurad.yaml); the run's record (state, times, usage, cost, output, error) is kept: \
         see `aurad runs` or GET /v1/runs/{run_id}",
        time_text(*pruned_at)
    )]
    EventsPruned {
        run_id: String,
        pruned_at: DateTime<Utc>,
        events: u64,
    },
    #[error(
        "the store is closed (its writer thread has stopped); this is a bug unless aurad is shutting down"
    )]
    Closed,
    /// A bug in the store itself (a panicking job); the store keeps working.
    #[error("internal store error: {0}; please report this bug")]
    Internal(String),
}

fn list_matches(matches: &[String]) -> String {
    let shown: Vec<&str> = matches
        .iter()
        .take(run_reads::MAX_MATCHES)
        .map(String::as_str)
        .collect();
    let more = if matches.len() > run_reads::MAX_MATCHES {
        ", ..."
    } else {
        ""
    };
    format!("{}{more}", shown.join(", "))
}

impl StoreError {
    /// Wraps a SQLite error with what was being done and, where one helps,
    /// what to do about it.
    fn sqlite(context: &str, error: rusqlite::Error) -> StoreError {
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

/// A new run id: a UUID v7 string (time-ordered).
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Handle to the store. Cheap to clone; all clones share one writer thread
/// and one reader thread.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

struct Shared {
    writer: Worker,
    reader: Worker,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path`, brings its schema
    /// up to date and starts the writer and reader threads. Synchronous and
    /// cheap. The path must name a file: reads use a second connection, which
    /// would not see an in-memory database.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
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
        let writer = Worker::start(Role::Writer, conn)?;
        let reader = Worker::start(Role::Reader, reader)?;
        Ok(Store {
            shared: Arc::new(Shared {
                writer,
                reader,
                path: path.to_path_buf(),
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Finishes the work already sent (by any clone), closes both
    /// connections and returns once both threads have ended, so everything
    /// is on disk. Blocking: call it outside async code (after `block_on`).
    /// Other clones get [`StoreError::Closed`] afterwards.
    pub fn close(self) -> Result<(), StoreError> {
        let Shared { writer, reader, .. } = &*self.shared;
        if writer.is_current() || reader.is_current() {
            return Err(StoreError::Invalid(
                "Store::close was called from one of the store's own threads".into(),
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

    /// [`Store::call`] for writes that must survive power loss: the result
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

/// Per-connection settings, applied at open.
fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sql("setting the busy timeout"))?;
    // Every statement of a run's path, the group's own and memory recall's
    // stay prepared (rusqlite keeps 16 by default).
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
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
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sql("setting the busy timeout"))?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.pragma_update(None, "query_only", "ON")
        .map_err(sql("making the reader connection read-only"))
}
