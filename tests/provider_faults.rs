//! Runs against a model server having a bad day: the fault-injecting mock
//! (`tests/support/mock_llm/faults.rs`) returns 500s, 429s with
//! `Retry-After` (seconds or an HTTP date), hangs after the headers, cuts
//! streams mid-way, ends them early and garbles chunks, in each wire
//! format. Every run goes through the shared runner (`prepare` +
//! `execute`) with the production retry policy unless said otherwise.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use aurad::engine::RunOutcome;
use aurad::llm::anthropic::AnthropicProvider;
use aurad::llm::gemini::GeminiProvider;
use aurad::llm::openai::OpenAiProvider;
use aurad::llm::retry::{RetryPolicy, stream_with_retry_until};
use aurad::llm::{ChatRequest, Provider, ProviderError};
use aurad::run::{Job, PreparedRun, execute};
use aurad::store::Store;
use aurad::types::{Message, RetryReason, RunEvent, RunState};
use serde_json::Value;
use support::mock_llm::{Fault, FaultPlan, MockLlm, Recorded, Reply, RetryAfter};
use support::project::prepare_agent;
use tokio_util::sync::CancellationToken;

/// The answer of every run of the fault mix.
const ANSWER: &str = "The sum is 42, checked with the calculator.";

/// A project whose agent `a` talks to `mock` through a provider of `kind`.
fn project(mock: &MockLlm, kind: &str, agent: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    let base_url = match kind {
        "openai" => mock.base_url(),
        _ => mock.root_url(),
    };
    std::fs::write(
        dir.path().join("aurad.yaml"),
        format!("providers:\n  mock: {{ kind: {kind}, base_url: \"{base_url}\" }}\n"),
    )
    .unwrap();
    std::fs::write(dir.path().join("agents/a.yaml"), agent).unwrap();
    dir
}

/// Runs `prepared` to its end: the outcome, its events, how long it took.
async fn run(prepared: PreparedRun, store: &Store) -> (RunOutcome, Vec<RunEvent>, Duration) {
    let started = Instant::now();
    let mut events = Vec::new();
    let outcome = execute(
        Job::Agent(Box::new(prepared)),
        store,
        CancellationToken::new(),
        |e| events.push(e.clone()),
    )
    .await
    .unwrap();
    (outcome, events, started.elapsed())
}

fn retries(events: &[RunEvent]) -> Vec<(RetryReason, bool, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ModelRetry {
                reason,
                discarded_output,
                error,
                ..
            } => Some((*reason, *discarded_output, error.clone())),
            _ => None,
        })
        .collect()
}

/// Whether a recorded request already carries a tool result.
fn has_tool_result(request: &Recorded) -> bool {
    request
        .messages()
        .iter()
        .any(|m| m.get("role").and_then(Value::as_str) == Some("tool"))
}

/// 30 runs at once, each a calculator call then an answer, against a
/// server that answers 429 (`Retry-After: 1`) to every third model request
/// and 500 to 30% of the others (seeded): all 30 succeed within their
/// timeout, each with one tool call and the answer once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_runs_all_succeed_through_500s_and_429s() {
    const RUNS: usize = 30;
    let mock = MockLlm::start().await;
    mock.set_responder(|request| {
        if has_tool_result(request) {
            Reply::Text(ANSWER.into())
        } else {
            Reply::tool_call("c1", "calculator", r#"{"expression": "40 + 2"}"#)
        }
    });
    mock.set_faults(
        FaultPlan::new(0x5eed)
            .every(3, Fault::RateLimited(RetryAfter::Seconds(1)))
            .chance(0.3, Fault::Status(500)),
    );
    let timeout = Duration::from_secs(120);
    let dir = project(
        &mock,
        "openai",
        "model: mock/m\nsystem: s\ntools: [calculator]\nlimits: { timeout: 120s }\n",
    );
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let runs = (0..RUNS).map(|i| {
        let prepared = prepare_agent(dir.path(), &format!("add 40 and 2 (run {i})"));
        assert_eq!(prepared.retry, RetryPolicy::default());
        let store = store.clone();
        async move { run(prepared, &store).await }
    });
    let results = futures::future::join_all(runs).await;

    let mut succeeded = 0;
    let mut slowest = Duration::ZERO;
    let mut retried = 0;
    for (outcome, events, took) in &results {
        assert_eq!(
            outcome.state,
            RunState::Succeeded,
            "{:?}: {:?}",
            outcome.reason,
            retries(events)
        );
        assert_eq!(outcome.output.as_deref(), Some(ANSWER));
        assert!(*took < timeout, "{took:?}");
        let tool_results = events
            .iter()
            .filter(|e| matches!(e, RunEvent::ToolResult { .. }))
            .count();
        assert_eq!(tool_results, 1, "the tool ran once");
        succeeded += 1;
        slowest = slowest.max(*took);
        retried += retries(events).len();
    }
    let injected = mock.injected();
    let count = |f: &dyn Fn(&Fault) -> bool| injected.iter().filter(|i| f(&i.fault)).count();
    let (n500, n429) = (
        count(&|f| *f == Fault::Status(500)),
        count(&|f| matches!(f, Fault::RateLimited(_))),
    );
    let requests = mock.request_count();
    println!(
        "fault mix: {RUNS} runs, {requests} model requests, {n500} x 500, {n429} x 429 (Retry-After: 1); \
         {succeeded}/{RUNS} succeeded, {retried} retries, slowest run {slowest:?} (timeout {timeout:?})"
    );
    assert_eq!(succeeded, RUNS);
    // The faults were really there: each run needs 2 answers, every other
    // request was a fault.
    assert_eq!(requests, RUNS * 2 + n500 + n429);
    assert_eq!(n429, requests / 3);
    assert!(n500 > 10, "{n500} 500s");
    assert_eq!(retried, n500 + n429);
}

