//! The backend's own plumbing on a real server: connecting, migrating
//! twice and from several nodes at once, upgrading a database of an older
//! schema without losing its memories, refusing a newer schema, and never
//! showing the password.

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::runs_tests::count;
use super::testing::TestDb;
use super::*;
use crate::store::memory_score;
use crate::store::testing::{Kind, TestStore};
use crate::types::memory::NewMemory;

#[test]
fn migrates_once_even_when_nodes_start_together() {
    let Some(db) = TestDb::create("migrates_once") else {
        return;
    };
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let url = db.url().clone();
            std::thread::spawn(move || Postgres::connect(&url).map(|_| ()))
        })
        .collect();
    for h in handles {
        h.join().unwrap().unwrap();
    }
    let store = Postgres::connect(db.url()).unwrap();
    let pool = store.pool();
    let url = store.url().clone();
    let versions: Vec<i64> = store
        .blocking(async move {
            let client = get(&pool, &url).await?;
            let rows = client
                .query("SELECT version FROM aurad_schema ORDER BY version", &[])
                .await
                .map_err(pg("reading versions"))?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
        .unwrap();
    assert_eq!(
        versions,
        (1..=schema::MIGRATIONS.len() as i64).collect::<Vec<_>>()
    );
    store.close().unwrap();
}

#[test]
fn a_newer_schema_is_refused() {
    let Some(db) = TestDb::create("newer_schema") else {
        return;
    };
    let store = Postgres::connect(db.url()).unwrap();
    let pool = store.pool();
    let url = store.url().clone();
    store
        .blocking(async move {
            let client = get(&pool, &url).await?;
            client
                .execute(
                    "INSERT INTO aurad_schema (version, name) VALUES (999, 'future')",
                    &[],
                )
                .await
                .map_err(pg("inserting"))?;
            Ok(())
        })
        .unwrap();
    drop(store);
    let err = Postgres::connect(db.url()).unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 999, .. }),
        "{err}"
    );
}

#[test]
fn a_wrong_password_says_what_to_do_without_showing_it() {
    // An unreachable port: the error names the masked URL and says what to check.
    let url = DatabaseUrl::new("postgres://aurad:hunter2@127.0.0.1:1/aurad");
    let err = Postgres::connect(&url).unwrap_err().to_string();
    assert!(!err.contains("hunter2"), "{err}");
    assert!(
        err.contains("postgres://aurad:***@127.0.0.1:1/aurad"),
        "{err}"
    );
    assert!(err.contains("server running"), "{err}");
}

#[tokio::test(flavor = "current_thread")]
async fn async_callers_on_another_runtime_are_served() {
    let Some(db) = TestDb::create("async_callers") else {
        return;
    };
    let url = db.url().clone();
    let store = tokio::task::spawn_blocking(move || Postgres::connect(&url))
        .await
        .unwrap()
        .unwrap();
    let pool = store.pool();
    let url = store.url().clone();
    let n: i64 = store
        .spawn(async move {
            let client = get(&pool, &url).await?;
            Ok(client
                .query_one("SELECT 41 + 1::bigint", &[])
                .await
                .map_err(pg("adding"))?
                .get(0))
        })
        .await
        .unwrap();
    assert_eq!(n, 42);
    tokio::task::spawn_blocking(move || store.close())
        .await
        .unwrap()
        .unwrap();
}

/// Memories of two namespaces, of several ages, importances and access
/// counts.
fn old_memories() -> Vec<NewMemory> {
    let texts = [
        "likes green tea in the morning",
        "deploys the project on friday evenings",
        "用户喜欢使用 Python 编程",
        "the database backup runs at 3am utc",
        "rust is fast and rust is safe",
        "on call rotation starts every monday morning",
    ];
    (0..30)
        .map(|i| {
            let mut e = NewMemory::new(
                if i % 4 == 0 { "other" } else { "n" },
                format!("{} note {i}", texts[i % texts.len()]),
            );
            e.importance = (i % 10) as u8 + 1;
            e.access_count = (i * 7 % 40) as u64;
            e.created_at = chrono::DateTime::parse_from_rfc3339(&format!(
                "2025-0{}-1{}T08:30:00Z",
                1 + i % 5,
                i % 10
            ))
            .ok()
            .map(|t| t.to_utc());
            e
        })
        .collect()
}

