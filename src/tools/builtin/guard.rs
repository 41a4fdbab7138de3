//! [`ProtectedPaths`]: the one rule of which project files the file tools
//! may not touch. The project's control files (`agents/`, `skills/`,
//! `.agents/skills/`, `.claude/skills/`, `tools.d/`, `mcp.json`,
//! `.mcp.json`, `.vscode/mcp.json`, `aurad.yaml`), the database with its `-wal`/`-shm`/`-journal`, the
//! daemon's lock file and `.env`-style files are never written, moved or
//! deleted by a tool: an agent that could write them could give itself
//! `bash`, a schedule or an MCP server, and the daemon would load it within
//! seconds. The database and `.env` files are not readable either (they
//! hold run logs and secrets); the other control files stay readable.
//!
//! Paths are checked after [`super::resolve_in_root`] made them real (no
//! `..`, no symbolic links, the nearest existing ancestor of a new path
//! resolved), so a link inside the project that points at `agents/` is
//! refused like `agents/` itself. The file is then opened with
//! [`open_without_links`], so a directory swapped for a link between the
//! check and the open (by a `bash` call of the same turn) cannot redirect
//! it.
//!
//! Paths are not enough: a hard link elsewhere in the project is the same
//! file as `agents/a.yaml` (or `.env`) under another name, and a control
//! file may be a symbolic link to a file outside the control directories.
//! So once a file is open, [`ProtectedPaths::check_open`] looks at the
//! file itself: a file with several names (hard links) is neither read nor
//! written by a tool, and no file the daemon loads or runs is written,
//! whatever the name it is reached by: the files of the control trees and
//! what their links point to, and the programs and scripts a `tools.d`
//! command or an MCP server runs, with an MCP server's `envFile`
//! ([`ProtectedPaths::executing`]), compared by device and inode.
//! Depends on std, libc and `tools` only.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use crate::tools::ToolError;

/// Directories of the project whose whole tree is control files.
const PROTECTED_TREES: [&[&str]; 7] = [
    &["agents"],
    &["channels"],
    &[".vscode", "mcp.json"],
    &["skills"],
    &[".agents", "skills"],
    &[".claude", "skills"],
    &["tools.d"],
];
/// Control files at the project root.
const PROTECTED_ROOT_FILES: [&str; 3] = ["mcp.json", ".mcp.json", "aurad.yaml"];
/// What SQLite keeps next to the database file.
const DATABASE_SUFFIXES: [&str; 4] = ["", "-wal", "-shm", "-journal"];

/// What a tool wants to do with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read a file or list a directory.
    Read,
    /// Create, write, move or delete.
    Write,
}

/// The files of one project that tools may not touch; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectedPaths {
    /// `None` on PostgreSQL: no database file in the project.
    database: Option<PathBuf>,
    lock_file: PathBuf,
    /// What the daemon runs or reads as configuration besides the control
    /// trees (absolute): `tools.d` programs and scripts, MCP servers'
    /// commands, scripts and `envFile`s.
    executed: Vec<PathBuf>,
}

impl ProtectedPaths {
    /// The database file (from the settings' `database`) and the daemon's
    /// lock file, as absolute paths (resolved again at each check, so a
    /// database directory created later is still matched).
    pub fn new(database: impl Into<PathBuf>, lock_file: impl Into<PathBuf>) -> Self {
        ProtectedPaths {
            database: Some(database.into()),
            lock_file: lock_file.into(),
            executed: Vec::new(),
        }
    }

    /// The same, with `paths` (the programs, scripts and `envFile`s the
    /// daemon runs or reads) protected too.
    pub fn executing(mut self, paths: impl IntoIterator<Item = PathBuf>) -> Self {
        self.executed.extend(paths);
        self
    }

    /// The daemon's lock file alone, for a project whose store is not a
    /// file (PostgreSQL).
    pub fn lock_only(lock_file: impl Into<PathBuf>) -> Self {
        ProtectedPaths {
            database: None,
            lock_file: lock_file.into(),
            executed: Vec::new(),
        }
    }

    /// The defaults of a project at `root`: `aurad.db` and `.aurad.lock`.
    pub fn defaults(root: &Path) -> Self {
        ProtectedPaths::new(root.join("aurad.db"), root.join(".aurad.lock"))
    }

    /// Refuses `real` (a path resolved by `resolve_in_root` inside the
    /// canonical `root`) when `access` is not allowed on it. `shown` is the
    /// path as the model gave it, for the message.
    pub fn check(
        &self,
        root: &Path,
        real: &Path,
        access: Access,
        shown: &str,
    ) -> Result<(), ToolError> {
        match self.why_protected(root, real, access) {
            None => Ok(()),
            Some(why) => Err(ToolError::Failed(format!(
                "{shown:?} is {why}; tools may not {} it. Choose another path",
                match access {
                    Access::Read => "read",
                    Access::Write => "create, change or delete",
                }
            ))),
        }
    }

