//! The confinement of the processes aurad starts for an agent's tools
//! (`bash`, `tools.d` commands), applied in the child between fork and exec
//! so the daemon itself is never restricted.
//!
//! Every tool process (and stdio MCP server, through [`Confinement`]'s
//! default) is without `CAP_SYS_PTRACE`, `CAP_SYS_ADMIN` and
//! `CAP_PERFMON` (bounding, inheritable, ambient, effective and permitted
//! sets): with the daemon non-dumpable (see `main.rs`), even a root tool
//! process can then no longer read `/proc/<daemon pid>/environ` or the
//! daemon's memory. The `aurad` binary drops them from itself at start,
//! before any thread exists ([`drop_memory_reading_caps`]), so its children
//! are born without them and need no hook between fork and exec for it
//! (std starts a child without hooks with `posix_spawn`, a `vfork`-style
//! clone; the hook of `tools::scope` that joins a call's cgroup, installed
//! before this one, makes it a `fork` where cgroups are used). A process that still holds
//! them (the library used by another program, the tests) drops them in each
//! child instead.
//!
//! An agent's `sandbox:` ([`SandboxMode`]) adds a Linux Landlock domain that
//! handles every write right: `read-only-project` grants them beneath every
//! path outside the project (the siblings of each directory on the way from
//! `/` to the project root, symbolic links excepted, and a few devices), and
//! `workdir` only beneath the run's scratch directory
//! `<root>/.aurad/work/<run id>` (and the same devices). No mode may make
//! device nodes. Where the kernel has Landlock's scopes (Linux 6.12), a
//! sandboxed process cannot signal a process outside its domain (`kill
//! -STOP` of the daemon or an MCP server) nor reach their abstract Unix
//! sockets; Landlock also keeps it from ptrace-reading them (their
//! `/proc/PID/environ`) and from mounting. Reading is restricted in one place only: the files
//! beneath the folder [`Sandbox::hiding`] names (aurad's private state: a
//! running daemon's API credential) cannot be read. The ruleset is built
//! once per run in the daemon and only enforced in the child
//! (`landlock_restrict_self` on its file descriptor);
//! when the kernel cannot enforce it, the call is refused, never run
//! unconfined. Depends on `types`, `landlock` and `libc`.

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

pub use crate::types::SandboxMode;

mod mounts;
mod namespace;

use namespace::ReadOnlyProject;

/// The environment variable naming a `workdir` run's scratch directory.
pub const WORKDIR_ENV: &str = "AURAD_WORKDIR";

/// The Landlock ABI whose write rights the sandbox needs: ABI 3 (Linux
/// 6.2) is the first that also controls `truncate(2)`, so no file of the
/// project can be emptied either.
const LANDLOCK_ABI: landlock::ABI = landlock::ABI::V3;

/// Devices a sandboxed process may still write: output thrown away,
/// terminals, shared memory. Block devices (the disk under the project)
/// are not among them.
const WRITABLE_DEVICES: [&str; 7] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// The sandbox of one run's tool processes: the agent's mode, the project
/// root, the scratch directory of `workdir`, and the Landlock ruleset once
/// built.
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    mode: SandboxMode,
    root: PathBuf,
    scratch: Option<PathBuf>,
    ruleset: Arc<OnceLock<Result<Arc<OwnedFd>, String>>>,
    /// Variables of aurad's environment its processes get beside the
    /// allow-listed ones (the agent's `pass_env`).
    pass_env: Arc<[String]>,
    /// A folder whose files its processes can neither read nor write.
    hidden: Option<PathBuf>,
    /// Files outside the project its processes cannot write.
    protected: Arc<[PathBuf]>,
}

impl Sandbox {
    /// No Landlock domain (tool processes still lose the capabilities
    /// that read other processes' memory).
    pub fn none() -> Self {
        Sandbox::default()
    }

