//! Agent Skills: front-matter errors with their places (fixture
//! `broken_skills`), matching of English and Chinese inputs, hidden skills,
//! at most 3, ordering, the `[Skills]` message, and `aurad skills` on the
//! fixture project `skills` (listing, `--input`, `--agent` auto / pinned /
//! none / unknown names, `--json`).

use std::path::{Path, PathBuf};

use assert_cmd::cargo::cargo_bin_cmd;
use aurad::skills::{MAX_ACTIVE_SKILLS, Skill, load_skills, match_skills, skills_message};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn skill(name: &str, description: &str, body: &str) -> Skill {
    Skill {
        name: name.into(),
        description: description.into(),
        body: body.into(),
        hidden: false,
        path: PathBuf::from(format!("skills/{name}/SKILL.md")),
    }
}

fn names<'a>(matched: &[(&'a Skill, usize)]) -> Vec<(&'a str, usize)> {
    matched.iter().map(|(s, n)| (s.name.as_str(), *n)).collect()
}

#[test]
fn every_front_matter_problem_is_reported_with_its_place() {
    let (skills, diags) = load_skills(&fixture("broken_skills"));
    let got: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
    let expected = [
        "skills/Bad_Name/SKILL.md:2:7: name `Bad_Name` has characters that are not allowed",
        "skills/empty-folder: warning: the folder has no SKILL.md",
        "skills/long-description/SKILL.md:3:14: `description` is 1025 characters long; shorten it to at most 1024",
        "skills/mismatch/SKILL.md:3:7: name `other-name` does not match its folder skills/mismatch/",
        "skills/no-description/SKILL.md:1:1: `description` is required",
        "skills/no-front-matter/SKILL.md:1:1: missing front matter",
        "skills/type-error/SKILL.md:4:9: hidden: invalid type: string \"sometimes\", expected a boolean",
        "skills/unclosed/SKILL.md:1:1: unclosed front matter",
        "skills/unknown-field/SKILL.md:4:1: unknown field `tags`, expected one of `name`, `description`, `license`, `compatibility`, `metadata`, `allowed-tools`, `hidden`",
    ];
    for line in expected {
        assert!(
            got.iter().any(|g| g.starts_with(line)),
            "missing {line:?} in:\n{}",
            got.join("\n")
        );
    }
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    assert_eq!(diags.iter().filter(|d| d.is_error()).count(), 8);
    let loaded: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(loaded, ["good"]);
    assert_eq!(skills[0].path, Path::new("skills/good/SKILL.md"));
    assert_eq!(skills[0].body, "body");
}

#[test]
fn no_skills_folder_is_no_skills_and_no_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(load_skills(dir.path()), (Vec::new(), Vec::new()));
}

#[test]
fn fixture_skills_load_in_name_order() {
    let (skills, diags) = load_skills(&fixture("skills"));
    assert!(diags.is_empty(), "{diags:?}");
    let loaded: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        loaded,
        [
            "code-review",
            "git-commit",
            "release-runbook",
            "sql-query",
            "web-search"
        ]
    );
    assert!(skills[2].hidden);
    assert!(skills[4].body.starts_with("## 使用场景"));
}

#[test]
fn chinese_input_without_spaces_matches() {
    let (skills, _) = load_skills(&fixture("skills"));
    let matched = match_skills(&skills, "帮我搜索一下最新的新闻", MAX_ACTIVE_SKILLS);
    assert_eq!(matched.len(), 1, "{:?}", names(&matched));
    assert_eq!(matched[0].0.name, "web-search");
    // The description alone is enough: 帮 搜 索 最 新 are in it.
    let only = [skill(
        "web-search",
        "网络搜索技能，帮助用户查找最新信息",
        "",
    )];
    let matched = match_skills(&only, "帮我搜索一下最新的新闻", 3);
    assert_eq!(names(&matched), [("web-search", 5)]);
    // Mixed input: an English word finds a Chinese skill's body.
    let matched = match_skills(&skills, "用 search_web 查一下", 3);
    assert_eq!(matched[0].0.name, "web-search");
}

#[test]
fn english_input_matches_whole_words_and_orders_by_score() {
    let (skills, _) = load_skills(&fixture("skills"));
    let matched = match_skills(&skills, "Please review my git diff", 3);
    assert_eq!(names(&matched), [("git-commit", 3), ("code-review", 2)]);
    let matched = match_skills(&skills, "explain this SQL query", 3);
    assert_eq!(matched[0].0.name, "sql-query");
    // Stop words alone match nothing, and `a` is not a substring match.
    assert!(match_skills(&skills, "what is a the of", 3).is_empty());
    assert!(match_skills(&skills, "", 3).is_empty());
}

#[test]
fn hidden_skills_are_never_matched() {
    let (skills, _) = load_skills(&fixture("skills"));
    let matched = match_skills(&skills, "internal release runbook", 3);
    assert!(
        matched.iter().all(|(s, _)| s.name != "release-runbook"),
        "{:?}",
        names(&matched)
    );
}

