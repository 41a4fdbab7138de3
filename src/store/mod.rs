//! The store: runs and their events, scheduled fires, webhook deliveries,
//! tool calls waiting for approval, pipeline steps and long-term memory.
//!
//! One interface, two backends. [`Store`] is what every other module uses;
//! nothing outside `store` knows which backend it talks to, nor sees a
//! `rusqlite` or `tokio_postgres` type. `sqlite/` is the default (one node,
//! a file, zero setup); `postgres/` serves `database: postgres://...`, where
//! several `aurad serve` nodes share one database. The files beside this
//! one are the interface, one per topic: the records it takes and returns
//! and the methods on `Store`, each documented once here and routed to the
//! backend's method of the same name and parameters (`route!`); a
//! `*_blocking` method (for CLI code without a runtime) is the SQLite
//! backend's own blocking method, and on PostgreSQL the async one waited on
//! with `futures::executor::block_on` (every PostgreSQL operation runs on
//! that backend's own runtime, so this is safe off any runtime).
//!
//! Tests: a test of the interface runs on both backends when written with
//! `store_test!` (see [`testing`]): the same body once on a SQLite file in
//! a temporary directory and once on a PostgreSQL database created for it
//! and dropped after. Tests that look inside one backend (raw SQL, the
//! SQLite worker threads, migrations) stay in that backend's directory.
//!
//! Depends on `types`, `text` and `redact` only.

/// Routes a call to the backend's method of the same name and arguments,
/// and awaits it.
macro_rules! route {
    ($store:ident . $method:ident ( $($arg:expr),* )) => {
        match &*$store.backend {
            $crate::store::Backend::Sqlite(db) => db.$method($($arg),*).await,
            $crate::store::Backend::Postgres(db) => db.$method($($arg),*).await,
        }
    };
}

/// Routes a blocking call: SQLite's own `NAME_blocking`, PostgreSQL's async
/// `NAME` waited on (it runs on that backend's runtime).
macro_rules! route_blocking {
    ($store:ident . $method:ident / $async_method:ident ( $($arg:expr),* )) => {
        match &*$store.backend {
            $crate::store::Backend::Sqlite(db) => db.$method($($arg),*),
            $crate::store::Backend::Postgres(db) => {
                futures::executor::block_on(db.$async_method($($arg),*))
            }
        }
    };
}

mod approvals;
pub mod channels;
mod error;
mod fires;
#[cfg(test)]
mod fires_tests;
pub mod health;
mod memory;
pub mod memory_score;
mod nodes;
mod page_reads;
mod postgres;
pub mod provider_limits;
mod queue;
#[cfg(test)]
mod queue_tests;
mod retention;
mod run_reads;
mod runs;
#[cfg(test)]
mod runs_tests;
// Interface tests of approvals, retention, steps and watches (both backends).
#[cfg(test)]
mod approvals_tests;
#[cfg(test)]
mod retention_tests;
mod sessions;
#[cfg(test)]
mod sessions_tests;
mod sqlite;
mod steps;
#[cfg(test)]
mod steps_tests;
#[cfg(test)]
pub(crate) mod testing;
mod watched_files;
#[cfg(test)]
mod watched_files_tests;
mod watches;
#[cfg(test)]
mod watches_tests;

use std::path::Path;
use std::sync::Arc;

pub use approvals::WaitingRun;
pub use error::{MAX_MATCHES, StoreError};
pub use fires::Recovered;
pub use nodes::{NodeInfo, NodeRecord};
pub use page_reads::{FirePage, MemoryNamespace, RunPage};
#[doc(hidden)]
pub use postgres::memory_bench as pg_memory_bench;
pub use queue::{ClusterSignal, TakenRun};
pub use retention::{PruneBatch, PruneScope, Pruned};
pub use runs::{Fire, NewRun, RunEnd, RunFilter, RunParent, RunRecord};
pub use sessions::{
    SessionDeletion, SessionHistory, SessionMessage, SessionRecord, SessionSummary, SessionTurn,
    SessionsPruned, TITLE_CHARS,
};
pub use sqlite::backup::{BackupCopy, backup as backup_sqlite};
pub use steps::{StepEnd, StepRecord};
pub use watched_files::TriggerClaim;

