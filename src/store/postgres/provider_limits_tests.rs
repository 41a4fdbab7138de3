//! The providers' shared limits on a real server, through two handles on
//! one database as two nodes would hold them: request slots capped across
//! both, a dead node's slot freed, reservations spaced (the first one
//! included), and a pause honoured by every reservation after it.

use std::time::Duration;

use super::runs_tests::{block, execute, node};
use super::testing::TestDb;
use crate::store::NodeInfo;
use crate::store::provider_limits::SlotHolder;

fn holder(name: &str, node: &str) -> SlotHolder {
    SlotHolder {
        holder: name.into(),
        node: node.into(),
        lease: Duration::from_secs(3),
    }
}

fn info(id: &str) -> NodeInfo {
    NodeInfo {
        id: id.into(),
        host: "box".into(),
        pid: 7,
        version: "test".into(),
        agents: Default::default(),
    }
}

#[test]
fn slots_are_capped_across_nodes_and_a_dead_node_s_are_freed() {
    let Some(db) = TestDb::create("pg_provider_slots") else {
        return;
    };
    let (a, b) = (node(&db), node(&db));
    block(a.heartbeat(info("node:A"))).unwrap();
    block(b.heartbeat(info("node:B"))).unwrap();
    let take = |store: &super::Postgres, name: &str, node: &str| {
        block(store.take_provider_slot("p".into(), 2, holder(name, node))).unwrap()
    };
    assert!(take(&a, "a1", "node:A"));
    assert!(take(&b, "b1", "node:B"));
    assert!(!take(&a, "a2", "node:A"), "a third slot of two");
    assert!(!take(&b, "b2", "node:B"), "a third slot of two");
    // Another provider has slots of its own.
    assert!(block(b.take_provider_slot("q".into(), 1, holder("b3", "node:B"))).unwrap());
    // A given-back slot is taken by the other node.
    block(a.release_provider_slot("p".into(), "a1".into())).unwrap();
    assert!(take(&b, "b2", "node:B"));
    assert!(!take(&a, "a2", "node:A"));
    // Node B's heartbeat lapses past the lease: both its slots are free.
    execute(
        &a,
        "UPDATE nodes SET heartbeat_at = now() - interval '1 minute' WHERE id = 'node:B'",
    );
    assert!(take(&a, "a2", "node:A"));
    assert!(take(&a, "a3", "node:A"));
    assert!(!take(&a, "a4", "node:A"));
    // A stopped node's slot is free at once.
    block(a.node_stopped("node:A".into())).unwrap();
    assert!(take(&b, "b4", "node:B"));
    // A process with no node row (a one-shot `aurad run`) keeps its slot
    // until the orphan time passes.
    assert!(block(a.take_provider_slot("r".into(), 1, holder("o1", "pid:1"))).unwrap());
    assert!(!block(b.take_provider_slot("r".into(), 1, holder("b5", "node:B"))).unwrap());
    execute(
        &a,
        "UPDATE provider_slots SET taken_at = now() - interval '11 minutes' WHERE holder = 'o1'",
    );
    assert!(block(b.take_provider_slot("r".into(), 1, holder("b5", "node:B"))).unwrap());
}

#[test]
fn reservations_are_spaced_across_nodes_from_the_first() {
    let Some(db) = TestDb::create("pg_provider_rates") else {
        return;
    };
    let (a, b) = (node(&db), node(&db));
    let interval = Duration::from_millis(100);
    // Twenty reservations at once, half through each node.
    let waits: Vec<Duration> = block(futures::future::join_all((0..20).map(|i| {
        let store = if i % 2 == 0 { &a } else { &b };
        store.reserve_provider_request("p".into(), Some(interval), None)
    })))
    .into_iter()
    .map(Result::unwrap)
    .collect();
    let mut sorted = waits.clone();
    sorted.sort();
    // Each start is one interval after the one before: the waits, read at
    // slightly different times, are one interval apart give or take the
    // time between the statements.
    assert!(sorted[0] < Duration::from_millis(50), "{waits:?}");
    for pair in sorted.windows(2) {
        let gap = pair[1].saturating_sub(pair[0]);
        assert!(
            gap > Duration::from_millis(60) && gap < Duration::from_millis(140),
            "{waits:?}"
        );
    }
    let last = sorted[19].as_secs_f64();
    assert!((1.7..2.0).contains(&last), "{waits:?}");
}

#[test]
fn a_pause_holds_every_node_and_tokens_are_settled() {
    let Some(db) = TestDb::create("pg_provider_pause") else {
        return;
    };
    let (a, b) = (node(&db), node(&db));
    // A pause before any reservation makes the row.
    block(a.pause_provider("p".into(), Duration::from_secs(2))).unwrap();
    let wait = block(b.reserve_provider_request("p".into(), None, None)).unwrap();
    assert!(
        wait > Duration::from_millis(1_800) && wait <= Duration::from_secs(2),
        "{wait:?}"
    );
    let wait = block(b.reserve_provider_request("p".into(), Some(Duration::from_millis(10)), None))
        .unwrap();
    assert!(wait > Duration::from_millis(1_800), "{wait:?}");
    // Tokens: 100 charged at 10 ms each from now; the next caller waits
    // the second they take, and 50 given back shorten it by half.
    let per = Duration::from_millis(10);
    let first = block(a.reserve_provider_request("t".into(), None, Some((100, per)))).unwrap();
    assert!(first < Duration::from_millis(50), "{first:?}");
    block(a.settle_provider_tokens("t".into(), -50, per)).unwrap();
    let next = block(b.reserve_provider_request("t".into(), None, Some((10, per)))).unwrap();
    assert!(
        next > Duration::from_millis(400) && next <= Duration::from_millis(500),
        "{next:?}"
    );
}
