//! A throwaway project directory whose `mock` provider points at a mock
//! server, with one agent `a`.

use std::time::Duration;

use aurad::engine::RunOutcome;
use aurad::llm::retry::RetryPolicy;
use aurad::run::{Job, RunRequest, execute, prepare};
use aurad::store::Store;
use aurad::types::{RunEvent, Trigger};
use tokio_util::sync::CancellationToken;

use super::mock_llm::MockLlm;

/// Creates the project; `agent` is the YAML of `agents/a.yaml`.
pub fn project_with_mock(mock: &MockLlm, agent: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("aurad.yaml"),
        format!(
            "providers:\n  mock: {{ kind: openai, base_url: \"{}\" }}\n",
            mock.base_url()
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("agents/a.yaml"), agent).unwrap();
    dir
}

/// Appends `settings` (YAML lines) to the project's `aurad.yaml`.
pub fn add_settings(root: &std::path::Path, settings: &str) {
    let path = root.join("aurad.yaml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(settings);
    std::fs::write(path, text).unwrap();
}

/// A project run through the shared runner (`prepare` + `execute`), as
/// `aurad run` does, with fast retries.
pub struct Project {
    pub dir: tempfile::TempDir,
}

impl Project {
    pub fn new(mock: &MockLlm, agent: &str) -> Project {
        Project {
            dir: project_with_mock(mock, agent),
        }
    }

    /// With `settings` (YAML lines) added to `aurad.yaml`.
    pub fn with_settings(mock: &MockLlm, agent: &str, settings: &str) -> Project {
        let project = Project::new(mock, agent);
        add_settings(project.dir.path(), settings);
        project
    }

    /// Runs agent `a` once: the model makes `calls` (tool name, arguments)
    /// in one turn, then answers. Returns each call's (output, is_error)
    /// by call id (`c00`, `c01`, ...).
    pub async fn run_calls(
        &self,
        mock: &MockLlm,
        calls: &[(&str, serde_json::Value)],
    ) -> std::collections::BTreeMap<String, (String, bool)> {
        let calls: Vec<(String, String, String)> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| (format!("c{i:02}"), name.to_string(), args.to_string()))
            .collect();
        mock.push(super::mock_llm::Reply::ToolCalls(calls));
        mock.push(super::mock_llm::Reply::Text("done".into()));
        let (_, events, _) = self.run("go", CancellationToken::new()).await;
        tool_results(&events)
    }

    pub async fn run(
        &self,
        input: &str,
        cancel: CancellationToken,
    ) -> (RunOutcome, Vec<RunEvent>, Store) {
        run_agent(self.dir.path(), input, cancel).await
    }
}

/// Agent `a` of the project at `root`, prepared with `input` as `aurad
/// run` prepares it (the production retry policy included).
pub fn prepare_agent(root: &std::path::Path, input: &str) -> aurad::run::PreparedRun {
    let loaded = aurad::config::load(root, &|_| None);
    let (snapshot, diags) = aurad::registry::build(loaded, &|_| None);
    assert!(diags.iter().all(|d| !d.is_error()), "{diags:?}");
    let request = RunRequest {
        input: Some(input.into()),
        ..RunRequest::new("a", Trigger::Test)
    };
    prepare(&snapshot, request, &|_| None).unwrap()
}

/// Runs agent `a` of the project at `root` with `input` through the shared
/// runner (`prepare` + `execute`), as `aurad run` does, with fast retries.
pub async fn run_agent(
    root: &std::path::Path,
    input: &str,
    cancel: CancellationToken,
) -> (RunOutcome, Vec<RunEvent>, Store) {
    let mut prepared = prepare_agent(root, input);
    prepared.retry = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
    };
    let store = Store::open(&root.join("aurad.db")).unwrap();
    let mut events = Vec::new();
    let outcome = execute(Job::Agent(Box::new(prepared)), &store, cancel, |e| {
        events.push(e.clone())
    })
    .await
    .unwrap();
    (outcome, events, store)
}

/// The run id of a run's events (from its first, `started`).
pub fn run_id(events: &[RunEvent]) -> String {
    match events.first() {
        Some(RunEvent::Started { run_id, .. }) => run_id.clone(),
        other => panic!("the first event is not `started`: {other:?}"),
    }
}

/// The tool results among a run's events, by call id: (output, is_error).
pub fn tool_results(events: &[RunEvent]) -> std::collections::BTreeMap<String, (String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ToolResult {
                id,
                output,
                is_error,
                ..
            } => Some((id.clone(), (output.clone(), *is_error))),
            _ => None,
        })
        .collect()
}
