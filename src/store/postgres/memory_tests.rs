//! Long-term memory on a real PostgreSQL server: the same script of saves
//! (merges, cleanup), recalls (access bumps moving postings), deletes,
//! imports and reads run through SQLite and through PostgreSQL (the
//! product's postings, and the bench's GIN way) must print the same
//! outputs, to the bit; the index stays consistent (df = postings, entries
//! = rows, postings carry their memory's impact, and on the bench's
//! database `terms` = `term_counts`); and two nodes saving, recalling and
//! deleting in one namespace at once keep it exact.

use std::sync::{Arc, Barrier};

use chrono::{DateTime, Duration, TimeZone, Utc};
use futures::executor::block_on;

use super::memory_bench::{Candidates, PgMemoryBench};
use super::runs_tests::count;
use super::testing::TestDb;
use super::{Postgres, get, pg};
use crate::store::testing::{Kind, TestStore};
use crate::store::{StoreError, memory_score};
use crate::types::memory::{Memory, NewMemory, Recalled, Saved};

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 6, 1, 0, 0, 0).unwrap()
}

/// One backend under test: a `Store` (either backend, through the
/// interface), the PostgreSQL backend itself, or the bench's handle on it
/// finding candidates through the GIN index.
enum Node {
    Store(TestStore),
    Pg(Postgres),
    Gin(PgMemoryBench),
}

impl Node {
    fn save(&self, new: NewMemory, max: usize, now: DateTime<Utc>) -> Result<Saved, StoreError> {
        match self {
            Node::Store(TestStore { store: s, .. }) => s.memory_save_blocking(new, max, now),
            Node::Pg(p) => block_on(p.memory_save(new, max, now)),
            Node::Gin(b) => b.save(new, max, now, Candidates::Terms),
        }
    }

    fn recall(
        &self,
        ns: &str,
        q: &str,
        limit: usize,
        min: f64,
        now: DateTime<Utc>,
    ) -> Result<Vec<Recalled>, StoreError> {
        match self {
            Node::Store(TestStore { store: s, .. }) => {
                s.memory_recall_blocking(ns, q, limit, min, now)
            }
            Node::Pg(p) => block_on(p.memory_recall(ns, q, limit, min, now)),
            Node::Gin(b) => b.recall(ns, q, limit, min, now, Candidates::Terms),
        }
    }

    fn delete(&self, ns: &str, id: i64) -> Result<bool, StoreError> {
        match self {
            Node::Store(TestStore { store: s, .. }) => s.memory_delete_blocking(ns, id),
            Node::Pg(p) | Node::Gin(PgMemoryBench(p)) => block_on(p.memory_delete(ns, id)),
        }
    }

    fn list(&self, ns: &str, limit: usize) -> Result<Vec<Memory>, StoreError> {
        match self {
            Node::Store(TestStore { store: s, .. }) => s.memory_list_blocking(ns, limit),
            Node::Pg(p) | Node::Gin(PgMemoryBench(p)) => block_on(p.memory_list(ns, limit)),
        }
    }

    fn get(&self, ns: &str, id: i64) -> Result<Option<Memory>, StoreError> {
        match self {
            Node::Store(TestStore { store: s, .. }) => s.memory_get_blocking(ns, id),
            Node::Pg(p) | Node::Gin(PgMemoryBench(p)) => block_on(p.memory_get(ns, id)),
        }
    }

    fn count(&self, ns: &str) -> Result<usize, StoreError> {
        match self {
            Node::Store(TestStore { store: s, .. }) => s.memory_count_blocking(ns),
            Node::Pg(p) | Node::Gin(PgMemoryBench(p)) => block_on(p.memory_count(ns)),
        }
    }

    fn import(&self, entries: Vec<NewMemory>, now: DateTime<Utc>) -> Result<usize, StoreError> {
        match self {
            Node::Store(TestStore { store: s, .. }) => s.memory_import_blocking(entries, now),
            Node::Pg(p) => block_on(p.memory_import(entries, now)),
            Node::Gin(b) => b.import(entries, now),
        }
    }

    fn namespaces(&self) -> String {
        match self {
            Node::Store(TestStore { store: s, .. }) => {
                format!("{:?}", block_on(s.memory_namespaces()))
            }
            Node::Pg(p) | Node::Gin(PgMemoryBench(p)) => {
                format!("{:?}", block_on(p.memory_namespaces()))
            }
        }
    }
}

fn entry(ns: &str, content: &str, importance: u8) -> NewMemory {
    let mut new = NewMemory::new(ns, content);
    new.importance = importance;
    new
}

