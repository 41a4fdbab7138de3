//! Agent Skills: lenient loading per the specification's client guide
//! (fixture `broken_skills`: warnings for what loads anyway, located errors
//! for what cannot), the three scanned folders and their precedence,
//! Claude Code fields, matching of English and Chinese inputs, hidden and
//! `disable-model-invocation` skills, at most 3, ordering, the `[Skills]`
//! message, and `aurad skills` on the fixture project `skills` (listing,
//! `--input`, `--agent` auto / catalog / pinned / none / unknown names, `--json`,
//! `show`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

use std::path::{Path, PathBuf};

use assert_cmd::cargo::cargo_bin_cmd;
use aurad::config::agent::SkillsChoice;
use aurad::skills::{
    MAX_ACTIVE_SKILLS, MIN_SCORE, Skill, load_skills, match_skills, select_skills, skills_message,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn skill(name: &str, description: &str, body: &str) -> Skill {
    Skill::new(name, description, body)
}

fn names<'a>(matched: &[(&'a Skill, f64)]) -> Vec<&'a str> {
    matched.iter().map(|(s, _)| s.name.as_str()).collect()
}

/// Writes `root/rel` (parents created).
fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The skills of fixture `broken_skills` that load (some with warnings).
const BROKEN_FIXTURE_LOADED: [&str; 5] = [
    "Bad_Name",
    "good",
    "long-description",
    "mismatch",
    "unknown-field",
];

#[test]
fn what_can_load_loads_with_warnings_and_the_rest_has_located_errors() {
    let (skills, diags) = load_skills(&fixture("broken_skills"));
    let got: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
    let expected = [
        "skills/Bad_Name/SKILL.md:2:7: warning: name `Bad_Name` has characters the specification does not allow",
        "skills/empty-folder: warning: the folder has no SKILL.md",
        "skills/long-description/SKILL.md:3:14: warning: `description` is 1025 characters long, over the specification's 1024; loaded anyway",
        "skills/mismatch/SKILL.md:3:7: warning: name `other-name` does not match its folder skills/mismatch/: the skill is named `mismatch` after the folder",
        "skills/no-description/SKILL.md:1:1: `description` is required",
        "skills/no-front-matter/SKILL.md:1:1: missing front matter",
        "skills/type-error/SKILL.md:4:9: hidden: invalid type: string \"sometimes\", expected a boolean",
        "skills/unclosed/SKILL.md:1:1: unclosed front matter",
        "skills/unknown-field/SKILL.md:4:7: warning: note: field(s) `tags` accepted and not used by aurad",
    ];
    for line in expected {
        assert!(
            got.iter().any(|g| g.starts_with(line)),
            "missing {line:?} in:\n{}",
            got.join("\n")
        );
    }
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    assert_eq!(diags.iter().filter(|d| d.is_error()).count(), 4);
    let loaded: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(loaded, BROKEN_FIXTURE_LOADED);
    let good = &skills[1];
    assert_eq!(good.path, Path::new("skills/good/SKILL.md"));
    assert_eq!(good.body, "body");
    assert_eq!(skills[3].declared_name.as_deref(), Some("other-name"));
    assert_eq!(skills[4].unused_fields, ["tags"]);
}

#[test]
fn claude_code_and_unicode_skills_load() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        ".claude/skills/deploy/SKILL.md",
        "---\nname: deploy\ndescription: Deploy the app to staging.\n\
         disable-model-invocation: true\nuser-invocable: true\nargument-hint: \"[env]\"\n\
         allowed-tools: Bash(git push:*), Read\nmodel: inherit\ncontext: fork\nagent: Explore\n\
         hooks:\n  PreToolUse: []\n---\nRun the deploy script for $ARGUMENTS.\n",
    );
    write(
        dir.path(),
        "skills/技能/SKILL.md",
        "---\nname: 技能\ndescription: 部署应用到测试环境\n---\n",
    );
    let (skills, diags) = load_skills(dir.path());
    let got: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
    assert_eq!(got.len(), 1, "{got:#?}");
    assert!(
        got[0].starts_with(
            ".claude/skills/deploy/SKILL.md:5:17: warning: note: field(s) `user-invocable`, \
             `argument-hint`, `model`, `context`, `agent`, `hooks` accepted and not used"
        ),
        "{got:#?}"
    );
    let deploy = skills.iter().find(|s| s.name == "deploy").unwrap();
    assert!(deploy.hidden && deploy.disable_model_invocation);
    assert_eq!(deploy.allowed_tools, ["Bash(git push:*)", "Read"]);
    assert_eq!(deploy.path, Path::new(".claude/skills/deploy/SKILL.md"));
    assert!(skills.iter().any(|s| s.name == "技能"));

    // Never auto-matched, however well the input fits; pinned, it is there.
    assert!(match_skills(&skills, "deploy the app to staging", 3).is_empty());
    let pinned = select_skills(&skills, &SkillsChoice::Named(vec!["deploy".into()]), "").unwrap();
    assert_eq!(pinned[0].0.name, "deploy");
    // A unicode-named skill matches Chinese input.
    assert_eq!(
        names(&match_skills(&skills, "帮我部署到测试环境", 3)),
        ["技能"]
    );
}

