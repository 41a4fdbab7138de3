//! `aurad test`'s cases run: each through the engine with its scripted
//! (or recorded) model answers and tool results, offline, its
//! expectations checked; under `--update`, the agent's real provider
//! answers instead and the turns it gave are the case's new script.

use std::path::Path;
use std::time::Duration;

use super::offline::{prepare_offline, tools_for};
use super::project::{open_store, runtime};
use crate::config::{
    self,
    cases::{Answers, Case, ScriptedCall, ScriptedTurn, TestFile},
};
use crate::llm::retry::RetryPolicy;
use crate::llm::{ModelTurn, Provider};
use crate::registry::{Snapshot, provider_for};
use crate::replay::expect;
pub use crate::replay::expect::Unmet;
use crate::replay::{Played, RecordedApprovals, RecordedResult, ScriptedProvider, Trace, play};
use crate::store::Store;
use crate::types::{ToolCall, Trigger};

pub use super::offline::load_agent;

/// Runs the cases of a set of test files.
pub struct CaseRunner {
    runtime: tokio::runtime::Runtime,
    /// Open when a case replays a stored run's answers.
    store: Option<Store>,
}

/// What a case came to: the expectations it did not meet, and under
/// `--update` the turns it was given.
pub type CaseOutcome = Result<(Vec<Unmet>, Option<Vec<ScriptedTurn>>), String>;

impl CaseRunner {
    /// A runner for `files` of the project at `root` (opening its store
    /// when a case names a stored run).
    pub fn new(root: &Path, files: &[TestFile]) -> Result<CaseRunner, String> {
        let needs_store = files
            .iter()
            .flat_map(|f| &f.cases)
            .any(|c| matches!(c.answers, Answers::Run(_)));
        let store = if needs_store {
            Some(open_store(root).map_err(|e| e.to_string())?)
        } else {
            None
        };
        Ok(CaseRunner {
            runtime: runtime()?,
            store,
        })
    }

    /// Runs `case` of agent `agent_name` of `snapshot`.
    pub fn run(
        &self,
        snapshot: &Snapshot,
        agent_name: &str,
        case: &Case,
        update: bool,
    ) -> CaseOutcome {
        self.runtime.block_on(run_case(
            snapshot,
            agent_name,
            case,
            self.store.as_ref(),
            update,
        ))
    }

    /// Closes the store and stops the runtime.
    pub fn close(self) {
        if let Some(store) = self.store {
            let _ = store.close();
        }
        self.runtime.shutdown_timeout(Duration::from_millis(500));
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
    let (spec, sandbox) = prepare_offline(snapshot, agent, case.input.clone(), Trigger::Test)?;
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
