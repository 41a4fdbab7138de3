//! The cluster bench's shared-queue setup (issue #18): PostgreSQL, three
//! nodes, node 0 with `max_concurrent_runs: 1` held the whole time by a
//! long run (an agent whose mock LLM reply is delayed for minutes), nodes
//! 1 and 2 with [`FREE_SLOTS`] each. Every run is posted to node 0, which
//! claims it `queued`; the idle nodes take it from the shared queue.
//!
//! - Paced: N runs at a steady rate; per run, POST sent -> stored
//!   `started_at` (the start recorded by the node that took it), which
//!   node ran it, and the exactly-once check.
//! - Burst: N runs from a few client threads as fast as they can; runs/s
//!   from the first POST to the last stored `finished_at`, the same
//!   latencies (now mostly time waiting in the queue), nodes and check.
//!
//! Afterwards the long run must still be running (else node 0 had a free
//! slot for part of the time: said so in the table), and is cancelled.
//! A run that never ends is reported, not waited for past the deadline.
//! Depends on `cluster/nodes.rs`, `cluster/posting.rs`, `cluster/db.rs`,
//! the test support and `stats`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use chrono::Utc;

use crate::db::{Db, RunRow};
use crate::nodes::{Cluster, NodeDir, load_average};
use crate::posting::{
    WORKER_AGENTS, exactly_once, ms_between, post_all, post_errors, start_latencies,
};
use crate::stats::percentile;
use crate::support::mock_llm::{MockLlm, Reply};
use crate::support::postgres::TestDatabase;
use crate::support::serve::{http_get, http_post_json};

/// `max_concurrent_runs` of nodes 1 and 2 (node 0 has 1).
pub const FREE_SLOTS: usize = 8;
/// The long run's input: the mock delays its reply by [`HOLD`].
const HOLD_MARKER: &str = "hold-the-only-slot";
/// How long the long run waits for its reply: longer than both phases,
/// shorter than the providers' idle timeout (300 s).
const HOLD: Duration = Duration::from_secs(280);
/// How long the runs of a phase may take to be final, beyond one
/// millisecond per run; past it the phase is reported as not settled.
const SETTLE: Duration = Duration::from_secs(60);

pub struct QueueParams {
    pub runs: usize,
    pub rate: usize,
    pub paced_threads: usize,
    pub burst_threads: usize,
}

/// One phase's runs as stored.
pub struct QueueRuns {
    pub n: usize,
    /// POST sent -> `started_at`, sorted, in ms.
    pub latencies: Vec<f64>,
    /// Runs started per node (index = node; 0 is the busy one), and runs
    /// whose owner is none of them.
    pub per_node: Vec<usize>,
    pub other_owner: usize,
    /// Empty when each run ran exactly once and all were final in time.
    pub problems: Vec<String>,
    /// First POST -> last `finished_at`, in s.
    pub wall: f64,
}

pub struct QueueFigures {
    pub load_before: String,
    pub load_after: String,
    pub paced: QueueRuns,
    pub burst: QueueRuns,
    /// The long run's state after both phases (`running` when node 0's
    /// slot was held throughout).
    pub holder_after: String,
}

fn agents() -> Vec<(String, String)> {
    let mut agents: Vec<(String, String)> = (0..WORKER_AGENTS)
        .map(|i| {
            (
                format!("w{i:02}"),
                "model: mock0/m\nprompt: Say ok.\n".to_string(),
            )
        })
        .collect();
    agents.push((
        "holder".to_string(),
        "model: mock0/m\nprompt: Hold the slot.\n".to_string(),
    ));
    agents
}

