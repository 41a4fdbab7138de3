//! Long-term memory on PostgreSQL: the `Store::memory_*` operations (and
//! `memory_namespaces`) with the SQLite backend's results to the bit. The
//! same tables as SQLite's (`memories`, `memory_namespaces` with the entry
//! count N and a change epoch, `memory_df`, `memory_terms` postings in impact
//! order). The math is `crate::store::memory_score`'s; recall is in
//! `memory_recall`, the `Postgres` methods in `memory_api`.
//!
//! Races between nodes: every operation that writes a namespace's memories
//! (save, delete, import, and recall, which bumps access counts and caches
//! norms) first locks that namespace's row (`SELECT ... FOR UPDATE`), so the
//! writers of one namespace take turns as SQLite's single writer does, and
//! counts, df and epochs stay exact. A namespace row is created with
//! `INSERT ... ON CONFLICT (name) DO NOTHING` then locked, so two first saves
//! make one row. An import locks its namespaces in name order (no deadlock).
//!
//! Depends on `tokio-postgres`/`deadpool-postgres`, the store's memory types
//! and `memory_score`.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use deadpool_postgres::{GenericClient, Transaction};
use tokio_postgres::Row;

use super::memory_recall;
use super::run_rows::millis;
use super::{execute, pg};
use crate::store::StoreError;
use crate::store::memory::check_memory;
use crate::store::memory_score::{self as score, TermCounts};
use crate::types::memory::{Memory, NewMemory, Recalled, Saved};

/// The columns [`stored_from_row`] reads, in its order.
pub(super) const MEMORY_COLUMNS: &str = "id, namespace, content, category, importance, created_at, \
     updated_at, access_count, run_id, metadata, norm, norm_epoch, impact";

/// Rows per statement when importing (bound arrays).
const IMPORT_CHUNK: usize = 2_000;

/// A namespace's row in `memory_namespaces`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Namespace {
    pub id: i64,
    pub entries: u64,
    pub epoch: i64,
}

/// A memory row with its cached norm and impact.
pub(super) struct Stored {
    pub memory: Memory,
    pub norm: Option<f64>,
    pub norm_epoch: Option<i64>,
    pub impact: f64,
}

/// A row of `SELECT {MEMORY_COLUMNS}`.
pub(super) fn stored_from_row(row: &Row) -> Result<Stored, StoreError> {
    let metadata: String = row.try_get(9).map_err(pg("reading a memory"))?;
    let importance: i32 = row.try_get(4).map_err(pg("reading a memory"))?;
    let id: i64 = row.try_get(0).map_err(pg("reading a memory"))?;
    let importance = u8::try_from(importance).map_err(|_| {
        StoreError::Invalid(format!(
            "memory {id}: stored importance {importance} is out of range; the database was \
             edited by hand: fix the row or forget the memory with `aurad memory forget {id}`"
        ))
    })?;
    let get = |e| pg("reading a memory")(e);
    Ok(Stored {
        memory: Memory {
            id,
            namespace: row.try_get(1).map_err(get)?,
            content: row.try_get(2).map_err(get)?,
            category: row.try_get(3).map_err(get)?,
            importance,
            created_at: row.try_get(5).map_err(get)?,
            updated_at: row.try_get(6).map_err(get)?,
            access_count: row.try_get::<_, i64>(7).map_err(get)?.max(0) as u64,
            run_id: row.try_get(8).map_err(get)?,
            metadata: serde_json::from_str(&metadata)
                .unwrap_or(serde_json::Value::String(metadata)),
        },
        norm: row.try_get(10).map_err(get)?,
        norm_epoch: row.try_get(11).map_err(get)?,
        impact: row.try_get(12).map_err(get)?,
    })
}

