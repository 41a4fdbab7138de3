//! `cargo bench --bench pg_memory`: long-term memory recall on PostgreSQL,
//! the two ways of finding candidates side by side (issue #18): `postings`
//! (the product's: the `memory_terms` postings in impact order, rarest term
//! first, read a batch at a time and stopped early, as SQLite does) and
//! `terms` (a GIN index on each memory's term array, every overlapping
//! memory scored). The GIN way lost and is bench-only: the product dropped
//! its column (schema migration 2); `PgMemoryBench::connect` adds it and
//! its index back on the bench's database and keeps them filled. A
//! postings save is the product's (no `terms` written), the array of the
//! memory it made then written untimed so the GIN way sees it; a GIN save
//! writes it in its transaction, as the product used to.
//!
//! For N = 1,000 and 10,000 memories of one namespace (imported; realistic
//! text as `benches/memory.rs` draws it), 200 timed recalls (top 5, min
//! score 0.05) after 20 untimed ones, each query run by both ways in turn,
//! which goes first alternating, so a loaded machine slows both alike; then
//! 200 saves with the merge check (a fifth near-duplicates), alternating
//! too. Prints p50/p90 in ms.
//!
//! Needs a PostgreSQL server: `AURAD_BENCH_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) names the admin
//! database; a database `aurad_bench_*` is created there and dropped. When
//! no server answers, the bench says so and exits. `AURAD_BENCH_QUERIES`
//! sets the number of timed recalls per size (default 200).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a benchmark: it reports on the console, and a panic is its failure report"
)]

mod memory_text;
mod stats;
use memory_text::Gen;
use stats::percentile;

use std::time::Instant;

use aurad::memory::NewMemory;
use aurad::store::pg_memory_bench::{Candidates, PgMemoryBench};
use chrono::Utc;
use rand::Rng;

const WAYS: [(Candidates, &str); 2] = [
    (Candidates::Postings, "postings"),
    (Candidates::Terms, "terms (GIN)"),
];

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

fn row(name: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "| {name:<44} | {:>8.3} | {:>8.3} | {:>8.3} | {:>5} |",
        percentile(&ms, 0.5),
        percentile(&ms, 0.9),
        ms[ms.len() - 1],
        ms.len()
    );
}

fn main() {
    let admin_url = std::env::var("AURAD_BENCH_POSTGRES")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
    let queries: usize = std::env::var("AURAD_BENCH_QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    if let Err(e) = admin(&admin_url, "SELECT 1") {
        eprintln!(
            "pg_memory: skipped: no PostgreSQL answers at AURAD_BENCH_POSTGRES ({e}); start one \
             or set AURAD_BENCH_POSTGRES=postgres://USER@HOST:PORT/postgres"
        );
        return;
    }
    let base = admin_url
        .rsplit_once('/')
        .map(|(b, _)| b.to_string())
        .unwrap_or_else(|| admin_url.clone());
    let now = Utc::now();
    println!(
        "| {:<44} | {:>8} | {:>8} | {:>8} | {:>5} |",
        "operation (ms), PostgreSQL", "p50", "p90", "max", "n"
    );
    println!(
        "|{:-<46}|{:->10}|{:->10}|{:->10}|{:->7}|",
        "", "", "", "", ""
    );
    for size in [1_000usize, 10_000] {
        let name = format!("aurad_bench_{}_{size}", std::process::id());
        admin(&admin_url, &format!("CREATE DATABASE {name}")).unwrap();
        let store = PgMemoryBench::connect(&format!("{base}/{name}")).unwrap();
        let mut g = Gen::new(size as u64);
        let entries: Vec<NewMemory> = (0..size).map(|_| g.entry("bench", now)).collect();
        let contents: Vec<String> = entries.iter().map(|e| e.content.clone()).collect();
        let start = Instant::now();
        assert_eq!(store.import(entries, now).unwrap(), size);
        eprintln!("  import of {size}: {:.2} s", start.elapsed().as_secs_f64());
        let mut ms = [Vec::new(), Vec::new()];
        let mut returned = [0usize; 2];
        for i in 0..queries + 20 {
            let words = g.rng.random_range(2..6);
            let q = g.sentence(words);
            // Alternate which way goes first: both see the same load.
            for k in [i % 2, 1 - i % 2] {
                let start = Instant::now();
                let found = store.recall("bench", &q, 5, 0.05, now, WAYS[k].0).unwrap();
                if i >= 20 {
                    ms[k].push(start.elapsed().as_secs_f64() * 1000.0);
                    returned[k] += found.len();
                }
            }
        }
        for (k, (_, way)) in WAYS.iter().enumerate() {
            row(
                &format!("recall top 5, {size} memories, {way}"),
                ms[k].clone(),
            );
            eprintln!(
                "  ({:.1} memories returned per recall)",
                returned[k] as f64 / queries as f64
            );
        }
        let mut ms = [Vec::new(), Vec::new()];
        for i in 0..queries {
            for k in [i % 2, 1 - i % 2] {
                let new = if i % 5 == 0 {
                    NewMemory::new("bench", contents[(i * 7919 + k) % size].clone())
                } else {
                    g.entry("bench", now)
                };
                let start = Instant::now();
                let saved = store.save(new, 1_000_000, now, WAYS[k].0).unwrap();
                ms[k].push(start.elapsed().as_secs_f64() * 1000.0);
                if WAYS[k].0 == Candidates::Postings {
                    store.index_terms(saved).unwrap();
                }
            }
        }
        for (k, (_, way)) in WAYS.iter().enumerate() {
            row(
                &format!("save with merge check, {size}, {way}"),
                ms[k].clone(),
            );
        }
        store.close().unwrap();
        admin(
            &admin_url,
            &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        )
        .unwrap();
    }
    println!("(each query and save by both ways in turn, first way alternating; machine shared)");
}
