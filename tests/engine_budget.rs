//! Usage, cost, budgets and structured output end to end through the shared
//! runner: the mock model on 127.0.0.1 (10 input / 5 output tokens per
//! answer), `prices` in aurad.yaml, a real SQLite file.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use aurad::store::RunFilter;
use aurad::types::{RunEvent, RunState};
use serde_json::json;
use support::mock_llm::{MockLlm, Reply};
use support::project::{Project, run_id};
use tokio_util::sync::CancellationToken;

/// $1 per million input tokens, $2 per million output tokens: one mock
/// answer (10 in, 5 out) costs $0.00002.
const PRICES: &str = "prices:\n  mock/m: { input_per_mtok: 1.0, output_per_mtok: 2.0 }\n";
const ANSWER_COST: f64 = 0.000_02;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[tokio::test]
async fn cost_is_computed_per_call_and_stored_with_the_run() {
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call("c1", "current_time", "{}"));
    mock.push(Reply::Text("It is late.".into()));
    let agent = "model: mock/m\nsystem: Be brief.\ntools: [current_time]\n";
    let project = Project::with_settings(&mock, agent, PRICES);
    let (outcome, events, store) = project
        .run("what time is it?", CancellationToken::new())
        .await;
    assert_eq!(outcome.state, RunState::Succeeded, "{outcome:?}");
    assert_eq!(outcome.usage.input_tokens, Some(20));
    assert_eq!(outcome.usage.output_tokens, Some(10));
    assert!(
        close(outcome.cost_usd.unwrap(), 2.0 * ANSWER_COST),
        "{outcome:?}"
    );
    let per_call: Vec<f64> = events
        .iter()
        .filter_map(|e| match e {
            RunEvent::Usage { cost_usd, .. } => *cost_usd,
            _ => None,
        })
        .collect();
    assert_eq!(per_call.len(), 2);
    assert!(
        per_call.iter().all(|c| close(*c, ANSWER_COST)),
        "{per_call:?}"
    );

    let run = store.get_run(&run_id(&events)).await.unwrap().unwrap();
    assert!(close(run.cost_usd.unwrap(), 2.0 * ANSWER_COST), "{run:?}");
    assert_eq!(run.usage, outcome.usage);
}

#[tokio::test]
async fn without_a_price_the_cost_is_unknown_not_zero() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("Hi.".into()));
    let project = Project::new(&mock, "model: mock/m\nsystem: Be brief.\n");
    let (outcome, events, store) = project.run("hi", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Succeeded);
    assert_eq!(outcome.cost_usd, None);
    let run = store.get_run(&run_id(&events)).await.unwrap().unwrap();
    assert_eq!(run.cost_usd, None);
    assert_eq!(run.usage.input_tokens, Some(10));
}

#[tokio::test]
async fn a_run_stops_before_the_model_call_that_would_pass_its_token_budget() {
    let mock = MockLlm::start().await;
    // Each answer is 15 tokens: after two calls (30) the budget of 25 is
    // reached, so the third call is never made.
    for id in ["c1", "c2", "c3"] {
        mock.push(Reply::tool_call(id, "current_time", "{}"));
    }
    mock.push(Reply::Text("never asked for".into()));
    let agent = "model: mock/m\nsystem: Be brief.\ntools: [current_time]\nlimits: { max_tokens_per_run: 25 }\n";
    let project = Project::new(&mock, agent);
    let (outcome, events, store) = project.run("loop", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::BudgetExceeded, "{outcome:?}");
    let reason = outcome.reason.clone().unwrap();
    assert!(
        reason.contains("used 30 tokens") && reason.contains("max_tokens_per_run (25)"),
        "{reason}"
    );
    assert_eq!(mock.request_count(), 2, "no model call after the limit");
    let run = store.get_run(&run_id(&events)).await.unwrap().unwrap();
    assert_eq!(run.state, RunState::BudgetExceeded);
    assert_eq!(run.error.as_deref(), Some(reason.as_str()));
    assert!(matches!(
        events.last(),
        Some(RunEvent::Finished {
            state: RunState::BudgetExceeded,
            ..
        })
    ));
}

