//! The provider policy as operators see it, end to end: a real daemon
//! (`aurad::daemon::serve`) in this process, its provider the mock LLM
//! under limits, an agent with a model chain. After one run that fell back
//! and waited for the limits, `/metrics` has the model calls by outcome
//! and latency, the fallback, the wait, the tokens by provider and model
//! and the gauges read from the gate; `/v1/status` lists the provider with
//! its limits and counts, and `aurad status` prints them from the running
//! daemon.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a panic is its failure report"
)]

mod support;

use serde_json::json;
use support::daemon::{Api, json_of};
use support::mock_llm::{MockLlm, Reply};
use support::serve::{Serve, free_port, run, show, text};

/// The value of the sample `series` (name and labels as rendered).
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series}:\n{metrics}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn metrics_and_status_show_calls_fallbacks_and_limit_waits_by_provider() {
    let mock = MockLlm::start().await;
    // The first model's request is too long for it: the chain moves on.
    mock.push(Reply::error(
        400,
        "This model's maximum context length is 8192 tokens",
    ));
    mock.push(Reply::Text("done".into()));
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("agents")).unwrap();
    // One request a minute is one every 1.01 s: the second call waits.
    std::fs::write(
        dir.path().join("aurad.yaml"),
        format!(
            "providers:\n  capped:\n    kind: openai\n    base_url: \"{}\"\n    limits: {{ concurrent: 2, requests_per_minute: 60 }}\n",
            mock.base_url()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("agents/a.yaml"),
        "model:\n  chain: [capped/m, capped/m2]\n  attempts: 1\nsystem: s\n",
    )
    .unwrap();
    let api = Api::start(dir.path(), &[]).await;
    let response = api
        .post("/v1/agents/a/runs")
        .json(&json!({ "input": "a long input" }))
        .send()
        .await
        .unwrap();
    let (status, run) = json_of(response).await;
    assert_eq!(status, 202, "{run}");
    let run = api.wait_run(run["id"].as_str().unwrap()).await;
    assert_eq!(run["state"], "succeeded", "{run}");

    let metrics = api
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let m = |series: &str| sample(&metrics, series);
    assert_eq!(
        m(r#"aurad_model_calls_total{provider="capped",model="capped/m",outcome="client_error"}"#),
        1.0
    );
    assert_eq!(
        m(r#"aurad_model_calls_total{provider="capped",model="capped/m2",outcome="ok"}"#),
        1.0
    );
    assert_eq!(
        m(
            r#"aurad_model_call_duration_seconds_count{provider="capped",model="capped/m2",outcome="ok"}"#
        ),
        1.0
    );
    assert_eq!(
        m(r#"aurad_model_fallbacks_total{from="capped/m",to="capped/m2",reason="context_length"}"#),
        1.0
    );
    assert_eq!(
        m(r#"aurad_provider_tokens_total{provider="capped",model="capped/m2",direction="input"}"#),
        10.0
    );
    assert_eq!(
        m(
            r#"aurad_provider_tokens_total{provider="capped",model="capped/m2",direction="cached_input"}"#
        ),
        0.0
    );
    assert_eq!(
        m(r#"aurad_provider_limit_waits_total{provider="capped"}"#),
        1.0
    );
    let waited = m(r#"aurad_provider_limit_wait_seconds_total{provider="capped"}"#);
    assert!(waited > 0.0 && waited <= 1.1, "{waited}");
    assert_eq!(
        m(r#"aurad_provider_limit_in_flight{provider="capped"}"#),
        0.0
    );
    assert_eq!(m(r#"aurad_provider_limit_waiting{provider="capped"}"#), 0.0);

    let (status, body) = api.get_json("/v1/status").await;
    assert_eq!(status, 200);
    let providers = body["providers"].as_array().unwrap();
    let capped = providers
        .iter()
        .find(|p| p["provider"] == "capped")
        .unwrap_or_else(|| panic!("{body}"));
    assert_eq!(
        capped["limits"],
        json!({ "concurrent": 2, "requests_per_minute": 60 })
    );
    assert_eq!(capped["shared"], false);
    assert_eq!(capped["waiting"], 0);
    assert_eq!(capped["in_flight"], 0);
    assert_eq!(capped["waits"], 1);
    assert!(capped["waited_seconds"].as_f64().unwrap() > 0.0, "{capped}");
    assert_eq!(capped["pauses"], 0);
    // Providers without limits are not listed.
    assert_eq!(providers.len(), 1, "{body}");
    api.stop().await;
}

#[test]
fn aurad_status_prints_the_provider_limits_of_the_running_daemon() {
    let mock = MockLlm::start_in_thread();
    let dir = support::project::project_with_mock(&mock, "model: mock/m\nsystem: s\n");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    std::fs::write(
        dir.path().join("aurad.yaml"),
        format!(
            "providers:\n  mock:\n    kind: openai\n    base_url: \"{}\"\n    limits: {{ concurrent: 3, tokens_per_minute: 50000 }}\nlisten: {addr}\n",
            mock.base_url()
        ),
    )
    .unwrap();
    let out = run(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stdout)
            .contains("provider limits: unknown (no aurad serve of this project is running)"),
        "{}",
        show(&out)
    );

    let _serve = Serve::start(dir.path(), addr, &[]);
    let out = run(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let stdout = text(&out.stdout);
    let row = stdout
        .lines()
        .find(|l| l.starts_with("mock "))
        .unwrap_or_else(|| panic!("{}", show(&out)));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "mock", "3", "at", "once,", "50000", "tpm", "0", "0", "0", "0.0s", "0"
        ],
        "{stdout}"
    );
    let out = run(dir.path(), &["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(body["providers"][0]["provider"], "mock", "{body}");
    assert_eq!(
        body["providers"][0]["limits"],
        json!({ "concurrent": 3, "tokens_per_minute": 50000 })
    );
}
