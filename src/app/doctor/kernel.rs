//! The doctor's checks of the kernel and the process limits: Landlock (and
//! which `sandbox:` modes work), cgroup v2 (tool processes scoped in
//! cgroups), inotify (what `aurad serve` watches) and the open-file limit.
//! `/proc` and `/sys` are read beneath [`Machine::system`]; the judgements
//! are pure functions of what was read, tested on their own. Depends on
//! `config`, `tools` (the sandbox and the scope), `watcher` (what is
//! watched) and `api` (the connection figures).

use std::path::{Path, PathBuf};

use super::{Check, CheckName, Machine};
use crate::config::Project;
use crate::config::mcp::McpTransport;
use crate::tools::sandbox::{self, LandlockSupport, REQUIRED_LANDLOCK_ABI, SandboxMode};
use crate::tools::scope::{CgroupProbe, probe_cgroup};

/// Landlock's ABI, the `sandbox:` modes that work here, and every agent
/// or MCP server that asks for one that does not.
pub fn landlock(project: &Project) -> Check {
    let support = sandbox::landlock_support();
    let working: Vec<&str> = SandboxMode::ALL
        .into_iter()
        .filter(|m| sandbox::check_available(*m).is_ok())
        .map(SandboxMode::as_str)
        .collect();
    let kernel = match support {
        LandlockSupport::Abi(abi) => format!("Landlock ABI {abi}"),
        LandlockSupport::NotEnabled => "Landlock built in but not enabled".to_string(),
        LandlockSupport::NotImplemented => "no Landlock in this kernel".to_string(),
    };
    let mut askers: Vec<String> = Vec::new();
    for agent in project.agents.values() {
        if sandbox::check_available(agent.sandbox).is_err() {
            askers.push(format!(
                "{} asks for `sandbox: {}`",
                agent.path.display(),
                agent.sandbox
            ));
        }
    }
    for server in &project.mcp_servers {
        if let McpTransport::Stdio { sandbox: mode, .. } = &server.transport
            && sandbox::check_available(*mode).is_err()
        {
            askers.push(format!(
                "MCP server `{}` ({}) asks for `sandbox: {mode}`",
                server.name,
                server.source.display()
            ));
        }
    }
    let finding = format!(
        "{kernel}; sandbox modes that work here: {}",
        working.join(", ")
    );
    if askers.is_empty() {
        return Check::ok(CheckName::Landlock, finding);
    }
    let fix = match support {
        LandlockSupport::NotEnabled => "enable Landlock at boot (add `landlock` to the kernel's lsm= list, e.g. lsm=landlock,lockdown,yama,apparmor), or set `sandbox: none` there".to_string(),
        _ => format!(
            "run aurad on Linux 6.2 or later (Landlock ABI {REQUIRED_LANDLOCK_ABI}), or set `sandbox: none` there (its tools then run unconfined)"
        ),
    };
    Check::error(
        CheckName::Landlock,
        format!("{finding}; {}", askers.join("; ")),
        fix,
    )
}

/// Whether tool processes can be scoped in cgroups (cgroup v2, delegated
/// to aurad's user); without, they are tracked by a marker and the
/// subreaper.
pub fn cgroup(machine: &Machine) -> Check {
    let cgroup2 = machine.path("/sys/fs/cgroup/cgroup.controllers").is_file();
    judge_cgroup(cgroup2, &probe_cgroup(&machine.system))
}

/// What the limits are for tools in every case: aurad sets no cgroup
/// limit of its own.
const LIMITS: &str = "limits: the rlimits aurad inherits (it sets no cgroup limits)";

