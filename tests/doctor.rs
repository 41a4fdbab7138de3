//! `aurad doctor` driven as a person runs it, on projects written here as
//! `aurad init` writes them: every check present and exit 0 on a fresh
//! project without a key; a damaged or newer store, a missing MCP command,
//! an agent file with an error and a taken listen port each found with
//! their fix; a key's value never printed; `--strict` counting warnings.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and the PostgreSQL helper says when it skips"
)]

#[path = "support/postgres.rs"]
#[allow(dead_code, reason = "the tests here use part of the helper")]
mod postgres;

use std::path::Path;

use assert_cmd::cargo::cargo_bin_cmd;
use serde_json::Value;

/// The ten checks, in their order.
const CHECKS: [&str; 10] = [
    "project",
    "landlock",
    "cgroup",
    "inotify",
    "open-files",
    "store",
    "keys",
    "mcp",
    "listen",
    "clock",
];

/// A project as `aurad init` writes it: aurad.yaml, agents/hello.yaml,
/// a skill and .gitignore. It listens on a port of its own (free now), so
/// tests running together do not see each other's daemons.
fn init_like() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    std::fs::write(
        root.join("aurad.yaml"),
        format!(
            "# Project settings; every field has a default.\n# providers:\n#   anthropic: {{ kind: anthropic }}\nlisten: 127.0.0.1:{port}\n"
        ),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("agents")).unwrap();
    std::fs::write(
        root.join("agents/hello.yaml"),
        "# Try it offline: aurad run hello --model test\ndescription: Says hello.\nmodel: openai/gpt-4o-mini\nprompt: Say hello and tell me the time.\ntools: [current_time]\n",
    )
    .unwrap();
    std::fs::create_dir_all(root.join("skills/greeting")).unwrap();
    std::fs::write(
        root.join("skills/greeting/SKILL.md"),
        "---\nname: greeting\ndescription: How to greet people warmly.\n---\nGreet by name.\n",
    )
    .unwrap();
    std::fs::write(root.join(".gitignore"), "aurad.db\naurad.db-*\n.aurad/\n").unwrap();
    dir
}

