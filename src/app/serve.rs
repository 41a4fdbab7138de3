//! `aurad serve`, composed: the daemon on a multi-thread runtime until the
//! first SIGINT or SIGTERM, then a graceful shutdown; a second signal
//! kills every tool and MCP server process group and exits at once. Every
//! process a tool or server starts is scoped first (`tools::scope`), so it
//! ends with its call, with the daemon, or at the next start after a crash.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::one_shot::EXIT_CANCELLED;
use crate::daemon::{ServeOptions, serve as serve_daemon};

/// Runs the daemon of the project at `root` (on `listen`, else where
/// `aurad.yaml` says) until a signal stops it. `Err` says why it stopped
/// otherwise.
pub fn serve(root: &Path, listen: Option<SocketAddr>) -> Result<(), String> {
    super::project::scope_processes(root);
    limit_malloc_arenas();
    raise_open_file_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("aurad")
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    let options = ServeOptions {
        listen,
        ..ServeOptions::new(root.to_path_buf())
    };
    let result = runtime.block_on(async {
        // Registered before the daemon starts, so a signal during start-up
        // stops it gracefully too instead of killing the process.
        let signals = Signals::register()?;
        serve_daemon(options, signals.first()).await
    });
    // A tool stuck in a blocking call must not keep the process alive.
    runtime.shutdown_timeout(Duration::from_secs(1));
    crate::tools::scope::finish();
    result
}

/// Raises the soft limit on open files to the hard one. The soft limit is
/// often 1024: every API connection, SSE stream, tool pipe, MCP server
/// and database file takes descriptors, and 1,100 idle connections once
/// left the daemon unable to accept another or open its store. A failure
/// is logged and the daemon goes on with the limit it has.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct given.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0
            && (limit.rlim_cur >= limit.rlim_max || {
                limit.rlim_cur = limit.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0
            })
    };
    if !raised {
        tracing::warn!(
            "cannot raise the open-file limit to its hard limit ({}); connections may be refused under load",
            std::io::Error::last_os_error()
        );
    }
}

/// Caps glibc's malloc arenas at two (its default is eight per core), unless
/// `MALLOC_ARENA_MAX` is set. Runs hop between the runtime's threads, and
/// each thread that allocates gets an arena of its own whose freed pages stay
/// in the process: the daemon's resident memory wandered by 10-15% between
/// samples over thousands of runs, and stayed flat with the cap
/// (BENCHMARKS.md, "daemon memory over 10,000 runs").
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before
        // the runtime's threads exist.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

/// SIGINT and SIGTERM, handled by us from registration on.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
}

impl Signals {
    fn register() -> Result<Signals, String> {
        let listen = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| format!("cannot listen for {name}: {e}"))
        };
        Ok(Signals {
            interrupt: listen(SignalKind::interrupt(), "SIGINT")?,
            terminate: listen(SignalKind::terminate(), "SIGTERM")?,
        })
    }

    /// Which signal arrived first.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }

    /// Resolves on the first signal; from then on a second one exits the
    /// process at once.
    async fn first(mut self) {
        let name = self.next().await;
        tracing::info!("{name} received: shutting down gracefully (send it again to exit at once)");
        tokio::spawn(async move {
            self.next().await;
            // exit() runs no destructor: kill every tool and MCP server
            // process group first, so none is left orphaned.
            let killed = crate::tools::process::kill_every_group();
            tracing::warn!(
                killed_process_groups = killed,
                "second signal: exiting now; runs in flight will be recorded as interrupted at the next start"
            );
            std::process::exit(EXIT_CANCELLED);
        });
    }
}
