//! Where aurad keeps what only the person and the daemon may read, never a
//! tool: the credential of a running daemon's API (`api-PORT.json`: where
//! it listens and its token; one per daemon, as several nodes of a cluster
//! may run one project on one machine). It lives outside the project, so the file tools
//! (confined to the project) never reach it, in the user's state directory
//! (`$XDG_STATE_HOME/aurad`, else `$HOME/.local/state/aurad`), one folder
//! per project (a hash of its canonical root). Sandboxed tools are denied
//! reading anything beneath it (`tools::sandbox`); an unsandboxed tool has
//! the user's power and can read it, as docs/security.md says.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::EnvLookup;

/// The folder that holds every project's private files.
pub fn state_dir(env: EnvLookup) -> PathBuf {
    let nonempty = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(state) = nonempty("XDG_STATE_HOME").filter(|p| p.is_absolute()) {
        return state.join("aurad");
    }
    if let Some(home) = nonempty("HOME").filter(|p| p.is_absolute()) {
        return home.join(".local/state/aurad");
    }
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/var/tmp/aurad-{uid}"))
}

/// The private folder of the project at `root`.
pub fn project_dir(root: &Path, env: EnvLookup) -> PathBuf {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    let hash = hex::encode(Sha256::digest(root.as_os_str().as_encoded_bytes()));
    state_dir(env).join(&hash[..16])
}

/// Where the `aurad serve` of the project at `root` listening on `port`
/// says how to reach its API.
pub fn api_file(root: &Path, port: u16, env: EnvLookup) -> PathBuf {
    project_dir(root, env).join(format!("api-{port}.json"))
}

/// What the running daemons of the project at `root` wrote: the one that
/// wrote last among those still running (each holds a lock on its record
/// while it runs, so a record left by a daemon killed with `kill -9` is
/// told apart from a live one without trusting its pid, which may be
/// reused or belong to another pid namespace). [`NoDaemon`] when none runs.
pub fn running_api(root: &Path, env: EnvLookup) -> Result<ApiAccess, NoDaemon> {
    let dir = project_dir(root, env);
    let mut not = NoDaemon {
        dir: dir.clone(),
        stale: Vec::new(),
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(_) => return Err(not),
    };
    let mut found: Vec<(std::time::SystemTime, ApiAccess)> = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("api-") && name.ends_with(".json")) {
            continue;
        }
        let path = entry.path();
        let Ok(access) = read_api_file(&path) else {
            continue;
        };
        let written = entry.metadata().and_then(|m| m.modified());
        match (is_held(&path, access.pid), written) {
            (true, Ok(written)) => found.push((written, access)),
            (false, _) => not.stale.push((path, access)),
            (true, Err(_)) => {}
        }
    }
    found.sort_by_key(|(written, _)| *written);
    found.pop().map(|(_, access)| access).ok_or(not)
}

/// Whether the daemon that wrote the record at `path` still holds its lock.
/// Where the file system has no locks, whether process `pid` exists.
fn is_held(path: &Path, pid: u32) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    match file.try_lock_shared() {
        Ok(()) => false,
        Err(std::fs::TryLockError::WouldBlock) => true,
        // SAFETY: signal 0 only asks whether the process exists.
        Err(std::fs::TryLockError::Error(_)) => {
            i32::try_from(pid).is_ok_and(|pid| unsafe { libc::kill(pid, 0) } == 0)
        }
    }
}

/// No `aurad serve` of a project records its address: where the records
/// were looked for, and those whose daemon is gone.
#[derive(Debug)]
pub struct NoDaemon {
    /// The project's private folder.
    pub dir: PathBuf,
    /// Records whose daemon no longer holds their lock (killed without a
    /// clean stop).
    pub stale: Vec<(PathBuf, ApiAccess)>,
}

impl std::fmt::Display for NoDaemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no running daemon's address is recorded in {}",
            self.dir.display()
        )?;
        for (path, access) in &self.stale {
            write!(
                f,
                "; {} is stale: the daemon that listened on {} (pid {}) is not running (it stopped without cleaning up, e.g. killed)",
                path.display(),
                access.listen,
                access.pid
            )?;
        }
        Ok(())
    }
}

/// What `api.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiAccess {
    /// Where the daemon listens.
    pub listen: SocketAddr,
    /// The bearer token every API request carries.
    pub token: String,
    /// The daemon's process id.
    pub pid: u32,
}