/// The namespace's row; `lock` takes its row lock (the turn of a writer).
pub(super) async fn namespace(
    c: &impl GenericClient,
    name: &str,
    lock: bool,
) -> Result<Option<Namespace>, StoreError> {
    let sql = if lock {
        "SELECT id, entries, epoch FROM memory_namespaces WHERE name = $1 FOR UPDATE"
    } else {
        "SELECT id, entries, epoch FROM memory_namespaces WHERE name = $1"
    };
    let stmt = c
        .prepare_cached(sql)
        .await
        .map_err(pg("reading a memory namespace"))?;
    let row = c
        .query_opt(&stmt, &[&name])
        .await
        .map_err(pg("reading a memory namespace"))?;
    Ok(row.map(|r| Namespace {
        id: r.get(0),
        entries: r.get::<_, i64>(1).max(0) as u64,
        epoch: r.get(2),
    }))
}

/// The namespace's row, created if missing, locked. Two nodes creating it
/// at once: the second's insert waits for the first's commit and does
/// nothing (unique `name`), then both lock the one row in turn.
pub(super) async fn namespace_or_create(
    tx: &Transaction<'_>,
    name: &str,
) -> Result<Namespace, StoreError> {
    if let Some(ns) = namespace(tx, name, true).await? {
        return Ok(ns);
    }
    execute(
        tx,
        "INSERT INTO memory_namespaces (name) VALUES ($1) ON CONFLICT (name) DO NOTHING",
        &[&name],
        "creating a memory namespace",
    )
    .await?;
    namespace(tx, name, true).await?.ok_or_else(|| {
        StoreError::Internal(format!(
            "memory namespace {name:?} vanished while being created"
        ))
    })
}

/// Adds `delta` to the namespace's entry count and starts a new epoch (every
/// cached norm of it becomes stale).
async fn touch(tx: &Transaction<'_>, ns: i64, delta: i64) -> Result<(), StoreError> {
    execute(
        tx,
        "UPDATE memory_namespaces SET entries = entries + $2, epoch = epoch + 1 WHERE id = $1",
        &[&ns, &delta],
        "updating a memory namespace",
    )
    .await?;
    Ok(())
}

/// The df of each of `terms` in namespace `ns` (0 for a term of none).
pub(super) async fn dfs_of(
    c: &impl GenericClient,
    ns: i64,
    terms: &[String],
) -> Result<HashMap<String, u64>, StoreError> {
    let stmt = c
        .prepare_cached("SELECT term, df FROM memory_df WHERE ns = $1 AND term = ANY($2)")
        .await
        .map_err(pg("reading the memory index"))?;
    let rows = c
        .query(&stmt, &[&ns, &terms])
        .await
        .map_err(pg("reading the memory index"))?;
    let mut dfs: HashMap<String, u64> = terms.iter().map(|t| (t.clone(), 0)).collect();
    for row in rows {
        dfs.insert(row.get(0), row.get::<_, i64>(1).max(0) as u64);
    }
    Ok(dfs)
}

fn keys(counts: &TermCounts) -> Vec<String> {
    counts.keys().cloned().collect()
}

async fn add_terms(
    tx: &Transaction<'_>,
    ns: i64,
    id: i64,
    impact: f64,
    counts: &TermCounts,
) -> Result<(), StoreError> {
    let terms = keys(counts);
    let tfs: Vec<i32> = counts.values().map(|&tf| tf as i32).collect();
    execute(
        tx,
        "INSERT INTO memory_terms (ns, term, impact, memory_id, tf) \
             SELECT $1, t, $2, $3, f FROM unnest($4::text[], $5::int4[]) AS u(t, f)",
        &[&ns, &impact, &id, &terms, &tfs],
        "indexing a memory",
    )
    .await?;
    bump_df(tx, ns, &terms, &vec![1; terms.len()]).await
}

