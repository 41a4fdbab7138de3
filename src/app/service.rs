//! `aurad service`: the systemd unit that runs `aurad serve` for a project
//! (`Type=notify` with the watchdog the daemon feeds, a restart policy,
//! the hardening that fits a daemon whose agents run tools and shell
//! commands, logs to the journal), and writing it where systemd looks,
//! never over a different unit. It never runs `systemctl`: the caller
//! prints what to run. Uses `config` (the project's settings and its
//! private folder) only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{self, Diagnostic};
use crate::types::Database;

/// Whose service manager runs the unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The system's (`/etc/systemd/system`), as the project's owner.
    System,
    /// The user's own (`~/.config/systemd/user`, `systemctl --user`).
    User,
}

/// What to build a unit for.
pub struct UnitRequest<'a> {
    pub root: &'a Path,
    pub scope: Scope,
    /// `--log-format json` for `aurad serve` (the journal keeps each line).
    pub json_logs: bool,
    /// The `aurad` binary the unit starts (the running one).
    pub exe: &'a Path,
}

/// A unit file: its name (`aurad-NAME.service`) and text, and the
/// daemon's private folder it lets it write, which [`install`] makes.
#[derive(Debug)]
pub struct Unit {
    pub name: String,
    pub text: String,
    state: PathBuf,
    /// The uid and gid a system unit runs as.
    owner: Option<(u32, u32)>,
}

/// Why no unit was made.
#[derive(Debug)]
pub enum ServiceError {
    /// `aurad.yaml` has errors (the caller shows them): serve would not start.
    Settings(Vec<Diagnostic>),
    /// Anything else, said with what to do.
    Other(String),
}

impl std::fmt::Display for ServiceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServiceError::Settings(_) => write!(f, "aurad.yaml has errors"),
            ServiceError::Other(message) => f.write_str(message),
        }
    }
}

/// How long systemd gives `aurad serve` to stop beyond `shutdown_grace`:
/// after the grace, runs are cancelled and recorded, traces flushed (up to
/// 5 s) and the store closed.
const STOP_MARGIN: Duration = Duration::from_secs(30);