/// Where `aurad chat` keeps the lines typed at its prompt, across
/// projects: in the private folder (`0700`), which sandboxed tools cannot
/// read.
pub fn chat_history_file(env: EnvLookup) -> PathBuf {
    state_dir(env).join("chat-history")
}

/// Creates the folder `dir` (and its parents) readable by the user only.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `access` to `path`, readable by the user only (the folders
/// `0700`, the file `0600`), replacing what was there in one step, and
/// locks it: the record counts as a running daemon's while the returned
/// file stays open (the kernel drops the lock when the process ends in any
/// way). It is locked before it takes its name, so no reader sees it
/// unlocked while its writer runs.
pub fn write_api_file(path: &Path, access: &ApiAccess) -> std::io::Result<std::fs::File> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let text = serde_json::to_string(access).map_err(std::io::Error::other)?;
    let temporary = dir.join(format!(".api.json.{}", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    match file.try_lock() {
        Ok(()) => {}
        // Without locks, readers fall back on the pid.
        Err(std::fs::TryLockError::Error(e)) if e.kind() == std::io::ErrorKind::Unsupported => {}
        Err(e) => return Err(std::io::Error::other(e.to_string())),
    }
    std::fs::rename(&temporary, path)?;
    Ok(file)
}

/// Reads `api.json` at `path`.
pub fn read_api_file(path: &Path) -> std::io::Result<ApiAccess> {
    let text = std::fs::read_to_string(path)?;
    serde_json::from_str(&text).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is not what aurad serve writes: {e}", path.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn the_folder_follows_xdg_then_home_and_is_per_project() {
        let xdg = |name: &str| match name {
            "XDG_STATE_HOME" => Some("/s".to_string()),
            "HOME" => Some("/h".to_string()),
            _ => None,
        };
        let home = |name: &str| (name == "HOME").then(|| "/h".to_string());
        assert_eq!(state_dir(&xdg), Path::new("/s/aurad"));
        assert_eq!(state_dir(&home), Path::new("/h/.local/state/aurad"));
        assert!(state_dir(&|_| None).starts_with("/var/tmp"));
        let (a, b) = (Path::new("/nonexistent/a"), Path::new("/nonexistent/b"));
        assert_ne!(project_dir(a, &home), project_dir(b, &home));
        assert_eq!(project_dir(a, &home), project_dir(a, &home));
        assert!(api_file(a, 7777, &home).starts_with("/h/.local/state/aurad"));
        assert!(api_file(a, 7777, &home).ends_with("api-7777.json"));
    }

    #[test]
    fn the_api_file_is_the_users_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deep/er/api.json");
        let access = ApiAccess {
            listen: "127.0.0.1:7777".parse().unwrap(),
            token: "t".repeat(32),
            pid: 42,
        };
        write_api_file(&path, &access).unwrap();
        assert_eq!(read_api_file(&path).unwrap(), access);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
    }

    #[test]
    fn the_running_daemon_is_the_newest_whose_lock_is_held() {
        let state = tempfile::tempdir().unwrap();
        let path = state.path().to_string_lossy().into_owned();
        let env = move |name: &str| (name == "XDG_STATE_HOME").then(|| path.clone());
        let root = Path::new("/nonexistent/project");
        let none = running_api(root, &env).unwrap_err();
        assert!(none.stale.is_empty());
        assert!(
            none.to_string()
                .contains(&state.path().display().to_string()),
            "{none}"
        );
        // A record whose lock went with its writer, although its pid is ours.
        let gone = ApiAccess {
            listen: "127.0.0.1:1".parse().unwrap(),
            token: "gone".into(),
            pid: std::process::id(),
        };
        drop(write_api_file(&api_file(root, 1, &env), &gone).unwrap());
        let stale = running_api(root, &env).unwrap_err();
        assert_eq!(stale.stale.len(), 1, "{stale}");
        assert!(stale.to_string().contains("127.0.0.1:1 (pid"), "{stale}");
        assert!(stale.to_string().contains("is not running"), "{stale}");
        let me = ApiAccess {
            listen: "127.0.0.1:2".parse().unwrap(),
            token: "mine".into(),
            pid: std::process::id(),
        };
        let _held = write_api_file(&api_file(root, 2, &env), &me).unwrap();
        assert_eq!(running_api(root, &env).unwrap(), me);
    }
}
