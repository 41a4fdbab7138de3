//! The `aurad` binary: parse arguments, set up logging, hand over to the
//! library, exit with its code.

use std::io::IsTerminal;

use aurad::cli::{Cli, LogFormat};
use clap::Parser;

fn main() {
    let cli = Cli::parse();
    init_tracing(&cli);
    std::process::exit(aurad::cli::run(cli));
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