#[tokio::test]
async fn the_daily_budget_spans_runs_and_refuses_a_run_without_calling_the_model() {
    let mock = MockLlm::start().await;
    mock.set_fallback(Reply::Text("Done.".into()));
    // Two answers cost $0.00004; the day's budget is $0.00003.
    let agent = "model: mock/m\nsystem: Be brief.\nlimits: { max_cost_usd_per_day: 0.00003 }\n";
    let project = Project::with_settings(&mock, agent, PRICES);
    let (first, _, _) = project.run("one", CancellationToken::new()).await;
    assert_eq!(first.state, RunState::Succeeded, "{first:?}");
    let (second, _, _) = project.run("two", CancellationToken::new()).await;
    assert_eq!(second.state, RunState::Succeeded, "{second:?}");
    assert_eq!(mock.request_count(), 2);

    // $0.00004 spent today: the third run makes no model call at all.
    let (third, events, store) = project.run("three", CancellationToken::new()).await;
    assert_eq!(third.state, RunState::BudgetExceeded, "{third:?}");
    let reason = third.reason.unwrap();
    assert!(
        reason.contains("max_cost_usd_per_day") && reason.contains("$0.0000"),
        "{reason}"
    );
    assert_eq!(mock.request_count(), 2, "the model was not called");
    assert!(!events.iter().any(|e| matches!(e, RunEvent::Usage { .. })));
    let filter = RunFilter {
        agent: Some("a".into()),
        ..RunFilter::default()
    };
    let states: Vec<RunState> = store
        .list_runs(&filter)
        .await
        .unwrap()
        .iter()
        .map(|r| r.state)
        .collect();
    assert_eq!(
        states,
        [
            RunState::BudgetExceeded,
            RunState::Succeeded,
            RunState::Succeeded
        ]
    );
}

