//! Finds and loads the skills of a project: every `NAME/SKILL.md` under
//! `skills/`, then `.agents/skills/`, then `.claude/skills/` (the folders
//! Agent Skills clients use), in that order; on a name clash the first one
//! found wins and the other is reported. Reads files only; the parsing is
//! [`super::parse`]'s.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{Skill, parse};
use crate::config::Diagnostic;
use crate::config::bounds;

/// The folders scanned for skills, relative to the project root, in
/// precedence order.
pub const SKILL_ROOTS: [&str; 3] = ["skills", ".agents/skills", ".claude/skills"];

/// Loads every skill of the project at `root`, in name order. Skills with
/// errors are left out; the diagnostics say why (warnings for what loaded
/// anyway). No skill folder at all: no skills, no diagnostics. A folder
/// without `SKILL.md` is a warning.
pub fn load_skills(root: &Path) -> (Vec<Skill>, Vec<Diagnostic>) {
    let mut skills: Vec<Skill> = Vec::new();
    let mut diags = Vec::new();
    let mut first_seen: HashMap<String, PathBuf> = HashMap::new();
    for rel_dir in SKILL_ROOTS {
        for skill in load_dir(root, Path::new(rel_dir), &mut diags) {
            if let Some(kept) = first_seen.get(&skill.name) {
                diags.push(Diagnostic::warning(
                    &skill.path,
                    (0, 0),
                    format!(
                        "a skill named `{}` is already loaded from {}, which comes first \
                         (order: {}); this one is ignored: rename or remove one of them",
                        skill.name,
                        kept.display(),
                        SKILL_ROOTS.join(", ")
                    ),
                ));
                continue;
            }
            first_seen.insert(skill.name.clone(), skill.path.clone());
            skills.push(skill);
        }
    }
    skills.sort_by(|a, b| a.name.cmp(&b.name));
    (skills, diags)
}

/// The skills of one scanned folder (`rel_dir`, relative to `root`), in
/// folder-name order.
fn load_dir(root: &Path, rel_dir: &Path, diags: &mut Vec<Diagnostic>) -> Vec<Skill> {
    let dir = root.join(rel_dir);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            let message = format!("cannot read the skills directory: {e}");
            diags.push(Diagnostic::error(rel_dir, (0, 0), message));
            return Vec::new();
        }
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    let mut skills = Vec::new();
    for path in paths {
        let Some(folder) = path
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_string)
        else {
            diags.push(Diagnostic::warning(
                rel_dir,
                (0, 0),
                format!(
                    "skipping {}: its name is not UTF-8; rename it",
                    path.display()
                ),
            ));
            continue;
        };
        if folder.starts_with('.') {
            continue;
        }
        let rel = rel_dir.join(&folder);
        if !path.is_dir() {
            diags.push(Diagnostic::warning(
                &rel,
                (0, 0),
                format!(
                    "not a skill: skills are folders; move it to {}/NAME/SKILL.md or out of {}/",
                    rel_dir.display(),
                    rel_dir.display()
                ),
            ));
            continue;
        }
        let file = path.join("SKILL.md");
        let rel_file = rel.join("SKILL.md");
        if !file.is_file() {
            diags.push(Diagnostic::warning(
                &rel,
                (0, 0),
                format!(
                    "the folder has no SKILL.md, so it is not a skill: add {} \
                     (front matter `name: {folder}` and `description:`) or remove the folder",
                    rel_file.display()
                ),
            ));
            continue;
        }
        let read = bounds::read_bounded(&file, &rel_file)
            .and_then(|bytes| bounds::decode(bytes.unwrap_or_default(), &rel_file));
        let text = match read {
            Ok(text) => text,
            Err(d) => {
                diags.push(d);
                continue;
            }
        };
        let (skill, skill_diags) = parse::parse_skill(&folder, &rel_file, &text);
        diags.extend(skill_diags);
        skills.extend(skill.map(|mut skill| {
            skill.files = bundled_files(root, &rel);
            skill
        }));
    }
    skills
}

