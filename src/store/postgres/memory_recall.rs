//! Recall on PostgreSQL: the SQLite backend's exact scores and order
//! (`crate::store::memory_score`), with the candidates found as SQLite
//! finds them: the postings of `memory_terms` read in impact order, rarest
//! query term first, a batch at a time through a portal and stopped as soon
//! as the rest cannot reach the threshold. Each candidate is scored exactly
//! (its norm recomputed when the namespace changed since it was cached).
//!
//! The other way measured, a GIN index on an array of each memory's terms,
//! lost (`benches/pg_memory.rs`; BENCHMARKS.md) and lives in the bench's
//! `memory_bench`, which plugs it between [`Plan::new`] and
//! [`Plan::finish`] as [`best_matches`] plugs the postings.
//!
//! The caller holds the namespace's row lock (see `memory`), so the norms
//! cached and the access counts bumped here race with nobody.
//!
//! Depends on `memory` (rows, namespaces, the index helpers).

use std::collections::{BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;

use super::memory::{
    MEMORY_COLUMNS, Namespace, Stored, dfs_of, namespace, set_impact, stored_from_row,
};
use super::{execute, pg};
use crate::store::StoreError;
use crate::store::memory_score::{self as score, TermCounts};
use crate::types::memory::Recalled;

/// Safety margin on pruning bounds against floating-point rounding (as
/// SQLite's).
pub(super) const BOUND_SLACK: f64 = 1.0 + 1e-9;

/// Postings fetched by the first read of a term's list; each further read
/// doubles it, up to [`MAX_BATCH`].
const FIRST_BATCH: i32 = 32;
const MAX_BATCH: i32 = 1024;

/// Recall: the best matches, then each one's access count bumped (moving
/// its postings when its access bound changes), as SQLite's `recall`.
pub(super) async fn recall(
    tx: &Transaction<'_>,
    name: &str,
    query: &str,
    limit: usize,
    min_score: f64,
    now: DateTime<Utc>,
) -> Result<Vec<Recalled>, StoreError> {
    let Some(ns) = namespace(tx, name, true).await? else {
        return Ok(Vec::new());
    };
    let found = best_matches(tx, ns, name, query, limit, min_score, now).await?;
    count_recalled(tx, ns, found).await
}

/// Bumps the access count of each of `found` (recalled from locked
/// namespace `ns`), moving its postings when its access bound changes.
pub(super) async fn count_recalled(
    tx: &Transaction<'_>,
    ns: Namespace,
    found: Vec<Recalled>,
) -> Result<Vec<Recalled>, StoreError> {
    if found.is_empty() {
        return Ok(found);
    }
    let mut ids: Vec<i64> = found.iter().map(|r| r.memory.id).collect();
    ids.sort_unstable();
    let bump = tx
        .prepare_cached(
            "UPDATE memories SET access_count = access_count + 1 WHERE id = ANY($1) \
             RETURNING id, impact",
        )
        .await
        .map_err(pg("counting a recall"))?;
    let old: HashMap<i64, f64> = tx
        .query(&bump, &[&ids])
        .await
        .map_err(pg("counting a recall"))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for r in &found {
        let m = &r.memory;
        if score::access_cap(m.access_count + 1) != score::access_cap(m.access_count) {
            let old = *old.get(&m.id).ok_or_else(|| {
                StoreError::Internal(format!("memory {} vanished during a recall", m.id))
            })?;
            let new = score::impact(m.importance, m.access_count + 1, m.created_at);
            set_impact(tx, ns.id, m.id, old, new, &score::term_counts(&m.content)).await?;
        }
    }
    Ok(found)
}

/// The scoring state of one recall: the query, the df known so far, the
/// best matches so far and the norms to cache.
pub(super) struct Scorer {
    pub ns: Namespace,
    query: TermCounts,
    pub query_norm: f64,
    dfs: HashMap<String, u64>,
    found: Vec<Recalled>,
    norms: Vec<(i64, f64)>,
    limit: usize,
    pub min_score: f64,
    pub now: DateTime<Utc>,
}

impl Scorer {
    /// The score a candidate must reach: the k-th best so far, or min_score.
    fn threshold(&self) -> f64 {
        match self.found.get(self.limit - 1) {
            Some(kth) => kth.score.max(self.min_score),
            None => self.min_score,
        }
    }

    /// Scores `rows` exactly and keeps the best `limit` of all scored.
    pub(super) async fn score(
        &mut self,
        tx: &Transaction<'_>,
        rows: Vec<Stored>,
    ) -> Result<(), StoreError> {
        let epoch = self.ns.epoch;
        let mut docs = Vec::with_capacity(rows.len());
        let mut missing = BTreeSet::new();
        for stored in rows {
            let doc = score::term_counts(&stored.memory.content);
            let cached = match (stored.norm, stored.norm_epoch) {
                (Some(norm), Some(e)) if e == epoch => Some(norm),
                _ => None,
            };
            if cached.is_none() {
                missing.extend(doc.keys().filter(|t| !self.dfs.contains_key(*t)).cloned());
            }
            docs.push((stored, doc, cached));
        }
        if !missing.is_empty() {
            let missing: Vec<String> = missing.into_iter().collect();
            self.dfs.extend(dfs_of(tx, self.ns.id, &missing).await?);
        }
        let n = self.ns.entries;
        for (stored, doc, cached) in docs {
            let norm = match cached {
                Some(norm) => norm,
                None => {
                    let norm = score::norm(&doc, |t| score::idf(n, self.dfs[t]));
                    self.norms.push((stored.memory.id, norm));
                    norm
                }
            };
            let dot = score::dot(&self.query, &doc, |t| score::idf(n, self.dfs[t]));
            let m = &stored.memory;
            let value = score::score(
                score::cosine(dot, self.query_norm, norm),
                score::age_days(m.created_at, self.now),
                m.importance,
                m.access_count,
            );
            if value >= self.min_score {
                let at = self.found.partition_point(|f| {
                    f.score > value || (f.score == value && f.memory.id < m.id)
                });
                self.found.insert(
                    at,
                    Recalled {
                        memory: stored.memory,
                        score: value,
                    },
                );
                self.found.truncate(self.limit);
            }
        }
        Ok(())
    }
}

/// One recall's candidates still to find: the scorer, the query terms some
/// memory contains, rarest first, with their df and query weight, and
/// `remaining[i]`, the squared query weight of terms `i..`. A memory not
/// scored before term i contains no earlier term, or was skipped there as
/// unable to reach the threshold; so its cosine is at most
/// `sqrt(remaining[i]) / |q|`.
pub(super) struct Plan {
    pub scorer: Scorer,
    pub terms: Vec<(String, u64, f64)>,
    pub remaining: Vec<f64>,
}

impl Plan {
    /// The plan of a recall of `query` in namespace `ns`; `None` when
    /// nothing can match (no limit, no query term, no memory).
    pub(super) async fn new(
        tx: &Transaction<'_>,
        ns: Namespace,
        query: &str,
        limit: usize,
        min_score: f64,
        now: DateTime<Utc>,
    ) -> Result<Option<Plan>, StoreError> {
        let query = score::term_counts(query);
        if limit == 0 || query.is_empty() || ns.entries == 0 {
            return Ok(None);
        }
        let n = ns.entries;
        let query_terms: Vec<String> = query.keys().cloned().collect();
        let dfs = dfs_of(tx, ns.id, &query_terms).await?;
        let query_norm = score::norm(&query, |t| score::idf(n, dfs[t]));
        let mut terms: Vec<(String, u64, f64)> = query
            .iter()
            .filter(|(t, _)| dfs[*t] > 0)
            .map(|(t, &qtf)| (t.clone(), dfs[t], f64::from(qtf) * score::idf(n, dfs[t])))
            .collect();
        terms.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        let mut remaining = vec![0.0; terms.len() + 1];
        for i in (0..terms.len()).rev() {
            remaining[i] = remaining[i + 1] + terms[i].2 * terms[i].2;
        }
        let scorer = Scorer {
            ns,
            query,
            query_norm,
            dfs,
            found: Vec::new(),
            norms: Vec::new(),
            limit,
            min_score,
            now,
        };
        Ok(Some(Plan {
            scorer,
            terms,
            remaining,
        }))
    }

    /// The best matches found, after writing the norms the scorer had to
    /// recompute back to their rows.
    pub(super) async fn finish(self, tx: &Transaction<'_>) -> Result<Vec<Recalled>, StoreError> {
        let mut scorer = self.scorer;
        if !scorer.norms.is_empty() {
            // Id order: row locks taken in one order.
            scorer.norms.sort_unstable_by_key(|&(id, _)| id);
            let ids: Vec<i64> = scorer.norms.iter().map(|n| n.0).collect();
            let norms: Vec<f64> = scorer.norms.iter().map(|n| n.1).collect();
            write_norms(tx, &ids, &norms, scorer.ns.epoch).await?;
        }
        Ok(scorer.found)
    }
}

/// Recall without the access bump (also the merge check of a save). Writes
/// the norms it had to recompute back to their rows.
pub(super) async fn best_matches(
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
        by_postings(tx, &mut plan.scorer, name, &plan.terms, &plan.remaining).await?;
    }
    plan.finish(tx).await
}

