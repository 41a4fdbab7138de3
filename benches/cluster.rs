//! `cargo bench --bench cluster`: SQLite with one node against PostgreSQL
//! with one and with three nodes (issue #18), measured on the real release
//! binary run as child processes (`aurad --dir NODE serve`, each node with
//! a project directory of its own holding the same files; on PostgreSQL
//! `AURAD_DATABASE_URL` names a database created for the setup and dropped
//! after it). Printed as one table, the setups side by side:
//!
//! 1. Fire-claim latency: 20 agents with a seconds cron on the offline
//!    `test` model, watched for whole seconds; per scheduled run
//!    `created_at - scheduled_for` read from the database, and the fires
//!    of the window with no run or with more than one (both must be 0).
//! 2. Pickup latency: N API runs (`POST /v1/agents/NAME/runs`, agents
//!    on the scripted mock LLM answering at once) posted at a steady rate,
//!    round-robin over the nodes; per run, from sending the POST to its
//!    stored `started_at` (the client and the nodes share this machine's
//!    clock). Every node has free slots: the accepting node starts each
//!    run itself, nothing is queued.
//! 3. Throughput: N runs posted by a few client threads as fast as they
//!    can, round-robin over the nodes; runs/s from the first POST until
//!    the last stored `finished_at`, and a check that each ran exactly once
//!    (stored rows, distinct ids, all succeeded, each input once at the
//!    mock).
//!
//! Then a second table: the shared queue (`cluster/queue.rs`), PostgreSQL
//! with three nodes, every run posted to a node whose only slot is taken,
//! so each is queued and started by one of the two idle nodes.
//!
//! The nodes are restarted (SIGTERM, awaited) between 1 and 2/3 with other
//! agent files, so the scheduled agents do not load the run phases. The
//! PostgreSQL setups are skipped (said so) when no server answers at
//! `AURAD_TEST_POSTGRES` (default `postgres://postgres@127.0.0.1:5432/postgres`).
//!
//! `AURAD_BENCH_FIRE_SECONDS` (default 20) sets the fire window,
//! `AURAD_BENCH_ON_OVERLAP` the tick agents' `on_overlap` (default: unset,
//! so `skip`; `allow` spares each fire on PostgreSQL the read of the
//! agent's runs on other nodes),
//! `AURAD_BENCH_RUNS` (default 1000) N of phases 2 and 3,
//! `AURAD_BENCH_QUEUE_RUNS` (default 200) N of each shared-queue phase,
//! `AURAD_BENCH_RATE` (default 50) the runs per second of phase 2 and of
//! the paced shared-queue phase. Depends on the test support (`Serve`, the
//! mock LLM, `TestDatabase`), `stats` and `cluster/` (`db.rs`: reading the
//! database; `nodes.rs`: the node processes; `posting.rs`: the client;
//! `queue.rs`: the shared-queue setup).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark: it reports on the console, and a panic is its failure report"
)]

#[path = "../tests/support/mod.rs"]
mod support;

mod sizes;
mod stats;
use sizes::env_usize;
use stats::percentile;

#[path = "cluster/db.rs"]
mod db;
use db::Db;
#[path = "cluster/nodes.rs"]
mod nodes;
use nodes::{Cluster, LEASE, NodeDir, load_average, wait_for};
#[path = "cluster/posting.rs"]
mod posting;
use posting::{
    WORKER_AGENTS, exactly_once, ms_between, post_all, post_errors, sorted, start_latencies,
};
#[path = "cluster/queue.rs"]
mod queue;
use queue::QueueParams;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use support::mock_llm::{MockLlm, Reply};
use support::postgres::TestDatabase;

/// Agents with a seconds cron in phase 1.
const TICK_AGENTS: usize = 20;
/// Client threads posting in phase 2 (each keeps its own runs' pace).
const PACED_THREADS: usize = 4;
/// Client threads posting as fast as they can in phase 3.
const BURST_THREADS: usize = 8;
/// `max_concurrent_runs` of each node in phases 1-3.
const NODE_SLOTS: usize = 32;
/// How long the runs of a phase may take to be final, beyond one
/// millisecond per run.
const SETTLE: Duration = Duration::from_secs(120);

