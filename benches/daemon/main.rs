//! `cargo bench --bench daemon`: the `aurad serve` figures of BENCHMARKS.md
//! (issue #5), measured on the real release binary run as a child process
//! (`aurad --dir TMP serve`, its log in a temporary file printed if the
//! benchmark fails, killed when done).
//!
//! 1. Reload latency: an agent file is rewritten with a new prompt; time
//!    from the write until `GET /v1/agents/NAME` answers with a new
//!    `definition_hash` (polled every millisecond).
//! 2. Idle RSS: 100 agents, 20 with a schedule that cannot fire during the
//!    measurement; `VmRSS`/`VmHWM` of the daemon 2 s after `/healthz`
//!    first answers.
//! 3. Concurrent runs: (a) the scripted mock LLM alone, N concurrent
//!    streamed chat completions from a reqwest client; (b) N runs through
//!    the daemon (`max_concurrent_runs: N`), triggered with N concurrent
//!    `POST /v1/agents/NAME/runs` and followed until every run is final.
//!    Each is the best of 3 bursts. Twice: with a mock that answers at once (the machine's CPU is the
//!    limit, shared by the mock, the daemon and this client) and with a
//!    mock that answers after a model's latency (the model is the limit,
//!    as with a real provider).
//!
//! `AURAD_BENCH_RUNS` sets N (default 1000), `AURAD_BENCH_EDITS` the number
//! of timed edits (default 50), `AURAD_BENCH_MOCKS` the number of mock
//! servers the runs are spread over (default 1), `AURAD_BENCH_MODEL_MS` the
//! latency of the second pass's mock (default 1000).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark: it reports on the console, and a panic is its failure report"
)]

#[path = "../../tests/support/mod.rs"]
mod support;

#[path = "../sizes/mod.rs"]
mod sizes;
#[path = "../stats/mod.rs"]
mod stats;

mod idle;
mod mocks;
mod process;
mod reload;
mod runs;

use std::fmt::Write as _;
use std::time::Duration;

use idle::idle_rss_bench;
use process::raise_nofile;
use reload::reload_bench;
use runs::runs_bench;
use sizes::env_usize;

/// How long start-up or a whole phase may take before the bench gives up.
pub(crate) const DEADLINE: Duration = Duration::from_secs(120);

fn main() {
    let runs = env_usize("AURAD_BENCH_RUNS", 1000);
    let edits = env_usize("AURAD_BENCH_EDITS", 50);
    let mocks = env_usize("AURAD_BENCH_MOCKS", 1);
    let model_ms = env_usize("AURAD_BENCH_MODEL_MS", 1000);
    let nofile = raise_nofile();
    eprintln!("RLIMIT_NOFILE soft limit: {nofile} (inherited by the daemon)");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut table = Table::default();
    runtime.block_on(async {
        reload_bench(edits, &mut table).await;
        idle_rss_bench(&mut table).await;
        runs_bench(runs, mocks, None, &mut table).await;
        let latency = Duration::from_millis(model_ms as u64);
        runs_bench(runs, mocks, Some(latency), &mut table).await;
    });
    println!();
    println!("{}", table.render());
}

// ---------------------------------------------------------------------------
// Output

#[derive(Default)]
pub(crate) struct Table {
    rows: Vec<[String; 4]>,
}

impl Table {
    pub(crate) fn row(&mut self, figure: &str, target: &str, measured: String, more: String) {
        eprintln!("{figure}: {measured}  {more}");
        self.rows
            .push([figure.into(), target.into(), measured, more]);
    }

    fn render(&self) -> String {
        let mut out = String::from("| figure | target | measured | more |\n|---|---|---|---|\n");
        for [a, b, c, d] in &self.rows {
            let _ = writeln!(out, "| {a} | {b} | {c} | {d} |");
        }
        out
    }
}

pub(crate) fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(|a, b| a.partial_cmp(b).unwrap());
    values
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
