//! The self-escalation attack through the file tools, performed as a model
//! would: a scripted mock LLM makes an agent that has only the file tools
//! write the project's control files (a new agent with `bash` and a cron,
//! `mcp.json`, a `tools.d` plugin, `aurad.yaml`), directly, through `..`,
//! through a symbolic link inside the project, and under directories that
//! do not exist yet; and read the database and `.env`. Every attempt must
//! come back to the model as an error and leave the files as they were.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;
use support::mock_llm::{MockLlm, Reply};
use support::project::Project;
use tokio_util::sync::CancellationToken;

const AGENT: &str = "model: mock/m\nsystem: s\ntools: [read_file, write_file, list_dir]\n\
    limits: { max_tool_calls: 100 }\n";

const EVIL_AGENT: &str =
    "model: mock/m\nsystem: s\ntools: [bash]\nschedule: [\"* * * * * *\"]\nprompt: x\n";

fn refused(results: &BTreeMap<String, (String, bool)>, i: usize, what: &str) -> String {
    let (output, is_error) = &results[&format!("c{i:02}")];
    assert!(*is_error, "call {i} was not refused: {output}");
    assert!(
        output.contains(what),
        "call {i}: {what:?} missing in {output}"
    );
    output.clone()
}

fn allowed(results: &BTreeMap<String, (String, bool)>, i: usize) -> String {
    let (output, is_error) = &results[&format!("c{i:02}")];
    assert!(!*is_error, "call {i} was refused: {output}");
    output.clone()
}

#[tokio::test]
async fn write_file_cannot_change_control_files_by_any_path() {
    let mock = MockLlm::start().await;
    let project = Project::new(&mock, AGENT);
    let root = project.dir.path();
    std::fs::create_dir_all(root.join("tools.d")).unwrap();
    std::fs::create_dir_all(root.join("notes")).unwrap();
    std::os::unix::fs::symlink(root.join("agents"), root.join("notes/link-to-agents")).unwrap();
    std::fs::write(root.join("mcp.json"), "{\"mcpServers\": {}}").unwrap();
    std::os::unix::fs::symlink(root.join("mcp.json"), root.join("innocent.json")).unwrap();
    let settings_before = std::fs::read_to_string(root.join("aurad.yaml")).unwrap();
    let agent_before = std::fs::read_to_string(root.join("agents/a.yaml")).unwrap();

    let write = |path: &str| ("write_file", json!({"path": path, "content": EVIL_AGENT}));
    let abs_evil = root.join("agents/abs.yaml");
    let results = project
        .run_calls(
            &mock,
            &[
                write("agents/evil.yaml"),
                write("agents/a.yaml"),
                write("notes/../agents/dotdot.yaml"),
                write("missing/dir/../../agents/climb.yaml"),
                write("notes/link-to-agents/via-link.yaml"),
                write("agents/new/deep/dir/x.yaml"),
                write(abs_evil.to_str().unwrap()),
                write("mcp.json"),
                write("innocent.json"),
                write("tools.d/x.yaml"),
                write("aurad.yaml"),
                write("skills/s/SKILL.md"),
                write(".claude/skills/s/SKILL.md"),
                write(".agents/skills/s/SKILL.md"),
                write(".env"),
                write("aurad.db"),
                write(".aurad.lock"),
                write("notes/ok.txt"),
            ],
        )
        .await;

    let control = "control";
    for i in 0..7 {
        refused(&results, i, control);
    }
    // An absolute path and a link are reported as the model wrote them.
    let out = refused(&results, 4, "\"notes/link-to-agents/via-link.yaml\"");
    assert!(
        out.contains("tools may not create, change or delete it"),
        "{out}"
    );
    for i in 7..14 {
        refused(&results, i, control);
    }
    refused(&results, 14, "environment file");
    refused(&results, 15, "database");
    refused(&results, 16, "lock file");
    allowed(&results, 17);

    for made in [
        "agents/evil.yaml",
        "agents/dotdot.yaml",
        "agents/climb.yaml",
        "agents/via-link.yaml",
        "agents/new",
        "agents/abs.yaml",
        "tools.d/x.yaml",
        "skills",
        ".claude",
        ".agents",
        ".env",
    ] {
        assert!(!root.join(made).exists(), "{made} was created");
    }
    assert_eq!(
        std::fs::read_to_string(root.join("aurad.yaml")).unwrap(),
        settings_before
    );
    assert_eq!(
        std::fs::read_to_string(root.join("agents/a.yaml")).unwrap(),
        agent_before
    );
    assert_eq!(
        std::fs::read_to_string(root.join("mcp.json")).unwrap(),
        "{\"mcpServers\": {}}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("notes/ok.txt")).unwrap(),
        EVIL_AGENT
    );
    // The model was told, in the request after the calls.
    let requests = mock.requests();
    let told = requests.last().unwrap().body.to_string();
    assert!(
        told.contains("tools may not create, change or delete it"),
        "{told}"
    );
}

