//! The writing side of long-term memory: save (with the merge check and
//! cleanup), delete, import, and the plain reads `list` and `count`. Part of
//! `store::memory`, whose index helpers it uses.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, params};

use super::score::{self, TermCounts};
use super::{
    MEMORY_COLUMNS, Namespace, add_terms, best_matches, load, namespace, namespace_or_create,
    remove_terms, stamp, stored_from_row, touch,
};
use crate::store::StoreError;
use crate::store::memory::check_memory;
use crate::store::sqlite::sql;
use crate::types::memory::{Memory, NewMemory, Saved};

/// A [`NewMemory`] checked and with its timestamps normalised.
struct Checked {
    new: NewMemory,
    created_at: String,
    updated_at: String,
    metadata: String,
}

/// Checks `new` (`store::memory::check_memory`), with its times as
/// stored here.
fn check(new: NewMemory, now: DateTime<Utc>, what: &str) -> Result<Checked, StoreError> {
    let checked = check_memory(new, now, what)?;
    Ok(Checked {
        new: checked.new,
        created_at: stamp(checked.created_at),
        updated_at: stamp(checked.updated_at),
        metadata: checked.metadata,
    })
}

pub(super) fn save(
    conn: &mut Connection,
    new: NewMemory,
    max_entries: usize,
    now: DateTime<Utc>,
) -> Result<Saved, StoreError> {
    let checked = check(new, now, "memory")?;
    let tx = conn.savepoint().map_err(sql("starting a memory save"))?;
    let new = &checked.new;
    let best = best_matches(
        &tx,
        &new.namespace,
        &new.content,
        1,
        score::MERGE_THRESHOLD,
        now,
    )?;
    let saved = match best.into_iter().find(|b| b.score > score::MERGE_THRESHOLD) {
        Some(best) => {
            let id = best.memory.id;
            merge(&tx, best.memory, &checked, now)?;
            Saved::Merged(id)
        }
        None => Saved::Created(insert(&tx, &checked)?),
    };
    cleanup(&tx, &new.namespace, max_entries, now)?;
    tx.commit().map_err(sql("committing a memory save"))?;
    Ok(saved)
}

fn merge(
    conn: &Connection,
    old: Memory,
    checked: &Checked,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let new = &checked.new;
    let ns = namespace_or_create(conn, &new.namespace)?;
    let content = score::merge_content(&old.content, &new.content);
    let old_impact = load(conn, &new.namespace, old.id)?
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
        conn,
        ns.id,
        old.id,
        old_impact,
        &score::term_counts(&old.content),
    )?;
    add_terms(conn, ns.id, old.id, impact, &score::term_counts(&content))?;
    let metadata = match (old.metadata, &new.metadata) {
        (serde_json::Value::Object(mut a), serde_json::Value::Object(b)) => {
            a.extend(b.clone());
            serde_json::Value::Object(a)
        }
        (old, serde_json::Value::Null) => old,
        (_, new) => new.clone(),
    };
    conn.execute(
        "UPDATE memories SET content = ?2, importance = MAX(importance, ?3), \
         access_count = access_count + 1, updated_at = ?4, run_id = COALESCE(?5, run_id), \
         metadata = ?6, impact = ?7, norm = NULL, norm_epoch = NULL WHERE id = ?1",
        params![
            old.id,
            content,
            new.importance,
            stamp(now),
            new.run_id,
            metadata.to_string(),
            impact
        ],
    )
    .map_err(sql("merging a memory"))?;
    touch(conn, ns.id, 0)
}

