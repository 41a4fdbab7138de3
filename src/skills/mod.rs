//! Agent Skills: loads `skills/NAME/SKILL.md` (front matter validated, see
//! [`parse`]), picks the skills a run gets (keyword matching per the seed,
//! with the shared tokenizer of [`crate::text`] so Chinese input without
//! spaces matches too) and renders them as the one `[Skills]` system message
//! that goes after the system prompt. Depends on config (diagnostics and the
//! agent's `skills:` choice) and text; does no I/O besides reading `skills/`.

pub mod parse;

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::config::Diagnostic;
use crate::config::agent::SkillsChoice;
use crate::config::bounds;
use crate::text::tokenize;

/// How many skills auto matching activates at most.
pub const MAX_ACTIVE_SKILLS: usize = 3;

/// Words that say nothing about which skill fits, left out of the input's
/// keywords: common English function words, and the commonest Chinese
/// particles and pronouns (single ideographs, as the tokenizer yields them),
/// which would otherwise match every Chinese skill.
pub const STOP_WORDS: &[&str] = &[
    "the", "a", "an", "and", "or", "of", "to", "in", "for", "is", "are", "on", "with", "it",
    "this", "that", "be", "as", "at", "by", "what", "how", "please", "me", "my", "i", "you", "的",
    "了", "是", "我", "你", "吗", "呢", "吧", "请",
];

/// A loaded, valid skill.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    /// Equals its folder's name.
    pub name: String,
    pub description: String,
    /// The Markdown after the front matter, trimmed.
    pub body: String,
    /// Hidden skills are never auto-matched (they can still be pinned).
    pub hidden: bool,
    /// `skills/NAME/SKILL.md`, relative to the project root.
    pub path: PathBuf,
}

/// Loads every skill of `root/skills/`, in name order. Skills with errors are
/// left out; the diagnostics say why. No `skills/` folder: no skills, no
/// diagnostics. A folder without `SKILL.md` is a warning.
pub fn load_skills(root: &Path) -> (Vec<Skill>, Vec<Diagnostic>) {
    let dir = root.join("skills");
    let rel_dir = Path::new("skills");
    let mut diags = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (Vec::new(), diags),
        Err(e) => {
            let message = format!("cannot read the skills directory: {e}");
            return (
                Vec::new(),
                vec![Diagnostic::error(rel_dir, (0, 0), message)],
            );
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
                "not a skill: skills are folders; move it to skills/NAME/SKILL.md or out of skills/",
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
    skills.sort_by(|a, b| a.name.cmp(&b.name));
    (skills, diags)
}

/// The input's keywords: its distinct tokens (shared tokenizer), in order of
/// first appearance, without [`STOP_WORDS`].
pub fn keywords(input: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    tokenize(input)
        .into_iter()
        .filter(|t| !STOP_WORDS.contains(&t.as_str()))
        .filter(|t| seen.insert(t.clone()))
        .collect()
}

/// The seed's matching with the shared tokenizer: keywords = distinct tokens
/// of the input minus [`STOP_WORDS`]; score = number of keywords found among
/// the tokens of `name + description + body`. Hidden skills are excluded;
/// only scores above 0; best first (ties: by name); at most `max`
/// ([`MAX_ACTIVE_SKILLS`] by default). Token sets, not substrings, so `a`
/// does not match every skill.
pub fn match_skills<'a>(skills: &'a [Skill], input: &str, max: usize) -> Vec<(&'a Skill, usize)> {
    let keywords = keywords(input);
    if keywords.is_empty() {
        return Vec::new();
    }
    let mut scored: Vec<(&Skill, usize)> = skills
        .iter()
        .filter(|s| !s.hidden)
        .filter_map(|skill| {
            let haystack = format!("{} {} {}", skill.name, skill.description, skill.body);
            let tokens: HashSet<String> = tokenize(&haystack).into_iter().collect();
            let score = keywords.iter().filter(|k| tokens.contains(*k)).count();
            (score > 0).then_some((skill, score))
        })
        .collect();
    scored.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.name.cmp(&b.0.name)));
    scored.truncate(max);
    scored
}

