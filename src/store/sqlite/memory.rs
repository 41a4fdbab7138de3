//! Long-term memory: the `memories` table and its inverted index
//! (`memory_terms`: postings with raw counts; `memory_df`: document frequency
//! per term; `memory_namespaces`: entry count N and a change epoch per
//! namespace). All memory SQL is here; the math is [`score`].
//!
//! Recall reads only memories sharing a query term, rarest term first. Each
//! term's postings are stored in "impact" order (log2 of an upper bound of a
//! memory's three boosts, independent of the clock: `score::impact`), and a
//! term's list is read only while |q restricted to this and later terms| /
//! |q| x the posting's boost bound can still reach the threshold (min score,
//! or the k-th best so far). Each scored candidate gets the formula's score
//! exactly: its vector norm depends on N and the df of all its terms, so it
//! is cached with the namespace epoch it was computed at and recomputed from
//! the content when the namespace changed since. Recall moves a memory's
//! postings only when its access count crosses a cap (1, 3, 7, 15...).
//! Submodules: `api` (the `Store` methods), `write` (save, merge, cleanup,
//! delete, import).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{StoreError, sql};
use crate::types::memory::{Memory, Recalled};
use score::TermCounts;

mod api;
use crate::store::memory_score as score;
mod write;

/// Safety margin on pruning bounds against floating-point rounding.
const BOUND_SLACK: f64 = 1.0 + 1e-9;

const MEMORY_COLUMNS: &str = "id, namespace, content, category, importance, created_at, \
     updated_at, access_count, run_id, metadata, norm, norm_epoch, impact";

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A namespace's row in `memory_namespaces`.
#[derive(Debug, Clone, Copy)]
struct Namespace {
    id: i64,
    entries: u64,
    epoch: i64,
}

fn namespace(conn: &Connection, name: &str) -> Result<Option<Namespace>, StoreError> {
    conn.prepare_cached("SELECT id, entries, epoch FROM memory_namespaces WHERE name = ?1")
        .and_then(|mut s| {
            s.query_row([name], |r| {
                Ok(Namespace {
                    id: r.get(0)?,
                    entries: r.get::<_, i64>(1)?.max(0) as u64,
                    epoch: r.get(2)?,
                })
            })
            .optional()
        })
        .map_err(sql("reading a memory namespace"))
}

fn namespace_or_create(conn: &Connection, name: &str) -> Result<Namespace, StoreError> {
    if let Some(ns) = namespace(conn, name)? {
        return Ok(ns);
    }
    conn.execute("INSERT INTO memory_namespaces (name) VALUES (?1)", [name])
        .map_err(sql("creating a memory namespace"))?;
    Ok(Namespace {
        id: conn.last_insert_rowid(),
        entries: 0,
        epoch: 0,
    })
}

/// Adds `delta` to the namespace's entry count and starts a new epoch (every
/// cached norm of it becomes stale).
fn touch(conn: &Connection, ns: i64, delta: i64) -> Result<(), StoreError> {
    conn.prepare_cached(
        "UPDATE memory_namespaces SET entries = entries + ?2, epoch = epoch + 1 WHERE id = ?1",
    )
    .and_then(|mut s| s.execute(params![ns, delta]))
    .map_err(sql("updating a memory namespace"))?;
    Ok(())
}

fn df(conn: &Connection, ns: i64, term: &str) -> Result<u64, StoreError> {
    conn.prepare_cached("SELECT df FROM memory_df WHERE ns = ?1 AND term = ?2")
        .and_then(|mut s| {
            s.query_row(params![ns, term], |r| r.get::<_, i64>(0))
                .optional()
        })
        .map(|df| df.unwrap_or_default().max(0) as u64)
        .map_err(sql("reading the memory index"))
}