    /// The sandbox of run `run_id` of an agent with `mode` in the project
    /// at `root`.
    pub fn for_run(mode: SandboxMode, root: &Path, run_id: &str) -> Self {
        let scratch =
            (mode == SandboxMode::Workdir).then(|| root.join(".aurad").join("work").join(run_id));
        Sandbox {
            mode,
            root: root.to_path_buf(),
            scratch,
            ruleset: Arc::default(),
            pass_env: Arc::from([]),
            hidden: None,
            protected: Arc::from([]),
        }
    }

    /// The same sandbox, whose processes cannot write `files` wherever they
    /// are (nor create, remove or rename anything beside them): what the
    /// daemon runs or reads as configuration outside the project (a
    /// plugin's or MCP server's script) and its database. `workdir` writes
    /// only its scratch directory anyway; this matters for
    /// `read-only-project`, which grants the rest of the file system.
    pub fn protecting(mut self, files: &[PathBuf]) -> Self {
        self.protected = files.into();
        self
    }

    /// The same sandbox, whose processes cannot read the files beneath
    /// `dir` (aurad's private state: `config::private`). Only a Landlock
    /// sandbox can keep it: `sandbox: none` has the user's power.
    pub fn hiding(mut self, dir: &Path) -> Self {
        self.hidden = Some(dir.to_path_buf());
        self
    }

    /// The same sandbox, whose processes also get the variables `names` of
    /// aurad's environment (the agent's `pass_env`).
    pub fn passing(mut self, names: &[String]) -> Self {
        self.pass_env = names.into();
        self
    }

    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    /// The writable scratch directory of a `workdir` run.
    pub fn scratch(&self) -> Option<&Path> {
        self.scratch.as_deref()
    }

    /// What a child process needs: the environment to add and the ruleset
    /// to enforce. Builds the ruleset on first use (and the scratch
    /// directory); an error says why the sandbox cannot be had, and the
    /// process must then not be started.
    pub fn confinement(&self) -> Result<Confinement, String> {
        let mut env: Vec<(OsString, OsString)> = self
            .pass_env
            .iter()
            .filter_map(|name| Some((OsString::from(name), std::env::var_os(name)?)))
            .collect();
        if self.mode == SandboxMode::None {
            return Ok(Confinement {
                ruleset: None,
                env,
                read_only: None,
            });
        }
        if let Some(scratch) = &self.scratch {
            std::fs::create_dir_all(scratch).map_err(|e| {
                format!(
                    "cannot create the sandbox's scratch directory {}: {e}",
                    scratch.display()
                )
            })?;
            env.push((
                OsString::from(WORKDIR_ENV),
                scratch.clone().into_os_string(),
            ));
            env.push((OsString::from("TMPDIR"), scratch.clone().into_os_string()));
        }
        let ruleset = self
            .ruleset
            .get_or_init(|| self.build_ruleset().map(Arc::new))
            .clone()?;
        Ok(Confinement {
            ruleset: Some(ruleset),
            env,
            read_only: Some((resolved(&self.root)?, self.scratch.clone())),
        })
    }

    /// The paths that stay writable and, with a hidden folder, those that
    /// stay readable; then a Landlock ruleset granting write rights (and
    /// reading files) beneath them only.
    fn build_ruleset(&self) -> Result<OwnedFd, String> {
        let mut writable = match self.mode {
            SandboxMode::None => return Err("no sandbox asked for".into()),
            SandboxMode::ReadOnlyProject => {
                // The project, aurad's private state (a forged record there
                // would be acted on by the next aurad) and the protected
                // files.
                let mut excluded = vec![self.root.clone()];
                excluded.extend(self.hidden.iter().cloned());
                excluded.extend(self.protected.iter().cloned());
                all_except(&excluded, true)?
            }
            SandboxMode::Workdir => self.scratch.iter().cloned().collect(),
        };
        writable.extend(WRITABLE_DEVICES.iter().map(PathBuf::from));
        let readable = match &self.hidden {
            Some(hidden) => Some(all_except(std::slice::from_ref(hidden), false)?),
            None => None,
        };
        landlock_ruleset(self.mode, &writable, readable.as_deref())
    }
}

