//! The scope of one tool call or one stdio MCP server: every process it
//! starts, however it detaches (`setsid`, a double fork, a new process
//! group), ends when the scope closes, and what an aurad killed with
//! `kill -9` left is ended by the next aurad of the same project.
//!
//! How, in order of strength:
//! - **A cgroup per scope**, where a cgroup v2 hierarchy is writable
//!   (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on hybrid hosts): each
//!   aurad process makes `aurad-<project>.<pid>.<start>` beneath its own
//!   cgroup and one child cgroup per scope; the forked child moves itself
//!   in before it executes anything, and no descendant can leave it
//!   without write access to another cgroup. Closing kills the cgroup
//!   (`cgroup.kill`, or freeze and kill on kernels before 5.14).
//! - **A marker** everywhere: `AURAD_SCOPE=<instance>/<n>` in the
//!   environment of the scope's leader, which every descendant inherits
//!   and `/proc/PID/environ` shows to the same user. Without a cgroup,
//!   closing kills every process of ours carrying the marker and their
//!   descendants, in rounds until none is found.
//! - **A subreaper**: [`start`] makes aurad the subreaper of its
//!   descendants (`PR_SET_CHILD_SUBREAPER`), so orphans are re-parented to
//!   aurad rather than init and their zombies are reaped here, by pid
//!   (tokio's own children, the scopes' leaders, are left to tokio).
//! - **Records** ([`records`]): the instance's cgroup and each leader's pid
//!   and start time, in the project's private state; [`start`] reaps those
//!   of dead aurad processes of the project.
//!
//! Depends on std, libc, tokio's `Command` and `tools::scope::{cgroup,
//! procfs, records}`.

mod cgroup;
pub mod procfs;
pub mod records;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

/// The environment variable that marks the processes of a scope.
pub const SCOPE_ENV: &str = "AURAD_SCOPE";

/// How long closing waits for the scope's processes to die.
const GRACE: Duration = Duration::from_secs(2);

/// This aurad process: its name, cgroup and records.
struct Instance {
    name: String,
    cgroup: Option<PathBuf>,
    records: Option<PathBuf>,
    subreaper: bool,
    next: AtomicU64,
}

static INSTANCE: OnceLock<Instance> = OnceLock::new();

/// What [`start`] found and chose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Started {
    /// Processes a dead aurad of the project left, now killed.
    pub reaped: usize,
    /// The cgroup of this aurad's scopes, if cgroups are used.
    pub cgroup: Option<PathBuf>,
    /// Whether aurad is its descendants' subreaper.
    pub subreaper: bool,
}

/// Sets up this aurad process (`aurad serve`, `aurad run`) for project
/// `key` with its records in `records`: becomes its descendants'
/// subreaper, ends what dead aurad processes of the project left, and
/// makes its own cgroup and record folder. Call once, first thing.
pub fn start(key: &str, records: &Path) -> Started {
    // SAFETY: prctl with integer arguments only.
    let subreaper = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } == 0;
    if !subreaper {
        tracing::warn!(error = %std::io::Error::last_os_error(), "cannot become the subreaper of tool processes");
    }
    let mut reaped = records::reap_dead(records, key, subreaper);
    reaped += reap_dead_cgroups(key, subreaper);
    let instance = INSTANCE.get_or_init(|| make_instance(key, Some(records), subreaper));
    Started {
        reaped,
        cgroup: instance.cgroup.clone(),
        subreaper: instance.subreaper,
    }
}

/// The cgroups beneath ours of dead aurad processes of project `key`
/// (their records may be lost): killed and removed. Those of other
/// projects' dead aurad processes are removed when empty (a `kill -9`
/// leaves the folder), never killed.
fn reap_dead_cgroups(key: &str, reap: bool) -> usize {
    let Some(own) = cgroup::own_cgroup() else {
        return 0;
    };
    let mut killed = 0;
    for path in cgroup::children(&own) {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let Some((owner_key, pid, start)) = name.as_deref().and_then(records::parse_instance)
        else {
            continue;
        };
        if procfs::is_alive(pid, start) {
            continue;
        }
        if owner_key == key {
            killed += records::reap_cgroup(&path, reap);
        } else if cgroup::members_beneath(&path).is_empty() {
            let _ = cgroup::remove(&path);
        }
    }
    killed
}

