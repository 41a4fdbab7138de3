//! A thread that owns one SQLite connection and runs jobs on it in the order
//! they were sent. The store has two: the writer (every write, and memory
//! recall, which counts accesses) and the reader (`query_only` reads, so a
//! listing never queues behind a long write).
//!
//! Group commit (the writer): every job queued when the thread comes for
//! work (at most [`MAX_BATCH`]) runs in one `BEGIN IMMEDIATE` transaction,
//! each job inside its own savepoint, so a job that fails is rolled back
//! alone. The transaction commits with `synchronous=FULL` when any job in
//! it asked for [`Durability::Full`], else `NORMAL`; only then are the
//! callers answered. So under load many claims and final states share one
//! WAL append and one fsync, and no caller hears "stored" before its write
//! is as durable as it asked. A job runs inside the worker's transaction:
//! it must use savepoints (`Connection::savepoint`), never `BEGIN`.
//!
//! A job once sent completes even if its caller stops waiting. Shutdown: a
//! `Shutdown` message (from [`super::Store::close`]) or the end of the
//! channel (the last handle dropped) ends the loop after the jobs before it;
//! jobs sent later are dropped, so their callers get `Closed`.
//!
//! Depends on `rusqlite` and the store's error type only.

use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::{self, JoinHandle};

use rusqlite::Connection;

use super::file_guard::FileGuard;
use super::{Durability, StoreError, load_schema, set_durability, settle_wal};

/// The most jobs one writer transaction takes.
const MAX_BATCH: usize = 256;

/// One unit of work and the way to answer its caller.
pub(super) trait Job: Send {
    /// How durable the job's commit must be.
    fn durability(&self) -> Durability;
    /// Runs the work; the returned [`Done`] answers the caller once the
    /// transaction's outcome is known.
    fn run(self: Box<Self>, conn: &mut Connection) -> Done;
    /// Answers the caller with `error` without running the work.
    fn refuse(self: Box<Self>, error: StoreError);
}

/// A job that ran: whether its work stands, and its caller's answer, which
/// waits for the commit.
pub(super) struct Done {
    ok: bool,
    answer: Box<dyn FnOnce(Result<(), StoreError>) + Send>,
}

/// A job running `work` on the connection and handing its result to
/// `reply` (after the commit).
pub(super) fn job<R, W, A>(durability: Durability, work: W, reply: A) -> Box<dyn Job>
where
    R: Send + 'static,
    W: FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    A: FnOnce(Result<R, StoreError>) + Send + 'static,
{
    Box::new(Call {
        durability,
        work,
        reply,
        result: PhantomData,
    })
}

struct Call<R, W, A> {
    durability: Durability,
    work: W,
    reply: A,
    result: PhantomData<fn() -> R>,
}

impl<R, W, A> Job for Call<R, W, A>
where
    R: Send + 'static,
    W: FnOnce(&mut Connection) -> Result<R, StoreError> + Send + 'static,
    A: FnOnce(Result<R, StoreError>) + Send + 'static,
{
    fn durability(&self) -> Durability {
        self.durability
    }

    fn run(self: Box<Self>, conn: &mut Connection) -> Done {
        let Call { work, reply, .. } = *self;
        let result = guarded(conn, work);
        Done {
            ok: result.is_ok(),
            // A failed job's own error is the answer; a good one waits for
            // the commit.
            answer: Box::new(move |commit| reply(result.and_then(|r| commit.map(|()| r)))),
        }
    }

    fn refuse(self: Box<Self>, error: StoreError) {
        (self.reply)(Err(error));
    }
}

/// Whether a worker groups its jobs into transactions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// Group commit, as described above.
    Writer,
    /// Each job runs on its own (reads see the last commit).
    Reader,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Writer => "writer",
            Role::Reader => "reader",
        }
    }
}

enum Msg {
    Job(Box<dyn Job>),
    Shutdown,
}

/// One connection's thread and the channel to it.
pub(super) struct Worker {
    /// `None` only while dropping.
    tx: Option<mpsc::Sender<Msg>>,
    /// Taken by the first `join`, or by the drop of the last handle.
    thread: Mutex<Option<JoinHandle<Result<(), StoreError>>>>,
    role: Role,
}

impl Worker {
    /// Starts the thread `aurad-store-<role>` running jobs on `conn`.
    /// The writer's writes are refused once `guard` says the database's
    /// files are gone.
    pub(super) fn start(
        role: Role,
        conn: Connection,
        guard: Option<Arc<FileGuard>>,
    ) -> Result<Worker, StoreError> {
        let (tx, rx) = mpsc::channel();
        let name = role.name();
        let thread = thread::Builder::new()
            .name(format!("aurad-store-{name}"))
            .spawn(move || run(conn, rx, role, guard))
            .map_err(|e| StoreError::Io(format!("cannot start the store {name} thread: {e}")))?;
        Ok(Worker {
            tx: Some(tx),
            thread: Mutex::new(Some(thread)),
            role,
        })
    }

    /// Sends `job` without waiting.
    pub(super) fn submit(&self, job: Box<dyn Job>) -> Result<(), StoreError> {
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
        self.outcome(handle)
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
            Some(handle) if handle.thread().id() != thread::current().id() => self.outcome(handle),
            _ => Ok(()),
        }
    }

    fn outcome(&self, handle: JoinHandle<Result<(), StoreError>>) -> Result<(), StoreError> {
        handle.join().unwrap_or_else(|_| {
            Err(StoreError::Internal(format!(
                "the store {} thread panicked",
                self.role.name()
            )))
        })
    }
}