#[test]
fn three_folders_in_order_and_the_first_wins_a_name_clash() {
    let dir = tempfile::tempdir().unwrap();
    let skill_md = |name: &str, description: &str| {
        format!("---\nname: {name}\ndescription: {description}\n---\n")
    };
    for (rel, name, from) in [
        ("skills/a", "a", "from skills"),
        (".agents/skills/a", "a", "from agents"),
        (".agents/skills/b", "b", "from agents"),
        (".claude/skills/b", "b", "from claude"),
        (".claude/skills/c", "c", "from claude"),
    ] {
        write(
            dir.path(),
            &format!("{rel}/SKILL.md"),
            &skill_md(name, from),
        );
    }
    let (skills, diags) = load_skills(dir.path());
    let got: Vec<(&str, &str, &Path)> = skills
        .iter()
        .map(|s| (s.name.as_str(), s.description.as_str(), s.path.as_path()))
        .collect();
    assert_eq!(
        got,
        [
            ("a", "from skills", Path::new("skills/a/SKILL.md")),
            ("b", "from agents", Path::new(".agents/skills/b/SKILL.md")),
            ("c", "from claude", Path::new(".claude/skills/c/SKILL.md")),
        ]
    );
    let got: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
    assert_eq!(
        got,
        [
            ".agents/skills/a/SKILL.md: warning: a skill named `a` is already loaded from \
             skills/a/SKILL.md, which comes first (order: skills, .agents/skills, .claude/skills); \
             this one is ignored: rename or remove one of them",
            ".claude/skills/b/SKILL.md: warning: a skill named `b` is already loaded from \
             .agents/skills/b/SKILL.md, which comes first (order: skills, .agents/skills, \
             .claude/skills); this one is ignored: rename or remove one of them",
        ]
    );
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
    assert_eq!(skills[0].license.as_deref(), Some("MIT"));
    assert_eq!(skills[0].metadata["author"], "aurad");
    assert_eq!(skills[1].allowed_tools, ["bash"]);
    assert_eq!(skills[3].compatibility.as_deref(), Some("any SQL database"));
}

#[test]
fn chinese_input_without_spaces_matches() {
    let (skills, _) = load_skills(&fixture("skills"));
    let matched = match_skills(&skills, "帮我搜索一下最新的新闻", MAX_ACTIVE_SKILLS);
    assert_eq!(names(&matched), ["web-search"]);
    // The description alone is enough: 帮 搜 索 最 新 are in it.
    let only = [skill(
        "web-search",
        "网络搜索技能，帮助用户查找最新信息",
        "",
    )];
    let matched = match_skills(&only, "帮我搜索一下最新的新闻", 3);
    assert_eq!(names(&matched), ["web-search"]);
    assert!(matched[0].1 >= MIN_SCORE);
    // Mixed input: English words find a skill by its name.
    let matched = match_skills(&skills, "用 search_web 查一下", 3);
    assert_eq!(matched[0].0.name, "web-search");
}

#[test]
fn english_input_matches_whole_words_and_orders_by_score() {
    let (skills, _) = load_skills(&fixture("skills"));
    let matched = match_skills(&skills, "write a git commit message for my diff", 3);
    assert_eq!(matched[0].0.name, "git-commit", "{:?}", names(&matched));
    let matched = match_skills(&skills, "review this pull request for bugs", 3);
    assert_eq!(matched[0].0.name, "code-review", "{:?}", names(&matched));
    assert!(matched.windows(2).all(|w| w[0].1 >= w[1].1));
    let matched = match_skills(&skills, "explain this SQL query", 3);
    assert_eq!(names(&matched), ["sql-query"]);
    // Stop words alone match nothing, and `a` is not a substring match.
    assert!(match_skills(&skills, "what is a the of", 3).is_empty());
    assert!(match_skills(&skills, "", 3).is_empty());
    // Small talk matches nothing.
    assert!(match_skills(&skills, "hi there, how are you doing today?", 3).is_empty());
    assert!(match_skills(&skills, "What's 17 times 23?", 3).is_empty());
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
        skill("delta", "alpha beta kappa", ""),
        skill("alpha-one", "alpha", ""),
        skill("charlie", "alpha beta gamma kappa", ""),
        skill("bravo", "alpha beta kappa", ""),
        skill("echo", "nothing here", ""),
        skill(
            "foxtrot",
            "other words",
            "alpha beta gamma in the body only",
        ),
    ];
    let matched = match_skills(&skills, "alpha beta gamma kappa", MAX_ACTIVE_SKILLS);
    assert_eq!(names(&matched), ["charlie", "bravo", "delta"]);
    assert!(matched[0].1 > matched[1].1);
    assert_eq!(matched[1].1, matched[2].1);
    // alpha-one shares one common word; foxtrot only in its body; echo none.
    assert_eq!(match_skills(&skills, "alpha beta gamma kappa", 10).len(), 3);
    assert_eq!(match_skills(&skills, "alpha beta kappa", 1).len(), 1);
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