fn judge_cgroup(cgroup2: bool, probe: &CgroupProbe) -> Check {
    let fallback = "tool processes are tracked by an environment marker and the subreaper instead (one that clears its environment and detaches can outlive its call)";
    let delegate = "run aurad under systemd with Delegate=yes (the unit `aurad service` prints has it), or start it with `systemd-run --user -p Delegate=yes aurad serve`";
    match probe {
        CgroupProbe::Usable(own) => Check::ok(
            CheckName::Cgroup,
            format!(
                "cgroup v2, {} writable: each tool call gets a cgroup, killed whole at its end; {LIMITS}",
                own.display()
            ),
        ),
        CgroupProbe::NotWritable(own, why) => Check::warn(
            CheckName::Cgroup,
            format!(
                "cgroup v2, but no cgroup can be made beneath {} ({why}): {fallback}; {LIMITS}",
                own.display()
            ),
            delegate,
        ),
        CgroupProbe::NoCgroup2 if cgroup2 => Check::warn(
            CheckName::Cgroup,
            format!(
                "cgroup v2 is mounted but this process's cgroup was not found in it: {fallback}; {LIMITS}"
            ),
            delegate,
        ),
        CgroupProbe::NoCgroup2 => Check::warn(
            CheckName::Cgroup,
            format!("no cgroup v2 hierarchy at /sys/fs/cgroup: {fallback}; {LIMITS}"),
            "boot with the unified hierarchy (systemd.unified_cgroup_hierarchy=1), or accept the fallback",
        ),
    }
}

/// The inotify instances `aurad serve` opens at most: the configuration's
/// root and tree watches, and the `watch:` triggers' folder and root
/// watches.
const SERVE_INSTANCES: u64 = 4;

/// How many directories one count walks at most.
const MAX_DIRS: usize = 100_000;

/// inotify's per-user limits against the directories `aurad serve`
/// watches.
pub fn inotify(machine: &Machine, root: &Path, project: &Project) -> Check {
    let read = |name: &str| read_number(&machine.path(&format!("/proc/sys/fs/inotify/{name}")));
    judge_inotify(
        read("max_user_watches"),
        read("max_user_instances"),
        watched_dirs(root, project),
    )
}

/// A number alone in a `/proc` file.
pub fn read_number(path: &Path) -> Option<u64> {
    parse_number(&std::fs::read_to_string(path).ok()?)
}

/// The number a `/proc/sys` file holds (its text, a newline after it).
pub fn parse_number(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The directories `aurad serve` watches: the root, the configuration
/// trees (every directory beneath them) and their parents, and the
/// folders of the `watch:` triggers.
fn watched_dirs(root: &Path, project: &Project) -> usize {
    use crate::watcher::project::{NESTED_FILES, TREES};
    let mut count = 1;
    let mut parents: Vec<&str> = TREES
        .iter()
        .filter_map(|t| t.split_once('/').map(|(parent, _)| parent))
        .chain(NESTED_FILES.iter().map(|(dir, _)| *dir))
        .collect();
    parents.sort_unstable();
    parents.dedup();
    count += parents.iter().filter(|p| root.join(p).is_dir()).count();
    let mut trees: Vec<PathBuf> = TREES.iter().map(|t| root.join(t)).collect();
    for agent in project.agents.values() {
        if let Some(watch) = &agent.triggers.watch {
            trees.extend(watch.base_dirs().into_iter().map(|d| root.join(d)));
        }
    }
    trees.sort();
    trees.dedup();
    for tree in trees {
        count += count_dirs(&tree, MAX_DIRS.saturating_sub(count));
    }
    count
}

/// `dir` and the directories beneath it (symbolic links not followed), at
/// most `cap`.
fn count_dirs(dir: &Path, cap: usize) -> usize {
    let mut count = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        if count >= cap {
            break;
        }
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        count += 1;
        pending.extend(
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
    }
    count
}

fn judge_inotify(watches: Option<u64>, instances: Option<u64>, dirs: usize) -> Check {
    let (Some(watches), Some(instances)) = (watches, instances) else {
        return Check::skip(
            CheckName::Inotify,
            "cannot read /proc/sys/fs/inotify (not Linux?)",
        );
    };
    let dirs = dirs as u64;
    let finding = format!(
        "max_user_watches {watches}, max_user_instances {instances}; `aurad serve` watches {dirs} directories with up to {SERVE_INSTANCES} instances"
    );
    let watches_fix = format!(
        "sudo sysctl fs.inotify.max_user_watches={} (and the same line in /etc/sysctl.d/90-aurad.conf to keep it)",
        (dirs * 4).max(524_288)
    );
    let instances_fix = "sudo sysctl fs.inotify.max_user_instances=1024 (and the same line in /etc/sysctl.d/90-aurad.conf to keep it)";
    if watches < dirs {
        return Check::error(
            CheckName::Inotify,
            format!("{finding}: too few watches, changes to the files will not reload"),
            watches_fix,
        );
    }
    if instances < SERVE_INSTANCES {
        return Check::error(
            CheckName::Inotify,
            format!("{finding}: too few instances"),
            instances_fix,
        );
    }
    // The limits are per user: editors and other daemons share them.
    if watches < dirs * 2 {
        return Check::warn(
            CheckName::Inotify,
            format!("{finding}: little room left for the user's other programs"),
            watches_fix,
        );
    }
    if instances < SERVE_INSTANCES * 4 {
        return Check::warn(
            CheckName::Inotify,
            format!("{finding}: little room left for the user's other programs"),
            instances_fix,
        );
    }
    Check::ok(CheckName::Inotify, finding)
}

/// The open-file limit `aurad serve` raises its soft limit to.
pub fn open_files() -> Check {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Check::skip(
            CheckName::OpenFiles,
            format!(
                "cannot read RLIMIT_NOFILE: {}",
                std::io::Error::last_os_error()
            ),
        );
    }
    judge_open_files(limit.rlim_cur, limit.rlim_max)
}

