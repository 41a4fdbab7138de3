//! `aurad test [AGENT...]`: runs the regression cases of
//! `agents/NAME.test.yaml` through the engine with their scripted (or
//! recorded) model answers and tool results, offline, and checks each
//! case's expectations. Exit 0 when every case passes, 1 when one fails, 2
//! when a test or agent file has errors. `--junit FILE` writes JUnit XML
//! (quick-junit: the writer cargo-nextest uses, so CI systems read it);
//! `--update` asks the agent's real provider instead and writes its
//! answers back as the cases' `turns`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::offline::{load_agent, prepare_offline, tools_for};
use super::{EXIT_CONFIG, EXIT_FAILED, EXIT_OK, open_store, print_diagnostics};
use crate::config::agent_tests::{
    self, Answers, Case, ScriptedCall, ScriptedTurn, TestFile, render_updated,
};
use crate::config::{self, Diagnostic};
use crate::llm::retry::RetryPolicy;
use crate::llm::{ModelTurn, Provider};
use crate::registry::{Snapshot, provider_for};
use crate::replay::expect::{self, Unmet};
use crate::replay::{Played, RecordedApprovals, RecordedResult, ScriptedProvider, Trace, play};
use crate::store::Store;
use crate::types::ToolCall;

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The agents whose cases run; default: every agent with a test file.
    #[arg(value_name = "AGENT")]
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
    let (files, diagnostics) = agent_tests::load_all(root, &names);
    if diagnostics.iter().any(Diagnostic::is_error) {
        print_diagnostics(&diagnostics);
        return EXIT_CONFIG;
    }
    for wanted in &args.agents {
        if !files.iter().any(|f| f.agent == *wanted) {
            eprintln!("error: no tests for agent `{wanted}`: create agents/{wanted}.test.yaml");
            return EXIT_CONFIG;
        }
    }
    let files: Vec<TestFile> = files
        .into_iter()
        .filter(|f| args.agents.is_empty() || args.agents.contains(&f.agent))
        .collect();
    if files.is_empty() {
        eprintln!("error: no test files: write agents/NAME.test.yaml (see the README)");
        return EXIT_CONFIG;
    }
    let needs_store = files
        .iter()
        .flat_map(|f| &f.cases)
        .any(|c| matches!(c.answers, Answers::Run(_)));
    let store = if needs_store {
        match open_store(root) {
            Ok(store) => Some(store),
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_FAILED;
            }
        }
    } else {
        None
    };
    let Some(runtime) = super::runtime() else {
        return EXIT_FAILED;
    };
    let mut results = Vec::new();
    let mut broken = false;
    for file in &files {
        let snapshot = match load_agent(root, &file.agent) {
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
            let outcome = runtime.block_on(run_case(
                &snapshot,
                &file.agent,
                case,
                store.as_ref(),
                args.update,
            ));
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
    if let Some(store) = store {
        let _ = store.close();
    }
    runtime.shutdown_timeout(Duration::from_millis(500));
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

/// Runs one case: the unmet expectations, and the new turns under
/// `--update`.
async fn run_case(
    snapshot: &Snapshot,
    agent_name: &str,
    case: &Case,
    store: Option<&Store>,
    update: bool,
) -> Result<(Vec<Unmet>, Option<Vec<ScriptedTurn>>), String> {
    let agent = &snapshot.project.agents[agent_name];
    let mut approvals = None;
    let (turns, recorded) = match &case.answers {
        Answers::Scripted(turns) => scripted(turns),
        Answers::Run(run_id) => {
            let store = store.ok_or("the store is not open")?;
            let events = store
                .run_events(run_id)
                .await
                .map_err(|e| format!("run {run_id}: {e}"))?;
            let trace = Trace::from_events(&events);
            if trace.end.is_none() {
                return Err(format!(
                    "run {run_id} has no complete record of events in the store (unknown, pruned or unfinished)"
                ));
            }
            approvals = RecordedApprovals::from_events(&events);
            (trace.model_turns(), trace.tool_results())
        }
    };
    let (spec, sandbox) = prepare_offline(snapshot, agent, case.input.clone(), "test")?;
    let tools = tools_for(snapshot, agent, recorded, &case.real_tools, sandbox);
    let scripted_count = turns.len();
    let scripted_provider = ScriptedProvider::new(turns);
    let real_provider: Option<std::sync::Arc<dyn Provider>> = if update {
        let (provider, _) = provider_for(
            &agent.model,
            &snapshot.project.settings,
            &snapshot.http,
            &config::process_env,
        )
        .map_err(|e| format!("cannot --update from `{}`: {e}", agent.model))?;
        Some(provider)
    } else {
        None
    };
    let provider: &dyn Provider = match &real_provider {
        Some(p) => p.as_ref(),
        None => &scripted_provider,
    };
    let played = play(
        &spec,
        provider,
        &tools,
        approvals.as_ref().map(|a| a as _),
        &snapshot.redactor,
        RetryPolicy::default(),
    )
    .await;
    let trace = played.trace();
    let mut unmet = expect::check(&case.expect, &played.outcome, &trace);
    if !update && scripted_provider.asked() < scripted_count {
        unmet.push(Unmet {
            expectation: "turns".into(),
            expected: format!("the run to use all {scripted_count} scripted model turn(s)"),
            got: format!("it ended after {}", scripted_provider.asked()),
        });
    }
    let new_turns = update.then(|| rerecorded(&played));
    Ok((unmet, new_turns))
}

/// A script's model turns (each call with an id) and its tool results.
fn scripted(turns: &[ScriptedTurn]) -> (Vec<ModelTurn>, Vec<RecordedResult>) {
    let mut results = Vec::new();
    let model_turns = turns
        .iter()
        .enumerate()
        .map(|(t, turn)| ModelTurn {
            text: turn.text.clone(),
            tool_calls: turn
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    if let Some(output) = &call.result {
                        results.push(RecordedResult {
                            name: call.name.clone(),
                            arguments: call.arguments.clone(),
                            output: output.clone(),
                            is_error: call.is_error,
                        });
                    }
                    ToolCall {
                        id: format!("call_{}_{}", t + 1, i + 1),
                        name: call.name.clone(),
                        arguments: call.arguments.to_string(),
                    }
                })
                .collect(),
            usage: turn.usage,
            ..ModelTurn::default()
        })
        .collect();
    (model_turns, results)
}

/// The turns of a played run as a script: each call with the result it got.
fn rerecorded(played: &Played) -> Vec<ScriptedTurn> {
    played
        .trace()
        .turns
        .iter()
        .map(|turn| ScriptedTurn {
            text: turn.text.clone(),
            tool_calls: turn
                .calls
                .iter()
                .map(|call| {
                    let result = turn.results.iter().find(|r| r.id == call.id);
                    ScriptedCall {
                        name: call.name.clone(),
                        arguments: crate::replay::tools::parse_arguments(&call.arguments),
                        result: result.map(|r| r.output.clone()),
                        is_error: result.is_some_and(|r| r.is_error),
                    }
                })
                .collect(),
            usage: turn.usage,
        })
        .collect()
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
