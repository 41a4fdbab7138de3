//! Invariants of the memory index (`store::memory`), checked with raw SQL
//! after saves, merges, recalls (impact moves), deletes, cleanup and import:
//! df is the number of postings, entries the number of rows, and every
//! posting carries its memory's impact. Behaviour tests: tests/memory.rs.

use chrono::{TimeZone, Utc};

use super::tests::{db, raw};
use super::*;
use crate::store::*;
use crate::types::memory::{NewMemory, Saved};

fn check_index(path: &Path) {
    let conn = raw(path);
    let bad_df: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM memory_df d WHERE d.df != \
             (SELECT COUNT(*) FROM memory_terms t WHERE t.ns = d.ns AND t.term = d.term)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let orphans: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM memory_terms t WHERE NOT EXISTS (SELECT 1 FROM memories m \
             WHERE m.id = t.memory_id AND m.impact = t.impact) OR NOT EXISTS (SELECT 1 FROM \
             memory_df d WHERE d.ns = t.ns AND d.term = t.term)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let bad_entries: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM memory_namespaces n WHERE n.entries != \
             (SELECT COUNT(*) FROM memories m WHERE m.namespace = n.name)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!((bad_df, orphans, bad_entries), (0, 0, 0));
}

#[test]
fn the_index_stays_consistent() {
    let (_dir, path) = db();
    let store = Store::open(&path).unwrap();
    let now = Utc.with_ymd_and_hms(2025, 6, 1, 0, 0, 0).unwrap();
    let save = |text: &str| {
        store
            .memory_save_blocking(NewMemory::new("n", text), 6, now)
            .unwrap()
    };
    for text in [
        "likes green tea",
        "deploys on friday",
        "用户喜欢使用 Python 编程",
    ] {
        save(text);
    }
    assert!(matches!(save("likes green tea"), Saved::Merged(1)));
    for _ in 0..5 {
        // Access counts 1, 2, 4 cross impact caps: postings move.
        store
            .memory_recall_blocking("n", "tea", 5, 0.05, now)
            .unwrap();
    }
    check_index(&path);
    assert!(store.memory_delete_blocking("n", 2).unwrap());
    let mut import: Vec<NewMemory> = (0..10)
        .map(|i| NewMemory::new("n", format!("imported note {i}")))
        .collect();
    import.push(NewMemory::new("other", "likes green tea"));
    store.memory_import_blocking(import, now).unwrap();
    check_index(&path);
    save("one more fact triggers cleanup");
    assert_eq!(store.memory_count_blocking("n").unwrap(), 4);
    check_index(&path);
}