fn add_terms(
    conn: &Connection,
    ns: i64,
    id: i64,
    impact: f64,
    counts: &TermCounts,
) -> Result<(), StoreError> {
    let mut posting = conn
        .prepare_cached(
            "INSERT INTO memory_terms (ns, term, impact, memory_id, tf) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .map_err(sql("indexing a memory"))?;
    let mut bump = conn
        .prepare_cached(
            "INSERT INTO memory_df (ns, term, df) VALUES (?1, ?2, ?3) \
             ON CONFLICT (ns, term) DO UPDATE SET df = df + excluded.df",
        )
        .map_err(sql("indexing a memory"))?;
    for (term, tf) in counts {
        posting
            .execute(params![ns, term, impact, id, tf])
            .map_err(sql("indexing a memory"))?;
        bump.execute(params![ns, term, 1])
            .map_err(sql("indexing a memory"))?;
    }
    Ok(())
}

fn remove_terms(
    conn: &Connection,
    ns: i64,
    id: i64,
    impact: f64,
    counts: &TermCounts,
) -> Result<(), StoreError> {
    let mut posting = conn
        .prepare_cached(
            "DELETE FROM memory_terms WHERE ns = ?1 AND term = ?2 AND impact = ?3 AND memory_id = ?4",
        )
        .map_err(sql("unindexing a memory"))?;
    let mut drop_df = conn
        .prepare_cached("UPDATE memory_df SET df = df - 1 WHERE ns = ?1 AND term = ?2")
        .map_err(sql("unindexing a memory"))?;
    let mut purge = conn
        .prepare_cached("DELETE FROM memory_df WHERE ns = ?1 AND term = ?2 AND df <= 0")
        .map_err(sql("unindexing a memory"))?;
    for term in counts.keys() {
        if posting
            .execute(params![ns, term, impact, id])
            .map_err(sql("unindexing a memory"))?
            == 1
        {
            drop_df
                .execute(params![ns, term])
                .map_err(sql("unindexing a memory"))?;
            purge
                .execute(params![ns, term])
                .map_err(sql("unindexing a memory"))?;
        }
    }
    Ok(())
}

/// Moves a memory's postings to a new impact (its importance or access
/// bound changed) and records it in its row.
fn set_impact(
    conn: &Connection,
    ns: i64,
    id: i64,
    old: f64,
    new: f64,
    counts: &TermCounts,
) -> Result<(), StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "UPDATE memory_terms SET impact = ?4 \
             WHERE ns = ?1 AND term = ?2 AND impact = ?3 AND memory_id = ?5",
        )
        .map_err(sql("re-ranking a memory"))?;
    for term in counts.keys() {
        stmt.execute(params![ns, term, old, new, id])
            .map_err(sql("re-ranking a memory"))?;
    }
    conn.prepare_cached("UPDATE memories SET impact = ?2 WHERE id = ?1")
        .and_then(|mut s| s.execute(params![id, new]))
        .map_err(sql("re-ranking a memory"))?;
    Ok(())
}

/// A memory row with its cached norm.
struct Stored {
    memory: Memory,
    norm: Option<f64>,
    norm_epoch: Option<i64>,
    impact: f64,
}

fn stored_from_row(row: &Row) -> rusqlite::Result<Stored> {
    let metadata: String = row.get(9)?;
    Ok(Stored {
        memory: Memory {
            id: row.get(0)?,
            namespace: row.get(1)?,
            content: row.get(2)?,
            category: row.get(3)?,
            importance: row.get(4)?,
            created_at: stored_time(row, 5)?,
            updated_at: stored_time(row, 6)?,
            access_count: row.get::<_, i64>(7)?.max(0) as u64,
            run_id: row.get(8)?,
            metadata: serde_json::from_str(&metadata)
                .unwrap_or(serde_json::Value::String(metadata)),
        },
        norm: row.get(10)?,
        norm_epoch: row.get(11)?,
        impact: row.get(12)?,
    })
}

