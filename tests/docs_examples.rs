//! The documentation's examples validate, and its links resolve.
//!
//! The convention (docs/development.md, "The documentation's examples"):
//! a fenced block of `README.md` or a `docs/*.md` page whose first line is
//! a comment naming a project file is that file, the comment line left out:
//!
//! ```text
//! # agents/NAME.yaml            # aurad.yaml          # channels/NAME.yaml
//! // mcp.json                   <!-- skills/NAME/SKILL.md -->
//! ```
//!
//! The blocks of one page form one project in a fresh temporary directory,
//! and `aurad validate` (the real binary) must accept it. After the path,
//! `project: NAME` puts a block in another project, made of the blocks
//! with that name only, and `invalid: TEXT` marks a
//! block that shows an error: its project must fail validation with TEXT
//! in the output. Paths under `examples/` are copies of files that
//! `tests/workflow_examples.rs` compares and runs; they are not written
//! here. Every `${VAR}` the blocks name is set to a dummy value.
//!
//! Each page must keep at least the checked blocks it had when this test
//! was written (`MINIMUM`), so that taking a path comment away does not
//! silence a broken example. The first agents a newcomer copies (the
//! README's, the agents page's first) must also run with `--model test`.
//! Every relative link must name a file that exists and, after `#`, a
//! heading of that file.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The checked blocks each page had when this test was written: a page may
/// gain examples, never silently lose them.
const MINIMUM: &[(&str, usize)] = &[
    ("README.md", 2),
    ("docs/agents-and-tools.md", 6),
    ("docs/channels.md", 2),
    ("docs/cluster.md", 1),
    ("docs/commands.md", 0),
    ("docs/conversations.md", 6),
    ("docs/daemon-and-api.md", 1),
    ("docs/development.md", 0),
    ("docs/operating.md", 1),
    ("docs/providers.md", 5),
    ("docs/security.md", 0),
    ("docs/skills-and-memory.md", 2),
    ("docs/traces-and-tests.md", 1),
    ("docs/threat-model.md", 0),
    ("docs/workflows.md", 0),
];

/// One fenced block that names its file.
#[derive(Debug, Clone)]
struct Example {
    /// Where the block starts, `page:line`, for failure messages.
    place: String,
    path: String,
    project: Option<String>,
    invalid: Option<String>,
    text: String,
}

/// Every page the test reads: the README and each `docs/*.md`.
fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

fn read(page: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(page)).unwrap()
}

/// The fenced blocks of a page: (line of the opening fence, body).
fn fenced_blocks(markdown: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Vec<&str>)> = None;
    for (index, line) in markdown.lines().enumerate() {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (None, true) => open = Some((index + 1, Vec::new())),
            (Some((start, body)), true) => {
                blocks.push((*start, body.join("\n") + "\n"));
                open = None;
            }
            (Some((_, body)), false) => body.push(line),
            (None, false) => {}
        }
    }
    blocks
}

fn examples(page: &str) -> Vec<Example> {
    let path_comment = Regex::new(
        r"^(?:#|//|<!--)\s*([A-Za-z0-9_.][A-Za-z0-9_./-]*\.(?:yaml|yml|json|md))(.*?)\s*(?:-->)?\s*$",
    )
    .unwrap();
    let project = Regex::new(r"\bproject:\s*(\S+)").unwrap();
    let invalid = Regex::new(r"\binvalid:\s*(.+)$").unwrap();
    let mut found = Vec::new();
    for (line, body) in fenced_blocks(&read(page)) {
        let (first, rest) = body.split_once('\n').unwrap_or((body.as_str(), ""));
        let Some(caps) = path_comment.captures(first.trim()) else {
            continue;
        };
        let note = caps[2].to_string();
        found.push(Example {
            place: format!("{page}:{line}"),
            path: caps[1].to_string(),
            project: project.captures(&note).map(|c| c[1].to_string()),
            invalid: invalid.captures(&note).map(|c| c[1].trim().to_string()),
            text: rest.to_string(),
        });
    }
    found
}

