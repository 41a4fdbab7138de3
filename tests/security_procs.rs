//! No process a run starts outlives it (issue #32, item 8). A `bash` tool
//! call once started `setsid sleep 300 &` or a double fork `( (sleep 300
//! &) & )`: both left the call's process group, so killing the group at
//! the call's end, at its timeout or at a second SIGTERM missed them, and
//! after `kill -9` of `aurad serve` or `aurad run` every tool process kept
//! running with nothing to reap it at the next start. Now each call runs
//! in a scope (its own cgroup where cgroup v2 is writable, as here; an
//! `AURAD_SCOPE` marker and aurad as subreaper otherwise) that is killed
//! when the call ends, and a starting aurad ends what a killed one of the
//! same project recorded. Each test performs the attack against the real
//! binary and fails if a process it started is still running.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;
use std::process::Stdio;

use serde_json::json;
use support::mock_llm::{MockLlm, Reply};
use support::serve::{KillOnDrop, Serve, aurad, poll, show, start_run, wait_state};

fn write(root: &Path, file: &str, content: &str) {
    let path = root.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

/// A shell that starts a `setsid` process and a double-forked one, each
/// writing its own pid to `$DIR/setsid` and `$DIR/forked` before it
/// becomes `sleep 300`, and waits until both wrote; then `tail`.
fn detach(dir: &str, tail: &str) -> String {
    format!(
        "setsid sh -c 'echo $$ > {dir}/setsid; exec sleep 300' & \
         ( (sh -c 'echo $$ > {dir}/forked; exec sleep 300' &) & ); \
         echo $$ > {dir}/leader; \
         while [ ! -s {dir}/setsid ] || [ ! -s {dir}/forked ]; do sleep 0.01; done; {tail}"
    )
}

fn pid_in(file: &Path) -> Option<i32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// The pids the shell of [`detach`] wrote in `dir`, once all are there.
fn detached(dir: &Path, context: impl Fn() -> String) -> Vec<i32> {
    poll("the tool's processes to write their pids", context, || {
        ["setsid", "forked", "leader"]
            .iter()
            .map(|name| pid_in(&dir.join(name)))
            .collect::<Option<Vec<i32>>>()
    })
}

/// Whether `pid` runs (a zombie runs nothing: it only waits for its
/// parent to collect its status).
fn runs(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')))
    })
}

fn assert_all_end(pids: &[i32], context: impl Fn() -> String) {
    poll("every process the run started to end", &context, || {
        pids.iter().all(|pid| !runs(*pid)).then_some(())
    });
}

fn bash_call(mock: &MockLlm, command: &str, timeout_secs: Option<u64>) {
    let mut args = json!({ "command": command });
    if let Some(secs) = timeout_secs {
        args["timeout_secs"] = json!(secs);
    }
    mock.push(Reply::tool_call("c1", "bash", &args.to_string()));
    mock.push(Reply::Text("done".into()));
}

/// A project whose agent `free` has an unsandboxed `bash`, its model the
/// scripted `mock` (answering "done" when nothing else is scripted): the
/// project folder and the daemon's address.
fn free_project(mock: &MockLlm) -> (tempfile::TempDir, std::net::SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let addr = support::serve::write_settings(dir.path(), mock);
    write(
        dir.path(),
        "agents/free.yaml",
        "model: mock/m\nsystem: s\ntools: [bash]\nsandbox: none\n",
    );
    (dir, addr)
}

#[test]
fn setsid_and_double_forked_processes_end_with_the_call_and_its_timeout() {
    let mock = MockLlm::start_in_thread();
    let (dir, addr) = free_project(&mock);
    let root = dir.path();
    // The strictest sandbox: the child joins its cgroup before Landlock
    // forbids writing anywhere but its scratch folder.
    write(
        root,
        "agents/boxed.yaml",
        "model: mock/m\nsystem: s\ntools: [bash]\nsandbox: workdir\n",
    );
    let serve = Serve::start(root, addr, &[]);

    // The call ends by itself, leaving both behind.
    let pids_dir = tempfile::tempdir().unwrap();
    let path = pids_dir.path().display().to_string();
    bash_call(&mock, &detach(&path, "exit 0"), None);
    let id = start_run(serve.addr, "free", "go");
    let pids = detached(pids_dir.path(), || serve.log());
    wait_state(&serve, &id, "succeeded");
    assert_all_end(&pids, || serve.log());

    // The call is cut by its timeout.
    bash_call(&mock, &detach("$AURAD_WORKDIR", "sleep 300"), Some(1));
    let id = start_run(serve.addr, "boxed", "go");
    let scratch = root.join(".aurad/work").join(&id);
    let pids = detached(&scratch, || serve.log());
    wait_state(&serve, &id, "succeeded");
    let tool_result = support::serve::events(root, &id)
        .into_iter()
        .find(|e| e["type"] == "tool_result" || e["type"] == "tool_call_finished")
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_all_end(&pids, || format!("{tool_result}\n{}", serve.log()));
}

#[test]
fn a_restarted_daemon_ends_what_a_killed_one_left() {
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Text("done".into()));
    let (dir, addr) = free_project(&mock);
    let root = dir.path();
    let mut serve = Serve::start(root, addr, &[]);
    let pids_dir = tempfile::tempdir().unwrap();
    let path = pids_dir.path().display().to_string();
    bash_call(&mock, &detach(&path, "sleep 300"), None);
    start_run(serve.addr, "free", "go");
    let pids = detached(pids_dir.path(), || serve.log());
    serve.kill_now();
    // The attack's condition: nothing ended them with the daemon.
    assert!(
        pids.iter().all(|pid| runs(*pid)),
        "the tool processes died with the daemon"
    );
    let restarted = Serve::start(root, addr, &[]);
    assert_all_end(&pids, || restarted.log());
}

#[test]
fn a_killed_aurad_run_leaves_nothing_to_the_next_start() {
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Text("done".into()));
    let (dir, _) = free_project(&mock);
    let root = dir.path();
    write(root, "agents/quiet.yaml", "model: mock/m\nsystem: s\n");
    let pids_dir = tempfile::tempdir().unwrap();
    let path = pids_dir.path().display().to_string();
    bash_call(&mock, &detach(&path, "sleep 300"), None);
    let mut run = KillOnDrop(
        aurad(root)
            .args(["run", "free", "go"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pids = detached(pids_dir.path(), String::new);
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    assert!(
        pids.iter().all(|pid| runs(*pid)),
        "the tool processes died with aurad run"
    );
    // The next `aurad run` of the project ends them as it starts.
    let out = support::serve::run(root, &["run", "quiet", "hi"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_all_end(&pids, || show(&out));
}

#[test]
fn a_second_sigterm_leaves_no_detached_process_behind() {
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Text("done".into()));
    let (dir, addr) = free_project(&mock);
    let root = dir.path();
    let mut serve = Serve::start(root, addr, &[]);
    let pids_dir = tempfile::tempdir().unwrap();
    let path = pids_dir.path().display().to_string();
    // The shell ignores SIGTERM, so the graceful shutdown waits on it.
    bash_call(&mock, &detach(&path, "trap '' TERM; sleep 300"), None);
    start_run(serve.addr, "free", "go");
    let pids = detached(pids_dir.path(), || serve.log());
    serve.signal(libc::SIGTERM);
    poll(
        "the first SIGTERM to be taken",
        || serve.log(),
        || serve.log().contains("SIGTERM received").then_some(()),
    );
    serve.signal(libc::SIGTERM);
    serve.wait_exit();
    assert_all_end(&pids, || serve.log());
}
