//! `aurad serve`: run the daemon until the first SIGINT or SIGTERM, then
//! shut down gracefully; a second signal kills every tool and MCP server
//! process group and exits at once (the work is `app::serve`'s).

use std::net::SocketAddr;
use std::path::Path;

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK};
use crate::app;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address of the HTTP API (IP:PORT); overrides `listen` of aurad.yaml.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
}

pub fn run(root: &Path, args: ServeArgs) -> i32 {
    match app::serve::serve(root, args.listen) {
        Ok(()) => EXIT_OK,
        Err(message) => {
            eprintln!("error: {message}");
            EXIT_FAILED
        }
    }
}
