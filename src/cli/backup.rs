//! `aurad backup FILE`: copy the project's SQLite store while `aurad serve`
//! may be writing, and say what the copy holds; on PostgreSQL, say which
//! `pg_dump` to run instead.

use std::path::PathBuf;

use clap::Args;

use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK};
use crate::app::backup::{self, BackupError};

#[derive(Debug, Args)]
#[command(
    after_help = "Restore: stop aurad serve, copy FILE over the store (aurad.db), remove aurad.db-wal and aurad.db-shm, start it again. A newer aurad upgrades the copy's schema when it opens it; an older one refuses it."
)]
pub struct BackupArgs {
    /// Where the copy goes (written as FILE.tmp, then renamed).
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    pub force: bool,
}

pub fn run(root: &std::path::Path, args: BackupArgs) -> i32 {
    match backup::backup(root, &args.file, args.force) {
        Ok(done) => {
            println!(
                "backed up {} to {}: {} bytes, {} run(s), schema version {} (integrity ok)",
                done.source.display(),
                done.file.display(),
                done.copy.bytes,
                done.copy.runs,
                done.copy.schema
            );
            EXIT_OK
        }
        Err(BackupError::Settings(diagnostics)) => {
            super::print_diagnostics(&diagnostics);
            eprintln!("error: aurad.yaml has errors (above); fix them first");
            EXIT_CONFIG
        }
        Err(BackupError::Postgres { command }) => {
            say_err!(
                "error: the store is PostgreSQL: aurad backup copies SQLite files only. Use PostgreSQL's own tool (put the password in ~/.pgpass or PGPASSWORD):\n  {command}\nand restore with pg_restore --clean --dbname URL FILE"
            );
            EXIT_FAILED
        }
        Err(BackupError::Other(message)) => {
            eprintln!("error: {message}");
            EXIT_FAILED
        }
    }
}
