//! One `SKILL.md`: splits the `---` YAML front matter from the Markdown body,
//! reads the front matter ([`super::front_matter`]) and checks it against the
//! Agent Skills specification the lenient way its client guide asks for:
//! what can be loaded is loaded, with a warning (a name that breaks the rules
//! or differs from its folder, an overlong description or compatibility,
//! fields aurad does not use); only a missing front matter, YAML that does
//! not parse even after the guide's `: ` repair, a field of the wrong type and
//! a missing or empty description leave the skill out. Every problem is
//! reported at its `line:col` in the file (front-matter places are shifted by
//! the opening `---` line).
//!
//! The skill's name is its folder's name (NFKC-normalised), as in Claude
//! Code: `name:` is checked against it, not used instead of it.
//!
//! SKILL.md files are read as written (a byte-order mark dropped, CRLF read
//! as LF): no `${VAR}` interpolation. The front matter is bounded like every
//! config file ([`crate::config::bounds`]). Depends on config (diagnostics,
//! bounds, YAML errors) and `unicode-normalization`.

use std::path::Path;

use unicode_normalization::UnicodeNormalization;

use super::Skill;
use super::front_matter::{FrontMatter, KNOWN_KEYS, keys, repair_colons};
use crate::config::bounds::{Syntax, check_size, check_text, normalize};
use crate::config::diag::{Diagnostic, locate};
use crate::config::yaml_value::yaml_diagnostic;

/// Longest `name` the standard allows, in characters.
pub const MAX_NAME_CHARS: usize = 64;
/// Longest `description` the standard allows, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Longest `compatibility` the standard allows, in characters.
pub const MAX_COMPATIBILITY_CHARS: usize = 500;

/// The parts of a SKILL.md text.
struct Split<'a> {
    /// The YAML between the `---` lines.
    yaml: &'a str,
    body: &'a str,
}

/// `text` in Unicode normal form KC, as names are compared.
pub fn nfkc(text: &str) -> String {
    text.nfkc().collect()
}

/// Parses the text of `<folder>/SKILL.md` (`path`, relative to the project
/// root). Returns the skill unless an error leaves it out, and every
/// diagnostic found (warnings for what was loaded anyway).
pub fn parse_skill(folder: &str, path: &Path, text: &str) -> (Option<Skill>, Vec<Diagnostic>) {
    if let Err(d) = check_size(path, text) {
        return (None, vec![d]);
    }
    let text = normalize(text);
    let split = match split_front_matter(&text) {
        Ok(split) => split,
        Err(message) => return (None, vec![Diagnostic::error(path, (1, 1), message)]),
    };
    if let Err(d) = check_text(path, split.yaml, Syntax::Yaml, 2) {
        return (None, vec![d]);
    }
    let mut diags = Vec::new();
    let (yaml, raw) = match read_front_matter(path, split.yaml, &mut diags) {
        Ok(read) => read,
        Err(d) => return (None, vec![d]),
    };
    let at = |key: &str| shift(locate(&yaml, &[key]));

    let name = nfkc(folder);
    let dir = path.parent().unwrap_or(path).display().to_string();
    match raw.name.as_deref().map(str::trim) {
        None | Some("") => diags.push(Diagnostic::warning(
            path,
            if raw_has(&yaml, "name") {
                at("name")
            } else {
                (1, 1)
            },
            format!("no `name`: the skill is named `{name}` after its folder; add `name: {name}`"),
        )),
        Some(declared) => {
            for problem in name_problems(declared) {
                diags.push(Diagnostic::warning(path, at("name"), problem));
            }
            if nfkc(declared) != name {
                diags.push(Diagnostic::warning(
                    path,
                    at("name"),
                    format!(
                        "name `{declared}` does not match its folder {dir}/: the skill is \
                         named `{name}` after the folder; rename one of the two so they agree"
                    ),
                ));
                for problem in name_problems(&name) {
                    diags.push(Diagnostic::warning(
                        path,
                        at("name"),
                        format!("folder {problem}"),
                    ));
                }
            }
        }
    }

    let description = raw.description.unwrap_or_default();
    let description_chars = description.chars().count();
    if description.trim().is_empty() {
        diags.push(Diagnostic::error(
            path,
            if raw_has(&yaml, "description") {
                at("description")
            } else {
                (1, 1)
            },
            "`description` is required: add `description:` saying what the skill does and when \
             to use it; the skill is left out until then",
        ));
        return (None, diags);
    }
    if description_chars > MAX_DESCRIPTION_CHARS {
        diags.push(Diagnostic::warning(
            path,
            at("description"),
            format!(
                "`description` is {description_chars} characters long, over the \
                 specification's {MAX_DESCRIPTION_CHARS}; loaded anyway; move details to the body"
            ),
        ));
    }
    if let Some(compat) = &raw.compatibility {
        let n = compat.chars().count();
        if n > MAX_COMPATIBILITY_CHARS {
            diags.push(Diagnostic::warning(
                path,
                at("compatibility"),
                format!(
                    "`compatibility` is {n} characters long, over the specification's \
                     {MAX_COMPATIBILITY_CHARS}; loaded anyway; shorten it"
                ),
            ));
        }
    }
    let unused: Vec<String> = keys(&yaml)
        .into_iter()
        .filter(|k| !KNOWN_KEYS.contains(&k.as_str()))
        .collect();
    if let Some(first) = unused.first() {
        let list: Vec<String> = unused.iter().map(|k| format!("`{k}`")).collect();
        diags.push(Diagnostic::warning(
            path,
            at(first),
            format!(
                "note: field(s) {} accepted and not used by aurad (it reads {})",
                list.join(", "),
                KNOWN_KEYS.join(", ")
            ),
        ));
    }
    let disable_model_invocation = raw.disable_model_invocation.unwrap_or(false);
    let skill = Skill {
        name,
        declared_name: raw
            .name
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty()),
        description: description.trim().to_string(),
        body: split.body.trim().to_string(),
        hidden: raw.hidden.unwrap_or(false) || disable_model_invocation,
        disable_model_invocation,
        license: raw.license,
        compatibility: raw.compatibility,
        metadata: raw.metadata,
        allowed_tools: raw.allowed_tools,
        unused_fields: unused,
        path: path.to_path_buf(),
        files: Default::default(),
        terms: Default::default(),
    };
    (Some(skill), diags)
}

