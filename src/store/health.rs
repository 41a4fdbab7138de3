//! What `aurad doctor` reads of a store without changing it: a SQLite
//! file opened read-only (no migration, no WAL checkpoint) for its
//! integrity (`PRAGMA quick_check`), sizes and schema version; a
//! PostgreSQL database reached with a short timeout for its schema
//! version. Both give the newest run's time, which a clock that went back
//! is compared with. Depends on `rusqlite`, `tokio-postgres`, `chrono` and
//! `types`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OpenFlags};

use crate::types::DatabaseUrl;

/// The SQLite schema version this build writes.
pub const SQLITE_SCHEMA: i64 = super::sqlite::SCHEMA_VERSION;
/// The PostgreSQL schema version this build writes.
pub const POSTGRES_SCHEMA: i64 = super::postgres::SCHEMA_VERSION;

/// A SQLite store as found.
#[derive(Debug, Clone, PartialEq)]
pub struct SqliteHealth {
    /// `PRAGMA user_version`.
    pub schema: i64,
    /// What `quick_check` found wrong; empty: nothing.
    pub problems: Vec<String>,
    /// The database file's size in bytes.
    pub size: u64,
    /// The write-ahead log's size in bytes (0 when there is none).
    pub wal: u64,
    /// When the newest run was created.
    pub newest_run: Option<DateTime<Utc>>,
}

/// The write-ahead log beside the SQLite file at `path`.
pub fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// Opens the SQLite store at `path` read-only and checks it. `Err` when
/// it cannot be read at all (not a database, unreadable), with SQLite's
/// words.
pub fn inspect_sqlite(path: &Path) -> Result<SqliteHealth, String> {
    let size = std::fs::metadata(path).map_err(|e| e.to_string())?.len();
    let wal = std::fs::metadata(wal_path(path)).map_or(0, |m| m.len());
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| e.to_string())?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    let schema: i64 = conn
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(|e| e.to_string())?;
    let mut problems = Vec::new();
    {
        let mut statement = conn
            .prepare("PRAGMA quick_check")
            .map_err(|e| e.to_string())?;
        let rows = statement
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(|e| e.to_string())?;
        for row in rows {
            let line = row.map_err(|e| e.to_string())?;
            if line != "ok" {
                problems.push(line);
            }
        }
    }
    let newest_run = if schema > 0 && problems.is_empty() {
        conn.query_row("SELECT MAX(created_at) FROM runs", [], |row| {
            row.get::<_, Option<String>>(0)
        })
        .ok()
        .flatten()
        .and_then(|text| DateTime::parse_from_rfc3339(&text).ok())
        .map(|t| t.with_timezone(&Utc))
    } else {
        None
    };
    Ok(SqliteHealth {
        schema,
        problems,
        size,
        wal,
        newest_run,
    })
}

/// A PostgreSQL store as found.
#[derive(Debug, Clone, PartialEq)]
pub struct PostgresHealth {
    /// The highest version of `aurad_schema`; 0 when aurad never ran there.
    pub schema: i64,
    /// When the newest run was created.
    pub newest_run: Option<DateTime<Utc>>,
}

/// Connects to the PostgreSQL store at `url` (giving up after `timeout`)
/// and reads its schema version. `Err` says why it could not, and what to
/// check.
pub async fn inspect_postgres(
    url: &DatabaseUrl,
    timeout: Duration,
) -> Result<PostgresHealth, String> {
    let mut config: tokio_postgres::Config = url
        .secret()
        .parse()
        .map_err(|e| format!("not a PostgreSQL connection string ({e})"))?;
    config.connect_timeout(timeout);
    let work = async {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await.map_err(|e| {
            format!(
                "{}{}",
                super::postgres::error_text(&e),
                super::postgres::connect_hint(&e)
            )
        })?;
        let driver = tokio::spawn(connection);
        let read = async {
            let exists = |table: &str| format!("SELECT to_regclass('{table}') IS NOT NULL");
            let has_schema: bool = client.query_one(&exists("aurad_schema"), &[]).await?.get(0);
            let schema: i64 = if has_schema {
                client
                    .query_one("SELECT COALESCE(MAX(version), 0) FROM aurad_schema", &[])
                    .await?
                    .get(0)
            } else {
                0
            };
            let has_runs: bool = client.query_one(&exists("runs"), &[]).await?.get(0);
            let newest_run: Option<DateTime<Utc>> = if has_runs {
                client
                    .query_one("SELECT MAX(created_at) FROM runs", &[])
                    .await?
                    .get(0)
            } else {
                None
            };
            Ok::<_, tokio_postgres::Error>(PostgresHealth { schema, newest_run })
        };
        let found = read.await.map_err(|e| super::postgres::error_text(&e));
        drop(client);
        driver.abort();
        found
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| format!("no answer within {}s", timeout.as_secs()))?
}