/// `Retry-After: 1` and `Retry-After: <HTTP date>` are each waited for: by
/// the mock's own clock, the next request comes no sooner.
#[tokio::test]
async fn retry_after_in_seconds_and_as_a_date_is_waited_for() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("waited".into()));
    mock.set_faults(
        FaultPlan::new(1)
            .at(1, Fault::RateLimited(RetryAfter::Seconds(1)))
            .at(
                2,
                Fault::RateLimited(RetryAfter::Date(Duration::from_secs(1))),
            ),
    );
    let dir = project(&mock, "openai", "model: mock/m\nsystem: s\n");
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let (outcome, events, _) = run(prepare_agent(dir.path(), "x"), &store).await;
    assert_eq!(outcome.state, RunState::Succeeded, "{:?}", outcome.reason);
    assert_eq!(outcome.output.as_deref(), Some("waited"));
    let sent = mock.requests();
    assert_eq!(sent.len(), 3);
    let gap = sent[1].received_at - sent[0].received_at;
    assert!(
        gap >= Duration::from_secs(1),
        "waited {gap:?} for Retry-After: 1"
    );
    let date = mock.injected()[1].retry_after.clone().unwrap();
    let until = httpdate::parse_http_date(&date).unwrap();
    assert!(
        sent[2].received_at_wall >= until,
        "the request after `Retry-After: {date}` came at {:?}",
        sent[2].received_at_wall
    );
    let reasons: Vec<RetryReason> = retries(&events).iter().map(|r| r.0).collect();
    assert_eq!(reasons, [RetryReason::Status, RetryReason::Status]);
    // The delays told are the waits asked for (at least).
    let delays: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::ModelRetry { delay_ms, .. } => Some(*delay_ms),
            _ => None,
        })
        .collect();
    assert!(delays[0] >= 1000, "{delays:?}");
}

/// A `Retry-After` longer than the run's time left fails the run at once
/// (not at its timeout) with the provider's own message, saying why.
#[tokio::test]
async fn a_retry_after_beyond_the_timeout_fails_at_once_with_the_providers_message() {
    for kind in ["openai", "anthropic", "gemini"] {
        let mock = MockLlm::start().await;
        mock.push(Reply::Text("never sent".into()));
        mock.set_faults(FaultPlan::new(2).at(1, Fault::RateLimited(RetryAfter::Seconds(30))));
        let dir = project(
            &mock,
            kind,
            "model: mock/m\nsystem: s\nlimits: { timeout: 5s }\n",
        );
        let store = Store::open(&dir.path().join("aurad.db")).unwrap();
        let (outcome, events, _) = run(prepare_agent(dir.path(), "x"), &store).await;
        // Failed, not timed out: it did not sit out the 5 s.
        assert_eq!(
            outcome.state,
            RunState::Failed,
            "{kind}: {:?}",
            outcome.reason
        );
        let reason = outcome.reason.unwrap();
        assert!(reason.contains("mock fault: HTTP 429"), "{kind}: {reason}");
        assert!(
            reason.contains("retry after 30.0s (Retry-After), which does not fit"),
            "{kind}: {reason}"
        );
        assert_eq!(mock.request_count(), 1, "{kind}");
        assert!(retries(&events).is_empty(), "{kind}");
    }
}

