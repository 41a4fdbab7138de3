//! The workflow examples of `examples/workflows/` (docs/workflows.md shows
//! them): `aurad validate` accepts them, and each
//! runs offline under the `test` model (`AURAD_MODEL=test`, which every
//! example's `model: ${AURAD_MODEL:-...}` picks up): the digest pipeline and
//! the agent calling two others with `aurad run`; the inbox processor, the
//! announcement chained after the digest and the approval-gated shell agent
//! under a real `aurad serve`. The page's copies of the files are checked
//! against the files, so the two cannot drift apart. Every test works on a
//! copy of the files the repository holds, never on what trying the
//! examples by hand leaves in the folder (a store, processed notes).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use support::serve::{Serve, aurad, free_port, http_get, http_post_json, poll};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/workflows");

/// A copy of the examples project in a temporary directory (runs write
/// their database into the project), listening on a free port.
fn project() -> (tempfile::TempDir, SocketAddr) {
    project_from(Path::new(EXAMPLES))
}

fn project_from(examples: &Path) -> (tempfile::TempDir, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    copy_examples(examples, dir.path(), Path::new(""));
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    std::fs::write(dir.path().join("aurad.yaml"), format!("listen: {addr}\n")).unwrap();
    (dir, addr)
}

/// What running the examples by hand leaves in their folder (all
/// git-ignored or made at run time): the store and its WAL, the lock, the
/// private work folder, notes dropped into the inbox and the ones filed.
fn left_by_a_run(relative: &Path) -> bool {
    let name = relative.to_string_lossy();
    let store = [".db", ".db-wal", ".db-shm", ".db-journal"]
        .iter()
        .any(|end| name.ends_with(end));
    store
        || name.starts_with('.')
        || relative.starts_with("inbox/done")
        || (relative.starts_with("inbox") && name.ends_with(".md"))
}