#[test]
fn at_most_max_best_first_ties_by_name() {
    let skills = [
        skill("delta", "alpha beta", ""),
        skill("alpha-one", "alpha", ""),
        skill("charlie", "alpha beta gamma", ""),
        skill("bravo", "alpha beta", ""),
        skill("echo", "nothing here", ""),
    ];
    let matched = match_skills(&skills, "alpha beta gamma", MAX_ACTIVE_SKILLS);
    assert_eq!(
        names(&matched),
        [("charlie", 3), ("bravo", 2), ("delta", 2)]
    );
    assert_eq!(match_skills(&skills, "alpha", 10).len(), 4);
    assert_eq!(match_skills(&skills, "alpha", 1).len(), 1);
}

#[test]
fn skills_message_has_the_seed_format() {
    let a = skill("web-search", "网络搜索技能", "## 使用场景\n联网查询");
    let b = skill("bare", "No body.", "");
    assert_eq!(
        skills_message(&[&a, &b]),
        "[Skills]\n## web-search\n网络搜索技能\n\n## 使用场景\n联网查询\n\n## bare\nNo body."
    );
    assert_eq!(skills_message(&[]), "");
}

fn skills_cmd(args: &[&str]) -> (i32, String, String) {
    let out = cargo_bin_cmd!("aurad")
        .arg("skills")
        .args(args)
        .arg("--dir")
        .arg(fixture("skills"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn json_names(stdout: &str) -> Vec<(String, Option<u64>)> {
    let rows: serde_json::Value = serde_json::from_str(stdout).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r.get("score").and_then(|s| s.as_u64()),
            )
        })
        .collect()
}

#[test]
fn cli_lists_every_skill_with_hidden_flag_and_path() {
    let (code, stdout, stderr) = skills_cmd(&[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("NAME"), "{stdout}");
    let runbook = stdout
        .lines()
        .find(|l| l.starts_with("release-runbook"))
        .unwrap();
    assert!(runbook.contains("yes") && runbook.ends_with("skills/release-runbook/SKILL.md"));
    assert_eq!(stdout.lines().count(), 6, "{stdout}");

    let (code, stdout, _) = skills_cmd(&["--json"]);
    assert_eq!(code, 0);
    let rows: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 5);
    assert_eq!(rows[2]["name"], "release-runbook");
    assert_eq!(rows[2]["hidden"], true);
    assert_eq!(rows[2]["path"], "skills/release-runbook/SKILL.md");
    assert!(rows[2].get("score").is_none());
}

#[test]
fn cli_input_shows_matches_and_scores() {
    let (code, stdout, _) = skills_cmd(&["--input", "帮我搜索一下最新的新闻", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(json_names(&stdout), [("web-search".to_string(), Some(6))]);

    let (code, stdout, _) = skills_cmd(&["--input", "review my git diff"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("SCORE  NAME"), "{stdout}");
    assert!(
        lines[1].trim_start().starts_with("3  git-commit"),
        "{stdout}"
    );
    assert!(
        lines[2].trim_start().starts_with("2  code-review"),
        "{stdout}"
    );

    let (code, stdout, stderr) = skills_cmd(&["--input", "release runbook zebra"]);
    assert_eq!(code, 0);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("no skill matches the input"), "{stderr}");
}

#[test]
fn cli_agent_choice_auto_pinned_none() {
    let (code, stdout, _) = skills_cmd(&[
        "--agent",
        "auto",
        "--input",
        "explain this SQL query",
        "--json",
    ]);
    assert_eq!(code, 0);
    assert_eq!(json_names(&stdout)[0].0, "sql-query");

    // Pinned: exactly those, in order, hidden included, whatever the input.
    let (code, stdout, _) = skills_cmd(&["--agent", "release", "--input", "SQL", "--json"]);
    assert_eq!(code, 0);
    assert_eq!(
        json_names(&stdout),
        [
            ("release-runbook".to_string(), None),
            ("git-commit".to_string(), None)
        ]
    );

    let (code, stdout, stderr) = skills_cmd(&["--agent", "plain", "--input", "SQL query"]);
    assert_eq!(code, 0);
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("uses no skills (`skills: none`)"),
        "{stderr}"
    );

    let (code, _, stderr) = skills_cmd(&["--agent", "unknown_skill"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("unknown skill(s) `nope`; known skills: code-review"),
        "{stderr}"
    );

    let (code, _, stderr) = skills_cmd(&["--agent", "nobody"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no agent named `nobody`"), "{stderr}");
}

#[test]
fn cli_reports_broken_skills_and_lists_the_rest() {
    let out = cargo_bin_cmd!("aurad")
        .args(["skills", "--json", "--dir"])
        .arg(fixture("broken_skills"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("skills/unclosed/SKILL.md:1:1: unclosed front matter"),
        "{stderr}"
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(json_names(&stdout), [("good".to_string(), None)]);
}