/// A 400 (and the other 4xx but 408/409/429) fails at once with the
/// provider's message after exactly one request, in each wire format; 408
/// and 409 are retried.
#[tokio::test]
async fn a_client_error_fails_at_once_after_one_request() {
    for kind in ["openai", "anthropic", "gemini"] {
        for status in [400, 401, 404, 422] {
            let mock = MockLlm::start().await;
            mock.push(Reply::Text("never sent".into()));
            mock.set_faults(FaultPlan::new(3).at(1, Fault::Status(status)));
            let dir = project(&mock, kind, "model: mock/m\nsystem: s\n");
            let store = Store::open(&dir.path().join("aurad.db")).unwrap();
            let (outcome, events, _) = run(prepare_agent(dir.path(), "x"), &store).await;
            assert_eq!(outcome.state, RunState::Failed, "{kind} {status}");
            let reason = outcome.reason.unwrap();
            assert!(
                reason.contains(&format!("mock fault: HTTP {status}")),
                "{kind} {status}: {reason}"
            );
            assert_eq!(mock.request_count(), 1, "{kind} {status}");
            assert!(retries(&events).is_empty(), "{kind} {status}");
        }
        for status in [408, 409, 529] {
            let mock = MockLlm::start().await;
            mock.push(Reply::Text("after a retry".into()));
            mock.set_faults(FaultPlan::new(4).at(1, Fault::Status(status)));
            let dir = project(&mock, kind, "model: mock/m\nsystem: s\n");
            let store = Store::open(&dir.path().join("aurad.db")).unwrap();
            let (outcome, _, _) = run(prepare_agent(dir.path(), "x"), &store).await;
            assert_eq!(
                outcome.output.as_deref(),
                Some("after a retry"),
                "{kind} {status}"
            );
            assert_eq!(mock.request_count(), 2, "{kind} {status}");
        }
    }
}

/// The text streamed before a cut (the events of the failed attempt).
fn text_before_retry(events: &[RunEvent]) -> (String, String) {
    let at = events
        .iter()
        .position(|e| matches!(e, RunEvent::ModelRetry { .. }))
        .expect("a retry");
    let text = |events: &[RunEvent]| -> String {
        events
            .iter()
            .filter_map(|e| match e {
                RunEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    };
    (text(&events[..at]), text(&events[at..]))
}

/// A stream cut mid-way (connection dropped), ended before its end marker,
/// or carrying a chunk that is not JSON is retried, in each wire format:
/// the run succeeds, the event log has the partial text, then a retry
/// saying it was discarded, then the whole answer; the final answer holds
/// it once.
#[tokio::test]
async fn a_cut_stream_is_retried_and_the_answer_is_not_duplicated() {
    let text = "The quick brown fox jumps over the lazy dog.";
    for kind in ["openai", "anthropic", "gemini"] {
        for (fault, reason) in [
            (Fault::Cut, RetryReason::StreamCut),
            (Fault::EndEarly, RetryReason::StreamCut),
            (Fault::InvalidChunk, RetryReason::InvalidChunk),
        ] {
            let mock = MockLlm::start().await;
            mock.push(Reply::Text(text.into()));
            mock.set_faults(FaultPlan::new(5).at(1, fault.clone()));
            let dir = project(&mock, kind, "model: mock/m\nsystem: s\n");
            let store = Store::open(&dir.path().join("aurad.db")).unwrap();
            let (outcome, events, _) = run(prepare_agent(dir.path(), "x"), &store).await;
            let what = format!("{kind} {fault:?}");
            assert_eq!(
                outcome.state,
                RunState::Succeeded,
                "{what}: {:?}",
                outcome.reason
            );
            assert_eq!(outcome.output.as_deref(), Some(text), "{what}");
            assert_eq!(mock.request_count(), 2, "{what}");
            let told = retries(&events);
            assert_eq!(told.len(), 1, "{what}: {told:?}");
            assert_eq!(told[0].0, reason, "{what}: {told:?}");
            let (before, after) = text_before_retry(&events);
            assert!(
                !before.is_empty() && text.starts_with(&before),
                "{what}: {before:?}"
            );
            assert!(told[0].1, "{what}: the partial text is declared discarded");
            assert_eq!(after, text, "{what}");
            // The stored run agrees: its output is the answer once.
            let stored = store
                .get_run(&support::project::run_id(&events))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(stored.output.as_deref(), Some(text), "{what}");
        }
    }
}

/// A cut after a tool ran re-sends the model call, never the tool: the
/// tool's side effect happens once, and the retry comes after its result.
#[tokio::test]
async fn a_cut_after_a_tool_ran_re_sends_the_model_call_not_the_tool() {
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call(
        "c1",
        "bash",
        r#"{"command": "echo ran >> side_effects.log"}"#,
    ));
    mock.push(Reply::Text("Logged it once.".into()));
    mock.set_faults(FaultPlan::new(6).at(2, Fault::Cut));
    let dir = project(&mock, "openai", "model: mock/m\nsystem: s\ntools: [bash]\n");
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let (outcome, events, _) = run(prepare_agent(dir.path(), "log it"), &store).await;
    assert_eq!(outcome.state, RunState::Succeeded, "{:?}", outcome.reason);
    assert_eq!(outcome.output.as_deref(), Some("Logged it once."));
    let log = std::fs::read_to_string(dir.path().join("side_effects.log")).unwrap();
    assert_eq!(log, "ran\n", "the tool ran exactly once");
    let result_at = events
        .iter()
        .position(|e| matches!(e, RunEvent::ToolResult { .. }))
        .unwrap();
    let retry_at = events
        .iter()
        .position(|e| matches!(e, RunEvent::ModelRetry { .. }))
        .unwrap();
    assert!(retry_at > result_at);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, RunEvent::ToolCall { .. }))
            .count(),
        1
    );
    // The re-sent call carries the tool's result, as the cut one did.
    let sent = mock.requests();
    assert_eq!(sent.len(), 3);
    assert_eq!(sent[1].body, sent[2].body);
    assert!(has_tool_result(&sent[2]));
}

