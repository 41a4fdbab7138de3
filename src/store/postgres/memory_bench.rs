//! The door `benches/pg_memory.rs` measures through (a bench is a crate of
//! its own and sees only public items): connect to a PostgreSQL database
//! and import, save and recall with either way of finding candidates.
//! Hidden from the docs; not an API. Depends on `memory` and
//! `memory_recall`.

use chrono::{DateTime, Utc};

use super::Postgres;
pub use super::memory_recall::Candidates;
use crate::store::StoreError;
use crate::types::DatabaseUrl;
use crate::types::memory::{NewMemory, Recalled, Saved};

/// A PostgreSQL backend handle, for the bench.
pub struct PgMemoryBench(Postgres);

impl PgMemoryBench {
    /// Connects (and migrates) the database at `url`. Blocking.
    pub fn connect(url: &str) -> Result<PgMemoryBench, StoreError> {
        Postgres::connect(&DatabaseUrl::new(url)).map(PgMemoryBench)
    }

    pub fn import(&self, entries: Vec<NewMemory>, now: DateTime<Utc>) -> Result<usize, StoreError> {
        futures::executor::block_on(self.0.memory_import(entries, now))
    }

    pub fn save(
        &self,
        new: NewMemory,
        max_entries: usize,
        now: DateTime<Utc>,
        how: Candidates,
    ) -> Result<Saved, StoreError> {
        futures::executor::block_on(self.0.memory_save_by(new, max_entries, now, how))
    }

    pub fn recall(
        &self,
        namespace: &str,
        query: &str,
        limit: usize,
        min_score: f64,
        now: DateTime<Utc>,
        how: Candidates,
    ) -> Result<Vec<Recalled>, StoreError> {
        futures::executor::block_on(
            self.0
                .memory_recall_by(namespace, query, limit, min_score, now, how),
        )
    }

    /// Closes the pool and the backend's thread.
    pub fn close(self) -> Result<(), StoreError> {
        self.0.close()
    }
}
