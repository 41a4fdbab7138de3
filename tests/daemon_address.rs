//! Where the running `aurad serve` of a project is, as the commands that
//! talk to it find it, and who may serve a project directory, with the
//! real binary: `aurad trigger NAME --dir P` from another directory reaches
//! a daemon that listens on a port chosen at start (`listen:
//! 127.0.0.1:0`); after `kill -9` its left record makes no command hang or
//! lie; an explicit address wins. With a PostgreSQL store (each test a
//! database of its own), two daemons on one project directory both serve,
//! and one serves a read-only project directory (a read-only bind mount
//! when the test runs as root, who could write through `chmod a-w`).
//! Each test keeps the daemons' private records in a state folder of its
//! own (`XDG_STATE_HOME`), given to the daemons and the commands alike.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use aurad::config::private::{self, ApiAccess};
use support::postgres::TestDatabase;
use support::serve::{DEADLINE, KillOnDrop, free_port, poll, show, text};

const AGENT: &str = "model: test\nprompt: hello\n";
/// The token every daemon of a test is given, so one client reaches each.
const TOKEN: &str = "a-token-of-the-test-0123456789";

/// A project directory `<outer>/proj` with `aurad.yaml` (`settings`) and
/// the agent `hello`.
fn project(settings: &str) -> (tempfile::TempDir, PathBuf) {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("proj");
    std::fs::create_dir_all(root.join("agents")).unwrap();
    std::fs::write(root.join("aurad.yaml"), settings).unwrap();
    std::fs::write(root.join("agents/hello.yaml"), AGENT).unwrap();
    (outer, root)
}

/// `aurad ARGS` in `cwd` with the state folder `state` (no --dir unless
/// `args` has it).
fn aurad(cwd: &Path, state: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("aurad"));
    cmd.current_dir(cwd)
        .env("XDG_STATE_HOME", state)
        .env_remove("RUST_LOG")
        .env_remove("AURAD_URL")
        .env_remove("AURAD_TOKEN")
        .env_remove("AURAD_DATABASE_URL")
        .stdin(Stdio::null());
    cmd
}

/// `aurad trigger hello --dir root` from `/`.
fn trigger(root: &Path, state: &Path) -> Command {
    let mut cmd = aurad(Path::new("/"), state);
    cmd.args(["trigger", "hello", "--dir"]).arg(root);
    cmd
}

/// Runs `cmd` to its end, failing the test if that takes longer than the
/// deadline (a command that hangs is the failure).
fn finish(cmd: &mut Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            // SAFETY: kill sends a signal to our own child process.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("`{cmd:?}` did not end within {DEADLINE:?}");
        }
    }
}

/// `aurad serve` of `root` as a child, its log in `log`.
fn spawn_serve(mut cmd: Command, log: &Path) -> KillOnDrop {
    KillOnDrop(
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("spawn aurad serve"),
    )
}

fn state_env(state: &Path) -> impl Fn(&str) -> Option<String> {
    let state = state.display().to_string();
    move |name: &str| (name == "XDG_STATE_HOME").then(|| state.clone())
}

/// The records of the running daemons of `root` (several with PostgreSQL),
/// once there are `n` whose daemons answer `/healthz`.
fn running(root: &Path, state: &Path, n: usize, log: &dyn Fn() -> String) -> Vec<ApiAccess> {
    let dir = private::project_dir(root, &state_env(state));
    poll(&format!("{n} daemon(s) of {}", root.display()), log, || {
        let records: Vec<ApiAccess> = std::fs::read_dir(&dir)
            .ok()?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("api-"))
            .filter_map(|e| private::read_api_file(&e.path()).ok())
            .filter(|a| healthy(a.listen))
            .collect();
        (records.len() == n).then_some(records)
    })
}

