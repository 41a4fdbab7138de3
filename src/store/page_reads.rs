//! The reads a browsing client pages through (the dashboard, through the
//! API): runs filtered by agent, state, parent and trigger a page at a
//! time, the fires of schedules (runs for a scheduled instant, including
//! the `skipped` and `missed` ones with their reasons), and the memory
//! namespaces with their sizes. Every method runs on the reader thread.

use super::{Store, StoreError};
use crate::store::{RunFilter, RunRecord};
use crate::types::Trigger;

/// A page of [`Store::list_run_page`]: the runs matching `filter` and
/// `trigger`, newest first, skipping the first `offset`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunPage {
    /// Agent, state, parent and page size (`limit`, 0: no limit).
    pub filter: RunFilter,
    /// What started them (`schedule`, `api`, `webhook`, `cli`...).
    pub trigger: Option<Trigger>,
    /// How many of the newest matching runs to skip.
    pub offset: usize,
}

/// A page of [`Store::list_fires`]: scheduled fires, newest instant first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FirePage {
    pub agent: Option<String>,
    /// At most this many; 0 means no limit.
    pub limit: usize,
    pub offset: usize,
}

/// A memory namespace and how many memories it holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemoryNamespace {
    pub name: String,
    pub entries: u64,
}

impl Store {
    /// The runs of `page`, newest first.
    pub async fn list_run_page(&self, page: &RunPage) -> Result<Vec<RunRecord>, StoreError> {
        route!(self.list_run_page(page))
    }

    /// The runs of scheduled fires (those with a `scheduled_for`), whatever
    /// became of them (ran, `skipped` by overlap or backoff, `missed` while
    /// down; the reason is the run's `error`), newest fire first.
    pub async fn list_fires(&self, page: &FirePage) -> Result<Vec<RunRecord>, StoreError> {
        route!(self.list_fires(page))
    }

    /// Every memory namespace, by name, with its entry count.
    pub async fn memory_namespaces(&self) -> Result<Vec<MemoryNamespace>, StoreError> {
        route!(self.memory_namespaces())
    }
}
