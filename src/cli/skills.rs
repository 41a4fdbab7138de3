//! `aurad skills [--agent NAME] [--input TEXT] [--json]`: lists the skills of
//! the project (`skills/`, `.agents/skills/`, `.claude/skills/`), and shows
//! which a run would get: those matching `--input` (at most 3, with their
//! scores, hidden ones never), or the agent's pinned ones, or none; for an
//! agent whose skills are a catalog (`skills.mode: catalog`), the skills
//! it lists.
//! `aurad skills show NAME [--json]`: everything loaded for one skill.

use std::path::Path;

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use serde::Serialize;

use super::{EXIT_CONFIG, EXIT_OK, print_diagnostics};
use crate::app::skills::{self, Skill};
use crate::config::{self, SkillsMode, agent::SkillsChoice};

#[derive(Debug, Args)]
pub struct SkillsArgs {
    #[command(subcommand)]
    pub command: Option<SkillsCommand>,
    /// Show the skills this agent's runs get, per its `skills:` (auto,
    /// a list of names, or none).
    #[arg(long, value_name = "NAME", add = super::completions::agents())]
    pub agent: Option<String>,
    /// Show which skills would match this input, with their scores.
    #[arg(long, value_name = "TEXT")]
    pub input: Option<String>,
    /// Print a JSON array of {name, description, hidden, path, score?}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum SkillsCommand {
    /// Show one skill: its fields (license, compatibility, metadata,
    /// allowed-tools, fields aurad does not use), whether it is
    /// auto-matched, its warnings and its body.
    Show {
        /// The skill's name (its folder's name).
        name: String,
        /// Print a JSON object instead.
        #[arg(long)]
        json: bool,
    },
}

/// What `aurad skills` says when the project has none.
const NO_SKILLS: &str =
    "no skills; add skills/NAME/SKILL.md (also read: .agents/skills/, .claude/skills/)";

#[derive(Debug, Serialize)]
struct Row<'a> {
    name: &'a str,
    description: &'a str,
    hidden: bool,
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<f64>,
}

pub fn run(root: &Path, args: SkillsArgs) -> i32 {
    if let Some(SkillsCommand::Show { name, json }) = &args.command {
        return show(root, name, *json);
    }
    let (all, diagnostics) = skills::load_skills(root);
    print_diagnostics(&diagnostics);
    let broken = diagnostics.iter().any(|d| d.is_error());
    let (choice, mode) = match &args.agent {
        None => (SkillsChoice::Auto, SkillsMode::Inject),
        Some(name) => match agent_choice(root, name) {
            Ok(choice) => choice,
            Err(code) => return code,
        },
    };
    let agent_label = args.agent.as_deref().map(|a| format!("agent `{a}`"));
    let (rows, note): (Vec<Row>, Option<String>) = match (&choice, &args.input) {
        (SkillsChoice::None, _) => (
            Vec::new(),
            Some(format!(
                "{} uses no skills (`skills: none`)",
                agent_label.as_deref().unwrap_or("the agent")
            )),
        ),
        (choice, _) if mode == SkillsMode::Catalog => {
            let listed = match skills::catalog_skills(&all, choice) {
                Ok(listed) => listed,
                Err(message) => {
                    let label = agent_label.as_deref().unwrap_or("the agent");
                    say_err!("error: {label}: `skills:` names {message}");
                    return EXIT_CONFIG;
                }
            };
            let label = agent_label.as_deref().unwrap_or("the agent");
            let note = if listed.is_empty() {
                format!("{label} has no skills to offer")
            } else {
                format!(
                    "{label} offers these skills as a catalog (`skills.mode: catalog`): each run lists their names and descriptions, and the model loads one with `{}`; the input does not choose",
                    skills::LOAD_SKILL
                )
            };
            (
                listed.into_iter().map(|s| row(s, None)).collect(),
                Some(note),
            )
        }
        (SkillsChoice::Auto, None) => {
            let note = if all.is_empty() {
                Some(NO_SKILLS.to_string())
            } else {
                agent_label.map(|a| {
                    format!("{a} gets the skills matching each run's input; pass --input TEXT to see which")
                })
            };
            (all.iter().map(|s| row(s, None)).collect(), note)
        }
        (choice, input) => {
            let selected = match skills::select_skills(&all, choice, input.as_deref().unwrap_or(""))
            {
                Ok(selected) => selected,
                Err(message) => {
                    let label = agent_label.as_deref().unwrap_or("the agent");
                    say_err!("error: {label}: `skills:` names {message}");
                    return EXIT_CONFIG;
                }
            };
            let note = selected.is_empty().then(|| {
                if all.is_empty() {
                    NO_SKILLS.to_string()
                } else {
                    "no skill matches the input (hidden skills are never matched)".to_string()
                }
            });
            (
                selected
                    .into_iter()
                    .map(|(s, score)| row(s, score))
                    .collect(),
                note,
            )
        }
    };
    if args.json {
        say!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
    } else {
        print_table(&rows);
    }
    if let Some(note) = note {
        say_err!("{note}");
    }
    if broken {
        say_err!(
            "some skills have errors and are left out; fix them (see above), or run `aurad validate`"
        );
        return EXIT_CONFIG;
    }
    EXIT_OK
}