/// Copies the examples the repository holds, leaving out what runs left.
fn copy_examples(from: &Path, to: &Path, relative: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let inner = relative.join(entry.file_name());
        if left_by_a_run(&inner) {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_examples(&entry.path(), &target, &inner);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn offline(root: &Path) -> std::process::Command {
    let mut cmd = aurad(root);
    cmd.env("AURAD_MODEL", "test");
    cmd
}

/// The stored runs, newest first, as `aurad runs --json` prints them.
fn runs(root: &Path) -> Vec<Value> {
    let out = aurad(root)
        .args(["runs", "--json", "--limit", "100"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn runs_of<'a>(runs: &'a [Value], agent: &str) -> Vec<&'a Value> {
    runs.iter().filter(|r| r["agent"] == agent).collect()
}

fn api_runs(addr: SocketAddr, agent: &str) -> Vec<Value> {
    let Some((200, body)) = http_get(addr, &format!("/v1/runs?agent={agent}")) else {
        return Vec::new();
    };
    let body: Value = serde_json::from_str(&body).unwrap();
    body["runs"].as_array().cloned().unwrap_or_default()
}

#[test]
fn validate_accepts_every_example_with_and_without_a_model_override() {
    let (dir, _) = project();
    for model in [Some("test"), None] {
        let mut cmd = aurad(dir.path());
        cmd.env_remove("AURAD_MODEL").env_remove("OPENAI_API_KEY");
        if let Some(model) = model {
            cmd.env("AURAD_MODEL", model);
        }
        let out = cmd.arg("validate").output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("ok: 10 agent(s), 0 warning(s)"), "{text}");
    }
}

#[test]
fn aurad_agents_shows_each_agents_workflow_parts() {
    let (dir, _) = project();
    let out = offline(dir.path())
        .args(["agents", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let agents: Value = serde_json::from_slice(&out.stdout).unwrap();
    let agent = |name: &str| {
        agents
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no {name} in {agents:#}"))
    };
    assert_eq!(agent("announce")["after"][0]["agent"], "digest");
    assert_eq!(agent("announce")["after"][0]["on"], "succeeded");
    assert_eq!(agent("inbox")["watch"][0], "inbox/*.md");
    assert_eq!(agent("digest")["steps"], 4);
    assert_eq!(agent("weekly")["agents"][1], "summarizer");
    assert_eq!(agent("ops")["approve"][0], "bash");
    assert!(agent("reader").get("after").is_none());

    let out = offline(dir.path()).arg("agents").output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("after digest (succeeded)"), "{table}");
    assert!(table.contains("watch inbox/*.md"), "{table}");
}

#[test]
fn the_digest_pipeline_and_the_agent_with_sub_agents_run_offline() {
    let (dir, _) = project();
    let root = dir.path();
    let out = offline(root).args(["run", "digest"]).output().unwrap();
    let progress = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{progress}");
    for step in ["feeds", "pick", "read", "write"] {
        assert!(
            progress.contains(&format!("✓ step {step} succeeded")),
            "{progress}"
        );
    }
    let out = offline(root).args(["run", "weekly"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");

    let all = runs(root);
    let digest = runs_of(&all, "digest");
    assert_eq!(digest.len(), 1, "{all:#?}");
    assert_eq!(digest[0]["state"], "succeeded");
    // The pipeline's agent steps are runs of their own, linked to it.
    for agent in ["picker", "reader", "writer"] {
        let children = runs_of(&all, agent);
        assert!(!children.is_empty(), "no run of {agent}: {all:#?}");
        for child in children {
            assert_eq!(child["parent_run_id"], digest[0]["id"], "{child:#}");
            assert_eq!(child["state"], "succeeded", "{child:#}");
        }
    }
    let weekly = runs_of(&all, "weekly");
    assert_eq!(weekly[0]["state"], "succeeded");
    for agent in ["researcher", "summarizer"] {
        let children = runs_of(&all, agent);
        assert_eq!(children.len(), 1, "{all:#?}");
        assert_eq!(children[0]["parent_run_id"], weekly[0]["id"]);
    }
}

#[test]
fn under_serve_the_inbox_chain_and_approval_examples_work() {
    let (dir, addr) = project();
    let root = dir.path();
    let serve = Serve::start_with_env(root, addr, &[], &[("AURAD_MODEL", "test")]);

    // The inbox processor: a dropped note runs once and moves to done/.
    let staged = root.join("note.tmp");
    std::fs::write(&staged, "# Standup\nShip the release on Monday.\n").unwrap();
    std::fs::rename(&staged, root.join("inbox/standup.md")).unwrap();
    let done: PathBuf = root.join("inbox/done/standup.md");
    poll(
        "the note to be filed and moved",
        || serve.log(),
        || done.exists().then_some(()),
    );
    let inbox = api_runs(addr, "inbox");
    assert_eq!(inbox.len(), 1, "{inbox:#?}");
    assert_eq!(inbox[0]["state"], "succeeded");
    assert_eq!(inbox[0]["trigger"], "watch");

    // The digest through the API; its success starts the announcement.
    let (status, body) = http_post_json(addr, "/v1/agents/digest/runs", "{}").unwrap();
    assert_eq!(status, 202, "{body}");
    let announce = poll(
        "the announcement after the digest",
        || serve.log(),
        || {
            api_runs(addr, "announce")
                .into_iter()
                .find(|r| r["state"] == "succeeded")
        },
    );
    assert_eq!(announce["trigger"], "after");
    assert!(
        announce["input"]
            .as_str()
            .is_some_and(|i| i.starts_with("Announce this digest (run ")),
        "{announce:#}"
    );

    // The shell agent waits for a person before `bash`; denied, it goes on.
    let (status, body) = http_post_json(addr, "/v1/agents/ops/runs", "{}").unwrap();
    assert_eq!(status, 202, "{body}");
    let id = poll(
        "the ops run to wait for approval",
        || serve.log(),
        || {
            api_runs(addr, "ops")
                .into_iter()
                .find(|r| r["state"] == "waiting_approval")
                .and_then(|r| r["id"].as_str().map(str::to_string))
        },
    );
    let out = aurad(root)
        .args([
            "approve",
            &id,
            "--call",
            "call_test_1",
            "--deny",
            "not during the release",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let run = poll(
        "the denied run to finish",
        || serve.log(),
        || {
            let (_, body) = http_get(addr, &format!("/v1/runs/{id}"))?;
            let run: Value = serde_json::from_str(&body).ok()?;
            (run["state"] == "succeeded").then_some(run)
        },
    );
    assert!(
        run["output"]
            .as_str()
            .is_some_and(|o| o.contains("bash: error: denied by a person: not during the release")),
        "{run:#}"
    );
}

/// Issue #36: the examples tried by hand (`aurad run digest` in
/// `examples/workflows/`, then `aurad serve` with a note dropped in the
/// inbox) leave a store with runs and a filed note there; the tests must
/// not see them. The folder tried by hand is a copy, so the repository's
/// stays clean while this test runs.
#[test]
fn what_trying_the_examples_by_hand_leaves_behind_is_not_copied() {
    let tried = tempfile::tempdir().unwrap();
    copy_examples(Path::new(EXAMPLES), tried.path(), Path::new(""));
    let out = offline(tried.path())
        .args(["run", "digest"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(tried.path().join("aurad.db").exists());
    assert!(!runs(tried.path()).is_empty());
    std::fs::create_dir_all(tried.path().join("inbox/done")).unwrap();
    std::fs::write(tried.path().join("inbox/done/old.md"), "# Old\n").unwrap();
    std::fs::write(tried.path().join("inbox/new.md"), "# New\n").unwrap();

    let (dir, _) = project_from(tried.path());
    assert!(!dir.path().join("aurad.db").exists());
    assert!(!dir.path().join("aurad.db-wal").exists());
    assert!(!dir.path().join("inbox/done").exists());
    assert!(!dir.path().join("inbox/new.md").exists());
    assert!(dir.path().join("inbox/README.txt").exists());
    assert!(dir.path().join("agents/digest.yaml").exists());
    assert_eq!(runs(dir.path()), Vec::<Value>::new());
    // And the digest counts its own run only, as the test above asserts.
    let out = offline(dir.path())
        .args(["run", "digest"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(runs_of(&runs(dir.path()), "digest").len(), 1);
}

#[test]
fn the_docs_show_the_example_files_as_they_are() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        pages.push(entry.unwrap().path());
    }
    let mut shown = 0;
    for page in pages {
        let name = page.strip_prefix(root).unwrap().display().to_string();
        let text = std::fs::read_to_string(&page).unwrap();
        // Each block opens with a comment naming its file.
        for block in text.split("```yaml\n").skip(1) {
            let block = block.split("```").next().unwrap();
            let Some(rest) = block.strip_prefix("# examples/workflows/") else {
                continue;
            };
            let (file, text) = rest.split_once('\n').unwrap();
            let on_disk = std::fs::read_to_string(Path::new(EXAMPLES).join(file))
                .unwrap_or_else(|e| panic!("{name} shows examples/workflows/{file}: {e}"));
            assert_eq!(
                text, on_disk,
                "{name}'s copy of examples/workflows/{file} differs from the file"
            );
            shown += 1;
        }
    }
    // docs/workflows.md: the pipeline and its three agents, announce, inbox,
    // weekly and its two agents, ops; docs/traces-and-tests.md: inbox's cases.
    assert!(shown >= 11, "the docs show {shown} example files");
}
