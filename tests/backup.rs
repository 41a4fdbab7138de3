//! `aurad backup` with the real binary: a copy taken while a real `aurad
//! serve` child is writing runs continuously passes `PRAGMA
//! integrity_check` and holds every run that had ended before the backup
//! began; an existing file is replaced only with `--force`; a PostgreSQL
//! store gets the `pg_dump` command (password masked) and exit 1; and a
//! store from a newer aurad is refused by `aurad runs` naming the file,
//! both versions and what to do.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use support::serve::{Serve, poll, run, run_of, show, start_run, text};

#[test]
fn a_backup_taken_while_serve_writes_holds_every_ended_run() {
    let (dir, addr) = support::test_model::project(&[(
        "hello",
        "description: Says hello.\nmodel: test\nprompt: hi\n",
    )]);
    let serve = Serve::start(dir.path(), addr, &[]);
    let started: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (started, stop) = (started.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let id = start_run(addr, "hello", &format!("run {n}"));
                started.lock().unwrap().push(id);
                n += 1;
            }
        })
    };
    // Enough history that the copy takes more than an instant.
    poll(
        "40 runs to have started",
        || serve.log(),
        || (started.lock().unwrap().len() >= 40).then_some(()),
    );
    // The runs that have ended now, before the backup begins: at least 10.
    let ended: Vec<String> = poll(
        "10 runs to have ended",
        || serve.log(),
        || {
            let so_far = started.lock().unwrap().clone();
            let ended: Vec<String> = so_far
                .into_iter()
                .filter(|id| run_of(&serve, id).is_some_and(|run| run["finished_at"].is_string()))
                .collect();
            (ended.len() >= 10).then_some(ended)
        },
    );
    let out_dir = tempfile::tempdir().unwrap();
    let copy = out_dir.path().join("copy.db");
    let out = run(dir.path(), &["backup", copy.to_str().unwrap()]);
    let during = started.lock().unwrap().len();
    assert!(out.status.success(), "{}", show(&out));
    // Runs kept being started while the copy was taken.
    poll(
        "more runs to start after the backup",
        || serve.log(),
        || (started.lock().unwrap().len() > during).then_some(()),
    );
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let said = text(&out.stdout);
    assert!(said.starts_with("backed up "), "{said}");
    assert!(said.contains("(integrity ok)"), "{said}");
    assert!(!out_dir.path().join("copy.db.tmp").exists());

    let conn = rusqlite::Connection::open(&copy).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let in_copy: i64 = conn
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap();
    assert!(
        said.contains(&format!(" {in_copy} run(s)")),
        "{said} (the copy has {in_copy})"
    );
    for id in &ended {
        let state: Option<String> = conn
            .query_row("SELECT state FROM runs WHERE id = ?1", [id], |r| r.get(0))
            .ok();
        assert_eq!(
            state.as_deref(),
            Some("succeeded"),
            "run {id} had ended before the backup"
        );
    }
    drop(conn);

    // An existing file is kept unless --force.
    let again = run(dir.path(), &["backup", copy.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1), "{}", show(&again));
    assert!(
        text(&again.stderr).contains("exists: not replaced"),
        "{}",
        show(&again)
    );
    let forced = run(dir.path(), &["backup", "--force", copy.to_str().unwrap()]);
    assert!(forced.status.success(), "{}", show(&forced));
}

#[test]
fn a_postgres_store_gets_the_pg_dump_command_with_the_password_masked() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("aurad.yaml"),
        "database: postgres://aurad:hunter2-secret@db.example:5432/agents\n",
    )
    .unwrap();
    let out = run(dir.path(), &["backup", "dump.pgc"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("pg_dump --format=custom --file 'dump.pgc' 'postgres://aurad:"),
        "{stderr}"
    );
    assert!(stderr.contains("@db.example:5432/agents'"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(!dir.path().join("dump.pgc").exists());
}

#[test]
fn a_store_of_a_newer_aurad_is_refused_naming_the_file_and_versions() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("aurad.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.pragma_update(None, "user_version", 999).unwrap();
    drop(conn);
    let out = run(dir.path(), &["runs"]);
    assert!(!out.status.success(), "{}", show(&out));
    let stderr = text(&out.stderr);
    for part in [
        db.to_str().unwrap(),
        "schema 999",
        "newer aurad",
        "upgrade aurad",
    ] {
        assert!(stderr.contains(part), "{part} missing: {stderr}");
    }
    // Untouched: an older binary never writes a newer store.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 999);
}
