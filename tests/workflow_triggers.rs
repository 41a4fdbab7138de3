//! `after:` and `watch:` triggers (issue #16, section 1) with real parts:
//! the daemon in process or the real binary, the mock LLM on loopback, a
//! real SQLite file and real file-system events.
//!
//! - a chain a -> b on success only, c on failure, with the ended run's
//!   output in the follow-up's input;
//! - a cycle across files is an error at both places, `aurad validate`
//!   exits 2 and `aurad serve` starts with the other agents;
//! - 20 files dropped into inbox/ are processed exactly once each across a
//!   SIGKILL of the daemon mid-way; a changed file runs again; `move_to`
//!   moves a processed file;
//! - located errors for each bad field.

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
use std::time::Duration;

use assert_cmd::cargo::cargo_bin_cmd;
use aurad::store::Store;
use aurad::types::RunState;
use support::inproc::{InProc, WAIT, eventually, get, hash, runs, start, wait_hash, watching};
use support::mock_llm::{MockLlm, Recorded, Reply};
use support::project::project_with_mock;
use support::serve::{Serve, poll, write_settings};

/// The last user message of a recorded model request.
fn last_user_text(request: &Recorded) -> String {
    request
        .messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// Writes `file` under `root` as files should be dropped: written aside,
/// then renamed into place, so no watcher sees it half written.
fn write(root: &Path, file: &str, text: &str) {
    let path = root.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let aside = root.join(format!(".{}.part", file.replace('/', "_")));
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(aside, path).unwrap();
}

/// An agent (on the built-in test model) run for each file matching
/// `paths`, its input naming the file.
fn reader_agent(paths: &str, debounce: &str) -> String {
    format!(
        "model: test\nprompt: \"Read {{{{ trigger.path }}}}\"\nwatch: {{ paths: \"{paths}\", debounce: {debounce} }}\n"
    )
}

/// A daemon in process serving [`reader_agent`] as `a`, and its store; the
/// project lives as long as the returned directory.
async fn serve_reader(paths: &str, debounce: &str) -> (MockLlm, tempfile::TempDir, InProc, Store) {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, &reader_agent(paths, debounce));
    let daemon = start(dir.path(), Default::default()).await;
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    (mock, dir, daemon, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_runs_on_success_only_and_a_failure_starts_its_own_follow_up() {
    let mock = MockLlm::start().await;
    // `a` answers, or fails at once (400) when asked to.
    mock.set_responder(|request| {
        if last_user_text(request).contains("please fail") {
            Reply::error(400, "refused")
        } else {
            Reply::Text("3 new issues triaged".into())
        }
    });
    let dir = project_with_mock(&mock, "model: mock/m\nprompt: triage\n");
    let root = dir.path();
    write(
        root,
        "agents/b.yaml",
        "model: test\nprompt: unused\nafter:\n  - agent: a\n    on: succeeded\n    input: \"Notify about: {{ trigger.output }} ({{ trigger.agent }} {{ trigger.state }} {{ trigger.run_id }})\"\n",
    );
    write(
        root,
        "agents/c.yaml",
        "model: test\nprompt: \"Alert: {{ trigger.agent }} {{ trigger.state }} {{ trigger.run_id }}\"\nafter: [{ agent: a, on: failed }]\n",
    );
    let daemon = start(root, Default::default()).await;
    let store = Store::open(&root.join("aurad.db")).unwrap();
    let client = daemon.client();
    let submit = |input: &'static str| {
        let client = client.clone();
        let url = daemon.url("/v1/agents/a/runs");
        async move {
            let body: serde_json::Value = client
                .post(url)
                .json(&serde_json::json!({ "input": input }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            body["id"].as_str().expect("a run id").to_string()
        }
    };

    let ok = submit("triage today").await;
    let b_run = eventually("b to run after a succeeded", WAIT, || async {
        runs(&store, "b")
            .await
            .into_iter()
            .find(|r| r.state == RunState::Succeeded)
    })
    .await;
    assert_eq!(b_run.trigger, aurad::types::Trigger::After);
    assert_eq!(
        b_run.input,
        format!("Notify about: 3 new issues triaged (a succeeded {ok})")
    );
    let a_runs = runs(&store, "a").await;
    assert_eq!(a_runs[0].state, RunState::Succeeded);

    let failed = submit("please fail").await;
    let c_run = eventually("c to run after a failed", WAIT, || async {
        runs(&store, "c")
            .await
            .into_iter()
            .find(|r| r.state.is_final())
    })
    .await;
    assert_eq!(c_run.state, RunState::Succeeded);
    assert_eq!(c_run.input, format!("Alert: a failed {failed}"));
    // Follow-ups are started in the order of the agents' names: c's run
    // exists, so b's (which would come first) would too.
    assert_eq!(runs(&store, "b").await.len(), 1, "b ran after a failure");
    assert_eq!(runs(&store, "c").await.len(), 1, "c ran after a success");
    assert_eq!(runs(&store, "a").await[1].state, RunState::Failed);
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cycle_is_an_error_at_each_place_and_the_other_agents_serve() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: test\nprompt: fine\n");
    let root = dir.path();
    write(root, "agents/x.yaml", "model: test\nprompt: p\nafter: y\n");
    write(
        root,
        "agents/y.yaml",
        "model: test\nprompt: p\nafter:\n  - agent: x\n    on: any\n",
    );
    write(
        root,
        "agents/z.yaml",
        "model: test\nprompt: p\nafter: [a]\n",
    );
    let assert = cargo_bin_cmd!("aurad")
        .args(["validate", "--dir"])
        .arg(root)
        .assert()
        .code(2);
    let stderr = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    for line in [
        "agents/x.yaml:3:8: `after:` makes a cycle: x -> y -> x",
        "agents/y.yaml:4:12: `after:` makes a cycle: x -> y -> x",
    ] {
        assert!(
            stderr.lines().any(|l| l.starts_with(line)),
            "missing {line:?} in:\n{stderr}"
        );
    }
    assert!(stderr.contains("2 agent(s) valid"), "{stderr}");

    let daemon = start(root, Default::default()).await;
    assert_eq!(get(&daemon, "/v1/agents/a").await.0, 200);
    assert_eq!(get(&daemon, "/v1/agents/z").await.0, 200);
    assert_eq!(get(&daemon, "/v1/agents/x").await.0, 404);
    assert_eq!(get(&daemon, "/v1/agents/y").await.0, 404);
    daemon.stop().await.unwrap();
}

#[test]
fn bad_trigger_fields_are_located() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "agents/ok.yaml", "model: test\nprompt: p\n");
    write(
        root,
        "agents/bad_after.yaml",
        "model: test\nprompt: p\nafter:\n  - agent: nobody\n  - agent: ok\n    on: sometimes\n  - bad_after\n  - { agent: ok, when: x }\n",
    );
    write(
        root,
        "agents/bad_watch.yaml",
        "model: test\nprompt: p\nwatch:\n  paths: [\"../out/*.md\", \"agents/*.yaml\", \"aurad.db\"]\n  debounce: soon\n  move_to: /tmp/done\n  input: \"{{ broken\"\n  on: created\n",
    );
    let assert = cargo_bin_cmd!("aurad")
        .args(["validate", "--dir"])
        .arg(root)
        .assert()
        .code(2);
    let stderr = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    for line in [
        "agents/bad_after.yaml:5:5: after[1]: `on` is \"sometimes\": expected `succeeded`",
        "agents/bad_after.yaml:7:5: after[2]: agent `bad_after` cannot run after itself",
        "agents/bad_after.yaml:8:5: after[3]: unknown field `when`",
        "agents/bad_watch.yaml:4:12: watch.paths[0]: \"../out/*.md\" leaves the project",
        "agents/bad_watch.yaml:4:27: watch.paths[1]: \"agents/*.yaml\" matches the project's own files",
        "agents/bad_watch.yaml:4:44: watch.paths[2]: \"aurad.db\" matches the project's own files",
        "agents/bad_watch.yaml:5:13: watch.debounce: invalid duration \"soon\"",
        "agents/bad_watch.yaml:6:12: watch.move_to: \"/tmp/done\" is absolute",
        "agents/bad_watch.yaml:7:11: watch.input: template error",
        "agents/bad_watch.yaml:8:7: unknown field `watch.on`",
    ] {
        assert!(
            stderr.lines().any(|l| l.starts_with(line)),
            "missing {line:?} in:\n{stderr}"
        );
    }

    // An unknown agent is only known once every file is read.
    write(
        root,
        "agents/bad_after.yaml",
        "model: test\nprompt: p\nafter: nobody\n",
    );
    std::fs::remove_file(root.join("agents/bad_watch.yaml")).unwrap();
    let assert = cargo_bin_cmd!("aurad")
        .args(["validate", "--dir"])
        .arg(root)
        .assert()
        .code(2);
    let stderr = String::from_utf8(assert.get_output().stderr.clone()).unwrap();
    assert!(
        stderr.lines().any(|l| l.starts_with(
            "agents/bad_after.yaml:3:8: after[0]: there is no agent `nobody` in agents/ (agents: bad_after, ok)"
        )),
        "{stderr}"
    );
}

/// Waits until a run of agent `a` with `input` has ended.
async fn ended(store: &Store, input: &str, what: &str) {
    eventually(what, WAIT, || async {
        runs(store, "a")
            .await
            .into_iter()
            .find(|r| r.input == input && r.state.is_final())
    })
    .await;
}

/// (path, state) of every run of `agent` in the database at `db`.
fn file_runs(db: &Path, agent: &str) -> Vec<(String, String)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    let mut stmt = conn
        .prepare("SELECT input, state FROM runs WHERE agent = ?1 ORDER BY created_at")
        .unwrap();
    stmt.query_map([agent], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// Succeeded runs per file (the input is `Process inbox/NAME`).
fn succeeded_per_file(db: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (input, state) in file_runs(db, "inbox") {
        if state == "succeeded" {
            let path = input.trim_start_matches("Process ").to_string();
            *counts.entry(path).or_insert(0) += 1;
        }
    }
    counts
}

#[test]
fn dropped_files_run_exactly_once_each_across_a_kill_9_and_a_changed_file_runs_again() {
    let mock = MockLlm::start_in_thread();
    // Slow enough that some runs are in flight when the daemon is killed.
    mock.set_fallback(Reply::Delay(
        Duration::from_millis(150),
        Box::new(Reply::Text("summarised".into())),
    ));
    let dir = project_with_mock(&mock, "model: test\nprompt: p\n");
    let root = dir.path();
    let addr = write_settings(root, &mock);
    write(
        root,
        "agents/inbox.yaml",
        "model: mock/m\nprompt: unused\nwatch:\n  paths: \"inbox/*.md\"\n  debounce: 100ms\n  input: \"Process {{ trigger.path }}\"\n",
    );
    let db = root.join("aurad.db");
    // Five were there before the daemon started.
    for i in 0..5 {
        write(root, &format!("inbox/f{i:02}.md"), &format!("file {i}"));
    }
    let mut serve = Serve::start(root, addr, &[]);
    for i in 5..12 {
        write(root, &format!("inbox/f{i:02}.md"), &format!("file {i}"));
    }
    // Killed with some files done and some runs in flight: those become
    // `interrupted` and their files are run again after the restart.
    poll(
        "some files to be processed and others in flight",
        || serve.log(),
        || {
            let running = file_runs(&db, "inbox")
                .iter()
                .filter(|(_, s)| s == "running")
                .count();
            (succeeded_per_file(&db).len() >= 4 && running >= 1).then_some(())
        },
    );
    serve.kill_now();
    // Dropped while the daemon is down.
    for i in 12..20 {
        write(root, &format!("inbox/f{i:02}.md"), &format!("file {i}"));
    }
    let serve = Serve::start(root, addr, &[]);
    let all = poll(
        "all 20 files to be processed",
        || format!("{:?}\n{}", file_runs(&db, "inbox"), serve.log()),
        || {
            let done = succeeded_per_file(&db);
            let settled = file_runs(&db, "inbox")
                .iter()
                .all(|(_, s)| s != "queued" && s != "running");
            (done.len() == 20 && settled).then_some(done)
        },
    );
    for i in 0..20 {
        let path = format!("inbox/f{i:02}.md");
        assert_eq!(all.get(&path), Some(&1), "{path}: {all:?}");
    }
    let states: Vec<String> = file_runs(&db, "inbox")
        .into_iter()
        .map(|(_, s)| s)
        .collect();
    assert!(
        states.iter().any(|s| s == "interrupted"),
        "the kill cut no run: {states:?}"
    );

    // A changed file is a new version: it runs again, once.
    write(root, "inbox/f03.md", "file 3, edited");
    poll(
        "the changed file to run again",
        || format!("{:?}", file_runs(&db, "inbox")),
        || (succeeded_per_file(&db).get("inbox/f03.md") == Some(&2)).then_some(()),
    );
    let all = succeeded_per_file(&db);
    assert_eq!(all.values().sum::<usize>(), 21, "{all:?}");
    drop(serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processed_file_is_moved_and_not_processed_again() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(
        &mock,
        "model: test\nprompt: \"Summarise {{ trigger.path }}\"\nwatch: { paths: \"inbox/**/*.md\", debounce: 50ms, move_to: inbox/done }\n",
    );
    let root = dir.path();
    write(root, "inbox/old.md", "there before the start");
    let daemon = start(root, Default::default()).await;
    let store = Store::open(&root.join("aurad.db")).unwrap();
    write(root, "inbox/new.md", "dropped");
    write(root, "inbox/skip.txt", "not matching");
    eventually("both files to be moved", WAIT, || async {
        (root.join("inbox/done/old.md").is_file() && root.join("inbox/done/new.md").is_file())
            .then_some(())
    })
    .await;
    assert!(!root.join("inbox/old.md").exists());
    assert!(root.join("inbox/skip.txt").exists());
    let done = runs(&store, "a").await;
    let mut inputs: Vec<&str> = done.iter().map(|r| r.input.as_str()).collect();
    inputs.sort();
    assert_eq!(inputs, ["Summarise inbox/new.md", "Summarise inbox/old.md"]);
    assert!(
        done.iter()
            .all(|r| r.trigger == aurad::types::Trigger::Watch && r.state == RunState::Succeeded)
    );
    // The moved files are under the glob, but processed: a restart does
    // not run them again.
    daemon.stop().await.unwrap();
    let daemon = start(root, Default::default()).await;
    write(root, "inbox/third.md", "one more");
    eventually("the third file to be moved", WAIT, || async {
        root.join("inbox/done/third.md").is_file().then_some(())
    })
    .await;
    assert_eq!(runs(&store, "a").await.len(), 3);
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_added_by_a_reload_takes_effect_and_one_removed_stops() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: test\nprompt: p\n");
    let root = dir.path();
    let daemon = start(root, watching()).await;
    let store = Store::open(&root.join("aurad.db")).unwrap();
    // The config watcher starts just after the API listens: written until
    // seen, a probe agent says it is on. Written again only after a quiet
    // half second, well past the 50 ms debounce: rewritten at every poll,
    // the file never stayed quiet long enough to be reported (a timeout
    // seen once in four runs under load).
    let written = std::sync::Mutex::new(None::<std::time::Instant>);
    eventually("hot reload to be on", WAIT, || async {
        {
            let mut written = written.lock().unwrap();
            if written.is_none_or(|at| at.elapsed() > Duration::from_millis(500)) {
                write(root, "agents/probe.yaml", "model: test\nprompt: p\n");
                *written = Some(std::time::Instant::now());
            }
        }
        (get(&daemon, "/v1/agents/probe").await.0 == 200).then_some(())
    })
    .await;
    write(root, "drop/early.txt", "there before the watch");
    write(root, "agents/a.yaml", &reader_agent("drop/*.txt", "50ms"));
    // The file there before the reload is found by the look at the folder.
    ended(
        &store,
        "Read drop/early.txt",
        "the file there before the watch to run",
    )
    .await;
    write(root, "drop/late.txt", "dropped after");
    ended(&store, "Read drop/late.txt", "the dropped file to run").await;
    // Watching another folder instead: drop/ is not followed any more. A
    // file dropped there first and one in the new folder after: once the
    // second has run, the first would have (same debounce, earlier).
    let old = hash(&daemon, "a").await;
    write(root, "agents/a.yaml", &reader_agent("other/*.txt", "50ms"));
    wait_hash(&daemon, "a", old.as_deref()).await;
    write(root, "drop/ignored.txt", "nobody watches");
    write(root, "other/seen.txt", "watched");
    ended(
        &store,
        "Read other/seen.txt",
        "the file of the new folder to run",
    )
    .await;
    let inputs: Vec<String> = runs(&store, "a")
        .await
        .into_iter()
        .map(|r| r.input)
        .collect();
    assert_eq!(
        inputs,
        [
            "Read drop/early.txt",
            "Read drop/late.txt",
            "Read other/seen.txt"
        ]
    );
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_created_after_the_start_is_followed() {
    let (_mock, dir, daemon, store) = serve_reader("deep/er/*.txt", "20ms").await;
    let root = dir.path();
    std::fs::create_dir(root.join("deep")).unwrap();
    std::fs::create_dir(root.join("deep/er")).unwrap();
    write(root, "deep/er/x.txt", "hello");
    ended(
        &store,
        "Read deep/er/x.txt",
        "the file in the new folder to run",
    )
    .await;
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_moved_into_place_is_followed() {
    let (_mock, dir, daemon, store) = serve_reader("drop/*.txt", "20ms").await;
    let root = dir.path();
    // Filled elsewhere, then renamed into the root: the root's watch sees a
    // rename, not a creation.
    let staging = tempfile::tempdir_in(root).unwrap();
    std::fs::write(staging.path().join("y.txt"), "hello").unwrap();
    std::fs::rename(staging.path(), root.join("drop")).unwrap();
    ended(
        &store,
        "Read drop/y.txt",
        "the file in the moved folder to run",
    )
    .await;
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_in_the_root_runs_once() {
    let (_mock, dir, daemon, store) = serve_reader("*.csv", "50ms").await;
    let root = dir.path();
    // Written in place (created, written twice, closed): a glob of the
    // root's own files is followed with every write seen.
    let mut file = std::fs::File::create(root.join("a.csv")).unwrap();
    std::io::Write::write_all(&mut file, b"x,1\n").unwrap();
    file.sync_data().unwrap();
    std::io::Write::write_all(&mut file, b"y,2\n").unwrap();
    drop(file);
    ended(&store, "Read a.csv", "the file in the root to run").await;
    let runs = file_runs(&root.join("aurad.db"), "a");
    daemon.stop().await.unwrap();
    assert_eq!(runs.len(), 1, "one run for the file: {runs:?}");
}

/// Issue #32 item 11: `watch: "**/*.txt"` saw only the root's own files,
/// though `**` crosses folders. Files in a folder there at the start, deep
/// in one, and in a folder created later each run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_star_glob_at_the_root_sees_every_folder() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, &reader_agent("**/*.txt", "20ms"));
    let root = dir.path();
    write(root, "old/a.txt", "there before the start");
    std::fs::create_dir_all(root.join("sub/deep")).unwrap();
    let daemon = start(root, Default::default()).await;
    let store = Store::open(&root.join("aurad.db")).unwrap();
    ended(
        &store,
        "Read old/a.txt",
        "the file there at the start to run",
    )
    .await;
    write(root, "sub/deep/b.txt", "deep");
    ended(&store, "Read sub/deep/b.txt", "the deep file to run").await;
    write(root, "new/c.txt", "in a new folder");
    ended(
        &store,
        "Read new/c.txt",
        "the file in the new folder to run",
    )
    .await;
    write(root, "top.txt", "at the root");
    ended(&store, "Read top.txt", "the root's own file to run").await;
    daemon.stop().await.unwrap();
}
