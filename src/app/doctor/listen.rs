//! The doctor's check of where `aurad serve` listens (`listen:` in
//! aurad.yaml): free, served by this project's daemon (its lock held, the
//! address it wrote), or taken by something else; and a token when it
//! listens beyond loopback. Depends on `daemon` (the lock, the token's
//! length) and `config` (the address the daemon wrote).

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;

use super::{Check, CheckName};
use crate::config::EnvLookup;
use crate::daemon::MIN_TOKEN_CHARS;
use crate::daemon::lock::holder;

pub fn check(root: &Path, listen: SocketAddr, env: EnvLookup) -> Check {
    let token = env("AURAD_TOKEN").filter(|t| !t.is_empty());
    let token_fix = format!(
        "export AURAD_TOKEN=$(openssl rand -hex 16) for `aurad serve` (its clients send it), or `listen: 127.0.0.1:{}` in aurad.yaml",
        listen.port()
    );
    if let Some(token) = &token
        && token.chars().count() < MIN_TOKEN_CHARS
    {
        return Check::error(
            CheckName::Listen,
            format!(
                "AURAD_TOKEN has {} character(s), fewer than the {MIN_TOKEN_CHARS} `aurad serve` takes",
                token.chars().count()
            ),
            token_fix,
        );
    }
    if !listen.ip().is_loopback() && token.is_none() {
        return Check::error(
            CheckName::Listen,
            format!(
                "{listen} is reachable beyond this machine and AURAD_TOKEN is not set: `aurad serve` refuses to start"
            ),
            token_fix,
        );
    }
    let served = holder(root);
    match TcpListener::bind(listen) {
        Ok(_) => {
            let daemon = match served {
                Some(pid) => format!(
                    "; this project's daemon ({}) listens elsewhere",
                    pid.map_or_else(|| "pid unknown".to_string(), |pid| format!("pid {pid}"))
                ),
                None => String::new(),
            };
            Check::ok(CheckName::Listen, format!("{listen} is free{daemon}"))
        }
        Err(e) if e.kind() == ErrorKind::AddrInUse => match serving(root, listen, env, served) {
            Some(pid) => Check::ok(
                CheckName::Listen,
                format!("{listen} is served by this project's daemon (pid {pid})"),
            ),
            _ => Check::error(
                CheckName::Listen,
                format!("{listen} is taken by another program: `aurad serve` cannot listen there"),
                format!(
                    "see what holds it (ss -ltnp 'sport = :{}'), stop it, or choose another `listen:` in aurad.yaml (or `aurad serve --listen ADDR`)",
                    listen.port()
                ),
            ),
        },
        Err(e) => Check::error(
            CheckName::Listen,
            format!("cannot listen on {listen}: {e}"),
            match e.kind() {
                ErrorKind::PermissionDenied => format!(
                    "a port below 1024 needs privileges: use a port above 1024 (`listen: {}:7777`)",
                    listen.ip()
                ),
                _ => "write an address of this machine in `listen:` in aurad.yaml (127.0.0.1:7777 by default)".to_string(),
            },
        ),
    }
}

/// The pid of this project's daemon listening on `listen`, by the address
/// it recorded: the one holding the project lock (`locked`, with the pid
/// it wrote if readable) or, with PostgreSQL, which takes no project lock,
/// any live daemon of the project.
fn serving(
    root: &Path,
    listen: SocketAddr,
    env: EnvLookup,
    locked: Option<Option<u32>>,
) -> Option<u32> {
    let access = crate::config::private::running_api(root, env).ok()?;
    let same = access.listen.port() == listen.port()
        && locked.is_none_or(|pid| pid.is_none_or(|pid| access.pid == pid));
    same.then_some(access.pid)
}