fn main() {
    // The SQLite setup must not be sent to a database by the caller's
    // environment. Removed before any thread starts.
    // SAFETY: single-threaded here, nothing reads the environment at once.
    unsafe { std::env::remove_var("AURAD_DATABASE_URL") };
    let params = Params {
        fire_seconds: env_usize("AURAD_BENCH_FIRE_SECONDS", 20) as i64,
        on_overlap: std::env::var("AURAD_BENCH_ON_OVERLAP").ok(),
        runs: env_usize("AURAD_BENCH_RUNS", 1000),
        rate: env_usize("AURAD_BENCH_RATE", 50),
    };
    let mock = MockLlm::start_in_thread();
    mock.set_fallback(Reply::Text("ok, done.".into()));

    let queue_params = QueueParams {
        runs: env_usize("AURAD_BENCH_QUEUE_RUNS", 200),
        rate: params.rate,
        paced_threads: PACED_THREADS,
        burst_threads: BURST_THREADS,
    };

    let mut columns = vec![("SQLite, 1 node", bench_setup(&params, &mock, None, 1))];
    let shared_queue = match TestDatabase::create("cluster bench, PostgreSQL 1 node") {
        Some(db) => {
            columns.push((
                "PostgreSQL, 1 node",
                bench_setup(&params, &mock, Some(&db), 1),
            ));
            drop(db);
            let db = TestDatabase::create("cluster bench, PostgreSQL 3 nodes")
                .expect("PostgreSQL answered a moment ago");
            columns.push((
                "PostgreSQL, 3 nodes",
                bench_setup(&params, &mock, Some(&db), 3),
            ));
            drop(db);
            let db = TestDatabase::create("cluster bench, shared queue")
                .expect("PostgreSQL answered a moment ago");
            Ok(queue::bench(&queue_params, &mock, &db))
        }
        None => {
            let server = std::env::var("AURAD_TEST_POSTGRES")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
            let why = format!("skipped: no PostgreSQL server answers at {server}");
            eprintln!("PostgreSQL setups {why} (set AURAD_TEST_POSTGRES to one)");
            columns.push(("PostgreSQL, 1 node", Err(why.clone())));
            columns.push(("PostgreSQL, 3 nodes", Err(why.clone())));
            Err(why)
        }
    };
    println!();
    println!("{}", render(&params, &columns));
    println!("{}", queue::render(&queue_params, &shared_queue));
}

struct Params {
    fire_seconds: i64,
    /// The tick agents' `on_overlap` when set (else the default, `skip`).
    on_overlap: Option<String>,
    runs: usize,
    rate: usize,
}

// ---------------------------------------------------------------------------
// One setup

struct Figures {
    load_before: String,
    load_after: String,
    fire: FireFigures,
    pickup: PickupFigures,
    throughput: ThroughputFigures,
}

fn bench_setup(
    params: &Params,
    mock: &MockLlm,
    database: Option<&TestDatabase>,
    nodes: usize,
) -> Result<Figures, String> {
    let label = match database {
        Some(_) => format!(
            "PostgreSQL, {nodes} node{}",
            if nodes == 1 { "" } else { "s" }
        ),
        None => "SQLite, 1 node".to_string(),
    };
    let load_before = load_average();
    eprintln!("== {label}: load average before {load_before}");
    let mut dirs: Vec<NodeDir> = (0..nodes).map(|_| NodeDir::new()).collect();
    let postgres = database.is_some();

    let overlap = params
        .on_overlap
        .as_deref()
        .map(|policy| format!("on_overlap: {policy}\n"))
        .unwrap_or_default();
    let ticks: Vec<(String, String)> = (0..TICK_AGENTS)
        .map(|i| {
            (
                format!("tick{i:02}"),
                format!("model: test\nprompt: tick\nschedule: \"* * * * * *\"\n{overlap}"),
            )
        })
        .collect();
    for dir in &mut dirs {
        dir.configure(mock, postgres, NODE_SLOTS, &ticks);
    }
    let cluster = Cluster::start(&dirs, database);
    let db = open_db(&dirs, database);
    let fire = fire_phase(params, &cluster, &db);
    cluster.stop();

    let workers: Vec<(String, String)> = (0..WORKER_AGENTS)
        .map(|i| {
            (
                format!("w{i:02}"),
                "model: mock0/m\nprompt: Say ok.\n".to_string(),
            )
        })
        .collect();
    for dir in &mut dirs {
        dir.configure(mock, postgres, NODE_SLOTS, &workers);
    }
    let cluster = Cluster::start(&dirs, database);
    let pickup = pickup_phase(params, mock, &cluster, &db);
    let throughput = throughput_phase(params, mock, &cluster, &db);
    cluster.stop();
    let load_after = load_average();
    eprintln!("== {label}: load average after {load_after}");
    Ok(Figures {
        load_before,
        load_after,
        fire,
        pickup,
        throughput,
    })
}

fn open_db(dirs: &[NodeDir], database: Option<&TestDatabase>) -> Db {
    match database {
        Some(db) => Db::postgres(&db.url),
        None => Db::sqlite(&dirs[0].dir.path().join("aurad.db")),
    }
}

// ---------------------------------------------------------------------------
// 1. Fire-claim latency