/// Column `index` of a memory row, an RFC 3339 time (as every aurad
/// writes it; schema migration 13 rewrote older rows so).
fn stored_time(row: &Row, index: usize) -> rusqlite::Result<DateTime<Utc>> {
    let text: String = row.get(index)?;
    score::parse_time(&text).ok_or_else(|| {
        let id: i64 = row.get(0).unwrap_or_default();
        rusqlite::Error::FromSqlConversionFailure(
            index,
            rusqlite::types::Type::Text,
            format!(
                "memory {id}: stored time {text:?} is not RFC 3339; the database was edited by \
                 hand: fix the row or forget the memory with `aurad memory forget {id}`"
            )
            .into(),
        )
    })
}

fn load(conn: &Connection, namespace: &str, id: i64) -> Result<Option<Stored>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ?1 AND namespace = ?2"
    ))
    .and_then(|mut s| {
        s.query_row(params![id, namespace], stored_from_row)
            .optional()
    })
    .map_err(sql("reading a memory"))
}

/// True when a recall of `query` in `namespace` cannot find anything (no
/// memories there, no term in the query, or a limit of 0). Only reads, so
/// it can run on the reader thread and spare the writer a job.
fn nothing_to_recall(
    conn: &Connection,
    namespace: &str,
    query: &str,
    limit: usize,
) -> Result<bool, StoreError> {
    if limit == 0 || score::term_counts(query).is_empty() {
        return Ok(true);
    }
    Ok(self::namespace(conn, namespace)?.is_none_or(|ns| ns.entries == 0))
}

fn recall(
    conn: &mut Connection,
    namespace: &str,
    query: &str,
    limit: usize,
    min_score: f64,
    now: DateTime<Utc>,
) -> Result<Vec<Recalled>, StoreError> {
    let tx = conn.savepoint().map_err(sql("starting a recall"))?;
    let found = best_matches(&tx, namespace, query, limit, min_score, now)?;
    if let (Some(ns), false) = (self::namespace(&tx, namespace)?, found.is_empty()) {
        let mut bump = tx
            .prepare_cached(
                "UPDATE memories SET access_count = access_count + 1 WHERE id = ?1 RETURNING impact",
            )
            .map_err(sql("counting a recall"))?;
        for r in &found {
            let m = &r.memory;
            let old: f64 = bump
                .query_row([m.id], |row| row.get(0))
                .map_err(sql("counting a recall"))?;
            if score::access_cap(m.access_count + 1) != score::access_cap(m.access_count) {
                let new = score::impact(m.importance, m.access_count + 1, m.created_at);
                set_impact(&tx, ns.id, m.id, old, new, &score::term_counts(&m.content))?;
            }
        }
    }
    tx.commit().map_err(sql("committing a recall"))?;
    Ok(found)
}

