//! The `aurad` binary: parse arguments, set up logging, hand over to the
//! library, exit with its code.

use aurad::cli::Cli;
use clap::Parser;

fn main() {
    let cli = Cli::parse();
    aurad::cli::init_tracing(&cli);
    std::process::exit(aurad::cli::run(cli));
}