/// A fresh project made of these files.
fn write_project(files: &[&Example]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    // A project, even when a page's blocks are only an MCP file: `aurad
    // validate` refuses a folder with neither agents/ nor aurad.yaml.
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    for file in files {
        assert!(
            !file.path.starts_with('/') && !file.path.contains(".."),
            "{}: {} is not a path inside a project",
            file.place,
            file.path
        );
        let target = dir.path().join(&file.path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(&target, &file.text).unwrap();
    }
    dir
}

/// `aurad validate` on a fresh project made of these files: (passed, output).
fn validate(files: &[&Example], env: &BTreeSet<String>) -> (bool, String) {
    let dir = write_project(files);
    let mut cmd = aurad(dir.path());
    cmd.arg("validate");
    for var in env {
        cmd.env(var, "dummy-value-for-the-docs-0123456789");
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The real binary on a project, with nothing of this machine's set-up.
fn aurad(project: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin!("aurad"));
    cmd.arg("--dir")
        .arg(project)
        .env_remove("RUST_LOG")
        .env_remove("AURAD_MODEL")
        .env_remove("AURAD_DATABASE_URL")
        .env("NO_COLOR", "1");
    cmd
}

/// The files of one project: the page's blocks with that project name (or
/// none); a later block of the same path replaces an earlier one.
fn project_files<'a>(valid: &'a [Example], name: Option<&str>) -> Vec<&'a Example> {
    let mut files: BTreeMap<&str, &Example> = BTreeMap::new();
    for example in valid.iter().filter(|e| e.project.as_deref() == name) {
        files.insert(&example.path, example);
    }
    files.into_values().collect()
}

