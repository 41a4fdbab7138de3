//! `aurad doctor`: what this machine and this project can do and what is
//! wrong, each problem with its fix. Every check is a function returning a
//! typed [`Check`]; the command line only prints them. The checks read,
//! never change: the configuration is loaded as `aurad validate` loads it,
//! the store is opened read-only without migrating, the listen address is
//! bound for a moment and released, the cgroup probe makes an empty child
//! cgroup and removes it at once.
//!
//! The rooms: [`project`] (the files, the keys, the MCP commands, the time
//! zones), [`kernel`] (Landlock, cgroup v2, inotify, open files: `/proc`
//! and `/sys` read beneath [`Machine::system`], a fake tree in a test),
//! [`store`] (the database) and [`listen`] (the API's address).
//!
//! May depend on `config`, `daemon` (the project lock), `api` (the
//! connection figures), `registry`, `store`, `tools` and `watcher`.

mod kernel;
mod listen;
mod project;
mod store;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::{self, EnvLookup};

/// How a check came out, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Not applicable here (the project cannot be read, no agents).
    Skip,
    /// Works, but something should be done.
    Warn,
    /// Something will fail.
    Error,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Skip => "skip",
            Status::Warn => "warn",
            Status::Error => "error",
        }
    }
}

/// The names of the checks, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CheckName {
    Project,
    Landlock,
    Cgroup,
    Inotify,
    OpenFiles,
    Store,
    Keys,
    Mcp,
    Listen,
    Clock,
}

impl CheckName {
    pub const ALL: [CheckName; 10] = [
        CheckName::Project,
        CheckName::Landlock,
        CheckName::Cgroup,
        CheckName::Inotify,
        CheckName::OpenFiles,
        CheckName::Store,
        CheckName::Keys,
        CheckName::Mcp,
        CheckName::Listen,
        CheckName::Clock,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CheckName::Project => "project",
            CheckName::Landlock => "landlock",
            CheckName::Cgroup => "cgroup",
            CheckName::Inotify => "inotify",
            CheckName::OpenFiles => "open-files",
            CheckName::Store => "store",
            CheckName::Keys => "keys",
            CheckName::Mcp => "mcp",
            CheckName::Listen => "listen",
            CheckName::Clock => "clock",
        }
    }
}

/// One check's outcome: a one-line finding and, for a warning or an
/// error, the fix (a command to run or an edit to make).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub check: CheckName,
    pub status: Status,
    pub finding: String,
    pub fix: Option<String>,
}

impl Check {
    pub fn ok(check: CheckName, finding: impl Into<String>) -> Check {
        Check {
            check,
            status: Status::Ok,
            finding: finding.into(),
            fix: None,
        }
    }

    pub fn skip(check: CheckName, finding: impl Into<String>) -> Check {
        Check {
            check,
            status: Status::Skip,
            finding: finding.into(),
            fix: None,
        }
    }

    pub fn warn(check: CheckName, finding: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            check,
            status: Status::Warn,
            finding: finding.into(),
            fix: Some(fix.into()),
        }
    }

    pub fn error(check: CheckName, finding: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            check,
            status: Status::Error,
            finding: finding.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Every check's outcome, with the counts `--json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub checks: Vec<Check>,
    pub errors: usize,
    pub warnings: usize,
}

impl Report {
    fn of(checks: Vec<Check>) -> Report {
        let count = |status| checks.iter().filter(|c| c.status == status).count();
        Report {
            errors: count(Status::Error),
            warnings: count(Status::Warn),
            checks,
        }
    }
}

/// Where the machine's `/proc` and `/sys` are read: beneath `system`
/// (`/`; a fake tree in a test).
#[derive(Debug, Clone)]
pub struct Machine {
    pub system: PathBuf,
}

impl Machine {
    /// This machine.
    pub fn real() -> Machine {
        Machine {
            system: PathBuf::from("/"),
        }
    }

    fn path(&self, absolute: &str) -> PathBuf {
        self.system.join(absolute.trim_start_matches('/'))
    }
}

/// Examines this machine and the project at `root` with the process
/// environment.
pub fn examine(root: &Path) -> Report {
    examine_with(root, &Machine::real(), &config::process_env)
}

/// Examines `machine` and the project at `root`, reading variables
/// through `env`.
pub fn examine_with(root: &Path, machine: &Machine, env: EnvLookup) -> Report {
    let loaded = config::load(root, env);
    let (settings, settings_diagnostics) = config::load_settings(root, env);
    let settings_ok = !settings_diagnostics
        .iter()
        .any(config::Diagnostic::is_error);
    let project = &loaded.project;
    let (store_check, newest_run) = if settings_ok {
        store::check(&settings.database)
    } else {
        (
            Check::skip(CheckName::Store, "aurad.yaml has errors (see `project`)"),
            None,
        )
    };
    let listen_check = if settings_ok {
        listen::check(root, settings.listen, env)
    } else {
        Check::skip(CheckName::Listen, "aurad.yaml has errors (see `project`)")
    };
    let checks = vec![
        project::files(root),
        kernel::landlock(project),
        kernel::cgroup(machine),
        kernel::inotify(machine, root, project),
        kernel::open_files(),
        store_check,
        project::keys(project, env),
        project::mcp(project, env),
        listen_check,
        project::clock(
            project,
            &loaded.diagnostics,
            env,
            newest_run,
            chrono::Utc::now(),
        ),
    ];
    Report::of(checks)
}