/// The `skills:` choice and mode of agent `name`, or the exit code after
/// saying why there is none.
fn agent_choice(root: &Path, name: &str) -> Result<(SkillsChoice, SkillsMode), i32> {
    let loaded = config::load_one(root, name, &config::process_env);
    if let Some(agent) = loaded.project.agents.get(name) {
        return Ok((agent.skills.clone(), agent.skills_mode));
    }
    let agent_diags: Vec<_> = loaded
        .diagnostics
        .into_iter()
        .filter(|d| d.path.starts_with("agents"))
        .collect();
    if agent_diags.iter().any(|d| d.is_error()) {
        print_diagnostics(&agent_diags);
        say_err!("error: agent `{name}` has errors; fix them first");
    } else {
        let names = config::agent_names(root);
        say_err!(
            "error: no agent named `{name}` (agents: {})",
            if names.is_empty() {
                "none; create agents/NAME.yaml".to_string()
            } else {
                names.join(", ")
            }
        );
    }
    Err(EXIT_CONFIG)
}

fn row(skill: &Skill, score: Option<f64>) -> Row<'_> {
    Row {
        name: &skill.name,
        description: &skill.description,
        hidden: skill.hidden,
        path: skill.path.display().to_string(),
        score,
    }
}

fn print_table(rows: &[Row]) {
    if rows.is_empty() {
        return;
    }
    let scored = rows.iter().any(|r| r.score.is_some());
    let width = rows
        .iter()
        .map(|r| r.name.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut header = String::new();
    if scored {
        header.push_str("SCORE   ");
    }
    header.push_str(&format!(
        "{:<width$}  {:<6}  {:<60}  PATH",
        "NAME", "HIDDEN", "DESCRIPTION"
    ));
    say!("{}", header.trim_end());
    for r in rows {
        let mut line = String::new();
        if scored {
            line.push_str(&format!(
                "{:>6}  ",
                r.score.map(|s| format!("{s:.2}")).unwrap_or_default()
            ));
        }
        line.push_str(&format!(
            "{:<width$}  {:<6}  {}  {}",
            r.name,
            if r.hidden { "yes" } else { "" },
            pad(&one_line(r.description, 60), 60),
            r.path
        ));
        say!("{line}");
    }
}

/// Everything loaded for one skill, as `aurad skills show --json` prints it.
#[derive(Debug, Serialize)]
struct Shown<'a> {
    name: &'a str,
    declared_name: Option<&'a str>,
    path: String,
    description: &'a str,
    auto_matched: bool,
    hidden: bool,
    disable_model_invocation: bool,
    license: Option<&'a str>,
    compatibility: Option<&'a str>,
    metadata: &'a BTreeMap<String, String>,
    allowed_tools: &'a [String],
    unused_fields: &'a [String],
    warnings: Vec<String>,
    body: &'a str,
}

