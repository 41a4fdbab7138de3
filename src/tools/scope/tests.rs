use std::path::Path;
use std::time::{Duration, Instant};

use super::*;

/// Polls `f` every 5 ms until it holds or 10 s pass.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn read_pid(file: &Path) -> i32 {
    let mut pid = None;
    eventually("a pid file", || {
        pid = std::fs::read_to_string(file)
            .ok()
            .and_then(|t| t.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap()
}

fn alive(pid: i32) -> bool {
    procfs::stat(pid).is_some_and(|s| s.state != 'Z')
}

/// A shell in `scope` that starts a `setsid` process and a double-forked
/// one, writes their pids and exits; returns the two pids.
async fn detach_two(scope: &Scope, dir: &Path) -> (i32, i32) {
    let (a, b) = (dir.join("a"), dir.join("b"));
    let script = format!(
        "setsid sleep 300 & echo $! > {a}; ( (sleep 300 & echo $! > {b}) & ); exit 0",
        a = a.display(),
        b = b.display()
    );
    let mut command = tokio::process::Command::new("sh");
    command.arg("-c").arg(script).process_group(0);
    scope.prepare(&mut command).unwrap();
    let mut child = scope.spawn(&mut command).unwrap();
    assert!(child.wait().await.unwrap().success());
    let pids = (read_pid(&a), read_pid(&b));
    assert!(
        alive(pids.0) && alive(pids.1),
        "the detached processes did not start"
    );
    pids
}

#[tokio::test]
async fn closing_ends_setsid_and_double_forked_processes() {
    for cgroups in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let scope = Scope::open_in(cgroups);
        assert!(cgroups || !scope.has_cgroup());
        let (a, b) = detach_two(&scope, dir.path()).await;
        let ended = tokio::task::spawn_blocking(move || scope.close())
            .await
            .unwrap();
        assert!(ended >= 2, "cgroups {cgroups}: {ended} ended");
        eventually("the detached processes to end", || !alive(a) && !alive(b));
    }
}

#[tokio::test]
async fn a_process_that_cleared_its_environment_still_ends_with_its_scope() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("p");
    // No marker in the sleeper; only its still-living parent has one.
    let script = format!(
        "setsid env -i sh -c 'echo $$ > {}; exec sleep 300' & wait",
        pid_file.display()
    );
    let scope = Scope::open_in(false);
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(script)
        .process_group(0)
        .kill_on_drop(true);
    scope.prepare(&mut command).unwrap();
    let _child = scope.spawn(&mut command).unwrap();
    let pid = read_pid(&pid_file);
    eventually("the sleeper to exec", || {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
    });
    tokio::task::spawn_blocking(move || scope.close())
        .await
        .unwrap();
    eventually("the unmarked descendant to end", || !alive(pid));
}

/// The record of a dead aurad names a pid whose start time differs: that
/// pid now names another process, which is not killed; the one recorded
/// with its true start time is.
#[test]
fn a_reused_pid_in_a_dead_aurads_record_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut other = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let mut ours = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let (other_pid, ours_pid) = (other.id() as i32, ours.id() as i32);
    let other_start = procfs::stat(other_pid).unwrap().start;
    let ours_start = procfs::stat(ours_pid).unwrap().start;
    // An instance name of a process that is not running (pid 0 never is
    // a process of ours).
    let name = records::instance_name("test", i32::MAX, 1);
    let folder = dir.path().join(&name);
    std::fs::create_dir(&folder).unwrap();
    let record = |n: &str, pid, start| {
        records::write(&folder.join(n), &records::leader_line(pid, start)).unwrap();
    };
    record("1", other_pid, other_start + 1);
    record("2", ours_pid, ours_start);
    let killed = records::reap_dead(dir.path(), "test", false);
    assert_eq!(killed, 1);
    assert!(!folder.exists(), "the dead instance's records stay");
    assert!(
        other.try_wait().unwrap().is_none(),
        "a process whose start time differs from the record was killed"
    );
    let status = ours.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    other.kill().unwrap();
    other.wait().unwrap();
}

#[test]
fn a_live_aurads_records_and_another_projects_are_not_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let pid = sleeper.id() as i32;
    let start = procfs::stat(pid).unwrap().start;
    let me = std::process::id() as i32;
    let live = records::instance_name("test", me, procfs::stat(me).unwrap().start);
    let elsewhere = records::instance_name("other", i32::MAX, 1);
    for name in [&live, &elsewhere] {
        std::fs::create_dir(dir.path().join(name)).unwrap();
        records::write(
            &dir.path().join(name).join("1"),
            &records::leader_line(pid, start),
        )
        .unwrap();
    }
    assert_eq!(records::reap_dead(dir.path(), "test", false), 0);
    assert!(sleeper.try_wait().unwrap().is_none());
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

#[test]
fn stat_reads_fields_after_the_command_name() {
    let me = std::process::id() as i32;
    let stat = procfs::stat(me).unwrap();
    assert_eq!(stat.ppid, unsafe { libc::getppid() });
    assert!(procfs::is_alive(me, stat.start));
    assert!(!procfs::is_alive(me, stat.start + 1));
    assert_eq!(
        records::owner_of(&records::instance_name("k", 12, 34), "k"),
        Some((12, 34))
    );
    assert_eq!(records::owner_of("aurad-k.12.34", "other"), None);
    assert_eq!(
        records::parse_instance("aurad-ab.c.12.34"),
        Some(("ab.c", 12, 34))
    );
}
