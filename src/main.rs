//! The `aurad` binary: make the process non-dumpable, parse arguments, set
//! up logging, hand over to the library, exit with its code.

use std::io::IsTerminal;

use aurad::cli::{Cli, LogFormat};
use clap::Parser;

fn main() {
    // Before anything reads a key: the process holds provider keys and
    // webhook secrets in its environment and memory, and tool processes
    // (which also lose CAP_SYS_PTRACE, CAP_SYS_ADMIN and CAP_PERFMON) must
    // not read them through /proc/<pid>/environ, /proc/<pid>/mem or ptrace.
    make_non_dumpable();
    let cli = Cli::parse();
    init_tracing(&cli);
    std::process::exit(aurad::cli::run(cli));
}

/// `prctl(PR_SET_DUMPABLE, 0)`: other processes of the same user (and, as
/// long as they lack CAP_SYS_PTRACE, CAP_SYS_ADMIN and CAP_PERFMON, root)
/// cannot read this process's memory or environment, and no core dump is
/// written. A failure is reported and the process goes on.
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

/// Logs go to stderr: readable lines (coloured on a terminal) or, with
/// `--log-format json`, one JSON object per line. RUST_LOG overrides the
/// command's default filter.
fn init_tracing(cli: &Cli) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(cli.default_log_filter()));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format.unwrap_or(LogFormat::Human) {
        LogFormat::Json => builder.json().init(),
        LogFormat::Human => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .init(),
    }
}
