//! Model chains end to end: the real `aurad run` with `model: [a/m, b/m]`
//! where provider `a` is down, answers 500 or 429 forever, or refuses a
//! context that is too long, and `b` is a working mock. The run succeeds on
//! `b`, each switch is a `model_fallback` event that `aurad logs` shows, a
//! tool that ran before the switch does not run again, tokens and cost are
//! counted per model, and a reason the chain does not name fails the run
//! without touching `b`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

mod support;

use serde_json::Value;
use support::mock_llm::{MockLlm, Reply};
use support::serve::{run, show, text};

/// A project with providers `a` (at `a_url`) and `b` (the mock `b`), both
/// priced, and agent `agent` with `model`.
fn project(a_url: &str, b: &MockLlm, model: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    std::fs::write(
        dir.path().join("aurad.yaml"),
        format!(
            "providers:\n  a: {{ kind: openai, base_url: \"{a_url}\" }}\n  b: {{ kind: openai, base_url: \"{}\" }}\n\
             prices:\n  a/m: {{ input_per_mtok: 1, output_per_mtok: 1 }}\n  b/m: {{ input_per_mtok: 1000, output_per_mtok: 2000 }}\n",
            b.base_url()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("agents/agent.yaml"),
        format!("model: {model}\nsystem: You compute.\ntools: [calculator]\n"),
    )
    .unwrap();
    dir
}

/// The stored events of the project's only run, as JSON objects.
fn events(dir: &std::path::Path) -> Vec<Value> {
    let out = run(dir, &["logs", "agent", "--json"]);
    assert!(out.status.success(), "{}", show(&out));
    text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// A port nothing listens on: connections are refused.
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

#[test]
fn a_provider_down_falls_back_and_the_run_stays_on_the_next_model() {
    let b = MockLlm::start_in_thread();
    b.push(Reply::tool_call(
        "c1",
        "calculator",
        r#"{"expression":"6*7"}"#,
    ));
    b.push(Reply::Text("42.".into()));
    let dir = project(&closed_url(), &b, "[a/m, b/m]");
    let out = run(dir.path(), &["run", "agent", "--input", "6*7?"]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(text(&out.stdout).ends_with("42.\n"), "{}", show(&out));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("a/m failed (unreachable:") && stderr.contains("going on with b/m"),
        "{stderr}"
    );
    // One switch: the second call went to `b` at once.
    assert_eq!(b.request_count(), 2);
    assert!(b.requests().iter().all(|r| r.body["model"] == "m"));
    let events = events(dir.path());
    let fallbacks = of_kind(&events, "model_fallback");
    assert_eq!(fallbacks.len(), 1, "{events:?}");
    assert_eq!(fallbacks[0]["from"], "a/m");
    assert_eq!(fallbacks[0]["to"], "b/m");
    assert_eq!(fallbacks[0]["reason"], "unreachable");
    // Each call's usage names its model and is priced at b's price: 10
    // prompt and 5 completion tokens a call.
    let usage = of_kind(&events, "usage");
    assert_eq!(usage.len(), 2, "{usage:?}");
    for u in &usage {
        assert_eq!(u["model"], "b/m");
        let cost = u["cost_usd"].as_f64().unwrap();
        assert!(
            (cost - (10.0 * 1000.0 + 5.0 * 2000.0) / 1e6).abs() < 1e-12,
            "{u}"
        );
    }
    // `aurad logs` shows the switch.
    let logs = run(dir.path(), &["logs", "agent"]);
    assert!(
        text(&logs.stdout).contains("going on with b/m")
            || text(&logs.stderr).contains("going on with b/m"),
        "{}",
        show(&logs)
    );
}

#[test]
fn after_a_tool_ran_a_failing_model_falls_back_and_the_tool_does_not_run_again() {
    let a = MockLlm::start_in_thread();
    let b = MockLlm::start_in_thread();
    // `a` asks for the tool, then fails with 500 forever.
    a.push(Reply::tool_call(
        "c1",
        "calculator",
        r#"{"expression":"6*7"}"#,
    ));
    a.set_fallback(Reply::error(500, "internal error"));
    b.push(Reply::Text("It is 42.".into()));
    let dir = project(&a.base_url(), &b, "{chain: [a/m, b/m], attempts: 2}");
    let out = run(dir.path(), &["run", "agent", "--input", "6*7?"]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(text(&out.stdout).ends_with("It is 42.\n"), "{}", show(&out));
    // The first call answered; the second was tried twice on `a`, then
    // once on `b`, which got the tool's result with the conversation.
    assert_eq!(a.request_count(), 3);
    let sent = b.requests();
    assert_eq!(sent.len(), 1);
    let tool_messages: Vec<&Value> = sent[0]
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_messages.len(), 1, "{}", sent[0].body);
    assert_eq!(tool_messages[0]["content"], "42");
    let events = events(dir.path());
    assert_eq!(of_kind(&events, "tool_result").len(), 1, "{events:?}");
    let fallbacks = of_kind(&events, "model_fallback");
    assert_eq!(fallbacks.len(), 1);
    assert_eq!(fallbacks[0]["reason"], "server_error");
    // Each model's tokens at its own price: a's call, then b's.
    let usage = of_kind(&events, "usage");
    let models: Vec<&str> = usage.iter().map(|u| u["model"].as_str().unwrap()).collect();
    assert_eq!(models, ["a/m", "b/m"]);
    let costs: Vec<f64> = usage
        .iter()
        .map(|u| u["cost_usd"].as_f64().unwrap())
        .collect();
    assert!((costs[0] - 15.0 / 1e6).abs() < 1e-12, "{costs:?}");
    assert!((costs[1] - 0.02).abs() < 1e-12, "{costs:?}");
    let finished = of_kind(&events, "finished");
    let total = finished[0]["cost_usd"].as_f64().unwrap();
    assert!((total - (costs[0] + costs[1])).abs() < 1e-12, "{total}");
}

#[test]
fn rate_limits_forever_and_a_too_long_context_move_down_the_chain() {
    for (reply, reason) in [
        (
            Reply::Raw {
                status: 429,
                headers: vec![("retry-after".into(), "0".into())],
                body: r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#.into(),
            },
            "rate_limited",
        ),
        (
            Reply::error(
                400,
                "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
            ),
            "context_length",
        ),
    ] {
        let a = MockLlm::start_in_thread();
        let b = MockLlm::start_in_thread();
        a.set_fallback(reply);
        b.push(Reply::Text("done".into()));
        let dir = project(&a.base_url(), &b, "[a/m, b/m]");
        let out = run(dir.path(), &["run", "agent", "--input", "go"]);
        assert!(out.status.success(), "{reason}: {}", show(&out));
        let events = events(dir.path());
        let fallbacks = of_kind(&events, "model_fallback");
        assert_eq!(fallbacks.len(), 1, "{reason}: {events:?}");
        assert_eq!(fallbacks[0]["reason"], reason);
        assert_eq!(b.request_count(), 1, "{reason}");
    }
}

#[test]
fn a_reason_the_chain_does_not_name_fails_the_run_on_the_first_model() {
    let a = MockLlm::start_in_thread();
    let b = MockLlm::start_in_thread();
    a.set_fallback(Reply::error(500, "internal error"));
    let dir = project(
        &a.base_url(),
        &b,
        "{chain: [a/m, b/m], fallback_on: [unreachable], attempts: 2}",
    );
    let out = run(dir.path(), &["run", "agent", "--input", "go"]);
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("model call failed (a/m): HTTP 500"),
        "{}",
        show(&out)
    );
    assert_eq!(a.request_count(), 2);
    assert_eq!(b.request_count(), 0);
}

#[test]
fn a_chain_naming_an_unknown_provider_is_a_located_error() {
    let b = MockLlm::start_in_thread();
    let dir = project(&closed_url(), &b, "[a/m, nowhere/m]");
    let out = run(dir.path(), &["validate"]);
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        text(&out.stdout).contains("agents/agent.yaml:1:")
            || text(&out.stderr).contains("agents/agent.yaml:1:"),
        "{}",
        show(&out)
    );
    assert!(
        show(&out).contains("unknown provider `nowhere`"),
        "{}",
        show(&out)
    );
}

