//! A thread that owns one SQLite connection and runs jobs on it in the order
//! they were sent. The store has two: the writer (every write, and memory
//! recall, which counts accesses) and the reader (`query_only` reads, so a
//! listing never queues behind a long write).
//!
//! A job once sent completes even if its caller stops waiting. Shutdown: a
//! `Shutdown` message (from [`super::Store::close`]) or the end of the
//! channel (the last handle dropped) ends the loop after the jobs before it;
//! jobs sent later are dropped, so their callers get `Closed`.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Mutex, PoisonError, mpsc};
use std::thread::{self, JoinHandle};

use rusqlite::Connection;

use super::StoreError;

pub(super) type Job = Box<dyn FnOnce(&mut Connection) + Send>;

enum Msg {
    Job(Job),
    Shutdown,
}

/// One connection's thread and the channel to it.
pub(super) struct Worker {
    /// `None` only while dropping.
    tx: Option<mpsc::Sender<Msg>>,
    /// Taken by the first `join`, or by the drop of the last handle.
    thread: Mutex<Option<JoinHandle<Result<(), StoreError>>>>,
    /// `writer` or `reader`, for messages.
    role: &'static str,
}

impl Worker {
    /// Starts the thread `aurad-store-<role>` running jobs on `conn`.
    pub(super) fn start(role: &'static str, conn: Connection) -> Result<Worker, StoreError> {
        let (tx, rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name(format!("aurad-store-{role}"))
            .spawn(move || run(conn, rx, role))
            .map_err(|e| StoreError::Io(format!("cannot start the store {role} thread: {e}")))?;
        Ok(Worker {
            tx: Some(tx),
            thread: Mutex::new(Some(thread)),
            role,
        })
    }

    /// Sends `job` without waiting.
    pub(super) fn submit(&self, job: Job) -> Result<(), StoreError> {
        let tx = self.tx.as_ref().ok_or(StoreError::Closed)?;
        tx.send(Msg::Job(job)).map_err(|_| StoreError::Closed)
    }

    /// True when called from this worker's own thread (which cannot join
    /// itself).
    pub(super) fn is_current(&self) -> bool {
        self.thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|h| h.thread().id() == thread::current().id())
    }

    /// Asks the thread to stop after the jobs already sent.
    pub(super) fn request_shutdown(&self) {
        if let Some(tx) = &self.tx {
            // An error means the thread is gone already; joining tells why.
            let _ = tx.send(Msg::Shutdown);
        }
    }

    /// Waits for the thread to end and returns how closing went; `Ok` when
    /// another handle joined it already.
    pub(super) fn join(&self) -> Result<(), StoreError> {
        let handle = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(handle) = handle else {
            return Ok(());
        };
        handle.join().unwrap_or_else(|_| {
            Err(StoreError::Internal(format!(
                "the store {} thread panicked",
                self.role
            )))
        })
    }

    /// For `Drop`: closes the channel (the thread drains it and ends) and
    /// waits for the thread unless this is it; returns its outcome.
    pub(super) fn close_and_join(&mut self) -> Result<(), StoreError> {
        drop(self.tx.take());
        let handle = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match handle {
            Some(handle) if handle.thread().id() != thread::current().id() => {
                handle.join().unwrap_or_else(|_| {
                    Err(StoreError::Internal(format!(
                        "the store {} thread panicked",
                        self.role
                    )))
                })
            }
            _ => Ok(()),
        }
    }
}

/// Runs one job, turning a panic into an error for its caller.
pub(super) fn guarded<R>(
    conn: &mut Connection,
    f: impl FnOnce(&mut Connection) -> Result<R, StoreError>,
) -> Result<R, StoreError> {
    catch_unwind(AssertUnwindSafe(|| f(conn)))
        .unwrap_or_else(|_| Err(StoreError::Internal("a store operation panicked".into())))
}

/// The thread: runs jobs in order until `Shutdown` or until every handle is
/// gone, then closes the connection.
fn run(
    mut conn: Connection,
    rx: mpsc::Receiver<Msg>,
    role: &'static str,
) -> Result<(), StoreError> {
    while let Ok(msg) = rx.recv() {
        match msg {
            Msg::Job(job) => {
                job(&mut conn);
                if !conn.is_autocommit() {
                    // A job left a transaction open (a bug): never let it
                    // swallow the next job's work.
                    tracing::error!(
                        role,
                        "a store operation left a transaction open; rolling it back"
                    );
                    let _ = conn.execute_batch("ROLLBACK");
                }
            }
            Msg::Shutdown => break,
        }
    }
    // Jobs sent after `Shutdown` are dropped here; their callers get `Closed`.
    drop(rx);
    conn.close().map_err(|(_, e)| {
        StoreError::sqlite(&format!("closing the database ({role} connection)"), e)
    })
}