/// The unit that runs `aurad serve` for the project at `request.root`.
pub fn unit(request: &UnitRequest) -> Result<Unit, ServiceError> {
    let root = request.root;
    let (settings, diagnostics) = config::load_settings(root, &config::process_env);
    if diagnostics.iter().any(Diagnostic::is_error) {
        return Err(ServiceError::Settings(diagnostics));
    }
    let name = unit_name(root);
    let owner = match request.scope {
        Scope::System => Some(owner_of(root)?),
        Scope::User => None,
    };
    // Where the daemon writes its API credential and process records
    // (`config::private`): beneath the home directory of the user it runs
    // as, which ProtectHome= makes read-only unless it is listed.
    let state_dir = match &owner {
        Some(owner) => owner.home.join(".local/state/aurad"),
        None => config::private::state_dir(&config::process_env),
    };
    let mut writable = vec![root.to_path_buf()];
    if let Database::Sqlite(db) = &settings.database
        && let Some(dir) = db.parent()
        && !dir.starts_with(root)
    {
        writable.push(dir.to_path_buf());
    }
    // A private /tmp would hide a project (or store) that lives in /tmp.
    let in_tmp = writable
        .iter()
        .chain([&state_dir])
        .any(|w| w.starts_with("/tmp") || w.starts_with("/var/tmp"));
    let p = |path: &Path| unit_path(path).map_err(ServiceError::Other);
    let project = p(root)?;
    let exe = p(request.exe)?;
    let writable = writable
        .iter()
        .map(|w| p(w))
        .collect::<Result<Vec<_>, _>>()?;
    let state = p(&state_dir)?;
    let stop = settings.shutdown_grace + STOP_MARGIN;
    let log = if request.json_logs {
        " --log-format json"
    } else {
        ""
    };
    let exec = format!(
        "{} --dir {} serve{log}",
        exe.replace('$', "$$"),
        project.replace('$', "$$")
    );

    let mut t = String::new();
    let mut line = |s: &str| {
        t.push_str(s);
        t.push('\n');
    };
    line(&format!(
        "# Written by `aurad service`{}: aurad serve for {project}.",
        if request.scope == Scope::User {
            " --user"
        } else {
            ""
        }
    ));
    line("# Keys go in the project's .env (KEY=value lines, read below; the file");
    line("# tools never read it) or in a drop-in (systemctl edit), never in this file.");
    line("[Unit]");
    line(&format!("Description=aurad: LLM agents of {project}"));
    line("# Providers, MCP servers and webhooks need the network up.");
    line("Wants=network-online.target");
    line("After=network-online.target");
    line("# Five failed starts in five minutes: stop trying and leave it failed.");
    line("StartLimitIntervalSec=300");
    line("StartLimitBurst=5");
    line("");
    line("[Service]");
    line("# aurad says READY=1 once the API listens and the scheduler runs.");
    line("Type=notify");
    line("# Only aurad itself, not a tool it runs, may speak for the service.");
    line("NotifyAccess=main");
    line("# aurad pings every 15 s while its API, scheduler and store answer;");
    line("# 30 s without one and systemd kills and restarts it.");
    line("WatchdogSec=30s");
    line(&format!("ExecStart={exec}"));
    line(&format!("WorkingDirectory={project}"));
    line("# Provider keys, AURAD_TOKEN and other secrets (optional file).");
    line(&format!("EnvironmentFile=-{project}/.env"));
    line("# Restart after a crash, a watchdog timeout or a failed exit, not after a stop.");
    line("Restart=on-failure");
    line("RestartSec=5s");
    line("# The first SIGTERM goes to aurad alone: it lets runs finish for");
    line("# shutdown_grace and ends its tools itself; what is left is killed.");
    line("KillMode=mixed");
    line(&format!(
        "# shutdown_grace ({}s) plus time to cancel runs, flush traces and close the store.",
        settings.shutdown_grace.as_secs()
    ));
    line(&format!("TimeoutStopSec={}s", stop.as_secs()));
    line("# Logs go to the journal (journalctl -u UNIT); aurad writes them on stderr.");
    line("StandardOutput=journal");
    line("StandardError=journal");
    line(&format!(
        "SyslogIdentifier={}",
        name.trim_end_matches(".service")
    ));
    line("# API connections, SSE streams, tool pipes and MCP servers take descriptors.");
    line("LimitNOFILE=65536");
    if let Some(owner) = &owner {
        line("# The project's owner: its files stay theirs.");
        line(&format!("User={}", owner.name));
    }
    line("# aurad puts each tool call's processes in a cgroup of their own beneath");
    line("# its own, so nothing a tool starts outlives the call: that needs delegation.");
    line("# (ProtectControlGroups= is left out: it makes that cgroup read-only.)");
    line("Delegate=yes");
    line("");
    line("# Hardening. Tools and shell commands of agents run with what is left:");
    line("# see `aurad service --help` and the docs for how to loosen one.");
    line("# No setuid/setgid gains (sudo, ping, su fail in tools); Landlock needs it anyway.");
    line("NoNewPrivileges=yes");
    line("# The whole file system is read-only but for the paths below.");
    line("ProtectSystem=strict");
    line(&format!(
        "ReadWritePaths={}",
        writable
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(" ")
    ));
    line("# The daemon's private folder (API credential, process records); the");
    line("# leading - lets the unit start if it does not exist yet.");
    line(&format!("ReadWritePaths=-{state}"));
    line("# Home directories can be read (toolchains, configs) but not written.");
    line("ProtectHome=read-only");
    if in_tmp {
        line("# PrivateTmp= is left out: the project or its store is in /tmp or /var/tmp.");
    } else {
        line("# A /tmp and /var/tmp of the service's own, emptied at stop.");
        line("PrivateTmp=yes");
    }
    line("# No writing /proc/sys or /sys, loading modules, or reading the kernel log.");
    line("ProtectKernelTunables=yes");
    line("ProtectKernelModules=yes");
    line("ProtectKernelLogs=yes");
    line("# No setuid/setgid files can be made.");
    line("RestrictSUIDSGID=yes");
    line("LockPersonality=yes");
    line("RestrictRealtime=yes");
    line("# The tool sandbox makes a user and a mount namespace per tool process;");
    line("# every other kind is refused.");
    line("RestrictNamespaces=user mnt");
    line("# Native system calls only (32-bit x86 binaries cannot run in tools).");
    line("SystemCallArchitectures=native");
    if request.scope == Scope::System {
        line("# No capabilities at all, even if started as root.");
        line("CapabilityBoundingSet=");
        line("AmbientCapabilities=");
    }
    line("# MemoryDenyWriteExecute= is left out: node, python and java JITs in tools");
    line("# need writable executable memory.");
    line("");
    line("[Install]");
    line(match request.scope {
        Scope::System => "WantedBy=multi-user.target",
        Scope::User => "WantedBy=default.target",
    });
    Ok(Unit {
        name,
        text: t,
        state: state_dir,
        owner: owner.map(|o| (o.uid, o.gid)),
    })
}

/// `aurad-NAME.service`, NAME the project directory's name with every
/// character a unit name may not hold replaced by `-`.
pub fn unit_name(root: &Path) -> String {
    let dir = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let clean: String = dir
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':') {
                c
            } else {
                '-'
            }
        })
        .take(200)
        .collect();
    let clean = clean.trim_matches(|c| c == '-' || c == '.');
    if clean.is_empty() {
        "aurad.service".to_string()
    } else {
        format!("aurad-{clean}.service")
    }
}