/// Inserts the row of `c`; returns its id and impact.
fn insert_row(conn: &Connection, c: &Checked) -> Result<(i64, f64), StoreError> {
    let new = &c.new;
    let created = score::parse_time(&c.created_at)
        .ok_or_else(|| StoreError::Internal(format!("unparsable stamp {}", c.created_at)))?;
    let impact = score::impact(new.importance, new.access_count, created);
    conn.prepare_cached(
        "INSERT INTO memories (namespace, content, category, importance, created_at, \
         updated_at, access_count, run_id, metadata, impact) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )
    .and_then(|mut s| {
        s.execute(params![
            new.namespace,
            new.content,
            new.category,
            new.importance,
            c.created_at,
            c.updated_at,
            new.access_count.min(i64::MAX as u64) as i64,
            new.run_id,
            c.metadata,
            impact
        ])
    })
    .map_err(sql("inserting a memory"))?;
    Ok((conn.last_insert_rowid(), impact))
}

fn insert(conn: &Connection, checked: &Checked) -> Result<i64, StoreError> {
    let ns = namespace_or_create(conn, &checked.new.namespace)?;
    let (id, impact) = insert_row(conn, checked)?;
    add_terms(
        conn,
        ns.id,
        id,
        impact,
        &score::term_counts(&checked.new.content),
    )?;
    touch(conn, ns.id, 1)?;
    Ok(id)
}

/// Deletes one memory and its postings (within the caller's transaction).
fn delete_in(conn: &Connection, namespace_name: &str, id: i64) -> Result<bool, StoreError> {
    let Some(ns) = namespace(conn, namespace_name)? else {
        return Ok(false);
    };
    let Some(stored) = load(conn, namespace_name, id)? else {
        return Ok(false);
    };
    let counts = score::term_counts(&stored.memory.content);
    remove_terms(conn, ns.id, id, stored.impact, &counts)?;
    conn.prepare_cached("DELETE FROM memories WHERE id = ?1")
        .and_then(|mut s| s.execute([id]))
        .map_err(sql("deleting a memory"))?;
    touch(conn, ns.id, -1)?;
    Ok(true)
}

pub(super) fn delete(conn: &mut Connection, namespace: &str, id: i64) -> Result<bool, StoreError> {
    let tx = conn.savepoint().map_err(sql("starting a memory delete"))?;
    let deleted = delete_in(&tx, namespace, id)?;
    tx.commit().map_err(sql("committing a memory delete"))?;
    Ok(deleted)
}

/// Past `max_entries`, keeps the best 80% of `max_entries` by the cleanup
/// score (ties: the newer id stays) and deletes the rest.
fn cleanup(
    conn: &Connection,
    namespace_name: &str,
    max_entries: usize,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let Some(ns) = namespace(conn, namespace_name)? else {
        return Ok(());
    };
    if ns.entries as usize <= max_entries {
        return Ok(());
    }
    let mut scored: Vec<(f64, i64)> = {
        let mut stmt = conn
            .prepare("SELECT id, created_at, importance, access_count FROM memories WHERE namespace = ?1")
            .map_err(sql("reading memories for cleanup"))?;
        let rows = stmt
            .query_map([namespace_name], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, u8>(2)?,
                    r.get::<_, i64>(3)?.max(0) as u64,
                ))
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(sql("reading memories for cleanup"))?;
        rows.into_iter()
            .map(|(id, created, importance, access)| {
                let age = score::parse_time(&created)
                    .map(|t| score::age_days(t, now))
                    .unwrap_or(f64::INFINITY);
                (score::cleanup_score(age, importance, access), id)
            })
            .collect()
    };
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    let keep = score::cleanup_keep(max_entries);
    for &(_, id) in scored.iter().skip(keep) {
        delete_in(conn, namespace_name, id)?;
    }
    tracing::debug!(
        namespace = namespace_name,
        deleted = scored.len().saturating_sub(keep),
        "memory cleanup"
    );
    Ok(())
}

pub(super) fn list(
    conn: &mut Connection,
    namespace: &str,
    limit: usize,
) -> Result<Vec<Memory>, StoreError> {
    let limit = if limit == 0 { -1 } else { limit as i64 };
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {MEMORY_COLUMNS} FROM memories WHERE namespace = ?1 \
             ORDER BY updated_at DESC, id DESC LIMIT ?2"
        ))
        .map_err(sql("listing memories"))?;
    stmt.query_map(params![namespace, limit], stored_from_row)
        .and_then(|rows| rows.map(|r| r.map(|s| s.memory)).collect())
        .map_err(sql("listing memories"))
}

pub(super) fn count(conn: &mut Connection, name: &str) -> Result<usize, StoreError> {
    Ok(namespace(conn, name)?.map_or(0, |ns| ns.entries as usize))
}

