//! Whether `link/aurad.order` still names the functions of the binary a
//! bench measures (`mod link_order;` in the benches that report memory; a
//! folder, so cargo does not take it for a benchmark of its own).
//!
//! The list only helps while its names match: a symbol's mangled name
//! carries a hash of its crate's metadata, and adding or changing a
//! dependency of aurad changes that hash, so every `aurad::` function and
//! every generic instantiated in aurad gets a new name. The linker then
//! ignores the stale names without a word (`--no-warn-symbol-ordering`,
//! build.rs) and a one-shot run's peak RSS grows by several MB (fourteenth
//! session, BENCHMARKS.md: 15.6 MB with a stale list, 9.3-9.9 MB with a
//! fresh one). This makes the drift visible where the figure is measured.
#![allow(dead_code, reason = "shared by several benches, each using a part")]

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

/// The part of aurad's own listed functions a fresh list matches: about half
/// (the list is the union of the `cargo build --release` and `cargo bench`
/// binaries, whose aurad symbols differ), against none once stale.
const FRESH_SHARE: f64 = 0.25;

/// How many of the listed names are defined in `binary`, in all and of
/// aurad's own; `None` if `nm` cannot read it.
pub fn matched(order: &str, binary: &Path) -> Option<(usize, usize, usize, usize)> {
    let out = Command::new("nm")
        .arg("--defined-only")
        .arg(binary)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let text = String::from_utf8_lossy(&out.stdout);
    let defined: HashSet<&str> = text
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .collect();
    let listed: Vec<&str> = order
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let ours: Vec<&str> = listed
        .iter()
        .copied()
        .filter(|n| n.starts_with("_ZN5aurad"))
        .collect();
    let found = |names: &[&str]| names.iter().filter(|n| defined.contains(*n)).count();
    Some((found(&listed), listed.len(), found(&ours), ours.len()))
}

/// Prints how well the list matches `binary`, and a warning that says what
/// to run when it is stale.
pub fn report(binary: &Path) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("link/aurad.order");
    let Ok(order) = std::fs::read_to_string(&path) else {
        println!(
            "link order: {} is missing; peak RSS is not what a release build gives",
            path.display()
        );
        return;
    };
    let Some((found, listed, ours_found, ours)) = matched(&order, binary) else {
        println!(
            "link order: cannot read the symbols of {} with `nm`",
            binary.display()
        );
        return;
    };
    println!(
        "link order: {found} of {listed} listed functions are in the binary ({ours_found} of {ours} of aurad's own)"
    );
    if ours == 0 || (ours_found as f64) < FRESH_SHARE * ours as f64 {
        println!(
            "WARNING: link/aurad.order is stale for this build (a dependency or the profile changed \
             the symbols' hashes), so peak RSS is several MB above a release build's with a fresh \
             list. Regenerate it: cargo build --release --bin aurad && cp target/release/aurad \
             /tmp/aurad-plain && cargo bench --no-run --bench run --bench warm && python3 \
             link/order.py /tmp/aurad-plain target/release/aurad"
        );
    }
}
