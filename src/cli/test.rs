//! `aurad test [AGENT...]`: runs the regression cases of
//! `agents/NAME.test.yaml` through the engine with their scripted (or
//! recorded) model answers and tool results, offline, and checks each
//! case's expectations. Exit 0 when every case passes (or there is no test
//! file at all), 1 when one fails, 2 when a test or agent file has errors
//! or a named agent has no test file. `--junit FILE` writes JUnit XML
//! (quick-junit: the writer cargo-nextest uses, so CI systems read it);
//! `--update` asks the agent's real provider instead and writes its
//! answers back as the cases' `turns`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK, print_diagnostics, show_for_agent};
use crate::app::cases::{CaseRunner, Unmet, load_agent};
use crate::config::cases::{self, TestFile, render_updated};
use crate::config::{self, Diagnostic};

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The agents whose cases run; default: every agent with a test file.
    #[arg(value_name = "AGENT", add = super::completions::agents())]
    pub agents: Vec<String>,
    /// Also write the results as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Ask the agent's real provider (its key must be set) and write its
    /// answers back into the test file as each case's `turns`.
    #[arg(long)]
    pub update: bool,
}

/// What became of one case.
struct CaseResult {
    agent: String,
    case: String,
    /// `agents/a.test.yaml:12`.
    place: String,
    time: Duration,
    outcome: Result<Vec<Unmet>, String>,
}

pub fn run(root: &Path, args: TestArgs) -> i32 {
    let names = config::agent_names(root);
    let (files, diagnostics) = cases::load_all(root, &names);
    if diagnostics.iter().any(Diagnostic::is_error) {
        print_diagnostics(&diagnostics);
        return EXIT_CONFIG;
    }
    for wanted in &args.agents {
        if !names.contains(wanted) {
            let hint =
                crate::config::suggest::did_you_mean(wanted, names.iter().map(String::as_str))
                    .map(|hint| format!("; {hint}"))
                    .unwrap_or_default();
            eprintln!(
                "error: no agent named `{wanted}` in {}{hint} (agents: {})",
                root.join("agents").display(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            );
            return EXIT_CONFIG;
        }
        if !files.iter().any(|f| f.agent == *wanted) {
            eprintln!("error: agent `{wanted}` has no test file: create agents/{wanted}.test.yaml");
            return EXIT_CONFIG;
        }
    }
    let files: Vec<TestFile> = files
        .into_iter()
        .filter(|f| args.agents.is_empty() || args.agents.contains(&f.agent))
        .collect();
    if files.is_empty() {
        // Nothing asked for is missing: no agent has cases yet.
        println!(
            "aurad test: no agents/*.test.yaml found in {}, nothing to test; \
             write agents/NAME.test.yaml to add regression cases",
            root.display()
        );
        if let Some(path) = &args.junit
            && let Err(e) = write_junit(path, &[])
        {
            eprintln!(
                "error: cannot write the JUnit report {}: {e}",
                path.display()
            );
            return EXIT_FAILED;
        }
        return EXIT_OK;
    }
    let runner = match CaseRunner::new(root, &files) {
        Ok(runner) => runner,
        Err(message) => {
            eprintln!("error: {message}");
            return EXIT_FAILED;
        }
    };
    let mut results = Vec::new();
    let mut broken = false;
    for file in &files {
        let (report, snapshot) = load_agent(root, &file.agent);
        show_for_agent(&report, &file.agent);
        let snapshot = match snapshot {
            Ok(snapshot) => snapshot,
            Err(message) => {
                eprintln!("error: {}: {message}", file.path.display());
                broken = true;
                continue;
            }
        };
        let mut updated = Vec::new();
        for case in &file.cases {
            let started = Instant::now();
            let outcome = runner.run(&snapshot, &file.agent, case, args.update);
            let outcome = outcome.map(|(unmet, turns)| {
                if let Some(turns) = turns {
                    updated.push((case.name.clone(), turns));
                }
                unmet
            });
            let result = CaseResult {
                agent: file.agent.clone(),
                case: case.name.clone(),
                place: format!("{}:{}", file.path.display(), case.line),
                time: started.elapsed(),
                outcome,
            };
            print_result(&result);
            results.push(result);
        }
        if args.update && !updated.is_empty() {
            let written = render_updated(file, &updated).and_then(|text| {
                std::fs::write(root.join(&file.path), text).map_err(|e| e.to_string())
            });
            match written {
                Ok(()) => println!(
                    "updated {}: {} case(s) re-recorded",
                    file.path.display(),
                    updated.len()
                ),
                Err(e) => {
                    eprintln!("error: cannot write {}: {e}", file.path.display());
                    broken = true;
                }
            }
        }
    }
    runner.close();
    let failed = results.iter().filter(|r| !passed(r)).count();
    println!(
        "aurad test: {} case(s) passed, {failed} failed",
        results.len() - failed
    );
    if let Some(path) = &args.junit
        && let Err(e) = write_junit(path, &results)
    {
        eprintln!(
            "error: cannot write the JUnit report {}: {e}",
            path.display()
        );
        return EXIT_FAILED;
    }
    if broken {
        EXIT_CONFIG
    } else if failed > 0 {
        EXIT_FAILED
    } else {
        EXIT_OK
    }
}

fn passed(result: &CaseResult) -> bool {
    matches!(&result.outcome, Ok(unmet) if unmet.is_empty())
}

fn print_result(result: &CaseResult) {
    let name = format!("{}/{}", result.agent, result.case);
    match &result.outcome {
        Ok(unmet) if unmet.is_empty() => println!("ok    {name}"),
        Ok(unmet) => {
            println!("FAIL  {name} ({})", result.place);
            for u in unmet {
                println!("  {}", u.to_string().replace('\n', "\n  "));
            }
        }
        Err(message) => println!("ERROR {name} ({}): {message}", result.place),
    }
}

fn write_junit(path: &Path, results: &[CaseResult]) -> Result<(), String> {
    let mut report = Report::new("aurad test");
    let mut suites: Vec<TestSuite> = Vec::new();
    for result in results {
        let index = match suites.iter().position(|s| s.name.as_str() == result.agent) {
            Some(i) => i,
            None => {
                suites.push(TestSuite::new(result.agent.clone()));
                suites.len() - 1
            }
        };
        let status = match &result.outcome {
            Ok(unmet) if unmet.is_empty() => TestCaseStatus::success(),
            Ok(unmet) => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                let first = &unmet[0];
                status.set_message(format!(
                    "{}: expectation `{}` not met",
                    result.place, first.expectation
                ));
                status.set_type(first.expectation.clone());
                let all: Vec<String> = unmet.iter().map(ToString::to_string).collect();
                status.set_description(format!("{}\n{}", result.place, all.join("\n")));
                status
            }
            Err(message) => {
                let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
                status.set_message(format!("{}: {message}", result.place));
                status
            }
        };
        let mut case = TestCase::new(result.case.clone(), status);
        case.set_classname(format!("agents.{}", result.agent));
        case.set_time(result.time);
        suites[index].add_test_case(case);
    }
    report.add_test_suites(suites);
    let xml = report.to_string().map_err(|e| e.to_string())?;
    std::fs::write(path, xml).map_err(|e| e.to_string())
}
