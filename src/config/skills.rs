//! An agent's `skills:` field: which skills its runs may use ([`SkillsChoice`]:
//! `auto`, `none` or a list of names) and how they are offered
//! ([`SkillsMode`]: their instructions injected, or a catalog the model
//! loads from). Short forms (`skills: auto`, `skills: none`,
//! `skills: [a, b]`) take the default mode; the mapping form
//! `skills: { mode: catalog, use: [a, b] }` chooses it. Every problem is a
//! located diagnostic. Depends on `config`'s diagnostics only.

use serde_yaml::Value;

use super::diag::Diagnostic;
use super::yaml_value::describe_value;

/// Which skills a run gets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum SkillsChoice {
    /// Injected: those matching the input (at most 3). Catalog: every
    /// skill that is not hidden.
    #[default]
    Auto,
    /// Exactly these, whatever the input.
    Named(Vec<String>),
    None,
}

/// How a run's skills are offered to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SkillsMode {
    /// The chosen skills' instructions are put in one system message
    /// before the first model call.
    Inject,
    /// Progressive disclosure: one system message lists the names and
    /// descriptions of the skills the agent may use, and the tool
    /// `load_skill` returns one skill's instructions when the model asks.
    /// The default: BENCHMARKS.md, "Skills: injected vs catalog".
    #[default]
    Catalog,
}

impl SkillsMode {
    pub const ALL: [SkillsMode; 2] = [SkillsMode::Inject, SkillsMode::Catalog];

    pub fn as_str(self) -> &'static str {
        match self {
            SkillsMode::Inject => "inject",
            SkillsMode::Catalog => "catalog",
        }
    }

    pub fn parse(word: &str) -> Option<SkillsMode> {
        SkillsMode::ALL.into_iter().find(|m| m.as_str() == word)
    }
}

impl std::fmt::Display for SkillsMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The keys of the mapping form.
const KEYS: [&str; 2] = ["mode", "use"];

/// Reads `skills:` (`None`: not written). `err` makes an error located at
/// a key path of the agent file.
pub fn parse_skills(
    raw: Option<&Value>,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
    diags: &mut Vec<Diagnostic>,
) -> (SkillsChoice, SkillsMode) {
    let Some(Value::Mapping(map)) = raw else {
        let choice = raw.map_or(SkillsChoice::Auto, |value| {
            parse_choice(value, &["skills"], err, diags)
        });
        return (choice, SkillsMode::default());
    };
    let mut choice = SkillsChoice::Auto;
    let mut mode = SkillsMode::default();
    for (key, value) in map {
        match key.as_str() {
            Some("use") => choice = parse_choice(value, &["skills", "use"], err, diags),
            Some("mode") => match value.as_str().and_then(SkillsMode::parse) {
                Some(m) => mode = m,
                None => diags.push(err(
                    &["skills", "mode"],
                    format!(
                        "`skills.mode` is {}: write `inject` (the skills' instructions go in the context) or `catalog` (their names and descriptions are listed, and the model loads one with `load_skill`)",
                        describe_value(value)
                    ),
                )),
            },
            _ => {
                let shown = key.as_str().map_or_else(|| describe_value(key), str::to_string);
                diags.push(err(
                    &["skills"],
                    format!(
                        "`skills` has an unknown key `{shown}`: its keys are {}",
                        KEYS.map(|k| format!("`{k}`")).join(" and ")
                    ),
                ));
            }
        }
    }
    (choice, mode)
}

