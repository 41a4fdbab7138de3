//! The `aurad` binary: parse arguments, set up logging, hand over to the
//! library, exit with its code.

use clap::Parser;

fn main() {
    let cli = aurad::cli::Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,aurad::mcp=info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    std::process::exit(aurad::cli::run(cli));
}
