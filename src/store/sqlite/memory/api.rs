//! The typed `Sqlite::memory_*` methods: each sends one function of
//! `store::memory` to the writer thread, or to the reader thread for the
//! pure reads (list, get, count), so those never take the write lock (async,
//! or `_blocking` for code without a runtime such as the CLI).

use chrono::{DateTime, Utc};

use super::write::{count, delete, import, list, save};
use super::{load, nothing_to_recall, recall};
use crate::store::{Sqlite, StoreError};
use crate::types::memory::{Memory, NewMemory, Recalled, Saved};

impl Sqlite {
    pub async fn memory_recall(
        &self,
        namespace: &str,
        query: &str,
        limit: usize,
        min_score: f64,
        now: DateTime<Utc>,
    ) -> Result<Vec<Recalled>, StoreError> {
        let (ns, q) = (namespace.to_owned(), query.to_owned());
        let nothing = {
            let (ns, q) = (ns.clone(), q.clone());
            self.read(move |c| nothing_to_recall(c, &ns, &q, limit))
                .await?
        };
        if nothing {
            return Ok(Vec::new());
        }
        self.call(move |c| recall(c, &ns, &q, limit, min_score, now))
            .await
    }

    pub fn memory_recall_blocking(
        &self,
        namespace: &str,
        query: &str,
        limit: usize,
        min_score: f64,
        now: DateTime<Utc>,
    ) -> Result<Vec<Recalled>, StoreError> {
        let (ns, q) = (namespace.to_owned(), query.to_owned());
        self.call_blocking(move |c| recall(c, &ns, &q, limit, min_score, now))
    }

    pub async fn memory_save(
        &self,
        new: NewMemory,
        max_entries: usize,
        now: DateTime<Utc>,
    ) -> Result<Saved, StoreError> {
        self.call(move |c| save(c, new, max_entries, now)).await
    }

    pub fn memory_save_blocking(
        &self,
        new: NewMemory,
        max_entries: usize,
        now: DateTime<Utc>,
    ) -> Result<Saved, StoreError> {
        self.call_blocking(move |c| save(c, new, max_entries, now))
    }

    pub async fn memory_delete(&self, namespace: &str, id: i64) -> Result<bool, StoreError> {
        let ns = namespace.to_owned();
        self.call(move |c| delete(c, &ns, id)).await
    }

    pub fn memory_delete_blocking(&self, namespace: &str, id: i64) -> Result<bool, StoreError> {
        let ns = namespace.to_owned();
        self.call_blocking(move |c| delete(c, &ns, id))
    }

    pub async fn memory_list(
        &self,
        namespace: &str,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let ns = namespace.to_owned();
        self.read(move |c| list(c, &ns, limit)).await
    }

    pub fn memory_list_blocking(
        &self,
        namespace: &str,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let ns = namespace.to_owned();
        self.read_blocking(move |c| list(c, &ns, limit))
    }

    pub async fn memory_get(&self, namespace: &str, id: i64) -> Result<Option<Memory>, StoreError> {
        let ns = namespace.to_owned();
        self.read(move |c| Ok(load(c, &ns, id)?.map(|s| s.memory)))
            .await
    }

    pub fn memory_get_blocking(
        &self,
        namespace: &str,
        id: i64,
    ) -> Result<Option<Memory>, StoreError> {
        let ns = namespace.to_owned();
        self.read_blocking(move |c| Ok(load(c, &ns, id)?.map(|s| s.memory)))
    }

    pub async fn memory_count(&self, namespace: &str) -> Result<usize, StoreError> {
        let ns = namespace.to_owned();
        self.read(move |c| count(c, &ns)).await
    }

    pub fn memory_count_blocking(&self, namespace: &str) -> Result<usize, StoreError> {
        let ns = namespace.to_owned();
        self.read_blocking(move |c| count(c, &ns))
    }

    pub async fn memory_import(
        &self,
        entries: Vec<NewMemory>,
        now: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        self.call(move |c| import(c, entries, now)).await
    }

    pub fn memory_import_blocking(
        &self,
        entries: Vec<NewMemory>,
        now: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        self.call_blocking(move |c| import(c, entries, now))
    }
}
