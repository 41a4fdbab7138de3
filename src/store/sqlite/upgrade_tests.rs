//! Upgrades from every released schema version: for each version v from 0
//! (a new file) to the latest, a real SQLite file is brought to v with the
//! first v migrations, given representative rows where their tables exist
//! (a finished run with an event, a memory), then opened by this build's
//! store, which must migrate it to the latest version and read the rows.

use super::migrations::{MIGRATIONS, migrate_with};
use super::tests::{db, raw, user_version};
use crate::store::runs::encode_events;
use crate::types::RunEvent;

fn has_table(conn: &rusqlite::Connection, name: &str) -> bool {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
        [name],
        |r| r.get(0),
    )
    .unwrap()
}

#[test]
fn every_released_schema_version_upgrades_with_its_rows_readable() {
    let event = RunEvent::TextDelta {
        text: "written by an older aurad".into(),
    };
    for version in 0..=MIGRATIONS.len() {
        let (_dir, path) = db();
        let (runs, memories) = {
            let mut conn = raw(&path);
            migrate_with(&mut conn, &MIGRATIONS[..version]).unwrap();
            assert_eq!(user_version(&path), version as i64);
            let runs = has_table(&conn, "runs");
            if runs {
                // The columns of the first schema: every later one adds
                // columns with defaults, so this row fits each version.
                conn.execute(
                    "INSERT INTO runs (id, agent, state, \"trigger\", input, model, definition_hash,
                                       created_at, started_at, finished_at, output)
                     VALUES ('old-run', 'digest', 'succeeded', 'cli', 'the input', 'test', 'h',
                             '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:01.000Z',
                             '2025-01-01T00:00:02.000Z', 'the output')",
                    [],
                )
                .unwrap();
                for (seq, (kind, data)) in encode_events("old-run", std::slice::from_ref(&event))
                    .unwrap()
                    .into_iter()
                    .enumerate()
                {
                    conn.execute(
                        "INSERT INTO events (run_id, seq, at, kind, data)
                         VALUES ('old-run', ?1, '2025-01-01T00:00:01.500Z', ?2, ?3)",
                        rusqlite::params![seq as i64 + 1, kind, data],
                    )
                    .unwrap();
                }
            }
            let memories = has_table(&conn, "memories");
            if memories {
                conn.execute(
                    "INSERT INTO memories (namespace, content, category, importance, created_at, updated_at, impact)
                     VALUES ('digest', 'the user prefers short answers', 'preference', 7,
                             '2025-01-01T00:00:00.000Z', '2025-01-01T00:00:00.000Z', 0)",
                    [],
                )
                .unwrap();
            }
            (runs, memories)
        };
        assert_eq!(
            user_version(&path),
            version as i64,
            "before opening, at {version}"
        );
        let store = crate::store::Store::open(&path)
            .unwrap_or_else(|e| panic!("a store at schema version {version} did not open: {e}"));
        assert_eq!(
            user_version(&path),
            MIGRATIONS.len() as i64,
            "from version {version}"
        );
        crate::store::testing::assert_upgraded(&store, version, runs, memories, &event);
        store.close().unwrap();
    }
}