fn judge_open_files(soft: u64, hard: u64) -> Check {
    use crate::api::server::{MAX_CONNECTIONS, RESERVED_FILES};
    let wanted = MAX_CONNECTIONS as u64 + RESERVED_FILES;
    let shown = |n: u64| match n {
        libc::RLIM_INFINITY => "unlimited".to_string(),
        n => n.to_string(),
    };
    let finding = format!(
        "soft {}, hard {}; `aurad serve` raises the soft limit to the hard one",
        shown(soft),
        shown(hard)
    );
    if hard < wanted {
        let connections = hard.saturating_sub(RESERVED_FILES).max(16);
        return Check::warn(
            CheckName::OpenFiles,
            format!(
                "{finding}: the API then takes at most {connections} connections (of {MAX_CONNECTIONS})"
            ),
            "LimitNOFILE=65536 in the service's unit (as `aurad service` writes it), or raise the hard limit for the user (`nofile` in /etc/security/limits.conf) and `ulimit -n 65536` before `aurad serve`",
        );
    }
    Check::ok(CheckName::OpenFiles, finding)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test")]

    use std::path::{Path, PathBuf};

    use super::*;
    use crate::app::doctor::Status;

    #[test]
    fn proc_numbers_are_read_with_their_newline() {
        assert_eq!(parse_number("8192\n"), Some(8192));
        assert_eq!(parse_number(" 128 "), Some(128));
        assert_eq!(parse_number("lots\n"), None);
        assert_eq!(parse_number(""), None);
    }

    /// A fake `/proc` holding the two inotify limits.
    fn fake_proc(watches: &str, instances: &str) -> tempfile::TempDir {
        let system = tempfile::tempdir().unwrap();
        let dir = system.path().join("proc/sys/fs/inotify");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("max_user_watches"), watches).unwrap();
        std::fs::write(dir.join("max_user_instances"), instances).unwrap();
        system
    }

    fn project(root: &Path) -> crate::config::Project {
        crate::config::load(root, &|_| None).project
    }

    #[test]
    fn inotify_limits_from_a_fake_proc_against_the_project_directories() {
        let root = tempfile::tempdir().unwrap();
        for dir in ["agents/a/b", "skills/s", ".claude/skills/x"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        // The root, .claude, agents, agents/a, agents/a/b, skills,
        // skills/s, .claude/skills, .claude/skills/x.
        assert_eq!(watched_dirs(root.path(), &project(root.path())), 9);
        let check = |watches: &str, instances: &str| {
            let system = fake_proc(watches, instances);
            let machine = Machine {
                system: PathBuf::from(system.path()),
            };
            inotify(&machine, root.path(), &project(root.path()))
        };
        let fine = check("524288\n", "128\n");
        assert_eq!(fine.status, Status::Ok, "{fine:?}");
        assert!(fine.finding.contains("max_user_watches 524288"), "{fine:?}");
        assert!(fine.finding.contains("watches 9 directories"), "{fine:?}");
        let short = check("5\n", "128\n");
        assert_eq!(short.status, Status::Error, "{short:?}");
        assert!(
            short
                .fix
                .unwrap()
                .contains("sysctl fs.inotify.max_user_watches=")
        );
        let tight = check("12\n", "128\n");
        assert_eq!(tight.status, Status::Warn, "{tight:?}");
        let few = check("524288\n", "2\n");
        assert_eq!(few.status, Status::Error, "{few:?}");
        assert!(few.fix.unwrap().contains("max_user_instances"));
        let system = tempfile::tempdir().unwrap();
        let machine = Machine {
            system: system.path().to_path_buf(),
        };
        assert_eq!(
            inotify(&machine, root.path(), &project(root.path())).status,
            Status::Skip
        );
    }

    #[test]
    fn a_fake_sys_without_cgroup2_is_a_warning_with_the_fix() {
        let system = tempfile::tempdir().unwrap();
        let machine = Machine {
            system: system.path().to_path_buf(),
        };
        let check = cgroup(&machine);
        assert_eq!(check.status, Status::Warn, "{check:?}");
        assert!(check.finding.contains("no cgroup v2"), "{check:?}");
        assert!(check.finding.contains("rlimits"), "{check:?}");
        assert!(
            check
                .fix
                .unwrap()
                .contains("systemd.unified_cgroup_hierarchy=1")
        );
    }

    #[test]
    fn a_fake_sys_with_a_writable_cgroup_is_usable() {
        let system = tempfile::tempdir().unwrap();
        let mount = system.path().join("sys/fs/cgroup");
        std::fs::create_dir_all(mount.join("user.slice/me")).unwrap();
        for file in [
            "cgroup.procs",
            "cgroup.subtree_control",
            "cgroup.controllers",
        ] {
            std::fs::write(mount.join(file), "").unwrap();
        }
        std::fs::create_dir_all(system.path().join("proc/self")).unwrap();
        std::fs::write(
            system.path().join("proc/self/cgroup"),
            "0::/user.slice/me\n",
        )
        .unwrap();
        let machine = Machine {
            system: system.path().to_path_buf(),
        };
        let check = cgroup(&machine);
        assert_eq!(check.status, Status::Ok, "{check:?}");
        assert!(
            check.finding.contains("user.slice/me writable"),
            "{check:?}"
        );
        // The probe's cgroup is gone again.
        assert_eq!(
            std::fs::read_dir(mount.join("user.slice/me"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn open_files_below_what_the_api_wants_is_a_warning() {
        assert_eq!(judge_open_files(1024, 524_288).status, Status::Ok);
        let low = judge_open_files(1024, 1024);
        assert_eq!(low.status, Status::Warn, "{low:?}");
        assert!(low.finding.contains("at most 768 connections"), "{low:?}");
        assert!(low.fix.unwrap().contains("LimitNOFILE="));
        let unlimited = judge_open_files(libc::RLIM_INFINITY, libc::RLIM_INFINITY);
        assert!(
            unlimited.finding.contains("soft unlimited"),
            "{unlimited:?}"
        );
    }
}
