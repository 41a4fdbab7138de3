//! Skill matching measured on real skills (issue #15): loads the SKILL.md
//! files of anthropics/skills, openai/skills and obra/superpowers committed
//! in `tests/fixtures/skills-corpus/` with the real loader (every skill must
//! load; warnings are allowed), runs the real `skills: auto` selection on the
//! labelled requests of `tests/fixtures/skills-ranking.yaml`, prints a table
//! and asserts: the labelled skill comes first for at least 90% of requests,
//! and at least 95% of unrelated requests inject no skill.
//!
//! `AURAD_SKILLS_CORPUS_EXTRA=DIR` adds the skills of project `DIR` (its
//! `skills/` folder) to the corpus, e.g. the four Anthropic document skills
//! that may not be redistributed (see the corpus README).
//!
//! Run: `cargo test --test skills_ranking -- --nocapture`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

use std::path::{Path, PathBuf};

use aurad::config::agent::SkillsChoice;
use aurad::skills::{Skill, load_skills, select_skills, skills_message};
use serde::Deserialize;

#[derive(Deserialize)]
struct Labelled {
    requests: Vec<Request>,
    unrelated: Vec<String>,
}

#[derive(Deserialize)]
struct Request {
    input: String,
    expect: String,
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The `SKILL.md` files under `root/skills/`, one level down.
fn skill_files(root: &Path) -> usize {
    std::fs::read_dir(root.join("skills"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.path().join("SKILL.md").is_file())
                .count()
        })
        .unwrap_or(0)
}

/// Every project root of the corpus: the committed repositories, then the
/// optional extra one.
fn corpus_roots() -> Vec<PathBuf> {
    let corpus = fixtures().join("skills-corpus");
    let mut roots: Vec<PathBuf> = std::fs::read_dir(&corpus)
        .expect("tests/fixtures/skills-corpus exists")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join("skills").is_dir())
        .collect();
    roots.sort();
    if let Some(extra) = std::env::var_os("AURAD_SKILLS_CORPUS_EXTRA") {
        roots.push(PathBuf::from(extra));
    }
    roots
}

fn is_chinese(text: &str) -> bool {
    text.chars().any(aurad::text::is_cjk_ideograph)
}

fn percent(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        100.0 * part as f64 / whole as f64
    }
}

#[test]
fn real_skills_load_and_rank() {
    // Load every repository with the real loader.
    let mut all: Vec<Skill> = Vec::new();
    let mut load_failures = Vec::new();
    println!(
        "\n{:<20} {:>6} {:>7} {:>9} {:>7}",
        "corpus", "files", "loaded", "warnings", "errors"
    );
    for root in corpus_roots() {
        let (skills, diags) = load_skills(&root);
        let files = skill_files(&root);
        let errors: Vec<String> = diags
            .iter()
            .filter(|d| d.is_error())
            .map(|d| d.to_string())
            .collect();
        let label = root.file_name().unwrap().to_string_lossy().to_string();
        println!(
            "{label:<20} {files:>6} {:>7} {:>9} {:>7}",
            skills.len(),
            diags.len() - errors.len(),
            errors.len()
        );
        for d in &diags {
            println!("    {d}");
        }
        if skills.len() != files || !errors.is_empty() {
            load_failures.push(format!(
                "{label}: {} of {files} loaded; {errors:?}",
                skills.len()
            ));
        }
        all.extend(skills);
    }

    let text = std::fs::read_to_string(fixtures().join("skills-ranking.yaml")).unwrap();
    let labelled: Labelled = serde_yaml::from_str(&text).unwrap();

    // Labelled requests: is the expected skill first?
    let (mut right, mut asked, mut skipped) = (0, 0, 0);
    let (mut right_zh, mut asked_zh) = (0, 0);
    println!(
        "\n{:<4} {:<32} {:<40} input",
        "ok", "expected", "got (score)"
    );
    for request in &labelled.requests {
        if !all.iter().any(|s| s.name == request.expect) {
            skipped += 1;
            continue;
        }
        let got = select_skills(&all, &SkillsChoice::Auto, &request.input).unwrap();
        let ok = got.first().is_some_and(|(s, _)| s.name == request.expect);
        asked += 1;
        right += usize::from(ok);
        if is_chinese(&request.input) {
            asked_zh += 1;
            right_zh += usize::from(ok);
        }
        let shown: Vec<String> = got
            .iter()
            .map(|(s, score)| format!("{} ({:.2})", s.name, score.unwrap_or_default()))
            .collect();
        println!(
            "{:<4} {:<32} {:<40} {}",
            if ok { "yes" } else { "NO" },
            request.expect,
            shown.join(", "),
            request.input
        );
    }

    // Unrelated requests: nothing injected.
    let (mut clean, mut injected_chars, mut injected_skills) = (0, 0, 0);
    println!(
        "\n{:<6} {:<8} unrelated input -> injected",
        "chars", "skills"
    );
    for input in &labelled.unrelated {
        let got = select_skills(&all, &SkillsChoice::Auto, input).unwrap();
        let chosen: Vec<&Skill> = got.iter().map(|(s, _)| *s).collect();
        let chars = skills_message(&chosen).chars().count();
        clean += usize::from(chosen.is_empty());
        injected_chars += chars;
        injected_skills += chosen.len();
        let names: Vec<&str> = chosen.iter().map(|s| s.name.as_str()).collect();
        println!("{chars:<6} {:<8} {input} -> {names:?}", chosen.len());
    }
    let unrelated = labelled.unrelated.len();

    let right_pct = percent(right, asked);
    let clean_pct = percent(clean, unrelated);
    println!("\nskills loaded: {}", all.len());
    println!(
        "right skill first: {right}/{asked} = {right_pct:.1}% (Chinese: {right_zh}/{asked_zh}); \
         skipped (skill not in corpus): {skipped}"
    );
    println!(
        "unrelated injecting nothing: {clean}/{unrelated} = {clean_pct:.1}%; \
         mean injected per unrelated request: {:.2} skills, {:.0} chars",
        injected_skills as f64 / unrelated as f64,
        injected_chars as f64 / unrelated as f64
    );

    assert!(
        load_failures.is_empty(),
        "skills failed to load: {load_failures:#?}"
    );
    assert!(asked >= 40, "only {asked} labelled requests apply");
    assert!(asked_zh >= 8, "only {asked_zh} Chinese requests apply");
    assert!(unrelated >= 15);
    assert!(right_pct >= 90.0, "right skill first {right_pct:.1}% < 90%");
    assert!(
        clean_pct >= 95.0,
        "unrelated injecting nothing {clean_pct:.1}% < 95%"
    );
}
