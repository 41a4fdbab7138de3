//! The processes aurad starts for tools, attacked as a model would attack
//! them: `sandbox:` (Linux Landlock) keeps `bash` and `tools.d` commands
//! from writing the project's control files (with `sandbox: none` the same
//! commands succeed, which proves the attacks are real); a root tool
//! process cannot read the daemon's environment through `/proc`; and a
//! forced exit (a second SIGTERM) leaves no tool or MCP server process
//! behind.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;
use std::process::Stdio;

use serde_json::json;
use support::mock_llm::{MockLlm, Reply};
use support::project::{Project, tool_results};
use support::serve::{DEADLINE, Serve, aurad, poll, write_settings};
use tokio_util::sync::CancellationToken;

/// Runs agent `a` once: the model makes one `bash` call per command, in
/// one turn, then answers. Returns each call's (output, is_error) in
/// order, and the run id.
async fn bash_calls(
    project: &Project,
    mock: &MockLlm,
    commands: &[&str],
) -> (Vec<(String, bool)>, String) {
    let calls = commands
        .iter()
        .enumerate()
        .map(|(i, command)| {
            let args = json!({ "command": command }).to_string();
            (format!("c{i:02}"), "bash".to_string(), args)
        })
        .collect();
    calls_then_answer(project, mock, calls).await
}

async fn calls_then_answer(
    project: &Project,
    mock: &MockLlm,
    calls: Vec<(String, String, String)>,
) -> (Vec<(String, bool)>, String) {
    mock.push(Reply::ToolCalls(calls));
    mock.push(Reply::Text("done".into()));
    let (_, events, _) = project.run("go", CancellationToken::new()).await;
    let run_id = support::project::run_id(&events);
    (tool_results(&events).into_values().collect(), run_id)
}

fn agent(tools: &str, sandbox: &str) -> String {
    format!("model: mock/m\nsystem: s\ntools: [{tools}]\nsandbox: {sandbox}\n")
}

fn denied(result: &(String, bool)) -> bool {
    // Landlock says "Permission denied"; where the project is also mounted
    // read-only in the process's namespace, that comes first.
    result.1
        && (result.0.contains("Permission denied") || result.0.contains("Read-only file system"))
}

/// The attacks of a model with `bash` on the control files.
const ATTACKS: [&str; 5] = [
    "echo 'tools: [bash]' > agents/evil.yaml",
    "echo '{\"mcpServers\": {}}' > mcp.json",
    "echo 'command: [sh]' > tools.d/x.yaml",
    "echo x > /proc/self/cwd/agents/via-proc.yaml",
    "echo x >> agents/a.yaml",
];
const MADE_BY_ATTACKS: [&str; 4] = [
    "agents/evil.yaml",
    "mcp.json",
    "tools.d/x.yaml",
    "agents/via-proc.yaml",
];

