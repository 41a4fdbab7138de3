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
//! `skills_injected_vs_catalog` measures the two ways of offering skills
//! (injected or as a catalog) on the same corpus and requests.
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

/// Mean, median and largest of `values`.
fn summary(values: &[usize]) -> (f64, usize, usize) {
    if values.is_empty() {
        return (0.0, 0, 0);
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let mean = sorted.iter().sum::<usize>() as f64 / sorted.len() as f64;
    (mean, sorted[sorted.len() / 2], sorted[sorted.len() - 1])
}

fn show(label: &str, values: &[usize]) {
    let (mean, median, max) = summary(values);
    println!("{label:<58} {mean:>8.0} {median:>8} {max:>8}");
}

/// What the deterministic stand-in for a model reading the catalog loads:
/// the skill the ranker puts first when it sees what the model sees (each
/// skill's name and description, not its body), or nothing when no skill
/// qualifies.
fn stand_in_choice<'a>(catalog: &[&'a Skill], input: &str) -> Option<&'a Skill> {
    let seen: Vec<Skill> = catalog
        .iter()
        .map(|s| Skill::new(&s.name, &s.description, ""))
        .collect();
    let refs: Vec<&Skill> = seen.iter().collect();
    let first = aurad::skills::rank::rank(&refs, input).into_iter().next()?;
    let at = seen.iter().position(|s| std::ptr::eq(s, first.0))?;
    Some(catalog[at])
}