#[test]
fn every_pages_examples_validate_and_its_invalid_ones_fail() {
    let variable = Regex::new(r"\$\{([A-Za-z_][A-Za-z0-9_]*)").unwrap();
    let mut failures = Vec::new();
    let mut counts = BTreeMap::new();
    for page in pages() {
        let all: Vec<Example> = examples(&page)
            .into_iter()
            .filter(|e| !e.path.starts_with("examples/"))
            .collect();
        counts.insert(page.clone(), all.len());
        let env: BTreeSet<String> = all
            .iter()
            .flat_map(|e| variable.captures_iter(&e.text).map(|c| c[1].to_string()))
            .collect();
        let (invalid, valid): (Vec<Example>, Vec<Example>) =
            all.into_iter().partition(|e| e.invalid.is_some());

        // The page's project (its unnamed blocks), and one per name.
        let projects: BTreeSet<Option<String>> = valid.iter().map(|e| e.project.clone()).collect();
        for name in projects {
            let files = project_files(&valid, name.as_deref());
            let (passed, output) = validate(&files, &env);
            if !passed {
                let places: Vec<&str> = files.iter().map(|f| f.place.as_str()).collect();
                failures.push(format!(
                    "{page}: project {} (blocks at {}) does not validate:\n{output}",
                    name.as_deref().unwrap_or("(the page's)"),
                    places.join(", ")
                ));
            }
        }
        for bad in &invalid {
            let mut files = project_files(&valid, bad.project.as_deref());
            files.retain(|f| f.path != bad.path);
            files.push(bad);
            let expected = bad.invalid.as_deref().unwrap_or_default();
            let (passed, output) = validate(&files, &env);
            if passed || !output.contains(expected) {
                failures.push(format!(
                    "{}: {} is marked invalid ({expected}), but aurad validate {}:\n{output}",
                    bad.place,
                    bad.path,
                    if passed {
                        "accepts it"
                    } else {
                        "says something else"
                    }
                ));
            }
        }
    }
    for (page, minimum) in MINIMUM {
        let count = counts.get(*page).copied().unwrap_or_default();
        if count < *minimum {
            failures.push(format!(
                "{page} has {count} checked example(s), it had {minimum}: \
                 give each whole file its path comment back (see tests/docs_examples.rs)"
            ));
        }
    }
    for page in counts.keys() {
        if !MINIMUM.iter().any(|(p, _)| p == page) {
            failures.push(format!("{page} is not in MINIMUM: add it with its count"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The agents a newcomer copies first, run offline with the test model in
/// the project their page's blocks make, with what the answer holds: the
/// test model's list of tool results, or for an agent with `output_schema`
/// JSON generated from it.
const RUN_OFFLINE: &[(&str, &str, &str)] = &[
    ("README.md", "hello", "test model: called 2 tool(s)"),
    ("docs/agents-and-tools.md", "files", "test model: called"),
    ("docs/agents-and-tools.md", "labeler", r#"{"label":"bug"}"#),
];

#[test]
fn the_first_agents_a_newcomer_copies_run_with_the_test_model() {
    for (page, agent, answer) in RUN_OFFLINE {
        let valid: Vec<Example> = examples(page)
            .into_iter()
            .filter(|e| e.invalid.is_none() && !e.path.starts_with("examples/"))
            .collect();
        let dir = write_project(&project_files(&valid, None));
        let out = aurad(dir.path())
            .args(["run", agent, "--model", "test"])
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && text.contains("succeeded"),
            "{page}: `aurad run {agent} --model test` in the page's project:\n{text}"
        );
        assert!(text.contains(answer), "{page}: {text}");
    }
}

/// A heading's anchor as GitHub makes it: lower case, punctuation dropped,
/// spaces as `-`; a repeated one gets `-1`, `-2`, ...
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    let mut fence = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        }
        if fence || !line.starts_with('#') {
            continue;
        }
        let text = line.trim_start_matches('#').trim();
        let slug: String = text
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        anchors.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// The relative links of a page outside its code blocks: (line, target).
fn links(markdown: &str) -> Vec<(usize, String)> {
    let link = Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let code = Regex::new(r"``[^`]*``|`[^`]*`").unwrap();
    let mut found = Vec::new();
    let mut fence = false;
    for (index, line) in markdown.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        // Inline code may hold `](`; link texts in backticks stay links.
        let line = code.replace_all(line, |c: &regex::Captures| {
            let inner = &c[0];
            if inner.contains("](") {
                String::new()
            } else {
                inner.to_string()
            }
        });
        for caps in link.captures_iter(&line) {
            let target = caps[1].to_string();
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            found.push((index + 1, target));
        }
    }
    found
}

#[test]
fn every_relative_link_names_a_file_and_a_heading_that_exist() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let here = Path::new(ROOT).join(&page);
        let dir = here.parent().unwrap().to_path_buf();
        for (line, target) in links(&read(&page)) {
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let path: PathBuf = if file.is_empty() {
                here.clone()
            } else {
                dir.join(file)
            };
            if !path.exists() {
                failures.push(format!(
                    "{page}:{line}: {target}: no file {}",
                    path.display()
                ));
                continue;
            }
            if let Some(anchor) = anchor {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                if !anchors(&text).contains(anchor) {
                    failures.push(format!(
                        "{page}:{line}: {target}: no heading #{anchor} in {}",
                        path.display()
                    ));
                }
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} links found: is the parser right?"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let page = "# A page\n## Your agents as MCP tools: `aurad mcp serve` and `/mcp`\n\
                ```\n# not a heading\n```\n## Testing agents (`aurad test`, `aurad replay`)\n## A page\n";
    let made = anchors(page);
    for anchor in [
        "a-page",
        "your-agents-as-mcp-tools-aurad-mcp-serve-and-mcp",
        "testing-agents-aurad-test-aurad-replay",
        "a-page-1",
    ] {
        assert!(made.contains(anchor), "{anchor} not in {made:?}");
    }
    assert!(!made.contains("not-a-heading"), "{made:?}");
}

#[test]
fn a_block_names_its_file_project_and_expected_error() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "```yaml\n# agents/a.yaml project: p invalid: needs a price\nmodel: test\n```\n\
         ```json\n// mcp.json\n{}\n```\n```yaml\n# a comment, not a path\nx: 1\n```\n",
    )
    .unwrap();
    let found = examples(page.to_str().unwrap());
    assert_eq!(found.len(), 2, "{found:#?}");
    assert_eq!(found[0].path, "agents/a.yaml");
    assert_eq!(found[0].project.as_deref(), Some("p"));
    assert_eq!(found[0].invalid.as_deref(), Some("needs a price"));
    assert_eq!(found[0].text, "model: test\n");
    assert_eq!(found[1].path, "mcp.json");
    assert_eq!(found[1].project, None);
}