const TEXTS: &[&str] = &[
    "likes green tea in the morning",
    "deploys the project on friday evenings",
    "用户喜欢使用 Python 编程",
    "prefers pnpm over npm for node projects",
    "the database backup runs at 3am utc",
    "allergic to peanuts, vegetarian on weekdays",
    "uses the dark theme in vim and vscode",
    "什么时候部署 项目 周五",
    "daughter's birthday is on march 3rd",
    "on call rotation starts every monday morning",
    "rust is fast and rust is safe",
    "the kubernetes cluster runs in berlin and tokyo",
    "green tea, no sugar, after lunch",
    "dinner reservations in paris need a week's notice",
];

const QUERIES: &[&str] = &[
    "tea",
    "green tea morning",
    "deploy friday",
    "编程语言",
    "什么时候部署",
    "pnpm 还是 npm",
    "database backup time",
    "rust",
    "morning routine tea coffee",
    "the",
    "haskell",
    "berlin tokyo cluster",
];

/// The script: every output as text (`{:?}` prints each f64 exactly).
fn script(node: &Node) -> Vec<String> {
    let mut log = Vec::new();
    let mut now = t0();
    let step = |what: String, log: &mut Vec<String>| log.push(what);
    for (i, text) in TEXTS.iter().enumerate() {
        now += Duration::minutes(37 * i as i64 + 1);
        let mut new = entry("n", text, 10 - (i % 6) as u8);
        if i % 3 == 0 {
            new.metadata = serde_json::json!({ "source": i });
            new.run_id = Some(format!("run-{i}"));
        }
        step(
            format!("save {i}: {:?}", node.save(new, 100, now)),
            &mut log,
        );
        // A small namespace cleaned up on each save past 5.
        let small = entry("c", &format!("{text} small{i}"), (i % 7) as u8 + 2);
        step(
            format!("save c {i}: {:?}", node.save(small, 5, now)),
            &mut log,
        );
    }
    // Near-duplicates merge (metadata merged, importance max, access +1).
    let mut dup = entry("n", "likes green tea in the morning", 9);
    dup.metadata = serde_json::json!({ "again": true });
    step(format!("merge: {:?}", node.save(dup, 100, now)), &mut log);
    step(
        format!(
            "merge 2: {:?}",
            node.save(entry("n", "rust is fast and rust is safe", 2), 100, now)
        ),
        &mut log,
    );
    // Errors are the same too.
    step(
        format!("bad: {:?}", node.save(entry("n", "x", 11), 100, now)),
        &mut log,
    );
    step(
        format!("empty: {:?}", node.save(entry(" ", "x", 3), 100, now)),
        &mut log,
    );
    for round in 0..6 {
        now += Duration::hours(5 * round + 1);
        for (j, q) in QUERIES.iter().enumerate() {
            let limit = [1, 3, 10][j % 3];
            let min = [0.0001, 0.05, 0.2][(j + round as usize) % 3];
            step(
                format!(
                    "recall {round} {q}: {:?}",
                    node.recall("n", q, limit, min, now)
                ),
                &mut log,
            );
        }
    }
    step(
        format!(
            "recall limit 0: {:?}",
            node.recall("n", "tea", 0, 0.05, now)
        ),
        &mut log,
    );
    step(
        format!(
            "recall other ns: {:?}",
            node.recall("zz", "tea", 5, 0.05, now)
        ),
        &mut log,
    );
    step(format!("delete 3: {:?}", node.delete("n", 3)), &mut log);
    step(
        format!("delete 3 again: {:?}", node.delete("n", 3)),
        &mut log,
    );
    step(
        format!("delete in other ns: {:?}", node.delete("zz", 4)),
        &mut log,
    );
    step(format!("get 4: {:?}", node.get("n", 4)), &mut log);
    step(format!("get 4 elsewhere: {:?}", node.get("m", 4)), &mut log);
    // Import: times and counts kept, ids in order, another namespace too.
    let mut entries: Vec<NewMemory> = (0..25)
        .map(|i| {
            let mut e = entry(
                if i % 5 == 0 { "other" } else { "n" },
                &format!("{} imported note {i}", TEXTS[i % TEXTS.len()]),
                (i % 10) as u8 + 1,
            );
            e.access_count = (i * 7 % 40) as u64;
            e.created_at = chrono::DateTime::parse_from_rfc3339(&format!(
                "2025-0{}-1{}T0{}:30:00+02:00",
                1 + i % 5,
                i % 10,
                i % 10
            ))
            .ok()
            .map(|t| t.to_utc());
            e
        })
        .collect();
    entries[3].updated_at = chrono::DateTime::parse_from_rfc3339("2025-05-05T05:05:05.123456Z")
        .ok()
        .map(|t| t.to_utc());
    step(
        format!("import: {:?}", node.import(entries.clone(), now)),
        &mut log,
    );
    entries[7].importance = 0;
    step(
        format!("bad import: {:?}", node.import(entries, now)),
        &mut log,
    );
    for q in QUERIES {
        step(
            format!("after import {q}: {:?}", node.recall("n", q, 8, 0.01, now)),
            &mut log,
        );
        step(
            format!("other {q}: {:?}", node.recall("other", q, 3, 0.0, now)),
            &mut log,
        );
    }
    // Cleanup: one more save past max_entries keeps the best 80%.
    now += Duration::days(3);
    step(
        format!(
            "cleanup save: {:?}",
            node.save(entry("n", "one more fact triggers cleanup", 4), 20, now)
        ),
        &mut log,
    );
    for q in QUERIES {
        step(
            format!("after cleanup {q}: {:?}", node.recall("n", q, 5, 0.01, now)),
            &mut log,
        );
    }
    for ns in ["n", "c", "other", "zz"] {
        step(format!("count {ns}: {:?}", node.count(ns)), &mut log);
        step(format!("list {ns}: {:?}", node.list(ns, 0)), &mut log);
        step(format!("list {ns} 3: {:?}", node.list(ns, 3)), &mut log);
    }
    step(format!("namespaces: {}", node.namespaces()), &mut log);
    log
}