/// Recall without the access bump (also the merge check of a save). Writes
/// the norms it had to recompute back to their rows.
fn best_matches(
    conn: &Connection,
    namespace_name: &str,
    query: &str,
    limit: usize,
    min_score: f64,
    now: DateTime<Utc>,
) -> Result<Vec<Recalled>, StoreError> {
    let query = score::term_counts(query);
    let Some(ns) = namespace(conn, namespace_name)? else {
        return Ok(Vec::new());
    };
    if limit == 0 || query.is_empty() || ns.entries == 0 {
        return Ok(Vec::new());
    }
    let n = ns.entries;
    let mut dfs: HashMap<String, u64> = HashMap::new();
    for term in query.keys() {
        dfs.insert(term.clone(), df(conn, ns.id, term)?);
    }
    let query_norm = score::norm(&query, |t| score::idf(n, dfs[t]));
    // Terms some memory contains, rarest first, with their query weight.
    let mut terms: Vec<(String, u64, f64)> = query
        .iter()
        .filter(|(t, _)| dfs[*t] > 0)
        .map(|(t, &qtf)| (t.clone(), dfs[t], f64::from(qtf) * score::idf(n, dfs[t])))
        .collect();
    terms.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
    // remaining[i]: squared query weight of terms i.. A memory not scored
    // before term i contains no earlier term, or was skipped there as unable
    // to reach the threshold; so its cosine is at most sqrt(remaining[i])/|q|.
    let mut remaining = vec![0.0; terms.len() + 1];
    for i in (0..terms.len()).rev() {
        remaining[i] = remaining[i + 1] + terms[i].2 * terms[i].2;
    }
    let mut seen = HashSet::new();
    let mut found: Vec<Recalled> = Vec::new();
    let mut postings = conn
        .prepare_cached(
            "SELECT impact, memory_id FROM memory_terms WHERE ns = ?1 AND term = ?2 \
             ORDER BY impact DESC",
        )
        .map_err(sql("reading the memory index"))?;
    for (i, (term, _, _)) in terms.iter().enumerate() {
        let cosine_bound = remaining[i].sqrt() / query_norm * BOUND_SLACK;
        let mut rows = postings
            .query(params![ns.id, term])
            .map_err(sql("reading the memory index"))?;
        while let Some(row) = rows.next().map_err(sql("reading the memory index"))? {
            let threshold = match found.get(limit - 1) {
                Some(kth) => kth.score.max(min_score),
                None => min_score,
            };
            let impact: f64 = row.get(0).map_err(sql("reading the memory index"))?;
            if cosine_bound * score::boost_bound(impact, now) * BOUND_SLACK < threshold {
                break; // the rest of this term's memories have lower impact
            }
            let id: i64 = row.get(1).map_err(sql("reading the memory index"))?;
            if !seen.insert(id) {
                continue;
            }
            if let Some(r) = score_one(
                conn,
                ns,
                namespace_name,
                id,
                &query,
                query_norm,
                &mut dfs,
                now,
            )? && r.score >= min_score
            {
                let at = found.partition_point(|f| {
                    f.score > r.score || (f.score == r.score && f.memory.id < r.memory.id)
                });
                found.insert(at, r);
                found.truncate(limit);
            }
        }
    }
    Ok(found)
}

/// The exact score of memory `id` for `query` (recomputing and caching its
/// norm if the namespace changed since it was cached).
#[allow(
    clippy::too_many_arguments,
    reason = "the recall loop's state, passed as it is rather than bundled for one call"
)]
fn score_one(
    conn: &Connection,
    ns: Namespace,
    namespace_name: &str,
    id: i64,
    query: &TermCounts,
    query_norm: f64,
    dfs: &mut HashMap<String, u64>,
    now: DateTime<Utc>,
) -> Result<Option<Recalled>, StoreError> {
    let Some(stored) = load(conn, namespace_name, id)? else {
        return Ok(None);
    };
    let doc = score::term_counts(&stored.memory.content);
    let norm = match (stored.norm, stored.norm_epoch) {
        (Some(norm), Some(epoch)) if epoch == ns.epoch => norm,
        _ => {
            let norm = doc_norm(conn, ns, &doc, dfs)?;
            conn.prepare_cached("UPDATE memories SET norm = ?2, norm_epoch = ?3 WHERE id = ?1")
                .and_then(|mut s| s.execute(params![id, norm, ns.epoch]))
                .map_err(sql("caching a memory norm"))?;
            norm
        }
    };
    let dot = score::dot(query, &doc, |t| score::idf(ns.entries, dfs[t]));
    let m = &stored.memory;
    let value = score::score(
        score::cosine(dot, query_norm, norm),
        score::age_days(m.created_at, now),
        m.importance,
        m.access_count,
    );
    Ok(Some(Recalled {
        memory: stored.memory,
        score: value,
    }))
}

/// The norm of a memory's vector with the namespace's current IDF.
fn doc_norm(
    conn: &Connection,
    ns: Namespace,
    doc: &TermCounts,
    dfs: &mut HashMap<String, u64>,
) -> Result<f64, StoreError> {
    for term in doc.keys() {
        if !dfs.contains_key(term) {
            dfs.insert(term.clone(), df(conn, ns.id, term)?);
        }
    }
    Ok(score::norm(doc, |t| score::idf(ns.entries, dfs[t])))
}
