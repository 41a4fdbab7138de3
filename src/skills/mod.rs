//! Agent Skills: loads the project's skills ([`scan`]: `skills/`,
//! `.agents/skills/`, `.claude/skills/`; each `SKILL.md` read leniently by
//! [`parse`] per the specification's client guide), picks the skills a run
//! gets (ranked against the input by [`rank`], or pinned by the agent) and
//! renders them as the one `[Skills]` system message that goes after the
//! system prompt. Depends on config (diagnostics and the agent's `skills:`
//! choice) and text; does no I/O besides reading the skill folders.

pub mod catalog;
pub mod front_matter;
pub mod parse;
pub mod rank;
pub mod scan;

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use crate::config::agent::SkillsChoice;

pub use rank::{MIN_SCORE, keywords};
pub use scan::{SKILL_ROOTS, load_skills};

/// How many skills auto matching activates at most.
pub const MAX_ACTIVE_SKILLS: usize = 3;

/// A loaded skill (possibly with warnings).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Skill {
    /// Its folder's name (NFKC-normalised): what `skills: [..]` pins and
    /// what the `[Skills]` message shows.
    pub name: String,
    /// `name:` as written, when present (it may differ from the folder's).
    pub declared_name: Option<String>,
    pub description: String,
    /// The Markdown after the front matter, trimmed.
    pub body: String,
    /// Never auto-matched (it can still be pinned): `hidden: true`, or
    /// Claude Code's `disable-model-invocation: true`.
    pub hidden: bool,
    /// `disable-model-invocation: true` was written (one reason for `hidden`).
    pub disable_model_invocation: bool,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    /// `metadata:`, values as text.
    pub metadata: BTreeMap<String, String>,
    /// `allowed-tools:`, one entry per tool. Recorded and shown; aurad's
    /// agent file decides which tools a run may use.
    pub allowed_tools: Vec<String>,
    /// Front-matter fields aurad accepted without using (e.g. Claude Code's
    /// `model`, `argument-hint`), in file order.
    pub unused_fields: Vec<String>,
    /// `<scanned folder>/NAME/SKILL.md`, relative to the project root.
    pub path: PathBuf,
    /// The other files of the skill's folder (scripts, references,
    /// assets), relative to the project root, in path order: what
    /// `load_skill` lists. See [`scan::bundled_files`] for the bounds.
    pub files: scan::BundledFiles,
    /// The skill's words for ranking, computed on first use. A skill
    /// changed after its first match keeps its old words: build a new one.
    pub terms: rank::TermCache,
}

impl Skill {
    /// A skill made in code, as if loaded from `skills/NAME/SKILL.md` with
    /// only `name` and `description`.
    pub fn new(name: &str, description: &str, body: &str) -> Skill {
        Skill {
            name: name.into(),
            description: description.into(),
            body: body.into(),
            path: PathBuf::from(format!("skills/{name}/SKILL.md")),
            ..Skill::default()
        }
    }
}

/// The skills auto matching activates for `input`: ranked by [`rank::rank`]
/// (hidden skills excluded; only scores of at least [`MIN_SCORE`] with an
/// input word in the name or description), best first, ties by name, at
/// most `max` ([`MAX_ACTIVE_SKILLS`] by default).
pub fn match_skills<'a>(skills: &'a [Skill], input: &str, max: usize) -> Vec<(&'a Skill, f64)> {
    let visible: Vec<&Skill> = skills.iter().filter(|s| !s.hidden).collect();
    let mut ranked = rank::rank(&visible, input);
    ranked.truncate(max);
    ranked
}

/// The skills a run of an agent with `choice` gets for `input`, each with its
/// match score (`None` when pinned). `Named` gives exactly those skills, in
/// the order listed, hidden or not; a name without a skill is an error that
/// lists the known ones. `None` gives none.
pub fn select_skills<'a>(
    skills: &'a [Skill],
    choice: &SkillsChoice,
    input: &str,
) -> Result<Vec<(&'a Skill, Option<f64>)>, String> {
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
                    "unknown skill(s) {}; known skills: {} (a skill is skills/NAME/SKILL.md, or in .agents/skills/ or .claude/skills/)",
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
        Skill::new(name, description, body)
    }

    #[test]
    fn token_sets_not_substrings() {
        let skills = [skill("cat", "Cats and kittens.", "")];
        assert!(match_skills(&skills, "a concatenation", 3).is_empty());
        assert_eq!(match_skills(&skills, "my cat", 3)[0].0.name, "cat");
    }

    #[test]
    fn hidden_skills_are_pinned_never_matched() {
        let mut hidden = skill("h", "hidden one", "");
        hidden.hidden = true;
        let skills = [skill("a", "x", ""), hidden];
        assert!(match_skills(&skills, "hidden one h", 3).is_empty());
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