fn pg_node(db: &TestDb, how: Candidates) -> Node {
    let store = Postgres::connect(db.url()).unwrap();
    match how {
        Candidates::Postings => Node::Pg(store),
        Candidates::Terms => Node::Gin(PgMemoryBench::over(store).unwrap()),
    }
}

fn store_node(kind: Kind, test: &str) -> Option<Node> {
    TestStore::open(kind, test).map(Node::Store)
}

fn assert_same(want: &[String], got: &[String], what: &str) {
    for (w, g) in want.iter().zip(got) {
        assert_eq!(w, g, "{what}: first difference");
    }
    assert_eq!(want.len(), got.len(), "{what}");
}

#[test]
fn the_same_script_gives_the_same_outputs_as_sqlite() {
    let want = script(&store_node(Kind::Sqlite, "memory_same_sqlite").unwrap());
    // The script exercised what it should.
    let text = want.join("\n");
    for needle in [
        "Merged(1)",
        "Merged(21)",
        "importance 11",
        "entry 7: importance 0",
        "score: ",
    ] {
        assert!(text.contains(needle), "script lacks {needle}:\n{text}");
    }
    // PostgreSQL through the `Store` interface (recall's chosen way)...
    let Some(node) = store_node(Kind::Postgres, "memory_same_store") else {
        return;
    };
    assert_same(&want, &script(&node), "Store on PostgreSQL");
    // ...and the backend itself with each way of finding candidates.
    for how in [Candidates::Postings, Candidates::Terms] {
        let Some(db) = TestDb::create("memory_same_backend") else {
            return;
        };
        let node = pg_node(&db, how);
        assert_same(&want, &script(&node), &format!("{how:?}"));
        match &node {
            Node::Pg(pg) => check_index(pg),
            Node::Gin(bench) => {
                check_index(&bench.0);
                check_terms(&bench.0);
            }
            Node::Store(_) => unreachable!("pg_node makes PostgreSQL nodes"),
        }
    }
}

/// df is the number of postings, every posting carries its memory's impact,
/// entries is the number of rows.
fn check_index(store: &Postgres) {
    let bad_df = count(
        store,
        "SELECT COUNT(*) FROM memory_df d WHERE d.df != \
         (SELECT COUNT(*) FROM memory_terms t WHERE t.ns = d.ns AND t.term = d.term)",
    );
    let orphans = count(
        store,
        "SELECT COUNT(*) FROM memory_terms t WHERE NOT EXISTS (SELECT 1 FROM memories m \
         WHERE m.id = t.memory_id AND m.impact = t.impact) OR NOT EXISTS (SELECT 1 FROM \
         memory_df d WHERE d.ns = t.ns AND d.term = t.term)",
    );
    let bad_entries = count(
        store,
        "SELECT COUNT(*) FROM memory_namespaces n WHERE n.entries != \
         (SELECT COUNT(*) FROM memories m WHERE m.namespace = n.name)",
    );
    assert_eq!((bad_df, orphans, bad_entries), (0, 0, 0));
}

