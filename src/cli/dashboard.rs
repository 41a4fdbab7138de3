//! `aurad dashboard [--print-token]`: where the project's running daemon's
//! dashboard is, with the token that lets the browser in (the page keeps
//! it for the tab and takes it out of the address), or, with
//! `--print-token`, the token alone, for `curl -H "Authorization: Bearer
//! $(aurad dashboard --print-token)"`. Reads what `aurad serve` wrote for
//! the person (`app::api_access`); no tool can.

use std::path::Path;

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK};
use crate::app;

#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// Print only the API token.
    #[arg(long)]
    pub print_token: bool,
}

pub fn run(root: &Path, args: DashboardArgs) -> i32 {
    let access = match app::api_access(root) {
        Ok(access) => access,
        Err(none) => {
            eprintln!(
                "error: no aurad serve of {} is running ({none}); start it with `aurad serve`",
                root.display()
            );
            return EXIT_FAILED;
        }
    };
    if args.print_token {
        println!("{}", access.token);
    } else {
        println!("http://{}/#token={}", access.listen, access.token);
    }
    EXIT_OK
}