#[test]
fn a_providers_request_rate_spaces_a_runs_calls_and_each_wait_is_an_event() {
    let b = MockLlm::start_in_thread();
    b.push(Reply::tool_call(
        "c1",
        "calculator",
        r#"{"expression":"6*7"}"#,
    ));
    b.push(Reply::Text("42.".into()));
    let dir = project(&closed_url(), &b, "b/m");
    // One request a second (1.01 s apart): the second call of the run waits.
    let settings = dir.path().join("aurad.yaml");
    let yaml = std::fs::read_to_string(&settings).unwrap().replace(
        &format!("b: {{ kind: openai, base_url: \"{}\" }}", b.base_url()),
        &format!(
            "b: {{ kind: openai, base_url: \"{}\", limits: {{ requests_per_minute: 60 }} }}",
            b.base_url()
        ),
    );
    std::fs::write(&settings, yaml).unwrap();
    let out = run(dir.path(), &["run", "agent", "--input", "6*7?"]);
    assert!(out.status.success(), "{}", show(&out));
    let sent = b.requests();
    assert_eq!(sent.len(), 2);
    let apart = sent[1].received_at - sent[0].received_at;
    assert!(
        apart >= std::time::Duration::from_millis(1_000),
        "{apart:?}"
    );
    let events = events(dir.path());
    let waits = of_kind(&events, "limit_wait");
    assert_eq!(waits.len(), 1, "{events:?}");
    assert_eq!(waits[0]["provider"], "b");
    assert!(
        waits[0]["waited_ms"].as_u64().unwrap() > 0,
        "{:?}",
        waits[0]
    );
    assert!(
        text(&out.stderr).contains("for provider `b`'s limits"),
        "{}",
        show(&out)
    );
}
