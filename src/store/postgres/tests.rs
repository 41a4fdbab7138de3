//! The backend's own plumbing on a real server: connecting, migrating
//! twice and from several nodes at once, refusing a newer schema, and
//! never showing the password.

use super::testing::TestDb;
use super::*;

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
