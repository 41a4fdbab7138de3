//! `aurad init`: the new project validates and runs offline for every
//! provider, nothing is overwritten, the store stays out of git, and the
//! test model answers an agent's `output_schema` with JSON that matches it.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step should stop it loudly"
)]

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;

fn aurad(dir: &Path, args: &[&str]) -> Output {
    Command::cargo_bin("aurad")
        .unwrap()
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn show(out: &Output) -> String {
    format!(
        "{}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

#[test]
fn every_provider_gives_a_project_that_validates_and_runs_offline() {
    for provider in ["openai", "anthropic", "gemini", "ollama"] {
        let work = tempfile::tempdir().unwrap();
        let out = aurad(work.path(), &["init", "demo", "--provider", provider]);
        assert!(out.status.success(), "{provider}: {}", show(&out));
        let said = text(&out.stdout);
        for file in [
            "aurad.yaml",
            "agents/hello.yaml",
            "skills/arithmetic/SKILL.md",
            ".gitignore",
        ] {
            assert!(
                work.path().join("demo").join(file).is_file(),
                "{provider}: {file}"
            );
            assert!(
                said.contains(file),
                "{provider}: {file} not listed:\n{said}"
            );
        }
        assert!(said.contains("cd demo"), "{said}");
        let demo = work.path().join("demo");
        let agent = std::fs::read_to_string(demo.join("agents/hello.yaml")).unwrap();
        assert!(agent.contains(&format!("model: {provider}/")), "{agent}");

        let out = aurad(&demo, &["validate"]);
        assert!(out.status.success(), "{provider}: {}", show(&out));
        assert!(
            text(&out.stderr).contains("ok: 1 agent(s)"),
            "{}",
            show(&out)
        );

        let out = aurad(&demo, &["skills"]);
        assert!(text(&out.stdout).contains("arithmetic"), "{}", show(&out));

        let out = aurad(&demo, &["run", "hello", "--model", "test"]);
        assert!(out.status.success(), "{provider}: {}", show(&out));
        assert!(
            text(&out.stdout).contains("calculator: ok: 14"),
            "{}",
            show(&out)
        );
    }
}

#[test]
fn init_into_the_current_directory_without_a_name() {
    let work = tempfile::tempdir().unwrap();
    let out = aurad(work.path(), &["init"]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(work.path().join("agents/hello.yaml").is_file());
    assert!(!text(&out.stdout).contains("cd "), "{}", show(&out));
}

#[test]
fn nothing_is_overwritten_and_a_refusal_writes_nothing() {
    let work = tempfile::tempdir().unwrap();
    let demo = work.path().join("demo");
    std::fs::create_dir_all(demo.join("agents")).unwrap();
    std::fs::write(demo.join("aurad.yaml"), "listen: 127.0.0.1:9999\n").unwrap();
    let out = aurad(work.path(), &["init", "demo"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = text(&out.stderr);
    assert!(
        err.contains("aurad.yaml") && err.contains("never overwrites"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(demo.join("aurad.yaml")).unwrap(),
        "listen: 127.0.0.1:9999\n"
    );
    assert!(
        !demo.join("agents/hello.yaml").exists(),
        "a refusal wrote a file"
    );
    assert!(!demo.join(".gitignore").exists(), "a refusal wrote a file");

    let again = tempfile::tempdir().unwrap();
    assert!(aurad(again.path(), &["init", "p"]).status.success());
    let out = aurad(again.path(), &["init", "p", "--provider", "ollama"]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let agent = std::fs::read_to_string(again.path().join("p/agents/hello.yaml")).unwrap();
    assert!(agent.contains("model: openai/"), "overwritten: {agent}");
}

#[test]
fn the_store_and_its_wal_stay_out_of_git() {
    let work = tempfile::tempdir().unwrap();
    assert!(aurad(work.path(), &["init"]).status.success());
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(work.path())
            .output()
            .unwrap()
    };
    assert!(git(&["init", "-q"]).status.success());
    // A run creates the store (and, while open, its WAL and shared memory).
    assert!(
        aurad(work.path(), &["run", "hello", "--model", "test"])
            .status
            .success()
    );
    assert!(work.path().join("aurad.db").is_file());
    for companion in ["aurad.db-wal", "aurad.db-shm", ".aurad.lock", ".env"] {
        std::fs::write(work.path().join(companion), "x").unwrap();
    }
    let status = git(&["status", "--porcelain", "--untracked-files=all"]);
    let listed = text(&status.stdout);
    for ignored in ["aurad.db", ".aurad.lock", ".env"] {
        assert!(
            !listed
                .lines()
                .any(|l| l.ends_with(ignored) || l.contains(&format!("{ignored}-"))),
            "git sees {ignored}:\n{listed}"
        );
    }
    for kept in [
        "aurad.yaml",
        "agents/hello.yaml",
        "skills/arithmetic/SKILL.md",
        ".gitignore",
    ] {
        assert!(listed.contains(kept), "git does not see {kept}:\n{listed}");
    }
}

#[test]
fn the_test_model_answers_an_output_schema_with_matching_json() {
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join("agents")).unwrap();
    std::fs::write(
        work.path().join("agents/summary.yaml"),
        "model: openai/gpt-4o-mini
prompt: Summarise the week.
output_schema:
  type: object
  required: [title, points]
  additionalProperties: false
  properties:
    title: { type: string, minLength: 3 }
    points: { type: array, items: { type: string }, minItems: 2 }
    mood: { enum: [good, bad] }
",
    )
    .unwrap();
    let out = aurad(work.path(), &["run", "summary", "--model", "test"]);
    assert!(out.status.success(), "{}", show(&out));
    let stdout = text(&out.stdout);
    let start = stdout.find('{').expect("a JSON answer");
    let end = stdout.rfind('}').unwrap();
    let answer: serde_json::Value = serde_json::from_str(&stdout[start..=end]).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"title": "aaa", "points": ["a", "a"], "mood": "good"}),
        "{stdout}"
    );
}
