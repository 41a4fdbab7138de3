//! Long-term memory: the typed `Store::memory_*` methods (async, or
//! `_blocking` for code without a runtime such as the CLI), and the check
//! every backend applies to a memory before storing it.

use crate::types::memory::{DEFAULT_CATEGORY, Memory, NewMemory, Recalled, Saved};
use chrono::{DateTime, Utc};

use super::{Store, StoreError};

impl Store {
    /// The `limit` best memories of `namespace` for `query` scoring at least
    /// `min_score`, best first; bumps the access count of each returned one.
    /// Whether there is anything to find is asked on the reader thread
    /// first, so a run of an agent without memories costs the writer nothing.
    pub async fn memory_recall(
        &self,
        namespace: &str,
        query: &str,
        limit: usize,
        min_score: f64,
        now: DateTime<Utc>,
    ) -> Result<Vec<Recalled>, StoreError> {
        route!(self.memory_recall(namespace, query, limit, min_score, now))
    }

    pub fn memory_recall_blocking(
        &self,
        namespace: &str,
        query: &str,
        limit: usize,
        min_score: f64,
        now: DateTime<Utc>,
    ) -> Result<Vec<Recalled>, StoreError> {
        route_blocking!(
            self.memory_recall_blocking / memory_recall(namespace, query, limit, min_score, now)
        )
    }

    /// Saves `new`, merging it into its best match if that scores above 0.8;
    /// then, if the namespace holds more than `max_entries`, keeps the best
    /// 80% of `max_entries` by the cleanup score.
    pub async fn memory_save(
        &self,
        new: NewMemory,
        max_entries: usize,
        now: DateTime<Utc>,
    ) -> Result<Saved, StoreError> {
        route!(self.memory_save(new, max_entries, now))
    }

    pub fn memory_save_blocking(
        &self,
        new: NewMemory,
        max_entries: usize,
        now: DateTime<Utc>,
    ) -> Result<Saved, StoreError> {
        route_blocking!(self.memory_save_blocking / memory_save(new, max_entries, now))
    }

    /// Deletes memory `id` of `namespace`; false if there is none.
    pub async fn memory_delete(&self, namespace: &str, id: i64) -> Result<bool, StoreError> {
        route!(self.memory_delete(namespace, id))
    }

    pub fn memory_delete_blocking(&self, namespace: &str, id: i64) -> Result<bool, StoreError> {
        route_blocking!(self.memory_delete_blocking / memory_delete(namespace, id))
    }

    /// The memories of `namespace`, most recently updated first; `limit` 0
    /// means all.
    pub async fn memory_list(
        &self,
        namespace: &str,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        route!(self.memory_list(namespace, limit))
    }

    pub fn memory_list_blocking(
        &self,
        namespace: &str,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        route_blocking!(self.memory_list_blocking / memory_list(namespace, limit))
    }

    /// Memory `id` of `namespace`, if there is one.
    pub async fn memory_get(&self, namespace: &str, id: i64) -> Result<Option<Memory>, StoreError> {
        route!(self.memory_get(namespace, id))
    }

    pub fn memory_get_blocking(
        &self,
        namespace: &str,
        id: i64,
    ) -> Result<Option<Memory>, StoreError> {
        route_blocking!(self.memory_get_blocking / memory_get(namespace, id))
    }

    /// How many memories `namespace` holds.
    pub async fn memory_count(&self, namespace: &str) -> Result<usize, StoreError> {
        route!(self.memory_count(namespace))
    }

    pub fn memory_count_blocking(&self, namespace: &str) -> Result<usize, StoreError> {
        route_blocking!(self.memory_count_blocking / memory_count(namespace))
    }

    /// Adds `entries` as they are (no merging, no cleanup; timestamps and
    /// access counts kept) in one transaction; returns how many.
    pub async fn memory_import(
        &self,
        entries: Vec<NewMemory>,
        now: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        route!(self.memory_import(entries, now))
    }

    pub fn memory_import_blocking(
        &self,
        entries: Vec<NewMemory>,
        now: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        route_blocking!(self.memory_import_blocking / memory_import(entries, now))
    }
}

/// A [`NewMemory`] checked, with its times parsed and kept to the
/// millisecond (as both backends store them) and its metadata as JSON text.
pub(crate) struct CheckedMemory {
    pub(crate) new: NewMemory,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) metadata: String,
}

/// Checks `new` (saved at `now` unless it carries its own times); `what`
/// names it in errors (e.g. `entry 3`).
pub(crate) fn check_memory(
    mut new: NewMemory,
    now: DateTime<Utc>,
    what: &str,
) -> Result<CheckedMemory, StoreError> {
    if new.namespace.trim().is_empty() {
        return Err(StoreError::Invalid(format!(
            "{what}: the memory namespace is empty: give a name (e.g. the agent's)"
        )));
    }
    if new.content.trim().is_empty() {
        return Err(StoreError::Invalid(format!(
            "{what}: the memory content is empty: give the text to remember"
        )));
    }
    if !(1..=10).contains(&new.importance) {
        return Err(StoreError::Invalid(format!(
            "{what}: importance {} is out of range: give 1 (trivia) to 10 (essential)",
            new.importance
        )));
    }
    if new.category.trim().is_empty() {
        new.category = DEFAULT_CATEGORY.into();
    }
    let millis =
        |t: DateTime<Utc>| DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t);
    let created_at = new.created_at.map_or_else(|| millis(now), millis);
    let updated_at = new.updated_at.map_or(created_at, millis);
    let metadata = match &new.metadata {
        serde_json::Value::Null => "{}".to_string(),
        other => other.to_string(),
    };
    Ok(CheckedMemory {
        new,
        created_at,
        updated_at,
        metadata,
    })
}
