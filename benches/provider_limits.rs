//! `cargo bench --bench provider_limits`: what passing a provider's limits
//! (`llm::limits`, issue #34) adds to a model call when nothing waits: one
//! `ProviderGate::enter` and `Pass::leave` with a concurrency limit and a
//! request rate (and, in the second row, a token rate settled with the
//! answer's usage), timed one call after another, so no call ever waits
//! for a slot or a reservation. In process (one node, SQLite) the gate is
//! a semaphore and a mutex; on PostgreSQL (several nodes) it is the
//! store's round trips: a slot taken (two statements) and given back, the
//! request reserved, the tokens settled.
//!
//! Prints the median and p99 in µs. `AURAD_BENCH_CALLS` sets the timed
//! calls in process (default 100,000; PostgreSQL does a fiftieth, at least
//! 500), after a tenth as many untimed. The PostgreSQL rows need a server:
//! `AURAD_BENCH_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) names the admin database;
//! a database `aurad_bench_limits_*` is created there and dropped. When no
//! server answers, the bench says so and prints the in-process rows only.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark: it reports on the console, and a panic is its failure report"
)]

mod stats;
use stats::percentile;

use std::sync::Arc;
use std::time::Instant;

use aurad::llm::ModelTurn;
use aurad::llm::limits::{Limits, ProviderGate, SharedLimits};
use aurad::store::Store;
use aurad::types::{Database, DatabaseUrl, Usage};

/// Limits that never make a call wait: 4 at once (calls come one at a
/// time), the highest request rate (14 ns apart) and a token rate whose
/// spacing rounds to nothing.
fn limits(tokens: bool) -> Limits {
    Limits {
        concurrent: Some(4),
        requests_per_minute: Some(u32::MAX),
        tokens_per_minute: tokens.then_some(1_000_000_000_000),
    }
}

fn answer() -> Result<ModelTurn, aurad::llm::ProviderError> {
    Ok(ModelTurn {
        usage: Usage {
            input_tokens: Some(120),
            output_tokens: Some(30),
            cached_input_tokens: None,
        },
        ..ModelTurn::default()
    })
}

/// Times `calls` enter-and-leave pairs after `calls / 10` untimed; µs.
async fn time_calls(gate: &Arc<ProviderGate>, calls: usize) -> Vec<f64> {
    let answer = answer();
    for _ in 0..calls / 10 {
        gate.enter(100).await.leave(&answer).await;
    }
    let mut us = Vec::with_capacity(calls);
    for _ in 0..calls {
        let started = Instant::now();
        let pass = gate.enter(100).await;
        pass.leave(&answer).await;
        us.push(started.elapsed().as_secs_f64() * 1e6);
    }
    us
}

fn row(name: &str, mut us: Vec<f64>) {
    us.sort_by(f64::total_cmp);
    println!(
        "| {name:<52} | {:>9.2} | {:>9.2} | {:>7} |",
        percentile(&us, 0.5),
        percentile(&us, 0.99),
        us.len()
    );
}

/// Runs one statement on the admin database.
fn admin(url: &str, statement: &str) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let (client, conn) = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            tokio_postgres::connect(url, tokio_postgres::NoTls),
        )
        .await
        .map_err(|_| "connecting timed out".to_string())?
        .map_err(|e| e.to_string())?;
        let driver = tokio::spawn(conn);
        let outcome = client
            .batch_execute(statement)
            .await
            .map_err(|e| e.to_string());
        drop(client);
        let _ = driver.await;
        outcome
    })
}

fn main() {
    let calls: usize = std::env::var("AURAD_BENCH_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "| {:<52} | {:>9} | {:>9} | {:>7} |",
        "enter + leave", "p50 µs", "p99 µs", "calls"
    );
    println!("|{:-<54}|{:-<11}|{:-<11}|{:-<9}|", "", "", "", "");
    for tokens in [false, true] {
        let gate = Arc::new(ProviderGate::new("bench", limits(tokens), None));
        let us = runtime.block_on(time_calls(&gate, calls));
        let what = if tokens {
            "concurrency, requests, tokens"
        } else {
            "concurrency, requests"
        };
        row(&format!("in process: {what}"), us);
    }

    let admin_url = std::env::var("AURAD_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let name = format!("aurad_bench_limits_{}", std::process::id());
    if let Err(e) = admin(&admin_url, &format!("CREATE DATABASE {name}")) {
        eprintln!(
            "provider_limits: PostgreSQL rows skipped: no server answers at AURAD_BENCH_POSTGRES ({e})"
        );
        return;
    }
    let base = admin_url
        .rsplit_once('/')
        .map_or(admin_url.as_str(), |(b, _)| b);
    let url = format!("{base}/{name}");
    let store = Store::connect(&Database::Postgres(DatabaseUrl::new(&url))).unwrap();
    let shared: Arc<dyn SharedLimits> =
        aurad::run::shared_limits::for_store(&store, std::time::Duration::from_secs(15))
            .expect("a PostgreSQL store shares its limits");
    let pg_calls = (calls / 50).max(500);
    for tokens in [false, true] {
        let provider = if tokens { "bench-tokens" } else { "bench" };
        let gate = Arc::new(ProviderGate::new(
            provider,
            limits(tokens),
            Some(shared.clone()),
        ));
        let us = runtime.block_on(time_calls(&gate, pg_calls));
        let what = if tokens {
            "concurrency, requests, tokens"
        } else {
            "concurrency, requests"
        };
        row(&format!("PostgreSQL: {what}"), us);
    }
    drop(shared);
    drop(store);
    let _ = admin(
        &admin_url,
        &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
    );
}
