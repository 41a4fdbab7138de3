//! `aurad service`: print the systemd unit that runs `aurad serve` for
//! this project, or with `--install` write it where systemd looks and say
//! which `systemctl` commands start it (never running them).

use std::path::{Path, PathBuf};

use clap::Args;

use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK, LogFormat};
use crate::app::service::{self, Installed, Scope, ServiceError, UnitRequest};

#[derive(Debug, Args)]
#[command(
    after_help = "The unit runs `aurad --dir PROJECT serve` as a Type=notify service with a 30 s watchdog, restarts it on failure, logs to the journal, reads keys from PROJECT/.env, and is hardened: the file system is read-only but for the project and aurad's private folder, no setuid, no capabilities, no namespaces but the sandbox's. Loosen a directive with a drop-in: `systemctl edit UNIT`."
)]
pub struct ServiceArgs {
    /// A unit for your own service manager (`systemctl --user`) instead of the system's.
    #[arg(long)]
    pub user: bool,
    /// Write the unit (/etc/systemd/system, or ~/.config/systemd/user with
    /// --user) instead of printing it; a different unit of the same name is
    /// never replaced.
    #[arg(long)]
    pub install: bool,
    /// Where --install writes the unit (for tests and packaging).
    #[arg(long, value_name = "DIR", hide = true, requires = "install")]
    pub unit_dir: Option<PathBuf>,
}

pub fn run(root: &Path, args: ServiceArgs, log_format: Option<LogFormat>) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("error: cannot find the path of this aurad binary: {e}");
            return EXIT_FAILED;
        }
    };
    let scope = if args.user {
        Scope::User
    } else {
        Scope::System
    };
    let request = UnitRequest {
        root,
        scope,
        json_logs: log_format == Some(LogFormat::Json),
        exe: &exe,
    };
    let unit = match service::unit(&request) {
        Ok(unit) => unit,
        Err(ServiceError::Settings(diagnostics)) => {
            super::print_diagnostics(&diagnostics);
            eprintln!(
                "error: aurad.yaml has errors (above): aurad serve would not start; fix them first"
            );
            return EXIT_CONFIG;
        }
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    if !args.install {
        print!("{}", unit.text);
        return EXIT_OK;
    }
    let dir = match args.unit_dir.map_or_else(|| service::unit_dir(scope), Ok) {
        Ok(dir) => dir,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    };
    match service::install(&unit, &dir) {
        Ok(Installed::Written(path)) => println!("wrote {}", path.display()),
        Ok(Installed::Unchanged(path)) => {
            println!("{} is already this unit: unchanged", path.display());
        }
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILED;
        }
    }
    let systemctl = if args.user {
        "systemctl --user"
    } else {
        "systemctl"
    };
    let journal = if args.user {
        "journalctl --user"
    } else {
        "journalctl"
    };
    println!("start it now and at every boot:");
    println!(
        "  {systemctl} daemon-reload && {systemctl} enable --now {}",
        unit.name
    );
    println!(
        "then: {systemctl} status {}   {journal} -u {} -f",
        unit.name, unit.name
    );
    if args.user {
        println!(
            "a user's services stop when they log out unless lingering is on: loginctl enable-linger $USER"
        );
    }
    EXIT_OK
}
