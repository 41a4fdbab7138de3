//! The nodes table on a real server: heartbeats register nodes, `nodes`
//! lists each with its running runs and how many runs wait queued under it,
//! and a node that stopped cleanly is no longer alive.

use std::time::Duration;

use super::runs_tests::{block, new_run, node};
use super::testing::TestDb;
use crate::store::{NewRun, NodeInfo};
use crate::types::RunState;

fn info(id: &str) -> NodeInfo {
    NodeInfo {
        id: id.into(),
        host: "box".into(),
        pid: 7,
        version: "test".into(),
        agents: [("a".to_string(), "hash".to_string())].into(),
    }
}

#[test]
fn nodes_are_listed_with_their_running_and_queued_runs() {
    let Some(db) = TestDb::create("pg_nodes_listed") else {
        return;
    };
    let store = node(&db);
    block(store.heartbeat(info("node:A"))).unwrap();
    block(store.heartbeat(info("node:B"))).unwrap();
    let running = NewRun {
        owner: "node:A".into(),
        ..new_run("a")
    };
    block(store.claim_run(running.clone())).unwrap();
    for _ in 0..2 {
        let queued = NewRun {
            owner: "node:A".into(),
            state: RunState::Queued,
            ..new_run("a")
        };
        block(store.claim_run(queued)).unwrap();
    }
    let lease = Duration::from_secs(15);
    let nodes = block(store.nodes(lease)).unwrap();
    assert_eq!(nodes.len(), 2);
    let a = nodes.iter().find(|n| n.id == "node:A").unwrap();
    assert!(a.alive);
    assert_eq!(a.running, vec![running.id.clone()]);
    assert_eq!(a.queued, 2);
    assert_eq!(a.agents.get("a").map(String::as_str), Some("hash"));
    let b = nodes.iter().find(|n| n.id == "node:B").unwrap();
    assert!(b.alive && b.running.is_empty() && b.queued == 0);

    block(store.node_stopped("node:B".into())).unwrap();
    let live = block(store.live_nodes(lease)).unwrap();
    assert!(
        live.contains("node:A") && !live.contains("node:B"),
        "{live:?}"
    );
    let b = block(store.nodes(lease))
        .unwrap()
        .into_iter()
        .find(|n| n.id == "node:B")
        .unwrap();
    assert!(!b.alive && b.stopped_at.is_some());
}