#[tokio::test]
async fn read_only_project_keeps_bash_from_writing_the_project_but_not_elsewhere() {
    let mock = MockLlm::start().await;
    let project = Project::new(&mock, &agent("bash", "read-only-project"));
    let root = project.dir.path();
    std::fs::create_dir(root.join("tools.d")).unwrap();
    let before = std::fs::read_to_string(root.join("agents/a.yaml")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let outside_file = outside.path().join("ok.txt");
    let write_outside = format!("echo fine > {}", outside_file.display());
    let block_device = outside.path().join("disk");
    let make_device = format!("mknod {} b 7 0", block_device.display());
    let mut commands = ATTACKS.to_vec();
    commands.extend([
        "rm agents/a.yaml",
        "truncate -s 0 agents/a.yaml",
        "mkdir newdir",
        "cat agents/a.yaml",
        &write_outside,
        "echo quiet > /dev/null && echo devices-ok",
        &make_device,
    ]);
    let (results, _) = bash_calls(&project, &mock, &commands).await;

    for (i, result) in results[..8].iter().enumerate() {
        assert!(denied(result), "{}: {result:?}", commands[i]);
    }
    for made in MADE_BY_ATTACKS.iter().chain(&["newdir"]) {
        assert!(!root.join(made).exists(), "{made} was created");
    }
    assert_eq!(
        std::fs::read_to_string(root.join("agents/a.yaml")).unwrap(),
        before
    );
    assert_eq!(results[8], (before.clone(), false));
    assert!(!results[9].1, "{:?}", results[9]);
    assert_eq!(std::fs::read_to_string(&outside_file).unwrap(), "fine\n");
    assert_eq!(results[10], ("devices-ok\n".to_string(), false));
    // No device node (a way to the disk under the project), even outside.
    assert!(results[11].1, "{:?}", results[11]);
    assert!(!block_device.exists());
    // The model is told: the refusal is in the request after the calls.
    let told = mock.requests().last().unwrap().body.to_string();
    assert!(
        told.contains("agents/evil.yaml: Permission denied")
            || told.contains("agents/evil.yaml: Read-only file system"),
        "{told}"
    );
    assert!(
        told.contains("[sandbox read-only-project: nothing under the project root can be written"),
        "{told}"
    );
}

#[tokio::test]
async fn without_a_sandbox_the_same_attacks_succeed() {
    let mock = MockLlm::start().await;
    let project = Project::new(&mock, &agent("bash", "none"));
    let root = project.dir.path();
    std::fs::create_dir(root.join("tools.d")).unwrap();
    let (results, _) = bash_calls(&project, &mock, &ATTACKS).await;
    for (i, result) in results.iter().enumerate() {
        assert!(!result.1, "{}: {result:?}", ATTACKS[i]);
    }
    for made in MADE_BY_ATTACKS {
        assert!(root.join(made).exists(), "{made} was not created");
    }
}

#[tokio::test]
async fn workdir_writes_only_in_the_runs_scratch_directory() {
    let mock = MockLlm::start().await;
    let project = Project::new(&mock, &agent("bash", "workdir"));
    let root = project.dir.path();
    let outside = tempfile::tempdir().unwrap();
    let write_outside = format!("echo no > {}/x.txt", outside.path().display());
    let commands = [
        "echo kept > \"$AURAD_WORKDIR/out.txt\" && echo \"$AURAD_WORKDIR\"",
        "mktemp",
        "echo x > notes.txt",
        "echo x > agents/evil.yaml",
        &write_outside,
        "cat agents/a.yaml > /dev/null && echo read-ok",
    ];
    let (results, run_id) = bash_calls(&project, &mock, &commands).await;
    let scratch = root.join(".aurad/work").join(&run_id);
    assert_eq!(
        results[0],
        (format!("{}\n", scratch.display()), false),
        "{results:?}"
    );
    assert_eq!(
        std::fs::read_to_string(scratch.join("out.txt")).unwrap(),
        "kept\n"
    );
    assert!(
        !results[1].1 && results[1].0.starts_with(scratch.to_str().unwrap()),
        "mktemp goes to the scratch directory: {:?}",
        results[1]
    );
    for (i, result) in results[2..5].iter().enumerate() {
        assert!(denied(result), "{}: {result:?}", commands[i + 2]);
    }
    let note = format!(
        "[sandbox workdir: only {} ($AURAD_WORKDIR)",
        scratch.display()
    );
    assert!(results[2].0.contains(&note), "{:?}", results[2]);
    assert!(!root.join("notes.txt").exists());
    assert!(!root.join("agents/evil.yaml").exists());
    assert!(!outside.path().join("x.txt").exists());
    assert_eq!(results[5], ("read-ok\n".to_string(), false));
}

#[tokio::test]
async fn a_plugin_command_is_sandboxed_like_bash() {
    let mock = MockLlm::start().await;
    let project = Project::new(&mock, &agent("writer", "read-only-project"));
    let root = project.dir.path();
    std::fs::create_dir(root.join("tools.d")).unwrap();
    std::fs::write(
        root.join("tools.d/writer.yaml"),
        "description: Writes an agent.\nparameters: { type: object, properties: {} }\n\
         command: [\"sh\", \"-c\", \"echo 'tools: [bash]' > ../agents/evil.yaml && echo wrote\"]\n",
    )
    .unwrap();
    let call = || vec![("c1".to_string(), "writer".to_string(), "{}".to_string())];
    let (results, _) = calls_then_answer(&project, &mock, call()).await;
    assert!(denied(&results[0]), "{results:?}");
    assert!(!root.join("agents/evil.yaml").exists());

    // The same plugin without a sandbox writes the file: the attack is real.
    std::fs::write(root.join("agents/a.yaml"), agent("writer", "none")).unwrap();
    let (results, _) = calls_then_answer(&project, &mock, call()).await;
    assert_eq!(results[0], ("wrote".to_string(), false));
    assert!(root.join("agents/evil.yaml").exists());
}

/// Starts `aurad serve` on a project whose agent `a` has `bash`, with
/// `env` added to the daemon's environment.
fn serve_with_bash(mock: &MockLlm, env: &[(&str, &str)]) -> (tempfile::TempDir, Serve) {
    let dir = support::project::project_with_mock(mock, &agent("bash", "none"));
    let addr = write_settings(dir.path(), mock);
    let serve = Serve::spawn_with_env(dir.path(), addr, &[], env);
    serve.wait_healthy();
    (dir, serve)
}

/// `aurad trigger a`: the run id it printed.
fn trigger(root: &Path) -> String {
    let out = aurad(root)
        .args(["trigger", "a", "--input", "go"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    match stdout.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["run", id, _] => id.to_string(),
        _ => panic!(
            "aurad trigger: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

#[test]
fn a_root_tool_process_cannot_read_the_daemons_environment() {
    const SECRET: &str = "sk-planted-4f9c2e71d0";
    let mock = MockLlm::start_in_thread();
    let (dir, serve) = serve_with_bash(&mock, &[("OPENAI_API_KEY", SECRET)]);
    let daemon = serve.pid();
    let commands = [
        "tr '\\0' '\\n' < /proc/$PPID/environ".to_string(),
        format!("tr '\\0' '\\n' < /proc/{daemon}/environ"),
        format!("head -c 16 /proc/{daemon}/mem > /dev/null"),
        format!("cat /proc/{daemon}/cmdline | tr '\\0' ' '; echo; echo parent=$PPID"),
        // A dumpable process with the same capabilities (the tool's own
        // shell, read by its child): readable, so the reads above are real.
        "tr '\\0' '\\n' < /proc/$$/environ".to_string(),
        "env".to_string(),
        // The tool process's own capability sets.
        "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/$$/status".to_string(),
    ];
    let calls = commands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            (
                format!("c{i}"),
                "bash".into(),
                json!({ "command": c }).to_string(),
            )
        })
        .collect();
    mock.push(Reply::ToolCalls(calls));
    mock.push(Reply::Text("done".into()));
    let id = trigger(dir.path());
    let requests = mock.wait_for_requests_blocking(2, DEADLINE);
    let told = requests[1].body.to_string();
    // The tool results the model got, and what the store keeps.
    let store = aurad::store::Store::open(&dir.path().join("aurad.db")).unwrap();
    let outputs: Vec<(String, bool)> = poll(
        "the tool results to be stored",
        || serve.log(),
        || {
            let events = store.run_events_blocking(&id).ok()?;
            let results: Vec<(String, bool)> = tool_results(&events).into_values().collect();
            (results.len() == commands.len()).then_some(results)
        },
    );
    assert!(!told.contains(SECRET), "the model got the secret: {told}");
    for (command, output) in commands.iter().zip(&outputs) {
        assert!(!output.0.contains(SECRET), "{command}: {output:?}");
    }
    for output in &outputs[..3] {
        assert!(denied(output), "{output:?}");
    }
    // $PPID is the daemon, and the reads of another process do work.
    assert!(
        outputs[3].0.contains("serve") && outputs[3].0.contains(&format!("parent={daemon}")),
        "{:?}",
        outputs[3]
    );
    assert!(
        outputs[4].0.contains("GIT_TERMINAL_PROMPT=0"),
        "{:?}",
        outputs[4]
    );
    assert!(!outputs[5].0.contains("OPENAI_API_KEY"), "{:?}", outputs[5]);
    // Born without CAP_SYS_PTRACE, CAP_SYS_ADMIN and CAP_PERFMON in every
    // set (the bounding set only when the daemon may drop from it: root).
    let memory_reading: u64 = (1 << 19) | (1 << 21) | (1 << 38);
    let root = unsafe { libc::geteuid() } == 0;
    let sets: Vec<(&str, u64)> = outputs[6]
        .0
        .lines()
        .filter_map(|line| {
            let (name, hex) = line.split_once(':')?;
            Some((name, u64::from_str_radix(hex.trim(), 16).ok()?))
        })
        .collect();
    assert_eq!(sets.len(), 5, "{:?}", outputs[6]);
    for (name, bits) in sets {
        if name != "CapBnd" || root {
            assert_eq!(
                bits & memory_reading,
                0,
                "{name} holds them: {:?}",
                outputs[6]
            );
        }
    }
    // Nor is it anywhere in the database's bytes.
    for file in ["aurad.db", "aurad.db-wal"] {
        let bytes = std::fs::read(dir.path().join(file)).unwrap_or_default();
        let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
        assert!(!found, "the secret is in {file}");
    }
}

/// Whether process `pid` exists (a zombie counts as gone).
fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid, 0) } == 0;
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false);
    exists && !zombie
}

