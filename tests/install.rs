//! From a clone to a first run, as a newcomer does it (issue #36's "done
//! when"): `cargo install --path .`, `aurad init demo`, `cd demo`,
//! `aurad run hello --model test`, `aurad doctor`, with the installed
//! binary found on PATH, not the one the other tests build.
//!
//! `cargo install` builds the release profile, in a target directory of its
//! own (`target/install-test`, kept between runs, so only the first run pays
//! for the whole build); `.ci/run` then checks that binary's link hardening.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failed step should stop it loudly"
)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

fn show(step: &str, out: &Output) -> String {
    format!(
        "{step}: {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `aurad ARGS` in `dir` the way a shell would: by name, from PATH
/// holding only the installed binary's folder and the system's.
fn aurad(bin_dir: &Path, dir: &Path, args: &[&str]) -> Output {
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display());
    Command::new("aurad")
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("HOME", dir)
        .output()
        .expect("run the installed aurad")
}

#[test]
fn cargo_install_then_init_run_and_doctor() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("cargo-root");
    let target: PathBuf = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| repo().join("target"), PathBuf::from)
        .join("install-test");
    let out = Command::new(cargo())
        .args(["install", "--locked", "--path"])
        .arg(repo())
        .arg("--root")
        .arg(&root)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show("cargo install", &out));
    let bin_dir = root.join("bin");
    assert!(
        bin_dir.join("aurad").is_file(),
        "no aurad in {}",
        bin_dir.display()
    );

    let work = home.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let out = aurad(&bin_dir, &work, &["init", "demo"]);
    assert!(out.status.success(), "{}", show("aurad init demo", &out));
    let demo = work.join("demo");

    let out = aurad(&bin_dir, &demo, &["run", "hello", "--model", "test"]);
    assert!(out.status.success(), "{}", show("aurad run hello", &out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("calculator: ok: 14")
            && stdout.contains("load_skill: ok: [Skill: arithmetic]"),
        "{}",
        show("aurad run hello", &out)
    );

    let out = aurad(&bin_dir, &demo, &["doctor"]);
    assert!(out.status.success(), "{}", show("aurad doctor", &out));
}

/// What `cargo package` would ship (and `cargo install aurad` build): the
/// sources with the files they include, the licences, the docs; no tests.
#[test]
fn the_package_holds_what_a_build_needs_and_no_tests() {
    let out = Command::new(cargo())
        .args(["package", "--list", "--allow-dirty", "--offline"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        show("cargo package --list", &out)
    );
    let list = String::from_utf8_lossy(&out.stdout);
    let files: Vec<&str> = list.lines().collect();
    for needed in [
        "Cargo.toml",
        "Cargo.lock",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "src/main.rs",
        "src/app/init/hello.yaml",
        "src/app/init/gitignore",
        "src/api/dashboard/assets/app.js",
    ] {
        assert!(files.contains(&needed), "{needed} is not packaged:\n{list}");
    }
    assert!(
        !files
            .iter()
            .any(|f| f.starts_with("tests/") || f.starts_with("benches/")),
        "tests or benchmarks are packaged:\n{list}"
    );
}
