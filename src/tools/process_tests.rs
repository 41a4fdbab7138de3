//! Tests of `process.rs`: stdin, capture, exit statuses, and that the whole
//! process group dies on exit, timeout, cancellation and drop.

use std::time::Instant;

use super::*;

fn sh(script: &str) -> ProcessSpec {
    let mut spec = ProcessSpec::new("sh", std::env::temp_dir());
    spec.args = vec!["-c".into(), script.into()];
    spec.timeout = Duration::from_secs(10);
    spec
}

/// Runs `spec`, failing the test if it hangs.
async fn run_ok(spec: ProcessSpec) -> ProcessOutput {
    tokio::time::timeout(Duration::from_secs(15), run(spec))
        .await
        .expect("the process call hung")
        .expect("the process could not be run")
}

/// True once `pid` no longer runs (gone, or a zombie nobody reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
    }
}

async fn assert_gone_soon(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone(pid) {
        assert!(
            Instant::now() < deadline,
            "process {pid} still runs: {:?}",
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn first_pid(out: &Captured) -> u32 {
    let text = String::from_utf8_lossy(&out.kept);
    text.split_whitespace()
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"))
}

#[tokio::test]
async fn stdin_env_and_cwd_reach_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh("cat; echo \" $GREETING\"; pwd");
    spec.cwd = dir.path().to_path_buf();
    spec.env = vec![("GREETING".into(), "hi".into())];
    spec.stdin = Some(b"{\"a\":1}".to_vec());
    let out = run_ok(spec).await;
    assert!(out.success(), "{out:?}");
    let text = String::from_utf8(out.stdout.kept).unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(text, format!("{{\"a\":1}} hi\n{}\n", cwd.display()));
}

#[tokio::test]
async fn a_program_ignoring_big_stdin_neither_hangs_nor_fails() {
    let mut spec = sh("echo ignored");
    spec.stdin = Some(vec![b'x'; 4 * 1024 * 1024]);
    let out = run_ok(spec).await;
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout.kept, b"ignored\n");
}

#[tokio::test]
async fn exit_code_signal_and_stderr() {
    let out = run_ok(sh("echo bad >&2; exit 3")).await;
    assert_eq!(out.code(), Some(3));
    assert_eq!(out.stderr.kept, b"bad\n");
    let out = run_ok(sh("kill -TERM $$")).await;
    assert_eq!(out.signal(), Some(libc::SIGTERM));
    assert_eq!(signal_name(libc::SIGTERM), "signal 15 (SIGTERM)");
}

#[tokio::test]
async fn missing_program_is_a_spawn_error() {
    let spec = ProcessSpec::new("/nonexistent/aurad-test-program", std::env::temp_dir());
    let err = run(spec).await.unwrap_err();
    assert!(matches!(err, ProcessError::Spawn(_)), "{err:?}");
}

#[tokio::test]
async fn a_program_found_on_path_keeps_its_name_as_argv0() {
    let out = run_ok(sh("echo \"$0\"")).await;
    assert_eq!(out.stdout.kept, b"sh\n", "{out:?}");
}

#[tokio::test]
async fn a_program_with_its_own_path_is_looked_up_there() {
    let bin = tempfile::tempdir().unwrap();
    let tool = bin.path().join("aurad-own-path-tool");
    std::fs::write(&tool, "#!/bin/sh\necho \"own $0\"\n").unwrap();
    let executable = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755);
    std::fs::set_permissions(&tool, executable).unwrap();
    let mut spec = ProcessSpec::new("aurad-own-path-tool", std::env::temp_dir());
    spec.env = vec![("PATH".into(), bin.path().as_os_str().to_owned())];
    let out = run_ok(spec).await;
    // A script's $0 is the path it was executed by.
    let text = String::from_utf8(out.stdout.kept).unwrap();
    assert_eq!(text, format!("own {}\n", tool.display()));
}

#[tokio::test]
async fn background_processes_die_when_the_child_exits() {
    let out = run_ok(sh("sleep 30 & echo $!")).await;
    assert!(out.success());
    assert_gone_soon(first_pid(&out.stdout)).await;
}