    /// What `real` is when `access` to it is refused, else `None`.
    fn why_protected(&self, root: &Path, real: &Path, access: Access) -> Option<&'static str> {
        let name = real.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == ".env" || name.starts_with(".env.") {
            return Some("an environment file, which holds secrets");
        }
        if let Some(database) = &self.database {
            for db in database_files(database) {
                if resolve_lenient(&db) == real {
                    return Some("the daemon's database");
                }
            }
        }
        if access == Access::Read {
            return None;
        }
        if resolve_lenient(&self.lock_file) == real {
            return Some("the daemon's lock file");
        }
        let rel = real.strip_prefix(root).ok()?;
        let parts: Vec<&str> = rel
            .components()
            .filter_map(|c| match c {
                Component::Normal(part) => part.to_str(),
                _ => None,
            })
            .collect();
        if parts.len() == 1 && PROTECTED_ROOT_FILES.contains(&parts[0]) {
            return Some("a control file of the project (it configures the daemon)");
        }
        if PROTECTED_TREES.iter().any(|tree| parts.starts_with(tree)) {
            return Some(
                "in a control directory of the project (agents, skills and tools the daemon loads)",
            );
        }
        None
    }
}

impl ProtectedPaths {
    /// Checks the file `file`, just opened at `shown` for `access`, by what
    /// it is rather than its name: see the module docs.
    pub fn check_open(
        &self,
        root: &Path,
        file: &File,
        access: Access,
        shown: &str,
    ) -> Result<(), ToolError> {
        use std::os::unix::fs::MetadataExt;
        let meta = file
            .metadata()
            .map_err(|e| ToolError::Failed(format!("cannot look at {shown:?}: {e}")))?;
        if !meta.is_file() {
            return Ok(());
        }
        if meta.nlink() > 1 {
            return Err(ToolError::Failed(format!(
                "{shown:?} has {} names (hard links), and one of them may be a file tools may not touch; tools {} files with one name only. Use another file",
                meta.nlink(),
                match access {
                    Access::Read => "read",
                    Access::Write => "write",
                }
            )));
        }
        if access == Access::Write && self.identities(root).contains(&(meta.dev(), meta.ino())) {
            return Err(ToolError::Failed(format!(
                "{shown:?} is a file the daemon loads or runs (a control file, or a program, script or envFile of tools.d or mcp.json, reached under another name); tools may not change it. Choose another path"
            )));
        }
        Ok(())
    }

    /// Device and inode of every file the daemon loads or runs: the
    /// control trees' and root files (their links followed) and
    /// [`ProtectedPaths::executing`]'s (a folder's files included).
    fn identities(&self, root: &Path) -> std::collections::HashSet<(u64, u64)> {
        let mut found = std::collections::HashSet::new();
        let mut budget = MAX_PROTECTED_FILES;
        let mut starts: Vec<PathBuf> = PROTECTED_TREES
            .iter()
            .map(|tree| tree.iter().fold(root.to_path_buf(), |p, part| p.join(part)))
            .collect();
        starts.extend(PROTECTED_ROOT_FILES.iter().map(|name| root.join(name)));
        starts.extend(self.executed.iter().cloned());
        for start in starts {
            collect_identities(&start, 0, &mut budget, &mut found);
        }
        found
    }
}

/// The most files [`ProtectedPaths::identities`] looks at: control trees
/// are small; a bigger one is cut rather than stall a tool call.
const MAX_PROTECTED_FILES: usize = 20_000;

/// Adds the identity of `path` (its link followed) and, for a folder, of
/// everything beneath it (links followed, loops cut by depth).
fn collect_identities(
    path: &Path,
    depth: usize,
    budget: &mut usize,
    found: &mut std::collections::HashSet<(u64, u64)>,
) {
    use std::os::unix::fs::MetadataExt;
    if *budget == 0 || depth > 16 {
        return;
    }
    *budget -= 1;
    let Ok(meta) = fs::metadata(path) else {
        return;
    };
    found.insert((meta.dev(), meta.ino()));
    if meta.is_dir()
        && let Ok(entries) = fs::read_dir(path)
    {
        for entry in entries.flatten() {
            collect_identities(&entry.path(), depth + 1, budget, found);
        }
    }
}

/// The files of the SQLite database at `database`: itself and what SQLite
/// keeps beside it.
pub fn database_files(database: &Path) -> [PathBuf; 4] {
    DATABASE_SUFFIXES.map(|suffix| with_suffix(database, suffix))
}

/// `path` with `suffix` appended to its file name.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut text = path.as_os_str().to_owned();
    text.push(suffix);
    PathBuf::from(text)
}

