//! The SQLite store: runs and their events (later memory and schedule fires).
//!
//! All SQL lives in this module (`mod.rs`, `migrations.rs`, `runs.rs`),
//! behind typed methods on [`Store`], so a second backend can later be added
//! here alone. Nothing outside `store` sees a `rusqlite` type.
//!
//! One dedicated writer thread owns the only connection. Every method sends a
//! closure to it over a channel and waits for the reply: async methods await
//! a oneshot (no blocking on async threads), `*_blocking` methods wait on a
//! plain channel (for non-async CLI code). Work runs in the order it was
//! sent, and work once sent completes even if its caller stops waiting.
//!
//! Durability (DESIGN.md section 3): WAL; run claims and final states are
//! committed with `synchronous=FULL`, event batches with `synchronous=NORMAL`.
//!
//! Shutdown: [`Store::close`] finishes the work already sent, closes the
//! connection and reports any error. Dropping the last clone does the same
//! (waiting for the thread unless dropped on the writer thread itself).

mod memory;
#[cfg(test)]
mod memory_tests;
mod migrations;
#[cfg(test)]
mod open_tests;
mod runs;
#[cfg(test)]
mod tests;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use rusqlite::Connection;
use rusqlite::ffi::ErrorCode;

pub use runs::{NewRun, RunFilter, RunRecord};

/// How long a statement waits for another process's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything that can go wrong in the store. Messages say what to do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed; the text says what was being done and why it failed.
    #[error("{0}")]
    Sqlite(String),
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
        .take(runs::MAX_MATCHES)
        .map(String::as_str)
        .collect();
    let more = if matches.len() > runs::MAX_MATCHES {
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
        StoreError::Sqlite(format!("{context}: {error}{hint}"))
    }
}

/// `map_err` helper: `.map_err(sql("inserting the run"))`.
fn sql(context: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError {
    move |e| StoreError::sqlite(context, e)
}

/// How hard a commit is pushed to disk (`PRAGMA synchronous`, a cheap
/// per-connection setting switched before each transaction).
#[derive(Debug, Clone, Copy)]
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

/// Now, as stored: RFC 3339 UTC with milliseconds (sorts lexically).
fn now_text() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A new run id: a UUID v7 string (time-ordered).
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

enum Msg {
    Job(Job),
    Shutdown,
}

/// Handle to the store. Cheap to clone; all clones share one writer thread.
#[derive(Clone)]
pub struct Store {
    shared: Arc<Shared>,
}

struct Shared {
    /// `None` only while dropping.
    tx: Option<mpsc::Sender<Msg>>,
    /// Taken by the first `close`, or by the drop of the last clone.
    thread: Mutex<Option<JoinHandle<Result<(), StoreError>>>>,
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
    /// up to date and starts the writer thread. Synchronous and cheap.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
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
        let (tx, rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("aurad-store".into())
            .spawn(move || writer(conn, rx))
            .map_err(|e| StoreError::Io(format!("cannot start the store thread: {e}")))?;
        Ok(Store {
            shared: Arc::new(Shared {
                tx: Some(tx),
                thread: Mutex::new(Some(thread)),
                path: path.to_path_buf(),
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Finishes the work already sent (by any clone), closes the connection
    /// and returns once the writer thread has ended, so everything is on
    /// disk. Blocking: call it outside async code (after `block_on`). Other
    /// clones get [`StoreError::Closed`] afterwards.
    pub fn close(self) -> Result<(), StoreError> {
        if let Some(tx) = &self.shared.tx {
            // An error means the thread is gone already; joining tells why.
            let _ = tx.send(Msg::Shutdown);
        }
        let handle = self
            .shared
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(handle) = handle else {
            return Ok(()); // another clone closed it
        };
        if handle.thread().id() == thread::current().id() {
            return Err(StoreError::Invalid(
                "Store::close was called from the store's own thread".into(),
            ));
        }
        handle
            .join()
            .unwrap_or_else(|_| Err(StoreError::Internal("the store thread panicked".into())))
    }

    /// Sends `job` to the writer thread without waiting.
    fn submit(&self, job: Job) -> Result<(), StoreError> {
        let tx = self.shared.tx.as_ref().ok_or(StoreError::Closed)?;
        tx.send(Msg::Job(job)).map_err(|_| StoreError::Closed)
    }

    /// Runs `f` on the writer thread and awaits its result.
    async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.submit(Box::new(move |conn| {
            let _ = reply.send(guarded(conn, f));
        }))?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// Runs `f` on the writer thread and blocks until its result. For
    /// non-async code; on an async thread use the async methods instead.
    fn call_blocking<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (reply, rx) = mpsc::sync_channel(1);
        self.submit(Box::new(move |conn| {
            let _ = reply.send(guarded(conn, f));
        }))?;
        rx.recv().map_err(|_| StoreError::Closed)?
    }
}

/// Runs one job, turning a panic into an error for its caller.
fn guarded<R>(
    conn: &mut Connection,
    f: impl FnOnce(&mut Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    catch_unwind(AssertUnwindSafe(|| f(conn)))
        .unwrap_or_else(|_| Err(StoreError::Internal("a store operation panicked".into())))
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Closing the channel lets the thread drain it and end.
        drop(self.tx.take());
        let handle = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(handle) = handle
            && handle.thread().id() != thread::current().id()
        {
            match handle.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(path = %self.path.display(), "{e}"),
                Err(_) => tracing::error!(path = %self.path.display(), "the store thread panicked"),
            }
        }
    }
}

/// Per-connection settings, applied at open.
fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(sql("setting the busy timeout"))?;
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

/// The writer thread: runs jobs in order until `Shutdown` or until every
/// handle is gone, then closes the connection.
fn writer(mut conn: Connection, rx: mpsc::Receiver<Msg>) -> Result<(), StoreError> {
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Job(job) => {
                job(&mut conn);
                if !conn.is_autocommit() {
                    // A job left a transaction open (a bug): never let it
                    // swallow the next job's writes.
                    tracing::error!("a store operation left a transaction open; rolling it back");
                    let _ = conn.execute_batch("ROLLBACK");
                }
            }
            Msg::Shutdown => break,
        }
    }
    // Jobs sent after `Shutdown` are dropped here; their callers get `Closed`.
    drop(rx);
    conn.close()
        .map_err(|(_, e)| StoreError::sqlite("closing the database", e))
}
