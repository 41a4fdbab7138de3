//! Issue #32 items 2 and 6, attacked with a `bash` under `sandbox:
//! read-only-project` (which may write outside the project): the store
//! kept outside the project, a script an MCP server runs from outside it,
//! aurad's private state, the project seen through a bind mount, and a
//! signal to a process outside the sandbox. Each attack must fail; the
//! same command under `sandbox: none` succeeds (the attacks are real).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;

use serde_json::json;
use support::mock_llm::MockLlm;
use support::project::Project;

/// Runs agent `a` once: one `bash` call per command, then an answer.
/// Returns each call's (output, is_error) in order.
async fn bash_calls(project: &Project, mock: &MockLlm, commands: &[&str]) -> Vec<(String, bool)> {
    let calls: Vec<(&str, serde_json::Value)> = commands
        .iter()
        .map(|command| ("bash", json!({ "command": command })))
        .collect();
    project
        .run_calls(mock, &calls)
        .await
        .into_values()
        .collect()
}

fn set_sandbox(root: &Path, sandbox: &str) {
    std::fs::write(
        root.join("agents/a.yaml"),
        format!("model: mock/m\nsystem: s\ntools: [bash]\nsandbox: {sandbox}\n"),
    )
    .unwrap();
}

#[tokio::test]
async fn files_outside_the_project_the_daemon_depends_on_are_not_writable() {
    let mock = MockLlm::start().await;
    let outside = tempfile::tempdir().unwrap();
    let db = outside.path().join("store/aurad.db");
    let script = outside.path().join("npx-cache/server.py");
    std::fs::create_dir_all(script.parent().unwrap()).unwrap();
    std::fs::write(&script, "print('server')\n").unwrap();
    std::fs::write(outside.path().join("npx-cache/notes.txt"), "free\n").unwrap();
    let project = Project::with_settings(&mock, "", &format!("database: {}\n", db.display()));
    let root = project.dir.path();
    std::fs::write(
        root.join("mcp.json"),
        json!({"mcpServers": {"s": {"command": "python3", "args": [script]}}}).to_string(),
    )
    .unwrap();
    set_sandbox(root, "read-only-project");
    // The store as `database:` names it (the test harness records runs in
    // the project's default store; the daemon would use this one).
    aurad::store::Store::open(&db).unwrap();
    assert!(db.is_file(), "the store is at {}", db.display());
    let state = aurad::config::private::project_dir(root, &|n| std::env::var(n).ok());
    std::fs::create_dir_all(&state).unwrap();
    let attacks = [
        format!("echo x >> {}", db.display()),
        format!("rm -f {}-wal {}", db.display(), db.display()),
        format!("mv {} {}.gone", db.display(), db.display()),
        format!("echo 'import os' >> {}", script.display()),
        format!("echo forged > {}/procs-forged", state.display()),
    ];
    let commands: Vec<&str> = attacks.iter().map(String::as_str).collect();
    let db_before = std::fs::read(&db).unwrap();
    let results = bash_calls(&project, &mock, &commands).await;
    for (attack, (output, is_error)) in attacks.iter().zip(&results) {
        assert!(*is_error, "`{attack}` worked: {output}");
    }
    assert_eq!(std::fs::read(&db).unwrap(), db_before, "the store changed");
    assert_eq!(
        std::fs::read_to_string(&script).unwrap(),
        "print('server')\n"
    );
    assert!(!state.join("procs-forged").exists());
    // Beside them, what the daemon does not depend on stays writable.
    let free = format!(
        "echo more >> {}",
        outside.path().join("npx-cache/notes.txt").display()
    );
    let results = bash_calls(&project, &mock, &[&free]).await;
    assert!(!results[0].1, "{}", results[0].0);

    // The control: unsandboxed, the same shell rewrites the script.
    set_sandbox(root, "none");
    let rewrite = format!("echo '# changed' >> {}", script.display());
    let results = bash_calls(&project, &mock, &[&rewrite]).await;
    assert!(!results[0].1, "{}", results[0].0);
}