fn chat(text: &str) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![Message::user(text)],
        tools: vec![],
        temperature: None,
        max_tokens: None,
        output_schema: None,
        cache_key: None,
    }
}

/// A provider of `kind` talking to `mock`, with a short idle timeout.
fn idle_provider(kind: &str, mock: &MockLlm, idle: Duration) -> Arc<dyn Provider> {
    let client = reqwest::Client::new();
    match kind {
        "openai" => Arc::new(
            OpenAiProvider::new(mock.base_url(), None, client, true).with_idle_timeout(idle),
        ),
        "anthropic" => Arc::new(
            AnthropicProvider::new(mock.root_url(), None, client, true).with_idle_timeout(idle),
        ),
        _ => Arc::new(GeminiProvider::new(mock.root_url(), None, client).with_idle_timeout(idle)),
    }
}

/// A provider that sends its headers and then nothing is cut after the
/// idle timeout and retried, in each wire format; through a run too.
#[tokio::test]
async fn a_hanging_provider_is_cut_after_the_idle_timeout_and_retried() {
    let idle = Duration::from_millis(300);
    for kind in ["openai", "anthropic", "gemini"] {
        let mock = MockLlm::start().await;
        mock.push(Reply::Text("awake again".into()));
        mock.set_faults(FaultPlan::new(7).at(1, Fault::Hang));
        let provider = idle_provider(kind, &mock, idle);
        let mut told = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let turn = stream_with_retry_until(
            provider.as_ref(),
            &chat("x"),
            &RetryPolicy::default(),
            Some(deadline),
            &mut |_| {},
            &mut |n| told.push((n.reason, n.error.clone())),
        )
        .await
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(turn.text, "awake again", "{kind}");
        assert_eq!(told.len(), 1, "{kind}: {told:?}");
        assert_eq!(told[0].0, RetryReason::Idle, "{kind}");
        assert!(
            matches!(&told[0].1, ProviderError::Cut { detail, .. } if detail.contains("idle timeout of 0.3s")),
            "{kind}: {:?}",
            told[0].1
        );
        let sent = mock.requests();
        assert_eq!(sent.len(), 2, "{kind}");
        assert!(sent[1].received_at - sent[0].received_at >= idle, "{kind}");
    }

    // No answer head at all (the request is read, nothing comes back):
    // the same idle timeout bounds the wait for the head.
    let mock = MockLlm::start().await;
    mock.push(Reply::Hang);
    mock.push(Reply::Text("awake again".into()));
    let provider = idle_provider("openai", &mock, idle);
    let mut told = Vec::new();
    let turn = stream_with_retry_until(
        provider.as_ref(),
        &chat("x"),
        &RetryPolicy::default(),
        Some(tokio::time::Instant::now() + Duration::from_secs(30)),
        &mut |_| {},
        &mut |n| told.push(n.error.to_string()),
    )
    .await
    .unwrap();
    assert_eq!(turn.text, "awake again");
    assert_eq!(
        told,
        ["provider went idle: no answer within the idle timeout of 0.3s"]
    );

    // Through the runner, the idle timeout of the run's provider applies.
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("awake again".into()));
    mock.set_faults(FaultPlan::new(8).at(1, Fault::Hang));
    let dir = project(
        &mock,
        "openai",
        "model: mock/m\nsystem: s\nlimits: { timeout: 20s }\n",
    );
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let mut prepared = prepare_agent(dir.path(), "x");
    prepared.models[0].provider = idle_provider("openai", &mock, idle);
    let (outcome, events, _) = run(prepared, &store).await;
    assert_eq!(outcome.state, RunState::Succeeded, "{:?}", outcome.reason);
    assert_eq!(outcome.output.as_deref(), Some("awake again"));
    let told = retries(&events);
    assert_eq!(told.len(), 1);
    assert_eq!((told[0].0, told[0].1), (RetryReason::Idle, false));
}