/// Adds `counts[i]` to the df of `terms[i]` (sorted terms: rows are locked
/// in one order).
async fn bump_df(
    tx: &Transaction<'_>,
    ns: i64,
    terms: &[String],
    counts: &[i64],
) -> Result<(), StoreError> {
    execute(tx, "INSERT INTO memory_df (ns, term, df) SELECT $1, t, n FROM unnest($2::text[], $3::int8[]) AS u(t, n) \
             ON CONFLICT (ns, term) DO UPDATE SET df = memory_df.df + excluded.df", &[&ns, &terms, &counts], "indexing a memory").await?;
    Ok(())
}

async fn remove_terms(
    tx: &Transaction<'_>,
    ns: i64,
    id: i64,
    impact: f64,
    counts: &TermCounts,
) -> Result<(), StoreError> {
    let terms = keys(counts);
    let posting = tx
        .prepare_cached(
            "DELETE FROM memory_terms WHERE ns = $1 AND term = ANY($2) AND impact = $3 \
             AND memory_id = $4 RETURNING term",
        )
        .await
        .map_err(pg("unindexing a memory"))?;
    let mut removed: Vec<String> = tx
        .query(&posting, &[&ns, &terms, &impact, &id])
        .await
        .map_err(pg("unindexing a memory"))?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if removed.is_empty() {
        return Ok(());
    }
    removed.sort();
    execute(
        tx,
        "UPDATE memory_df SET df = df - 1 WHERE ns = $1 AND term = ANY($2)",
        &[&ns, &removed],
        "unindexing a memory",
    )
    .await?;
    execute(
        tx,
        "DELETE FROM memory_df WHERE ns = $1 AND term = ANY($2) AND df <= 0",
        &[&ns, &removed],
        "unindexing a memory",
    )
    .await?;
    Ok(())
}

/// Moves a memory's postings to a new impact (its importance or access
/// bound changed) and records it in its row.
pub(super) async fn set_impact(
    tx: &Transaction<'_>,
    ns: i64,
    id: i64,
    old: f64,
    new: f64,
    counts: &TermCounts,
) -> Result<(), StoreError> {
    let terms = keys(counts);
    execute(
        tx,
        "UPDATE memory_terms SET impact = $4 \
             WHERE ns = $1 AND term = ANY($2) AND impact = $3 AND memory_id = $5",
        &[&ns, &terms, &old, &new, &id],
        "re-ranking a memory",
    )
    .await?;
    execute(
        tx,
        "UPDATE memories SET impact = $2 WHERE id = $1",
        &[&id, &new],
        "re-ranking a memory",
    )
    .await?;
    Ok(())
}

pub(super) async fn load(
    c: &impl GenericClient,
    namespace: &str,
    id: i64,
) -> Result<Option<Stored>, StoreError> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT {MEMORY_COLUMNS} FROM memories WHERE id = $1 AND namespace = $2"
        ))
        .await
        .map_err(pg("reading a memory"))?;
    c.query_opt(&stmt, &[&id, &namespace])
        .await
        .map_err(pg("reading a memory"))?
        .as_ref()
        .map(stored_from_row)
        .transpose()
}

/// A [`NewMemory`] checked, with its times normalised to milliseconds: the
/// same checks and messages as the SQLite backend's (`memory::write`).
pub(super) struct Checked {
    pub new: NewMemory,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    metadata: String,
    pub counts: TermCounts,
}

/// Checks `new` (`store::memory::check_memory`) and counts its terms.
pub(super) fn check(new: NewMemory, now: DateTime<Utc>, what: &str) -> Result<Checked, StoreError> {
    let checked = check_memory(new, now, what)?;
    let counts = score::term_counts(&checked.new.content);
    Ok(Checked {
        new: checked.new,
        created_at: checked.created_at,
        updated_at: checked.updated_at,
        metadata: checked.metadata,
        counts,
    })
}

pub(super) async fn save(
    tx: &Transaction<'_>,
    checked: &Checked,
    max_entries: usize,
    now: DateTime<Utc>,
) -> Result<Saved, StoreError> {
    let new = &checked.new;
    let ns = namespace_or_create(tx, &new.namespace).await?;
    let best = memory_recall::best_matches(
        tx,
        ns,
        &new.namespace,
        &new.content,
        1,
        score::MERGE_THRESHOLD,
        now,
    )
    .await?;
    save_matched(tx, ns, checked, best, max_entries, now).await
}

