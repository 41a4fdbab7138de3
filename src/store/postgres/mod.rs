//! The PostgreSQL backend (`database: postgres://...`): several `aurad
//! serve` nodes share one database. The same typed operations as the SQLite
//! backend, written for PostgreSQL: `timestamptz` times, `FOR UPDATE SKIP
//! LOCKED` claims, advisory locks, LISTEN/NOTIFY.
//!
//! The backend owns a small runtime on a thread of its own
//! (`aurad-postgres`): the pool's connections and every query run there, so
//! callers on any runtime (serve's multi-thread one, `aurad run`'s
//! current-thread one) and plain threads (the CLI's `*_blocking` reads)
//! use it alike, as they use the SQLite worker threads. A call is sent with
//! [`Postgres::spawn`] and completes even if its caller stops waiting.
//!
//! The connection string is a secret: it is never logged nor put in an
//! error; [`crate::types::DatabaseUrl`] shows it with the password masked.
//!
//! Depends on `tokio-postgres`, `deadpool-postgres`, the store's types and
//! `crate::types`.

mod channels;
mod fires;
#[cfg(test)]
mod fires_tests;
mod memory;
mod memory_api;
#[doc(hidden)]
pub mod memory_bench;
mod memory_recall;
#[cfg(test)]
mod memory_tests;
mod nodes;
#[cfg(test)]
mod nodes_tests;
mod page_reads;
#[cfg(test)]
mod page_reads_tests;
mod provider_limits;
#[cfg(test)]
mod provider_limits_tests;
mod queue;
#[cfg(test)]
mod queue_tests;
mod run_reads;
#[cfg(test)]
mod run_reads_tests;
pub(crate) mod run_rows;
pub(crate) mod runs;
#[cfg(test)]
mod runs_tests;
mod schema;
mod sessions;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod upgrade_tests;
// Approvals, pipeline steps, schedule watches, retention.
mod approvals;
#[cfg(test)]
mod approvals_tests;
mod retention;
#[cfg(test)]
mod retention_tests;
mod steps;
#[cfg(test)]
mod steps_tests;
mod watched_files;
#[cfg(test)]
mod watched_files_tests;
mod watches;
#[cfg(test)]
mod watches_tests;

use std::future::Future;
use std::sync::Mutex;
use std::thread::JoinHandle;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod};
use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use super::StoreError;
use crate::types::DatabaseUrl;

/// Connections the pool keeps open at most.
const POOL_SIZE: usize = 8;

/// How long a caller waits for a free connection before failing.
const POOL_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Handle to one PostgreSQL database. Cheap to share behind the store's
/// `Arc`.
pub(crate) struct Postgres {
    pool: Pool,
    runtime: Handle,
    /// Ends the runtime thread when sent (or dropped).
    stop: Mutex<Option<oneshot::Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    url: DatabaseUrl,
    /// Where the listening connection sends the other nodes' signals
    /// (opened by the first [`Postgres::signals`]).
    signals: std::sync::OnceLock<tokio::sync::broadcast::Sender<super::ClusterSignal>>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Postgres {
    /// Connects to the database at `url`, brings its schema up to date
    /// (one node at a time, under an advisory lock) and returns the handle.
    /// Blocking: call it outside async code or in `spawn_blocking`.
    pub(crate) fn connect(url: &DatabaseUrl) -> Result<Postgres, StoreError> {
        let config: tokio_postgres::Config = url.secret().parse().map_err(|e| {
            StoreError::Invalid(format!(
                "database {url}: not a PostgreSQL connection string ({e}); write \
                 postgres://USER:PASSWORD@HOST:PORT/DATABASE"
            ))
        })?;
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let (handle_tx, handle_rx) = std::sync::mpsc::sync_channel(1);
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("aurad-postgres".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                // Drives every spawned query until told to stop (or the
                // store is dropped); dropping the runtime then closes the
                // connections.
                runtime.block_on(async {
                    let _ = stop_rx.await;
                });
            })
            .map_err(|e| StoreError::Io(format!("cannot start the PostgreSQL thread: {e}")))?;
        let runtime = handle_rx
            .recv()
            .map_err(|_| StoreError::Internal("the PostgreSQL thread ended at start".into()))?
            .map_err(|e| StoreError::Io(format!("cannot start the PostgreSQL runtime: {e}")))?;
        let pool = {
            let _enter = runtime.enter();
            Pool::builder(manager)
                .max_size(POOL_SIZE)
                .wait_timeout(Some(POOL_WAIT))
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .build()
                .map_err(|e| StoreError::Internal(format!("building the connection pool: {e}")))?
        };
        let store = Postgres {
            pool,
            runtime,
            stop: Mutex::new(Some(stop_tx)),
            thread: Mutex::new(Some(thread)),
            url: url.clone(),
            signals: std::sync::OnceLock::new(),
        };
        let pool = store.pool.clone();
        let shown = store.url.clone();
        store.blocking(async move {
            let mut client = get(&pool, &shown).await?;
            schema::migrate(&mut client).await
        })?;
        Ok(store)
    }

