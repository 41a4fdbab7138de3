//! Agents as tools (`agents:`): sub-runs are real runs linked to their
//! caller, run in parallel within one turn, count in the caller's usage,
//! cost and token budget, are limited in depth, are cancelled with their
//! caller; static cycles and unknown names are located load errors. The
//! model is the scripted mock server, answering each agent by its system
//! prompt.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::time::Duration;

use aurad::store::{RunFilter, RunRecord, Store};
use aurad::types::{RunEvent, RunState};
use serde_json::{Value, json};
use support::inproc::eventually;
use support::mock_llm::{MockLlm, Recorded, Reply};
use support::project::{Project, add_settings, run_id, tool_results};
use tokio_util::sync::CancellationToken;

/// The agent a request is for: the `ROLE <name>` its system prompt starts
/// with.
fn role(request: &Recorded) -> String {
    let system = request.messages()[0]["content"].as_str().unwrap_or("");
    system
        .strip_prefix("ROLE ")
        .unwrap_or("?")
        .split_whitespace()
        .next()
        .unwrap_or("?")
        .to_string()
}

/// The tool results the request carries, in order.
fn tool_contents(request: &Recorded) -> Vec<String> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Writes `agents/<name>.yaml`: model `mock/<model>`, system `ROLE <name>`.
fn agent(root: &std::path::Path, name: &str, model: &str, extra: &str) {
    std::fs::write(
        root.join(format!("agents/{name}.yaml")),
        format!(
            "description: The {name} agent.\nmodel: mock/{model}\nsystem: ROLE {name}\nprompt: go\n{extra}"
        ),
    )
    .unwrap();
}

fn call(id: &str, agent: &str, input: &str) -> (String, String, String) {
    (
        id.into(),
        format!("agent_{agent}"),
        json!({ "input": input }).to_string(),
    )
}

async fn children(store: &Store, parent: &str) -> Vec<RunRecord> {
    let mut runs = store
        .list_runs(&RunFilter {
            parent: Some(parent.to_string()),
            ..RunFilter::default()
        })
        .await
        .unwrap();
    runs.sort_by(|a, b| a.agent.cmp(&b.agent));
    runs
}

/// A parent `a` calling `r` and `s` in its first turn, then answering with
/// what they said; `r` and `s` answer after `delay`.
fn fan_out(mock: &MockLlm, delay: Duration) {
    mock.set_responder(move |request| match role(request).as_str() {
        "a" => {
            let results = tool_contents(request);
            if results.is_empty() {
                Reply::ToolCalls(vec![call("c1", "r", "topic R"), call("c2", "s", "topic S")])
            } else {
                Reply::Text(format!("merged: {}", results.join(" + ")))
            }
        }
        "r" => Reply::Delay(delay, Box::new(Reply::Text("answer-from-r".into()))),
        "s" => Reply::Delay(delay, Box::new(Reply::Text("answer-from-s".into()))),
        other => Reply::error(400, &format!("unexpected agent {other}")),
    });
}

fn fan_out_project(mock: &MockLlm, parent_extra: &str) -> Project {
    let project = Project::new(mock, "");
    let root = project.dir.path();
    agent(root, "a", "m", &format!("agents: [r, s]\n{parent_extra}"));
    agent(root, "r", "child", "");
    agent(root, "s", "child", "");
    add_settings(
        root,
        "prices:\n  mock/m: { input_per_mtok: 1.0, output_per_mtok: 2.0 }\n  mock/child: { input_per_mtok: 10.0, output_per_mtok: 20.0 }\n",
    );
    project
}

