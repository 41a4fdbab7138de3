//! A broken file breaks only itself, with real files, real file-system
//! events, real MCP server processes and the real `aurad` binary: a bad
//! skill, tools.d plugin, mcp.json entry or unreadable mcp.json leaves out
//! that item and the agents that need it (their error names it and where
//! its error is); an agent file broken after it loaded keeps its last good
//! version (its schedule fires, the API runs it) until it is fixed; an
//! agent that never loaded is absent; an error in aurad.yaml keeps the
//! whole previous snapshot; `aurad serve` starts with the good part,
//! `aurad run` runs a good agent whatever else is broken, and `aurad
//! validate` still exits 2.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::path::Path;
use std::sync::Arc;

use aurad::daemon::ManualClock;
use aurad::store::Store;
use aurad::types::RunState;
use chrono::{DateTime, Utc};
use serde_json::Value;
use support::inproc::{
    InProc, Start, WAIT, eventually, get, hash, runs, start, wait_hash, watching, write,
};
use support::mock_llm::{MockLlm, Reply};
use support::project::project_with_mock;
use support::serve::{Serve, aurad, free_port, http_get, poll};

/// Writes `text` to `file` under `root`, creating its directory.
fn put(root: &Path, file: &str, text: &str) {
    let path = root.join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

const GOOD_SKILL: &str = "---\nname: good\ndescription: A good skill.\n---\nBe good.\n";
/// An empty description, on line 3 of the file.
const BAD_SKILL: &str = "---\nname: bad\ndescription: \"\"\n---\nBe bad.\n";
const GOOD_PLUGIN: &str =
    "description: Weather.\nparameters: { type: object }\ncommand: [\"true\"]\n";
/// Neither `command` nor `http`.
const BAD_PLUGIN: &str = "description: Broken.\nparameters: { type: object }\n";
/// Line 2 has an invalid value.
const BAD_AGENT: &str = "model: mock/m\nlimits: { max_iterations: zero }\n";

/// The entries of `/v1/status`'s `skipped` as `(kind, name)`.
fn skipped(status: &Value) -> Vec<(String, String)> {
    status["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["kind"].as_str().unwrap().to_string(),
                i["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The `skipped` entry of `kind` and `name`.
fn entry<'a>(status: &'a Value, kind: &str, name: &str) -> &'a Value {
    status["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == kind && i["name"] == name)
        .unwrap_or_else(|| panic!("no skipped {kind} {name} in {status:#}"))
}

fn names(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect()
}

async fn metrics(daemon: &InProc) -> String {
    daemon
        .client()
        .get(daemon.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Starts a run of `agent` through the API and waits for its final state.
async fn api_run(daemon: &InProc, agent: &str) -> Value {
    let response = daemon
        .client()
        .post(daemon.url(&format!("/v1/agents/{agent}/runs")))
        .json(&serde_json::json!({ "input": "go" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "run of {agent}");
    let run: Value = response.json().await.unwrap();
    let id = run["id"].as_str().unwrap().to_string();
    eventually("the run to end", WAIT, || async {
        let (_, run) = get(daemon, &format!("/v1/runs/{id}")).await;
        (run["state"] != "queued" && run["state"] != "running").then_some(run)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_broken_item_leaves_out_itself_and_the_agents_that_need_it() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nprompt: hi\ntools: [\"t_*\", weather]\nskills: [good]\n",
    );
    let root = dir.path();
    put(root, "skills/good/SKILL.md", GOOD_SKILL);
    put(root, "skills/bad/SKILL.md", BAD_SKILL);
    put(root, "tools.d/weather.yaml", GOOD_PLUGIN);
    put(root, "tools.d/broken.yaml", BAD_PLUGIN);
    let server = support::mcp_test_server();
    let mcp = serde_json::json!({ "mcpServers": {
        "t": { "command": server },
        "u": { "command": server, "bogus": 1 },
    } });
    put(
        root,
        "mcp.json",
        &serde_json::to_string_pretty(&mcp).unwrap(),
    );
    put(
        root,
        "agents/uses_skill.yaml",
        "model: mock/m\nprompt: x\nskills: [bad]\n",
    );
    put(
        root,
        "agents/uses_plugin.yaml",
        "model: mock/m\nprompt: x\ntools: [broken]\n",
    );
    put(
        root,
        "agents/uses_server.yaml",
        "model: mock/m\nprompt: x\ntools: [\"u_*\"]\n",
    );
    put(root, "agents/never.yaml", BAD_AGENT);

    let daemon = start(root, Start::default()).await;
    let (code, status) = get(&daemon, "/v1/status").await;
    assert_eq!(code, 200, "{status}");
    let expected: Vec<(String, String)> = [
        ("agent", "never"),
        ("agent", "uses_plugin"),
        ("agent", "uses_server"),
        ("agent", "uses_skill"),
        ("skill", "bad"),
        ("plugin", "broken"),
        ("mcp_server", "u"),
    ]
    .iter()
    .map(|(k, n)| (k.to_string(), n.to_string()))
    .collect();
    assert_eq!(skipped(&status), expected, "{status:#}");
    assert_eq!(names(&status["agents"]), ["a"], "{status:#}");
    assert_eq!(names(&status["skills"]), ["good"]);
    assert_eq!(names(&status["plugins"]), ["weather"]);
    assert_eq!(names(&status["mcp_servers"]), ["t"]);
    assert!(status["loaded_at"].is_string(), "{status:#}");

    // Each item's own error, located.
    let bad_skill = entry(&status, "skill", "bad");
    assert_eq!(bad_skill["path"], "skills/bad/SKILL.md");
    assert_eq!(bad_skill["line"], 3, "{bad_skill}");
    let never = entry(&status, "agent", "never");
    assert_eq!(
        (never["path"].as_str(), never["line"].as_u64()),
        (Some("agents/never.yaml"), Some(2))
    );
    assert_eq!(never["stale"], false);
    assert_eq!(
        entry(&status, "plugin", "broken")["path"],
        "tools.d/broken.yaml"
    );
    let u = entry(&status, "mcp_server", "u");
    assert_eq!(u["path"], "mcp.json");
    assert!(u["message"].as_str().unwrap().contains("bogus"), "{u}");
    // An agent that needs a skipped item names it and where its error is.
    let message = |name: &str| {
        entry(&status, "agent", name)["message"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let server_place = format!("mcp.json:{}:", u["line"]);
    for (agent, needles) in [
        ("uses_skill", ["skill `bad`", "skills/bad/SKILL.md:3:"]),
        ("uses_plugin", ["plugin `broken`", "tools.d/broken.yaml"]),
        ("uses_server", ["mcp_server `u`", server_place.as_str()]),
    ] {
        for needle in needles {
            assert!(message(agent).contains(needle), "{needle} in {status:#}");
        }
    }

    // The good agent and what it uses work.
    assert_eq!(hash(&daemon, "uses_skill").await, None);
    let run = api_run(&daemon, "a").await;
    assert_eq!(run["state"], "succeeded", "{run}");
    let offered: Vec<String> = mock.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(offered.contains(&"weather".to_string()), "{offered:?}");
    assert!(offered.contains(&"t_echo".to_string()), "{offered:?}");
    eventually("the server to show connected", WAIT, || async {
        let (_, status) = get(&daemon, "/v1/status").await;
        (status["mcp_servers"][0]["state"] == "connected").then_some(())
    })
    .await;

    let text = metrics(&daemon).await;
    for line in [
        "aurad_config_skipped{kind=\"agent\"} 4",
        "aurad_config_skipped{kind=\"skill\"} 1",
        "aurad_config_skipped{kind=\"plugin\"} 1",
        "aurad_config_skipped{kind=\"mcp_server\"} 1",
        "aurad_config_skipped{kind=\"mcp_file\"} 0",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_mcp_json_leaves_out_its_servers_and_their_agents_only() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: mock/m\nprompt: hi\n");
    let root = dir.path();
    put(
        root,
        "mcp.json",
        "{\n  \"mcpServers\": {\n    \"t\": { \"command\": \"x\" }\n  ]\n}\n",
    );
    put(
        root,
        "agents/m.yaml",
        "model: mock/m\nprompt: x\ntools: [\"t_*\"]\n",
    );
    let daemon = start(root, Start::default()).await;
    let (_, status) = get(&daemon, "/v1/status").await;
    assert_eq!(
        skipped(&status),
        [
            ("agent".to_string(), "m".to_string()),
            ("mcp_file".to_string(), "mcp.json".to_string())
        ],
        "{status:#}"
    );
    let file = entry(&status, "mcp_file", "mcp.json");
    assert_eq!(file["line"], 4, "{file}");
    assert!(
        file["message"].as_str().unwrap().contains("invalid JSON"),
        "{file}"
    );
    let m = entry(&status, "agent", "m")["message"].as_str().unwrap();
    assert!(
        m.contains("mcp_file `mcp.json`") && m.contains("mcp.json:4:"),
        "{m}"
    );
    assert!(hash(&daemon, "a").await.is_some());
    daemon.stop().await.unwrap();
}

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_broken_after_it_loaded_keeps_serving_its_last_good_version() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("done".into()));
    let good = "model: mock/m\nprompt: scheduled\nschedule: [\"* * * * *\"]\n";
    let dir = project_with_mock(&mock, good);
    let root = dir.path();
    put(root, "agents/other.yaml", "model: mock/m\nprompt: one\n");
    let clock = ManualClock::new(at("2026-06-01T12:00:30Z"));
    let options = Start {
        clock: Arc::new(clock.clone()),
        ..watching()
    };
    let daemon = start(root, options).await;
    eventually("the scheduler to sleep on the clock", WAIT, || async {
        (clock.sleepers() > 0).then_some(())
    })
    .await;
    let good_hash = hash(&daemon, "a").await.unwrap();
    let other = hash(&daemon, "other").await.unwrap();

    // `a` breaks; `other` changes in the same reload.
    write(
        root,
        "agents/a.yaml",
        &format!("{good}limits: {{ max_iterations: zero }}\n"),
    );
    write(root, "agents/other.yaml", "model: mock/m\nprompt: two\n");
    let status = eventually("a to be kept stale", WAIT, || async {
        let (_, status) = get(&daemon, "/v1/status").await;
        let stale = status["skipped"]
            .as_array()
            .is_some_and(|s| s.iter().any(|i| i["name"] == "a" && i["stale"] == true));
        stale.then_some(status)
    })
    .await;
    let a = entry(&status, "agent", "a");
    assert_eq!(
        (a["path"].as_str(), a["line"].as_u64()),
        (Some("agents/a.yaml"), Some(4)),
        "{a}"
    );
    assert_eq!(status["agents"][0]["name"], "a");
    assert_eq!(status["agents"][0]["stale"], true);
    assert_eq!(status["agents"][0]["definition_hash"], good_hash.as_str());
    assert!(
        wait_hash(&daemon, "other", Some(&other)).await.is_some(),
        "other reloads"
    );
    assert!(
        metrics(&daemon)
            .await
            .contains("aurad_config_skipped{kind=\"agent\"} 1"),
        "the metric counts the stale agent"
    );

    // Its schedule keeps firing, and the API runs it, on the last good version.
    let store = Store::open(&root.join("aurad.db")).unwrap();
    clock.set(at("2026-06-01T12:01:05Z"));
    let fired = eventually("the 12:01 fire to run", WAIT, || async {
        runs(&store, "a")
            .await
            .into_iter()
            .find(|r| r.trigger == aurad::types::Trigger::Schedule && r.state.is_final())
    })
    .await;
    assert_eq!(fired.state, RunState::Succeeded, "{fired:?}");
    assert_eq!(fired.definition_hash, good_hash);
    let run = api_run(&daemon, "a").await;
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(run["definition_hash"], good_hash.as_str());

    // Fixed: the new version is picked up and nothing is skipped.
    write(
        root,
        "agents/a.yaml",
        "model: mock/m\nprompt: fixed\nschedule: [\"* * * * *\"]\n",
    );
    let fixed = wait_hash(&daemon, "a", Some(&good_hash)).await.unwrap();
    let (_, status) = get(&daemon, "/v1/status").await;
    assert_eq!(
        skipped(&status),
        Vec::<(String, String)>::new(),
        "{status:#}"
    );
    assert_eq!(status["agents"][0]["definition_hash"], fixed.as_str());
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_agent_whose_plugin_breaks_is_dropped_and_a_new_broken_agent_stays_absent() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: mock/m\nprompt: hi\n");
    let root = dir.path();
    put(root, "tools.d/weather.yaml", GOOD_PLUGIN);
    put(
        root,
        "agents/b.yaml",
        "model: mock/m\nprompt: x\ntools: [weather]\n",
    );
    let daemon = start(root, watching()).await;
    assert!(hash(&daemon, "b").await.is_some());

    // b's file breaks: kept stale. A new broken agent never loads.
    write(
        root,
        "agents/b.yaml",
        "model: mock/m\nprompt: x\ntools: [weather]\nbogus: 1\n",
    );
    write(root, "agents/c.yaml", BAD_AGENT);
    eventually("b stale and c skipped", WAIT, || async {
        let (_, status) = get(&daemon, "/v1/status").await;
        let b = status["skipped"]
            .as_array()?
            .iter()
            .any(|i| i["name"] == "b" && i["stale"] == true);
        let c = status["skipped"]
            .as_array()?
            .iter()
            .any(|i| i["name"] == "c" && i["stale"] == false);
        (b && c).then_some(())
    })
    .await;
    assert!(hash(&daemon, "b").await.is_some());
    assert_eq!(hash(&daemon, "c").await, None);

    // The plugin b's last good version uses breaks: b no longer fits.
    write(root, "tools.d/weather.yaml", BAD_PLUGIN);
    eventually("b to be dropped", WAIT, || async {
        hash(&daemon, "b").await.is_none().then_some(())
    })
    .await;
    let (_, status) = get(&daemon, "/v1/status").await;
    assert_eq!(entry(&status, "agent", "b")["stale"], false, "{status:#}");
    assert_eq!(
        entry(&status, "plugin", "weather")["path"],
        "tools.d/weather.yaml"
    );
    assert!(hash(&daemon, "a").await.is_some(), "a is untouched");
    daemon.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_in_aurad_yaml_keeps_the_whole_previous_snapshot() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, "model: mock/m\nprompt: hi\n");
    let root = dir.path();
    let settings = std::fs::read_to_string(root.join("aurad.yaml")).unwrap();
    let daemon = start(root, watching()).await;
    let (_, before) = get(&daemon, "/v1/status").await;

    write(
        root,
        "aurad.yaml",
        &format!("{settings}max_concurrent_runs: lots\n"),
    );
    eventually("the rejected reload", WAIT, || async {
        metrics(&daemon)
            .await
            .contains("aurad_reload_errors_total 1")
            .then_some(())
    })
    .await;
    // A new agent written meanwhile is not loaded either.
    write(root, "agents/b.yaml", "model: mock/m\nprompt: bee\n");
    eventually("a second rejected reload", WAIT, || async {
        metrics(&daemon)
            .await
            .contains("aurad_reload_errors_total 2")
            .then_some(())
    })
    .await;
    assert_eq!(hash(&daemon, "b").await, None);
    let (_, after) = get(&daemon, "/v1/status").await;
    assert_eq!(after["loaded_at"], before["loaded_at"]);

    write(root, "aurad.yaml", &settings);
    assert!(wait_hash(&daemon, "b", None).await.is_some());
    daemon.stop().await.unwrap();
}

/// A project for the binary: `aurad.yaml` listening on a free port, a good
/// agent `a` (the offline test model), and a broken agent, skill, plugin
/// and mcp.json.
fn broken_project() -> (tempfile::TempDir, std::net::SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    put(
        root,
        "aurad.yaml",
        &format!("listen: {addr}\nshutdown_grace: 5s\n"),
    );
    put(root, "agents/a.yaml", "model: test\nprompt: hello\n");
    put(
        root,
        "agents/b.yaml",
        "model: test\nlimits: { max_iterations: zero }\n",
    );
    put(root, "skills/bad/SKILL.md", BAD_SKILL);
    put(root, "tools.d/broken.yaml", BAD_PLUGIN);
    put(root, "mcp.json", "{ not json");
    (dir, addr)
}

#[test]
fn serve_starts_with_the_good_part_and_says_what_it_skipped() {
    let (dir, addr) = broken_project();
    let mut serve = Serve::start(dir.path(), addr, &[]);
    let (code, body) = http_get(addr, "/v1/status").unwrap();
    assert_eq!(code, 200, "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(names(&status["agents"]), ["a"]);
    assert_eq!(
        skipped(&status),
        [
            ("agent", "b"),
            ("skill", "bad"),
            ("plugin", "broken"),
            ("mcp_file", "mcp.json")
        ]
        .map(|(k, n)| (k.to_string(), n.to_string())),
        "{status:#}"
    );
    let log = poll(
        "the skipped items logged",
        || serve.log(),
        || {
            let log = serve.log();
            log.contains("skipped plugin `broken`").then_some(log)
        },
    );
    for line in [
        "skipped agent `b`: agents/b.yaml:2:",
        "skipped skill `bad`: skills/bad/SKILL.md:3:",
        "skipped mcp_file `mcp.json`: mcp.json:1:",
    ] {
        assert!(log.contains(line), "{line} in:\n{log}");
    }
    serve.signal(libc::SIGTERM);
    assert!(serve.wait_exit().success(), "{}", serve.log());
}

#[test]
fn serve_refuses_to_start_on_an_error_in_aurad_yaml() {
    let (dir, addr) = broken_project();
    put(
        dir.path(),
        "aurad.yaml",
        &format!("listen: {addr}\nmax_concurrent_runs: lots\n"),
    );
    let mut serve = Serve::spawn(dir.path(), addr, &[]);
    let status = serve.wait_exit();
    assert_eq!(status.code(), Some(1), "{}", serve.log());
    let log = serve.log();
    assert!(log.contains("error: aurad.yaml:2:"), "{log}");
    assert!(log.contains("concerns every agent"), "{log}");
}

#[test]
fn run_works_when_the_agent_is_good_whatever_else_is_broken() {
    let (dir, _) = broken_project();
    let output = aurad(dir.path())
        .args(["run", "a", "--input", "hi"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("error(s) in files `a` does not use"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("SKILL.md:3"),
        "unrelated errors only counted: {stderr}"
    );

    let output = aurad(dir.path()).args(["run", "b"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("agents/b.yaml:2:"), "{stderr}");
}

#[test]
fn validate_still_exits_2_on_any_error() {
    let dir = tempfile::tempdir().unwrap();
    put(dir.path(), "agents/a.yaml", "model: test\nprompt: hello\n");
    put(dir.path(), "skills/bad/SKILL.md", BAD_SKILL);
    let output = aurad(dir.path()).arg("validate").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("skills/bad/SKILL.md:3:"), "{stderr}");
}