struct FireFigures {
    expected: usize,
    runs: usize,
    /// `created_at - scheduled_for`, sorted, in ms.
    latencies: Vec<f64>,
    missing: usize,
    duplicated: usize,
    /// Runs of the window at an instant that is not a whole second of it
    /// or of an agent that is not ours.
    unexpected: usize,
    not_succeeded: usize,
    /// Distinct owners of the window's runs: the nodes that claimed fires.
    owners: usize,
}

fn fire_phase(params: &Params, cluster: &Cluster, db: &Db) -> FireFigures {
    let seconds = params.fire_seconds;
    // Whole seconds, from a little after every node is up.
    let start = DateTime::from_timestamp(Utc::now().timestamp() + 3, 0).unwrap();
    let end = start + chrono::Duration::seconds(seconds);
    eprintln!("fires: watching {seconds} s from {start}");
    // The fires of the window's last second are recorded a moment after
    // it: a fire not stored 5 s after its instant counts as missing.
    let settled = end + chrono::Duration::seconds(5);
    let wait = (settled - Utc::now()).to_std().unwrap_or_default();
    std::thread::sleep(wait);
    let rows = db.fires(start, end);
    let mut per_fire: HashMap<(String, i64), usize> = HashMap::new();
    for agent in 0..TICK_AGENTS {
        for s in 0..seconds {
            per_fire.insert((format!("tick{agent:02}"), start.timestamp() + s), 0);
        }
    }
    let mut unexpected = 0;
    let mut latencies = Vec::new();
    let mut not_succeeded = 0;
    for row in &rows {
        latencies.push(ms_between(row.scheduled_for, row.created_at));
        if row.state != "succeeded" {
            not_succeeded += 1;
        }
        let whole = row.scheduled_for.timestamp_subsec_nanos() == 0;
        match per_fire.get_mut(&(row.agent.clone(), row.scheduled_for.timestamp())) {
            Some(count) if whole => *count += 1,
            _ => unexpected += 1,
        }
    }
    let owners = rows
        .iter()
        .filter_map(|r| r.owner.as_deref())
        .collect::<HashSet<_>>()
        .len();
    let figures = FireFigures {
        expected: per_fire.len(),
        runs: rows.len(),
        latencies: sorted(latencies),
        missing: per_fire.values().filter(|&&c| c == 0).count(),
        duplicated: per_fire.values().filter(|&&c| c > 1).count(),
        unexpected,
        not_succeeded,
        owners,
    };
    if figures.missing + figures.duplicated + figures.unexpected > 0 {
        eprintln!(
            "fires: {} missing, {} duplicated, {} unexpected\n{}",
            figures.missing,
            figures.duplicated,
            figures.unexpected,
            cluster.logs()
        );
    }
    figures
}

// ---------------------------------------------------------------------------
// 2. Pickup latency (free slots everywhere: nothing queued)

struct PickupFigures {
    n: usize,
    rate: usize,
    /// POST sent -> `started_at`, sorted, in ms.
    latencies: Vec<f64>,
    post_errors: usize,
    never_started: usize,
}

fn pickup_phase(params: &Params, mock: &MockLlm, cluster: &Cluster, db: &Db) -> PickupFigures {
    let (n, rate) = (params.runs, params.rate);
    eprintln!("pickup: {n} runs at {rate}/s");
    mock.forget_requests();
    let due = move |i: usize| Duration::from_secs_f64(i as f64 / rate as f64);
    let posted = post_all(&cluster.addrs(), "pk", n, PACED_THREADS, Some(&due));
    let errors = post_errors(&posted);
    for e in errors.iter().take(3) {
        eprintln!("pickup: POST failed: {e}");
    }
    let accepted = (n - errors.len()) as i64;
    wait_for(
        "pickup runs final",
        cluster,
        accepted,
        SETTLE + Duration::from_millis(n as u64),
        || db.finished("pk-"),
    );
    let (latencies, never_started) = start_latencies("pk", &posted, &db.runs("pk-"));
    PickupFigures {
        n,
        rate,
        latencies,
        post_errors: errors.len(),
        never_started,
    }
}

// ---------------------------------------------------------------------------
// 3. Throughput

struct ThroughputFigures {
    n: usize,
    runs_per_second: f64,
    wall: f64,
    /// Every way the runs could fail to have run exactly once; empty when
    /// each did.
    problems: Vec<String>,
}

fn throughput_phase(
    params: &Params,
    mock: &MockLlm,
    cluster: &Cluster,
    db: &Db,
) -> ThroughputFigures {
    let n = params.runs;
    eprintln!("throughput: {n} runs from {BURST_THREADS} client threads");
    mock.forget_requests();
    let first_post = Utc::now();
    let posted = post_all(&cluster.addrs(), "tp", n, BURST_THREADS, None);
    let errors = post_errors(&posted);
    let accepted = (n - errors.len()) as i64;
    wait_for(
        "throughput runs final",
        cluster,
        accepted,
        SETTLE + Duration::from_millis(n as u64),
        || db.finished("tp-"),
    );
    let rows = db.runs("tp-");
    let last_finish = rows.iter().filter_map(|r| r.finished_at).max();
    let wall = last_finish.map_or(f64::NAN, |t| ms_between(first_post, t) / 1000.0);

    let problems = exactly_once("tp", n, &posted, &rows, mock);
    ThroughputFigures {
        n,
        runs_per_second: n as f64 / wall,
        wall,
        problems,
    }
}