/// A place in the front matter -> the same place in the file.
fn shift((line, col): (usize, usize)) -> (usize, usize) {
    (line + 1, col)
}

/// Reads the front matter, trying the client guide's `: ` repair when the
/// YAML does not parse. Returns the YAML text used (repaired or not) and
/// the fields, or the error that leaves the skill out. A repair adds one
/// warning per changed line.
fn read_front_matter(
    path: &Path,
    yaml: &str,
    diags: &mut Vec<Diagnostic>,
) -> Result<(String, FrontMatter), Diagnostic> {
    let yaml_text = if yaml.trim().is_empty() { "{}" } else { yaml };
    let error = match serde_yaml::from_str::<FrontMatter>(yaml_text) {
        Ok(raw) => return Ok((yaml_text.to_string(), raw)),
        Err(e) => e,
    };
    let syntax_broken = serde_yaml::from_str::<serde_yaml::Value>(yaml_text).is_err();
    if syntax_broken
        && let Some((fixed, lines)) = repair_colons(yaml_text)
        && let Ok(raw) = serde_yaml::from_str::<FrontMatter>(&fixed)
    {
        for line in lines {
            diags.push(Diagnostic::warning(
                path,
                shift((line, 1)),
                "this value contains `: ` without quotes, which is not valid YAML; \
                 read as a quoted string; put it in double quotes",
            ));
        }
        return Ok((fixed, raw));
    }
    let mut d = yaml_diagnostic(path, yaml_text, &error);
    (d.line, d.column) = shift((d.line.max(1), d.column));
    d.message = d.message.replace(
        "struct FrontMatter",
        "a mapping with `name:` and `description:`",
    );
    d.message
        .push_str("; the skill is left out until it is fixed");
    Err(d)
}

/// What is wrong with a skill name, per the specification as its reference
/// validator reads it: 1-64 characters after NFKC normalisation, letters
/// that are lowercase or caseless (any script), digits and `-`, no `-` first
/// or last, no `--`.
pub fn name_problems(name: &str) -> Vec<String> {
    let name = nfkc(name);
    let mut problems = Vec::new();
    let n = name.chars().count();
    if n > MAX_NAME_CHARS {
        problems.push(format!(
            "name `{name}` is {n} characters long, over the specification's {MAX_NAME_CHARS}"
        ));
    }
    let bad: String = name
        .chars()
        .filter(|c| !(*c == '-' || (c.is_alphanumeric() && !c.is_uppercase())))
        .collect();
    if !bad.is_empty() {
        problems.push(format!(
            "name `{name}` has characters the specification does not allow ({bad:?}): \
             use lowercase letters, digits and `-`, e.g. `{}`",
            suggest_name(&name)
        ));
    }
    if name.starts_with('-') || name.ends_with('-') {
        problems.push(format!("name `{name}` should not start or end with `-`"));
    }
    if name.contains("--") {
        problems.push(format!(
            "name `{name}` should not contain `--`; use a single `-`"
        ));
    }
    problems
}