/// Whether the processes of tool calls can be scoped in cgroups here, as
/// [`start`] would try: what `aurad doctor` reports. `system` is where
/// `/sys` and `/proc` are looked for (`/`, or a fake tree in a test).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupProbe {
    /// A child cgroup was made (and removed) beneath this process's own.
    Usable(PathBuf),
    /// This process's cgroup exists but no child can be made beneath it.
    NotWritable(PathBuf, String),
    /// No cgroup v2 hierarchy holds this process.
    NoCgroup2,
}

/// Makes and removes a child cgroup beneath this process's own (see
/// [`CgroupProbe`]).
pub fn probe_cgroup(system: &Path) -> CgroupProbe {
    let Some(own) = cgroup::own_cgroup_under(system) else {
        return CgroupProbe::NoCgroup2;
    };
    let name = format!("aurad-probe.{}", std::process::id());
    match cgroup::create(&own, &name) {
        Ok(made) => {
            if let Err(e) = cgroup::remove(&made) {
                tracing::debug!(path = %made.display(), error = %e, "cannot remove the probe cgroup");
            }
            CgroupProbe::Usable(own)
        }
        Err(e) => CgroupProbe::NotWritable(own, e.to_string()),
    }
}

fn make_instance(key: &str, records: Option<&Path>, subreaper: bool) -> Instance {
    let pid = std::process::id() as i32;
    let start = procfs::stat(pid).map_or(0, |s| s.start);
    let name = records::instance_name(key, pid, start);
    let cgroup = cgroup::create_beneath_own(&name);
    let records = records.map(|dir| dir.join(&name)).filter(|folder| {
        let made = std::fs::create_dir_all(folder).and_then(|()| match &cgroup {
            Some(path) => records::write(&folder.join("cgroup"), &path.to_string_lossy()),
            None => Ok(()),
        });
        if let Err(e) = &made {
            tracing::warn!(folder = %folder.display(), error = %e, "cannot record tool processes; a crash would leave them running");
        }
        made.is_ok()
    });
    Instance {
        name,
        cgroup,
        records,
        subreaper,
        next: AtomicU64::new(1),
    }
}

/// This process's instance; a library user that never called [`start`]
/// gets one without records or subreaper.
fn instance() -> &'static Instance {
    INSTANCE.get_or_init(|| {
        reap_dead_cgroups("lib", false);
        make_instance("lib", None, false)
    })
}

/// The open scopes (for [`kill_all`]) and the leaders tokio reaps.
static OPEN: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());

fn open_scopes() -> MutexGuard<'static, Vec<Weak<Inner>>> {
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held while a leader is spawned and while orphans are reaped.
static SPAWNING: Mutex<()> = Mutex::new(());

fn spawning() -> MutexGuard<'static, ()> {
    SPAWNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The leaders (pid, start) of the open scopes.
fn leaders() -> Vec<(i32, u64)> {
    open_scopes()
        .iter()
        .filter_map(Weak::upgrade)
        .filter_map(|s| *s.leader.lock().unwrap_or_else(|e| e.into_inner()))
        .collect()
}

/// One scope; closing it (or dropping it) ends its every process.
#[derive(Debug)]
pub struct Scope(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    marker: String,
    cgroup: Option<PathBuf>,
    record: Option<PathBuf>,
    leader: Mutex<Option<(i32, u64)>>,
    closed: AtomicBool,
}

impl Scope {
    /// A new scope (its cgroup made, if cgroups are used).
    pub fn open() -> Scope {
        Scope::open_in(true)
    }

    /// A new scope, in a cgroup only if `cgroups` and they are used.
    fn open_in(cgroups: bool) -> Scope {
        let instance = instance();
        let n = instance.next.fetch_add(1, Ordering::Relaxed);
        let cgroup = instance.cgroup.as_ref().filter(|_| cgroups).and_then(|parent| {
            cgroup::create(parent, &n.to_string())
                .inspect_err(|e| tracing::warn!(error = %e, "cannot make a tool call's cgroup; its processes are found by their marker"))
                .ok()
        });
        let inner = Arc::new(Inner {
            marker: format!("{}/{n}", instance.name),
            cgroup,
            record: instance.records.as_ref().map(|dir| dir.join(n.to_string())),
            leader: Mutex::new(None),
            closed: AtomicBool::new(false),
        });
        let mut open = open_scopes();
        open.retain(|s| s.strong_count() > 0);
        open.push(Arc::downgrade(&inner));
        Scope(inner)
    }

    /// The marker its processes carry (`AURAD_SCOPE`'s value).
    pub fn marker(&self) -> &str {
        &self.0.marker
    }

