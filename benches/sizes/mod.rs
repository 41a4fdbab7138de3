//! The sizes a benchmark reads from its environment (`AURAD_BENCH_RUNS`
//! and the like; `mod sizes;` in each, a folder so cargo does not take it
//! for a benchmark of its own).
#![allow(dead_code, reason = "shared by several benches, each using a part")]

/// The positive number in the environment variable `name`, or `default`
/// when it is unset, not a number, or zero.
pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(default)
}
