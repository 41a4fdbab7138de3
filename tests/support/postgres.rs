//! A PostgreSQL database of its own for one integration test, created on
//! the server `AURAD_TEST_POSTGRES` names (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) and dropped (with its
//! connections) when the test ends. Without a server the test says it
//! skipped, unless `CI` is set (and `.ci/run` did not set
//! `AURAD_SKIP_POSTGRES`, having found no server): then it fails.

use tokio_postgres::NoTls;

const DEFAULT_SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";

pub struct TestDatabase {
    admin: String,
    name: String,
    pub url: String,
}

impl TestDatabase {
    pub fn create(test: &str) -> Option<TestDatabase> {
        let admin = std::env::var("AURAD_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_SERVER.into());
        let name = format!(
            "aurad_it_{}",
            &uuid::Uuid::now_v7().simple().to_string()[16..]
        );
        if let Err(e) = admin_query(&admin, &format!("CREATE DATABASE {name}")) {
            if std::env::var_os("CI").is_some() && std::env::var_os("AURAD_SKIP_POSTGRES").is_none()
            {
                panic!(
                    "{test}: PostgreSQL at {admin} does not answer ({e}); CI runs the PostgreSQL tests"
                );
            }
            eprintln!(
                "{test}: skipped: no PostgreSQL at {admin} ({e}); start one, or set AURAD_TEST_POSTGRES"
            );
            return None;
        }
        let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
        Some(TestDatabase {
            url: format!("{base}/{name}"),
            admin,
            name,
        })
    }

    /// Rows of `query` on this database, each as its text columns.
    pub fn query(&self, query: &str) -> Vec<Vec<Option<String>>> {
        let url = self.url.clone();
        let query = query.to_string();
        on_thread(move || async move {
            let (client, conn) = tokio_postgres::connect(&url, NoTls)
                .await
                .map_err(|e| e.to_string())?;
            let driver = tokio::spawn(conn);
            let rows = client
                .simple_query(&query)
                .await
                .map_err(|e| e.to_string())?;
            drop(client);
            let _ = driver.await;
            Ok(rows
                .into_iter()
                .filter_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                        (0..row.len())
                            .map(|i| row.get(i).map(str::to_string))
                            .collect(),
                    ),
                    _ => None,
                })
                .collect())
        })
        .expect("query the test database")
    }

    /// The first column of the first row as a number.
    pub fn count(&self, query: &str) -> i64 {
        self.query(query)
            .first()
            .and_then(|row| row.first().cloned().flatten())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no number from {query}"))
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let _ = admin_query(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

fn admin_query(admin: &str, statement: &str) -> Result<(), String> {
    let admin = admin.to_string();
    let statement = statement.to_string();
    on_thread(move || async move {
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
}

/// Runs an async job on a thread with a runtime of its own (callers may be
/// in sync or async code).
fn on_thread<T: Send + 'static, F: std::future::Future<Output = Result<T, String>>>(
    job: impl FnOnce() -> F + Send + 'static,
) -> Result<T, String> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(job())
    })
    .join()
    .map_err(|_| "the database thread panicked".to_string())?
}