fn json_names(stdout: &str) -> Vec<(String, Option<f64>)> {
    let rows: serde_json::Value = serde_json::from_str(stdout).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r.get("score").and_then(|s| s.as_f64()),
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
    let got = json_names(&stdout);
    assert_eq!(got.len(), 1, "{stdout}");
    assert_eq!(got[0].0, "web-search");
    assert!(got[0].1.unwrap() >= MIN_SCORE, "{stdout}");

    let (code, stdout, _) = skills_cmd(&["--input", "review this pull request for bugs"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("SCORE   NAME"), "{stdout}");
    let (score, rest) = lines[1].trim_start().split_once("  ").unwrap();
    assert!(rest.starts_with("code-review"), "{stdout}");
    let score: f64 = score.parse().unwrap();
    assert!(score >= MIN_SCORE && lines[1].contains('.'), "{stdout}");

    let (code, stdout, stderr) = skills_cmd(&["--input", "release runbook zebra"]);
    assert_eq!(code, 0);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("no skill matches the input"), "{stderr}");
}

#[test]
fn cli_show_prints_every_field() {
    let (code, stdout, stderr) = skills_cmd(&["show", "code-review"]);
    assert_eq!(code, 0, "{stderr}");
    for line in [
        "name:           code-review",
        "path:           skills/code-review/SKILL.md",
        "auto-matched:   yes",
        "license:        MIT",
        "metadata:\n  author: aurad",
        "## When to use",
    ] {
        assert!(stdout.contains(line), "{line:?} not in:\n{stdout}");
    }
    let (code, stdout, _) = skills_cmd(&["show", "git-commit", "--json"]);
    assert_eq!(code, 0);
    let shown: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(shown["allowed_tools"], serde_json::json!(["bash"]));
    let (_, stdout, _) = skills_cmd(&["show", "sql-query"]);
    assert!(
        stdout.contains("compatibility:  any SQL database"),
        "{stdout}"
    );
    let (_, stdout, _) = skills_cmd(&["show", "release-runbook"]);
    assert!(
        stdout.contains("auto-matched:   no (hidden: true)"),
        "{stdout}"
    );

    let (code, _, stderr) = skills_cmd(&["show", "nope"]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("no skill named `nope` was loaded (skills: code-review, git-commit"),
        "{stderr}"
    );

    // Unused fields and warnings, from a folder Claude Code reads.
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        ".claude/skills/deploy/SKILL.md",
        "---\nname: Deploy\ndescription: Deploy it.\ndisable-model-invocation: on\nmodel: opus\n---\nsteps\n",
    );
    let out = cargo_bin_cmd!("aurad")
        .args(["skills", "show", "deploy", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("declared name:  Deploy"), "{stdout}");
    assert!(
        stdout.contains("auto-matched:   no (disable-model-invocation: true)"),
        "{stdout}"
    );
    assert!(stdout.contains("not used:       model"), "{stdout}");
    assert!(
        stderr.contains("warning: name `Deploy` has characters"),
        "{stderr}"
    );
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

    // A catalog (the default mode): every skill not hidden, whatever the
    // input, unscored.
    let (code, stdout, stderr) = skills_cmd(&[
        "--agent",
        "catalog",
        "--input",
        "explain this SQL query",
        "--json",
    ]);
    assert_eq!(code, 0);
    assert_eq!(
        json_names(&stdout),
        ["code-review", "git-commit", "sql-query", "web-search"].map(|n| (n.to_string(), None))
    );
    assert!(
        stderr
            .contains("agent `catalog` offers these skills as a catalog (`skills.mode: catalog`)"),
        "{stderr}"
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
    let loaded: Vec<String> = json_names(&stdout).into_iter().map(|(n, _)| n).collect();
    assert_eq!(loaded, BROKEN_FIXTURE_LOADED);
    assert!(
        stderr.contains("skills/mismatch/SKILL.md:3:7: warning: name `other-name`"),
        "{stderr}"
    );
}
