//! One `SKILL.md`: splits the `---` YAML front matter from the Markdown body,
//! parses the front matter (unknown fields refused) and checks it against the
//! Agent Skills standard, reporting every problem at its `line:col` in the
//! file (front-matter places are shifted by the opening `---` line).
//! SKILL.md files are read as written (a byte-order mark dropped, CRLF read
//! as LF): no `${VAR}` interpolation. The front matter is bounded like every
//! config file ([`crate::config::bounds`]).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::Skill;
use crate::config::bounds::{Syntax, check_size, check_text, normalize};
use crate::config::diag::{Diagnostic, locate};
use crate::config::yaml_value::yaml_diagnostic;

/// Longest `name` the standard allows, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// Longest `description` the standard allows, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Longest `compatibility` the standard allows, in characters.
pub const MAX_COMPATIBILITY_CHARS: usize = 500;

/// The front matter as written. `license`, `compatibility`, `metadata` and
/// `allowed-tools` are checked for their type and then not used by aurad.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
#[allow(dead_code)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
    license: Option<String>,
    compatibility: Option<String>,
    metadata: Option<BTreeMap<String, String>>,
    allowed_tools: Option<String>,
    hidden: Option<bool>,
}

/// The parts of a SKILL.md text.
struct Split<'a> {
    /// The YAML between the `---` lines.
    yaml: &'a str,
    body: &'a str,
}

/// Parses the text of `skills/<folder>/SKILL.md` (`path`, relative to the
/// project root). Returns the skill when it has no errors, and every
/// diagnostic found.
pub fn parse_skill(folder: &str, path: &Path, text: &str) -> (Option<Skill>, Vec<Diagnostic>) {
    if let Err(d) = check_size(path, text) {
        return (None, vec![d]);
    }
    let text = normalize(text);
    let split = match split_front_matter(&text) {
        Ok(split) => split,
        Err(message) => return (None, vec![Diagnostic::error(path, (1, 1), message)]),
    };
    // A place in the front matter -> the same place in the file.
    let shift = |(line, col): (usize, usize)| (line + 1, col);
    let yaml_text = if split.yaml.trim().is_empty() {
        "{}"
    } else {
        split.yaml
    };
    if let Err(d) = check_text(path, split.yaml, Syntax::Yaml, 2) {
        return (None, vec![d]);
    }
    let raw: FrontMatter = match serde_yaml::from_str(yaml_text) {
        Ok(raw) => raw,
        Err(e) => {
            let mut d = yaml_diagnostic(path, yaml_text, &e);
            (d.line, d.column) = shift((d.line.max(1), d.column));
            d.message = d.message.replace(
                "struct FrontMatter",
                "a mapping with `name:` and `description:`",
            );
            return (None, vec![d]);
        }
    };
    let mut diags = Vec::new();
    let at = |key: &str| shift(locate(split.yaml, &[key]));

    let name = raw.name.unwrap_or_default();
    if name.trim().is_empty() {
        diags.push(Diagnostic::error(
            path,
            if raw_has(split.yaml, "name") {
                at("name")
            } else {
                (1, 1)
            },
            format!(
                "`name` is required: add `name: {folder}` (the folder's name) to the front matter"
            ),
        ));
    } else {
        for problem in name_problems(&name) {
            diags.push(Diagnostic::error(path, at("name"), problem));
        }
        if name != folder {
            diags.push(Diagnostic::error(
                path,
                at("name"),
                format!(
                    "name `{name}` does not match its folder skills/{folder}/: \
                     the name must equal the folder's name; rename one of the two"
                ),
            ));
        }
    }

    let description = raw.description.unwrap_or_default();
    let description_chars = description.chars().count();
    if description.trim().is_empty() {
        diags.push(Diagnostic::error(
            path,
            if raw_has(split.yaml, "description") { at("description") } else { (1, 1) },
            "`description` is required: add `description:` saying what the skill does and when to use it",
        ));
    } else if description_chars > MAX_DESCRIPTION_CHARS {
        diags.push(Diagnostic::error(
            path,
            at("description"),
            format!(
                "`description` is {description_chars} characters long; \
                 shorten it to at most {MAX_DESCRIPTION_CHARS} (details belong in the body)"
            ),
        ));
    }
    if let Some(compat) = &raw.compatibility {
        let n = compat.chars().count();
        if n > MAX_COMPATIBILITY_CHARS {
            diags.push(Diagnostic::error(
                path,
                at("compatibility"),
                format!("`compatibility` is {n} characters long; shorten it to at most {MAX_COMPATIBILITY_CHARS}"),
            ));
        }
    }
    if !diags.is_empty() {
        return (None, diags);
    }
    let skill = Skill {
        name,
        description: description.trim().to_string(),
        body: split.body.trim().to_string(),
        hidden: raw.hidden.unwrap_or(false),
        path: path.to_path_buf(),
    };
    (Some(skill), diags)
}