pub fn bench(params: &QueueParams, mock: &MockLlm, database: &TestDatabase) -> QueueFigures {
    let load_before = load_average();
    eprintln!("== shared queue, PostgreSQL 3 nodes: load average before {load_before}");
    mock.set_responder(|request| {
        let text = Reply::Text("ok, done.".into());
        if request.body.to_string().contains(HOLD_MARKER) {
            Reply::Delay(HOLD, Box::new(text))
        } else {
            text
        }
    });
    let agents = agents();
    let dirs: Vec<NodeDir> = [1, FREE_SLOTS, FREE_SLOTS]
        .into_iter()
        .map(|slots| {
            let mut dir = NodeDir::new();
            dir.configure(mock, true, slots, &agents);
            dir
        })
        .collect();
    let cluster = Cluster::start(&dirs, Some(database));
    let db = Db::postgres(&database.url);
    let busy = cluster.serves[0].addr;
    let holder = hold_the_slot(&cluster, busy);

    let paced = {
        let (n, rate) = (params.runs, params.rate);
        eprintln!("shared queue, paced: {n} runs at {rate}/s to node 0");
        let due = move |i: usize| Duration::from_secs_f64(i as f64 / rate as f64);
        phase(
            &cluster,
            mock,
            &db,
            "qp",
            n,
            params.paced_threads,
            Some(&due),
        )
    };
    let burst = {
        let n = params.runs;
        eprintln!(
            "shared queue, burst: {n} runs from {} client threads to node 0",
            params.burst_threads
        );
        phase(&cluster, mock, &db, "qb", n, params.burst_threads, None)
    };
    let holder_after = run_state(busy, &holder);
    // Let node 0's slot go: cancelled, the long run ends at once.
    let _ = http_post_json(busy, &format!("/v1/runs/{holder}/cancel"), "{}");
    wait_until(
        &cluster,
        "the long run to end",
        Duration::from_secs(30),
        || !matches!(run_state(busy, &holder).as_str(), "running" | "queued"),
    );
    cluster.stop();
    mock.set_responder(|_| Reply::Text("ok, done.".into()));
    let load_after = load_average();
    eprintln!("== shared queue: load average after {load_after}");
    QueueFigures {
        load_before,
        load_after,
        paced,
        burst,
        holder_after,
    }
}

/// Posts the long run to node 0 and waits until it runs there; its id.
fn hold_the_slot(cluster: &Cluster, busy: SocketAddr) -> String {
    let body = serde_json::json!({ "input": format!("{HOLD_MARKER}: take your time.") });
    let (status, answer) =
        http_post_json(busy, "/v1/agents/holder/runs", &body.to_string()).expect("POST holder");
    assert_eq!(status, 202, "POST the long run: {answer}");
    let id = serde_json::from_str::<serde_json::Value>(&answer).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_until(
        cluster,
        "the long run to run",
        Duration::from_secs(30),
        || run_state(busy, &id) == "running",
    );
    id
}

fn run_state(addr: SocketAddr, id: &str) -> String {
    match http_get(addr, &format!("/v1/runs/{id}")) {
        Some((200, body)) => serde_json::from_str::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["state"].as_str().map(str::to_string))
            .unwrap_or_else(|| format!("? ({body})")),
        Some((status, body)) => format!("? (status {status}: {body})"),
        None => "? (no answer)".to_string(),
    }
}

