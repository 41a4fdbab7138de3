//! Issue #32 item 10, the store vanishing: `aurad.db`, its `-wal` and
//! `-shm` deleted under a running `aurad serve`. SQLite goes on writing to
//! the deleted files without an error, so the daemon kept answering 202
//! and every run it accepted was gone after a restart. Now the daemon
//! notices within seconds: `/healthz` answers 503 naming the file, and a
//! new run is refused with a 503 saying why, never accepted into a file
//! that no longer exists.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

mod support;

use support::serve::{Serve, http_get, http_post_json, poll, start_run, wait_state};

#[test]
fn a_deleted_database_is_noticed_and_no_run_is_accepted_into_it() {
    let mock = support::mock_llm::MockLlm::start_in_thread();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let addr = support::serve::write_settings(root, &mock);
    std::fs::create_dir_all(root.join("agents")).unwrap();
    std::fs::write(root.join("agents/a.yaml"), "model: test\nprompt: hi\n").unwrap();
    let serve = Serve::start(root, addr, &[]);

    // Before: a run is accepted and ends.
    let id = start_run(addr, "a", "go");
    wait_state(&serve, &id, "succeeded");

    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(root.join(format!("aurad.db{suffix}")));
    }
    let health = poll(
        "/healthz to report the lost database",
        || serve.log(),
        || match http_get(addr, "/healthz") {
            Some((503, body)) => Some(body),
            _ => None,
        },
    );
    assert!(health.contains("aurad.db"), "{health}");
    assert!(health.contains("was deleted"), "{health}");

    let (status, body) = http_post_json(addr, "/v1/agents/a/runs", "{}").unwrap();
    assert_eq!(
        status, 503,
        "a run was accepted into a deleted database: {body}"
    );
    assert!(body.contains("the database is gone"), "{body}");
    assert!(
        serve.log().contains("the database is gone"),
        "{}",
        serve.log()
    );
}
