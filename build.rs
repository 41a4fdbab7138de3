//! Link options of the release `aurad` binary, which keep the memory a
//! one-shot `aurad run` maps small (BENCHMARKS.md, "Where a one-shot run's
//! memory and instructions go"). Debug builds, tests, benches' own
//! executables and the library are linked as before.
//!
//! - `-no-pie`: a position-independent executable's loader rewrites every
//!   pointer in `.data.rel.ro` (vtables, string tables, `&'static` data) at
//!   each start, which reads the whole relocation table and dirties every
//!   page of that section whatever the process then uses; a
//!   position-dependent binary has them resolved at link time.
//!   `AURAD_PIE=1` keeps a PIE.
//! - `--symbol-ordering-file=link/aurad.order` (lld, the default linker of
//!   x86_64 Linux since Rust 1.90): the functions a one-shot run and a warm
//!   served run execute are laid out together, so the pages the kernel maps
//!   around each one (up to 64 KiB per fault) hold used code rather than
//!   unused neighbours. `link/order.py` regenerates the list; stale names
//!   are ignored, and a dependency added or changed makes every name of
//!   aurad's stale, so the `run` and `daemon` benches print how many names
//!   still match and warn when the list needs making again.
//!   `AURAD_LINK_ORDER=0` leaves it out.
//!
//! Depends on nothing but the environment Cargo gives build scripts.

use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=link/aurad.order");
    println!("cargo::rerun-if-env-changed=AURAD_PIE");
    println!("cargo::rerun-if-env-changed=AURAD_LINK_ORDER");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("PROFILE") != "release" || var("CARGO_CFG_TARGET_OS") != "linux" {
        return;
    }
    if var("AURAD_PIE") != "1" {
        println!("cargo::rustc-link-arg-bins=-no-pie");
    }
    // lld is the linker only on x86_64 GNU/Linux from Rust 1.90 on, and only
    // when no linker was chosen in RUSTFLAGS; GNU ld rejects the option.
    let lld = var("TARGET") == "x86_64-unknown-linux-gnu"
        && !var("CARGO_ENCODED_RUSTFLAGS").contains("link")
        && rustc_minor().is_some_and(|minor| minor >= 90);
    let order = std::path::Path::new(&var("CARGO_MANIFEST_DIR")).join("link/aurad.order");
    if lld && var("AURAD_LINK_ORDER") != "0" && order.is_file() {
        println!(
            "cargo::rustc-link-arg-bins=-Wl,--symbol-ordering-file={}",
            order.display()
        );
        println!("cargo::rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}

/// The minor version of the compiler Cargo builds with (`rustc 1.95.0 ...`).
fn rustc_minor() -> Option<u32> {
    let rustc = std::env::var_os("RUSTC")?;
    let out = Command::new(rustc).arg("-V").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace()
        .nth(1)?
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}
