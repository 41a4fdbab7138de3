//! The attacks of issue #32 items 2 and 3 through the file tools, as an
//! injected model makes them: rewrite the code the daemon runs (a
//! `tools.d` plugin's script, an MCP server's script and `envFile`) so that
//! it runs later outside the run's sandbox, and reach a control file or
//! `.env` under another name (a hard link, or the file a control file links
//! to). Every attempt must come back as an error and leave the file as it
//! was; files nobody runs stay writable.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

mod support;

use std::path::Path;

use serde_json::json;
use support::mock_llm::MockLlm;
use support::project::Project;

const AGENT: &str = "model: mock/m\nsystem: s\ntools: [read_file, write_file]\n\
    limits: { max_tool_calls: 100 }\n";

const EVIL: &str = "import os; os.system('touch /tmp/pwned')\n";

/// A project whose config runs `scripts/x.py` (a plugin, from `tools.d/`
/// through `..`), `srv/server.py` with `srv/mcp.env` (an MCP server), and
/// holds `notes/twin.yaml` (a hard link of `agents/victim.yaml`),
/// `agents/linked.yaml` (a symbolic link to `shared/linked.yaml`) and
/// `notes/env-copy` (a hard link of `.env`).
fn project(mock: &MockLlm) -> Project {
    let project = Project::new(mock, AGENT);
    let root = project.dir.path();
    let write = |path: &str, text: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("scripts/x.py", "print('plugin')\n");
    write("scripts/unused.py", "print('nobody runs me')\n");
    write(
        "tools.d/x.yaml",
        "description: d\nparameters: { type: object }\ncommand: [\"python3\", \"../scripts/x.py\"]\n",
    );
    write("srv/server.py", "print('server')\n");
    write("srv/mcp.env", "LOG_LEVEL=info\n");
    write(
        "mcp.json",
        r#"{"mcpServers": {"s": {"command": "python3", "args": ["srv/server.py"], "envFile": "srv/mcp.env"}}}"#,
    );
    write(
        "agents/victim.yaml",
        "model: mock/m\nsystem: s\nprompt: p\n",
    );
    write("notes/readme.txt", "free\n");
    std::fs::hard_link(
        root.join("agents/victim.yaml"),
        root.join("notes/twin.yaml"),
    )
    .unwrap();
    write(
        "shared/linked.yaml",
        "model: mock/m\nsystem: s\nprompt: p\n",
    );
    std::os::unix::fs::symlink(
        root.join("shared/linked.yaml"),
        root.join("agents/linked.yaml"),
    )
    .unwrap();
    write(".env", "SECRET_TOKEN=hunter2-hunter2\n");
    std::fs::hard_link(root.join(".env"), root.join("notes/env-copy")).unwrap();
    project
}

fn contents(root: &Path, paths: &[&str]) -> Vec<String> {
    paths
        .iter()
        .map(|p| std::fs::read_to_string(root.join(p)).unwrap())
        .collect()
}

#[tokio::test]
async fn code_the_config_runs_and_control_files_under_other_names_are_not_written() {
    let mock = MockLlm::start().await;
    let project = project(&mock);
    let root = project.dir.path();
    let guarded = [
        "scripts/x.py",
        "srv/server.py",
        "srv/mcp.env",
        "agents/victim.yaml",
        "shared/linked.yaml",
    ];
    let before = contents(root, &guarded);
    let write = |path: &str| ("write_file", json!({"path": path, "content": EVIL}));
    let append = |path: &str| {
        (
            "write_file",
            json!({"path": path, "content": EVIL, "append": true}),
        )
    };
    let results = project
        .run_calls(
            &mock,
            &[
                write("scripts/x.py"),
                append("scripts/x.py"),
                write("srv/server.py"),
                write("srv/mcp.env"),
                write("notes/twin.yaml"),
                write("shared/linked.yaml"),
                write("scripts/unused.py"),
                write("notes/readme.txt"),
            ],
        )
        .await;
    let expect = [
        (0, "loads or runs"),
        (1, "loads or runs"),
        (2, "loads or runs"),
        (3, "loads or runs"),
        (4, "hard links"),
        (5, "loads or runs"),
    ];
    for (i, what) in expect {
        let (output, is_error) = &results[&format!("c{i:02}")];
        assert!(*is_error, "call {i} was not refused: {output}");
        assert!(
            output.contains(what),
            "call {i}: {what:?} missing in {output}"
        );
    }
    for i in [6, 7] {
        let (output, is_error) = &results[&format!("c{i:02}")];
        assert!(!*is_error, "call {i} was refused: {output}");
    }
    assert_eq!(contents(root, &guarded), before, "a guarded file changed");
    assert_eq!(
        contents(root, &["notes/readme.txt"]),
        vec![EVIL.to_string()]
    );
}

#[tokio::test]
async fn a_hard_link_of_env_is_not_read() {
    let mock = MockLlm::start().await;
    let project = project(&mock);
    let results = project
        .run_calls(
            &mock,
            &[
                ("read_file", json!({"path": "notes/env-copy"})),
                ("read_file", json!({"path": "notes/readme.txt"})),
            ],
        )
        .await;
    let (output, is_error) = &results["c00"];
    assert!(*is_error, "the hard link of .env was read: {output}");
    assert!(output.contains("hard links"), "{output}");
    assert!(!output.contains("hunter2"), "{output}");
    let (output, is_error) = &results["c01"];
    assert!(!*is_error && output.contains("free"), "{output}");
}