/// The run of `store` whose state is `running`, once its stored cost is
/// above 0 (its first `usage` event committed), within 10 s.
async fn running_with_spending(store: &aurad::store::Store) -> aurad::store::RunRecord {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let runs = store.list_runs(&RunFilter::default()).await.unwrap();
        if let Some(run) = runs
            .into_iter()
            .find(|r| r.state == RunState::Running && r.cost_usd.is_some_and(|c| c > 0.0))
        {
            return run;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no running run with a stored cost within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn concurrent_runs_share_the_daily_budget_with_what_each_has_spent_so_far() {
    let mock = MockLlm::start().await;
    // Run A's first answer: a tool call that waits for a file. Run B's
    // answer: text. A's second call, if it were made: the fallback.
    mock.push(Reply::tool_call(
        "c1",
        "bash",
        r#"{"command": "while [ ! -e gate ]; do sleep 0.01; done; echo open"}"#,
    ));
    mock.push(Reply::Text("B is done.".into()));
    mock.set_fallback(Reply::Text("A is done.".into()));
    // One answer costs $0.00002: room for a second, not a third.
    let agent = "model: mock/m\nsystem: Be brief.\ntools: [bash]\nlimits: { max_cost_usd_per_day: 0.00003 }\n";
    let project = Project::with_settings(&mock, agent, PRICES);
    let root = project.dir.path().to_path_buf();

    let a = tokio::spawn({
        let root = root.clone();
        async move { support::project::run_agent(&root, "A", CancellationToken::new()).await }
    });
    // A's first call is stored with its cost while A waits in its tool.
    let observer = aurad::store::Store::open(&root.join("aurad.db")).unwrap();
    let running = running_with_spending(&observer).await;
    assert!(close(running.cost_usd.unwrap(), ANSWER_COST), "{running:?}");
    assert_eq!(running.usage.input_tokens, Some(10), "{running:?}");

    // B sees A's $0.00002: under the limit, so it makes its call.
    let (b, _, _) = project.run("B", CancellationToken::new()).await;
    assert_eq!(b.state, RunState::Succeeded, "{b:?}");
    assert_eq!(mock.request_count(), 2);

    // A comes back from its tool to $0.00004 spent by the two runs: its
    // second call is refused, though A alone spent only $0.00002.
    std::fs::write(root.join("gate"), "").unwrap();
    let (a, _, _) = a.await.unwrap();
    assert_eq!(a.state, RunState::BudgetExceeded, "{a:?}");
    assert!(a.reason.as_deref().unwrap().contains("$0.0000"), "{a:?}");
    assert_eq!(mock.request_count(), 2, "A made no second model call");
    let a_row = observer.get_run(&running.id).await.unwrap().unwrap();
    assert!(close(a_row.cost_usd.unwrap(), ANSWER_COST), "{a_row:?}");
}

#[tokio::test]
async fn a_daily_budget_without_a_price_is_a_load_error_with_its_place() {
    let mock = MockLlm::start().await;
    let agent = "model: mock/m\nsystem: Be brief.\nlimits:\n  max_cost_usd_per_day: 5\n";
    let project = Project::new(&mock, agent);
    let loaded = aurad::config::load(project.dir.path(), &|_| None);
    let (_, diags) = aurad::registry::build(loaded, &|_| None);
    let errors: Vec<String> = diags
        .iter()
        .filter(|d| d.is_error())
        .map(|d| d.to_string())
        .collect();
    assert!(
        errors.iter().any(|e| e.starts_with(
            "agents/a.yaml:4:25: limits.max_cost_usd_per_day needs the price of \"mock/m\""
        )),
        "{errors:?}"
    );
}

const SCHEMA_AGENT: &str = "model: mock/m\nsystem: Label the issue.\noutput_schema:\n  type: object\n  properties:\n    label: { enum: [bug, feature] }\n    confidence: { type: number }\n  required: [label, confidence]\n";

#[tokio::test]
async fn a_schema_violation_gets_one_repair_turn_and_the_json_is_stored() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("It is a bug, I think.".into()));
    mock.push(Reply::Text(
        "```json\n{\"label\": \"bug\", \"confidence\": 0.9}\n```".into(),
    ));
    let project = Project::new(&mock, SCHEMA_AGENT);
    let (outcome, events, store) = project
        .run("App crashes on start", CancellationToken::new())
        .await;
    assert_eq!(outcome.state, RunState::Succeeded, "{outcome:?}");
    let expected = json!({ "label": "bug", "confidence": 0.9 });
    assert_eq!(outcome.result, Some(expected.clone()));

    let sent = mock
        .wait_for_requests(2, std::time::Duration::from_secs(10))
        .await;
    // The schema is asked for natively (OpenAI response_format) and in words.
    assert_eq!(sent[0].body["response_format"]["type"], "json_schema");
    assert_eq!(
        sent[0].body["response_format"]["json_schema"]["schema"]["required"],
        json!(["label", "confidence"])
    );
    assert!(
        sent[0].messages().iter().any(|m| m["role"] == "system"
            && m["content"]
                .as_str()
                .unwrap()
                .contains("must be only a JSON value")),
        "{:?}",
        sent[0].messages()
    );
    // The repair turn: the bad answer, then the errors.
    let repair = sent[1].messages();
    let last = repair.last().unwrap();
    assert_eq!(last["role"], "user");
    let text = last["content"].as_str().unwrap();
    assert!(text.contains("the answer is not JSON"), "{text}");
    assert_eq!(repair[repair.len() - 2]["content"], "It is a bug, I think.");

    let run = store.get_run(&run_id(&events)).await.unwrap().unwrap();
    assert_eq!(run.result, Some(expected));
}

#[tokio::test]
async fn a_run_whose_repair_fails_too_fails_with_the_errors() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text(
        "{\"label\": \"question\", \"confidence\": 1}".into(),
    ));
    mock.push(Reply::Text("{\"label\": \"question\"}".into()));
    mock.push(Reply::Text("never asked for".into()));
    let project = Project::new(&mock, SCHEMA_AGENT);
    let (outcome, events, store) = project.run("How do I?", CancellationToken::new()).await;
    assert_eq!(outcome.state, RunState::Failed, "{outcome:?}");
    let reason = outcome.reason.unwrap();
    assert!(
        reason.starts_with("the final answer does not match output_schema after one repair turn")
            && reason.contains("at /label")
            && reason.contains("confidence"),
        "{reason}"
    );
    assert_eq!(mock.request_count(), 2, "exactly one repair turn");
    let sent = mock.requests();
    let repair = sent[1].messages().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(repair.contains("at /label"), "{repair}");
    let run = store.get_run(&run_id(&events)).await.unwrap().unwrap();
    assert_eq!(run.state, RunState::Failed);
    assert_eq!(run.result, None);
}