/// A provider that fails every time is retried only while the run's time
/// allows, then the run fails with the provider's last message (not a
/// timeout), far sooner than a fixed count of long waits would allow.
#[tokio::test]
async fn retries_stop_within_the_run_timeout_with_the_providers_message() {
    let mock = MockLlm::start().await;
    mock.set_faults(FaultPlan::new(9).every(1, Fault::Status(503)));
    let dir = project(
        &mock,
        "openai",
        "model: mock/m\nsystem: s\nlimits: { timeout: 3s }\n",
    );
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let (outcome, events, took) = run(prepare_agent(dir.path(), "x"), &store).await;
    assert!(
        matches!(outcome.state, RunState::Failed | RunState::TimedOut),
        "{:?}",
        outcome.state
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    let n = mock.request_count();
    assert!(n >= 3, "only {n} attempts in 3 s");
    // Each failed attempt but the last was retried (the last may have been
    // told as a retry whose wait the run's timer cut).
    let told = retries(&events).len();
    assert!(
        told == n - 1 || (told == n && outcome.state == RunState::TimedOut),
        "{told} retries of {n} attempts"
    );
    if outcome.state == RunState::Failed {
        let reason = outcome.reason.unwrap();
        assert!(reason.contains("mock fault: HTTP 503"), "{reason}");
        assert!(reason.contains("no time left"), "{reason}");
    }
}

/// `aurad run` shows a cut answer as it happened: the partial text, then
/// the retry saying it is discarded, then the whole answer, which is what
/// the run stored once.
#[test]
fn aurad_run_says_the_partial_answer_is_discarded() {
    let text = "The quick brown fox jumps over the lazy dog.";
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Text(text.into()));
    mock.set_faults(FaultPlan::new(10).at(1, Fault::Cut));
    let dir = project(&mock, "openai", "model: mock/m\nsystem: s\n");
    let out = assert_cmd::cargo::cargo_bin_cmd!("aurad")
        .args(["run", "a", "--input", "x", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(out.status.success(), "{stderr}");
    let (partial, whole) = stdout
        .strip_suffix('\n')
        .and_then(|s| s.split_once('\n'))
        .unwrap_or_else(|| panic!("{stdout:?}"));
    assert!(
        !partial.is_empty() && text.starts_with(partial),
        "{stdout:?}"
    );
    assert_eq!(whole, text);
    assert!(
        stderr.contains("retry 1 in")
            && stderr.contains("the partial answer above is discarded and the answer starts over"),
        "{stderr}"
    );
}

/// Issue #32 item 9: a provider that hangs was never retried when its idle
/// cut (5 minutes) was longer than the run's budget: the run timed out. Now
/// an attempt without progress for half the time left is cut and retried,
/// and the run succeeds within its timeout.
#[tokio::test]
async fn a_hung_call_is_cut_within_the_runs_time_and_retried() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Hang);
    mock.push(Reply::Text(ANSWER.into()));
    let dir = project(
        &mock,
        "openai",
        "model: mock/m\nsystem: s\nlimits: { timeout: 6s }\n",
    );
    let store = Store::open(&dir.path().join("aurad.db")).unwrap();
    let (outcome, events, _) = run(prepare_agent(dir.path(), "x"), &store).await;
    assert_eq!(outcome.state, RunState::Succeeded, "{:?}", outcome.reason);
    assert_eq!(outcome.output.as_deref(), Some(ANSWER));
    let told = retries(&events);
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].0, RetryReason::Idle, "{told:?}");
    assert!(told[0].2.contains("half the run's time left"), "{told:?}");
    assert_eq!(mock.request_count(), 2);
}
