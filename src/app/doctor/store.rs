//! The doctor's check of the store `aurad.yaml` names: a SQLite file
//! opened read-only without migrating (integrity, size, WAL, schema
//! version against this build's), or a PostgreSQL database reached with a
//! short timeout (its schema version). Depends on `store::health` and
//! `types`.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Check, CheckName};
use crate::store::health::{self, POSTGRES_SCHEMA, SQLITE_SCHEMA};
use crate::types::{Database, DatabaseUrl};

/// How long the PostgreSQL check waits for the server.
const POSTGRES_TIMEOUT: Duration = Duration::from_secs(3);

/// The store's state, and the newest stored run's time (for the clock
/// check).
pub fn check(database: &Database) -> (Check, Option<DateTime<Utc>>) {
    match database {
        Database::Sqlite(path) => sqlite(path),
        Database::Postgres(url) => postgres(url),
    }
}

fn sqlite(path: &Path) -> (Check, Option<DateTime<Utc>>) {
    let shown = path.display();
    if !path.exists() {
        return (
            Check::ok(
                CheckName::Store,
                format!("SQLite {shown}: not there yet, created at the first run"),
            ),
            None,
        );
    }
    let damaged = format!(
        "stop aurad, keep a copy of {shown}, then restore your backup, or recover what is readable: sqlite3 {shown} .recover | sqlite3 recovered.db (and point `database:` in aurad.yaml at recovered.db)"
    );
    let found = match health::inspect_sqlite(path) {
        Ok(found) => found,
        Err(e) => {
            return (
                Check::error(
                    CheckName::Store,
                    format!("SQLite {shown} cannot be read: {e}"),
                    damaged,
                ),
                None,
            );
        }
    };
    if !found.problems.is_empty() {
        let first: Vec<&str> = found.problems.iter().take(3).map(String::as_str).collect();
        return (
            Check::error(
                CheckName::Store,
                format!(
                    "SQLite {shown} is damaged: PRAGMA quick_check found {} problem(s): {}",
                    found.problems.len(),
                    first.join("; ")
                ),
                damaged,
            ),
            None,
        );
    }
    let sizes = format!(
        "{}, WAL {}, integrity ok",
        bytes(found.size),
        bytes(found.wal)
    );
    let check = schema_check(
        &format!("SQLite {shown} ({sizes})"),
        found.schema,
        SQLITE_SCHEMA,
    );
    (check, found.newest_run)
}

fn postgres(url: &DatabaseUrl) -> (Check, Option<DateTime<Utc>>) {
    let found = crate::app::runtime()
        .and_then(|runtime| runtime.block_on(health::inspect_postgres(url, POSTGRES_TIMEOUT)));
    match found {
        Ok(found) => (
            schema_check(&format!("PostgreSQL {url}"), found.schema, POSTGRES_SCHEMA),
            found.newest_run,
        ),
        Err(e) => (
            Check::error(
                CheckName::Store,
                format!("PostgreSQL {url} is unreachable: {e}"),
                "start the server, or correct `database:` in aurad.yaml (or AURAD_DATABASE_URL)",
            ),
            None,
        ),
    }
}

/// The schema version `found` against this build's `known`.
fn schema_check(what: &str, found: i64, known: i64) -> Check {
    if found > known {
        return Check::error(
            CheckName::Store,
            format!("{what}: created by a newer aurad (schema {found}, this build knows {known})"),
            "upgrade aurad (cargo install --path . in an up-to-date checkout), or point `database:` at another store",
        );
    }
    if found < known {
        return Check::ok(
            CheckName::Store,
            format!("{what}: schema {found}, migrated to {known} at the next start"),
        );
    }
    Check::ok(CheckName::Store, format!("{what}: schema {found}"))
}

/// A size in bytes as a person reads it.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn sizes_read_as_people_read_them() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(4096), "4.0 KiB");
        assert_eq!(bytes(3 * 1024 * 1024 / 2), "1.5 MiB");
    }
}