#[tokio::test]
async fn two_sub_agents_called_in_one_turn_run_in_parallel_as_linked_runs() {
    let mock = MockLlm::start().await;
    fan_out(&mock, Duration::from_millis(400));
    let project = fan_out_project(&mock, "");
    let (outcome, events, store) = project.run("go", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Succeeded, "{outcome:?}");
    assert_eq!(
        outcome.output.as_deref(),
        Some("merged: answer-from-r + answer-from-s")
    );
    let parent = run_id(&events);
    let kids = children(&store, &parent).await;
    assert_eq!(kids.len(), 2, "{kids:?}");
    for (kid, name) in kids.iter().zip(["r", "s"]) {
        assert_eq!(kid.agent, name);
        assert_eq!(kid.state, RunState::Succeeded);
        assert_eq!(kid.trigger, aurad::types::Trigger::Agent);
        assert_eq!(kid.parent_run_id.as_deref(), Some(parent.as_str()));
        assert_eq!(kid.depth, 1);
        assert_eq!(kid.input, format!("topic {}", name.to_uppercase()));
        assert_eq!(kid.output.as_deref(), Some(&*format!("answer-from-{name}")));
        // Each sub-run has its own events.
        let kid_events = store.run_events_after(&kid.id, 0).await.unwrap();
        assert!(matches!(
            kid_events.first(),
            Some((1, RunEvent::Started { .. }))
        ));
    }
    // Parallel: each started before the other finished (each takes 400 ms).
    let started = kids.iter().map(|k| k.started_at.unwrap()).max().unwrap();
    let finished = kids.iter().map(|k| k.finished_at.unwrap()).min().unwrap();
    assert!(started < finished, "{kids:?}");
    let stored = store.get_run(&parent).await.unwrap().unwrap();
    assert_eq!(stored.parent_run_id, None);
    assert_eq!(stored.depth, 0);

    // Usage: the parent's 2 turns and each child's one, 15 tokens each.
    assert_eq!(outcome.usage.total_tokens(), 60);
    assert_eq!(stored.usage.total_tokens(), 60);
    // Cost: the parent's turns at its price, the children's at theirs.
    let parent_cost = 2.0 * (10.0 * 1.0 + 5.0 * 2.0) / 1e6;
    let child_cost = (10.0 * 10.0 + 5.0 * 20.0) / 1e6;
    let expected = parent_cost + 2.0 * child_cost;
    let cost = stored.cost_usd.unwrap();
    assert!((cost - expected).abs() < 1e-12, "{cost} != {expected}");
    assert!((outcome.cost_usd.unwrap() - expected).abs() < 1e-12);
}

#[tokio::test]
async fn the_token_budget_counts_the_sub_runs() {
    let mock = MockLlm::start().await;
    fan_out(&mock, Duration::ZERO);
    // 15 tokens for the first turn, 15 for each child: 45 >= 20, so no
    // second turn.
    let project = fan_out_project(&mock, "limits: { max_tokens_per_run: 20 }\n");
    let (outcome, events, store) = project.run("go", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::BudgetExceeded, "{outcome:?}");
    assert_eq!(outcome.usage.total_tokens(), 45);
    let parent = run_id(&events);
    let kids = children(&store, &parent).await;
    assert_eq!(kids.len(), 2);
    assert!(kids.iter().all(|k| k.state == RunState::Succeeded));
    let stored = store.get_run(&parent).await.unwrap().unwrap();
    assert_eq!(stored.state, RunState::BudgetExceeded);
    assert_eq!(stored.usage.total_tokens(), 45);
    let results = tool_results(&events);
    assert_eq!(results["c1"], ("answer-from-r".to_string(), false));
}

