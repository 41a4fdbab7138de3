//! The command line's trip-ups (issue #36), each on the real binary with
//! the built-in test model: short run ids that tell runs started together
//! apart, `aurad memory list` finding what an agent saved, backoff shown
//! only where it applies, `aurad test` with no test file, `aurad runs`'
//! columns and sub-runs, the approval deadline in the future tense, "did
//! you mean", completion of agent names and run ids, `aurad validate` in
//! an empty folder.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::cargo_bin_cmd;

/// How long a test waits for something another process does.
const DEADLINE: Duration = Duration::from_secs(30);

/// `aurad ARGS` in project `dir`: exit code, stdout, stderr.
fn aurad(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out: Output = cargo_bin_cmd!("aurad")
        .arg("--dir")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A project whose agents are `agents` (name, YAML).
fn project(agents: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    for (name, yaml) in agents {
        std::fs::write(dir.path().join(format!("agents/{name}.yaml")), yaml).unwrap();
    }
    dir
}

const PLAIN: &str = "model: test\nprompt: hi\n";

/// The rows of `aurad runs` (header first) of the project.
fn runs_table(dir: &Path, limit: usize) -> Vec<String> {
    let (code, out, err) = aurad(dir, &["runs", "--limit", &limit.to_string()]);
    assert_eq!(code, 0, "{err}");
    out.lines().map(str::to_string).collect()
}

/// The whole id of each run, newest first, from `aurad runs --json`.
fn run_ids(dir: &Path) -> Vec<(String, String, Option<String>)> {
    let (code, out, err) = aurad(dir, &["runs", "--json", "--limit", "0"]);
    assert_eq!(code, 0, "{err}");
    let runs: serde_json::Value = serde_json::from_str(&out).unwrap();
    runs.as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_string(),
                r["agent"].as_str().unwrap().to_string(),
                r["parent_run_id"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[test]
fn thirty_runs_started_together_are_each_found_by_the_short_id_runs_shows() {
    let dir = project(&[("hello", PLAIN)]);
    let started = Instant::now();
    for _ in 0..30 {
        let (code, _, err) = aurad(dir.path(), &["run", "hello"]);
        assert_eq!(code, 0, "{err}");
    }
    let ids = run_ids(dir.path());
    assert_eq!(ids.len(), 30);
    // UUIDv7: runs started within a minute share their first 8 characters
    // (the time), which is why a short id is the id's end.
    if started.elapsed() < Duration::from_secs(60) {
        let mut by_start: HashMap<&str, usize> = HashMap::new();
        for (id, _, _) in &ids {
            *by_start.entry(&id[..8]).or_default() += 1;
        }
        assert!(by_start.values().any(|n| *n >= 15), "{by_start:?}");
    }
    let table = runs_table(dir.path(), 30);
    assert!(table[0].starts_with("RUN "), "{table:?}");
    let shown: Vec<&str> = table[1..]
        .iter()
        .map(|row| row.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(shown.len(), 30);
    for (short, (id, _, _)) in shown.iter().zip(&ids) {
        assert_eq!(short.len(), 8, "{short}");
        assert!(id.ends_with(short), "{short} is not the end of {id}");
        let (code, _, err) = aurad(dir.path(), &["logs", short]);
        assert_eq!(code, 0, "logs {short}: {err}");
        assert!(
            err.contains(&format!("run {id} succeeded")),
            "{short}: {err}"
        );
    }
    // A shared start is ambiguous: the candidates are listed with their
    // agent and start, and more characters asked for.
    let shared = &ids[0].0[..6];
    let (code, _, err) = aurad(dir.path(), &["logs", shared]);
    let sharing = ids
        .iter()
        .filter(|(id, _, _)| id.starts_with(shared))
        .count();
    if sharing > 1 {
        assert_eq!(code, 1, "{err}");
        assert!(
            err.contains("is ambiguous") && err.contains("give more characters"),
            "{err}"
        );
        // The first candidates in id order: the oldest runs.
        let oldest = &ids.last().unwrap().0;
        assert!(
            err.contains(&format!("{}  hello  started ", &oldest[28..])),
            "{err}"
        );
    }
    // Replay takes the short id too.
    let (code, out, err) = aurad(dir.path(), &["replay", shown[0]]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("replayed run {}", ids[0].0)), "{out}");
}

#[test]
fn memory_list_without_a_namespace_shows_what_an_agent_saved() {
    let dir = project(&[(
        "rememberer",
        "model: test\nprompt: hi\nmemory:\n  tools: true\n",
    )]);
    let (code, _, err) = aurad(dir.path(), &["memory", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("no memories in any namespace"), "{err}");
    // The test model calls memory_save: the memory is the agent's.
    let (code, _, err) = aurad(dir.path(), &["run", "rememberer"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("saved memory 1"), "{err}");
    let (code, out, err) = aurad(dir.path(), &["memory", "list"]);
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("namespace `rememberer` (1 memory; --namespace rememberer for it alone):")
    );
    let memory = lines.next().unwrap();
    assert!(memory.trim_start().starts_with("1  [fact] "), "{out}");
    let (_, out, _) = aurad(dir.path(), &["memory", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed[0]["namespace"], "rememberer");
    let (code, _, err) = aurad(dir.path(), &["memory", "list", "--namespace", "default"]);
    assert_eq!(code, 0);
    assert!(
        err.contains("no memories in namespace \"default\""),
        "{err}"
    );
    let (_, out, _) = aurad(dir.path(), &["memory", "list", "--namespace", "rememberer"]);
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[test]
fn backoff_is_shown_only_for_a_scheduled_agent_with_failures() {
    // One iteration is too few for the test model (it calls the tool, then
    // answers): each run fails.
    let failing = "model: test\nprompt: hi\ntools: [calculator]\nlimits:\n  max_iterations: 1\n";
    let scheduled = format!("{failing}schedule: \"0 0 1 1 *\"\n");
    let dir = project(&[("unscheduled", failing), ("scheduled", &scheduled)]);
    for agent in ["unscheduled", "scheduled"] {
        let (code, _, err) = aurad(dir.path(), &["run", agent]);
        assert_eq!(code, 1, "{err}");
    }
    let (code, out, err) = aurad(dir.path(), &["agents"]);
    assert_eq!(code, 0, "{err}");
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no {name} in {out}"))
            .to_string()
    };
    assert!(row("scheduled").contains("backing off until"), "{out}");
    assert!(row("scheduled").contains("(1 failure)"), "{out}");
    let unscheduled = row("unscheduled");
    assert!(unscheduled.contains("failed"), "{out}");
    assert!(!unscheduled.contains("backing off"), "{out}");
    let (_, out, _) = aurad(dir.path(), &["agents", "--json"]);
    let agents: serde_json::Value = serde_json::from_str(&out).unwrap();
    let info = |name: &str| {
        agents
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap()
            .clone()
    };
    assert!(info("unscheduled")["backoff_until"].is_null(), "{out}");
    assert_eq!(info("unscheduled")["consecutive_failures"], 1, "{out}");
    assert!(info("scheduled")["backoff_until"].is_string(), "{out}");
}

#[test]
fn test_without_test_files_passes_and_a_named_agent_without_one_is_an_error() {
    let dir = project(&[("hello", PLAIN), ("helper", PLAIN)]);
    let (code, out, err) = aurad(dir.path(), &["test"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("no agents/*.test.yaml found"), "{out}");
    let junit = dir.path().join("junit.xml");
    let (code, _, err) = aurad(dir.path(), &["test", "--junit", junit.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        std::fs::read_to_string(&junit)
            .unwrap()
            .contains("<testsuites")
    );
    let (code, _, err) = aurad(dir.path(), &["test", "hello"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("agent `hello` has no test file: create agents/hello.test.yaml"),
        "{err}"
    );
    let (code, _, err) = aurad(dir.path(), &["test", "helo"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no agent named `helo`") && err.contains("did you mean `hello`?"),
        "{err}"
    );
}

/// Waits until `check` holds, polling; panics with `what` at the deadline.
fn poll(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn runs_fit_their_columns_sub_runs_sit_under_their_parent_and_the_deadline_is_ahead() {
    let long = "a-rather-long-agent-name-for-columns";
    let dir = project(&[
        (
            "boss",
            &format!("model: test\nprompt: hi\nagents: [{long}]\n"),
        ),
        (long, PLAIN),
        (
            "gated",
            "model: test\nprompt: hi\ntools: [calculator]\napprove: [calculator]\napproval_timeout: 30m\n",
        ),
    ]);
    for _ in 0..2 {
        let (code, _, err) = aurad(dir.path(), &["run", "boss"]);
        assert_eq!(code, 0, "{err}");
    }
    // A run left waiting for approval, in a process of its own.
    let mut waiting = Command::new(env!("CARGO_BIN_EXE_aurad"))
        .arg("--dir")
        .arg(dir.path())
        .args(["run", "gated"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut listing = String::new();
    poll("the gated run to wait", || {
        listing = aurad(dir.path(), &["approve"]).1;
        listing.contains("gated")
    });
    // Its deadline is ahead: said in the future tense.
    assert!(listing.contains("denied automatically at "), "{listing}");
    assert!(
        listing.contains("(in 29m) unless decided") || listing.contains("(in 30m) unless decided"),
        "{listing}"
    );
    assert!(!listing.contains(", denied at"), "{listing}");

    let ids = run_ids(dir.path());
    let table = runs_table(dir.path(), 20);
    let header = &table[0];
    let column = |name: &str| header.find(name).unwrap();
    for row in &table[1..] {
        // Every state, however long, starts under STATE and ends before
        // TRIGGER; the longest agent name fits its column.
        let state_at = row
            .char_indices()
            .nth(header[..column("STATE")].chars().count())
            .unwrap()
            .0;
        let state = row[state_at..].split_whitespace().next().unwrap();
        assert!(
            ["succeeded", "waiting_approval"].contains(&state),
            "{row} in\n{}",
            table.join("\n")
        );
        let trigger_at = row
            .char_indices()
            .nth(header[..column("TRIGGER")].chars().count())
            .unwrap()
            .0;
        assert!(row[..trigger_at].ends_with("  "), "{}", table.join("\n"));
    }
    // Newest first: the waiting run, then each boss run with its sub-run
    // right under it, indented.
    let short = |id: &str| id[id.len() - 8..].to_string();
    let gated = ids.iter().find(|(_, a, _)| a == "gated").unwrap();
    assert!(table[1].starts_with(&short(&gated.0)) && table[1].contains("waiting_approval"));
    let bosses: Vec<&(String, String, Option<String>)> =
        ids.iter().filter(|(_, a, _)| a == "boss").collect();
    assert_eq!(bosses.len(), 2);
    for (i, boss) in bosses.iter().enumerate() {
        let child = ids
            .iter()
            .find(|(_, _, parent)| parent.as_deref() == Some(boss.0.as_str()))
            .unwrap();
        let row = 2 + 2 * i;
        assert!(
            table[row].starts_with(&short(&boss.0)),
            "{}",
            table.join("\n")
        );
        assert!(
            table[row + 1].starts_with(&short(&child.0)),
            "{}",
            table.join("\n")
        );
        assert!(
            table[row + 1].contains(&format!("↳ {long}")),
            "{}",
            table.join("\n")
        );
    }

    // The waiting run is decided by its short id; its process ends.
    let (code, out, err) = aurad(
        dir.path(),
        &[
            "approve",
            &short(&gated.0),
            "--call",
            "call_test_1",
            "--deny",
            "not now",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("denied: calculator"), "{out}");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = waiting.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > DEADLINE {
            waiting.kill().unwrap();
            panic!("the gated run did not end after its denial");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success());
}

#[test]
fn a_mistyped_name_suggests_the_close_ones() {
    let dir = project(&[("hello", PLAIN), ("helper", PLAIN)]);
    let (code, _, err) = aurad(dir.path(), &["run", "helo"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no agent named `helo`") && err.contains("did you mean `hello`?"),
        "{err}"
    );
    let (code, _, err) = aurad(dir.path(), &["trigger", "helpr"]);
    assert_eq!(code, 2);
    assert!(err.contains("did you mean `helper`?"), "{err}");
    let (code, _, err) = aurad(dir.path(), &["replay", "helo"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no agent of that name (did you mean `hello`?)"),
        "{err}"
    );
    // Nothing close: the names are listed, no guess.
    let (code, _, err) = aurad(dir.path(), &["run", "digest"]);
    assert_eq!(code, 2);
    assert!(
        !err.contains("did you mean") && err.contains("(agents: hello, helper)"),
        "{err}"
    );
    // clap's own suggestion for a command.
    let (code, _, err) = aurad(dir.path(), &["stauts"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("a similar subcommand exists: 'status'"),
        "{err}"
    );
}

#[test]
fn a_field_typo_names_the_field_meant_at_its_place() {
    let dir = project(&[
        ("typo", "model: test\npromt: hi\n"),
        ("far", "model: test\nprompt: hi\nzzzzzz: 1\n"),
    ]);
    let (code, _, err) = aurad(dir.path(), &["validate"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("agents/typo.yaml:2:1: unknown field `promt`: did you mean `prompt`?"),
        "{err}"
    );
    // Nothing close: every field is listed.
    let far = err.lines().find(|l| l.contains("far.yaml")).unwrap();
    assert!(
        far.contains("unknown field `zzzzzz`, expected one of") && far.contains("`prompt`"),
        "{far}"
    );
}

/// What `aurad` offers when the shell completes `words` (the last is the
/// word being completed).
fn complete(dir: &Path, words: &[&str]) -> Vec<String> {
    let out = cargo_bin_cmd!("aurad")
        .current_dir(dir)
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
        .env("_CLAP_IFS", "\n")
        .arg("--")
        .args(words)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn completion_offers_the_projects_agents_and_runs() {
    let dir = project(&[("hello", PLAIN), ("helper", PLAIN), ("other", PLAIN)]);
    assert_eq!(
        complete(dir.path(), &["aurad", "run", "he"]),
        ["hello", "helper"]
    );
    assert_eq!(complete(dir.path(), &["aurad", "test", "o"]), ["other"]);
    // No store yet: no runs, and none is created by completing.
    assert_eq!(
        complete(dir.path(), &["aurad", "logs", "0"]),
        Vec::<String>::new()
    );
    assert!(!dir.path().join("aurad.db").exists());
    for _ in 0..2 {
        assert_eq!(aurad(dir.path(), &["run", "hello"]).0, 0);
    }
    let ids = run_ids(dir.path());
    let short = &ids[0].0[28..];
    // A short id's start completes to it; a whole id's start to whole ids.
    assert_eq!(
        complete(dir.path(), &["aurad", "logs", &short[..3]]),
        [short]
    );
    assert_eq!(complete(dir.path(), &["aurad", "approve", short]), [short]);
    let start = &ids[0].0[..13];
    let whole: Vec<String> = ids
        .iter()
        .filter(|(id, _, _)| id.starts_with(start))
        .map(|(id, _, _)| id.clone())
        .collect();
    assert_eq!(complete(dir.path(), &["aurad", "replay", start]), whole);
    // The registration the shell sources calls aurad back; --static is
    // the self-contained script.
    let (code, out, _) = aurad(dir.path(), &["completions", "bash"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("_clap_complete_aurad") && out.contains("COMPLETE=\"bash\""),
        "{out}"
    );
    let (code, out, _) = aurad(dir.path(), &["completions", "zsh", "--static"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("#compdef aurad"), "{out}");
}

#[test]
fn validate_in_an_empty_folder_says_there_is_no_project() {
    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = aurad(empty.path(), &["validate"]);
    assert_eq!(code, 2);
    assert!(err.contains("no aurad project in"), "{err}");
    assert!(
        err.contains("`aurad init`") && err.contains("--dir"),
        "{err}"
    );
    let dir = project(&[("hello", PLAIN)]);
    let skill = dir.path().join("skills/notes");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: notes\ndescription: Taking notes.\n---\nWrite them down.\n",
    )
    .unwrap();
    let (code, _, err) = aurad(dir.path(), &["validate"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("ok: 1 agent(s), 0 warning(s); 0 channel(s), 0 MCP server(s), 0 tool plugin(s), 1 skill(s), 0 test file(s)"),
        "{err}"
    );
}

/// `aurad agents | head -1`: the listing ends quietly when its reader has
/// had enough (SIGPIPE, as other Unix tools), instead of panicking in
/// `println!` on the broken pipe.
#[test]
fn a_listing_piped_into_a_reader_that_stops_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let agents: Vec<(String, String)> = (0..200)
        .map(|i| (format!("agent{i:03}"), PLAIN.to_string()))
        .collect();
    let refs: Vec<(&str, &str)> = agents
        .iter()
        .map(|(n, y)| (n.as_str(), y.as_str()))
        .collect();
    let dir = project(&refs);
    let mut child = Command::new(env!("CARGO_BIN_EXE_aurad"))
        .arg("--dir")
        .arg(dir.path())
        .arg("agents")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reader goes away before reading anything.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGPIPE),
        "{:?}: {err}",
        out.status
    );
}