/// `aurad skills show NAME`: the skill's fields, its diagnostics and body.
fn show(root: &Path, name: &str, json: bool) -> i32 {
    let (all, diagnostics) = skills::load_skills(root);
    let Some(skill) = all.iter().find(|s| s.name == name) else {
        let folder_diags: Vec<_> = diagnostics
            .iter()
            .filter(|d| d.path.parent().and_then(|p| p.file_name()) == Some(name.as_ref()))
            .cloned()
            .collect();
        print_diagnostics(&folder_diags);
        let known: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        say_err!(
            "error: no skill named `{name}` was loaded{} (skills: {})",
            if folder_diags.is_empty() {
                ""
            } else {
                "; see the errors above"
            },
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
        return EXIT_CONFIG;
    };
    let warnings: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.path == skill.path)
        .map(ToString::to_string)
        .collect();
    let shown = Shown {
        name: &skill.name,
        declared_name: skill.declared_name.as_deref(),
        path: skill.path.display().to_string(),
        description: &skill.description,
        auto_matched: !skill.hidden,
        hidden: skill.hidden,
        disable_model_invocation: skill.disable_model_invocation,
        license: skill.license.as_deref(),
        compatibility: skill.compatibility.as_deref(),
        metadata: &skill.metadata,
        allowed_tools: &skill.allowed_tools,
        unused_fields: &skill.unused_fields,
        warnings,
        body: &skill.body,
    };
    if json {
        say!(
            "{}",
            serde_json::to_string_pretty(&shown).unwrap_or_default()
        );
        return EXIT_OK;
    }
    for w in &shown.warnings {
        say_err!("{w}");
    }
    let field = |label: &str, value: &str| say!("{label:<15} {value}");
    field("name:", shown.name);
    if let Some(declared) = shown.declared_name.filter(|d| *d != shown.name) {
        field("declared name:", declared);
    }
    field("path:", &shown.path);
    field(
        "auto-matched:",
        match (shown.hidden, shown.disable_model_invocation) {
            (false, _) => "yes",
            (true, true) => "no (disable-model-invocation: true); can be pinned by name",
            (true, false) => "no (hidden: true); can be pinned by name",
        },
    );
    field("description:", shown.description);
    if let Some(license) = shown.license {
        field("license:", license);
    }
    if let Some(compatibility) = shown.compatibility {
        field("compatibility:", compatibility);
    }
    if !shown.allowed_tools.is_empty() {
        field("allowed-tools:", &shown.allowed_tools.join(" "));
    }
    if !shown.metadata.is_empty() {
        say!("metadata:");
        for (k, v) in shown.metadata {
            say!("  {k}: {v}");
        }
    }
    if !shown.unused_fields.is_empty() {
        field("not used:", &shown.unused_fields.join(", "));
    }
    say!("body:           {} characters", shown.body.chars().count());
    if !shown.body.is_empty() {
        say!("\n{}", shown.body);
    }
    EXIT_OK
}

/// The first line of `text`, cut to `max` columns with `…`.
fn one_line(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("").trim();
    let cut = width(first) > max || text.trim().lines().nth(1).is_some();
    if !cut {
        return first.to_string();
    }
    let mut out = String::new();
    for c in first.chars() {
        if width(&out) + char_width(c) > max - 1 {
            break;
        }
        out.push(c);
    }
    out.push('…');
    out
}

/// `text` padded with spaces to `columns` terminal columns.
fn pad(text: &str, columns: usize) -> String {
    format!("{text}{}", " ".repeat(columns.saturating_sub(width(text))))
}

/// Terminal columns of `text`: CJK ideographs and full-width forms take two.
fn width(text: &str) -> usize {
    text.chars().map(char_width).sum()
}

fn char_width(c: char) -> usize {
    if crate::text::is_wide(c) { 2 } else { 1 }
}