#[tokio::test]
async fn a_sandboxed_shell_cannot_signal_a_process_outside_it() {
    let mock = MockLlm::start().await;
    let project = Project::new(&mock, "");
    let root = project.dir.path();
    let mut victim = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    let kill = format!("kill -STOP {0} && kill -CONT {0}", victim.id());
    set_sandbox(root, "workdir");
    let results = bash_calls(&project, &mock, &[&kill]).await;
    let scoped = landlock_has_scopes();
    if scoped {
        assert!(
            results[0].1,
            "the signal reached the process: {}",
            results[0].0
        );
        assert!(results[0].0.contains("not permitted"), "{}", results[0].0);
    } else {
        println!("skipped: this kernel has no Landlock signal scoping (Linux 6.12)");
    }
    set_sandbox(root, "none");
    let results = bash_calls(&project, &mock, &[&kill]).await;
    assert!(!results[0].1, "the control failed: {}", results[0].0);
    victim.kill().unwrap();
    victim.wait().unwrap();
}

/// Whether this kernel has Landlock ABI 6 (scopes): its ABI version is at
/// least 6.
fn landlock_has_scopes() -> bool {
    // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)
    // SAFETY: a query with no pointers.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    abi >= 6
}

/// Unmounts its path when dropped.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

#[tokio::test]
async fn the_project_seen_through_a_bind_mount_stays_read_only() {
    let mock = MockLlm::start().await;
    let project = Project::new(&mock, "");
    let root = project.dir.path();
    set_sandbox(root, "read-only-project");
    let alias = tempfile::tempdir().unwrap();
    let mounted = std::process::Command::new("mount")
        .arg("--bind")
        .arg(root)
        .arg(alias.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but `mount --bind` failed: this test needs root"
        );
        println!("skipped: `mount --bind` needs root");
        return;
    }
    let _mounted = Mounted(alias.path().to_path_buf());
    let attack = format!(
        "echo 'tools: [bash]' > {}/agents/evil.yaml",
        alias.path().display()
    );
    let results = bash_calls(&project, &mock, &[&attack]).await;
    assert!(
        results[0].1,
        "wrote through the bind mount: {}",
        results[0].0
    );
    assert!(!root.join("agents/evil.yaml").exists());
}

/// Whether this machine lets a process have a user namespace (the
/// read-only project mount needs one).
fn user_namespaces() -> bool {
    std::process::Command::new("unshare")
        .args(["-U", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

#[tokio::test]
async fn a_sandboxed_shell_cannot_change_the_projects_metadata() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !user_namespaces() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but user namespaces are unavailable"
        );
        println!("skipped: no user namespaces here");
        return;
    }
    let mock = MockLlm::start().await;
    let project = Project::new(&mock, "");
    let root = project.dir.path();
    let attacks = [
        "chmod 666 aurad.yaml",
        "chmod 000 agents",
        "chown nobody agents",
        "touch -d 2000-01-01 aurad.yaml",
        "python3 -c \"import os; os.setxattr('aurad.yaml', 'user.pwned', b'1')\"",
    ];
    for sandbox in ["read-only-project", "workdir"] {
        set_sandbox(root, sandbox);
        let before = (
            std::fs::metadata(root.join("aurad.yaml")).unwrap(),
            std::fs::metadata(root.join("agents")).unwrap(),
        );
        let results = bash_calls(&project, &mock, &attacks).await;
        for (attack, (output, is_error)) in attacks.iter().zip(&results) {
            assert!(*is_error, "{sandbox}: `{attack}` worked: {output}");
        }
        let after = (
            std::fs::metadata(root.join("aurad.yaml")).unwrap(),
            std::fs::metadata(root.join("agents")).unwrap(),
        );
        assert_eq!(before.0.permissions().mode(), after.0.permissions().mode());
        assert_eq!(before.0.mtime(), after.0.mtime());
        assert_eq!(before.1.permissions().mode(), after.1.permissions().mode());
        assert_eq!(before.1.uid(), after.1.uid());
    }
    // The control: unsandboxed, the same change of mode is made.
    set_sandbox(root, "none");
    let results = bash_calls(&project, &mock, &["chmod 640 aurad.yaml"]).await;
    assert!(!results[0].1, "{}", results[0].0);
    let mode = std::fs::metadata(root.join("aurad.yaml"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);
}
