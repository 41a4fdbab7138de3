//! `cargo bench --bench memory`: long-term memory at scale (issue 4).
//!
//! (a) recall latency (median, p99) at 1k, 10k and 100k memories of one
//!     namespace, with realistic text: sentences of a Zipf-like draw from an
//!     English word list plus common stop words, a quarter of them Chinese;
//!     queries are drawn the same way (so they include stop words);
//! (b) save latency with the merge check at 10k (a fifth are near-duplicates
//!     that merge);
//! (c) import of 100k entries, total time.
//!
//! `AURAD_BENCH_QUERIES` sets the number of timed recalls per size (default 300).

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
use aurad::store::Store;
use chrono::Utc;
use rand::Rng;

fn row(name: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "| {name:<36} | {:>9.3} | {:>9.3} | {:>9.3} | {:>6} |",
        percentile(&ms, 0.5),
        percentile(&ms, 0.99),
        ms[ms.len() - 1],
        ms.len()
    );
}

fn main() {
    let queries: usize = std::env::var("AURAD_BENCH_QUERIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let now = Utc::now();
    println!(
        "| {:<36} | {:>9} | {:>9} | {:>9} | {:>6} |",
        "operation (ms)", "median", "p99", "max", "n"
    );
    println!(
        "|{:-<38}|{:->11}|{:->11}|{:->11}|{:->8}|",
        "", "", "", "", ""
    );
    let mut import_100k = None;
    for size in [1_000usize, 10_000, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("aurad.db")).unwrap();
        let mut g = Gen::new(size as u64);
        let entries: Vec<NewMemory> = (0..size).map(|_| g.entry("bench", now)).collect();
        let start = Instant::now();
        assert_eq!(store.memory_import_blocking(entries, now).unwrap(), size);
        if size == 100_000 {
            import_100k = Some(start.elapsed().as_secs_f64());
        }
        let mut ms = Vec::new();
        let mut returned = 0;
        for i in 0..queries + 20 {
            let words = g.rng.random_range(2..6);
            let q = g.sentence(words);
            let start = Instant::now();
            let found = store
                .memory_recall_blocking("bench", &q, 5, 0.05, now)
                .unwrap();
            if i >= 20 {
                ms.push(start.elapsed().as_secs_f64() * 1000.0);
                returned += found.len();
            }
        }
        row(&format!("recall top 5, {size} memories"), ms);
        eprintln!(
            "  ({:.1} memories returned per recall)",
            returned as f64 / queries as f64
        );
        if size == 10_000 {
            let mut ms = Vec::new();
            let mut merged = 0;
            for i in 0..queries {
                let new = if i % 5 == 0 {
                    let old = store.memory_list_blocking("bench", 1).unwrap().remove(0);
                    NewMemory::new("bench", old.content)
                } else {
                    g.entry("bench", now)
                };
                let start = Instant::now();
                let saved = store.memory_save_blocking(new, 1_000_000, now).unwrap();
                ms.push(start.elapsed().as_secs_f64() * 1000.0);
                merged += matches!(saved, aurad::memory::Saved::Merged(_)) as usize;
            }
            row("save with merge check, 10000 memories", ms);
            eprintln!("  ({merged} of {queries} saves merged)");
        }
        store.close().unwrap();
    }
    if let Some(secs) = import_100k {
        println!(
            "\nimport of 100000 entries (one transaction, index and norms included): {secs:.2} s"
        );
    }
}
