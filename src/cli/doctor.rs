//! `aurad doctor [--json] [--strict]`: prints what `app::doctor` found, one
//! line per check with its status word and the fix indented below, or one
//! JSON object. Exits 0 when nothing is an error, 1 when something is (or,
//! with `--strict`, when something is a warning).

use std::path::Path;

use clap::Args;

use super::{EXIT_FAILED, EXIT_OK};
use crate::app::doctor::{self, Report};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Print one JSON object: `{"checks": [{"check", "status", "finding",
    /// "fix"}], "errors": N, "warnings": N}`.
    #[arg(long)]
    pub json: bool,
    /// Count warnings as errors in the exit code.
    #[arg(long)]
    pub strict: bool,
}

pub fn run(root: &Path, args: DoctorArgs) -> i32 {
    let report = doctor::examine(root);
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => say!("{text}"),
            Err(e) => {
                eprintln!("error: cannot write the report as JSON: {e}");
                return EXIT_FAILED;
            }
        }
    } else {
        print_human(&report);
    }
    let failing = report.errors + if args.strict { report.warnings } else { 0 };
    if failing > 0 { EXIT_FAILED } else { EXIT_OK }
}

fn print_human(report: &Report) {
    for check in &report.checks {
        say!(
            "{:<5}  {:<10}  {}",
            check.status.as_str(),
            check.check.as_str(),
            check.finding
        );
        if let Some(fix) = &check.fix {
            say!("       fix: {fix}");
        }
    }
    say!("{} error(s), {} warning(s)", report.errors, report.warnings);
}