/// The processes whose parent is `parent` and whose command line contains
/// `word`.
fn children_named(parent: i32, word: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        let cmdline = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == Some(parent) && cmdline.contains(word) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_forced_exit_leaves_no_tool_or_mcp_process_behind() {
    let mock = MockLlm::start_in_thread();
    // The agent reaches the MCP server's tools, so the daemon starts it.
    let dir = support::project::project_with_mock(&mock, &agent("bash, \"t_*\"", "none"));
    std::fs::write(
        dir.path().join("mcp.json"),
        json!({ "mcpServers": { "t": { "command": support::mcp_test_server() } } }).to_string(),
    )
    .unwrap();
    let addr = write_settings(dir.path(), &mock);
    let mut serve = Serve::start(dir.path(), addr, &[]);
    let mcp = poll(
        "the MCP server to be started",
        || serve.log(),
        || {
            let found = children_named(serve.pid(), "mcp_test_server");
            (!found.is_empty()).then_some(found)
        },
    );
    let pids = dir.path().join("pids.txt");
    let command = format!(
        "sleep 1000 & echo $! >> {p}; sleep 1000 & echo $! >> {p}; echo $$ >> {p}; wait",
        p = pids.display()
    );
    mock.push(Reply::tool_call(
        "c1",
        "bash",
        &json!({ "command": command, "timeout_secs": 600 }).to_string(),
    ));
    mock.set_fallback(Reply::Text("done".into()));
    trigger(dir.path());
    let pids: Vec<i32> = poll(
        "the tool to start its processes",
        || serve.log(),
        || {
            let text = std::fs::read_to_string(&pids).ok()?;
            let pids: Vec<i32> = text.lines().filter_map(|l| l.parse().ok()).collect();
            (pids.len() == 3).then_some(pids)
        },
    );
    let pids: Vec<i32> = pids.into_iter().chain(mcp).collect();
    assert!(pids.iter().all(|&p| alive(p)), "{pids:?}");
    // The tool's shell and the MCP server hold none of the capabilities
    // that read a non-dumpable process (CAP_SYS_PTRACE, CAP_SYS_ADMIN,
    // CAP_PERFMON), in any set that an exec could bring back.
    const MEMORY_READING: u64 = (1 << 19) | (1 << 21) | (1 << 38);
    for &pid in &pids[2..] {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            let line = status.lines().find(|l| l.starts_with(set)).unwrap();
            let bits = u64::from_str_radix(line[set.len() + 1..].trim(), 16).unwrap();
            assert_eq!(bits & MEMORY_READING, 0, "pid {pid}: {line}");
        }
    }

    serve.signal(libc::SIGTERM);
    poll(
        "the first SIGTERM to be handled",
        || serve.log(),
        || serve.log().contains("SIGTERM received").then_some(()),
    );
    // The run's grace period (20 s) is still running: the tool lives on
    // (the MCP server may be closing already).
    assert!(pids[..3].iter().all(|&p| alive(p)), "{pids:?}");
    serve.signal(libc::SIGTERM);
    let status = serve.wait_exit();
    assert_eq!(status.code(), Some(130), "{}", serve.log());
    poll(
        "every tool process to be gone",
        || {
            format!(
                "alive: {:?}\n{}",
                pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>(),
                serve.log()
            )
        },
        || pids.iter().all(|&p| !alive(p)).then_some(()),
    );
    assert!(
        serve.log().contains("killed_process_groups"),
        "{}",
        serve.log()
    );
}
