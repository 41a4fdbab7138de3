//! Several real `aurad serve` processes on one PostgreSQL database (issue
//! #18): every scheduled fire runs exactly once in the cluster, a node
//! killed with SIGKILL has its runs recorded `interrupted` by another
//! within the lease and its share of fires taken over, API runs posted to
//! all nodes each run once, and `/v1/status` lists the nodes.
//!
//! Each node has a project directory of its own with the same files (as
//! nodes on several machines with the same checkout would), the `test`
//! model (offline), and `AURAD_DATABASE_URL` naming a database created for
//! the test. Skipped (said so) without a PostgreSQL server, except under CI.
//! `AURAD_CLUSTER_SECONDS` sets how long the fire test watches (default 60).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::cluster::{cluster, get_json, logs, logs_of, wait_all_ended};
use support::postgres::TestDatabase;
use support::serve::{http_get, http_post_json, poll};

#[test]
fn every_fire_runs_once_across_three_nodes() {
    let Some(db) = TestDatabase::create("every_fire_runs_once_across_three_nodes") else {
        return;
    };
    let seconds: u64 = std::env::var("AURAD_CLUSTER_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let agents: Vec<(String, String)> = (0..50)
        .map(|i| {
            (
                format!("tick{i:02}"),
                // `allow`: under load a run may outlast its second, and
                // this test is about fires, not overlap (tests/cluster_queue.rs).
                "model: test\nprompt: tick\nschedule: \"* * * * * *\"\non_overlap: allow\n"
                    .to_string(),
            )
        })
        .collect();
    let nodes = cluster(&db, 3, &agents);
    // Watch whole seconds from when all three are up, plus a margin for
    // the fires in flight at the end.
    let start = chrono::Utc::now() + chrono::Duration::seconds(2);
    std::thread::sleep(Duration::from_secs(seconds + 2));
    let end = chrono::Utc::now() - chrono::Duration::seconds(2);
    let window = format!(
        "scheduled_for >= '{}' AND scheduled_for < '{}'",
        start.to_rfc3339(),
        end.to_rfc3339()
    );
    // Every fire of the window has exactly one run (the unique key makes
    // two impossible; a missing one would be a fire nobody ran).
    let expected_per_agent = (end - start).num_seconds();
    let rows = db.query(&format!(
        "SELECT agent, count(*), count(DISTINCT scheduled_for) FROM runs
         WHERE \"trigger\" = 'schedule' AND {window} GROUP BY agent ORDER BY agent"
    ));
    assert_eq!(rows.len(), 50, "every agent fired\n{}", logs(&nodes));
    for row in &rows {
        let runs: i64 = row[1].as_deref().unwrap().parse().unwrap();
        let fires: i64 = row[2].as_deref().unwrap().parse().unwrap();
        assert_eq!(runs, fires, "one run per fire for {:?}", row[0]);
        assert!(
            (expected_per_agent - 1..=expected_per_agent + 1).contains(&fires),
            "agent {:?}: {fires} fires in a window of {expected_per_agent} s\n{}",
            row[0],
            logs(&nodes)
        );
    }
    // They ran, and on more than one node.
    let not_succeeded = db.count(&format!(
        "SELECT count(*) FROM runs WHERE \"trigger\" = 'schedule' AND {window} AND state <> 'succeeded'"
    ));
    let states = db.query(&format!(
        "SELECT state, count(*) FROM runs WHERE \"trigger\" = 'schedule' AND {window} GROUP BY state"
    ));
    assert_eq!(
        not_succeeded,
        0,
        "every fire succeeded: {states:?}\n{}",
        logs(&nodes)
    );
    let owners = db.count(&format!(
        "SELECT count(DISTINCT owner) FROM runs WHERE \"trigger\" = 'schedule' AND {window}"
    ));
    assert!(owners >= 2, "fires spread over the nodes ({owners} owner)");
    // /v1/status lists the three nodes, alive.
    let status = get_json(nodes[0].1.addr, "/v1/status").expect("status");
    let listed = poll(
        "/v1/status to list 3 live nodes",
        || status.to_string(),
        || {
            let status = get_json(nodes[0].1.addr, "/v1/status")?;
            let nodes = status["nodes"].as_array()?.clone();
            (nodes.iter().filter(|n| n["alive"] == true).count() == 3).then_some(nodes)
        },
    );
    for node in &listed {
        assert!(node["id"].as_str().unwrap().starts_with("pid:"));
        assert!(node["heartbeat_at"].is_string());
        assert!(node["queued"].is_u64(), "{node}");
    }
}

#[test]
fn a_killed_node_s_runs_are_interrupted_and_its_fires_taken_over() {
    let Some(db) = TestDatabase::create("a_killed_node") else {
        return;
    };
    let agents = vec![
        (
            "napper".to_string(),
            "model: test\nprompt: nap\ntools: [nap]\n".to_string(),
        ),
        (
            "ticker".to_string(),
            "model: test\nprompt: tick\nschedule: \"* * * * * *\"\n".to_string(),
        ),
    ];
    let mut nodes = cluster(&db, 3, &agents);
    // A run on node 0 that naps for 30 s.
    let (status, body) = http_post_json(nodes[0].1.addr, "/v1/agents/napper/runs", "{}").unwrap();
    assert_eq!(status, 202, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    poll(
        "the nap to start",
        || logs(&nodes),
        || {
            let events = db.count(&format!(
                "SELECT count(*) FROM events WHERE run_id = '{id}' AND kind = 'tool_call'"
            ));
            (events > 0).then_some(())
        },
    );
    let killed_owner = db.query(&format!("SELECT owner FROM runs WHERE id = '{id}'"))[0][0]
        .clone()
        .unwrap();
    // The node that runs the nap: node 0 took the POST, but when it was
    // busy with a fire of the ticker, another node took the run from the
    // shared queue.
    let victim = nodes
        .iter()
        .position(|(_, node)| killed_owner.starts_with(&format!("pid:{} ", node.pid())))
        .unwrap_or_else(|| panic!("no node owns the nap: {killed_owner}"));
    nodes[victim].1.kill_now();
    let killed_at = Instant::now();
    let killed_at_utc = chrono::Utc::now();
    let survivors: Vec<_> = (0..nodes.len()).filter(|&i| i != victim).collect();
    // Another node records it interrupted once the lease has run out.
    let survivor = nodes[survivors[0]].1.addr;
    let run = poll(
        "the killed node's run to be interrupted",
        || logs_of(&nodes, survivors.iter().copied()),
        || {
            let run = get_json(survivor, &format!("/v1/runs/{id}"))?;
            (run["state"] == "interrupted").then_some(run)
        },
    );
    let took = killed_at.elapsed();
    assert!(
        took >= Duration::from_secs(2),
        "not before the lease ran out ({took:?})"
    );
    assert!(
        run["error"].as_str().unwrap_or("").contains("interrupted") || run["error"].is_string()
    );
    // Its events end with `finished`, read from another node.
    let (status, text) = http_get(survivor, &format!("/v1/runs/{id}/events")).unwrap();
    assert_eq!(status, 200);
    assert!(text.contains("event: finished"), "{text}");
    // The ticker's fires after the kill still run, on the survivors.
    let after = (killed_at_utc + chrono::Duration::seconds(1)).to_rfc3339();
    poll(
        "fires after the kill to run on the survivors",
        || logs_of(&nodes, survivors.iter().copied()),
        || {
            let n = db.count(&format!(
                "SELECT count(*) FROM runs WHERE agent = 'ticker' AND scheduled_for > '{after}'
             AND state = 'succeeded' AND owner <> '{killed_owner}'"
            ));
            (n >= 3).then_some(())
        },
    );
    let by_dead = db.count(&format!(
        "SELECT count(*) FROM runs WHERE owner = '{killed_owner}' AND state IN ('running', 'queued')"
    ));
    assert_eq!(
        by_dead, 0,
        "nothing left running or queued by the dead node"
    );
    // /v1/status: the dead node is listed not alive.
    let status = poll("the dead node to show as not alive", String::new, || {
        let status = get_json(survivor, "/v1/status")?;
        let nodes = status["nodes"].as_array()?.clone();
        nodes
            .iter()
            .any(|n| n["id"] == killed_owner.as_str() && n["alive"] == false)
            .then_some(nodes)
    });
    assert!(status.len() >= 3);
}

#[test]
fn api_runs_posted_to_three_nodes_each_run_once() {
    let Some(db) = TestDatabase::create("api_runs_posted_to_three_nodes") else {
        return;
    };
    let agents = vec![(
        "echo".to_string(),
        "model: test\nprompt: \"{{ input }}\"\n".to_string(),
    )];
    let nodes = cluster(&db, 3, &agents);
    let total = 1000;
    let mut ids = std::collections::HashSet::new();
    for i in 0..total {
        let addr = nodes[i % 3].1.addr;
        let (status, body) = http_post_json(
            addr,
            "/v1/agents/echo/runs",
            &format!("{{\"input\": \"n{i}\"}}"),
        )
        .unwrap();
        assert_eq!(status, 202, "{body}");
        let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(ids.insert(id));
    }
    wait_all_ended(&db, &nodes);
    assert_eq!(
        db.count("SELECT count(*) FROM runs"),
        total as i64,
        "none lost, none twice"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM runs WHERE state = 'succeeded'"),
        total as i64
    );
    assert_eq!(
        db.count("SELECT count(DISTINCT input) FROM runs"),
        total as i64,
        "each input ran once"
    );
    assert_eq!(db.count("SELECT count(DISTINCT owner) FROM runs"), 3);
}

#[test]
fn a_node_with_another_definition_of_an_agent_is_warned_about() {
    let Some(db) = TestDatabase::create("another_definition") else {
        return;
    };
    let mut nodes = cluster(
        &db,
        1,
        &[(
            "greeter".to_string(),
            "model: test\nprompt: hello\n".to_string(),
        )],
    );
    nodes.extend(cluster(
        &db,
        1,
        &[(
            "greeter".to_string(),
            "model: test\nprompt: hello there\n".to_string(),
        )],
    ));
    for (i, (_, node)) in nodes.iter().enumerate() {
        poll(
            &format!("node {i} to warn about the other's greeter"),
            || node.log(),
            || {
                let log = node.log();
                (log.contains("agent `greeter` differs on node")
                    && log.contains("give every node the same files"))
                .then_some(())
            },
        );
    }
}

#[test]
fn a_run_waiting_for_approval_on_a_killed_node_is_adopted_once() {
    let Some(db) = TestDatabase::create("waiting_on_a_killed_node") else {
        return;
    };
    let agents = vec![(
        "careful".to_string(),
        "model: test\nprompt: nap\ntools: [nap]\napprove: [nap]\n".to_string(),
    )];
    let mut nodes = cluster(&db, 3, &agents);
    let (status, body) = http_post_json(nodes[0].1.addr, "/v1/agents/careful/runs", "{}").unwrap();
    assert_eq!(status, 202, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let state = |id: &str| db.query(&format!("SELECT state, owner FROM runs WHERE id = '{id}'"));
    poll(
        "the run to wait for approval",
        || logs(&nodes),
        || (state(&id)[0][0].as_deref() == Some("waiting_approval")).then_some(()),
    );
    let first_owner = state(&id)[0][1].clone().unwrap();
    nodes[0].1.kill_now();
    // A survivor adopts it (one of them), and it still waits.
    let adopted = poll(
        "a survivor to adopt the waiting run",
        || logs(&nodes[1..]),
        || {
            let row = state(&id);
            let owner = row[0][1].clone()?;
            (owner != first_owner).then_some(owner)
        },
    );
    assert_eq!(state(&id)[0][0].as_deref(), Some("waiting_approval"));
    let survivor = nodes
        .iter()
        .skip(1)
        .find(|(_, s)| s.log().contains(&id) && s.log().contains("taken over"))
        .map(|(_, s)| s.addr)
        .unwrap_or(nodes[1].1.addr);
    // Denied through a survivor's API: the model hears why and the run ends.
    let (status, body) = http_post_json(
        survivor,
        &format!("/v1/runs/{id}/approval"),
        r#"{"call_id": "call_test_1", "approve": false, "reason": "not now"}"#,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    poll(
        "the denied run to finish",
        || logs(&nodes[1..]),
        || (state(&id)[0][0].as_deref() == Some("succeeded")).then_some(()),
    );
    assert_eq!(state(&id)[0][1].as_deref(), Some(adopted.as_str()));
    // Exactly one survivor said it took the run over.
    let takers = nodes[1..]
        .iter()
        .filter(|(_, s)| {
            s.log()
                .contains("left waiting for approval by a process that is gone is taken over")
        })
        .count();
    assert_eq!(takers, 1, "{}", logs(&nodes[1..]));
}