    /// The connection string with its password masked.
    pub(crate) fn url(&self) -> &DatabaseUrl {
        &self.url
    }

    /// Runs `work` with a pooled connection on the backend's runtime and
    /// awaits its result: the shape of every operation of this backend.
    /// Clone what `work` needs first (it must own it).
    pub(crate) async fn with_client<R, Fut>(
        &self,
        work: impl FnOnce(Object) -> Fut + Send + 'static,
    ) -> Result<R, StoreError>
    where
        R: Send + 'static,
        Fut: Future<Output = Result<R, StoreError>> + Send + 'static,
    {
        let pool = self.pool.clone();
        let url = self.url.clone();
        self.spawn(async move {
            let client = get(&pool, &url).await?;
            work(client).await
        })
        .await
    }

    /// A clone of the pool, for tests that reach the database directly.
    #[cfg(test)]
    pub(crate) fn pool(&self) -> Pool {
        self.pool.clone()
    }

    /// Runs `work` on the backend's runtime and awaits its result. The work
    /// completes even if the caller stops waiting.
    pub(crate) async fn spawn<R: Send + 'static>(
        &self,
        work: impl Future<Output = Result<R, StoreError>> + Send + 'static,
    ) -> Result<R, StoreError> {
        self.runtime.spawn(work).await.map_err(|e| join_error(&e))?
    }

    /// Runs `work` on the backend's runtime and blocks the calling thread
    /// until its result: for non-async code (never call it on an async
    /// thread).
    pub(crate) fn blocking<R: Send + 'static>(
        &self,
        work: impl Future<Output = Result<R, StoreError>> + Send + 'static,
    ) -> Result<R, StoreError> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv().map_err(|_| StoreError::Closed)?
    }

    /// Closes the pool and ends the runtime thread; work already sent is
    /// cut off where it stands (PostgreSQL rolls back an open transaction).
    pub(crate) fn close(&self) -> Result<(), StoreError> {
        self.pool.close();
        if let Some(stop) = self.stop.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = stop.send(());
        }
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread
            && thread.thread().id() != std::thread::current().id()
        {
            thread
                .join()
                .map_err(|_| StoreError::Internal("the PostgreSQL thread panicked".into()))?;
        }
        Ok(())
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// A pooled connection, or an error that says which database and what to do.
pub(crate) async fn get(pool: &Pool, url: &DatabaseUrl) -> Result<Object, StoreError> {
    pool.get().await.map_err(|e| match e {
        deadpool_postgres::PoolError::Backend(e) => StoreError::Database(format!(
            "cannot connect to PostgreSQL at {url}: {}{}",
            error_text(&e),
            connect_hint(&e)
        )),
        deadpool_postgres::PoolError::Timeout(_) => StoreError::Database(format!(
            "PostgreSQL at {url}: no free connection within {} s (all {POOL_SIZE} busy): retry, \
             or check for long-running queries",
            POOL_WAIT.as_secs()
        )),
        other => StoreError::Database(format!("PostgreSQL at {url}: {other}")),
    })
}

/// The schema version this build writes (the highest row of
/// `aurad_schema` after its migrations).
pub(super) const SCHEMA_VERSION: i64 = schema::MIGRATIONS.len() as i64;

/// What to do about a failed connection, as a clause to append.
pub(super) fn connect_hint(e: &tokio_postgres::Error) -> &'static str {
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            "; check the user and password in `database:` (aurad.yaml) or AURAD_DATABASE_URL"
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => {
            "; create the database first (createdb NAME), or name another in the connection string"
        }
        _ if e.code().is_none() => "; is the server running and reachable at that host and port?",
        _ => "",
    }
}

/// The server's message with its detail and hint, or the client's error.
pub(crate) fn error_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => {
            let mut text = db.message().to_string();
            if let Some(detail) = db.detail() {
                text.push_str(&format!(" ({detail})"));
            }
            text
        }
        None => e.to_string(),
    }
}

/// `map_err` helper: `.map_err(pg("inserting the run"))`.
pub(crate) fn pg(context: &'static str) -> impl FnOnce(tokio_postgres::Error) -> StoreError {
    move |e| StoreError::Database(format!("PostgreSQL, {context}: {}", error_text(&e)))
}

/// Prepares `sql` (cached per connection) and executes it with `params`:
/// the shape of most writes. `context` says what was being done.
pub(crate) async fn execute(
    client: &impl deadpool_postgres::GenericClient,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    context: &'static str,
) -> Result<u64, StoreError> {
    let statement = client.prepare_cached(sql).await.map_err(pg(context))?;
    client
        .execute(&statement, params)
        .await
        .map_err(pg(context))
}

/// Whether `e` is a unique-key violation (another node inserted first).
pub(crate) fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

fn join_error(e: &tokio::task::JoinError) -> StoreError {
    if e.is_panic() {
        StoreError::Internal(format!("a PostgreSQL job panicked: {e}"))
    } else {
        StoreError::Closed
    }
}