/// SQLite's way: each term's postings best impact first, a batch at a time,
/// until the boost bound of the next cannot reach the threshold.
async fn by_postings(
    tx: &Transaction<'_>,
    scorer: &mut Scorer,
    name: &str,
    terms: &[(String, u64, f64)],
    remaining: &[f64],
) -> Result<(), StoreError> {
    let stmt = tx
        .prepare_cached(
            "SELECT impact, memory_id FROM memory_terms WHERE ns = $1 AND term = $2 \
             ORDER BY impact DESC",
        )
        .await
        .map_err(pg("reading the memory index"))?;
    let ns = scorer.ns.id;
    let mut seen = HashSet::new();
    for (i, (term, _, _)) in terms.iter().enumerate() {
        let cosine_bound = remaining[i].sqrt() / scorer.query_norm * BOUND_SLACK;
        let portal = tx
            .bind(&stmt, &[&ns, term])
            .await
            .map_err(pg("reading the memory index"))?;
        let mut batch = FIRST_BATCH;
        loop {
            let rows = tx
                .query_portal(&portal, batch)
                .await
                .map_err(pg("reading the memory index"))?;
            // The threshold only rises while this batch is scored, so a
            // posting kept here may be scored needlessly, never missed.
            let threshold = scorer.threshold();
            let mut ids = Vec::new();
            let mut stop = false;
            for row in &rows {
                let impact: f64 = row.get(0);
                if cosine_bound * score::boost_bound(impact, scorer.now) * BOUND_SLACK < threshold {
                    stop = true; // the rest of this term's memories have lower impact
                    break;
                }
                let id: i64 = row.get(1);
                if seen.insert(id) {
                    ids.push(id);
                }
            }
            if !ids.is_empty() {
                let stored = load_many(tx, name, &ids).await?;
                scorer.score(tx, stored).await?;
            }
            if stop || rows.len() < batch as usize {
                break;
            }
            batch = (batch * 2).min(MAX_BATCH);
        }
    }
    Ok(())
}

async fn load_many(
    tx: &Transaction<'_>,
    name: &str,
    ids: &[i64],
) -> Result<Vec<Stored>, StoreError> {
    let stmt = tx
        .prepare_cached(&format!(
            "SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ANY($1) AND namespace = $2"
        ))
        .await
        .map_err(pg("reading memories"))?;
    tx.query(&stmt, &[&ids, &name])
        .await
        .map_err(pg("reading memories"))?
        .iter()
        .map(stored_from_row)
        .collect()
}

/// Caches `norms[i]` as the norm of memory `ids[i]` at `epoch`.
pub(super) async fn write_norms(
    tx: &Transaction<'_>,
    ids: &[i64],
    norms: &[f64],
    epoch: i64,
) -> Result<(), StoreError> {
    execute(
        tx,
        "UPDATE memories AS m SET norm = u.n, norm_epoch = $3 \
             FROM unnest($1::int8[], $2::float8[]) AS u(id, n) WHERE m.id = u.id",
        &[&ids, &norms, &epoch],
        "caching memory norms",
    )
    .await?;
    Ok(())
}
