//! `aurad skills [--agent NAME] [--input TEXT] [--json]`: lists the skills of
//! `skills/`, and shows which a run would get: those matching `--input`
//! (at most 3, hidden ones never), or the agent's pinned ones, or none.

use std::path::Path;

use clap::Args;
use serde::Serialize;

use super::{EXIT_CONFIG, EXIT_OK, print_diagnostics};
use crate::config::{self, agent::SkillsChoice};
use crate::skills::{self, Skill};

#[derive(Debug, Args)]
pub struct SkillsArgs {
    /// Show the skills this agent's runs get, per its `skills:` (auto,
    /// a list of names, or none).
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Show which skills would match this input, with their scores.
    #[arg(long, value_name = "TEXT")]
    pub input: Option<String>,
    /// Print a JSON array of {name, description, hidden, path, score?}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Row<'a> {
    name: &'a str,
    description: &'a str,
    hidden: bool,
    path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<usize>,
}

pub fn run(root: &Path, args: SkillsArgs) -> i32 {
    let (all, diagnostics) = skills::load_skills(root);
    print_diagnostics(&diagnostics);
    let broken = diagnostics.iter().any(|d| d.is_error());
    let choice = match &args.agent {
        None => SkillsChoice::Auto,
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
        (SkillsChoice::Auto, None) => {
            let note = if all.is_empty() {
                Some("no skills; add skills/NAME/SKILL.md".to_string())
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
                    eprintln!("error: {label}: `skills:` names {message}");
                    return EXIT_CONFIG;
                }
            };
            let note = selected.is_empty().then(|| {
                if all.is_empty() {
                    "no skills; add skills/NAME/SKILL.md".to_string()
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
        println!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
    } else {
        print_table(&rows);
    }
    if let Some(note) = note {
        eprintln!("{note}");
    }
    if broken {
        eprintln!(
            "some skills have errors and are left out; fix them (see above), or run `aurad validate`"
        );
        return EXIT_CONFIG;
    }
    EXIT_OK
}

/// The `skills:` choice of agent `name`, or the exit code after saying why
/// there is none.
fn agent_choice(root: &Path, name: &str) -> Result<SkillsChoice, i32> {
    let loaded = config::load_one(root, name, &config::process_env);
    if let Some(agent) = loaded.project.agents.get(name) {
        return Ok(agent.skills.clone());
    }
    let agent_diags: Vec<_> = loaded
        .diagnostics
        .into_iter()
        .filter(|d| d.path.starts_with("agents"))
        .collect();
    if agent_diags.iter().any(|d| d.is_error()) {
        print_diagnostics(&agent_diags);
        eprintln!("error: agent `{name}` has errors; fix them first");
    } else {
        let names = config::agent_names(root);
        eprintln!(
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

fn row(skill: &Skill, score: Option<usize>) -> Row<'_> {
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
        header.push_str("SCORE  ");
    }
    header.push_str(&format!(
        "{:<width$}  {:<6}  {:<60}  PATH",
        "NAME", "HIDDEN", "DESCRIPTION"
    ));
    println!("{}", header.trim_end());
    for r in rows {
        let mut line = String::new();
        if scored {
            line.push_str(&format!(
                "{:>5}  ",
                r.score.map(|s| s.to_string()).unwrap_or_default()
            ));
        }
        line.push_str(&format!(
            "{:<width$}  {:<6}  {}  {}",
            r.name,
            if r.hidden { "yes" } else { "" },
            pad(&one_line(r.description, 60), 60),
            r.path
        ));
        println!("{line}");
    }
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
