//! Retention soak: 100k runs (with events) written through the store while
//! a pruner does what `aurad serve`'s does (`daemon::retention`: whole
//! runs, then events, in batches of `BATCH_ROWS` with `PAUSE` between),
//! with a retention short enough to bite: the runs of the newest
//! `KEEP_RUNS` completions are kept, and the events of the newest
//! `KEEP_EVENTS`. Prints the database size (db + WAL, pages, free pages)
//! every 10k runs, which must plateau, and how long a prune batch holds
//! the writer (p50/p99), and the latency of the runs' own final-state
//! writes meanwhile.
//!
//! `cargo bench --bench retention` (100k runs); `AURAD_SOAK_RUNS=20000` for
//! a shorter soak; `AURAD_SOAK_NO_PRUNE=1` for the same writes without the
//! pruner (what the file grows to without retention). Writers: 32 runs at once, each claimed, given 12 events
//! in 3 batches (as one model round each) and finished.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark: it reports on the console, and a panic is its failure report"
)]

#[path = "stats/mod.rs"]
mod stats;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aurad::daemon::retention::{BATCH_ROWS, PAUSE};
use aurad::store::{NewRun, PruneScope, Store};
use aurad::types::{RunEvent, RunState, Usage};
use chrono::{DateTime, Utc};
use futures::StreamExt;

/// Runs whose records are kept: the newest completions.
const KEEP_RUNS: usize = 10_000;
/// Runs whose events are kept.
const KEEP_EVENTS: usize = 2_000;
/// The pruner runs a pass each time this many runs completed.
const PASS_EVERY: usize = 1_000;
const CONCURRENT: usize = 32;
const REPORT_EVERY: usize = 10_000;

fn new_run(agent: &str) -> NewRun {
    NewRun {
        parent: None,
        id: aurad::store::new_run_id(),
        agent: agent.into(),
        trigger: aurad::types::Trigger::Api,
        input: "Summarise the overnight build failures and file an issue for each.".into(),
        model: "mock/m".into(),
        definition_hash: "0123456789abcdef".into(),
        owner: "pid:1".into(),
        fire: None,
        state: RunState::Running,
        template_context: None,
        session_id: None,
    }
}

/// One model round: a little text, a tool call and its result.
fn round(n: usize) -> Vec<RunEvent> {
    vec![
        RunEvent::TextDelta {
            text: format!("Round {n}: looking at the failing jobs of the nightly pipeline. "),
        },
        RunEvent::TextDelta {
            text: "Three failures share a timeout in the integration stage.".into(),
        },
        RunEvent::TextDelta {
            text: " Filing them now.".into(),
        },
        RunEvent::TextDelta {
            text: format!(" (round {n} done)"),
        },
    ]
}

async fn one_run(store: &Store, i: usize) -> Duration {
    let run = new_run(if i.is_multiple_of(2) {
        "triage"
    } else {
        "report"
    });
    let id = run.id.clone();
    store.claim_run(run).await.expect("claim");
    for n in 0..3 {
        store.append_events(&id, round(n)).await.expect("events");
    }
    let started = Instant::now();
    store
        .finish_run(
            &id,
            RunState::Succeeded,
            None,
            Some("Filed 3 issues.".into()),
            Usage {
                input_tokens: Some(1200),
                output_tokens: Some(80),
                cached_input_tokens: None,
            },
        )
        .await
        .expect("finish");
    started.elapsed()
}

fn file_size(path: &Path) -> u64 {
    let wal = path.with_file_name(format!(
        "{}-wal",
        path.file_name().unwrap().to_string_lossy()
    ));
    [path.to_path_buf(), wal]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum()
}

fn pages(path: &Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open(path).expect("open for pages");
    let count = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .expect("page_count");
    let free = conn
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .expect("freelist_count");
    (count, free)
}

/// Completion times in order: `done[k]` is when the k-th run finished.
#[derive(Default)]
struct Progress {
    done: Vec<DateTime<Utc>>,
    finished: bool,
}

#[derive(Default)]
struct PruneTimes {
    held_ms: Vec<f64>,
    wall_ms: Vec<f64>,
    passes: usize,
    runs_deleted: u64,
    runs_emptied: u64,
}

