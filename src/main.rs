//! The `aurad` binary: make the process non-dumpable, parse arguments, set
//! up logging, hand over to the library, exit with its code.

use aurad::cli::Cli;
use clap::Parser;

fn main() {
    // Before anything reads a key: the process holds provider keys and
    // webhook secrets in its environment and memory, and tool processes
    // (which also lose CAP_SYS_PTRACE, CAP_SYS_ADMIN and CAP_PERFMON) must
    // not read them through /proc/<pid>/environ, /proc/<pid>/mem or ptrace.
    make_non_dumpable();
    // Before any thread exists, so that every thread, and every process
    // started from one, is without them; tool processes then start without
    // a fork (`tools::sandbox`).
    aurad::tools::sandbox::drop_memory_reading_caps();
    // The shell asking for completions (`COMPLETE=bash aurad -- ...`):
    // answered and exited here, before the arguments are parsed.
    aurad::cli::complete_if_asked();
    let cli = Cli::parse();
    if cli.command.starts_no_process() {
        die_on_closed_pipe();
    }
    aurad::cli::init_tracing(&cli);
    std::process::exit(aurad::cli::run(cli));
}

/// `prctl(PR_SET_DUMPABLE, 0)`: other processes of the same user (and, as
/// long as they lack CAP_SYS_PTRACE, CAP_SYS_ADMIN and CAP_PERFMON, root)
/// cannot read this process's memory or environment, and no core dump is
/// written. A failure is reported and the process goes on.
#[allow(
    clippy::print_stderr,
    reason = "before logging is set up, stderr is the only place to say it"
)]
fn make_non_dumpable() {
    // SAFETY: prctl with integer arguments only changes a process flag.
    let rc = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    if rc != 0 {
        eprintln!(
            "warning: cannot make aurad non-dumpable ({}); tool processes may be able to read its environment",
            std::io::Error::last_os_error()
        );
    }
}

/// A listing piped into `head` ends quietly when `head` has read enough,
/// as other Unix tools do, instead of panicking in `println!` on the
/// broken pipe: SIGPIPE is restored to its default (Rust ignores it).
/// Only for commands that start no process and talk to none over a pipe:
/// a daemon or a run writing to a tool that exited must get EPIPE, not die.
fn die_on_closed_pipe() {
    // SAFETY: resetting a signal's disposition to its default, before any
    // thread exists; no handler is installed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