#[tokio::test]
async fn a_caller_at_its_token_budget_starts_no_sub_run() {
    let mock = MockLlm::start().await;
    fan_out(&mock, Duration::ZERO);
    // The first turn alone (15 tokens) reaches the budget of 10.
    let project = fan_out_project(&mock, "limits: { max_tokens_per_run: 10 }\n");
    let (outcome, events, store) = project.run("go", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::BudgetExceeded, "{outcome:?}");
    let results = tool_results(&events);
    for id in ["c1", "c2"] {
        let (text, is_error) = &results[id];
        assert!(*is_error, "{text}");
        assert!(text.contains("max_tokens_per_run (10)"), "{text}");
    }
    assert!(children(&store, &run_id(&events)).await.is_empty());
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn a_chain_deeper_than_three_gets_a_tool_error_at_depth_four() {
    let mock = MockLlm::start().await;
    let chain = ["a", "b", "c", "d", "e"];
    mock.set_responder(move |request| {
        let me = role(request);
        let results = tool_contents(request);
        let next = chain
            .iter()
            .position(|n| *n == me)
            .and_then(|i| chain.get(i + 1));
        match (next, results.first()) {
            (Some(next), None) => {
                Reply::tool_call("c1", &format!("agent_{next}"), r#"{"input":"deeper"}"#)
            }
            (_, Some(result)) => Reply::Text(format!("{me} saw: {result}")),
            (None, None) => Reply::Text("e answered".into()),
        }
    });
    let project = Project::new(&mock, "");
    let root = project.dir.path();
    for pair in chain.windows(2) {
        agent(root, pair[0], "m", &format!("agents: [{}]\n", pair[1]));
    }
    agent(root, "e", "m", "");
    let (outcome, events, store) = project.run("go", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Succeeded, "{outcome:?}");
    let mut parent = run_id(&events);
    for (depth, name) in ["b", "c", "d"].iter().enumerate() {
        let kids = children(&store, &parent).await;
        assert_eq!(kids.len(), 1, "{name}: {kids:?}");
        assert_eq!(kids[0].agent, *name);
        assert_eq!(kids[0].depth, depth as u32 + 1);
        parent = kids[0].id.clone();
    }
    // d (depth 3) may not call e: no run of e, and d saw why.
    assert!(children(&store, &parent).await.is_empty());
    let d_events: Vec<RunEvent> = store
        .run_events_after(&parent, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    let (text, is_error) = &tool_results(&d_events)["c1"];
    assert!(*is_error);
    assert!(text.contains("depth 4"), "{text}");
    assert!(text.contains("limit of 3"), "{text}");
    let all = store.list_runs(&RunFilter::default()).await.unwrap();
    assert!(all.iter().all(|r| r.agent != "e"), "{all:?}");
    assert!(
        outcome
            .output
            .unwrap()
            .starts_with("a saw: b saw: c saw: d saw: ")
    );
}

#[tokio::test]
async fn cancelling_the_parent_cancels_its_sub_runs() {
    let mock = MockLlm::start().await;
    mock.set_responder(|request| match role(request).as_str() {
        "a" => Reply::tool_call("c1", "agent_r", r#"{"input":"wait"}"#),
        _ => Reply::Hang,
    });
    let project = Project::new(&mock, "");
    let root = project.dir.path();
    agent(root, "a", "m", "agents: [r]\n");
    agent(root, "r", "m", "");
    let store = Store::open(&root.join("aurad.db")).unwrap();
    let cancel = CancellationToken::new();
    let root_path = root.to_path_buf();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { support::project::run_agent(&root_path, "go", cancel).await }
    });
    let child = eventually("the sub-run is running", Duration::from_secs(10), || {
        let store = store.clone();
        async move {
            store
                .list_runs(&RunFilter::default())
                .await
                .unwrap()
                .into_iter()
                .find(|r| r.agent == "r" && r.state == RunState::Running)
        }
    })
    .await;
    // Its model call is on the way: cancel the parent then.
    mock.wait_for_requests(2, Duration::from_secs(10)).await;
    cancel.cancel();
    let (outcome, _, _) = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the parent stops")
        .unwrap();
    assert_eq!(outcome.state, RunState::Cancelled);
    let child = store.get_run(&child.id).await.unwrap().unwrap();
    assert_eq!(child.state, RunState::Cancelled, "{child:?}");
}

fn load_errors(root: &std::path::Path) -> (Vec<String>, Vec<String>) {
    let loaded = aurad::config::load(root, &|_| None);
    let (snapshot, diags) = aurad::registry::build(loaded, &|_| None);
    let errors = diags
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    (errors, snapshot.project.agents.keys().cloned().collect())
}

#[test]
fn a_static_cycle_and_an_unknown_name_are_located_load_errors() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("agents")).unwrap();
    let write = |name: &str, text: &str| std::fs::write(root.join(name), text).unwrap();
    write(
        "agents/a.yaml",
        "model: test\nprompt: go\nagents: [ok, b]\n",
    );
    write("agents/b.yaml", "model: test\nprompt: go\nagents:\n  - a\n");
    write(
        "agents/self.yaml",
        "model: test\nprompt: go\nagents: [self]\n",
    );
    write("agents/c.yaml", "model: test\nprompt: go\nagents: [nope]\n");
    write("agents/d.yaml", "model: test\nprompt: go\nagents: [a]\n");
    write("agents/ok.yaml", "model: test\nprompt: go\n");
    write(
        "agents/caller.yaml",
        "model: test\nprompt: go\nagents: [ok]\n",
    );
    let (errors, loaded) = load_errors(root);
    let has = |needle: &str| errors.iter().any(|e| e.contains(needle));
    assert!(
        has("agents/a.yaml:3:14: agents: calling `b` makes a cycle a -> b -> a"),
        "{errors:#?}"
    );
    assert!(
        has("agents/b.yaml:4:5: agents: calling `a` makes a cycle b -> a -> b"),
        "{errors:#?}"
    );
    assert!(
        has("agents/self.yaml:3:10: agents: calling `self` makes a cycle self -> self"),
        "{errors:#?}"
    );
    assert!(
        has("agents/c.yaml:3:10: agents: no agent named `nope` is loaded"),
        "{errors:#?}"
    );
    assert!(
        has("agents/d.yaml:3:10: agents: `a` is left out because of its errors"),
        "{errors:#?}"
    );
    assert_eq!(errors.len(), 5, "{errors:#?}");
    assert_eq!(loaded, ["caller", "ok"]);

    let output = support::serve::aurad(root)
        .arg("validate")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("agents/c.yaml:3:10"), "{text}");
}

#[test]
fn a_bad_agents_entry_is_a_located_parse_error() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("agents")).unwrap();
    std::fs::write(
        root.join("agents/a.yaml"),
        "model: test\nprompt: go\nagents: [Bad Name, x, x]\n",
    )
    .unwrap();
    std::fs::write(root.join("agents/x.yaml"), "model: test\nprompt: go\n").unwrap();
    let (errors, loaded) = load_errors(root);
    assert!(
        errors
            .iter()
            .any(|e| e
                .starts_with("agents/a.yaml:3:10: agents[0]: \"Bad Name\" is not an agent name")),
        "{errors:#?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("agents[2]: \"x\" is listed twice")),
        "{errors:#?}"
    );
    assert_eq!(loaded, ["x"]);
}