/// The skills a run of an agent with `choice` gets for `input`, each with its
/// match score (`None` when pinned). `Named` gives exactly those skills, in
/// the order listed, hidden or not; a name without a skill is an error that
/// lists the known ones. `None` gives none.
pub fn select_skills<'a>(
    skills: &'a [Skill],
    choice: &SkillsChoice,
    input: &str,
) -> Result<Vec<(&'a Skill, Option<usize>)>, String> {
    match choice {
        SkillsChoice::None => Ok(Vec::new()),
        SkillsChoice::Auto => Ok(match_skills(skills, input, MAX_ACTIVE_SKILLS)
            .into_iter()
            .map(|(s, score)| (s, Some(score)))
            .collect()),
        SkillsChoice::Named(names) => {
            let unknown: Vec<&str> = names
                .iter()
                .filter(|n| !skills.iter().any(|s| &s.name == *n))
                .map(String::as_str)
                .collect();
            if !unknown.is_empty() {
                let known: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
                return Err(format!(
                    "unknown skill(s) {}; known skills: {} (a skill is skills/NAME/SKILL.md)",
                    unknown
                        .iter()
                        .map(|n| format!("`{n}`"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ));
            }
            let mut seen = HashSet::new();
            Ok(names
                .iter()
                .filter(|n| seen.insert(n.as_str()))
                .filter_map(|n| skills.iter().find(|s| &s.name == n))
                .map(|s| (s, None))
                .collect())
        }
    }
}

/// The one system message put after the system prompt, per the seed:
/// `[Skills]\n## name\n<description>\n\n<body>\n\n## other...`. Empty when
/// `skills` is (then send no message).
pub fn skills_message(skills: &[&Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let sections: Vec<String> = skills
        .iter()
        .map(|s| {
            if s.body.is_empty() {
                format!("## {}\n{}", s.name, s.description)
            } else {
                format!("## {}\n{}\n\n{}", s.name, s.description, s.body)
            }
        })
        .collect();
    format!("[Skills]\n{}", sections.join("\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, description: &str, body: &str) -> Skill {
        Skill {
            name: name.into(),
            description: description.into(),
            body: body.into(),
            hidden: false,
            path: PathBuf::from(format!("skills/{name}/SKILL.md")),
        }
    }

    #[test]
    fn keywords_are_distinct_without_stop_words() {
        assert_eq!(
            keywords("How to search the web, search!"),
            ["search", "web"]
        );
        assert_eq!(keywords("帮我搜索的"), ["帮", "搜", "索"]);
    }

    #[test]
    fn token_sets_not_substrings() {
        let skills = [skill("cat", "Cats.", "")];
        assert!(match_skills(&skills, "a concatenation", 3).is_empty());
        assert_eq!(match_skills(&skills, "my cat", 3)[0].1, 1);
    }

    #[test]
    fn pinned_and_none() {
        let mut hidden = skill("h", "hidden one", "");
        hidden.hidden = true;
        let skills = [skill("a", "x", ""), hidden];
        let named = SkillsChoice::Named(vec!["h".into(), "a".into(), "h".into()]);
        let got = select_skills(&skills, &named, "nothing").unwrap();
        let names: Vec<&str> = got.iter().map(|(s, _)| s.name.as_str()).collect();
        assert_eq!(names, ["h", "a"]);
        assert!(got.iter().all(|(_, score)| score.is_none()));
        let err = select_skills(&skills, &SkillsChoice::Named(vec!["zz".into()]), "").unwrap_err();
        assert!(err.contains("`zz`; known skills: a, h"), "{err}");
        assert!(
            select_skills(&skills, &SkillsChoice::None, "hidden x")
                .unwrap()
                .is_empty()
        );
    }
}
