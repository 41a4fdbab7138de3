//! A PostgreSQL database of its own for one test: created on the server
//! `AURAD_TEST_POSTGRES` names (default `postgres://postgres@127.0.0.1:5432/postgres`)
//! and dropped when the test ends. When no server answers, [`TestDb::create`]
//! returns `None` and the test says it skipped, unless `CI` is set: then it
//! fails, so CI never passes without running them (`.ci/run` starts the
//! local server when none answers, and never sets `AURAD_SKIP_POSTGRES`).

use tokio_postgres::NoTls;

use crate::types::DatabaseUrl;

const DEFAULT_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A database created for one test; dropped (with its connections) on drop.
pub(crate) struct TestDb {
    admin: String,
    name: String,
    url: DatabaseUrl,
}

impl TestDb {
    /// Creates a fresh database, or `None` (after saying so) when no server
    /// answers and `CI` is unset.
    pub(crate) fn create(test: &str) -> Option<TestDb> {
        let admin = std::env::var("AURAD_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_SERVER.into());
        let name = format!(
            "aurad_test_{}",
            uuid::Uuid::now_v7()
                .simple()
                .to_string()
                .get(16..)
                .unwrap_or("x")
        );
        match admin_query(&admin, &format!("CREATE DATABASE {name}")) {
            Ok(()) => {}
            Err(e)
                if std::env::var_os("CI").is_some()
                    && std::env::var_os("AURAD_SKIP_POSTGRES").is_none() =>
            {
                panic!(
                    "{test}: PostgreSQL at {admin} does not answer ({e}); CI runs the PostgreSQL tests"
                )
            }
            Err(e) => {
                eprintln!(
                    "{test}: skipped: no PostgreSQL at {admin} ({e}); start one, or set AURAD_TEST_POSTGRES"
                );
                return None;
            }
        }
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
        let url = DatabaseUrl::new(&format!("{base}/{name}"));
        Some(TestDb { admin, name, url })
    }

    /// A client of a one-connection pool on this database with only the
    /// first `version` migrations applied (where
    /// [`Postgres::connect`](super::Postgres::connect) would apply all):
    /// for building a database as an older aurad left it. Keep the pool
    /// while the client is used.
    pub(crate) async fn client_at_schema(
        &self,
        version: usize,
    ) -> (deadpool_postgres::Pool, deadpool_postgres::Object) {
        let config: tokio_postgres::Config = self.url().secret().parse().unwrap();
        let pool = deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(config, NoTls))
            .max_size(1)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .unwrap();
        let mut client = pool.get().await.unwrap();
        super::schema::migrate_with(&mut client, &super::schema::MIGRATIONS[..version])
            .await
            .unwrap();
        (pool, client)
    }

    pub(crate) fn url(&self) -> &DatabaseUrl {
        &self.url
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let _ = admin_query(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// Runs one statement on the server's admin database, on a runtime of its
/// own (tests call this from sync and async code alike).
fn admin_query(admin: &str, statement: &str) -> Result<(), String> {
    let admin = admin.to_string();
    let statement = statement.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            let (client, conn) = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                tokio_postgres::connect(&admin, NoTls),
            )
            .await
            .map_err(|_| "connecting timed out".to_string())?
            .map_err(|e| e.to_string())?;
            let driver = tokio::spawn(conn);
            let outcome = client
                .batch_execute(&statement)
                .await
                .map_err(|e| e.to_string());
            drop(client);
            let _ = driver.await;
            outcome
        })
    })
    .join()
    .map_err(|_| "the admin thread panicked".to_string())?
}