/// The rest of [`save`] once the merge check found `best` (the best match
/// of the content in locked namespace `ns`): merges into it if it scores
/// above the merge threshold, else inserts; then cleans up.
pub(super) async fn save_matched(
    tx: &Transaction<'_>,
    ns: Namespace,
    checked: &Checked,
    best: Vec<Recalled>,
    max_entries: usize,
    now: DateTime<Utc>,
) -> Result<Saved, StoreError> {
    let new = &checked.new;
    let saved = match best.into_iter().find(|b| b.score > score::MERGE_THRESHOLD) {
        Some(best) => {
            let id = best.memory.id;
            merge(tx, ns, best.memory, checked, now).await?;
            Saved::Merged(id)
        }
        None => Saved::Created(insert(tx, ns, checked).await?),
    };
    cleanup(tx, &new.namespace, max_entries, now).await?;
    Ok(saved)
}

async fn merge(
    tx: &Transaction<'_>,
    ns: Namespace,
    old: Memory,
    checked: &Checked,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let new = &checked.new;
    let content = score::merge_content(&old.content, &new.content);
    let old_impact = load(tx, &new.namespace, old.id)
        .await?
        .map(|s| s.impact)
        .ok_or_else(|| {
            StoreError::Internal(format!("memory {} vanished during a merge", old.id))
        })?;
    let impact = score::impact(
        old.importance.max(new.importance),
        old.access_count + 1,
        old.created_at,
    );
    remove_terms(
        tx,
        ns.id,
        old.id,
        old_impact,
        &score::term_counts(&old.content),
    )
    .await?;
    let counts = score::term_counts(&content);
    add_terms(tx, ns.id, old.id, impact, &counts).await?;
    let metadata = match (old.metadata, &new.metadata) {
        (serde_json::Value::Object(mut a), serde_json::Value::Object(b)) => {
            a.extend(b.clone());
            serde_json::Value::Object(a)
        }
        (old, serde_json::Value::Null) => old,
        (_, new) => new.clone(),
    };
    let stmt = tx
        .prepare_cached(
            "UPDATE memories SET content = $2, importance = GREATEST(importance, $3), \
             access_count = access_count + 1, updated_at = $4, run_id = COALESCE($5, run_id), \
             metadata = $6, impact = $7, norm = NULL, norm_epoch = NULL WHERE id = $1",
        )
        .await
        .map_err(pg("merging a memory"))?;
    tx.execute(
        &stmt,
        &[
            &old.id,
            &content,
            &i32::from(new.importance),
            &millis(now),
            &new.run_id,
            &metadata.to_string(),
            &impact,
        ],
    )
    .await
    .map_err(pg("merging a memory"))?;
    touch(tx, ns.id, 0).await
}

const INSERT_ROW: &str = "INSERT INTO memories (namespace, content, category, importance, \
     created_at, updated_at, access_count, run_id, metadata, impact) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id";

/// The impact of a checked memory as stored.
fn impact_of(c: &Checked) -> f64 {
    score::impact(c.new.importance, c.new.access_count, c.created_at)
}

/// Inserts the row of `c`; returns its id.
async fn insert_row(
    tx: &Transaction<'_>,
    stmt: &tokio_postgres::Statement,
    c: &Checked,
) -> Result<i64, StoreError> {
    let new = &c.new;
    let row = tx
        .query_one(
            stmt,
            &[
                &new.namespace,
                &new.content,
                &new.category,
                &i32::from(new.importance),
                &c.created_at,
                &c.updated_at,
                &(new.access_count.min(i64::MAX as u64) as i64),
                &new.run_id,
                &c.metadata,
                &impact_of(c),
            ],
        )
        .await
        .map_err(pg("inserting a memory"))?;
    Ok(row.get(0))
}