/// `auto`, `none` or a list of names, at `keys`.
fn parse_choice(
    value: &Value,
    keys: &[&str],
    err: &dyn Fn(&[&str], String) -> Diagnostic,
    diags: &mut Vec<Diagnostic>,
) -> SkillsChoice {
    let field = keys.join(".");
    match value {
        Value::String(s) if s == "auto" => SkillsChoice::Auto,
        Value::String(s) if s == "none" => SkillsChoice::None,
        Value::Sequence(items) => {
            let names: Vec<String> = items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            if names.len() != items.len() {
                diags.push(err(
                    keys,
                    format!("`{field}` lists skill names: every item must be a string"),
                ));
            }
            SkillsChoice::Named(names)
        }
        other => {
            let also = if keys.len() == 1 {
                ", or a mapping `{ mode: inject|catalog, use: ... }`"
            } else {
                ""
            };
            diags.push(err(
                keys,
                format!(
                    "`{field}` must be `auto`, `none` or a list of skill names{also}, not {}",
                    describe_value(other)
                ),
            ));
            SkillsChoice::Auto
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::agent::parse_agent;

    /// The agent `model: test, prompt: hi` with `skills` written as given,
    /// and its diagnostics as text.
    fn parse(skills: &str) -> (Option<(SkillsChoice, SkillsMode)>, Vec<String>) {
        let text = format!("model: test\nprompt: hi\n{skills}\n");
        let (agent, diags) = parse_agent(
            "a",
            std::path::Path::new("agents/a.yaml"),
            &text,
            String::new(),
        );
        (
            agent.map(|a| (a.skills, a.skills_mode)),
            diags.iter().map(ToString::to_string).collect(),
        )
    }

    #[test]
    fn short_forms_take_the_default_mode_and_the_mapping_chooses() {
        let default = SkillsMode::default();
        assert_eq!(parse("").0, Some((SkillsChoice::Auto, default)));
        assert_eq!(parse("skills: none").0, Some((SkillsChoice::None, default)));
        assert_eq!(
            parse("skills: [pdf]").0,
            Some((SkillsChoice::Named(vec!["pdf".into()]), default))
        );
        assert_eq!(
            parse("skills: { mode: inject }").0,
            Some((SkillsChoice::Auto, SkillsMode::Inject))
        );
        assert_eq!(
            parse("skills:\n  mode: catalog\n  use: [pdf, docx]").0,
            Some((
                SkillsChoice::Named(vec!["pdf".into(), "docx".into()]),
                SkillsMode::Catalog
            ))
        );
        assert_eq!(
            parse("skills: { use: none, mode: inject }").0,
            Some((SkillsChoice::None, SkillsMode::Inject))
        );
    }

    #[test]
    fn a_bad_mode_key_or_choice_is_located() {
        let (agent, d) = parse("skills:\n  mode: sometimes\n");
        assert!(agent.is_none());
        assert_eq!(
            d,
            [
                "agents/a.yaml:4:9: `skills.mode` is \"sometimes\": write `inject` (the skills' instructions go in the context) or `catalog` (their names and descriptions are listed, and the model loads one with `load_skill`)"
            ]
        );
        let (_, d) = parse("skills: { mode: [catalog] }");
        assert!(
            d[0].starts_with("agents/a.yaml:3:17: `skills.mode` is a list: write `inject`"),
            "{d:?}"
        );
        let (_, d) = parse("skills: { mode: catalog, pick: [pdf] }");
        assert_eq!(
            d,
            [
                "agents/a.yaml:3:9: `skills` has an unknown key `pick`: its keys are `mode` and `use`"
            ]
        );
        let (_, d) = parse("skills:\n  use: sometimes\n");
        assert_eq!(
            d,
            [
                "agents/a.yaml:4:8: `skills.use` must be `auto`, `none` or a list of skill names, not \"sometimes\""
            ]
        );
        let (_, d) = parse("skills: { use: [pdf, 3] }");
        assert_eq!(
            d,
            ["agents/a.yaml:3:16: `skills.use` lists skill names: every item must be a string"]
        );
        let (_, d) = parse("skills: 3");
        assert_eq!(
            d,
            [
                "agents/a.yaml:3:9: `skills` must be `auto`, `none` or a list of skill names, or a mapping `{ mode: inject|catalog, use: ... }`, not 3"
            ]
        );
    }
}