fn healthy(addr: SocketAddr) -> bool {
    matches!(support::serve::http_get(addr, "/healthz"), Some((200, _)))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn trigger_finds_the_daemon_of_dir_on_a_port_chosen_at_start_and_not_after_kill_9() {
    let (outer, root) = project("listen: 127.0.0.1:0\nshutdown_grace: 5s\n");
    let state = tempfile::tempdir().unwrap();
    let log = outer.path().join("serve.log");
    let mut serve = aurad(outer.path(), state.path());
    serve.arg("--dir").arg(&root).arg("serve");
    let mut daemon = spawn_serve(serve, &log);
    let records = running(&root, state.path(), 1, &|| read(&log));
    assert_eq!(records[0].pid, daemon.0.id());
    assert_ne!(records[0].listen.port(), 0);

    // From the parent with a relative --dir, and from / with the full path.
    let out = finish(aurad(outer.path(), state.path()).args(["trigger", "hello", "--dir", "proj"]));
    assert!(out.status.success(), "{}", show(&out));
    assert!(text(&out.stdout).starts_with("run "), "{}", show(&out));
    let out = finish(
        aurad(Path::new("/"), state.path())
            .args(["trigger", "hello", "--follow", "--dir"])
            .arg(&root),
    );
    assert!(out.status.success(), "{}", show(&out));

    // An explicit address wins over the record: nothing answers there.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let out = finish(trigger(&root, state.path()).env("AURAD_URL", &closed));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        text(&out.stderr).contains(&format!("no aurad serve is answering at {closed}")),
        "{}",
        show(&out)
    );

    // kill -9: the record stays, and is known for what it is.
    daemon.0.kill().unwrap();
    daemon.0.wait().unwrap();
    let dir = private::project_dir(&root, &state_env(state.path()));
    let left = private::api_file(&root, records[0].listen.port(), &state_env(state.path()));
    assert!(left.exists(), "kill -9 leaves the record");
    let out = finish(&mut trigger(&root, state.path()));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    for part in [
        "`listen: 127.0.0.1:0` (any free port)",
        &format!("{} is stale", left.display()),
        &format!("listened on {}", records[0].listen),
        "the daemon is not running: start it with `aurad serve`",
        &dir.display().to_string(),
    ] {
        assert!(err.contains(part), "{part:?} not in\n{}", show(&out));
    }
    let out = finish(
        aurad(Path::new("/"), state.path())
            .args(["dashboard", "--dir"])
            .arg(&root),
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(text(&out.stderr).contains("is stale"), "{}", show(&out));
    assert!(out.stdout.is_empty(), "{}", show(&out));
}

#[test]
fn without_a_record_the_listen_address_of_aurad_yaml_is_asked_and_named() {
    // The daemon runs with another state folder (as a service of another
    // user would): the command falls back on `listen:` of aurad.yaml.
    let port = free_port();
    let (outer, root) = project(&format!("listen: 127.0.0.1:{port}\nshutdown_grace: 5s\n"));
    let (theirs, mine) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let log = outer.path().join("serve.log");
    let mut serve = aurad(outer.path(), theirs.path());
    serve
        .env("AURAD_TOKEN", TOKEN)
        .arg("--dir")
        .arg(&root)
        .arg("serve");
    let daemon = spawn_serve(serve, &log);
    running(&root, theirs.path(), 1, &|| read(&log));
    let out = finish(trigger(&root, mine.path()).env("AURAD_TOKEN", TOKEN));
    assert!(out.status.success(), "{}", show(&out));
    drop(daemon);
    let out = finish(&mut trigger(&root, mine.path()));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        err.contains(&format!(
            "no aurad serve is answering at http://127.0.0.1:{port} (`listen` of aurad.yaml"
        )) && err.contains("no running daemon's address is recorded in"),
        "{}",
        show(&out)
    );
}

/// `aurad serve` of `root` on PostgreSQL `db`, listening on a free port.
fn serve_on(root: &Path, state: &Path, db: &TestDatabase, log: &Path) -> KillOnDrop {
    let mut cmd = aurad(Path::new("/"), state);
    cmd.env("AURAD_DATABASE_URL", &db.url)
        .env("AURAD_TOKEN", TOKEN)
        .arg("--dir")
        .arg(root)
        .arg("serve");
    spawn_serve(cmd, log)
}

/// A run of `hello` through `addr`'s daemon, followed to its end.
fn run_through(addr: SocketAddr, state: &Path) {
    let out = finish(
        aurad(Path::new("/"), state)
            .env("AURAD_TOKEN", TOKEN)
            .args(["trigger", "hello", "--follow", "--url"])
            .arg(format!("http://{addr}")),
    );
    assert!(out.status.success(), "through {addr}: {}", show(&out));
}