/// The Landlock ABI the sandbox's modes need ([`LANDLOCK_ABI`]).
pub const REQUIRED_LANDLOCK_ABI: i32 = LANDLOCK_ABI as i32;

/// What the running kernel offers of Landlock, for `aurad doctor` to
/// report. The sandbox never decides by it: it asks the kernel for what it
/// needs ([`check_available`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockSupport {
    /// Landlock is on; its ABI version.
    Abi(i32),
    /// Built into the kernel but not enabled at boot (`EOPNOTSUPP`).
    NotEnabled,
    /// Not built into the kernel (`ENOSYS`).
    NotImplemented,
}

/// Asks the kernel which Landlock ABI it has
/// (`landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`).
pub fn landlock_support() -> LandlockSupport {
    /// `LANDLOCK_CREATE_RULESET_VERSION` (linux/landlock.h).
    const VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute, size 0 and the version flag the call
    // reads nothing and only returns a number.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            VERSION,
        )
    };
    if abi > 0 {
        return LandlockSupport::Abi(i32::try_from(abi).unwrap_or(i32::MAX));
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => LandlockSupport::NotEnabled,
        _ => LandlockSupport::NotImplemented,
    }
}

/// Checks that this system can enforce `mode`; the error says what to do.
pub fn check_available(mode: SandboxMode) -> Result<(), String> {
    if mode == SandboxMode::None {
        return Ok(());
    }
    landlock_ruleset(mode, &[], Some(&[])).map(drop)
}

/// A ruleset handling every write right of [`LANDLOCK_ABI`], granting them
/// (but making device nodes) beneath `writable`, and, with `readable`,
/// handling the reading of files too, granted beneath `readable` (paths
/// that do not exist are left out). Refuses a kernel that cannot enforce
/// all of it.
fn landlock_ruleset(
    mode: SandboxMode,
    writable: &[PathBuf],
    readable: Option<&[PathBuf]>,
) -> Result<OwnedFd, String> {
    use landlock::{
        AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
        path_beneath_rules,
    };
    let unavailable = |e: &dyn std::fmt::Display| {
        format!(
            "`sandbox: {mode}` needs Linux Landlock ABI {} (Linux 6.2 or later, with Landlock \
             enabled) and this system cannot provide it ({e}); set `sandbox: none` to run this \
             agent's tools unconfined, or run aurad on such a kernel",
            LANDLOCK_ABI as i32
        )
    };
    let write = AccessFs::from_write(LANDLOCK_ABI);
    // Device nodes are never made: a root process could make one for the
    // disk under the project and write the project's files through it.
    let granted = write & !(AccessFs::MakeBlock | AccessFs::MakeChar);
    let handled = match readable {
        Some(_) => write | AccessFs::ReadFile,
        None => write,
    };
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(handled)
        .map_err(|e| unavailable(&e))?
        // Where the kernel has it (Landlock ABI 6, Linux 6.12): no signal
        // to a process outside the domain (the daemon, its MCP servers, the
        // person's shell) and no connection to their abstract sockets.
        .set_compatibility(CompatLevel::BestEffort)
        .scope(Scope::Signal | Scope::AbstractUnixSocket)
        .map_err(|e| unavailable(&e))?
        .create()
        .map_err(|e| unavailable(&e))?
        .add_rules(path_beneath_rules(writable, granted))
        .and_then(|r| {
            r.add_rules(path_beneath_rules(
                readable.unwrap_or_default(),
                AccessFs::ReadFile,
            ))
        })
        .map_err(|e| format!("cannot build the sandbox's rules: {e}"))?;
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| unavailable(&"no Landlock ruleset was created"))
}

