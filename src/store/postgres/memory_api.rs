//! The `Postgres::memory_*` methods (and `memory_namespaces`): each runs
//! one transaction of `memory` / `memory_recall` on a pooled connection, the
//! same names, parameters and results as the SQLite backend's `Store`
//! methods. Depends on `memory`, `memory_recall`.

use chrono::{DateTime, Utc};

use super::memory::{
    Checked, MEMORY_COLUMNS, check, delete_in, import, load, namespace as namespace_row, save,
    stored_from_row,
};
use super::memory_recall;
use super::{Postgres, pg};
use crate::store::memory_score as score;
use crate::store::{MemoryNamespace, StoreError};
use crate::types::memory::{Memory, NewMemory, Recalled, Saved};

impl Postgres {
    /// The `limit` best memories of `namespace` for `query` scoring at least
    /// `min_score`, best first; bumps the access count of each returned one.
    pub(crate) async fn memory_recall(
        &self,
        namespace: &str,
        query: &str,
        limit: usize,
        min_score: f64,
        now: DateTime<Utc>,
    ) -> Result<Vec<Recalled>, StoreError> {
        if limit == 0 || score::term_counts(query).is_empty() {
            return Ok(Vec::new());
        }
        let (name, query) = (namespace.to_owned(), query.to_owned());
        self.with_client(move |mut client| async move {
            // Nothing to find: answered without a transaction or a lock.
            if namespace_row(&client, &name, false)
                .await?
                .is_none_or(|ns| ns.entries == 0)
            {
                return Ok(Vec::new());
            }
            let tx = client
                .transaction()
                .await
                .map_err(pg("starting a recall"))?;
            let found = memory_recall::recall(&tx, &name, &query, limit, min_score, now).await?;
            tx.commit().await.map_err(pg("committing a recall"))?;
            Ok(found)
        })
        .await
    }

    /// Saves `new`, merging it into its best match if that scores above 0.8;
    /// then, if the namespace holds more than `max_entries`, keeps the best
    /// 80% of `max_entries` by the cleanup score.
    pub(crate) async fn memory_save(
        &self,
        new: NewMemory,
        max_entries: usize,
        now: DateTime<Utc>,
    ) -> Result<Saved, StoreError> {
        let checked = check(new, now, "memory")?;
        self.with_client(move |mut client| async move {
            let tx = client
                .transaction()
                .await
                .map_err(pg("starting a memory save"))?;
            let saved = save(&tx, &checked, max_entries, now).await?;
            tx.commit().await.map_err(pg("committing a memory save"))?;
            Ok(saved)
        })
        .await
    }

    /// Deletes memory `id` of `namespace`; false if there is none.
    pub(crate) async fn memory_delete(&self, namespace: &str, id: i64) -> Result<bool, StoreError> {
        let name = namespace.to_owned();
        self.with_client(move |mut client| async move {
            let tx = client
                .transaction()
                .await
                .map_err(pg("starting a memory delete"))?;
            let Some(ns) = namespace_row(&tx, &name, true).await? else {
                return Ok(false);
            };
            let deleted = delete_in(&tx, ns, &name, id).await?;
            tx.commit()
                .await
                .map_err(pg("committing a memory delete"))?;
            Ok(deleted)
        })
        .await
    }

    /// The memories of `namespace`, most recently updated first; `limit` 0
    /// means all.
    pub(crate) async fn memory_list(
        &self,
        namespace: &str,
        limit: usize,
    ) -> Result<Vec<Memory>, StoreError> {
        let name = namespace.to_owned();
        let limit = (limit > 0).then(|| i64::try_from(limit).unwrap_or(i64::MAX));
        self.with_client(move |client| async move {
            let stmt = client
                .prepare_cached(&format!(
                    "SELECT {MEMORY_COLUMNS} FROM memories WHERE namespace = $1 \
                     ORDER BY updated_at DESC, id DESC LIMIT $2"
                ))
                .await
                .map_err(pg("listing memories"))?;
            client
                .query(&stmt, &[&name, &limit])
                .await
                .map_err(pg("listing memories"))?
                .iter()
                .map(|r| stored_from_row(r).map(|s| s.memory))
                .collect()
        })
        .await
    }

    /// Memory `id` of `namespace`, if there is one.
    pub(crate) async fn memory_get(
        &self,
        namespace: &str,
        id: i64,
    ) -> Result<Option<Memory>, StoreError> {
        let name = namespace.to_owned();
        self.with_client(move |client| async move {
            Ok(load(&client, &name, id).await?.map(|s| s.memory))
        })
        .await
    }

    /// How many memories `namespace` holds.
    pub(crate) async fn memory_count(&self, namespace: &str) -> Result<usize, StoreError> {
        let name = namespace.to_owned();
        self.with_client(move |client| async move {
            Ok(namespace_row(&client, &name, false)
                .await?
                .map_or(0, |ns| ns.entries as usize))
        })
        .await
    }

    /// Adds `entries` as they are (no merging, no cleanup; timestamps and
    /// access counts kept) in one transaction; returns how many.
    pub(crate) async fn memory_import(
        &self,
        entries: Vec<NewMemory>,
        now: DateTime<Utc>,
    ) -> Result<usize, StoreError> {
        let checked: Vec<Checked> = entries
            .into_iter()
            .enumerate()
            .map(|(i, e)| check(e, now, &format!("entry {i}")))
            .collect::<Result<_, _>>()?;
        self.with_client(move |mut client| async move {
            let tx = client
                .transaction()
                .await
                .map_err(pg("starting a memory import"))?;
            import(&tx, &checked).await?;
            tx.commit()
                .await
                .map_err(pg("committing a memory import"))?;
            Ok(checked.len())
        })
        .await
    }

    /// Every memory namespace, by name (byte order, as SQLite sorts), with
    /// its entry count.
    pub(crate) async fn memory_namespaces(&self) -> Result<Vec<MemoryNamespace>, StoreError> {
        self.with_client(|client| async move {
            let stmt = client
                .prepare_cached(
                    "SELECT name, entries FROM memory_namespaces ORDER BY name COLLATE \"C\"",
                )
                .await
                .map_err(pg("listing memory namespaces"))?;
            Ok(client
                .query(&stmt, &[])
                .await
                .map_err(pg("listing memory namespaces"))?
                .iter()
                .map(|r| MemoryNamespace {
                    name: r.get(0),
                    entries: r.get::<_, i64>(1).max(0) as u64,
                })
                .collect())
        })
        .await
    }
}