/// A process that left the group (a session of its own) is killed with
/// the call's scope all the same: it can neither outlive the call nor
/// hold its output pipe open, and the call ends with what was written.
#[tokio::test]
async fn a_process_outside_the_group_ends_with_the_call() {
    // The shell waits until the background process is in its own session
    // (field 6 of /proc/PID/stat), so the group kill cannot reach it first.
    let started = Instant::now();
    let out = run_ok(sh(
        "setsid sleep 30 & pid=$!; \
         while [ \"$(cut -d' ' -f6 /proc/$pid/stat)\" = \"$(cut -d' ' -f6 /proc/$$/stat)\" ]; do :; done; \
         echo $pid; echo written",
    ))
    .await;
    let pid = first_pid(&out.stdout);
    assert!(out.success());
    assert!(
        String::from_utf8_lossy(&out.stdout.kept).contains("written"),
        "{:?}",
        String::from_utf8_lossy(&out.stdout.kept)
    );
    assert_gone_soon(pid).await;
    // Not held open for the pipe grace.
    assert!(started.elapsed() < PIPE_GRACE, "{:?}", started.elapsed());
}

#[tokio::test]
async fn timeout_kills_the_whole_group() {
    let mut spec = sh("sleep 30 & echo $!; sleep 30");
    spec.timeout = Duration::from_millis(300);
    let started = Instant::now();
    let out = run_ok(spec).await;
    assert_eq!(out.ended, Ended::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_gone_soon(first_pid(&out.stdout)).await;
}

#[tokio::test]
async fn cancel_kills_the_whole_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut spec = sh(&format!(
        "sleep 30 & echo $! > {}; sleep 30",
        pidfile.display()
    ));
    let cancel = spec.cancel.clone();
    spec.timeout = Duration::from_secs(30);
    let call = tokio::spawn(run(spec));
    let pid = wait_for_pid(&pidfile).await;
    cancel.cancel();
    let out = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("cancel did not stop the call")
        .unwrap()
        .unwrap();
    assert_eq!(out.ended, Ended::Cancelled);
    assert_gone_soon(pid).await;
}

#[tokio::test]
async fn already_cancelled_starts_nothing() {
    let spec = sh("echo no");
    spec.cancel.cancel();
    let out = run_ok(spec).await;
    assert_eq!(out.ended, Ended::Cancelled);
    assert!(out.stdout.kept.is_empty());
}

#[tokio::test]
async fn dropping_the_call_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut call = Box::pin(run(sh(&format!(
        "sleep 30 & echo $! > {}; sleep 30",
        pidfile.display()
    ))));
    let deadline = Instant::now() + Duration::from_secs(5);
    let pid = loop {
        tokio::select! {
            r = &mut call => panic!("the call ended early: {r:?}"),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        if let Some(pid) = read_pid(&pidfile) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the script never wrote its pid");
    };
    drop(call);
    assert_gone_soon(pid).await;
}

fn read_pid(file: &std::path::Path) -> Option<u32> {
    let text = std::fs::read_to_string(file).ok()?;
    text.trim().parse().ok()
}

async fn wait_for_pid(file: &std::path::Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(pid) = read_pid(file) {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", file.display());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn big_output_is_drained_and_bounded() {
    let mut spec = sh("head -c 3000000 /dev/zero; printf 'abcdefghij' >&2");
    spec.keep_stdout = Keep::Head(100);
    spec.keep_stderr = Keep::Tail(4);
    let out = run_ok(spec).await;
    assert!(out.success());
    assert_eq!(out.stdout.kept.len(), 100);
    assert_eq!(out.stdout.total, 3_000_000);
    assert!(out.stdout.was_cut());
    assert_eq!(out.stderr.kept, b"ghij");
    assert_eq!(out.stderr.total, 10);
}

#[test]
fn keep_head_and_tail() {
    let mut v = Vec::new();
    keep_bytes(&mut v, b"abc", Keep::Head(4));
    keep_bytes(&mut v, b"def", Keep::Head(4));
    assert_eq!(v, b"abcd");
    let mut v = Vec::new();
    keep_bytes(&mut v, b"abc", Keep::Tail(4));
    keep_bytes(&mut v, b"def", Keep::Tail(4));
    assert_eq!(v, b"cdef");
    keep_bytes(&mut v, b"0123456", Keep::Tail(4));
    assert_eq!(v, b"3456");
}