/// Every path but the `excluded` ones and what is beneath them: the
/// entries of each directory from `/` down to each excluded path, except
/// those leading to (or being) one, symbolic links (which may point back
/// in) and, with `skip_dev`, `/dev` (whose devices are granted one by
/// one). An excluded path that does not exist yet is excluded as it will
/// be: its existing ancestors are listed.
fn all_except(excluded: &[PathBuf], skip_dev: bool) -> Result<Vec<PathBuf>, String> {
    let mut excluded: Vec<PathBuf> = excluded
        .iter()
        .map(|p| resolved(p))
        .collect::<Result<_, _>>()?;
    // The same files seen through another mount (a bind mount of the
    // project, or of a folder above it, elsewhere) are excluded too:
    // Landlock follows the path, so a grant on that mount's parent would
    // reach them.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let aliases: Vec<PathBuf> = excluded
        .iter()
        .flat_map(|path| mounts::aliases(&mounts, path))
        .collect();
    excluded.extend(aliases);
    // A path beneath another excluded one is excluded with it; listing it
    // would make that one an ancestor, whose other entries would be granted.
    let all = excluded.clone();
    excluded.retain(|path| {
        !all.iter()
            .any(|other| other != path && path.starts_with(other))
    });
    let mut ancestors: std::collections::BTreeSet<&Path> = std::collections::BTreeSet::new();
    for path in &excluded {
        ancestors.extend(path.ancestors().skip(1));
    }
    let mut granted = Vec::new();
    for dir in &ancestors {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            // Not there yet (the excluded path's own folders).
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(format!(
                    "cannot list {} for the sandbox: {e}",
                    dir.display()
                ));
            }
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_link = entry.file_type().is_ok_and(|t| t.is_symlink());
            let on_the_way = ancestors.contains(path.as_path()) || excluded.contains(&path);
            let skipped = on_the_way || is_link || skip_dev && path == Path::new("/dev");
            if !skipped {
                granted.push(path);
            }
        }
    }
    Ok(granted)
}

/// `path` with symbolic links resolved in the part of it that exists.
fn resolved(path: &Path) -> Result<PathBuf, String> {
    let mut missing = Vec::new();
    let mut existing = path;
    loop {
        match existing.canonicalize() {
            Ok(real) => {
                return Ok(missing.iter().rev().fold(real, |p, part| p.join(part)));
            }
            Err(_) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    missing.push(name.to_os_string());
                    existing = parent;
                }
                _ => {
                    return Err(format!("cannot resolve {} for the sandbox", path.display()));
                }
            },
        }
    }
}

/// What [`Sandbox::confinement`] prepared for one child process.
#[derive(Debug, Default)]
pub struct Confinement {
    ruleset: Option<Arc<OwnedFd>>,
    /// Added to the child's environment (`pass_env`, `AURAD_WORKDIR`,
    /// `TMPDIR`).
    pub env: Vec<(OsString, OsString)>,
    /// The project (canonical) to make read-only in the child, and the
    /// scratch directory that stays writable ([`namespace`]).
    read_only: Option<(PathBuf, Option<PathBuf>)>,
}

impl Confinement {
    /// Makes `command`'s child drop the capabilities that read other
    /// processes' memory and enter the Landlock domain (if any) just before
    /// it executes the program.
    pub fn install(self, command: &mut tokio::process::Command) {
        if self.ruleset.is_none() && !holds_memory_reading_caps() {
            // Nothing to do in the child: no hook, so no fork.
            return;
        }
        let ruleset = self.ruleset;
        let fd: Option<RawFd> = ruleset.as_ref().map(|f| f.as_raw_fd());
        let cwd = command.as_std().get_current_dir().map(Path::to_path_buf);
        let read_only = self.read_only.and_then(|(root, scratch)| {
            ReadOnlyProject::new(&root, scratch.as_deref(), cwd.as_deref())
        });
        // SAFETY: the hook runs in the forked child before exec; it only
        // makes raw system calls (prctl, capget/capset, unshare, mount,
        // landlock, writes to /proc files), which are async-signal-safe,
        // and allocates nothing. `ruleset` keeps the descriptor open in the
        // parent until the command is dropped.
        unsafe {
            command.pre_exec(move || {
                let _keep_open = &ruleset;
                in_child(fd, read_only.as_ref())
            });
        }
    }
}

