//! What an aurad process writes down about the processes it started, so
//! that the next aurad of the same project can end them if it dies
//! without cleaning up (`kill -9`, a crash, the machine's OOM killer):
//! one folder per aurad process in the project's private state
//! (`<project dir>/procs/<instance>`, named after the process's pid and
//! start time), holding `cgroup` (the path of its cgroup, when it has one)
//! and one file per live tool process or MCP server (`<n>`: the leader's
//! pid and start time). At start, every folder whose aurad no longer runs
//! is reaped: its cgroup killed and removed, every process of ours whose
//! scope marker names it killed, and each recorded leader killed with its
//! process group only if the pid still names the process that started at
//! the recorded time (a reused pid is left alone).
//! Depends on std, libc and `tools::scope::{procfs, cgroup}`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{SCOPE_ENV, cgroup, procfs};

/// How long a dead instance's processes get to die.
const GRACE: Duration = Duration::from_secs(2);

/// The name of this aurad process's folder and marker prefix: the project
/// key, the pid and the start time.
pub fn instance_name(key: &str, pid: i32, start: u64) -> String {
    format!("aurad-{key}.{pid}.{start}")
}

/// The pid and start time an instance name carries.
pub fn owner_of(name: &str, key: &str) -> Option<(i32, u64)> {
    let rest = name.strip_prefix(&format!("aurad-{key}."))?;
    let (pid, start) = rest.split_once('.')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// The project key, pid and start time any instance name carries.
pub fn parse_instance(name: &str) -> Option<(&str, i32, u64)> {
    let rest = name.strip_prefix("aurad-")?;
    let (rest, start) = rest.rsplit_once('.')?;
    let (key, pid) = rest.rsplit_once('.')?;
    Some((key, pid.parse().ok()?, start.parse().ok()?))
}

/// Writes `content` to `path`, readable by the user only.
pub fn write(path: &Path, content: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(content.as_bytes())
}

/// A leader's record: `PID START`.
pub fn leader_line(pid: i32, start: u64) -> String {
    format!("{pid} {start}\n")
}

fn parse_leader(text: &str) -> Option<(i32, u64)> {
    let mut words = text.split_whitespace();
    Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
}

/// Reaps what each dead aurad of project `key` left in `dir` (its
/// instances' folders); returns how many processes were killed. `reap`:
/// this process is their subreaper and collects their exit statuses (it
/// has no child of its own yet).
pub fn reap_dead(dir: &Path, key: &str, reap: bool) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut killed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((pid, start)) = owner_of(&name, key) else {
            continue;
        };
        if procfs::is_alive(pid, start) {
            continue;
        }
        killed += reap_instance(&entry.path(), &name, reap);
    }
    killed
}

/// Ends what the dead instance `name` recorded in `folder`, then removes
/// the folder.
pub fn reap_instance(folder: &Path, name: &str, reap: bool) -> usize {
    let mut killed = 0;
    let cgroup_file = folder.join("cgroup");
    if let Ok(path) = std::fs::read_to_string(&cgroup_file) {
        let path = PathBuf::from(path.trim());
        if path.is_absolute() && path.is_dir() {
            killed += reap_cgroup(&path, reap);
        }
    }
    let prefix = format!("{name}/");
    let marked = procfs::kill_marked(SCOPE_ENV, |m| m.starts_with(&prefix));
    killed += marked.len();
    let mut dying = marked;
    for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
        let path = entry.path();
        if path == cgroup_file {
            continue;
        }
        let leader = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| parse_leader(&t));
        if let Some((pid, start)) = leader
            && kill_leader(pid, start)
        {
            killed += 1;
            dying.push((pid, start));
        }
    }
    procfs::await_gone(&dying, &[], reap, GRACE);
    if let Err(e) = std::fs::remove_dir_all(folder) {
        tracing::warn!(folder = %folder.display(), error = %e, "cannot remove a dead aurad's process records");
    }
    killed
}

/// Kills recorded leader `pid` and its process group, only if it still is
/// the process of ours that started at `start`. Returns whether it was.
pub fn kill_leader(pid: i32, start: u64) -> bool {
    if !procfs::is_alive(pid, start) || !procfs::is_ours(pid) {
        return false;
    }
    // The leader started its own group (`process_group(0)`): if it still
    // leads it, the group goes too.
    // SAFETY: killpg only sends a signal.
    unsafe { libc::killpg(pid, libc::SIGKILL) };
    procfs::kill(pid, start)
}

/// Kills everything in a dead instance's cgroup and removes it.
pub fn reap_cgroup(path: &Path, reap: bool) -> usize {
    let members = cgroup::members_beneath(path);
    let dying: Vec<(i32, u64)> = members
        .iter()
        .filter_map(|pid| Some((*pid, procfs::stat(*pid)?.start)))
        .collect();
    if let Err(e) = cgroup::kill(path, GRACE) {
        tracing::warn!(error = %e, "cannot end what a dead aurad left in its cgroup");
    }
    procfs::await_gone(&dying, &[], reap, GRACE);
    if let Err(e) = cgroup::remove(path) {
        tracing::warn!(cgroup = %path.display(), error = %e, "cannot remove a dead aurad's cgroup");
    }
    members.len()
}