#[test]
fn with_postgresql_two_daemons_serve_one_project_directory() {
    let Some(db) = TestDatabase::create("two_daemons_one_directory") else {
        return;
    };
    let (outer, root) = project("listen: 127.0.0.1:0\nshutdown_grace: 5s\ncluster:\n  lease: 3s\n");
    let state = tempfile::tempdir().unwrap();
    let logs = [outer.path().join("a.log"), outer.path().join("b.log")];
    let both = || format!("{}\n---\n{}", read(&logs[0]), read(&logs[1]));
    let first = serve_on(&root, state.path(), &db, &logs[0]);
    running(&root, state.path(), 1, &both);
    let second = serve_on(&root, state.path(), &db, &logs[1]);
    let records = running(&root, state.path(), 2, &both);
    for record in &records {
        run_through(record.listen, state.path());
    }
    assert!(
        !root.join(".aurad.lock").exists(),
        "nothing locked in the project"
    );
    // Both runs stored as succeeded in the one database.
    poll("both runs stored as succeeded", both, || {
        (db.count("SELECT count(*) FROM runs WHERE state = 'succeeded'") == 2).then_some(())
    });
    drop((first, second));
}

/// How the project directory is made read-only for the daemon: a
/// read-only bind mount in a mount namespace of its own (root writes
/// through permissions), or `chmod a-w` (anyone else). `None` with the
/// reason when neither can be done here.
fn read_only(root: &Path) -> Result<Option<Vec<String>>, String> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        chmod_tree(root, false);
        return match std::fs::write(root.join("probe"), "") {
            Ok(()) => Err("chmod a-w did not stop a write".into()),
            Err(_) => Ok(None),
        };
    }
    // The wrapper proves the mount read-only before it becomes the daemon.
    let script = "mount --bind \"$1\" \"$1\" && mount -o remount,ro,bind \"$1\" \
                  && ! touch \"$1/probe\" 2>/dev/null && shift && exec \"$@\"";
    let probe = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(root)
        .arg("true")
        .output();
    match probe {
        Ok(out) if out.status.success() => Ok(Some(vec![
            "unshare".into(),
            "--mount".into(),
            "--propagation".into(),
            "private".into(),
            "sh".into(),
            "-c".into(),
            script.into(),
            "sh".into(),
            root.display().to_string(),
        ])),
        Ok(out) => Err(format!(
            "running as root, and a read-only bind mount failed ({}): root writes through chmod a-w",
            show(&out)
        )),
        Err(e) => Err(format!(
            "running as root, and `unshare` cannot run ({e}): root writes through chmod a-w"
        )),
    }
}

fn chmod_tree(dir: &Path, writable: bool) {
    use std::os::unix::fs::PermissionsExt;
    for entry in walk(dir) {
        let meta = std::fs::metadata(&entry).unwrap();
        let mode = meta.permissions().mode();
        let mode = if writable {
            mode | 0o200
        } else {
            mode & !0o222
        };
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// `dir` and everything beneath it, deepest last.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut all = vec![dir.to_path_buf()];
    let mut i = 0;
    while i < all.len() {
        if all[i].is_dir() {
            let children: Vec<PathBuf> = std::fs::read_dir(&all[i])
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .collect();
            all.extend(children);
        }
        i += 1;
    }
    all
}

#[test]
fn with_postgresql_a_read_only_project_directory_is_served() {
    let Some(db) = TestDatabase::create("read_only_directory") else {
        return;
    };
    let (outer, root) = project("listen: 127.0.0.1:0\nshutdown_grace: 5s\ncluster:\n  lease: 3s\n");
    let state = tempfile::tempdir().unwrap();
    let log = outer.path().join("serve.log");
    let wrapper = match read_only(&root) {
        Ok(wrapper) => wrapper,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let binary = assert_cmd::cargo::cargo_bin!("aurad");
    let mut cmd = match &wrapper {
        Some(wrapper) => {
            let mut cmd = Command::new(&wrapper[0]);
            cmd.args(&wrapper[1..]).arg(binary);
            cmd
        }
        None => Command::new(binary),
    };
    cmd.current_dir("/")
        .env("XDG_STATE_HOME", state.path())
        .env("AURAD_DATABASE_URL", &db.url)
        .env("AURAD_TOKEN", TOKEN)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .arg("--dir")
        .arg(&root)
        .arg("serve");
    let daemon = spawn_serve(cmd, &log);
    let records = running(&root, state.path(), 1, &|| read(&log));
    run_through(records[0].listen, state.path());
    assert!(!root.join(".aurad.lock").exists(), "{}", read(&log));
    assert!(!root.join("probe").exists());
    drop(daemon);
    if wrapper.is_none() {
        chmod_tree(&root, true);
    }
}
