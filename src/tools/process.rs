//! Running one program in a process group of its own, for the tools that run
//! programs (`bash`, `tools.d` command plugins). The program gets optional
//! stdin bytes, a working directory and extra environment; stdout and stderr
//! are drained concurrently into bounded buffers (a chatty program can
//! neither block on a full pipe nor fill memory). When the direct child
//! exits, times out or the run is cancelled, the whole group is killed with
//! SIGKILL, then the call's [`Scope`] is closed: every process the call
//! started that left the group (`setsid`, a double fork) is killed too, so
//! none can outlive the call or keep it waiting on its open pipes; a drop
//! guard and the scope's own drop do the same if the call's future is
//! dropped. Every live group is also known to a process-wide registry
//! ([`kill_every_group`]), so a forced exit (a second SIGTERM) can kill
//! them all, and every open scope, without waiting for anything. The child
//! is confined by the call's [`Sandbox`] before it executes the program,
//! which is found on `PATH` by [`program_path`].
//! Depends on tokio, tokio-util, libc, `tools::sandbox`, `tools::scope`
//! and `tools::program_path`.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::program_path;
use super::sandbox::Sandbox;
use super::scope::{self, Scope};

/// How long the pipes may stay open once the group was killed (a process
/// that left the group can hold them); then reading stops.
const PIPE_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for the killed direct child to be reaped.
const REAP_GRACE: Duration = Duration::from_secs(5);

/// Which bytes of a stream to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The first N bytes (the rest is read and thrown away).
    Head(usize),
    /// The last N bytes (for error tails).
    Tail(usize),
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// The program: a path, or a bare name looked up in `PATH`.
    pub program: OsString,
    pub args: Vec<OsString>,
    /// The working directory.
    pub cwd: PathBuf,
    /// Added to (or overriding) the environment it starts with
    /// ([`base_environment`] and what its sandbox passes on).
    pub env: Vec<(OsString, OsString)>,
    /// Written to the program's stdin, which is then closed. `None`: stdin is
    /// `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    pub keep_stdout: Keep,
    pub keep_stderr: Keep,
    /// The program's whole group is killed after this long.
    pub timeout: Duration,
    /// Cancelling it kills the group at once.
    pub cancel: CancellationToken,
    /// The confinement of the child (the agent's `sandbox:`).
    pub sandbox: Sandbox,
}

impl ProcessSpec {
    /// `program` in `cwd` with no arguments, no stdin, 64 KiB kept of each
    /// stream, a 60 s timeout and a token nobody cancels.
    pub fn new(program: impl Into<OsString>, cwd: impl Into<PathBuf>) -> Self {
        ProcessSpec {
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.into(),
            env: Vec::new(),
            stdin: None,
            keep_stdout: Keep::Head(64 * 1024),
            keep_stderr: Keep::Head(64 * 1024),
            timeout: Duration::from_secs(60),
            cancel: CancellationToken::new(),
            sandbox: Sandbox::none(),
        }
    }
}

/// What was read from one pipe: the bytes kept (see [`Keep`]) and how many
/// there were in all.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Captured {
    pub kept: Vec<u8>,
    pub total: usize,
}

impl Captured {
    /// Whether bytes were thrown away.
    pub fn was_cut(&self) -> bool {
        self.total > self.kept.len()
    }
}

/// How the program ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The direct child exited (or was killed by a signal from elsewhere).
    Exited(ExitStatus),
    /// The timeout passed; the group was killed.
    TimedOut,
    /// The cancellation token fired; the group was killed.
    Cancelled,
}

/// The result of [`run`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessOutput {
    pub ended: Ended,
    pub stdout: Captured,
    pub stderr: Captured,
}

impl ProcessOutput {
    /// The exit status, when the child exited by itself.
    pub fn status(&self) -> Option<ExitStatus> {
        match self.ended {
            Ended::Exited(status) => Some(status),
            _ => None,
        }
    }

    /// The exit code, when the child exited normally.
    pub fn code(&self) -> Option<i32> {
        self.status().and_then(|s| s.code())
    }

    /// The signal that killed the child, when one did.
    pub fn signal(&self) -> Option<i32> {
        self.status().and_then(|s| s.signal())
    }