/// On the bench's database: `terms` is each memory's term set.
fn check_terms(store: &Postgres) {
    let (pool, url) = (store.pool(), store.url().clone());
    let rows: Vec<(String, Vec<String>)> = store
        .blocking(async move {
            let client = get(&pool, &url).await?;
            let rows = client
                .query("SELECT content, terms FROM memories", &[])
                .await
                .map_err(pg("checking"))?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
        .unwrap();
    for (content, terms) in rows {
        let want: Vec<String> = memory_score::term_counts(&content).into_keys().collect();
        assert_eq!(terms, want, "{content}");
    }
}

#[test]
fn two_nodes_saving_into_one_new_namespace_keep_it_exact() {
    let Some(db) = TestDb::create("memory_two_savers") else {
        return;
    };
    let nodes = [
        Postgres::connect(db.url()).unwrap(),
        Postgres::connect(db.url()).unwrap(),
    ];
    let nodes = Arc::new(nodes);
    let barrier = Arc::new(Barrier::new(2));
    let workers: Vec<_> = (0..2)
        .map(|k| {
            let (nodes, barrier) = (nodes.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                (0..25)
                    .map(|i| {
                        // Every fourth text is the same on both nodes: one
                        // of the two merges into the other's.
                        let text = if i % 4 == 0 {
                            format!("zebra{i} giraffe{i} okapi{i}")
                        } else {
                            format!("quokka{k}x{i} wombat{k}x{i} node{k}")
                        };
                        block_on(nodes[k].memory_save(NewMemory::new("shared", text), 1000, t0()))
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let saved: Vec<Saved> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let created = saved
        .iter()
        .filter(|s| matches!(s, Saved::Created(_)))
        .count();
    let merged = saved.len() - created;
    assert_eq!(merged, 7, "each shared text merged once: {saved:?}");
    assert_eq!(block_on(nodes[0].memory_count("shared")).unwrap(), created);
    assert_eq!(
        block_on(nodes[1].memory_list("shared", 0)).unwrap().len(),
        created
    );
    assert_eq!(
        count(&nodes[0], "SELECT COUNT(*) FROM memory_namespaces"),
        1
    );
    check_index(&nodes[0]);
    // Recalls from both nodes at once bump access counts exactly.
    let barrier = Arc::new(Barrier::new(2));
    let recallers: Vec<_> = (0..2)
        .map(|k| {
            let (nodes, barrier) = (nodes.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..10 {
                    let found = block_on(nodes[k].memory_recall("shared", "zebra0", 1, 0.01, t0()))
                        .unwrap();
                    assert_eq!(found.len(), 1);
                }
            })
        })
        .collect();
    for r in recallers {
        r.join().unwrap();
    }
    let top = block_on(nodes[0].memory_recall("shared", "zebra0", 1, 0.01, t0())).unwrap();
    // One merge, then 20 recalls.
    assert_eq!(top[0].memory.access_count, 21);
    check_index(&nodes[0]);
}

#[test]
fn a_save_racing_a_delete_leaves_one_consistent_outcome() {
    let Some(db) = TestDb::create("memory_save_delete") else {
        return;
    };
    let nodes = Arc::new([
        Postgres::connect(db.url()).unwrap(),
        Postgres::connect(db.url()).unwrap(),
    ]);
    block_on(nodes[0].memory_save(NewMemory::new("r", "an unrelated filler memory"), 100, t0()))
        .unwrap();
    for round in 0..8 {
        let text = format!("likes green tea round{round}");
        let Saved::Created(id) =
            block_on(nodes[0].memory_save(NewMemory::new("r", text.clone()), 100, t0())).unwrap()
        else {
            panic!("round {round}: the first save merged");
        };
        let barrier = Arc::new(Barrier::new(2));
        let saver = {
            let (nodes, barrier) = (nodes.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                block_on(nodes[0].memory_save(NewMemory::new("r", text), 100, t0())).unwrap()
            })
        };
        let deleter = {
            let (nodes, barrier) = (nodes.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                block_on(nodes[1].memory_delete("r", id)).unwrap()
            })
        };
        let (saved, deleted) = (saver.join().unwrap(), deleter.join().unwrap());
        assert!(deleted, "round {round}: the memory was there to delete");
        assert!(block_on(nodes[1].memory_get("r", id)).unwrap().is_none());
        let count = block_on(nodes[1].memory_count("r")).unwrap();
        match saved {
            // Merged first, then deleted: only the filler is left.
            Saved::Merged(m) => {
                assert_eq!((m, count), (id, 1), "round {round}");
            }
            // Deleted first: the save made a new memory.
            Saved::Created(new) => {
                assert!(new > id, "round {round}");
                assert_eq!(count, 2, "round {round}");
                assert!(block_on(nodes[0].memory_delete("r", new)).unwrap());
            }
        }
        check_index(&nodes[0]);
    }
}
