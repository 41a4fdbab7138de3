//! cgroup v2 for [`super`]: finding a writable cgroup2 hierarchy and this
//! process's cgroup in it (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified`
//! on hybrid hosts), making child cgroups beneath it, the hook that moves a
//! forked child into one before it executes anything, and killing a cgroup
//! with everything beneath it (`cgroup.kill`, Linux 5.14; else freezing it
//! and SIGKILLing each member until none is left).
//! Depends on std and libc only.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where a cgroup2 hierarchy may be mounted.
const MOUNTS: [&str; 2] = ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"];

/// This process's cgroup in a cgroup2 hierarchy we can write beneath, if
/// there is one: `base/name` is created (and must not exist) as the test.
pub fn create_beneath_own(name: &str) -> Option<PathBuf> {
    let own = own_cgroup()?;
    let path = own.join(name);
    match std::fs::create_dir(&path) {
        Ok(()) => Some(path),
        Err(e) => {
            tracing::debug!(path = %path.display(), error = %e, "no cgroup for tool processes; using the subreaper");
            None
        }
    }
}

/// This process's cgroup directory in the cgroup2 hierarchy.
pub fn own_cgroup() -> Option<PathBuf> {
    own_cgroup_under(Path::new("/"))
}

/// [`own_cgroup`] with `/sys` and `/proc` looked for beneath `system`
/// (`/`, or a fake tree in a test).
pub fn own_cgroup_under(system: &Path) -> Option<PathBuf> {
    let mount = MOUNTS
        .iter()
        .map(|m| system.join(m.trim_start_matches('/')))
        .find(|m| m.join("cgroup.procs").is_file() && m.join("cgroup.subtree_control").is_file())?;
    let own = std::fs::read_to_string(system.join("proc/self/cgroup")).ok()?;
    let relative = own.lines().find_map(|line| line.strip_prefix("0::"))?;
    let relative = relative.trim_start_matches('/');
    let path = match relative {
        "" => mount,
        _ => mount.join(relative),
    };
    path.is_dir().then_some(path)
}

/// A child cgroup `name` of `parent`, made now.
pub fn create(parent: &Path, name: &str) -> io::Result<PathBuf> {
    let path = parent.join(name);
    std::fs::create_dir(&path)?;
    Ok(path)
}

/// The path of `cgroup`'s `cgroup.procs`, for [`join_in_child`].
pub fn procs_file(cgroup: &Path) -> io::Result<CString> {
    CString::new(cgroup.join("cgroup.procs").as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

/// Moves the calling process into the cgroup whose `cgroup.procs` is
/// `procs`. Made of raw system calls only, for a forked child before exec.
pub fn join_in_child(procs: &CString) -> io::Result<()> {
    // SAFETY: open/write/close on a NUL-terminated path we own and a
    // static byte; async-signal-safe, nothing allocated.
    unsafe {
        let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, b"0".as_ptr().cast(), 1);
        let error = io::Error::last_os_error();
        libc::close(fd);
        if written != 1 {
            return Err(error);
        }
    }
    Ok(())
}

/// The processes in `cgroup` itself (not beneath it).
pub fn members(cgroup: &Path) -> Vec<i32> {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// Every process in `cgroup` and beneath it.
pub fn members_beneath(cgroup: &Path) -> Vec<i32> {
    let mut all = members(cgroup);
    for child in children(cgroup) {
        all.extend(members_beneath(&child));
    }
    all
}

/// The child cgroups of `cgroup`.
pub fn children(cgroup: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(cgroup)
        .map(|dir| {
            dir.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a process is still in `cgroup` or beneath it.
fn populated(cgroup: &Path) -> bool {
    match std::fs::read_to_string(cgroup.join("cgroup.events")) {
        Ok(events) => events.lines().any(|l| l == "populated 1"),
        Err(_) => !members_beneath(cgroup).is_empty(),
    }
}

/// SIGKILLs every process in `cgroup` and beneath it and waits (until
/// `within` passes) until none is left. `Err` if some are left.
pub fn kill(cgroup: &Path, within: Duration) -> io::Result<()> {
    let deadline = Instant::now() + within;
    let killed = std::fs::write(cgroup.join("cgroup.kill"), "1");
    if killed.is_err() {
        // Before Linux 5.14: frozen members cannot fork while each is
        // killed (SIGKILL ends a frozen process too).
        let _ = std::fs::write(cgroup.join("cgroup.freeze"), "1");
    }
    loop {
        if !populated(cgroup) {
            return Ok(());
        }
        if killed.is_err() {
            for pid in members_beneath(cgroup) {
                // SAFETY: kill only sends a signal, to a member of a
                // cgroup aurad made for its own tool processes.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if Instant::now() >= deadline {
            return Err(io::Error::other(format!(
                "processes are left in {}",
                cgroup.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Removes `cgroup` and the cgroups beneath it (each must be empty).
pub fn remove(cgroup: &Path) -> io::Result<()> {
    for child in children(cgroup) {
        remove(&child)?;
    }
    match std::fs::remove_dir(cgroup) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
