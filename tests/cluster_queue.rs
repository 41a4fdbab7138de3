//! The run queue the nodes of a PostgreSQL cluster share (issue #18): runs
//! accepted by a node with no free slot run on nodes with free ones, each
//! once, and the accepting node's event stream (and `aurad logs -f` in its
//! directory) follows them there; a run
//! is cancelled through any node, even when the node running it missed the
//! request's signal; `on_overlap: skip` holds across nodes.
//! Real `aurad serve` processes on a database created for each test;
//! skipped (said so) without a PostgreSQL server, except under CI.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;
use support::cluster::{cluster, cluster_with, get_json, logs, wait_all_ended};
use support::postgres::TestDatabase;
use support::serve::{aurad, http_post_json, poll, show};

fn post_run(addr: SocketAddr, agent: &str, input: &str) -> String {
    let (status, body) = http_post_json(
        addr,
        &format!("/v1/agents/{agent}/runs"),
        &format!("{{\"input\": \"{input}\"}}"),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Reads a run's event stream from `addr` to its end (the server closes
/// it after `finished`), within 60 s.
fn read_events(addr: SocketAddr, id: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET /v1/runs/{id}/events HTTP/1.1\r\nHost: {addr}\r\n{}Accept: text/event-stream\r\nConnection: close\r\n\r\n",
        support::serve::authorization(addr)
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

#[test]
fn runs_queued_on_a_busy_node_run_on_idle_nodes() {
    let Some(db) = TestDatabase::create("runs_queued_on_a_busy_node") else {
        return;
    };
    let agents = vec![(
        "dozer".to_string(),
        "model: test\nprompt: doze\ntools: [doze]\n".to_string(),
    )];
    // Node 0 has one slot; nodes 1 and 2 have four each.
    let nodes = cluster_with(&db, &[1, 4, 4], &agents);
    let busy = nodes[0].1.addr;
    let busy_owner = {
        let first = post_run(busy, "dozer", "first");
        poll(
            "the first run to start",
            || logs(&nodes),
            || {
                let run = get_json(busy, &format!("/v1/runs/{first}"))?;
                (run["state"] == "running").then(|| run["owner"].as_str().unwrap().to_string())
            },
        )
    };
    // Seven more to the busy node: it queues them, the others take them.
    let ids: Vec<String> = (0..7)
        .map(|i| post_run(busy, "dozer", &format!("n{i}")))
        .collect();
    // The busy node's stream of its last one follows it wherever it runs,
    // and so does `aurad logs -f` in the busy node's directory.
    let last = ids.last().unwrap().clone();
    let streamed = {
        let last = last.clone();
        std::thread::spawn(move || read_events(busy, &last))
    };
    let followed = {
        let mut logs = aurad(nodes[0].0.path());
        logs.args(["logs", "-f", &last])
            .env("AURAD_DATABASE_URL", &db.url)
            .stdin(std::process::Stdio::null());
        std::thread::spawn(move || logs.output().unwrap())
    };
    wait_all_ended(&db, &nodes);
    assert_eq!(
        db.count("SELECT count(*) FROM runs"),
        8,
        "none lost, none twice"
    );
    assert_eq!(
        db.count("SELECT count(*) FROM runs WHERE state = 'succeeded'"),
        8,
        "{}",
        logs(&nodes)
    );
    // Each ran once: one `started`-to-`finished` history per run.
    assert_eq!(
        db.count("SELECT count(*) FROM events WHERE kind = 'finished'"),
        8
    );
    let elsewhere = db.count(&format!(
        "SELECT count(*) FROM runs WHERE owner <> '{busy_owner}'"
    ));
    assert!(
        elsewhere >= 5,
        "only {elsewhere} of the 7 queued runs ran on the idle nodes\n{}",
        logs(&nodes)
    );
    assert!(
        db.count("SELECT count(DISTINCT owner) FROM runs") >= 2,
        "{}",
        logs(&nodes)
    );
    let text = streamed.join().unwrap();
    assert!(text.contains("event: finished"), "{text}");
    assert!(text.contains("awake"), "the tool's result streamed: {text}");
    let out = followed.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        support::serve::text(&out.stdout).contains("awake"),
        "{}",
        show(&out)
    );
}

type Nodes = Vec<(tempfile::TempDir, support::serve::Serve)>;

/// `count` nodes loading `napper`, and the id of a run of it posted to the
/// first node, once its 30 s nap has started there.
fn napping_on_first_node(db: &TestDatabase, count: usize) -> (Nodes, String) {
    let agents = vec![(
        "napper".to_string(),
        "model: test\nprompt: nap\ntools: [nap]\n".to_string(),
    )];
    let nodes = cluster(db, count, &agents);
    let id = post_run(nodes[0].1.addr, "napper", "nap");
    poll(
        "the nap to start",
        || logs(&nodes),
        || {
            let n = db.count(&format!(
                "SELECT count(*) FROM events WHERE run_id = '{id}' AND kind = 'tool_call'"
            ));
            (n > 0).then_some(())
        },
    );
    (nodes, id)
}

/// Waits until `nodes[seen_from]` shows run `id` cancelled, which the
/// first node (running it) did because another node was asked to.
fn cancelled_by_first_node(nodes: &Nodes, seen_from: usize, id: &str) {
    let run = poll(
        "the run to be cancelled by the node running it",
        || logs(nodes),
        || {
            let run = get_json(nodes[seen_from].1.addr, &format!("/v1/runs/{id}"))?;
            (run["state"] == "cancelled").then_some(run)
        },
    );
    assert!(run["finished_at"].is_string());
    assert!(
        nodes[0].1.log().contains("another node was asked to"),
        "{}",
        logs(nodes)
    );
}

#[test]
fn a_run_on_one_node_is_cancelled_through_another() {
    let Some(db) = TestDatabase::create("cancelled_through_another") else {
        return;
    };
    let (nodes, id) = napping_on_first_node(&db, 2);
    let (status, body) =
        http_post_json(nodes[1].1.addr, &format!("/v1/runs/{id}/cancel"), "{}").unwrap();
    assert_eq!(status, 202, "{body}");
    cancelled_by_first_node(&nodes, 1, &id);
}

/// A cancel request whose notification the node running the run never got
/// (its listening connection was down, or it fell behind) still stops the
/// run: the request is stored with the run and the node looks for it.
#[test]
fn a_cancel_request_whose_signal_was_lost_still_stops_the_run() {
    let Some(db) = TestDatabase::create("cancel_signal_lost") else {
        return;
    };
    let (nodes, id) = napping_on_first_node(&db, 1);
    // What another node's request leaves when its notification is lost:
    // the request with the run, and no signal (the nap lasts 30 s).
    db.query(&format!(
        "UPDATE runs SET cancel_requested_at = now() WHERE id = '{id}'"
    ));
    cancelled_by_first_node(&nodes, 0, &id);
}

#[test]
fn a_queued_run_of_a_busy_node_is_cancelled_through_another() {
    let Some(db) = TestDatabase::create("queued_cancelled_through_another") else {
        return;
    };
    let napper = (
        "napper".to_string(),
        "model: test\nprompt: nap\ntools: [nap]\n".to_string(),
    );
    // A node with one slot: its second run waits queued. The other node
    // did not load `napper`, so it never takes that run over.
    let busy = cluster_with(&db, &[1], &[napper]);
    let other = cluster_with(
        &db,
        &[1],
        &[(
            "greeter".to_string(),
            "model: test\nprompt: hi\n".to_string(),
        )],
    );
    let addr = busy[0].1.addr;
    let first = post_run(addr, "napper", "first");
    let second = post_run(addr, "napper", "second");
    let queued = get_json(addr, &format!("/v1/runs/{second}")).unwrap();
    assert_eq!(queued["state"], "queued", "{queued}");
    let through = other[0].1.addr;
    for id in [&second, &first] {
        let (status, body) =
            http_post_json(through, &format!("/v1/runs/{id}/cancel"), "{}").unwrap();
        assert_eq!(status, 202, "{body}");
    }
    for id in [&first, &second] {
        poll(
            "both runs to end cancelled",
            || format!("{}{}", logs(&busy), logs(&other)),
            || {
                let run = get_json(addr, &format!("/v1/runs/{id}"))?;
                (run["state"] == "cancelled").then_some(())
            },
        );
    }
    // The queued one never started, even once the busy node's slot freed.
    let freed = post_run(addr, "napper", "after");
    poll(
        "the busy node to run again",
        || logs(&busy),
        || {
            let run = get_json(addr, &format!("/v1/runs/{freed}"))?;
            (run["state"] == "running").then_some(())
        },
    );
    let run = get_json(addr, &format!("/v1/runs/{second}")).unwrap();
    assert_eq!(run["state"], "cancelled");
    assert!(run["started_at"].is_null(), "{run}");
}

#[test]
fn on_overlap_skip_holds_across_nodes() {
    let Some(db) = TestDatabase::create("on_overlap_skip_across_nodes") else {
        return;
    };
    // Fires every second; each run dozes 2 s: every other fire or so finds
    // the previous run in flight, often on another node.
    let agents = vec![(
        "sleepy".to_string(),
        "model: test\nprompt: doze\ntools: [doze]\nschedule: \"* * * * * *\"\non_overlap: skip\n"
            .to_string(),
    )];
    let nodes = cluster(&db, 3, &agents);
    poll(
        "eight fires to be skipped",
        || logs(&nodes),
        || {
            let n = db.count("SELECT count(*) FROM runs WHERE state = 'skipped'");
            (n >= 8).then_some(())
        },
    );
    drop(nodes);
    // No two runs that ran overlapped in time, wherever they ran.
    let overlapping = db.count(
        "SELECT count(*) FROM runs a JOIN runs b ON a.id < b.id
         WHERE a.started_at IS NOT NULL AND b.started_at IS NOT NULL
           AND a.started_at < COALESCE(b.finished_at, 'infinity')
           AND b.started_at < COALESCE(a.finished_at, 'infinity')",
    );
    assert_eq!(overlapping, 0, "runs of a skip agent overlapped");
    assert!(db.count("SELECT count(*) FROM runs WHERE state = 'skipped'") > 0);
    // Some skip was for a run on another node.
    assert!(
        db.count("SELECT count(*) FROM runs WHERE state = 'skipped' AND error LIKE '%(on node %'")
            > 0,
        "no fire was skipped for another node's run"
    );
}
