//! The cluster bench's reads, straight from the database the nodes write
//! (not through the API, so reading costs the nodes nothing and shows what
//! is stored): scheduled runs in a window of fire instants, and the runs of
//! one phase by a marker in their input. SQLite through rusqlite (only
//! reads, times as RFC 3339 text with milliseconds), PostgreSQL through
//! tokio-postgres on a current-thread runtime of its own (times as
//! `TIMESTAMPTZ`). Depends on nothing of the bench.

use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};

/// A scheduled run: one claimed fire.
pub struct FireRow {
    pub agent: String,
    pub scheduled_for: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub state: String,
    /// The node (process) that claimed it.
    pub owner: Option<String>,
}

/// A run the bench posted.
pub struct RunRow {
    pub id: String,
    pub input: String,
    pub state: String,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The node (process) that ran it, or last claimed it.
    pub owner: Option<String>,
}

pub enum Db {
    Sqlite(rusqlite::Connection),
    Postgres {
        runtime: tokio::runtime::Runtime,
        client: tokio_postgres::Client,
    },
}

const FIRES_SQL: &str = "SELECT agent, scheduled_for, created_at, state, owner FROM runs
     WHERE schedule_id IS NOT NULL AND scheduled_for >= $1 AND scheduled_for < $2";
const RUNS_SQL: &str =
    "SELECT id, input, state, started_at, finished_at, owner FROM runs WHERE input LIKE $1";
const FINAL_SQL: &str = "SELECT count(*) FROM runs WHERE input LIKE $1 AND finished_at IS NOT NULL";

impl Db {
    /// The SQLite file of a node (it must exist: the node has started).
    /// Opened read-write but only read: a read-only connection cannot open
    /// a WAL database whose `-shm` file is gone, as it is between a node's
    /// clean exit and its restart.
    pub fn sqlite(path: &Path) -> Db {
        let conn = rusqlite::Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .unwrap();
        Db::Sqlite(conn)
    }

    /// The PostgreSQL database at `url`.
    pub fn postgres(url: &str) -> Db {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = runtime.block_on(async {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
                .await
                .unwrap_or_else(|e| panic!("connect to the bench database: {e}"));
            tokio::spawn(conn);
            client
        });
        Db::Postgres { runtime, client }
    }

    /// The scheduled runs whose fire instant is in `[from, to)`.
    pub fn fires(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<FireRow> {
        match self {
            Db::Sqlite(conn) => {
                let sql = FIRES_SQL.replace('$', "?");
                let mut stmt = conn.prepare(&sql).unwrap();
                stmt.query_map([time_text(from), time_text(to)], |row| {
                    Ok(FireRow {
                        agent: row.get(0)?,
                        scheduled_for: parse(&row.get::<_, String>(1)?),
                        created_at: parse(&row.get::<_, String>(2)?),
                        state: row.get(3)?,
                        owner: row.get(4)?,
                    })
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
            }
            Db::Postgres { runtime, client } => runtime
                .block_on(client.query(FIRES_SQL, &[&from, &to]))
                .unwrap_or_else(|e| panic!("read the fires: {e}"))
                .iter()
                .map(|row| FireRow {
                    agent: row.get(0),
                    scheduled_for: row.get(1),
                    created_at: row.get(2),
                    state: row.get(3),
                    owner: row.get(4),
                })
                .collect(),
        }
    }

    /// The runs whose input holds `marker`.
    pub fn runs(&self, marker: &str) -> Vec<RunRow> {
        let like = format!("%{marker}%");
        match self {
            Db::Sqlite(conn) => {
                let mut stmt = conn.prepare(&RUNS_SQL.replace('$', "?")).unwrap();
                stmt.query_map([like], |row| {
                    Ok(RunRow {
                        id: row.get(0)?,
                        input: row.get(1)?,
                        state: row.get(2)?,
                        started_at: row.get::<_, Option<String>>(3)?.as_deref().map(parse),
                        finished_at: row.get::<_, Option<String>>(4)?.as_deref().map(parse),
                        owner: row.get(5)?,
                    })
                })
                .unwrap()
                .map(Result::unwrap)
                .collect()
            }
            Db::Postgres { runtime, client } => runtime
                .block_on(client.query(RUNS_SQL, &[&like]))
                .unwrap_or_else(|e| panic!("read the runs: {e}"))
                .iter()
                .map(|row| RunRow {
                    id: row.get(0),
                    input: row.get(1),
                    state: row.get(2),
                    started_at: row.get(3),
                    finished_at: row.get(4),
                    owner: row.get(5),
                })
                .collect(),
        }
    }

    /// How many runs whose input holds `marker` are final.
    pub fn finished(&self, marker: &str) -> i64 {
        let like = format!("%{marker}%");
        match self {
            Db::Sqlite(conn) => conn
                .query_row(&FINAL_SQL.replace('$', "?"), [like], |row| row.get(0))
                .unwrap(),
            Db::Postgres { runtime, client } => runtime
                .block_on(client.query_one(FINAL_SQL, &[&like]))
                .unwrap_or_else(|e| panic!("count the final runs: {e}"))
                .get(0),
        }
    }
}

/// A time as the SQLite backend stores it.
fn time_text(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn parse(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("stored time `{text}`: {e}"))
        .to_utc()
}