/// A valid name close to `name`, for messages.
fn suggest_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        let c = if c.is_alphanumeric() && !c.is_uppercase() {
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
                    allowed-tools: bash read_file\nhidden: true\n---\n\n# Body\nsteps\n";
        let (s, d) = parse("web-search", text);
        assert!(d.is_empty(), "{d:?}");
        let s = s.unwrap();
        assert_eq!(s.body, "# Body\nsteps");
        assert!(s.hidden && !s.disable_model_invocation);
        assert_eq!(s.description, "Find things.");
        assert_eq!(s.license.as_deref(), Some("MIT"));
        assert_eq!(s.compatibility.as_deref(), Some("needs network"));
        assert_eq!(s.metadata["author"], "me");
        assert_eq!(s.allowed_tools, ["bash", "read_file"]);
    }

    #[test]
    fn crlf_bom_and_empty_body() {
        let (s, d) = parse("a", "\u{feff}---\r\nname: a\r\ndescription: d\r\n---\r\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(s.unwrap().body, "");
    }

    #[test]
    fn front_matter_places_are_shifted() {
        let (s, d) = parse("a", "---\nname: a\ndescription: d\nhidden: maybe\n---\n");
        assert!(s.is_none());
        assert!(
            d[0].starts_with("skills/a/SKILL.md:4:9: hidden: invalid type"),
            "{d:?}"
        );
    }

    #[test]
    fn a_name_unlike_its_folder_warns_and_the_folder_wins() {
        let (s, d) = parse("a", "---\nname: b\ndescription: d\n---\n");
        assert_eq!(s.unwrap().name, "a");
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].starts_with("skills/a/SKILL.md:2:7: warning: name `b` does not match its folder skills/a/: the skill is named `a`"),
            "{d:?}"
        );
        // No name at all: the folder's, with a warning.
        let (s, d) = parse("a", "---\ndescription: d\n---\n");
        assert_eq!(s.unwrap().name, "a");
        assert!(d[0].contains("warning: no `name`"), "{d:?}");
    }

    #[test]
    fn overlong_fields_and_bad_names_warn_and_load() {
        let long = "x".repeat(MAX_DESCRIPTION_CHARS + 1);
        let name = "a".repeat(65);
        let text = format!(
            "---\nname: {name}\ndescription: {long}\ncompatibility: {}\n---\n",
            "c".repeat(501)
        );
        let (s, d) = parse(&name, &text);
        assert!(s.is_some(), "{d:?}");
        assert_eq!(d.len(), 3, "{d:?}");
        assert!(d.iter().all(|d| d.contains("warning:")), "{d:?}");
        assert!(d[0].contains("65 characters long"), "{d:?}");
        assert!(d[1].contains("1025 characters long"), "{d:?}");
        assert!(d[2].contains("`compatibility` is 501"), "{d:?}");
    }

    #[test]
    fn unknown_fields_are_one_note() {
        let text = "---\nname: a\ndescription: d\nmodel: opus\nargument-hint: '[n]'\n\
                    disable-model-invocation: yes\n---\n";
        let (s, d) = parse("a", text);
        let s = s.unwrap();
        assert!(s.hidden && s.disable_model_invocation);
        assert_eq!(s.unused_fields, ["model", "argument-hint"]);
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].starts_with("skills/a/SKILL.md:4:8: warning: note: field(s) `model`, `argument-hint` accepted and not used"),
            "{d:?}"
        );
    }

    #[test]
    fn unquoted_colon_is_repaired_with_a_warning() {
        let (s, d) = parse(
            "a",
            "---\nname: a\ndescription: Use when: tests fail\n---\n",
        );
        assert_eq!(s.unwrap().description, "Use when: tests fail");
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(
            d[0].starts_with("skills/a/SKILL.md:3:1: warning: this value contains `: `"),
            "{d:?}"
        );
        // Not repairable: the YAML error, and the skill is left out.
        let (s, d) = parse("a", "---\nname: a\ndescription: [unclosed\n---\n");
        assert!(s.is_none());
        assert!(d[0].starts_with("skills/a/SKILL.md:"), "{d:?}");
        assert!(d[0].contains("left out"), "{d:?}");
    }

    #[test]
    fn empty_front_matter_is_an_error_about_the_description() {
        let (s, d) = parse("a", "---\n---\nbody\n");
        assert!(s.is_none());
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].contains("warning: no `name`"), "{d:?}");
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
        // Unicode, as the reference validator reads the specification.
        for ok in ["技能", "мой-навык", "café", "ｗｅｂ"] {
            assert!(
                name_problems(ok).is_empty(),
                "{ok}: {:?}",
                name_problems(ok)
            );
        }
        assert_eq!(name_problems("НАВЫК").len(), 1);
        assert!(name_problems("НАВЫК")[0].contains("e.g. `навык`"));
    }

    #[test]
    fn names_compare_after_nfkc() {
        // Folder written decomposed (e + combining acute), name composed.
        let (s, d) = parse("cafe\u{301}", "---\nname: caf\u{e9}\ndescription: d\n---\n");
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(s.unwrap().name, "caf\u{e9}");
    }
}
