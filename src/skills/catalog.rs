//! Skills offered as a catalog (progressive disclosure, as the Agent Skills
//! format intends): which skills an agent may load ([`catalog_skills`]), the
//! one system message listing their names and one-line descriptions
//! ([`catalog_message`]), and what loading one returns ([`loaded_text`]: its
//! instructions and the paths of its bundled files). The tool that loads
//! them is built on the run path (`run::skill_tool`), which may use both
//! `skills` and `tools`. Pure functions; depends on config (the agent's
//! `skills:` choice).

use super::{Skill, select_skills};
use crate::config::agent::SkillsChoice;

/// The name of the tool that loads a skill of the catalog.
pub const LOAD_SKILL: &str = "load_skill";

/// The skills an agent with `choice` may load: every skill that is not
/// hidden (`auto`), exactly those named (hidden or not; an unknown name is
/// an error listing the known ones), or none. The input plays no part:
/// the model chooses.
pub fn catalog_skills<'a>(
    skills: &'a [Skill],
    choice: &SkillsChoice,
) -> Result<Vec<&'a Skill>, String> {
    Ok(match choice {
        SkillsChoice::Auto => skills.iter().filter(|s| !s.hidden).collect(),
        named => select_skills(skills, named, "")?
            .into_iter()
            .map(|(skill, _)| skill)
            .collect(),
    })
}

/// `text` on one line: every run of whitespace (newlines included) made one
/// space.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The system message that lists `skills` for the model:
/// `[Skills]`, how to load one, then `- name: description` per skill.
/// Empty when `skills` is (then send no message).
pub fn catalog_message(skills: &[&Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut message = format!(
        "[Skills]\nSkills you can use. Each line names a skill and says what it is for. \
         When the task fits one, call `{LOAD_SKILL}` with its name to read its instructions \
         before you act; load only the skills the task needs.\n"
    );
    for skill in skills {
        message.push_str(&format!(
            "- {}: {}\n",
            skill.name,
            one_line(&skill.description)
        ));
    }
    message.truncate(message.trim_end().len());
    message
}

/// What loading `skill` returns to the model: its name, its instructions
/// (the SKILL.md body; the description when the body is empty) and, when
/// its folder holds other files, their paths from the project root.
pub fn loaded_text(skill: &Skill) -> String {
    let mut text = format!("[Skill: {}]\n", skill.name);
    if skill.body.is_empty() {
        text.push_str(&skill.description);
    } else {
        text.push_str(&skill.body);
    }
    let files = &skill.files;
    if !files.paths.is_empty() {
        text.push_str(
            "\n\nFiles of this skill (paths from the project root; read one when the instructions call for it):",
        );
        for path in &files.paths {
            text.push_str(&format!("\n- {}", path.display()));
        }
        if files.more {
            text.push_str("\n- (more files in its folder are not listed)");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_lists_every_visible_skill_and_named_exactly_those() {
        let mut hidden = Skill::new("h", "Hidden.", "");
        hidden.hidden = true;
        let skills = [Skill::new("a", "A.", ""), Skill::new("b", "B.", ""), hidden];
        let names = |choice: &SkillsChoice| -> Vec<String> {
            catalog_skills(&skills, choice)
                .unwrap()
                .into_iter()
                .map(|s| s.name.clone())
                .collect()
        };
        assert_eq!(names(&SkillsChoice::Auto), ["a", "b"]);
        assert_eq!(names(&SkillsChoice::Named(vec!["h".into()])), ["h"]);
        assert!(names(&SkillsChoice::None).is_empty());
        let err = catalog_skills(&skills, &SkillsChoice::Named(vec!["zz".into()])).unwrap_err();
        assert!(err.contains("`zz`; known skills: a, b, h"), "{err}");
    }

    #[test]
    fn the_message_lists_names_and_one_line_descriptions_without_bodies() {
        let pdf = Skill::new(
            "pdf",
            "Work with PDF files.\n  Merge,\tsplit.",
            "SECRET BODY",
        );
        let docx = Skill::new("docx", "Word documents.", "OTHER BODY");
        let message = catalog_message(&[&pdf, &docx]);
        assert!(message.starts_with("[Skills]\n"), "{message}");
        assert!(message.contains("call `load_skill` with its name"));
        assert!(
            message
                .ends_with("\n- pdf: Work with PDF files. Merge, split.\n- docx: Word documents."),
            "{message}"
        );
        assert!(!message.contains("BODY"));
        assert_eq!(catalog_message(&[]), "");
    }

    #[test]
    fn loading_gives_the_body_and_the_bundled_files() {
        let mut pdf = Skill::new("pdf", "PDF files.", "Use pypdf.");
        assert_eq!(loaded_text(&pdf), "[Skill: pdf]\nUse pypdf.");
        pdf.files.paths = vec!["skills/pdf/forms.md".into(), "skills/pdf/fill.py".into()];
        pdf.files.more = true;
        assert_eq!(
            loaded_text(&pdf),
            "[Skill: pdf]\nUse pypdf.\n\nFiles of this skill (paths from the project root; read one when the instructions call for it):\n- skills/pdf/forms.md\n- skills/pdf/fill.py\n- (more files in its folder are not listed)"
        );
        let bare = Skill::new("bare", "Only a description.", "");
        assert_eq!(loaded_text(&bare), "[Skill: bare]\nOnly a description.");
    }
}