// ---------------------------------------------------------------------------
// Output

fn render(params: &Params, columns: &[(&str, Result<Figures, String>)]) -> String {
    let mut out = String::from("| figure |");
    for (name, _) in columns {
        let _ = write!(out, " {name} |");
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(columns.len()));
    out.push('\n');
    let mut row = |figure: String, cell: &dyn Fn(&Figures) -> String| {
        let _ = write!(out, "| {figure} |");
        for (_, column) in columns {
            match column {
                Ok(f) => {
                    let _ = write!(out, " {} |", cell(f));
                }
                Err(why) => {
                    let _ = write!(out, " {why} |");
                }
            }
        }
        out.push('\n');
    };
    row("load average before (1, 5, 15 min)".into(), &|f| {
        f.load_before.clone()
    });
    row(
        format!(
            "fire claim: created_at - scheduled_for, {TICK_AGENTS} agents `* * * * * *` on `test` (on_overlap: {}), {} s",
            params.on_overlap.as_deref().unwrap_or("skip, the default"),
            params.fire_seconds
        ),
        &|f| {
            let l = &f.fire.latencies;
            format!(
                "**{:.0} ms** p50, {:.0} ms p99, {:.0} ms max",
                percentile(l, 0.5),
                percentile(l, 0.99),
                l.last().copied().unwrap_or(f64::NAN)
            )
        },
    );
    row(
        "fires of the window: expected / stored runs (not succeeded)".into(),
        &|f| {
            format!(
                "{} / {} ({}); claimed by {} node(s)",
                f.fire.expected, f.fire.runs, f.fire.not_succeeded, f.fire.owners
            )
        },
    );
    row(
        "fires with no run / with more than one (must be 0 / 0)".into(),
        &|f| {
            let ok = f.fire.missing == 0 && f.fire.duplicated == 0 && f.fire.unexpected == 0;
            let extra = if f.fire.unexpected > 0 {
                format!(", {} runs at unexpected instants", f.fire.unexpected)
            } else {
                String::new()
            };
            format!(
                "**{} / {}** {}{extra}",
                f.fire.missing,
                f.fire.duplicated,
                if ok { "(ok)" } else { "(FAILED)" }
            )
        },
    );
    row(
        format!(
            "pickup, free slots (nothing queued): POST sent -> started_at, {} runs at {}/s round-robin",
            params.runs, params.rate
        ),
        &|f| {
            let p = &f.pickup;
            format!(
                "**{:.0} ms** p50, {:.0} ms p99, {:.0} ms max (n={}{})",
                percentile(&p.latencies, 0.5),
                percentile(&p.latencies, 0.99),
                p.latencies.last().copied().unwrap_or(f64::NAN),
                p.latencies.len(),
                if p.post_errors + p.never_started > 0 {
                    format!(
                        "; {} POST errors, {} never started of {} at {}/s",
                        p.post_errors, p.never_started, p.n, p.rate
                    )
                } else {
                    String::new()
                }
            )
        },
    );
    row(
        format!(
            "throughput: {} runs from {BURST_THREADS} client threads, first POST -> last finished_at",
            params.runs
        ),
        &|f| {
            let t = &f.throughput;
            format!(
                "**{:.0} runs/s** ({:.2} s for {})",
                t.runs_per_second, t.wall, t.n
            )
        },
    );
    row(
        "each run ran exactly once (rows = POSTs, distinct ids, all succeeded, each input once at the mock)".into(),
        &|f| {
            if f.throughput.problems.is_empty() {
                "**yes**".to_string()
            } else {
                format!("**NO**: {}", f.throughput.problems.join("; "))
            }
        },
    );
    row("load average after (1, 5, 15 min)".into(), &|f| {
        f.load_after.clone()
    });
    let _ = write!(
        out,
        "\nOne release binary per node as a child process; the mock LLM (answering at once) and this client in the bench process; \
         each node {NODE_SLOTS} slots; PostgreSQL nodes with `cluster: {{lease: {LEASE}}}`, a database per setup created and dropped.\n\
         Pickup latency compares the client's send time with the stored started_at: client and nodes share this machine's clock \
         (both backends store times to the millisecond, so these are to 1 ms).\n\
         The machine is shared (2 cores, other agents compiling): figures from a loaded machine are rough; see the load averages.\n"
    );
    out
}
