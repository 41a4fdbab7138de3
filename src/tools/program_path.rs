//! Where a program named without a slash (`bash`, a plugin's `python3`) is
//! on the daemon's `PATH`, found once and remembered, so that each start
//! executes it directly. Started by its bare name, the child tries `execve`
//! in every `PATH` entry ahead of the program's (`posix_spawnp`), and the
//! daemon's thread waits for all of them: 8 failed calls per start on a
//! typical developer's `PATH`, about 25 µs (BENCHMARKS.md, issue #17). A
//! remembered path is checked (one `stat`) at each use and looked up again
//! if it is no longer an executable file. A name not found, or found only
//! after a relative `PATH` entry (which the child would resolve in its own
//! working directory), is left as it is: the child searches as it always
//! did. Depends on std only.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// The paths found so far, by name.
static FOUND: Mutex<BTreeMap<OsString, PathBuf>> = Mutex::new(BTreeMap::new());

/// The path to execute for `program`: the first `PATH` entry's executable
/// file of that name (what `execvp` would run), or `None` if `program` holds
/// a slash or [`find`] gives nothing (then it is started as it is).
pub fn resolve(program: &OsStr) -> Option<PathBuf> {
    if program.is_empty() || program.as_bytes().contains(&b'/') {
        return None;
    }
    let mut found = FOUND.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(path) = found.get(program) {
        if is_executable_file(path) {
            return Some(path.clone());
        }
        found.remove(program);
    }
    let path = find(program, &std::env::var_os("PATH")?)?;
    found.insert(program.to_owned(), path.clone());
    Some(path)
}

/// The first entry of `search_path` (a `PATH` value) holding an executable
/// file named `program`, or `None` if a relative entry (`.`, or an empty
/// one, which `execvp` takes for `.`) comes before it: the child resolves
/// those against its own working directory, which is not the daemon's, so
/// the search is left to it.
pub fn find(program: &OsStr, search_path: &OsStr) -> Option<PathBuf> {
    for dir in std::env::split_paths(search_path) {
        if !dir.is_absolute() {
            return None;
        }
        let path = dir.join(program);
        if is_executable_file(&path) {
            return Some(path);
        }
    }
    None
}

/// Whether `path` is a file someone may execute.
pub fn is_executable_file(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn file(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn the_first_entry_with_an_executable_file_wins() {
        let (a, b, c) = (
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
            tempfile::tempdir().unwrap(),
        );
        file(a.path(), "tool", 0o644); // not executable: skipped
        fs::create_dir(b.path().join("tool")).unwrap(); // a directory: skipped
        let wanted = file(c.path(), "tool", 0o755);
        let later = tempfile::tempdir().unwrap();
        file(later.path(), "tool", 0o755);
        let search =
            std::env::join_paths([a.path(), b.path(), c.path(), Path::new(""), later.path()])
                .unwrap();
        assert_eq!(find(OsStr::new("tool"), &search), Some(wanted));
        assert_eq!(find(OsStr::new("absent"), &search), None);
    }

    #[test]
    fn a_relative_entry_before_the_program_leaves_the_search_to_the_child() {
        let dir = tempfile::tempdir().unwrap();
        file(dir.path(), "tool", 0o755);
        for relative in ["", ".", "bin"] {
            let search = std::env::join_paths([Path::new(relative), dir.path()]).unwrap();
            assert_eq!(find(OsStr::new("tool"), &search), None, "{relative:?}");
        }
    }

    #[test]
    fn names_with_a_slash_and_unknown_names_are_left_alone() {
        assert_eq!(resolve(OsStr::new("./bash")), None);
        assert_eq!(resolve(OsStr::new("/usr/bin/env")), None);
        assert_eq!(resolve(OsStr::new("")), None);
        assert_eq!(resolve(OsStr::new("no-such-program-aurad-test")), None);
    }

    #[test]
    fn a_program_on_path_is_found_and_remembered() {
        let Some(path) = resolve(OsStr::new("sh")) else {
            panic!("sh is not on PATH");
        };
        assert!(path.is_absolute() && path.ends_with("sh"), "{path:?}");
        assert!(is_executable_file(&path));
        assert_eq!(resolve(OsStr::new("sh")), Some(path));
        let found = FOUND.lock().unwrap();
        assert!(found.contains_key(OsStr::new("sh")));
    }

    #[test]
    fn a_remembered_path_that_went_away_is_looked_up_again() {
        let gone = tempfile::tempdir().unwrap();
        let stale = file(gone.path(), "sh", 0o755);
        FOUND
            .lock()
            .unwrap()
            .insert("sh-stale-test".into(), stale.clone());
        fs::remove_file(&stale).unwrap();
        // Not on PATH under that name: forgotten, and left as it is.
        assert_eq!(resolve(OsStr::new("sh-stale-test")), None);
        assert!(
            !FOUND
                .lock()
                .unwrap()
                .contains_key(OsStr::new("sh-stale-test"))
        );
    }
}
