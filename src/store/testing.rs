//! Test support: a [`Store`] on either backend, and `store_test!`, which
//! runs one test body on both.
//!
//! ```ignore
//! store_test! {
//!     /// What it shows.
//!     async fn a_fire_is_claimed_once(store) {
//!         store.claim_run(...).await.unwrap();
//!     }
//! }
//! ```
//! expands to a module `a_fire_is_claimed_once` with two tests, `sqlite`
//! (a file in a temporary directory) and `postgres` (a database created for
//! the test on the server `AURAD_TEST_POSTGRES` names, dropped after; the
//! test says it skipped when no server answers, and fails under `CI`).
//! The body sees `store: Store` and runs in a multi-thread tokio runtime;
//! written `async fn name(store, test)`, it also sees `test: &TestStore`
//! (to open a second handle on the same database: [`TestStore::reopen`]).
//! Shared fixtures: [`new_run`], [`fire_run`], [`sid`], [`text`], [`texts`].

use super::postgres::testing::TestDb;
use super::{Fire, NewRun, Store, new_run_id};
use crate::types::{RunEvent, RunState, Trigger};

/// Which backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Sqlite,
    Postgres,
}

/// A store for one test and what keeps it alive (the temporary directory,
/// or the test database, dropped after the store).
pub(crate) struct TestStore {
    pub(crate) store: Store,
    pub(crate) kind: Kind,
    _dir: Option<tempfile::TempDir>,
    _db: Option<TestDb>,
}

impl TestStore {
    /// A fresh store of `kind`, or `None` when PostgreSQL is not there (and
    /// `CI` is unset). Blocking.
    pub(crate) fn open(kind: Kind, test: &str) -> Option<TestStore> {
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::tempdir().expect("tempdir");
                let store = Store::open(&dir.path().join("aurad.db")).expect("open SQLite");
                Some(TestStore {
                    store,
                    kind,
                    _dir: Some(dir),
                    _db: None,
                })
            }
            Kind::Postgres => {
                let db = TestDb::create(test)?;
                let store = Store::connect(&crate::types::Database::Postgres(db.url().clone()))
                    .expect("connect to the test database");
                Some(TestStore {
                    store,
                    kind,
                    _dir: None,
                    _db: Some(db),
                })
            }
        }
    }

    /// A second handle on the same database, as another node (PostgreSQL)
    /// or another process (SQLite) would open it.
    pub(crate) fn reopen(&self) -> Store {
        match (self.kind, &self._dir, &self._db) {
            (Kind::Sqlite, Some(dir), _) => {
                Store::open(&dir.path().join("aurad.db")).expect("reopen SQLite")
            }
            (Kind::Postgres, _, Some(db)) => {
                Store::connect(&crate::types::Database::Postgres(db.url().clone()))
                    .expect("reconnect")
            }
            _ => unreachable!("a TestStore keeps what it was opened from"),
        }
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        // Close the store (its connections) before the database is dropped.
        let store = self.store.clone();
        let _ = std::thread::spawn(move || store.close()).join();
    }
}

/// A manual run of `agent`, running, owned by `pid:1`.
pub(crate) fn new_run(agent: &str) -> NewRun {
    NewRun {
        parent: None,
        id: new_run_id(),
        agent: agent.into(),
        trigger: Trigger::Cli,
        input: "hello".into(),
        model: "test".into(),
        definition_hash: "abc123".into(),
        owner: "pid:1".into(),
        fire: None,
        state: RunState::Running,
        template_context: None,
        session_id: None,
    }
}

/// Schedule number `n` of `agent`, for tests (`n * * * *` in UTC).
pub(crate) fn sid(agent: &str, n: usize) -> crate::types::ScheduleId {
    crate::types::ScheduleId::of(agent, &format!("{n} * * * *"), "UTC", None)
}

/// A scheduled run of `agent` for fire `(sid(agent, n), at)`.
pub(crate) fn fire_run(agent: &str, n: usize, at: chrono::DateTime<chrono::Utc>) -> NewRun {
    NewRun {
        trigger: Trigger::Schedule,
        fire: Some(Fire {
            schedule_id: sid(agent, n),
            scheduled_for: at,
        }),
        ..new_run(agent)
    }
}

pub(crate) fn text(t: &str) -> RunEvent {
    RunEvent::TextDelta { text: t.into() }
}

pub(crate) fn texts(events: &[RunEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            RunEvent::TextDelta { text } => text.clone(),
            other => other.kind().to_string(),
        })
        .collect()
}

/// One test body on both backends; see the module's documentation.
macro_rules! store_test {
    ($(#[$meta:meta])* async fn $name:ident($store:ident) $body:block) => {
        $crate::store::testing::store_test! {
            $(#[$meta])* async fn $name($store, _test_store) $body
        }
    };
    ($(#[$meta:meta])* async fn $name:ident($store:ident, $test:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports, reason = "a test body may not use every import the macro gives it")]
            use super::*;

            #[allow(unused_variables, reason = "a test body may not use every binding the macro gives it")]
            async fn body(
                $store: $crate::store::Store,
                $test: &$crate::store::testing::TestStore,
            ) $body

            async fn on(kind: $crate::store::testing::Kind) {
                let opened = tokio::task::spawn_blocking(move || {
                    $crate::store::testing::TestStore::open(kind, stringify!($name))
                })
                .await
                .expect("opening the test store");
                let Some(test_store) = opened else { return };
                body(test_store.store.clone(), &test_store).await;
                tokio::task::spawn_blocking(move || drop(test_store)).await.expect("closing");
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                on($crate::store::testing::Kind::Sqlite).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                on($crate::store::testing::Kind::Postgres).await
            }
        }
    };
}
pub(crate) use store_test;

/// What an older aurad's rows look like after this build opened (and
/// migrated) its store: the finished run `old-run` with `event` when
/// `runs`, the memory of namespace `digest` when `memories`. Both
/// backends' upgrade walks (`sqlite/upgrade_tests.rs`,
/// `postgres/upgrade_tests.rs`) check with it; `version` is where it
/// started, for the messages.
pub(crate) fn assert_upgraded(
    store: &Store,
    version: usize,
    runs: bool,
    memories: bool,
    event: &crate::types::RunEvent,
) {
    if runs {
        let run = store
            .get_run_blocking("old-run")
            .unwrap_or_else(|e| panic!("from version {version}: {e}"))
            .unwrap_or_else(|| panic!("from version {version}: the run is gone"));
        assert_eq!(
            run.state,
            crate::types::RunState::Succeeded,
            "from version {version}"
        );
        assert_eq!(run.input, "the input", "from version {version}");
        assert!(run.finished_at.is_some(), "from version {version}");
        let events = store
            .run_events_blocking("old-run")
            .unwrap_or_else(|e| panic!("from version {version}: {e}"));
        assert_eq!(
            events,
            std::slice::from_ref(event),
            "from version {version}"
        );
    }
    if memories {
        let kept = store
            .memory_list_blocking("digest", 10)
            .unwrap_or_else(|e| panic!("from version {version}: {e}"));
        assert_eq!(kept.len(), 1, "from version {version}");
        assert_eq!(
            kept[0].content, "the user prefers short answers",
            "from version {version}"
        );
    }
}
