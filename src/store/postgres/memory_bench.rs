//! The door `benches/pg_memory.rs` measures through (a bench is a crate of
//! its own and sees only public items): connect to a PostgreSQL database
//! and import, save and recall with either way of finding candidates.
//! Hidden from the docs; not an API.
//!
//! The GIN way lives only here. It lost to the impact-ordered postings
//! (BENCHMARKS.md, pg_memory) and schema migration 2 dropped its column
//! from the product, so [`PgMemoryBench::connect`] adds `memories.terms`
//! (the memory's terms as `memory_score::term_counts` counts them, never
//! PostgreSQL's stemming) and its GIN index back to the bench's own
//! database, and every import and save made here keeps it filled, as the
//! product did before.
//!
//! Depends on `memory` and `memory_recall` (it plugs its candidates
//! between `Plan::new` and `Plan::finish`).

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use futures::executor::block_on;

use super::memory::{
    MEMORY_COLUMNS, Namespace, check, namespace as namespace_row, namespace_or_create,
    save_matched, stored_from_row,
};
use super::memory_recall::{BOUND_SLACK, Plan, Scorer, count_recalled};
use super::{Postgres, execute, pg};
use crate::store::StoreError;
use crate::store::memory_score as score;
use crate::types::DatabaseUrl;
use crate::types::memory::{NewMemory, Recalled, Saved};

/// How recall (and the merge check of a save) finds the memories it scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidates {
    /// The product's way: `memory_terms` postings in impact order, stopped
    /// early.
    Postings,
    /// `memories.terms && query` through the GIN index, all scored.
    Terms,
}

/// What the product had before schema migration 2, back on the bench's
/// database.
const ADD_TERMS: &str = "ALTER TABLE memories ADD COLUMN IF NOT EXISTS terms TEXT[] NOT NULL \
     DEFAULT '{}'; CREATE INDEX IF NOT EXISTS memories_terms ON memories USING GIN (terms);";

/// Rows per statement when filling `terms`.
const FILL_CHUNK: usize = 5_000;

/// A PostgreSQL backend handle with the GIN column, for the bench.
pub struct PgMemoryBench(pub(super) Postgres);

impl PgMemoryBench {
    /// Connects (and migrates) the database at `url`, then adds the `terms`
    /// column and its GIN index. Blocking. Only for a database of the
    /// bench's own: no product node writes `terms`.
    pub fn connect(url: &str) -> Result<PgMemoryBench, StoreError> {
        PgMemoryBench::over(Postgres::connect(&DatabaseUrl::new(url))?)
    }

    /// [`PgMemoryBench::connect`] on a backend already connected.
    pub(super) fn over(store: Postgres) -> Result<PgMemoryBench, StoreError> {
        block_on(store.with_client(|client| async move {
            client
                .batch_execute(ADD_TERMS)
                .await
                .map_err(pg("adding the bench's terms column"))
        }))?;
        Ok(PgMemoryBench(store))
    }