fn wait_until(cluster: &Cluster, what: &str, deadline: Duration, done: impl Fn() -> bool) {
    let until = Instant::now() + deadline;
    while !done() {
        if Instant::now() > until {
            panic!("{what}: not after {deadline:?}\n{}", cluster.logs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Posts `n` runs of `phase` to node 0 and reads them back once final (or
/// once the deadline passed: then the runs not final are a problem).
fn phase(
    cluster: &Cluster,
    mock: &MockLlm,
    db: &Db,
    phase: &str,
    n: usize,
    threads: usize,
    due: Option<&(dyn Fn(usize) -> Duration + Sync)>,
) -> QueueRuns {
    mock.forget_requests();
    let first_post = Utc::now();
    let posted = post_all(&cluster.addrs()[..1], phase, n, threads, due);
    let accepted = (n - post_errors(&posted).len()) as i64;
    let marker = format!("{phase}-");
    let deadline = SETTLE + Duration::from_millis(n as u64);
    let until = Instant::now() + deadline;
    let mut final_runs = db.finished(&marker);
    while final_runs < accepted && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        final_runs = db.finished(&marker);
    }
    let rows = db.runs(&marker);
    let mut problems = exactly_once(phase, n, &posted, &rows, mock);
    if final_runs < accepted {
        problems.push(format!(
            "{} of {accepted} runs not final after {deadline:?} ({})",
            accepted - final_runs,
            states(&rows)
        ));
        eprintln!("{}\n{}", problems.join("\n"), cluster.logs());
    }
    let (latencies, never_started) = start_latencies(phase, &posted, &rows);
    if never_started > 0 {
        problems.push(format!("{never_started} runs never started"));
    }
    let mut per_node = vec![0; cluster.serves.len()];
    let mut other_owner = 0;
    for row in rows.iter().filter(|r| r.started_at.is_some()) {
        match row.owner.as_deref().and_then(|o| cluster.node_of(o)) {
            Some(node) => per_node[node] += 1,
            None => other_owner += 1,
        }
    }
    let last_finish = rows.iter().filter_map(|r| r.finished_at).max();
    QueueRuns {
        n,
        latencies,
        per_node,
        other_owner,
        problems,
        wall: last_finish.map_or(f64::NAN, |t| ms_between(first_post, t) / 1000.0),
    }
}

/// How many of `rows` are in each state, e.g. `queued 3, succeeded 197`.
fn states(rows: &[RunRow]) -> String {
    let mut counts = std::collections::BTreeMap::new();
    for row in rows {
        *counts.entry(row.state.as_str()).or_insert(0) += 1;
    }
    counts
        .iter()
        .map(|(state, n)| format!("{state} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------
// Output

pub fn render(params: &QueueParams, figures: &Result<QueueFigures, String>) -> String {
    let f = match figures {
        Ok(f) => f,
        Err(why) => return format!("Shared queue (PostgreSQL, 3 nodes): {why}\n"),
    };
    let mut out = format!(
        "| shared queue: PostgreSQL, 3 nodes; node 0: 1 slot, held by a long run; nodes 1, 2: {FREE_SLOTS} slots; every POST to node 0 | paced: {} runs at {}/s | burst: {} runs from {} client threads |\n|---|---|---|\n",
        params.runs, params.rate, params.runs, params.burst_threads
    );
    let _ = writeln!(
        out,
        "| throughput: first POST -> last `finished_at` | (the pace: {:.2} s for {}) | **{:.0} runs/s** ({:.2} s for {}) |",
        f.paced.wall,
        f.paced.n,
        f.burst.n as f64 / f.burst.wall,
        f.burst.wall,
        f.burst.n
    );
    let mut row = |figure: &str, cell: &dyn Fn(&QueueRuns) -> String| {
        let _ = writeln!(
            out,
            "| {figure} | {} | {} |",
            cell(&f.paced),
            cell(&f.burst)
        );
    };
    row(
        "POST sent -> `started_at` (on the node that took it)",
        &|r| {
            let l = &r.latencies;
            format!(
                "**{:.0} ms** p50, {:.0} ms p99, {:.0} ms max (n={})",
                percentile(l, 0.5),
                percentile(l, 0.99),
                l.last().copied().unwrap_or(f64::NAN),
                l.len()
            )
        },
    );
    row("runs started on node 0 (busy) / node 1 / node 2", &|r| {
        let nodes: Vec<String> = r.per_node.iter().map(usize::to_string).collect();
        let other = if r.other_owner > 0 {
            format!(", {} by no node of these", r.other_owner)
        } else {
            String::new()
        };
        format!("{}{other}", nodes.join(" / "))
    });
    row(
        "each run ran exactly once (rows = POSTs, distinct ids, all succeeded, each input once at the mock)",
        &|r| {
            if r.problems.is_empty() {
                "**yes**".to_string()
            } else {
                format!("**NO**: {}", r.problems.join("; "))
            }
        },
    );
    let held = if f.holder_after == "running" {
        "node 0's slot was held throughout (its long run still running after both phases)"
            .to_string()
    } else {
        format!(
            "node 0's slot was NOT held throughout: its long run was `{}` after the phases",
            f.holder_after
        )
    };
    let _ = write!(
        out,
        "\nLoad average (1, 5, 15 min) before {}, after {}; {held}. \
         Both times are the millisecond-resolution times the store keeps (the POST's send time truncated to the ms), so latencies are to 1 ms.\n",
        f.load_before, f.load_after
    );
    out
}