use crate::types::Database;
use postgres::Postgres;
use sqlite::Sqlite;

/// A new run id: a UUID v7 string (time-ordered).
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// How many hex digits of a run id's end [`short_run_id`] shows.
pub const SHORT_ID_LEN: usize = 8;
/// The fewest characters of a run id's end [`Store::get_run`] looks up.
pub const MIN_ID_END: usize = 6;

/// A run's short id: the last [`SHORT_ID_LEN`] characters of its id. Run
/// ids are UUIDv7: their start is the time (runs started within a minute
/// share it), their end is random, so the end tells runs apart.
pub fn short_run_id(id: &str) -> &str {
    let start = id
        .char_indices()
        .rev()
        .nth(SHORT_ID_LEN - 1)
        .map_or(0, |(i, _)| i);
    &id[start..]
}

/// Whether [`Store::get_run`] also looks `id` up as the end of run ids: at
/// least [`MIN_ID_END`] characters, every one a hex digit or `-`.
fn may_be_id_end(id: &str) -> bool {
    id.len() >= MIN_ID_END && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// `prefixed` and `ended` merged: in id order, each once, at most
/// [`MAX_MATCHES`] + 1.
fn merge_matches(mut prefixed: Vec<String>, ended: Vec<String>) -> Vec<String> {
    prefixed.extend(ended);
    prefixed.sort();
    prefixed.dedup();
    prefixed.truncate(MAX_MATCHES + 1);
    prefixed
}

/// Handle to the store. Cheap to clone; clones share one backend.
#[derive(Clone)]
pub struct Store {
    backend: Arc<Backend>,
}

enum Backend {
    Sqlite(Sqlite),
    Postgres(Postgres),
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &*self.backend {
            Backend::Sqlite(db) => f.debug_tuple("Store").field(&db.path()).finish(),
            Backend::Postgres(db) => f.debug_tuple("Store").field(db.url()).finish(),
        }
    }
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path` and brings
    /// its schema up to date. Synchronous and cheap. The path must name a
    /// file: reads use a second connection, which would not see an
    /// in-memory database.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Ok(Store {
            backend: Arc::new(Backend::Sqlite(Sqlite::open(path)?)),
        })
    }

    /// Opens the database `database:` names: a SQLite file, or a PostgreSQL
    /// database (connecting and bringing its schema up to date, one node at
    /// a time). Blocking: call it outside async code or in `spawn_blocking`.
    pub fn connect(database: &Database) -> Result<Store, StoreError> {
        match database {
            Database::Sqlite(path) => Store::open(path),
            Database::Postgres(url) => Ok(Store {
                backend: Arc::new(Backend::Postgres(Postgres::connect(url)?)),
            }),
        }
    }

    /// `Err(StoreError::Lost)` once the SQLite file (or its `-wal`, `-shm`)
    /// was deleted or replaced under this store: writes are refused from
    /// then on. Always `Ok` on PostgreSQL, whose server reports its own.
    pub fn intact(&self) -> Result<(), StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.intact(),
            Backend::Postgres(_) => Ok(()),
        }
    }

    /// The SQLite file, or `None` on PostgreSQL.
    pub fn path(&self) -> Option<&Path> {
        match &*self.backend {
            Backend::Sqlite(db) => Some(db.path()),
            Backend::Postgres(_) => None,
        }
    }

    /// Finishes the work already sent (by any clone) where the backend can
    /// (SQLite: everything queued is written), closes the connections and
    /// returns once they are closed. Blocking: call it outside async code
    /// (after `block_on`, or in `spawn_blocking`). Other clones get
    /// [`StoreError::Closed`] afterwards.
    pub fn close(self) -> Result<(), StoreError> {
        match &*self.backend {
            Backend::Sqlite(db) => db.close(),
            Backend::Postgres(db) => db.close(),
        }
    }
}