    /// Exited with code 0.
    pub fn success(&self) -> bool {
        self.status().is_some_and(|s| s.success())
    }
}

/// Why [`run`] could not run the program to its end.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The program could not be started (not found, not executable, ...).
    #[error("{0}")]
    Spawn(std::io::Error),
    /// Waiting for the program failed.
    #[error("could not wait for the program: {0}")]
    Wait(std::io::Error),
    /// The sandbox the program must run in cannot be had; it was not
    /// started.
    #[error("{0}; the program was not started")]
    Sandbox(String),
}

/// The variables of aurad's own environment that every program it starts
/// for a tool or as an MCP server inherits (when set), with every `LC_*`:
/// what a program needs to find other programs and to run in the user's
/// locale, zone and terminal, and nothing that could be a credential.
/// Anything else a program gets by name: a plugin's or an MCP server's
/// `env`, an agent's `pass_env`. An allow-list, because a list of
/// secret-looking names to remove let `DATABASE_URL`, `SENTRY_DSN`,
/// `MYSQL_PWD` and the like through.
pub const INHERITED: [&str; 10] = [
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR",
];

/// [`INHERITED`] and `LC_*` as they are in aurad's environment, read at the
/// first call and remembered: aurad never changes its own environment, and
/// reading it copies every variable (about 20 µs; BENCHMARKS.md).
pub fn base_environment() -> &'static [(OsString, OsString)] {
    static BASE: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();
    BASE.get_or_init(|| {
        std::env::vars_os()
            .filter(|(name, _)| {
                let name = name.to_string_lossy();
                INHERITED.contains(&name.as_ref()) || name.starts_with("LC_")
            })
            .collect()
    })
}

/// The variables of `names` that look like secrets (API keys, tokens,
/// passwords): the snapshot's redactor treats their values as secrets.
pub fn secret_variables(
    names: impl Iterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    const WORDS: [&str; 11] = [
        "KEY",
        "KEYS",
        "APIKEY",
        "TOKEN",
        "TOKENS",
        "SECRET",
        "SECRETS",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "CREDENTIALS",
    ];
    names
        .filter(|name| {
            let upper = name.to_string_lossy().to_ascii_uppercase();
            upper.ends_with("PASSWORD")
                || upper
                    .split(['_', '-', '.'])
                    .any(|word| WORDS.contains(&word))
        })
        .collect()
}