/// Runs in the child between fork and exec.
fn in_child(ruleset: Option<RawFd>, read_only: Option<&ReadOnlyProject>) -> io::Result<()> {
    drop_memory_reading_caps();
    // Before Landlock, which forbids mounting.
    if let Some(read_only) = read_only {
        read_only.enter()?;
    }
    if let Some(fd) = ruleset {
        // SAFETY: plain system calls on integers; no memory is shared.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// The capabilities that let a process read another one's memory and
/// environment although it is non-dumpable (linux/capability.h):
/// `CAP_SYS_PTRACE`, and, as measured on Linux 6.18, `CAP_SYS_ADMIN` and
/// `CAP_PERFMON` each alone (the kernel's `perfmon_capable()`).
const MEMORY_READING_CAPS: [u32; 3] = [19, 21, 38];

/// `struct __user_cap_header_struct` with `_LINUX_CAPABILITY_VERSION_3`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`; version 3 takes two of them (bits
/// 0-31, then 32-63).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `CAP_SETPCAP`: needed to drop a capability from the bounding set.
const CAP_SETPCAP: u32 = 8;

/// `_LINUX_CAPABILITY_VERSION_3`.
const CAP_VERSION_3: u32 = 0x2008_0522;

/// This thread's effective, permitted and inheritable sets (`capget`), or
/// `None` if the kernel refuses.
fn capability_sets() -> Option<[CapData; 2]> {
    let mut header = CapHeader {
        version: CAP_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget fills the local structs, which outlive the call.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    (rc == 0).then_some(data)
}

/// Whether `cap` is in `set` (one of [`CapData`]'s fields) of `data`.
fn has(data: &[CapData; 2], cap: u32, set: fn(&CapData) -> u32) -> bool {
    set(&data[(cap / 32) as usize]) & (1u32 << (cap % 32)) != 0
}

/// Whether [`drop_memory_reading_caps`] would change anything for this
/// thread: one of [`MEMORY_READING_CAPS`] is in its effective, permitted,
/// inheritable or ambient set, or in its bounding set while it may drop it
/// from there (a process without `CAP_SETPCAP` cannot, in the child
/// either). False once `main` dropped them. Capabilities belong to threads,
/// so each thread asks the kernel until the answer is false, and then no
/// more: nothing in aurad raises a capability, and a dropped one cannot
/// come back to a thread that holds neither it nor the right to raise it
/// (seven system calls saved at each tool start).
pub fn holds_memory_reading_caps() -> bool {
    thread_local! {
        static WITHOUT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if WITHOUT.get() {
        return false;
    }
    let holds = memory_reading_caps_held();
    WITHOUT.set(!holds);
    holds
}

/// [`holds_memory_reading_caps`], as the kernel answers it now.
fn memory_reading_caps_held() -> bool {
    let Some(data) = capability_sets() else {
        return true;
    };
    let may_drop_bounding = has(&data, CAP_SETPCAP, |d| d.effective);
    MEMORY_READING_CAPS.iter().any(|&cap| {
        let c = libc::c_ulong::from(cap);
        // SAFETY: prctl reads with integer arguments only.
        let (bounding, ambient) = unsafe {
            (
                libc::prctl(libc::PR_CAPBSET_READ, c, 0, 0, 0) == 1,
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_IS_SET as libc::c_ulong,
                    c,
                    0,
                    0,
                ) == 1,
            )
        };
        has(&data, cap, |d| d.effective)
            || has(&data, cap, |d| d.permitted)
            || has(&data, cap, |d| d.inheritable)
            || ambient
            || (bounding && may_drop_bounding)
    })
}

/// Removes [`MEMORY_READING_CAPS`] from every capability set of this
/// thread, so it cannot read a non-dumpable process's memory or
/// environment, and the program it executes (even as root, even through a
/// set-uid program) does not get them back. Threads started afterwards
/// inherit the sets, so the `aurad` binary calls it before any exists.
/// Best effort and async-signal-safe (it also runs between fork and exec):
/// a process without them has nothing to drop.
pub fn drop_memory_reading_caps() {
    for cap in MEMORY_READING_CAPS {
        let cap = libc::c_ulong::from(cap);
        // SAFETY: prctl with integer arguments only.
        unsafe {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_LOWER as libc::c_ulong,
                cap,
                0,
                0,
            );
        }
    }
    if let Some(mut data) = capability_sets() {
        for cap in MEMORY_READING_CAPS {
            let half = &mut data[(cap / 32) as usize];
            let keep = !(1u32 << (cap % 32));
            half.effective &= keep;
            half.permitted &= keep;
            half.inheritable &= keep;
        }
        let mut header = CapHeader {
            version: CAP_VERSION_3,
            pid: 0,
        };
        // SAFETY: capset reads the local structs, which outlive the call.
        unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_but_the_excluded_skips_the_way_to_each_and_links() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("proj");
        std::fs::create_dir_all(root.join("agents")).unwrap();
        std::fs::create_dir(base.join("sibling")).unwrap();
        std::os::unix::fs::symlink(&root, base.join("link-in")).unwrap();
        let outside = all_except(std::slice::from_ref(&root), true).unwrap();
        assert!(outside.contains(&base.join("sibling")));
        assert!(!outside.iter().any(|p| root.starts_with(p)), "{outside:?}");
        assert!(!outside.contains(&base.join("link-in")));
        assert!(!outside.contains(&PathBuf::from("/dev")));
        assert!(outside.contains(&PathBuf::from("/usr")) || !Path::new("/usr").exists());
        // Two excluded paths, one not there yet: the way to each is left
        // out, the rest of their folders granted.
        let private = base.join("state/aurad/abc");
        std::fs::create_dir_all(base.join("state/other")).unwrap();
        let both = all_except(&[root.clone(), private.clone()], false).unwrap();
        assert!(both.contains(&base.join("state/other")), "{both:?}");
        assert!(both.contains(&base.join("sibling")));
        assert!(
            !both
                .iter()
                .any(|p| private.starts_with(p) || root.starts_with(p)),
            "{both:?}"
        );
        assert!(both.contains(&PathBuf::from("/dev")));
    }

    #[test]
    fn a_thread_without_the_memory_reading_caps_needs_no_hook() {
        std::thread::spawn(|| {
            let data = capability_sets().unwrap();
            if has(&data, CAP_SETPCAP, |d| d.effective) {
                // Root: the bounding set holds them until dropped.
                assert!(holds_memory_reading_caps());
            }
            drop_memory_reading_caps();
            assert!(!holds_memory_reading_caps());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn none_needs_nothing_and_workdir_gets_its_scratch_dir() {
        assert!(Sandbox::none().confinement().unwrap().ruleset.is_none());
        let dir = tempfile::tempdir().unwrap();
        let sandbox = Sandbox::for_run(SandboxMode::Workdir, dir.path(), "run-1");
        let scratch = dir.path().join(".aurad/work/run-1");
        assert_eq!(sandbox.scratch(), Some(scratch.as_path()));
        let Ok(confinement) = sandbox.confinement() else {
            // A kernel without Landlock: the refusal is tested elsewhere.
            return;
        };
        assert!(scratch.is_dir());
        assert!(confinement.ruleset.is_some());
        assert!(
            confinement
                .env
                .contains(&(WORKDIR_ENV.into(), scratch.into_os_string()))
        );
    }
}