/// `aurad doctor ARGS` in `root` with no provider key set and a state
/// folder of its own: (exit code, stdout, stderr).
fn doctor(root: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = cargo_bin_cmd!("aurad");
    command
        .arg("doctor")
        .args(args)
        .current_dir(root)
        .env("XDG_STATE_HOME", root.join(".state"))
        .env_remove("TZ")
        .env_remove("AURAD_TOKEN")
        .env_remove("AURAD_DATABASE_URL");
    for var in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "OPENAI_BASE_URL",
    ] {
        command.env_remove(var);
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    (
        output.status.code().unwrap(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// `aurad doctor --json`: (exit code, the report).
fn doctor_json(root: &Path, env: &[(&str, &str)]) -> (i32, Value) {
    let (code, stdout, stderr) = doctor(root, &["--json"], env);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{stdout}\nstderr:\n{stderr}"));
    (code, report)
}

/// The check named `name` of `report`.
fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {report:#}"))
}

/// Runs `hello` once with the test model, which creates the store.
/// Asserts that `check`'s `field` (`finding` or `fix`) holds `text`.
#[track_caller]
fn says(check: &Value, field: &str, text: &str) {
    let said = check[field].as_str().unwrap_or_default();
    assert!(
        said.contains(text),
        "`{text}` not in the {field} of {check:#}"
    );
}

fn run_once(root: &Path) {
    cargo_bin_cmd!("aurad")
        .args(["run", "hello", "--model", "test"])
        .current_dir(root)
        .env("XDG_STATE_HOME", root.join(".state"))
        .assert()
        .success();
}

#[test]
fn a_fresh_project_without_a_key_exits_0_with_every_check() {
    let project = init_like();
    let (code, report) = doctor_json(project.path(), &[]);
    assert_eq!(code, 0, "{report:#}");
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(names, CHECKS, "{report:#}");
    assert_eq!(report["errors"], 0, "{report:#}");
    for c in report["checks"].as_array().unwrap() {
        let status = c["status"].as_str().unwrap();
        assert!(["ok", "warn", "error", "skip"].contains(&status), "{c}");
        assert!(!c["finding"].as_str().unwrap().is_empty(), "{c}");
        // A warning or an error comes with its fix; nothing else has one.
        assert_eq!(
            c["fix"].is_string(),
            status == "warn" || status == "error",
            "{c}"
        );
    }
    let project_check = check(&report, "project");
    assert_eq!(project_check["status"], "ok", "{report:#}");
    assert!(
        project_check["finding"]
            .as_str()
            .unwrap()
            .starts_with("1 agent(s), 1 skill(s)"),
        "{report:#}"
    );
    let keys = check(&report, "keys");
    assert_eq!(keys["status"], "warn", "{report:#}");
    says(
        keys,
        "finding",
        "OPENAI_API_KEY is not set: needed by hello",
    );
    says(keys, "fix", "export OPENAI_API_KEY=");
    let store = check(&report, "store");
    assert_eq!(store["status"], "ok", "{report:#}");
    says(store, "finding", "created at the first run");
    assert_eq!(check(&report, "listen")["status"], "ok", "{report:#}");
    // The human form: one line per check, the fixes indented, exit 0.
    let (code, stdout, _) = doctor(project.path(), &[], &[]);
    assert_eq!(code, 0, "{stdout}");
    for name in CHECKS {
        assert!(
            stdout
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some(name)),
            "no line for {name}:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("\n       fix: export OPENAI_API_KEY="),
        "{stdout}"
    );
    assert!(stdout.ends_with("0 error(s), 1 warning(s)\n"), "{stdout}");
}

#[test]
fn an_empty_folder_is_told_to_run_init() {
    let dir = tempfile::tempdir().unwrap();
    let (code, report) = doctor_json(dir.path(), &[]);
    assert_eq!(code, 0, "{report:#}");
    let project = check(&report, "project");
    assert_eq!(project["status"], "warn", "{report:#}");
    says(project, "fix", "aurad init");
}

#[test]
fn a_store_with_garbage_in_it_is_an_error_with_the_fix() {
    let project = init_like();
    run_once(project.path());
    let (code, report) = doctor_json(project.path(), &[]);
    assert_eq!(code, 0, "a sound store first: {report:#}");
    let store = check(&report, "store");
    says(store, "finding", "integrity ok");
    let db = project.path().join("aurad.db");
    // The runs are in the write-ahead log until a checkpoint: move them
    // into the file, then damage it.
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .unwrap();
    drop(conn);
    let mut bytes = std::fs::read(&db).unwrap();
    assert!(bytes.len() > 3 * 4096, "{} bytes", bytes.len());
    // Every page after the first (the header stays readable).
    for (i, b) in bytes[4096..].iter_mut().enumerate() {
        *b = (i * 7 % 251) as u8;
    }
    std::fs::write(&db, &bytes).unwrap();
    let (code, report) = doctor_json(project.path(), &[]);
    assert_eq!(code, 1, "{report:#}");
    let store = check(&report, "store");
    assert_eq!(store["status"], "error", "{report:#}");
    let finding = store["finding"].as_str().unwrap();
    assert!(
        finding.contains("damaged") || finding.contains("cannot be read"),
        "{report:#}"
    );
    says(store, "fix", ".recover");
    assert_eq!(report["errors"], 1, "{report:#}");
}

#[test]
fn a_store_from_a_newer_aurad_is_an_error() {
    let project = init_like();
    run_once(project.path());
    let db = project.path().join("aurad.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let known: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    conn.pragma_update(None, "user_version", known + 1).unwrap();
    drop(conn);
    let (code, report) = doctor_json(project.path(), &[]);
    assert_eq!(code, 1, "{report:#}");
    let store = check(&report, "store");
    assert_eq!(store["status"], "error", "{report:#}");
    says(
        store,
        "finding",
        &format!(
            "created by a newer aurad (schema {}, this build knows {known})",
            known + 1
        ),
    );
    says(store, "fix", "upgrade aurad");
    // The doctor changed nothing.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let after: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(after, known + 1);
}

#[test]
fn a_missing_mcp_command_is_a_warning_and_strict_makes_it_fail() {
    let project = init_like();
    std::fs::write(
        project.path().join(".mcp.json"),
        "{\n  \"mcpServers\": {\n    \"ghost\": { \"command\": \"aurad-no-such-mcp-server\" },\n    \"shell\": { \"command\": \"sh\" }\n  }\n}\n",
    )
    .unwrap();
    let key = [("OPENAI_API_KEY", "sk-doctor-test-key-0000")];
    let (code, report) = doctor_json(project.path(), &key);
    assert_eq!(code, 0, "{report:#}");
    let mcp = check(&report, "mcp");
    assert_eq!(mcp["status"], "warn", "{report:#}");
    let finding = mcp["finding"].as_str().unwrap();
    assert!(
        finding.contains(
            "server `ghost` (.mcp.json:3:5): command `aurad-no-such-mcp-server` not found on PATH"
        ),
        "{report:#}"
    );
    assert!(!finding.contains("`shell`"), "sh is found: {report:#}");
    assert_eq!(report["warnings"], 1, "{report:#}");
    let (code, stdout, _) = doctor(project.path(), &["--strict"], &key);
    assert_eq!(code, 1, "{stdout}");
    let (code, _, _) = doctor(project.path(), &["--strict", "--json"], &key);
    assert_eq!(code, 1);
}

#[test]
fn a_key_that_is_set_is_named_and_never_shown() {
    let project = init_like();
    std::fs::write(
        project.path().join("agents/claude.yaml"),
        "model: anthropic/claude-sonnet-4-5\nprompt: Hi.\n",
    )
    .unwrap();
    let sentinel = "sk-ant-doctor-sentinel-7Hq2xV9";
    let env = [
        ("ANTHROPIC_API_KEY", sentinel),
        ("OPENAI_API_KEY", sentinel),
    ];
    let (code, stdout, stderr) = doctor(project.path(), &["--json"], &env);
    assert_eq!(code, 0, "{stdout}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let keys = check(&report, "keys");
    assert_eq!(keys["status"], "ok", "{report:#}");
    says(keys, "finding", "ANTHROPIC_API_KEY, OPENAI_API_KEY");
    assert!(!stdout.contains(sentinel) && !stderr.contains(sentinel));
    let (code, stdout, stderr) = doctor(project.path(), &[], &env);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        !stdout.contains(sentinel) && !stderr.contains(sentinel),
        "{stdout}{stderr}"
    );
    // Without it: the agents that need it, by name.
    let (_, report) = doctor_json(project.path(), &[("OPENAI_API_KEY", sentinel)]);
    let keys = check(&report, "keys");
    assert_eq!(keys["status"], "warn", "{report:#}");
    says(
        keys,
        "finding",
        "ANTHROPIC_API_KEY is not set: needed by claude (provider anthropic)",
    );
}

#[test]
fn an_agent_file_with_an_error_is_located() {
    let project = init_like();
    std::fs::write(
        project.path().join("agents/broken.yaml"),
        "model: test\nprompt: Hi.\nmax_stpes: 3\n",
    )
    .unwrap();
    let (code, report) = doctor_json(project.path(), &[]);
    assert_eq!(code, 1, "{report:#}");
    let check = check(&report, "project");
    assert_eq!(check["status"], "error", "{report:#}");
    says(
        check,
        "finding",
        "agents/broken.yaml:3:1: unknown field `max_stpes`",
    );
    says(check, "fix", "aurad validate");
}

#[test]
fn a_listen_port_taken_by_another_socket_is_an_error() {
    let project = init_like();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    std::fs::write(
        project.path().join("aurad.yaml"),
        format!("listen: {addr}\n"),
    )
    .unwrap();
    let (code, report) = doctor_json(project.path(), &[]);
    assert_eq!(code, 1, "{report:#}");
    let listen = check(&report, "listen");
    assert_eq!(listen["status"], "error", "{report:#}");
    assert_eq!(
        listen["finding"],
        format!("{addr} is taken by another program: `aurad serve` cannot listen there"),
        "{report:#}"
    );
    says(listen, "fix", &format!("sport = :{}", addr.port()));
    drop(taken);
    let (code, report) = doctor_json(project.path(), &[]);
    assert_eq!(code, 0, "free again: {report:#}");
}

#[test]
fn listening_beyond_loopback_needs_a_token() {
    let project = init_like();
    std::fs::write(project.path().join("aurad.yaml"), "listen: 0.0.0.0:0\n").unwrap();
    let (code, report) = doctor_json(project.path(), &[]);
    assert_eq!(code, 1, "{report:#}");
    let listen = check(&report, "listen");
    assert_eq!(listen["status"], "error", "{report:#}");
    says(listen, "fix", "AURAD_TOKEN");
    let token = "doctor-token-0123456789abcdef";
    let (code, stdout, stderr) = doctor(project.path(), &["--json"], &[("AURAD_TOKEN", token)]);
    assert_eq!(code, 0, "{stdout}");
    assert!(!stdout.contains(token) && !stderr.contains(token));
}

#[test]
fn an_unreachable_postgres_store_is_an_error() {
    let project = init_like();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let (code, report) = doctor_json(
        project.path(),
        &[(
            "AURAD_DATABASE_URL",
            &format!("postgres://nobody@127.0.0.1:{port}/none"),
        )],
    );
    assert_eq!(code, 1, "{report:#}");
    let store = check(&report, "store");
    assert_eq!(store["status"], "error", "{report:#}");
    says(store, "finding", "is unreachable");
}

#[test]
fn a_postgres_store_reports_its_schema_and_refuses_a_newer_one() {
    let Some(db) = postgres::TestDatabase::create("doctor_postgres") else {
        return;
    };
    let project = init_like();
    let url = [("AURAD_DATABASE_URL", db.url.as_str())];
    let (code, report) = doctor_json(project.path(), &url);
    assert_eq!(code, 0, "{report:#}");
    let finding = check(&report, "store")["finding"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(finding.contains("schema 0, migrated to"), "{finding}");
    cargo_bin_cmd!("aurad")
        .args(["run", "hello", "--model", "test"])
        .current_dir(project.path())
        .env("XDG_STATE_HOME", project.path().join(".state"))
        .env("AURAD_DATABASE_URL", &db.url)
        .assert()
        .success();
    let (code, report) = doctor_json(project.path(), &url);
    assert_eq!(code, 0, "{report:#}");
    let store = check(&report, "store");
    assert_eq!(store["status"], "ok", "{report:#}");
    let finding = store["finding"].as_str().unwrap();
    assert!(finding.contains(": schema "), "{finding}");
    assert!(!finding.contains("migrated"), "{finding}");
    db.query("INSERT INTO aurad_schema (version, name) VALUES (9999, 'from the future')");
    let (code, report) = doctor_json(project.path(), &url);
    assert_eq!(code, 1, "{report:#}");
    assert!(
        check(&report, "store")["finding"]
            .as_str()
            .unwrap()
            .contains("created by a newer aurad (schema 9999"),
        "{report:#}"
    );
}

/// A child process killed when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_projects_own_daemon_on_the_listen_port_is_named_not_blamed() {
    let project = init_like();
    let root = project.path();
    let serve = Killed(
        std::process::Command::new(assert_cmd::cargo::cargo_bin!("aurad"))
            .arg("serve")
            .current_dir(root)
            .env("XDG_STATE_HOME", root.join(".state"))
            .env_remove("AURAD_TOKEN")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = serve.0.id();
    let expected = format!("is served by this project's daemon (pid {pid})");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (code, report) = doctor_json(root, &[]);
        let listen = check(&report, "listen");
        if listen["finding"].as_str().unwrap().contains(&expected) {
            assert_eq!(listen["status"], "ok", "{report:#}");
            assert_eq!(code, 0, "{report:#}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the daemon never showed as serving: {report:#}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(serve);
}