/// Runs `spec` to its end; see the module docs. If the token is already
/// cancelled, nothing is started.
pub async fn run(spec: ProcessSpec) -> Result<ProcessOutput, ProcessError> {
    if spec.cancel.is_cancelled() {
        return Ok(ProcessOutput {
            ended: Ended::Cancelled,
            stdout: Captured::default(),
            stderr: Captured::default(),
        });
    }
    let confinement = spec.sandbox.confinement().map_err(ProcessError::Sandbox)?;
    // A program's own `PATH` is searched by the child, as before.
    let located = (!spec.env.iter().any(|(name, _)| name == "PATH"))
        .then(|| program_path::resolve(&spec.program))
        .flatten();
    let mut command = match &located {
        Some(path) => {
            let mut command = Command::new(path);
            // argv[0] stays the name the program was given.
            command.arg0(&spec.program);
            command
        }
        None => Command::new(&spec.program),
    };
    command
        .env_clear()
        .envs(base_environment().iter().map(|(k, v)| (k, v)))
        .args(&spec.args)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .envs(confinement.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    // The scope's hook first: the child joins its cgroup before a Landlock
    // domain could forbid writing it.
    let scope = Scope::open();
    scope.prepare(&mut command).map_err(ProcessError::Spawn)?;
    confinement.install(&mut command);
    let slot = Arc::new(AtomicI32::new(0));
    let mut child = {
        // Spawned under the registry's lock: a forced exit cannot come
        // between the fork and the registration.
        let mut groups = live_groups();
        let child = scope.spawn(&mut command).map_err(ProcessError::Spawn)?;
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            slot.store(pid, Ordering::SeqCst);
            groups.retain(|g| g.strong_count() > 0);
            groups.push(Arc::downgrade(&slot));
        }
        child
    };
    let guard = GroupGuard(slot);
    if guard.pgid() == 0 {
        return Err(ProcessError::Wait(std::io::Error::other(
            "the program exited before it could be watched",
        )));
    }
    let stop = CancellationToken::new();
    let _stop_readers = stop.clone().drop_guard();

    // stdin is written concurrently with reading, so a big input cannot
    // deadlock against a full stdout pipe. A program that does not read it
    // makes the write fail with EPIPE, which is fine.
    let _writer = child.stdin.take().zip(spec.stdin).map(|(mut pipe, bytes)| {
        AbortOnDropHandle::new(tokio::spawn(async move {
            if let Err(e) = pipe.write_all(&bytes).await
                && e.kind() != std::io::ErrorKind::BrokenPipe
            {
                tracing::debug!(error = %e, "could not write a program's stdin");
            }
            // Dropping the pipe closes it: the program sees end of input.
        }))
    });
    let pipes = child.stdout.take().zip(child.stderr.take());
    let (stdout, stderr) = pipes.ok_or_else(|| {
        ProcessError::Wait(std::io::Error::other("the program has no output pipes"))
    })?;
    // Both pipes are read in this task, beside the wait (no tasks of their
    // own): reading goes on while the program runs, and what was read is
    // here when it ends.
    let readers = futures::future::join(
        drain(stdout, spec.keep_stdout, stop.clone()),
        drain(stderr, spec.keep_stderr, stop.clone()),
    );
    tokio::pin!(readers);
    let mut read = None;
    let timeout = tokio::time::sleep(spec.timeout);
    tokio::pin!(timeout);
    let ended = loop {
        tokio::select! {
            status = child.wait() => break match status {
                Ok(status) => Ended::Exited(status),
                Err(e) => {
                    guard.kill();
                    return Err(ProcessError::Wait(e));
                }
            },
            () = &mut timeout => break Ended::TimedOut,
            () = spec.cancel.cancelled() => break Ended::Cancelled,
            outputs = &mut readers, if read.is_none() => read = Some(outputs),
        }
    };
    guard.kill();
    if !matches!(ended, Ended::Exited(_)) {
        let _ = tokio::time::timeout(REAP_GRACE, child.wait()).await;
    }
    // What left the group ends now too, and with it the pipes it held.
    let closing = tokio::task::spawn_blocking(move || scope.close());
    if let Err(e) = closing.await {
        tracing::warn!(error = %e, "could not end a tool call's detached processes");
    }

    let (stdout, stderr) = match read {
        Some(outputs) => outputs,
        None => tokio::select! {
            outputs = &mut readers => outputs,
            () = tokio::time::sleep(PIPE_GRACE) => {
                stop.cancel();
                readers.await
            }
        },
    };
    Ok(ProcessOutput {
        ended,
        stdout,
        stderr,
    })
}

/// Reads `pipe` to its end (or until `stop`), keeping the bytes `keep` says
/// and throwing the rest away.
async fn drain(mut pipe: impl AsyncRead + Unpin, keep: Keep, stop: CancellationToken) -> Captured {
    let mut cap = Captured::default();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            n = pipe.read(&mut buf) => n,
        };
        match n {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                cap.total += n;
                keep_bytes(&mut cap.kept, &buf[..n], keep);
            }
        }
    }
    cap
}

fn keep_bytes(kept: &mut Vec<u8>, chunk: &[u8], keep: Keep) {
    match keep {
        Keep::Head(max) => {
            let room = max.saturating_sub(kept.len()).min(chunk.len());
            kept.extend_from_slice(&chunk[..room]);
        }
        Keep::Tail(max) => {
            if chunk.len() >= max {
                kept.clear();
                kept.extend_from_slice(&chunk[chunk.len() - max..]);
            } else {
                let excess = (kept.len() + chunk.len()).saturating_sub(max);
                kept.drain(..excess);
                kept.extend_from_slice(chunk);
            }
        }
    }
}

/// The signal [`signal_group`] sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupSignal {
    /// SIGTERM: asks the processes to stop (a wrapper can stop what it runs).
    Terminate,
    /// SIGKILL.
    Kill,
}