/// The most files of one skill's folder [`bundled_files`] lists.
pub const MAX_BUNDLED_FILES: usize = 100;
/// How deep under a skill's folder [`bundled_files`] looks (the folder's
/// own files are depth 1).
pub const MAX_BUNDLED_DEPTH: usize = 4;

/// The files of a skill's folder besides its `SKILL.md`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BundledFiles {
    /// Relative to the project root, in path order.
    pub paths: Vec<PathBuf>,
    /// The folder holds more than [`MAX_BUNDLED_FILES`] (or deeper
    /// folders than [`MAX_BUNDLED_DEPTH`]): `paths` is not all of them.
    pub more: bool,
}

/// The regular files under the skill folder `rel_dir` (relative to
/// `root`), except its `SKILL.md` and names starting with `.`; symbolic
/// links are not followed nor listed; at most [`MAX_BUNDLED_FILES`], at
/// most [`MAX_BUNDLED_DEPTH`] folders deep. A folder that cannot be read
/// lists nothing from it.
pub fn bundled_files(root: &Path, rel_dir: &Path) -> BundledFiles {
    let mut found = BundledFiles::default();
    let mut folders = vec![(rel_dir.to_path_buf(), 1usize)];
    while let Some((folder, depth)) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(root.join(&folder)) else {
            continue;
        };
        let mut entries: Vec<(String, std::fs::FileType)> = entries
            .filter_map(Result::ok)
            .filter_map(|e| Some((e.file_name().into_string().ok()?, e.file_type().ok()?)))
            .filter(|(name, _)| !name.starts_with('.'))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, kind) in entries {
            let rel = folder.join(&name);
            if kind.is_dir() {
                if depth < MAX_BUNDLED_DEPTH {
                    folders.push((rel, depth + 1));
                } else {
                    found.more = true;
                }
            } else if kind.is_file() && !(depth == 1 && name == "SKILL.md") {
                if found.paths.len() == MAX_BUNDLED_FILES {
                    found.more = true;
                    break;
                }
                found.paths.push(rel);
            }
        }
    }
    found.paths.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_files_are_listed_without_skill_md_dot_files_or_links() {
        let dir = tempfile::tempdir().unwrap();
        let skill = dir.path().join("skills/pdf");
        std::fs::create_dir_all(skill.join("scripts/deep/er/still")).unwrap();
        for file in [
            "reference.md",
            ".hidden",
            "scripts/fill.py",
            "scripts/deep/er/x.txt",
            "scripts/deep/er/still/too-deep.txt",
        ] {
            std::fs::write(skill.join(file), "x").unwrap();
        }
        std::fs::write(
            skill.join("SKILL.md"),
            "---\nname: pdf\ndescription: PDF files.\n---\nBody.\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", skill.join("link")).unwrap();
        let files = bundled_files(dir.path(), Path::new("skills/pdf"));
        let shown: Vec<String> = files
            .paths
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            shown,
            [
                "skills/pdf/reference.md",
                "skills/pdf/scripts/deep/er/x.txt",
                "skills/pdf/scripts/fill.py",
            ]
        );
        assert!(files.more, "a folder past the depth limit is not all shown");
        let (skills, _) = load_skills(dir.path());
        assert_eq!(skills[0].files, files);
    }

    #[test]
    fn at_most_max_bundled_files() {
        let dir = tempfile::tempdir().unwrap();
        let skill = dir.path().join("skills/many");
        std::fs::create_dir_all(&skill).unwrap();
        for i in 0..MAX_BUNDLED_FILES + 5 {
            std::fs::write(skill.join(format!("f{i:03}")), "x").unwrap();
        }
        let files = bundled_files(dir.path(), Path::new("skills/many"));
        assert_eq!(files.paths.len(), MAX_BUNDLED_FILES);
        assert!(files.more);
        let small = bundled_files(dir.path(), Path::new("skills/none-here"));
        assert_eq!(small, BundledFiles::default());
    }
}