/// Makes `db` what an aurad of schema 1 left: its schema, `memories`
/// imported and saved (one merge) with their postings, df and cached
/// norms, and `terms` filled as that aurad wrote it.
fn at_schema_1(db: &TestDb, entries: Vec<NewMemory>, saves: &[NewMemory], now: DateTime<Utc>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_pool, mut client) = db.client_at_schema(1).await;
        let checked: Vec<_> = entries
            .into_iter()
            .map(|e| memory::check(e, now, "entry").unwrap())
            .collect();
        let tx = client.transaction().await.unwrap();
        memory::import(&tx, &checked).await.unwrap();
        for new in saves {
            let checked = memory::check(new.clone(), now, "memory").unwrap();
            memory::save(&tx, &checked, 100, now).await.unwrap();
        }
        for row in tx
            .query("SELECT id, content FROM memories", &[])
            .await
            .unwrap()
        {
            let terms: Vec<String> = memory_score::term_counts(row.get(1)).into_keys().collect();
            let id: i64 = row.get(0);
            tx.execute(
                "UPDATE memories SET terms = $2 WHERE id = $1",
                &[&id, &terms],
            )
            .await
            .unwrap();
        }
        tx.commit().await.unwrap();
    });
}

/// One bigint from `db` without connecting through [`Postgres`] (which
/// would migrate it).
fn scalar_at_schema_1(db: &TestDb, sql: &str) -> i64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(db.url().secret(), NoTls)
            .await
            .unwrap();
        let driver = tokio::spawn(conn);
        let n = client.query_one(sql, &[]).await.unwrap().get(0);
        drop(client);
        let _ = driver.await;
        n
    })
}

#[test]
fn a_schema_1_database_with_memories_upgrades_without_losing_any() {
    let Some(db) = TestDb::create("upgrade_from_1") else {
        return;
    };
    let now = Utc.with_ymd_and_hms(2025, 6, 1, 0, 0, 0).unwrap();
    // A new memory, then the same again: merged into it.
    let saves = [
        NewMemory::new("n", "prefers pnpm over npm for node projects"),
        NewMemory::new("n", "prefers pnpm over npm for node projects"),
    ];
    at_schema_1(&db, old_memories(), &saves, now);
    assert_eq!(
        (
            scalar_at_schema_1(&db, "SELECT COUNT(*) FROM memories"),
            scalar_at_schema_1(&db, "SELECT COUNT(*) FROM memories WHERE terms = '{}'"),
            scalar_at_schema_1(&db, "SELECT MAX(version) FROM aurad_schema"),
        ),
        (31, 0, 1),
        "the old database holds its memories, terms filled, at schema 1"
    );
    let store = Postgres::connect(db.url()).unwrap();
    assert_eq!(
        count(&store, "SELECT COUNT(*) FROM aurad_schema"),
        schema::MIGRATIONS.len() as i64
    );
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM information_schema.columns WHERE table_name = 'memories' \
             AND column_name = 'terms'"
        ),
        0,
        "the terms column is gone"
    );
    assert_eq!(
        count(
            &store,
            "SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'memories_terms'"
        ),
        0,
        "its GIN index is gone"
    );
    // The same memories, counts and recalls as SQLite given the same
    // entries and saves (recall bumps access counts alike on both).
    let sqlite = TestStore::open(Kind::Sqlite, "upgrade_from_1_sqlite").unwrap();
    let sqlite = &sqlite.store;
    sqlite.memory_import_blocking(old_memories(), now).unwrap();
    for new in &saves {
        sqlite.memory_save_blocking(new.clone(), 100, now).unwrap();
    }
    for ns in ["n", "other"] {
        let want = format!("{:?}", sqlite.memory_list_blocking(ns, 0));
        let got = format!(
            "{:?}",
            futures::executor::block_on(store.memory_list(ns, 0))
        );
        assert_eq!(got, want, "{ns}");
        assert!(want.contains("note"), "{want}");
    }
    assert_eq!(
        format!(
            "{:?}",
            futures::executor::block_on(store.memory_namespaces())
        ),
        format!(
            "{:?}",
            futures::executor::block_on(sqlite.memory_namespaces())
        )
    );
    let later = now + Duration::days(2);
    for q in [
        "green tea",
        "rust safe",
        "Python 编程",
        "backup monday",
        "pnpm",
    ] {
        for ns in ["n", "other"] {
            let want = format!("{:?}", sqlite.memory_recall_blocking(ns, q, 4, 0.01, later));
            let got = format!(
                "{:?}",
                futures::executor::block_on(store.memory_recall(ns, q, 4, 0.01, later))
            );
            assert_eq!(got, want, "recall {q:?} in {ns}");
        }
    }
    // Saves go on: a near-duplicate merges, as on SQLite.
    let dup = NewMemory::new("n", "rust is fast and rust is safe note 4");
    assert_eq!(
        futures::executor::block_on(store.memory_save(dup.clone(), 100, later)),
        sqlite.memory_save_blocking(dup, 100, later)
    );
    store.close().unwrap();
}