#[tokio::test]
async fn the_database_and_env_files_are_not_readable_other_control_files_are() {
    let mock = MockLlm::start().await;
    let project = Project::new(&mock, AGENT);
    let root = project.dir.path();
    std::fs::write(root.join(".env"), "OPENAI_API_KEY=sk-planted-env-file\n").unwrap();
    std::fs::write(root.join(".env.production"), "TOKEN=sk-planted-prod\n").unwrap();
    std::fs::create_dir(root.join("notes")).unwrap();
    std::os::unix::fs::symlink(root.join(".env"), root.join("plain.txt")).unwrap();
    // A first run creates the database (and its WAL) with a stored event.
    mock.push(Reply::Text("first".into()));
    project
        .run("sk-planted-in-db", CancellationToken::new())
        .await;
    assert!(root.join("aurad.db").exists());

    let read = |path: &str| ("read_file", json!({"path": path}));
    let results = project
        .run_calls(
            &mock,
            &[
                read(".env"),
                read(".env.production"),
                read("plain.txt"),
                read("aurad.db"),
                read("aurad.db-wal"),
                read("./notes/../aurad.db"),
                ("list_dir", json!({"path": ".env"})),
                read("agents/a.yaml"),
                read("aurad.yaml"),
                ("list_dir", json!({"path": "agents"})),
            ],
        )
        .await;
    for i in 0..3 {
        refused(&results, i, "environment file");
    }
    for i in 3..6 {
        refused(&results, i, "database");
    }
    refused(&results, 6, "environment file");
    assert!(allowed(&results, 7).contains("tools: [read_file"));
    assert!(allowed(&results, 8).contains("providers:"));
    assert!(allowed(&results, 9).contains("a.yaml"));
    for (id, (output, _)) in &results {
        assert!(!output.contains("sk-planted"), "{id}: {output}");
    }
}

#[test]
fn a_project_with_a_custom_database_path_protects_that_file() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mock = MockLlm::start().await;
        let project = Project::with_settings(&mock, AGENT, "database: state/runs.sqlite\n");
        let root = project.dir.path();
        std::fs::create_dir(root.join("state")).unwrap();
        let write = |path: &str| ("write_file", json!({"path": path, "content": "x"}));
        let results = project
            .run_calls(
                &mock,
                &[
                    write("state/runs.sqlite"),
                    write("state/runs.sqlite-shm"),
                    write("state/runs.sqlite-journal"),
                    write("state/other.sqlite"),
                ],
            )
            .await;
        for i in 0..3 {
            refused(&results, i, "database");
        }
        allowed(&results, 3);
        assert!(!Path::new(&root.join("state/runs.sqlite-journal")).exists());
    });
}

#[test]
fn validate_warns_on_an_unattended_unsandboxed_shell_without_failing() {
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    let write = |name: &str, text: &str| std::fs::write(agents.join(name), text).unwrap();
    write(
        "cron.yaml",
        "model: test\nprompt: p\ntools:\n  - read_file\n  - bash\nschedule: [\"0 9 * * *\"]\n",
    );
    write(
        "hook.yaml",
        "model: test\nprompt: p\ntools: [list_dir, \"ba*\"]\nwebhook: { secret_env: HOOK_SECRET }\n",
    );
    write(
        "boxed.yaml",
        "model: test\nprompt: p\ntools: [bash]\nschedule: [\"0 9 * * *\"]\nsandbox: workdir\n",
    );
    write("manual.yaml", "model: test\nprompt: p\ntools: [bash]\n");
    let out = assert_cmd::cargo::cargo_bin_cmd!("aurad")
        .args(["validate", "--dir"])
        .arg(dir.path())
        .env("HOOK_SECRET", "s")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("sandbox")).collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(
        warnings[0].starts_with(
            "agents/cron.yaml:5:5: warning: tools: `bash` gives this agent a shell with the \
             daemon user's power, and it runs unattended (a `schedule:`) with `sandbox: none`; \
             add `sandbox: read-only-project` or `sandbox: workdir`"
        ),
        "{stderr}"
    );
    assert!(
        warnings[1].starts_with(
            "agents/hook.yaml:3:20: warning: tools: \"ba*\", which matches `bash`, gives this agent a shell"
        ),
        "{stderr}"
    );
    assert!(warnings[1].contains("(a `webhook:`)"), "{stderr}");
    assert!(stderr.contains("ok: 4 agent(s), 2 warning(s)"), "{stderr}");
}