/// `path` with its nearest existing ancestor made real (symbolic links and
/// `..` resolved) and the rest appended; `path` as given when nothing of
/// it resolves. Blocking.
pub fn resolve_lenient(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut current = path;
    loop {
        match fs::canonicalize(current) {
            Ok(mut real) => {
                for name in missing.iter().rev() {
                    real.push(name);
                }
                return real;
            }
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                match (current.parent(), current.file_name()) {
                    (Some(parent), Some(name)) => {
                        missing.push(name.to_owned());
                        current = parent;
                    }
                    _ => return path.to_path_buf(),
                }
            }
            Err(_) => return path.to_path_buf(),
        }
    }
}

/// Opens `real`, a path already made real (no symbolic link in it), with
/// `flags` (`O_RDONLY`, or `O_WRONLY | O_CREAT` with `O_TRUNC` or
/// `O_APPEND`), refusing any symbolic link met on the way (`openat2` with
/// `RESOLVE_NO_SYMLINKS`): what was checked is what is opened. Kernels
/// without `openat2` (before 5.6) get `O_NOFOLLOW`, which covers the last
/// component only. Blocking.
pub fn open_without_links(real: &Path, flags: libc::c_int) -> io::Result<File> {
    let path = CString::new(real.as_os_str().as_bytes())?;
    // SAFETY: open_how is plain integers; all-zero is its documented
    // default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & libc::O_CREAT != 0 { 0o666 } else { 0 };
    how.resolve = libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: the pointers are to `path` and `how`, alive for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            libc::AT_FDCWD,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd >= 0 {
        // SAFETY: the kernel just gave us this descriptor; nobody else owns it.
        return Ok(unsafe { File::from_raw_fd(fd as libc::c_int) });
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::ENOSYS) {
        return Err(error);
    }
    let access = flags & libc::O_ACCMODE;
    fs::OpenOptions::new()
        .read(access == libc::O_RDONLY)
        .write(access != libc::O_RDONLY)
        .custom_flags((flags & !libc::O_ACCMODE) | libc::O_NOFOLLOW)
        .open(real)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(p: &ProtectedPaths, root: &Path, rel: &str, access: Access) -> bool {
        p.check(root, &root.join(rel), access, rel).is_err()
    }

    #[test]
    fn control_files_are_refused_for_writing_only() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let p = ProtectedPaths::defaults(&root);
        for rel in [
            "agents",
            "agents/evil.yaml",
            "agents/sub/deep.yaml",
            "skills/x/SKILL.md",
            ".agents/skills/x/SKILL.md",
            ".claude/skills/x/SKILL.md",
            "tools.d/x.yaml",
            "tools.d",
            "mcp.json",
            ".mcp.json",
            ".vscode/mcp.json",
            "aurad.yaml",
            ".aurad.lock",
        ] {
            assert!(refused(&p, &root, rel, Access::Write), "{rel}");
            assert!(!refused(&p, &root, rel, Access::Read), "{rel}");
        }
        for rel in [
            "notes/agents/x.yaml",
            "agents.txt",
            "docs/mcp.json",
            ".agents/other.md",
            ".claude/settings.json",
            ".vscode/settings.json",
            "skillset/x",
            "out.txt",
        ] {
            assert!(!refused(&p, &root, rel, Access::Write), "{rel}");
        }
    }

    #[test]
    fn database_and_env_files_are_refused_for_reading_too() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let p = ProtectedPaths::new(root.join("data/x.db"), root.join(".aurad.lock"));
        for rel in [
            "data/x.db",
            "data/x.db-wal",
            "data/x.db-shm",
            "data/x.db-journal",
            ".env",
            ".env.local",
            "sub/.env",
        ] {
            assert!(refused(&p, &root, rel, Access::Read), "{rel}");
            assert!(refused(&p, &root, rel, Access::Write), "{rel}");
        }
        for rel in ["aurad.db", "data/y.db", ".envrc", "env", "x.env"] {
            assert!(!refused(&p, &root, rel, Access::Read), "{rel}");
        }
        let e = p
            .check(&root, &root.join(".env"), Access::Read, ".env")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\".env\" is an environment file"), "{e}");
        assert!(e.contains("tools may not read it"), "{e}");
    }

    #[test]
    fn a_directory_swapped_for_a_link_after_the_check_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        fs::create_dir_all(root.join("agents")).unwrap();
        fs::create_dir(root.join("notes")).unwrap();
        let checked = root.join("notes/x.yaml");
        let write = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
        drop(open_without_links(&checked, write).unwrap());
        fs::remove_file(&checked).unwrap();
        // The swap a concurrent `bash` call could make after the check.
        fs::remove_dir(root.join("notes")).unwrap();
        std::os::unix::fs::symlink(root.join("agents"), root.join("notes")).unwrap();
        let e = open_without_links(&checked, write).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
        assert!(!root.join("agents/x.yaml").exists());
        assert!(open_without_links(&checked, libc::O_RDONLY).is_err());
    }

    #[test]
    fn a_database_path_through_a_link_is_matched() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("via")).unwrap();
        let p = ProtectedPaths::new(root.join("via/a.db"), root.join(".aurad.lock"));
        assert!(refused(&p, &root, "real/a.db-wal", Access::Read));
    }
}
