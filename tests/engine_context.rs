//! What goes into a run's context besides the input: long-term memories
//! recalled ahead of it (saved by an earlier run through `memory_save`) and
//! matched or pinned skills after the system prompt (`mode: inject`; the
//! catalog is tests/skills_catalog.rs). Real mock server, real
//! SQLite file, the real binary for `aurad logs`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use assert_cmd::cargo::cargo_bin_cmd;
use aurad::engine::RunOutcome;
use aurad::types::{RunEvent, RunState};
use predicates::prelude::*;
use support::mock_llm::{MockLlm, Reply};
use support::project::{project_with_mock, run_agent, run_id};
use tokio_util::sync::CancellationToken;

async fn run(dir: &std::path::Path, input: &str) -> (RunOutcome, Vec<RunEvent>) {
    let (outcome, events, store) = run_agent(dir, input, CancellationToken::new()).await;
    store.close().unwrap();
    (outcome, events)
}

#[tokio::test]
async fn a_memory_saved_in_one_run_is_recalled_into_the_next() {
    let mock = MockLlm::start().await;
    mock.push(Reply::ToolCalls(vec![(
        "c1".into(),
        "memory_save".into(),
        r#"{"content": "The user prefers Python for scripting tasks", "category": "preference", "importance": 8}"#.into(),
    )]));
    mock.push(Reply::Text("Noted.".into()));
    let dir = project_with_mock(&mock, "model: mock/m\nsystem: s\nmemory: { tools: true }\n");
    let (first, events) = run(dir.path(), "Remember that I like Python for scripting").await;
    assert_eq!(first.state, RunState::Succeeded, "{:?}", first.reason);
    let saved = events.iter().find_map(|e| match e {
        RunEvent::ToolResult {
            output,
            is_error: false,
            ..
        } => Some(output.clone()),
        _ => None,
    });
    assert!(saved.is_some(), "{events:#?}");

    mock.push(Reply::Text("Use Python.".into()));
    let (second, events) = run(
        dir.path(),
        "Which language should I use for a scripting job?",
    )
    .await;
    assert_eq!(second.state, RunState::Succeeded);
    let recalled = events.iter().find_map(|e| match e {
        RunEvent::MemoryRecalled { memories, .. } => Some(memories.clone()),
        _ => None,
    });
    let recalled = recalled.expect("a MemoryRecalled event");
    assert_eq!(recalled.len(), 1);
    assert!(recalled[0].score > 0.05);
    let requests = mock.requests();
    let user = requests[2]
        .messages()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        user.contains("The user prefers Python for scripting tasks"),
        "{user}"
    );
    assert!(
        user.ends_with("Which language should I use for a scripting job?"),
        "{user}"
    );

    cargo_bin_cmd!("aurad")
        .args(["logs", &run_id(&events), "--dir"])
        .arg(dir.path())
        .assert()
        .code(0)
        .stderr(
            predicate::str::contains("recalled 1 memories from `a`")
                .and(predicate::str::contains("prefers Python")),
        );
}

fn write_skill(dir: &std::path::Path, name: &str, description: &str, body: &str) {
    let folder = dir.join("skills").join(name);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n"),
    )
    .unwrap();
}

#[tokio::test]
async fn matched_skills_follow_the_system_prompt() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("ok".into()));
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: You help.\nskills: { mode: inject }\n",
    );
    write_skill(
        dir.path(),
        "web-search",
        "网络搜索技能，帮助用户查找最新信息",
        "## 使用场景\n当用户询问实时信息时搜索。",
    );
    write_skill(
        dir.path(),
        "cooking",
        "Recipes and kitchen advice.",
        "Use metric units.",
    );
    let (outcome, events) = run(dir.path(), "帮我搜索一下最新的新闻").await;
    assert_eq!(outcome.state, RunState::Succeeded);
    assert!(events.iter().any(|e| matches!(e, RunEvent::SkillsActivated { skills, how } if skills == &["web-search".to_string()] && *how == aurad::types::SkillActivation::Auto)));
    let messages = mock.requests()[0].messages().clone();
    assert_eq!(messages[0]["content"], "You help.");
    assert_eq!(messages[1]["role"], "system");
    let skills = messages[1]["content"].as_str().unwrap();
    assert!(skills.starts_with("[Skills]\n## web-search"), "{skills}");
    assert!(!skills.contains("cooking"));
}

#[tokio::test]
async fn pinned_skills_always_and_none_never() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("ok".into()));
    mock.push(Reply::Text("ok".into()));
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\nskills: { mode: inject, use: [cooking] }\n",
    );
    write_skill(
        dir.path(),
        "cooking",
        "Recipes and kitchen advice.",
        "Use metric units.",
    );
    let (_, events) = run(dir.path(), "nothing to do with food").await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, RunEvent::SkillsActivated { how, .. } if *how == aurad::types::SkillActivation::Pinned))
    );
    assert!(
        mock.requests()[0].messages()[1]["content"]
            .as_str()
            .unwrap()
            .contains("## cooking")
    );

    std::fs::write(
        dir.path().join("agents/a.yaml"),
        "model: mock/m\nsystem: s\nskills: none\n",
    )
    .unwrap();
    let (_, events) = run(dir.path(), "a recipe for kitchen cooking").await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, RunEvent::SkillsActivated { .. }))
    );
    assert_eq!(mock.requests()[1].messages().len(), 2);
}
