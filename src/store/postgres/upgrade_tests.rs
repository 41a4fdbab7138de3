//! Upgrades from every released PostgreSQL schema version, on a real
//! server: for each version v from 0 (an empty database) to the latest, a
//! database of its own is brought to v with the first v migrations, given
//! a finished run with an event and a memory where their tables exist,
//! then opened by this build's store, which must migrate it to the latest
//! version and read the rows. Skipped (saying why) without a server,
//! unless CI is set.

use super::runs_tests::count;
use super::testing::TestDb;
use super::*;
use crate::store::runs::encode_events;
use crate::types::{Database, RunEvent};

/// Brings `db` to `version` and writes the rows of an aurad of that
/// schema; whether it had runs and memories.
fn at_version(db: &TestDb, version: usize, event: &RunEvent) -> (bool, bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_pool, client) = db.client_at_schema(version).await;
        let has = |rows: &[tokio_postgres::Row]| rows.first().is_some_and(|r| r.get::<_, bool>(0));
        let exists = "SELECT to_regclass($1) IS NOT NULL";
        let runs = has(&client.query(exists, &[&"runs"]).await.unwrap());
        if runs {
            client
                .execute(
                    "INSERT INTO runs (id, agent, state, \"trigger\", input, model, definition_hash,
                                       created_at, started_at, finished_at, output)
                     VALUES ('old-run', 'digest', 'succeeded', 'cli', 'the input', 'test', 'h',
                             '2025-01-01T00:00:00Z', '2025-01-01T00:00:01Z',
                             '2025-01-01T00:00:02Z', 'the output')",
                    &[],
                )
                .await
                .unwrap();
            let rows = encode_events("old-run", std::slice::from_ref(event)).unwrap();
            for (seq, (kind, data)) in rows.into_iter().enumerate() {
                let seq = seq as i64 + 1;
                client
                    .execute(
                        "INSERT INTO events (run_id, seq, at, kind, data)
                         VALUES ('old-run', $1, '2025-01-01T00:00:01.5Z', $2, $3)",
                        &[&seq, &kind, &data],
                    )
                    .await
                    .unwrap();
            }
        }
        let memories = has(&client.query(exists, &[&"memories"]).await.unwrap());
        if memories {
            client
                .execute(
                    "INSERT INTO memories (namespace, content, category, importance, created_at, updated_at, impact)
                     VALUES ('digest', 'the user prefers short answers', 'preference', 7,
                             '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z', 0)",
                    &[],
                )
                .await
                .unwrap();
        }
        (runs, memories)
    })
}

#[test]
fn every_released_schema_version_upgrades_with_its_rows_readable() {
    let event = RunEvent::TextDelta {
        text: "written by an older aurad".into(),
    };
    for version in 0..=schema::MIGRATIONS.len() {
        let Some(db) = TestDb::create(&format!("upgrade_walk_{version}")) else {
            return;
        };
        let (runs, memories) = at_version(&db, version, &event);
        let pg = Postgres::connect(db.url())
            .unwrap_or_else(|e| panic!("a database at schema {version} did not open: {e}"));
        assert_eq!(
            count(&pg, "SELECT MAX(version) FROM aurad_schema"),
            schema::MIGRATIONS.len() as i64,
            "from version {version}"
        );
        drop(pg);
        let store = crate::store::Store::connect(&Database::Postgres(db.url().clone())).unwrap();
        crate::store::testing::assert_upgraded(&store, version, runs, memories, &event);
        store.close().unwrap();
    }
}