    /// The product's import, then the `terms` of every memory filled.
    pub fn import(&self, entries: Vec<NewMemory>, now: DateTime<Utc>) -> Result<usize, StoreError> {
        let added = block_on(self.0.memory_import(entries, now))?;
        block_on(self.0.with_client(|client| async move {
            let rows = client
                .query("SELECT id, content FROM memories ORDER BY id", &[])
                .await
                .map_err(pg("reading memories"))?;
            let all: Vec<(i64, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            for part in all.chunks(FILL_CHUNK) {
                write_terms(&client, part).await?;
            }
            Ok(())
        }))?;
        Ok(added)
    }

    /// Saves `new` with the merge check's candidates found `how`. The
    /// postings way is the product's save, which writes no `terms`: call
    /// [`PgMemoryBench::index_terms`] after it (untimed). The GIN way
    /// writes them in its transaction, as the product did.
    pub fn save(
        &self,
        new: NewMemory,
        max_entries: usize,
        now: DateTime<Utc>,
        how: Candidates,
    ) -> Result<Saved, StoreError> {
        if how == Candidates::Postings {
            return block_on(self.0.memory_save(new, max_entries, now));
        }
        let checked = check(new, now, "memory")?;
        block_on(self.0.with_client(move |mut client| async move {
            let tx = client
                .transaction()
                .await
                .map_err(pg("starting a memory save"))?;
            let new = &checked.new;
            let ns = namespace_or_create(&tx, &new.namespace).await?;
            let best = gin_matches(
                &tx,
                ns,
                &new.namespace,
                &new.content,
                1,
                score::MERGE_THRESHOLD,
                now,
            )
            .await?;
            let saved = save_matched(&tx, ns, &checked, best, max_entries, now).await?;
            index_saved(&tx, saved).await?;
            tx.commit().await.map_err(pg("committing a memory save"))?;
            Ok(saved)
        }))
    }

    /// Writes the `terms` of the memory `saved` names (created or merged
    /// by a save the product made).
    pub fn index_terms(&self, saved: Saved) -> Result<(), StoreError> {
        block_on(
            self.0
                .with_client(move |client| async move { index_saved(&client, saved).await }),
        )
    }

    /// The product's recall, or the same with the candidates found through
    /// the GIN index.
    pub fn recall(
        &self,
        namespace: &str,
        query: &str,
        limit: usize,
        min_score: f64,
        now: DateTime<Utc>,
        how: Candidates,
    ) -> Result<Vec<Recalled>, StoreError> {
        if how == Candidates::Postings {
            return block_on(
                self.0
                    .memory_recall(namespace, query, limit, min_score, now),
            );
        }
        // As `Postgres::memory_recall`, with `gin_matches`.
        if limit == 0 || score::term_counts(query).is_empty() {
            return Ok(Vec::new());
        }
        let (name, query) = (namespace.to_owned(), query.to_owned());
        block_on(self.0.with_client(move |mut client| async move {
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
            let Some(ns) = namespace_row(&tx, &name, true).await? else {
                return Ok(Vec::new());
            };
            let found = gin_matches(&tx, ns, &name, &query, limit, min_score, now).await?;
            let found = count_recalled(&tx, ns, found).await?;
            tx.commit().await.map_err(pg("committing a recall"))?;
            Ok(found)
        }))
    }

    /// Closes the pool and the backend's thread.
    pub fn close(self) -> Result<(), StoreError> {
        self.0.close()
    }
}

/// Stores each `(id, content)`'s term set in `memories.terms`.
async fn write_terms(c: &impl GenericClient, rows: &[(i64, String)]) -> Result<(), StoreError> {
    let ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    // A text[] per row does not bind (PostgreSQL arrays are rectangular):
    // each row's terms travel as one JSON array.
    let terms: Vec<String> = rows
        .iter()
        .map(|r| {
            let keys: Vec<String> = score::term_counts(&r.1).into_keys().collect();
            serde_json::Value::from(keys).to_string()
        })
        .collect();
    execute(
        c,
        "UPDATE memories AS m SET terms = ARRAY(SELECT jsonb_array_elements_text(u.t::jsonb)) \
         FROM unnest($1::int8[], $2::text[]) AS u(id, t) WHERE m.id = u.id",
        &[&ids, &terms],
        "writing the bench's memory terms",
    )
    .await?;
    Ok(())
}

/// Writes the `terms` of the memory a save created or merged into, unless
/// the save's cleanup deleted it again.
async fn index_saved(c: &impl GenericClient, saved: Saved) -> Result<(), StoreError> {
    let id = saved.id();
    let Some(row) = c
        .query_opt("SELECT content FROM memories WHERE id = $1", &[&id])
        .await
        .map_err(pg("reading a memory"))?
    else {
        return Ok(());
    };
    write_terms(c, &[(id, row.get(0))]).await
}

/// `memory_recall::best_matches` with the candidates found through the GIN
/// index.
async fn gin_matches(
    tx: &Transaction<'_>,
    ns: Namespace,
    name: &str,
    query: &str,
    limit: usize,
    min_score: f64,
    now: DateTime<Utc>,
) -> Result<Vec<Recalled>, StoreError> {
    let Some(mut plan) = Plan::new(tx, ns, query, limit, min_score, now).await? else {
        return Ok(Vec::new());
    };
    if !plan.terms.is_empty() {
        by_terms(tx, &mut plan.scorer, name, &plan.terms, plan.remaining[0]).await?;
    }
    plan.finish(tx).await
}

/// Every memory sharing a query term whose boost bound can reach
/// `min_score`, in one query, all scored.
async fn by_terms(
    tx: &Transaction<'_>,
    scorer: &mut Scorer,
    name: &str,
    terms: &[(String, u64, f64)],
    remaining: f64,
) -> Result<(), StoreError> {
    let cosine_bound = remaining.sqrt() / scorer.query_norm * BOUND_SLACK;
    // boost_bound(impact) = 2^(impact - now/30): impacts under this floor
    // cannot reach min_score (with a margin for rounding).
    let floor = if scorer.min_score > 0.0 {
        (scorer.min_score / (cosine_bound * BOUND_SLACK)).log2()
            - score::boost_bound(0.0, scorer.now).log2()
            - 1e-6
    } else {
        f64::NEG_INFINITY
    };
    let wanted: Vec<&str> = terms.iter().map(|t| t.0.as_str()).collect();
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT {MEMORY_COLUMNS} FROM memories WHERE namespace = $1 AND terms && $2::text[] \
             AND impact >= $3"
        ))
        .await
        .map_err(pg("reading memories"))?;
    let stored = tx
        .query(&stmt, &[&name, &wanted, &floor])
        .await
        .map_err(pg("reading memories"))?
        .iter()
        .map(stored_from_row)
        .collect::<Result<Vec<_>, _>>()?;
    scorer.score(tx, stored).await
}