/// Runs one closure, turning a panic into an error for its caller.
fn guarded<R>(
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
    role: Role,
    guard: Option<Arc<FileGuard>>,
) -> Result<(), StoreError> {
    if role == Role::Reader {
        // The writer read the schema at open; the reader reads it while its
        // caller goes on (a one-shot run: while the claim commits), not in
        // its first read. A failure here shows again in that read.
        let _ = load_schema(&conn);
    }
    let mut group = Group {
        synchronous: None,
        guard,
    };
    while let Ok(msg) = rx.recv() {
        let Msg::Job(first) = msg else { break };
        if role == Role::Reader {
            first.run(&mut conn).finish(Ok(()));
            continue;
        }
        let mut jobs = vec![first];
        let mut stop = false;
        while jobs.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Msg::Job(job)) => jobs.push(job),
                Ok(Msg::Shutdown) => {
                    stop = true;
                    break;
                }
                Err(_) => break,
            }
        }
        group.commit(&mut conn, jobs);
        if stop {
            break;
        }
    }
    // Jobs sent after `Shutdown` are dropped here; their callers get `Closed`.
    drop(rx);
    if role == Role::Writer
        && let Err(e) = settle_wal(&conn)
    {
        // Nothing is lost: the WAL stays whole, for the next open to read.
        tracing::warn!("{e}");
    }
    conn.close().map_err(|(_, e)| {
        StoreError::sqlite(
            &format!("closing the database ({} connection)", role.name()),
            e,
        )
    })
}

impl Done {
    fn finish(self, commit: Result<(), StoreError>) {
        (self.answer)(commit);
    }
}

/// The writer's group commit; remembers the connection's `synchronous`
/// setting so it is switched only when a group needs another one.
struct Group {
    synchronous: Option<Durability>,
    /// The writer's: its files are looked at after each commit (a
    /// transaction run into a deleted file is answered with the loss, never
    /// with success); once lost, no transaction starts.
    guard: Option<Arc<FileGuard>>,
}

impl Group {
    /// Runs `jobs` in one transaction and answers their callers after it.
    fn commit(&mut self, conn: &mut Connection, jobs: Vec<Box<dyn Job>>) {
        let durability = if jobs.iter().any(|j| j.durability() == Durability::Full) {
            Durability::Full
        } else {
            Durability::Normal
        };
        if let Some(e) = self.guard.as_ref().and_then(|g| g.lost()) {
            return jobs.into_iter().for_each(|j| j.refuse(e.clone()));
        }
        if let Err(e) = self.set(conn, durability) {
            return jobs.into_iter().for_each(|j| j.refuse(e.clone()));
        }
        if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
            let e = StoreError::sqlite("starting a write", e);
            return jobs.into_iter().for_each(|j| j.refuse(e.clone()));
        }
        let single = jobs.len() == 1;
        let mut done: Vec<Done> = Vec::with_capacity(jobs.len());
        let mut jobs = jobs.into_iter();
        while let Some(job) = jobs.next() {
            if !single && let Err(e) = exec(conn, "SAVEPOINT aurad_job") {
                let e = StoreError::sqlite("starting a write", e);
                return abandon(conn, done, job, jobs, e);
            }
            let result = job.run(conn);
            if conn.is_autocommit() {
                // SQLite ended the transaction itself (an I/O error, a full
                // disk): the work of the group so far is gone.
                let e = StoreError::Database(
                    "the write was rolled back after a database error in the same \
                     transaction; retry"
                        .into(),
                );
                done.push(result);
                return abandon(conn, done, None, jobs, e);
            }
            let kept = if single {
                Ok(())
            } else if result.ok {
                exec(conn, "RELEASE aurad_job")
            } else {
                conn.execute_batch("ROLLBACK TO aurad_job; RELEASE aurad_job")
            };
            done.push(result);
            if let Err(e) = kept {
                let e = StoreError::sqlite("ending a write", e);
                return abandon(conn, done, None, jobs, e);
            }
        }
        let outcome = if single && !done[0].ok {
            exec(conn, "ROLLBACK")
        } else {
            exec(conn, "COMMIT")
        }
        .map_err(|e| StoreError::sqlite("committing", e))
        // Committed into a file that was deleted meanwhile is not stored.
        .and_then(|()| self.guard.as_ref().map_or(Ok(()), |g| g.check()));
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        for d in done {
            d.finish(outcome.clone());
        }
    }

    fn set(&mut self, conn: &Connection, level: Durability) -> Result<(), StoreError> {
        if self.synchronous != Some(level) {
            set_durability(conn, level)?;
            self.synchronous = Some(level);
        }
        Ok(())
    }
}

/// Runs one statement of the group's own (prepared once, then from the
/// connection's statement cache).
fn exec(conn: &Connection, statement: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(statement)?.execute([]).map(drop)
}

/// Gives up a group: rolls back what is left of its transaction, answers
/// the jobs that ran with `error` (their work is gone) and refuses the rest,
/// saying they were never tried.
fn abandon(
    conn: &mut Connection,
    done: Vec<Done>,
    current: impl Into<Option<Box<dyn Job>>>,
    rest: impl Iterator<Item = Box<dyn Job>>,
    error: StoreError,
) {
    if !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    tracing::error!("{error}");
    for d in done {
        d.finish(Err(error.clone()));
    }
    let reason = error.to_string();
    let untried = StoreError::Database(format!(
        "not written: another write of the same transaction failed first ({}); retry",
        reason.trim_end_matches("; retry")
    ));
    for job in current.into().into_iter().chain(rest) {
        job.refuse(untried.clone());
    }
}