/// What is wrong with a skill name, per the standard: 1-64 characters,
/// lowercase ASCII letters, digits and `-`, no `-` first or last, no `--`.
pub fn name_problems(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let n = name.chars().count();
    if n > MAX_NAME_CHARS {
        problems.push(format!(
            "name `{name}` is {n} characters long; shorten it to at most {MAX_NAME_CHARS} (and rename the folder to match)"
        ));
    }
    let bad: String = name
        .chars()
        .filter(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
        .collect();
    if !bad.is_empty() {
        problems.push(format!(
            "name `{name}` has characters that are not allowed ({bad:?}): \
             use lowercase letters a-z, digits and `-`, e.g. `{}`",
            suggest_name(name)
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push(format!("name `{name}` must not start or end with `-`"));
    }
    if name.contains("--") {
        problems.push(format!(
            "name `{name}` must not contain `--`; use a single `-`"
        ));
    }
    problems
}

/// A valid name close to `name`, for messages.
fn suggest_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() {
            c
        } else {
            '-'
        };
        if !(c == '-' && (out.is_empty() || out.ends_with('-'))) {
            out.push(c);
        }
    }
    let out = out.trim_end_matches('-');
    if out.is_empty() {
        "my-skill".into()
    } else {
        out.chars().take(MAX_NAME_CHARS).collect()
    }
}

/// Is `key` written as a top-level key of the front matter?
fn raw_has(yaml: &str, key: &str) -> bool {
    yaml.lines().any(|l| {
        l.strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with(':'))
    })
}

/// Splits `---\n<yaml>\n---\n<body>`. The `---` lines may carry trailing
/// spaces and `\r`.
fn split_front_matter(text: &str) -> Result<Split<'_>, String> {
    let is_fence = |line: &str| line.trim_end() == "---";
    let first_end = text.find('\n').unwrap_or(text.len());
    if !is_fence(&text[..first_end]) {
        return Err(
            "missing front matter: SKILL.md must start with a `---` line, then \
                    `name:` and `description:`, then another `---` line before the body"
                .into(),
        );
    }
    let yaml_start = (first_end + 1).min(text.len());
    let mut offset = yaml_start;
    for line in text[yaml_start..].split_inclusive('\n') {
        if is_fence(line) {
            let body_start = offset + line.len();
            return Ok(Split {
                yaml: &text[yaml_start..offset],
                body: &text[body_start..],
            });
        }
        offset += line.len();
    }
    Err(
        "unclosed front matter: the `---` on line 1 has no closing `---`; \
         add a `---` line after the last front-matter field"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(folder: &str, text: &str) -> (Option<Skill>, Vec<String>) {
        let path = Path::new("skills").join(folder).join("SKILL.md");
        let (s, d) = parse_skill(folder, &path, text);
        (s, d.iter().map(|d| d.to_string()).collect())
    }

    #[test]
    fn valid_skill_with_optional_fields() {
        let text = "---\nname: web-search\ndescription: Find things.\nlicense: MIT\n\
                    compatibility: needs network\nmetadata: { author: me }\n\
                    allowed-tools: bash\nhidden: true\n---\n\n# Body\nsteps\n";
        let (s, d) = parse("web-search", text);
        assert!(d.is_empty(), "{d:?}");
        let s = s.unwrap();
        assert_eq!(s.body, "# Body\nsteps");
        assert!(s.hidden);
        assert_eq!(s.description, "Find things.");
    }

    #[test]
    fn crlf_bom_and_empty_body() {
        let (s, d) = parse("a", "\u{feff}---\r\nname: a\r\ndescription: d\r\n---\r\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(s.unwrap().body, "");
    }

    #[test]
    fn front_matter_places_are_shifted() {
        let (_, d) = parse("a", "---\nname: a\ndescription: d\nhidden: maybe\n---\n");
        assert!(
            d[0].starts_with("skills/a/SKILL.md:4:9: hidden: invalid type"),
            "{d:?}"
        );
        let (_, d) = parse("a", "---\nname: b\ndescription: d\n---\n");
        assert!(
            d[0].starts_with("skills/a/SKILL.md:2:7: name `b` does not match"),
            "{d:?}"
        );
    }

    #[test]
    fn empty_front_matter_reports_both_fields() {
        let (s, d) = parse("a", "---\n---\nbody\n");
        assert!(s.is_none());
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].contains("`name` is required: add `name: a`"), "{d:?}");
        assert!(d[1].contains("`description` is required"), "{d:?}");
    }

    #[test]
    fn name_rules() {
        assert!(name_problems("web-search2").is_empty());
        assert_eq!(name_problems("Web_Search").len(), 1);
        assert!(name_problems("Web_Search")[0].contains("e.g. `web-search`"));
        assert_eq!(name_problems("-a").len(), 1);
        assert_eq!(name_problems("a--b").len(), 1);
        assert_eq!(name_problems(&"a".repeat(65)).len(), 1);
        assert!(name_problems(&"a".repeat(64)).is_empty());
    }
}