/// The pruner: a pass each [`PASS_EVERY`] completions, as the daemon's
/// (same batch size and pause), with cutoffs at the completion times
/// [`KEEP_RUNS`] and [`KEEP_EVENTS`] back.
async fn pruner(store: Store, progress: Arc<Mutex<Progress>>) -> PruneTimes {
    let mut times = PruneTimes::default();
    let mut last_pass = 0;
    let off = std::env::var_os("AURAD_SOAK_NO_PRUNE").is_some();
    loop {
        let (count, finished, cutoffs) = {
            let p = progress.lock().unwrap();
            let at = |keep: usize| p.done.len().checked_sub(keep).map(|k| p.done[k]);
            (p.done.len(), p.finished, (at(KEEP_RUNS), at(KEEP_EVENTS)))
        };
        if finished && (off || count < last_pass + PASS_EVERY) {
            return times;
        }
        if off || count < last_pass + PASS_EVERY {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        }
        last_pass = count;
        times.passes += 1;
        for (scope, before) in [
            (PruneScope::Runs, cutoffs.0),
            (PruneScope::Events, cutoffs.1),
        ] {
            let Some(before) = before else { continue };
            loop {
                let started = Instant::now();
                let batch = store
                    .prune_batch(scope, before, BATCH_ROWS)
                    .await
                    .expect("prune");
                if batch.pruned.runs_touched() == 0 {
                    break;
                }
                times.wall_ms.push(started.elapsed().as_secs_f64() * 1e3);
                times.held_ms.push(batch.held.as_secs_f64() * 1e3);
                times.runs_deleted += batch.pruned.runs;
                times.runs_emptied += batch.pruned.runs_emptied;
                tokio::time::sleep(PAUSE).await;
            }
        }
    }
}

fn main() {
    let total: usize = std::env::var("AURAD_SOAK_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("aurad.db");
    let store = Store::open(&path).expect("open");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let progress = Arc::new(Mutex::new(Progress::default()));
    if std::env::var_os("AURAD_SOAK_NO_PRUNE").is_some() {
        println!("AURAD_SOAK_NO_PRUNE is set: the pruner does nothing");
    }
    println!(
        "retention soak: {total} runs, 12 events each, {CONCURRENT} at once; keeping the newest \
         {KEEP_RUNS} runs and the events of the newest {KEEP_EVENTS}; a pass every {PASS_EVERY} \
         runs, batches of {BATCH_ROWS} rows, {} ms apart",
        PAUSE.as_millis()
    );
    println!(
        "{:>8}  {:>10}  {:>8}  {:>8}  {:>8}",
        "runs", "db+wal MB", "pages", "free", "elapsed"
    );
    let started = Instant::now();
    let (finish_ms, prune) = runtime.block_on(async {
        let pruner = tokio::spawn(pruner(store.clone(), progress.clone()));
        let finish_ms = Arc::new(Mutex::new(Vec::with_capacity(total)));
        futures::stream::iter(0..total)
            .for_each_concurrent(CONCURRENT, |i| {
                let (store, progress, finish_ms) =
                    (store.clone(), progress.clone(), finish_ms.clone());
                let path = path.clone();
                async move {
                    let latency = one_run(&store, i).await;
                    finish_ms.lock().unwrap().push(latency.as_secs_f64() * 1e3);
                    let count = {
                        let mut p = progress.lock().unwrap();
                        p.done.push(Utc::now());
                        p.done.len()
                    };
                    if count.is_multiple_of(REPORT_EVERY) {
                        let (pages, free) = pages(&path);
                        println!(
                            "{count:>8}  {:>10.1}  {pages:>8}  {free:>8}  {:>7.1}s",
                            file_size(&path) as f64 / 1e6,
                            started.elapsed().as_secs_f64()
                        );
                    }
                }
            })
            .await;
        progress.lock().unwrap().finished = true;
        let prune = pruner.await.expect("pruner");
        let finish_ms = std::mem::take(&mut *finish_ms.lock().unwrap());
        (finish_ms, prune)
    });
    println!();
    println!(
        "{} passes: {} runs deleted, {} runs' events deleted, {} batches",
        prune.passes,
        prune.runs_deleted,
        prune.runs_emptied,
        prune.wall_ms.len()
    );
    for (name, mut values) in [
        ("prune batch: writer held (work)", prune.held_ms),
        ("prune batch: call to commit", prune.wall_ms),
        ("run final state write (finish_run)", finish_ms),
    ] {
        values.sort_by(f64::total_cmp);
        println!(
            "{name:<38} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms  (n={})",
            stats::percentile(&values, 0.5),
            stats::percentile(&values, 0.99),
            values.last().copied().unwrap_or(f64::NAN),
            values.len()
        );
    }
    store.close().expect("close");
    let (pages, free) = pages(&path);
    println!(
        "at the end: {:.1} MB (db + wal), {pages} pages, {free} free",
        file_size(&path) as f64 / 1e6
    );
}
