//! Skills offered as a catalog (`skills: { mode: catalog }`), through the
//! run path with a mock model server, a real SQLite store and the real
//! binary: the first request lists the skills' names and descriptions (not
//! their bodies) and offers `load_skill`; the model calls it and the next
//! request holds the body and the skill's bundled files; the load is a
//! `skills_activated` event (`how: loaded`) between the call and its result,
//! shown by `aurad logs`; a skill outside the agent's list is refused, naming
//! those it may load; `mode: inject` still injects; `aurad test` cases
//! script `load_skill` or run it for real; a bad mode, and another tool
//! named `load_skill` beside a catalog, are located errors of `aurad
//! validate`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use assert_cmd::cargo::cargo_bin_cmd;
use aurad::types::{RunEvent, RunState, SkillActivation};
use support::mock_llm::{MockLlm, Reply};
use support::project::{project_with_mock, run_agent, run_id, tool_results};
use tokio_util::sync::CancellationToken;

fn write(root: &std::path::Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Three skills: `pdf` (with a bundled file), `docx`, and `internal`
/// (hidden: never listed by `auto`).
fn write_skills(root: &std::path::Path) {
    write(
        root,
        "skills/pdf/SKILL.md",
        "---\nname: pdf\ndescription: Merge, split and watermark PDF files.\n---\nPDF-BODY: use pypdf; see forms.md for forms.\n",
    );
    write(root, "skills/pdf/forms.md", "How to fill forms.\n");
    write(
        root,
        "skills/docx/SKILL.md",
        "---\nname: docx\ndescription: Create and edit Word documents.\n---\nDOCX-BODY: use python-docx.\n",
    );
    write(
        root,
        "skills/internal/SKILL.md",
        "---\nname: internal\ndescription: Internal release steps.\nhidden: true\n---\nINTERNAL-BODY\n",
    );
}

fn tool_names(request: &support::mock_llm::Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Every message of a request, as text.
fn contents(request: &support::mock_llm::Recorded) -> String {
    request
        .messages()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn the_catalog_lists_skills_and_load_skill_brings_one_body() {
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call("c1", "load_skill", r#"{"name": "pdf"}"#));
    mock.push(Reply::tool_call(
        "c2",
        "load_skill",
        r#"{"name": "internal"}"#,
    ));
    mock.push(Reply::Text("merged".into()));
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: You help.\nskills: { mode: catalog }\n",
    );
    write_skills(dir.path());
    let (outcome, events, store) =
        run_agent(dir.path(), "Merge these PDFs", CancellationToken::new()).await;
    store.close().unwrap();
    assert_eq!(outcome.state, RunState::Succeeded, "{:?}", outcome.reason);

    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    // The first request: the catalog after the system prompt, no body.
    let first = requests[0].messages();
    assert_eq!(first[0]["content"], "You help.");
    assert_eq!(first[1]["role"], "system");
    let catalog = first[1]["content"].as_str().unwrap();
    assert!(catalog.starts_with("[Skills]\n"), "{catalog}");
    assert!(
        catalog.ends_with(
            "\n- docx: Create and edit Word documents.\n- pdf: Merge, split and watermark PDF files."
        ),
        "{catalog}"
    );
    let sent = contents(&requests[0]);
    for body in ["PDF-BODY", "DOCX-BODY", "INTERNAL-BODY", "internal"] {
        assert!(!sent.contains(body), "{body} in the first request: {sent}");
    }
    assert_eq!(tool_names(&requests[0]), ["load_skill"]);

    // The next request holds the loaded body and its bundled file.
    let second = contents(&requests[1]);
    assert!(
        second.contains(
            "[Skill: pdf]\nPDF-BODY: use pypdf; see forms.md for forms.\n\nFiles of this skill (paths from the project root; read one when the instructions call for it):\n- skills/pdf/forms.md"
        ),
        "{second}"
    );
    assert!(!second.contains("DOCX-BODY"));

    // A hidden skill is not in an `auto` catalog: refused, naming the others.
    let results = tool_results(&events);
    assert!(!results["c1"].1);
    assert_eq!(
        results["c2"],
        (
            "error: `internal` is not a skill this agent may load; it may load: docx, pdf".into(),
            true
        )
    );
    assert!(!contents(&requests[2]).contains("INTERNAL-BODY"));

    // Events: the catalog at the start, the load between its call and result.
    let kinds: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::SkillsActivated { skills, how } => {
                Some(format!("skills {how} {}", skills.join(",")))
            }
            RunEvent::ToolCall { id, .. } => Some(format!("call {id}")),
            RunEvent::ToolResult { id, .. } => Some(format!("result {id}")),
            _ => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "skills catalog docx,pdf",
            "call c1",
            "skills loaded pdf",
            "result c1",
            "call c2",
            "result c2"
        ]
    );

    // The stored run, rendered by the real binary.
    let logs = cargo_bin_cmd!("aurad")
        .args(["logs", &run_id(&events), "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&logs.stderr);
    assert!(
        stderr.contains("skills offered (catalog): docx, pdf"),
        "{stderr}"
    );
    assert!(stderr.contains("skill loaded: pdf"), "{stderr}");
}

#[tokio::test]
async fn a_named_catalog_refuses_other_skills_and_inject_still_injects() {
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call("c1", "load_skill", r#"{"name": "pdf"}"#));
    mock.push(Reply::Text("no".into()));
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: s\nskills:\n  mode: catalog\n  use: [docx]\n",
    );
    write_skills(dir.path());
    let (outcome, events, store) =
        run_agent(dir.path(), "Merge these PDFs", CancellationToken::new()).await;
    store.close().unwrap();
    assert_eq!(outcome.state, RunState::Succeeded, "{:?}", outcome.reason);
    assert_eq!(
        tool_results(&events)["c1"],
        (
            "error: `pdf` is not a skill this agent may load; it may load: docx".into(),
            true
        )
    );
    assert!(!events.iter().any(
        |e| matches!(e, RunEvent::SkillsActivated { how, .. } if *how == SkillActivation::Loaded)
    ));
    let requests = mock.requests();
    assert!(contents(&requests[0]).contains("- docx: Create and edit Word documents."));
    assert!(!contents(&requests[0]).contains("- pdf:"));
    assert!(!contents(&requests[1]).contains("PDF-BODY"));

    // The same skills injected: the matched body in the first request, no tool.
    mock.push(Reply::Text("ok".into()));
    std::fs::write(
        dir.path().join("agents/a.yaml"),
        "model: mock/m\nsystem: s\nskills: { mode: inject }\n",
    )
    .unwrap();
    let (_, events, store) = run_agent(
        dir.path(),
        "Merge these PDF files",
        CancellationToken::new(),
    )
    .await;
    store.close().unwrap();
    assert!(events.iter().any(|e| matches!(
        e,
        RunEvent::SkillsActivated { skills, how } if skills == &["pdf".to_string()] && *how == SkillActivation::Auto
    )));
    let injected = &mock.requests()[2];
    assert!(contents(injected).contains("PDF-BODY"));
    assert!(tool_names(injected).is_empty());
}

#[test]
fn validate_locates_a_bad_skills_mode() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "agents/a.yaml",
        "model: test\nprompt: hi\nskills:\n  mode: lazy\n",
    );
    let out = cargo_bin_cmd!("aurad")
        .args(["validate", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("agents/a.yaml:4:9: `skills.mode` is \"lazy\": write `inject` (the skills' instructions go in the context) or `catalog`"),
        "{stderr}"
    );
}

#[test]
fn aurad_test_scripts_load_skill_or_runs_it_for_real() {
    let dir = tempfile::tempdir().unwrap();
    write_skills(dir.path());
    write(
        dir.path(),
        "agents/a.yaml",
        "model: test\nprompt: hi\nskills: auto\n",
    );
    let case = |name: &str, extra: &str, expect: &str| {
        format!(
            "  - name: {name}\n    input: Merge these PDFs\n{extra}    turns:\n      - tool_calls:\n          - name: load_skill\n            arguments: {{ name: pdf }}\n{expect}"
        )
    };
    write(
        dir.path(),
        "agents/a.test.yaml",
        &format!(
            "cases:\n{}{}",
            // Real: `real_tools` lets the call run (the body it returns is
            // checked on the run path, above).
            case(
                "real",
                "    real_tools: [load_skill]\n",
                "      - text: done\n    expect:\n      tools_called: [{ name: load_skill, arguments: { name: pdf } }]\n"
            ),
            // Scripted: the case's result stands in for it.
            case(
                "scripted",
                "",
                "            result: scripted body\n      - text: done\n    expect:\n      tools_called: [{ name: load_skill }]\n"
            ),
        ),
    );
    let out = cargo_bin_cmd!("aurad")
        .args(["test", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("ok    a/real"), "{stdout}");
    assert!(stdout.contains("ok    a/scripted"), "{stdout}");
}

#[test]
fn validate_refuses_another_tool_named_load_skill_beside_a_catalog() {
    let dir = tempfile::tempdir().unwrap();
    write_skills(dir.path());
    write(
        dir.path(),
        "tools.d/load_skill.yaml",
        "description: Something else.\nparameters: { type: object }\ncommand: [\"true\"]\n",
    );
    write(
        dir.path(),
        "agents/a.yaml",
        "model: test\nprompt: hi\ntools: [load_skill]\nskills: auto\n",
    );
    let validate = |dir: &std::path::Path| {
        let out = cargo_bin_cmd!("aurad")
            .args(["validate", "--dir"])
            .arg(dir)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, stderr) = validate(dir.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("agents/a.yaml:4:9: skills are offered as a catalog, which adds `load_skill`, but `tools:` also allows plugin tools.d/load_skill.yaml of that name"),
        "{stderr}"
    );
    // Injected skills add no tool: the plugin is the agent's `load_skill`.
    write(
        dir.path(),
        "agents/a.yaml",
        "model: test\nprompt: hi\ntools: [load_skill]\nskills: { mode: inject }\n",
    );
    let (code, stderr) = validate(dir.path());
    assert_eq!(code, Some(0), "{stderr}");
}
