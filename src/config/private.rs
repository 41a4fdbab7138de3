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

/// What the running daemons of the project at `root` wrote: the one whose
/// process still runs and wrote last. An error when none runs.
pub fn running_api(root: &Path, env: EnvLookup) -> std::io::Result<ApiAccess> {
    let dir = project_dir(root, env);
    let mut found: Vec<(std::time::SystemTime, ApiAccess)> = Vec::new();
    for entry in std::fs::read_dir(&dir)?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("api-") && name.ends_with(".json")) {
            continue;
        }
        let Ok(access) = read_api_file(&entry.path()) else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let alive = i32::try_from(access.pid).is_ok_and(|pid| unsafe { libc::kill(pid, 0) } == 0);
        let written = entry.metadata().and_then(|m| m.modified());
        if let (true, Ok(written)) = (alive, written) {
            found.push((written, access));
        }
    }
    found.sort_by_key(|(written, _)| *written);
    found.pop().map(|(_, access)| access).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "no running aurad serve wrote its address in {}",
                dir.display()
            ),
        )
    })
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
/// `0700`, the file `0600`), replacing what was there in one step.
pub fn write_api_file(path: &Path, access: &ApiAccess) -> std::io::Result<()> {
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
    std::fs::rename(&temporary, path)
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
    fn the_running_daemon_is_the_newest_whose_process_lives() {
        let state = tempfile::tempdir().unwrap();
        let path = state.path().to_string_lossy().into_owned();
        let env = move |name: &str| (name == "XDG_STATE_HOME").then(|| path.clone());
        let root = Path::new("/nonexistent/project");
        assert_eq!(
            running_api(root, &env).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        let gone = ApiAccess {
            listen: "127.0.0.1:1".parse().unwrap(),
            token: "gone".into(),
            pid: u32::MAX - 1,
        };
        write_api_file(&api_file(root, 1, &env), &gone).unwrap();
        let me = ApiAccess {
            listen: "127.0.0.1:2".parse().unwrap(),
            token: "mine".into(),
            pid: std::process::id(),
        };
        write_api_file(&api_file(root, 2, &env), &me).unwrap();
        assert_eq!(running_api(root, &env).unwrap(), me);
    }
}