async fn insert(tx: &Transaction<'_>, ns: Namespace, checked: &Checked) -> Result<i64, StoreError> {
    let stmt = tx
        .prepare_cached(INSERT_ROW)
        .await
        .map_err(pg("inserting a memory"))?;
    let id = insert_row(tx, &stmt, checked).await?;
    add_terms(tx, ns.id, id, impact_of(checked), &checked.counts).await?;
    touch(tx, ns.id, 1).await?;
    Ok(id)
}

/// Deletes one memory and its postings (the caller holds the namespace's
/// lock).
pub(super) async fn delete_in(
    tx: &Transaction<'_>,
    ns: Namespace,
    namespace_name: &str,
    id: i64,
) -> Result<bool, StoreError> {
    let Some(stored) = load(tx, namespace_name, id).await? else {
        return Ok(false);
    };
    let counts = score::term_counts(&stored.memory.content);
    remove_terms(tx, ns.id, id, stored.impact, &counts).await?;
    execute(
        tx,
        "DELETE FROM memories WHERE id = $1",
        &[&id],
        "deleting a memory",
    )
    .await?;
    touch(tx, ns.id, -1).await?;
    Ok(true)
}

/// Past `max_entries`, keeps the best 80% of `max_entries` by the cleanup
/// score (ties: the newer id stays) and deletes the rest.
async fn cleanup(
    tx: &Transaction<'_>,
    namespace_name: &str,
    max_entries: usize,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let Some(ns) = namespace(tx, namespace_name, false).await? else {
        return Ok(());
    };
    if ns.entries as usize <= max_entries {
        return Ok(());
    }
    let rows = tx
        .query(
            "SELECT id, created_at, importance, access_count FROM memories WHERE namespace = $1",
            &[&namespace_name],
        )
        .await
        .map_err(pg("reading memories for cleanup"))?;
    let mut scored: Vec<(f64, i64)> = rows
        .iter()
        .map(|r| {
            let created: DateTime<Utc> = r.get(1);
            let importance = u8::try_from(r.get::<_, i32>(2)).unwrap_or(0);
            let access = r.get::<_, i64>(3).max(0) as u64;
            let age = score::age_days(created, now);
            (
                score::cleanup_score(age, importance, access),
                r.get::<_, i64>(0),
            )
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    let keep = score::cleanup_keep(max_entries);
    for &(_, id) in scored.iter().skip(keep) {
        delete_in(tx, ns, namespace_name, id).await?;
    }
    tracing::debug!(
        namespace = namespace_name,
        deleted = scored.len().saturating_sub(keep),
        "memory cleanup"
    );
    Ok(())
}

pub(super) async fn import(tx: &Transaction<'_>, checked: &[Checked]) -> Result<(), StoreError> {
    // Lock (or create) every namespace first, in name order: two imports
    // touching the same namespaces cannot deadlock.
    let mut spaces: BTreeMap<String, (Namespace, i64)> = BTreeMap::new();
    for c in checked {
        spaces.entry(c.new.namespace.clone()).or_insert((
            Namespace {
                id: 0,
                entries: 0,
                epoch: 0,
            },
            0,
        ));
    }
    for (name, (ns, _)) in spaces.iter_mut() {
        *ns = namespace_or_create(tx, name).await?;
    }
    let stmt = tx
        .prepare_cached(INSERT_ROW)
        .await
        .map_err(pg("inserting a memory"))?;
    // Term postings per namespace: (term, impact, id, tf).
    let mut postings: BTreeMap<i64, Vec<(String, f64, i64, i32)>> = BTreeMap::new();
    let mut dfs: BTreeMap<(i64, String), i64> = BTreeMap::new();
    for chunk in checked.chunks(IMPORT_CHUNK) {
        // Pipelined: one connection runs them in order, so ids follow the
        // entries' order as on SQLite.
        let ids =
            futures::future::try_join_all(chunk.iter().map(|c| insert_row(tx, &stmt, c))).await?;
        for (c, id) in chunk.iter().zip(ids) {
            let entry = spaces.get_mut(&c.new.namespace).ok_or_else(|| {
                StoreError::Internal(format!("namespace {:?} not locked", c.new.namespace))
            })?;
            entry.1 += 1;
            let ns = entry.0.id;
            let impact = impact_of(c);
            for (term, &tf) in &c.counts {
                *dfs.entry((ns, term.clone())).or_insert(0) += 1;
                postings
                    .entry(ns)
                    .or_default()
                    .push((term.clone(), impact, id, tf as i32));
            }
        }
    }
    let post = tx
        .prepare_cached(
            "INSERT INTO memory_terms (ns, term, impact, memory_id, tf) SELECT $1, t, i, m, f \
             FROM unnest($2::text[], $3::float8[], $4::int8[], $5::int4[]) AS u(t, i, m, f)",
        )
        .await
        .map_err(pg("indexing imported memories"))?;
    for (ns, mut list) in postings {
        list.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(a.2.cmp(&b.2)));
        for part in list.chunks(IMPORT_CHUNK * 8) {
            let terms: Vec<&str> = part.iter().map(|p| p.0.as_str()).collect();
            let impacts: Vec<f64> = part.iter().map(|p| p.1).collect();
            let ids: Vec<i64> = part.iter().map(|p| p.2).collect();
            let tfs: Vec<i32> = part.iter().map(|p| p.3).collect();
            tx.execute(&post, &[&ns, &terms, &impacts, &ids, &tfs])
                .await
                .map_err(pg("indexing imported memories"))?;
        }
    }
    let mut by_ns: BTreeMap<i64, (Vec<String>, Vec<i64>)> = BTreeMap::new();
    for ((ns, term), n) in dfs {
        let e = by_ns.entry(ns).or_default();
        e.0.push(term);
        e.1.push(n);
    }
    for (ns, (terms, counts)) in by_ns {
        for (t, n) in terms
            .chunks(IMPORT_CHUNK * 8)
            .zip(counts.chunks(IMPORT_CHUNK * 8))
        {
            bump_df(tx, ns, t, n).await?;
        }
    }
    for (name, (ns, added)) in &spaces {
        touch(tx, ns.id, *added).await?;
        warm_norms(tx, name).await?;
    }
    Ok(())
}

/// Computes and caches every norm of a namespace (after a bulk change, so
/// the first recalls are as fast as the later ones).
async fn warm_norms(tx: &Transaction<'_>, name: &str) -> Result<(), StoreError> {
    let Some(ns) = namespace(tx, name, false).await? else {
        return Ok(());
    };
    let dfs: HashMap<String, u64> = tx
        .query("SELECT term, df FROM memory_df WHERE ns = $1", &[&ns.id])
        .await
        .map_err(pg("reading the memory index"))?
        .iter()
        .map(|r| (r.get(0), r.get::<_, i64>(1).max(0) as u64))
        .collect();
    let docs = tx
        .query(
            "SELECT id, content FROM memories WHERE namespace = $1 ORDER BY id",
            &[&name],
        )
        .await
        .map_err(pg("reading memories"))?;
    let mut ids = Vec::with_capacity(docs.len());
    let mut norms = Vec::with_capacity(docs.len());
    for row in docs {
        let counts = score::term_counts(row.get(1));
        ids.push(row.get::<_, i64>(0));
        norms.push(score::norm(&counts, |t| {
            score::idf(ns.entries, dfs.get(t).copied().unwrap_or(0))
        }));
    }
    for (ids, norms) in ids
        .chunks(IMPORT_CHUNK * 8)
        .zip(norms.chunks(IMPORT_CHUNK * 8))
    {
        memory_recall::write_norms(tx, ids, norms, ns.epoch).await?;
    }
    Ok(())
}
