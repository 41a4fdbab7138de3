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
        skills.extend(skill);
    }
    skills
}