/// A path as a unit file writes it: `%` escaped (systemd's specifiers).
/// Paths with whitespace, quotes, backslashes or control characters are
/// refused: several directives split or unquote them.
fn unit_path(path: &Path) -> Result<String, String> {
    let text = path.to_str().ok_or_else(|| {
        format!(
            "{} is not UTF-8: a systemd unit cannot name it; move the project or write the unit by hand",
            path.display()
        )
    })?;
    if let Some(c) = text
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '\\'))
    {
        return Err(format!(
            "{text} holds {c:?}, which a systemd unit would split or unquote: move the project (or the aurad binary) to a path without it, or write the unit by hand"
        ));
    }
    Ok(text.replace('%', "%%"))
}

/// The user a system unit runs as.
struct Owner {
    name: String,
    home: PathBuf,
    uid: u32,
    gid: u32,
}

/// The owner of the project directory, from /etc/passwd (numeric when it
/// has no entry there).
fn owner_of(root: &Path) -> Result<Owner, ServiceError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(root)
        .map_err(|e| ServiceError::Other(format!("{}: {e}", root.display())))?;
    let (uid, gid) = (meta.uid(), meta.gid());
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let entry = passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 6 && fields[2].parse::<u32>() == Ok(uid)).then(|| {
            let gid = fields[3].parse::<u32>().unwrap_or(gid);
            (fields[0].to_string(), PathBuf::from(fields[5]), gid)
        })
    });
    Ok(match entry {
        Some((name, home, gid)) => Owner {
            name,
            home,
            uid,
            gid,
        },
        None => Owner {
            name: uid.to_string(),
            home: PathBuf::from(format!("/var/tmp/aurad-{uid}")),
            uid,
            gid,
        },
    })
}

/// Where systemd looks for units of `scope`.
pub fn unit_dir(scope: Scope) -> Result<PathBuf, String> {
    match scope {
        Scope::System => Ok(PathBuf::from("/etc/systemd/system")),
        Scope::User => {
            let env = |name: &str| {
                std::env::var_os(name)
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
                    .filter(|p| p.is_absolute())
            };
            env("XDG_CONFIG_HOME")
                .or_else(|| env("HOME").map(|h| h.join(".config")))
                .map(|config| config.join("systemd/user"))
                .ok_or_else(|| {
                    "neither XDG_CONFIG_HOME nor HOME is set: give --unit-dir".to_string()
                })
        }
    }
}

/// What [`install`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Installed {
    /// The unit was written at this path.
    Written(PathBuf),
    /// The same unit was already there.
    Unchanged(PathBuf),
}

/// Writes `unit` into `dir` (made if missing), through a temporary file
/// renamed into place; refuses to replace a different unit of that name.
pub fn install(unit: &Unit, dir: &Path) -> Result<Installed, String> {
    let path = dir.join(&unit.name);
    match std::fs::read(&path) {
        Ok(existing) if existing == unit.text.as_bytes() => return Ok(Installed::Unchanged(path)),
        Ok(_) => {
            return Err(format!(
                "{} exists and differs from this unit: not replaced. Compare with `aurad service | diff {} -`, then remove it (or keep your changes in a drop-in: systemctl edit {}) and run this again",
                path.display(),
                path.display(),
                unit.name
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let tmp = dir.join(format!(".{}.tmp", unit.name));
    std::fs::write(&tmp, &unit.text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!(
                "cannot write {}: {e}{}",
                path.display(),
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    " (a system unit needs root: sudo, or --user for your own service manager)"
                } else {
                    ""
                }
            )
        })?;
    make_state_dir(unit)?;
    Ok(Installed::Written(path))
}

/// Makes the daemon's private folder the unit lets it write (ProtectHome=
/// keeps it from making it itself), each new folder private to the user
/// the unit runs as.
fn make_state_dir(unit: &Unit) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let mut missing = Vec::new();
    let mut at = unit.state.as_path();
    while !at.exists() {
        missing.push(at.to_path_buf());
        match at.parent() {
            Some(parent) => at = parent,
            None => break,
        }
    }
    for dir in missing.iter().rev() {
        let made = std::fs::create_dir(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
            .and_then(|()| match unit.owner {
                Some((uid, gid)) => std::os::unix::fs::chown(dir, Some(uid), Some(gid)),
                None => Ok(()),
            });
        made.map_err(|e| {
            format!(
                "cannot make aurad's private folder {}: {e}; make it (mkdir -p, owned by the unit's user) and run this again",
                dir.display()
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{unit_name, unit_path};
    use std::path::Path;

    #[test]
    fn unit_names_keep_only_what_systemd_allows() {
        assert_eq!(unit_name(Path::new("/srv/demo")), "aurad-demo.service");
        assert_eq!(
            unit_name(Path::new("/srv/my agents@home")),
            "aurad-my-agents-home.service"
        );
        assert_eq!(unit_name(Path::new("/")), "aurad.service");
    }

    #[test]
    fn unit_paths_escape_specifiers_and_refuse_spaces() {
        assert_eq!(unit_path(Path::new("/srv/a%b")).as_deref(), Ok("/srv/a%%b"));
        let refused = unit_path(Path::new("/srv/my agents")).unwrap_err();
        assert!(refused.contains("move the project"), "{refused}");
    }
}
