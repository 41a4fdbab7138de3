//! What `/proc` says about processes, for [`super`]: a process's parent,
//! state, start time (field 22 of `/proc/PID/stat`, in clock ticks since
//! boot: with the pid, it names one process, never a later one that reuses
//! the pid), owner and scope marker; killing every process that carries a
//! marker (and their descendants), and reaping the dead ones that were
//! re-parented to aurad as a subreaper, by pid, never with `waitpid(-1)`
//! (tokio reaps its own children by pid and must find their status).
//! Depends on std and libc only.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

/// What `/proc/PID/stat` says about one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `Z`, ...
    pub state: char,
    pub ppid: i32,
    /// Clock ticks after boot at which it started.
    pub start: u64,
}

/// The stat of process `pid`, if it exists.
pub fn stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it start after the last `)`.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Whether `pid` is still the process that started at `start` and has not
/// died (a zombie runs nothing).
pub fn is_alive(pid: i32, start: u64) -> bool {
    stat(pid).is_some_and(|s| s.start == start && s.state != 'Z')
}

/// Whether process `pid` belongs to the user aurad runs as.
pub fn is_ours(pid: i32) -> bool {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == uid)
}

/// Every process id in `/proc`.
pub fn pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// The value of the scope marker in `pid`'s environment (as it was at its
/// exec), if it has one and it can be read.
pub fn marker(pid: i32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|b| *b == 0).find_map(|var| {
        let rest = var.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        String::from_utf8(rest.to_vec()).ok()
    })
}

/// SIGKILLs process `pid` if it is still the one that started at `start`.
pub fn kill(pid: i32, start: u64) -> bool {
    if pid <= 1 || stat(pid).is_none_or(|s| s.start != start) {
        return false;
    }
    // SAFETY: kill only sends a signal.
    unsafe { libc::kill(pid, libc::SIGKILL) == 0 }
}

/// SIGKILLs every process of ours whose marker `matches`, and every
/// descendant of one (a child that cleared its environment is still
/// caught while its parent lives), in rounds until a round finds none
/// (one may fork between the scan and the kill). Returns the processes
/// killed, as pid and start time.
pub fn kill_marked(name: &str, matches: impl Fn(&str) -> bool) -> Vec<(i32, u64)> {
    let me = std::process::id() as i32;
    let mut killed = Vec::new();
    for _ in 0..50 {
        let all: Vec<(i32, Stat)> = pids()
            .into_iter()
            .filter(|pid| *pid != me)
            .filter_map(|pid| Some((pid, stat(pid)?)))
            .collect();
        let mut hit: HashSet<i32> = all
            .iter()
            .filter(|(pid, s)| s.state != 'Z' && is_ours(*pid))
            .filter(|(pid, _)| marker(*pid, name).is_some_and(|m| matches(&m)))
            .map(|(pid, _)| *pid)
            .collect();
        // Descendants: repeat until no process's parent is newly hit.
        loop {
            let more: Vec<i32> = all
                .iter()
                .filter(|(pid, s)| {
                    s.state != 'Z' && hit.contains(&s.ppid) && !hit.contains(pid) && is_ours(*pid)
                })
                .map(|(pid, _)| *pid)
                .collect();
            if more.is_empty() {
                break;
            }
            hit.extend(more);
        }
        let round: Vec<(i32, u64)> = all
            .iter()
            .filter(|(pid, _)| hit.contains(pid))
            .filter(|(pid, s)| kill(*pid, s.start))
            .map(|(pid, s)| (*pid, s.start))
            .collect();
        if round.is_empty() {
            break;
        }
        killed.extend(round);
    }
    killed
}

/// Waits (until `within` passes) for each of `dying` to be dead, and if
/// `reap`, reaps those that became children of this process (it is their
/// subreaper), except any of `leaders` (tokio's own children, reaped by
/// tokio). A zombie counts as dead: it runs nothing.
pub fn await_gone(dying: &[(i32, u64)], leaders: &[(i32, u64)], reap: bool, within: Duration) {
    let me = std::process::id() as i32;
    let deadline = Instant::now() + within;
    let mut left: Vec<(i32, u64)> = dying
        .iter()
        .filter(|d| !leaders.contains(d))
        .copied()
        .collect();
    while !left.is_empty() {
        left.retain(|&(pid, start)| match stat(pid) {
            Some(s) if s.start == start => {
                if s.state == 'Z' && s.ppid == me && reap {
                    reap_one(pid);
                }
                s.state != 'Z'
            }
            _ => false,
        });
        if left.is_empty() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Reaps every dead child of this process that is none of `leaders`:
/// orphans of tool processes re-parented to aurad. Only for a subreaper
/// whose every own child is among `leaders`.
pub fn reap_orphans(leaders: &[(i32, u64)]) -> usize {
    let me = std::process::id() as i32;
    own_children()
        .unwrap_or_else(pids)
        .into_iter()
        .filter(|pid| {
            stat(*pid).is_some_and(|s| {
                s.ppid == me && s.state == 'Z' && !leaders.contains(&(*pid, s.start))
            })
        })
        .filter(|pid| reap_one(*pid))
        .count()
}

/// This process's children, as its threads' `/proc/self/task/*/children`
/// list them: a few small files instead of a `stat` of every process on
/// the machine at each tool call's end (benches/tools.rs). `None` where
/// the kernel keeps no such list (`CONFIG_PROC_CHILDREN` off).
fn own_children() -> Option<Vec<i32>> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let mut found = Vec::new();
    for task in tasks.flatten() {
        let list = task.path().join("children");
        match std::fs::read_to_string(&list) {
            Ok(text) => found.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            ),
            // A thread that ended meanwhile has no list any more.
            Err(_) if !task.path().exists() => {}
            Err(_) => return None,
        }
    }
    Some(found)
}

/// Collects the exit status of dead child `pid` (and throws it away).
fn reap_one(pid: i32) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on one pid writes only `status`.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == pid }
}