/// The sub-agent's tool as the model sees it: its description and input.
#[tokio::test]
async fn the_tool_offered_carries_the_sub_agents_description() {
    let mock = MockLlm::start().await;
    mock.set_responder(|_| Reply::Text("done".into()));
    let project = Project::new(&mock, "");
    let root = project.dir.path();
    agent(root, "a", "m", "agents: [research-bot]\n");
    agent(root, "research-bot", "m", "");
    let (outcome, _, _) = project.run("go", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Succeeded);
    let request = &mock.requests()[0];
    let tools: &Vec<Value> = request.body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    let function = &tools[0]["function"];
    assert_eq!(function["name"], "agent_research-bot");
    assert_eq!(function["description"], "The research-bot agent.");
    assert_eq!(function["parameters"]["required"], json!(["input"]));
}

/// Under `aurad serve` with one run slot, the parent holds it and its
/// sub-runs still run (they take no slot); the API shows the link.
#[tokio::test]
async fn under_serve_sub_runs_take_no_slot_and_the_api_shows_the_link() {
    let mock = MockLlm::start().await;
    fan_out(&mock, Duration::ZERO);
    let project = fan_out_project(&mock, "");
    add_settings(project.dir.path(), "max_concurrent_runs: 1\n");
    let api = support::daemon::Api::start(project.dir.path(), &[]).await;
    let (status, run) = api
        .post_json("/v1/agents/a/runs", &json!({ "input": "go" }))
        .await;
    assert_eq!(status, 202, "{run}");
    let parent = run["id"].as_str().unwrap().to_string();
    let done = api.wait_run(&parent).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert_eq!(done["parent_run_id"], Value::Null);
    assert_eq!(done["output"], "merged: answer-from-r + answer-from-s");
    let (status, listed) = api.get_json(&format!("/v1/runs?parent={parent}")).await;
    assert_eq!(status, 200, "{listed}");
    let kids = listed["runs"].as_array().unwrap();
    assert_eq!(kids.len(), 2, "{listed}");
    for kid in kids {
        assert_eq!(kid["parent_run_id"], parent.as_str());
        assert_eq!(kid["depth"], 1);
        let (_, shown) = api
            .get_json(&format!("/v1/runs/{}", kid["id"].as_str().unwrap()))
            .await;
        assert_eq!(shown["parent_run_id"], parent.as_str());
        assert_eq!(shown["trigger"], "agent");
    }
    api.stop().await;
}

/// `aurad run` (one shot, the `test` model) runs the sub-agents; `aurad
/// logs` shows them nested under the parent and `aurad runs` marks them.
#[test]
fn aurad_run_runs_sub_agents_and_logs_shows_them_nested() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("agents")).unwrap();
    let write = |name: &str, text: &str| std::fs::write(root.join(name), text).unwrap();
    write(
        "agents/lead.yaml",
        "description: Plans.\nmodel: test\nprompt: plan\nagents: [helper]\n",
    );
    write(
        "agents/helper.yaml",
        "description: Helps.\nmodel: test\nprompt: help\nagents: [leaf]\n",
    );
    write(
        "agents/leaf.yaml",
        "description: Leaf.\nmodel: test\nprompt: leaf\n",
    );
    let run = support::serve::aurad(root)
        .args(["run", "lead"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout).to_string();
    assert!(
        run.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.contains("agent_helper"), "{out}");
    let listed = support::serve::aurad(root)
        .args(["runs", "--json"])
        .output()
        .unwrap();
    let runs: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(runs.len(), 3, "{runs:?}");
    let id_of = |agent: &str| {
        runs.iter().find(|r| r["agent"] == agent).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (lead, helper, leaf) = (id_of("lead"), id_of("helper"), id_of("leaf"));
    let logs = support::serve::aurad(root)
        .args(["logs", &lead])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&logs.stdout).to_string();
    assert!(logs.status.success(), "{text}");
    let helper_line = text
        .lines()
        .find(|l| l.contains(&helper))
        .unwrap_or_else(|| panic!("{text}"));
    let leaf_line = text
        .lines()
        .find(|l| l.contains(&leaf))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        helper_line.starts_with("  ↳ ") && helper_line.contains("helper  succeeded"),
        "{text}"
    );
    assert!(
        leaf_line.starts_with("    ↳ ") && leaf_line.contains("leaf  succeeded"),
        "{text}"
    );
    let table = support::serve::aurad(root).arg("runs").output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout).to_string();
    let marked = table.lines().filter(|l| l.contains("↳ ")).count();
    assert_eq!(marked, 2, "{table}");
}