/// Sends `signal` to the whole process group `pgid`: the child started with
/// `process_group(0)` and every descendant still in its group. The one place
/// aurad signals a group (tool calls, plugins, MCP servers). An id of 0 or
/// less (no group) does nothing; a group already gone (ESRCH) is fine; any
/// other failure is logged.
pub fn signal_group(pgid: i32, signal: GroupSignal) {
    if pgid <= 0 {
        return;
    }
    let signo = match signal {
        GroupSignal::Terminate => libc::SIGTERM,
        GroupSignal::Kill => libc::SIGKILL,
    };
    // SAFETY: killpg only sends a signal; it touches no memory of ours.
    if unsafe { libc::killpg(pgid, signo) } != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(pgid, ?signal, error = %e, "could not signal a child process group");
        }
    }
}

/// Takes the group id out of `slot` (leaving 0) and SIGKILLs that group:
/// each group is killed once, and an id the kernel reuses later is never
/// signalled. Returns whether `slot` held a group.
pub fn kill_group_in(slot: &AtomicI32) -> bool {
    let pgid = slot.swap(0, Ordering::SeqCst);
    signal_group(pgid, GroupSignal::Kill);
    pgid > 0
}

/// The process groups of tool and MCP server processes that may be alive,
/// as slots holding the group id (0 once the group was killed by its
/// owner). Dropped slots are pruned.
static LIVE_GROUPS: Mutex<Vec<Weak<AtomicI32>>> = Mutex::new(Vec::new());

fn live_groups() -> MutexGuard<'static, Vec<Weak<AtomicI32>>> {
    LIVE_GROUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Lets [`kill_every_group`] reach the group whose id `slot` holds (0: no
/// group). The owner sets it to 0 once it killed the group itself, so a
/// reused id is never signalled. For process groups started elsewhere
/// (MCP servers).
pub fn track_group(slot: &Arc<AtomicI32>) {
    let mut groups = live_groups();
    groups.retain(|g| g.strong_count() > 0);
    groups.push(Arc::downgrade(slot));
}

/// SIGKILLs every tracked process group still alive (tool calls in
/// flight, MCP servers), closes every open [`Scope`] (the processes that
/// left them) and returns how many groups were signalled. For a process
/// about to exit without unwinding (the forced exit of a second signal):
/// no tool process outlives it.
pub fn kill_every_group() -> usize {
    let mut killed = 0;
    {
        let groups = live_groups();
        for slot in groups.iter().filter_map(Weak::upgrade) {
            if kill_group_in(&slot) {
                killed += 1;
            }
        }
    }
    // And what left those groups.
    scope::kill_all();
    killed
}

/// Kills the process group when told, or when the call is dropped before
/// it cleaned up (e.g. the engine gave up on the run).
struct GroupGuard(Arc<AtomicI32>);

impl GroupGuard {
    fn pgid(&self) -> i32 {
        self.0.load(Ordering::SeqCst)
    }

    /// SIGKILLs the group, once.
    fn kill(&self) {
        kill_group_in(&self.0);
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A short name for common signals (`SIGKILL`), or `signal N`.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => return format!("signal {signal}"),
    };
    format!("signal {signal} ({name})")
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod tests;

#[cfg(test)]
mod secret_tests {
    use super::secret_variables;

    #[test]
    fn secret_looking_variables_are_found() {
        let names = [
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "PGPASSWORD",
            "AURAD_TOKEN",
            "DEEPSEEK_API_KEY",
            "HOME",
            "PATH",
            "MONKEY",
            "KEYBOARD_LAYOUT",
            "TOKENIZERS_PARALLELISM",
        ];
        let found = secret_variables(names.iter().map(std::ffi::OsString::from));
        let found: Vec<&str> = found.iter().map(|n| n.to_str().unwrap()).collect();
        assert_eq!(
            found,
            [
                "OPENAI_API_KEY",
                "GITHUB_TOKEN",
                "AWS_SECRET_ACCESS_KEY",
                "PGPASSWORD",
                "AURAD_TOKEN",
                "DEEPSEEK_API_KEY"
            ]
        );
    }
}