pub(super) fn import(
    conn: &mut Connection,
    entries: Vec<NewMemory>,
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let checked: Vec<Checked> = entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| check(e, now, &format!("entry {i}")))
        .collect::<Result<_, _>>()?;
    let tx = conn.savepoint().map_err(sql("starting a memory import"))?;
    let mut spaces: HashMap<String, (Namespace, i64)> = HashMap::new();
    let mut postings: Vec<(i64, String, f64, i64, u32)> = Vec::new();
    let mut dfs: HashMap<(i64, String), u64> = HashMap::new();
    for c in &checked {
        let ns = match spaces.get_mut(&c.new.namespace) {
            Some(entry) => entry,
            None => {
                let ns = namespace_or_create(&tx, &c.new.namespace)?;
                spaces.entry(c.new.namespace.clone()).or_insert((ns, 0))
            }
        };
        ns.1 += 1;
        let ns_id = ns.0.id;
        let (id, impact) = insert_row(&tx, c)?;
        for (term, tf) in score::term_counts(&c.new.content) {
            *dfs.entry((ns_id, term.clone())).or_insert(0) += 1;
            postings.push((ns_id, term, impact, id, tf));
        }
    }
    // Index order, so the B-tree is appended to rather than split at random.
    postings.sort_unstable_by(|a, b| {
        (a.0, &a.1)
            .cmp(&(b.0, &b.1))
            .then(a.2.total_cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    {
        let mut stmt = tx
            .prepare(
                "INSERT INTO memory_terms (ns, term, impact, memory_id, tf) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(sql("indexing imported memories"))?;
        for (ns, term, impact, id, tf) in &postings {
            stmt.execute(params![ns, term, impact, id, tf])
                .map_err(sql("indexing imported memories"))?;
        }
        let mut stmt = tx
            .prepare(
                "INSERT INTO memory_df (ns, term, df) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (ns, term) DO UPDATE SET df = df + excluded.df",
            )
            .map_err(sql("indexing imported memories"))?;
        let mut dfs: Vec<_> = dfs.into_iter().collect();
        dfs.sort_unstable();
        for ((ns, term), n) in &dfs {
            stmt.execute(params![ns, term, *n as i64])
                .map_err(sql("indexing imported memories"))?;
        }
    }
    for (name, (ns, added)) in &spaces {
        touch(&tx, ns.id, *added)?;
        warm_norms(&tx, name)?;
    }
    tx.commit().map_err(sql("committing a memory import"))?;
    Ok(checked.len())
}

/// Computes and caches every norm of a namespace (after a bulk change, so
/// the first recalls are as fast as the later ones).
fn warm_norms(conn: &Connection, name: &str) -> Result<(), StoreError> {
    let Some(ns) = namespace(conn, name)? else {
        return Ok(());
    };
    let dfs: HashMap<String, u64> = conn
        .prepare("SELECT term, df FROM memory_df WHERE ns = ?1")
        .and_then(|mut s| {
            s.query_map([ns.id], |r| {
                Ok((r.get(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })
            .and_then(|rows| rows.collect())
        })
        .map_err(sql("reading the memory index"))?;
    let docs: Vec<(i64, String)> = conn
        .prepare("SELECT id, content FROM memories WHERE namespace = ?1")
        .and_then(|mut s| {
            s.query_map([name], |r| Ok((r.get(0)?, r.get(1)?)))
                .and_then(|rows| rows.collect())
        })
        .map_err(sql("reading memories"))?;
    let mut update = conn
        .prepare("UPDATE memories SET norm = ?2, norm_epoch = ?3 WHERE id = ?1")
        .map_err(sql("caching memory norms"))?;
    for (id, content) in docs {
        let counts: TermCounts = score::term_counts(&content);
        let norm = score::norm(&counts, |t| {
            score::idf(ns.entries, dfs.get(t).copied().unwrap_or(0))
        });
        update
            .execute(params![id, norm, ns.epoch])
            .map_err(sql("caching memory norms"))?;
    }
    Ok(())
}