    /// Whether a cgroup holds its processes.
    pub fn has_cgroup(&self) -> bool {
        self.0.cgroup.is_some()
    }

    /// Makes `command`'s child part of the scope: the marker in its
    /// environment and, with a cgroup, a hook that moves it in before it
    /// executes the program. Install it before any hook that confines the
    /// child (a Landlock domain may forbid writing the cgroup).
    pub fn prepare(&self, command: &mut tokio::process::Command) -> std::io::Result<()> {
        command.env(SCOPE_ENV, &self.0.marker);
        if let Some(path) = &self.0.cgroup {
            let procs = cgroup::procs_file(path)?;
            // SAFETY: the hook runs in the forked child before exec and
            // only makes raw system calls (open, write, close) on memory
            // it owns; it allocates nothing.
            unsafe {
                command.pre_exec(move || cgroup::join_in_child(&procs));
            }
        }
        Ok(())
    }

    /// Spawns `command` (made part of the scope by [`Scope::prepare`]) as
    /// the scope's leader: recorded for the next aurad, and left to tokio
    /// to reap. No orphan is reaped while a leader is being spawned, so a
    /// leader that exits at once is never mistaken for one.
    pub fn spawn(
        &self,
        command: &mut tokio::process::Command,
    ) -> std::io::Result<tokio::process::Child> {
        let _spawning = spawning();
        let child = command.spawn()?;
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            self.started(pid);
        }
        Ok(child)
    }

    fn started(&self, pid: i32) {
        let Some(stat) = procfs::stat(pid) else {
            return;
        };
        *self.0.leader.lock().unwrap_or_else(|e| e.into_inner()) = Some((pid, stat.start));
        if let Some(record) = &self.0.record
            && let Err(e) = records::write(record, &records::leader_line(pid, stat.start))
        {
            tracing::warn!(record = %record.display(), error = %e, "cannot record a tool process");
        }
    }

    /// Ends every process of the scope, once; returns how many there were
    /// besides the leader. Blocks for as long as they take to die (a few
    /// milliseconds; at most a couple of seconds).
    pub fn close(&self) -> usize {
        self.0.close()
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl Inner {
    fn close(&self) -> usize {
        if self.closed.swap(true, Ordering::SeqCst) {
            return 0;
        }
        let leader = *self.leader.lock().unwrap_or_else(|e| e.into_inner());
        let mut dying: Vec<(i32, u64)> = Vec::new();
        match &self.cgroup {
            Some(path) => {
                dying.extend(
                    cgroup::members_beneath(path)
                        .into_iter()
                        .filter_map(|pid| Some((pid, procfs::stat(pid)?.start))),
                );
                if let Err(e) = cgroup::kill(path, GRACE) {
                    tracing::warn!(error = %e, "a tool call's processes outlived its end");
                }
            }
            None => dying = procfs::kill_marked(SCOPE_ENV, |m| m == self.marker),
        }
        let mut spared = leaders();
        spared.extend(leader);
        procfs::await_gone(&dying, &spared, instance().subreaper, GRACE);
        if let Some(path) = &self.cgroup
            && let Err(e) = cgroup::remove(path)
        {
            tracing::debug!(cgroup = %path.display(), error = %e, "cannot remove a tool call's cgroup yet");
        }
        if instance().subreaper {
            let _spawning = spawning();
            spared.extend(leaders());
            procfs::reap_orphans(&spared);
        }
        if let Some(record) = &self.record {
            let _ = std::fs::remove_file(record);
        }
        dying.iter().filter(|d| Some(**d) != leader).count()
    }
}

/// Closes every open scope (the forced exit of a second signal, the end
/// of `aurad serve` and `aurad run`); returns how many processes ended.
pub fn kill_all() -> usize {
    let open: Vec<Arc<Inner>> = open_scopes().iter().filter_map(Weak::upgrade).collect();
    open.iter().map(|scope| scope.close()).sum()
}

/// The clean end of this aurad process: every scope closed, its cgroup
/// and records removed.
pub fn finish() {
    kill_all();
    let Some(instance) = INSTANCE.get() else {
        return;
    };
    if let Some(path) = &instance.cgroup {
        let _ = cgroup::kill(path, GRACE);
        if let Err(e) = cgroup::remove(path) {
            tracing::warn!(cgroup = %path.display(), error = %e, "cannot remove aurad's cgroup");
        }
    }
    if let Some(folder) = &instance.records {
        let _ = std::fs::remove_dir_all(folder);
    }
}

#[cfg(test)]
mod tests;