/// The two ways of offering skills, measured on the corpus (BENCHMARKS.md,
/// "Skills: injected vs catalog"): for each labelled request, the tokens
/// each mode puts in the context of every model call (the engine's own
/// estimate, `engine::context::estimate_text`), and whether the right skill
/// is used. Injected: the `skills: auto` selection's `[Skills]` message,
/// sent with every call; right when the labelled skill is among those
/// injected. Catalog: the catalog message and the `load_skill` tool's
/// schema, sent with every call; after the model loads a skill, every later
/// call also carries the call and its result (the skill's body). The model's
/// choice is played by a deterministic stand-in ([`stand_in_choice`]); right
/// when it loads the labelled skill. Run:
/// `cargo test --test skills_ranking skills_injected_vs_catalog -- --nocapture`.
#[test]
fn skills_injected_vs_catalog() {
    use aurad::engine::context::estimate_text;
    use aurad::run::skill_tool::SkillCatalog;
    use aurad::skills::catalog::{catalog_message, catalog_skills, loaded_text};

    let mut repos: Vec<(String, Vec<Skill>)> = Vec::new();
    for root in corpus_roots() {
        let (skills, _) = load_skills(&root);
        repos.push((
            root.file_name().unwrap().to_string_lossy().to_string(),
            skills,
        ));
    }
    let all: Vec<Skill> = repos.iter().flat_map(|(_, s)| s.clone()).collect();
    let text = std::fs::read_to_string(fixtures().join("skills-ranking.yaml")).unwrap();
    let labelled: Labelled = serde_yaml::from_str(&text).unwrap();

    let (agent, diags) = aurad::config::agent::parse_agent(
        "a",
        Path::new("agents/a.yaml"),
        "model: test\nprompt: p\nskills: { mode: catalog }\n",
        String::new(),
    );
    let agent = agent.unwrap_or_else(|| panic!("{diags:?}"));
    // What catalog mode adds to every call: its message and the tool's schema
    // (as the engine counts tools: the JSON of their specs).
    let fixed = |skills: &[Skill]| -> usize {
        let catalog = SkillCatalog::offered(skills, &agent).unwrap().unwrap();
        let spec = catalog.tool(None).spec().clone();
        estimate_text(&catalog.active().message)
            + estimate_text(&serde_json::to_string(&[spec]).unwrap())
    };
    let listed_all = catalog_skills(&all, &aurad::config::SkillsChoice::Auto).unwrap();
    assert_eq!(
        estimate_text(&catalog_message(&listed_all)),
        estimate_text(
            &SkillCatalog::offered(&all, &agent)
                .unwrap()
                .unwrap()
                .active()
                .message
        )
    );
    let fixed_all = fixed(&all);
    // A load: the assistant's call (name and arguments) and its result.
    let load_cost = |skill: &Skill| {
        estimate_text(aurad::skills::catalog::LOAD_SKILL)
            + estimate_text(&serde_json::json!({ "name": skill.name }).to_string())
            + estimate_text(&loaded_text(skill))
    };

    let mut inject_tokens = Vec::new();
    let (mut inject_right, mut inject_first) = (0, 0);
    let mut catalog_after = Vec::new();
    let mut repo_first = Vec::new();
    let mut repo_after = Vec::new();
    let (mut listed, mut chose_right, mut repo_right) = (0, 0, 0);
    let mut repo_inject = Vec::new();
    let mut runs: [(Vec<usize>, Vec<usize>); 2] = Default::default();
    let mut asked = 0;
    println!(
        "\n{:<32} {:>7} {:>4} {:>9} {:>9} {:<32} input",
        "expected", "inject", "in?", "catalog1", "catalog2+", "stand-in loads"
    );
    for request in &labelled.requests {
        let Some(expected) = all.iter().find(|s| s.name == request.expect) else {
            continue;
        };
        asked += 1;
        let chosen: Vec<&Skill> = select_skills(&all, &SkillsChoice::Auto, &request.input)
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        let injected = estimate_text(&skills_message(&chosen));
        let is_in = chosen.iter().any(|s| s.name == expected.name);
        inject_tokens.push(injected);
        inject_right += usize::from(is_in);
        inject_first += usize::from(chosen.first().is_some_and(|s| s.name == expected.name));

        listed += usize::from(listed_all.iter().any(|s| s.name == expected.name));
        let pick = stand_in_choice(&listed_all, &request.input);
        let right = pick.is_some_and(|s| s.name == expected.name);
        chose_right += usize::from(right);
        let after = fixed_all + pick.map_or(0, load_cost);
        catalog_after.push(after);

        // A project holding only the repository the skill comes from.
        let (_, own) = repos
            .iter()
            .find(|(_, skills)| skills.iter().any(|s| s.name == expected.name))
            .unwrap();
        let own_listed = catalog_skills(own, &SkillsChoice::Auto).unwrap();
        let own_pick = stand_in_choice(&own_listed, &request.input);
        repo_right += usize::from(own_pick.is_some_and(|s| s.name == expected.name));
        repo_first.push(fixed(own));
        repo_after.push(fixed(own) + own_pick.map_or(0, load_cost));
        let own_chosen: Vec<&Skill> = select_skills(own, &SkillsChoice::Auto, &request.input)
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        repo_inject.push(estimate_text(&skills_message(&own_chosen)));
        if own_pick.is_none_or(|s| s.name != expected.name) {
            println!(
                "    own repository's catalog: the stand-in loads {:?} for {:?}",
                own_pick.map(|s| &s.name),
                request.input
            );
        }
        // A whole run whose task takes `calls` model calls with the skill's
        // instructions at hand: injected, each call carries them; from the
        // catalog, one more call comes first (the one that loads it).
        for (calls, (inject_run, catalog_run)) in [1usize, 3].iter().zip(&mut runs) {
            inject_run.push(calls * injected);
            catalog_run.push(match pick {
                Some(_) => fixed_all + calls * after,
                None => calls * fixed_all,
            });
        }

        println!(
            "{:<32} {injected:>7} {:>4} {fixed_all:>9} {after:>9} {:<32} {}",
            expected.name,
            if is_in { "yes" } else { "NO" },
            format!(
                "{}{}",
                pick.map_or("-", |s| s.name.as_str()),
                if right { "" } else { " (wrong)" }
            ),
            request.input
        );
    }

    let mut unrelated_inject = Vec::new();
    let mut unrelated_loads = 0;
    for input in &labelled.unrelated {
        let chosen: Vec<&Skill> = select_skills(&all, &SkillsChoice::Auto, input)
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        unrelated_inject.push(estimate_text(&skills_message(&chosen)));
        if let Some(loaded) = stand_in_choice(&listed_all, input) {
            unrelated_loads += 1;
            println!(
                "    unrelated: the stand-in loads {:?} for {input:?}",
                loaded.name
            );
        }
    }
    let unrelated = labelled.unrelated.len();

    let bodies: Vec<usize> = listed_all
        .iter()
        .map(|s| estimate_text(&loaded_text(s)))
        .collect();
    println!(
        "\nskills: {} ({} listed by the catalog); requests: {asked} labelled, {unrelated} unrelated",
        all.len(),
        listed_all.len()
    );
    println!(
        "\n{:<58} {:>8} {:>8} {:>8}",
        "estimated tokens per model call", "mean", "median", "max"
    );
    show(
        "injected (auto, at most 3 bodies), labelled requests",
        &inject_tokens,
    );
    show(
        "catalog of all skills, before a load (list + tool schema)",
        &[fixed_all],
    );
    show(
        "catalog of all skills, after the stand-in's load",
        &catalog_after,
    );
    show(
        "catalog of the skill's own repository, before a load",
        &repo_first,
    );
    show(
        "catalog of the skill's own repository, after the load",
        &repo_after,
    );
    show(
        "injected from the skill's own repository only",
        &repo_inject,
    );
    show("injected, unrelated requests", &unrelated_inject);
    show("one skill loaded (call + result), each skill once", &bodies);
    println!(
        "\n{:<58} {:>8} {:>8} {:>8}",
        "estimated tokens per run (skills' part, all calls)", "mean", "median", "max"
    );
    for (calls, (inject_run, catalog_run)) in [1usize, 3].iter().zip(&runs) {
        show(
            &format!("injected, a task of {calls} model call(s)"),
            inject_run,
        );
        show(
            "catalog of all skills, the same task (+1 call to load)",
            catalog_run,
        );
    }
    println!(
        "\nright skill used: injected (labelled skill among those injected) {inject_right}/{asked} = {:.1}% (first: {inject_first}/{asked})",
        percent(inject_right, asked)
    );
    println!(
        "catalog: labelled skill listed {listed}/{asked} = {:.1}%; stand-in loads it {chose_right}/{asked} = {:.1}% (own repository's catalog: {repo_right}/{asked} = {:.1}%)",
        percent(listed, asked),
        percent(chose_right, asked),
        percent(repo_right, asked)
    );
    println!(
        "unrelated requests: injected nothing {}/{unrelated}; the stand-in loads nothing {}/{unrelated}",
        unrelated_inject.iter().filter(|t| **t == 0).count(),
        unrelated - unrelated_loads
    );

    // What holds by construction, and what the figures must keep showing.
    assert_eq!(listed, asked, "`skills: auto` lists every visible skill");
    assert!(percent(chose_right, asked) >= 85.0);
    assert!(percent(inject_right, asked) >= 95.0);
    let (catalog_mean, _, _) = summary(&catalog_after);
    let (inject_mean, _, _) = summary(&inject_tokens);
    assert!(
        catalog_mean < inject_mean,
        "catalog {catalog_mean:.0} vs injected {inject_mean:.0} tokens per call"
    );
}
