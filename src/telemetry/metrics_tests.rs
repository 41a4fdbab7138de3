//! Unit tests of `metrics.rs`: the rendered text is parsed line by line
//! (families, escaping, cumulative histogram buckets).

use super::*;
use crate::llm::limits::Limits;
use crate::types::{FallbackReason, McpState, RetryReason, Usage};

/// Metrics whose limit gauges read gates of their own: other tests of the
/// process may open gates in the process's set.
fn fresh() -> Metrics {
    Metrics::with_gates(Box::leak(Box::default()))
}

/// One parsed sample line: name, labels in order, value.
#[derive(Debug, PartialEq)]
struct Sample {
    name: String,
    labels: Vec<(String, String)>,
    value: f64,
}

/// Parses exposition text line by line, checking that every sample
/// belongs to a family announced by `# HELP` and `# TYPE` before it.
fn parse(text: &str) -> (Vec<(String, String)>, Vec<Sample>) {
    let mut families = Vec::new(); // (name, type)
    let mut samples = Vec::new();
    let mut helped: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP has a text");
            assert!(!help.is_empty());
            helped = Some(name.to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE has a kind");
            assert_eq!(helped.as_deref(), Some(name), "TYPE follows its HELP");
            assert!(["counter", "gauge", "histogram"].contains(&kind));
            families.push((name.to_owned(), kind.to_owned()));
        } else {
            assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
            let sample = parse_sample(line);
            let (family, kind) = families.last().expect("a sample after a TYPE");
            let base = match kind.as_str() {
                "histogram" => ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| sample.name.strip_suffix(s))
                    .expect("histogram sample suffix"),
                _ => sample.name.as_str(),
            };
            assert_eq!(base, family, "sample {line:?} outside its family");
            samples.push(sample);
        }
    }
    (families, samples)
}

fn parse_sample(line: &str) -> Sample {
    let (series, value) = line.rsplit_once(' ').expect("sample has a value");
    let value: f64 = value.parse().expect("numeric value");
    let Some((name, labels)) = series.split_once('{') else {
        return Sample {
            name: series.to_owned(),
            labels: vec![],
            value,
        };
    };
    let mut labels_out = Vec::new();
    let mut chars = labels.strip_suffix('}').expect("closing brace").chars();
    loop {
        let label: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if label.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('"'));
        let mut val = String::new();
        loop {
            match chars.next().expect("unterminated label value") {
                '"' => break,
                '\\' => match chars.next() {
                    Some('\\') => val.push('\\'),
                    Some('"') => val.push('"'),
                    Some('n') => val.push('\n'),
                    other => panic!("bad escape {other:?}"),
                },
                '\n' => panic!("raw newline in a label value"),
                c => val.push(c),
            }
        }
        labels_out.push((label, val));
        match chars.next() {
            Some(',') => continue,
            None => break,
            other => panic!("unexpected {other:?} after a label"),
        }
    }
    Sample {
        name: name.to_owned(),
        labels: labels_out,
        value,
    }
}

fn find<'a>(samples: &'a [Sample], name: &str, labels: &[(&str, &str)]) -> Option<&'a Sample> {
    samples.iter().find(|s| {
        s.name == name
            && s.labels.len() == labels.len()
            && s.labels
                .iter()
                .zip(labels)
                .all(|((k, v), (k2, v2))| k == k2 && v == v2)
    })
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    find(samples, name, labels)
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
        .value
}

#[test]
fn metrics_is_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<Metrics>();
}

#[test]
fn an_empty_registry_has_its_label_less_series_at_zero() {
    let (families, samples) = parse(&fresh().render());
    let names: Vec<&str> = families.iter().map(|(n, _)| n.as_str()).collect();
    // A family with labels appears with its first series.
    assert_eq!(
        names,
        [
            "aurad_runs_running",
            "aurad_runs_queued",
            "aurad_runs_waiting_approval",
            "aurad_reloads_total",
            "aurad_reload_errors_total",
        ]
    );
    for name in names {
        assert_eq!(value(&samples, name, &[]), 0.0, "{name}");
    }
    assert_eq!(samples.len(), 5);
}

#[test]
fn every_family_keeps_its_name_type_and_help() {
    let m = fresh();
    m.run_finished("a", "succeeded", Duration::from_secs(1));
    m.tool_call("bash", true);
    m.model_call("a", 1, 1, Some(0.5));
    m.set_mcp_states(&[("fs".into(), McpState::Connected)]);
    m.scheduled_fire("a");
    m.set_config_skipped(&[("agent", 2)]);
    let text = m.render();
    let (families, _) = parse(&text);
    let families: Vec<(&str, &str)> = families
        .iter()
        .map(|(n, k)| (n.as_str(), k.as_str()))
        .collect();
    assert_eq!(
        families,
        [
            ("aurad_runs_total", "counter"),
            ("aurad_run_duration_seconds", "histogram"),
            ("aurad_runs_running", "gauge"),
            ("aurad_runs_queued", "gauge"),
            ("aurad_runs_waiting_approval", "gauge"),
            ("aurad_tool_calls_total", "counter"),
            ("aurad_tool_failures_total", "counter"),
            ("aurad_model_tokens_total", "counter"),
            ("aurad_model_cost_usd_total", "counter"),
            ("aurad_reloads_total", "counter"),
            ("aurad_reload_errors_total", "counter"),
            ("aurad_mcp_server_up", "gauge"),
            ("aurad_schedule_fires_total", "counter"),
            ("aurad_config_skipped", "gauge"),
        ]
    );
    for help in [
        "# HELP aurad_runs_total Runs by agent and final state (including skipped and missed).\n",
        "# HELP aurad_model_cost_usd_total US dollars spent on model calls by agent (calls whose model has a price in aurad.yaml).\n",
        "# HELP aurad_schedule_fires_total Cron schedule fires, by agent.\n",
    ] {
        assert!(text.contains(help), "{help}\n{text}");
    }
}

#[test]
fn counters_and_gauges_are_rendered_with_their_labels() {
    let m = fresh();
    m.run_recorded("zeta", "skipped");
    m.run_finished("alpha", "succeeded", Duration::from_millis(300));
    m.run_finished("alpha", "succeeded", Duration::from_secs(2));
    m.run_finished("alpha", "failed", Duration::from_secs(2));
    m.set_runs_in_flight(3);
    m.set_runs_queued(1);
    m.tool_call("bash", false);
    m.tool_call("bash", true);
    m.tool_call("a_tool", false);
    m.model_tokens("alpha", 100, 20);
    m.model_tokens("alpha", 1, 2);
    m.reload(true);
    m.reload(false);
    m.scheduled_fire("alpha");
    m.scheduled_fire("alpha");
    m.scheduled_fire("zeta");

    let text = m.render();
    let (_, samples) = parse(&text);
    let mut runs: Vec<_> = samples
        .iter()
        .filter(|s| s.name == "aurad_runs_total")
        .map(|s| (s.labels[0].1.as_str(), s.labels[1].1.as_str(), s.value))
        .collect();
    runs.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    assert_eq!(
        runs,
        [
            ("alpha", "failed", 1.0),
            ("alpha", "succeeded", 2.0),
            ("zeta", "skipped", 1.0)
        ]
    );
    assert_eq!(value(&samples, "aurad_runs_running", &[]), 3.0);
    assert_eq!(value(&samples, "aurad_runs_queued", &[]), 1.0);
    assert_eq!(
        value(&samples, "aurad_tool_calls_total", &[("tool", "bash")]),
        2.0
    );
    assert_eq!(
        value(&samples, "aurad_tool_failures_total", &[("tool", "bash")]),
        1.0
    );
    assert!(find(&samples, "aurad_tool_failures_total", &[("tool", "a_tool")]).is_none());
    let mut tools: Vec<_> = samples
        .iter()
        .filter(|s| s.name == "aurad_tool_calls_total")
        .map(|s| s.labels[0].1.as_str())
        .collect();
    tools.sort();
    assert_eq!(tools, ["a_tool", "bash"]);
    let tokens = |d| {
        value(
            &samples,
            "aurad_model_tokens_total",
            &[("agent", "alpha"), ("direction", d)],
        )
    };
    assert_eq!((tokens("input"), tokens("output")), (101.0, 22.0));
    assert_eq!(value(&samples, "aurad_reloads_total", &[]), 2.0);
    assert_eq!(value(&samples, "aurad_reload_errors_total", &[]), 1.0);
    let fires = |agent| value(&samples, "aurad_schedule_fires_total", &[("agent", agent)]);
    assert_eq!((fires("alpha"), fires("zeta")), (2.0, 1.0));
    // A skipped run has no duration.
    assert!(
        !text.contains("aurad_run_duration_seconds_count{agent=\"zeta\"}"),
        "{text}"
    );
    // Same input, same text.
    assert_eq!(text, m.render());
}

#[test]
fn histogram_buckets_are_cumulative_with_inf_sum_and_count() {
    let m = fresh();
    for secs in [0.05, 0.1, 0.7, 4.0, 4000.0] {
        m.run_finished("a", "succeeded", Duration::from_secs_f64(secs));
    }
    let (_, samples) = parse(&m.render());
    let buckets: Vec<(String, f64)> = samples
        .iter()
        .filter(|s| s.name == "aurad_run_duration_seconds_bucket")
        .map(|s| {
            assert_eq!(s.labels[0], ("agent".into(), "a".into()));
            (s.labels[1].1.clone(), s.value)
        })
        .collect();
    let expected = [
        ("0.1", 2.0),
        ("0.5", 2.0),
        ("1", 3.0),
        ("5", 4.0),
        ("15", 4.0),
        ("60", 4.0),
        ("300", 4.0),
        ("900", 4.0),
        ("3600", 4.0),
        ("+Inf", 5.0),
    ];
    let expected: Vec<(String, f64)> = expected.iter().map(|(l, v)| (l.to_string(), *v)).collect();
    assert_eq!(buckets, expected);
    let sum = value(
        &samples,
        "aurad_run_duration_seconds_sum",
        &[("agent", "a")],
    );
    assert!((sum - 4004.85).abs() < 1e-6, "{sum}");
    assert_eq!(
        value(
            &samples,
            "aurad_run_duration_seconds_count",
            &[("agent", "a")]
        ),
        5.0
    );
}

#[test]
fn label_values_are_escaped() {
    let m = fresh();
    let nasty = "a\\b\"c\nd";
    m.tool_call(nasty, true);
    let text = m.render();
    assert!(
        text.contains(r#"aurad_tool_calls_total{tool="a\\b\"c\nd"} 1"#),
        "{text}"
    );
    let (_, samples) = parse(&text);
    assert_eq!(
        value(&samples, "aurad_tool_failures_total", &[("tool", nasty)]),
        1.0
    );
}

#[test]
fn mcp_up_is_1_only_while_connected_and_states_replace_the_previous_set() {
    let m = fresh();
    m.set_mcp_states(&[
        ("search".into(), McpState::Connecting),
        ("fs".into(), McpState::Connected),
        ("gone".into(), McpState::Connected),
    ]);
    m.set_mcp_states(&[
        ("search".into(), McpState::Connected),
        ("fs".into(), McpState::Failed),
        ("web".into(), McpState::Restarting),
    ]);
    let (_, samples) = parse(&m.render());
    let mut up: Vec<_> = samples
        .iter()
        .filter(|s| s.name == "aurad_mcp_server_up")
        .map(|s| (s.labels[0].1.as_str(), s.labels[1].1.as_str(), s.value))
        .collect();
    up.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(
        up,
        [
            ("fs", "failed", 0.0),
            ("search", "connected", 1.0),
            ("web", "restarting", 0.0)
        ]
    );
}

#[test]
fn run_events_feed_tool_and_token_counters() {
    let m = fresh();
    let result = |is_error| RunEvent::ToolResult {
        id: "c1".into(),
        name: "read_file".into(),
        output: "..".into(),
        is_error,
        duration_ms: 3,
    };
    let mut run = RunEvents::new("triage", "mock/m");
    m.observe_event(&mut run, &result(false));
    m.observe_event(&mut run, &result(true));
    m.observe_event(
        &mut run,
        &RunEvent::Usage {
            iteration: 1,
            usage: Usage {
                input_tokens: Some(50),
                output_tokens: None,
                cached_input_tokens: None,
            },
            cost_usd: None,
            model: None,
        },
    );
    m.observe_event(
        &mut run,
        &RunEvent::TextDelta {
            text: "hello".into(),
        },
    );
    let (_, samples) = parse(&m.render());
    assert_eq!(
        value(&samples, "aurad_tool_calls_total", &[("tool", "read_file")]),
        2.0
    );
    assert_eq!(
        value(
            &samples,
            "aurad_tool_failures_total",
            &[("tool", "read_file")]
        ),
        1.0
    );
    let tokens = |d| {
        value(
            &samples,
            "aurad_model_tokens_total",
            &[("agent", "triage"), ("direction", d)],
        )
    };
    assert_eq!((tokens("input"), tokens("output")), (50.0, 0.0));
    // No price, no cost sample: unknown is not zero.
    assert!(
        find(
            &samples,
            "aurad_model_cost_usd_total",
            &[("agent", "triage")]
        )
        .is_none()
    );
    for cost in [0.25, 0.5] {
        m.observe_event(
            &mut run,
            &RunEvent::Usage {
                iteration: 2,
                usage: Usage::default(),
                cost_usd: Some(cost),
                model: None,
            },
        );
    }
    let (_, samples) = parse(&m.render());
    assert_eq!(
        value(
            &samples,
            "aurad_model_cost_usd_total",
            &[("agent", "triage")]
        ),
        0.75
    );
}

#[tokio::test]
async fn model_calls_retries_fallbacks_waits_and_cached_tokens_by_provider_and_model() {
    let gates: &'static Gates = Box::leak(Box::default());
    let m = Metrics::with_gates(gates);
    m.model_attempt("openai/gpt-4o", "ok", Duration::from_millis(1500));
    m.model_attempt("openai/gpt-4o", "rate_limited", Duration::from_millis(100));
    m.model_attempt("openai/gpt-4o", "ok", Duration::from_millis(250));
    let mut run = RunEvents::new("triage", "openai/gpt-4o");
    let retry = |reason| RunEvent::ModelRetry {
        attempt: 1,
        delay_ms: 10,
        error: "x".into(),
        reason,
        discarded_output: false,
    };
    let usage = |model: Option<&str>, input, cached| RunEvent::Usage {
        iteration: 1,
        usage: Usage {
            input_tokens: Some(input),
            output_tokens: Some(5),
            cached_input_tokens: cached,
        },
        cost_usd: None,
        model: model.map(str::to_string),
    };
    let wait = |waited_ms| RunEvent::LimitWait {
        provider: "openai".into(),
        waited_ms,
    };
    for event in [
        retry(RetryReason::Status),
        retry(RetryReason::Status),
        usage(None, 100, Some(60)),
        wait(1500),
        wait(250),
        RunEvent::ModelFallback {
            from: "openai/gpt-4o".into(),
            to: "anthropic/claude-x".into(),
            reason: FallbackReason::RateLimited,
            error: "429".into(),
        },
        // After the fallback, a retry is the next model's.
        retry(RetryReason::StreamCut),
        usage(None, 40, None),
        usage(Some("anthropic/claude-x"), 10, Some(10)),
    ] {
        m.observe_event(&mut run, &event);
    }
    // A provider with limits: one call in flight, one waiting.
    let limits = Limits {
        concurrent: Some(1),
        ..Limits::default()
    };
    let gate = gates.get("openai", "openai", limits, None);
    let _pass = gate.enter(0).await;
    let waiter = tokio::spawn({
        let gate = gate.clone();
        async move {
            let _ = gate.enter(0).await;
        }
    });
    while gate
        .stats()
        .waiting
        .load(std::sync::atomic::Ordering::Relaxed)
        == 0
    {
        tokio::task::yield_now().await;
    }
    let text = m.render();
    waiter.abort();
    let (families, samples) = parse(&text);
    for (name, kind) in [
        ("aurad_model_calls_total", "counter"),
        ("aurad_model_call_duration_seconds", "histogram"),
        ("aurad_model_retries_total", "counter"),
        ("aurad_model_fallbacks_total", "counter"),
        ("aurad_provider_tokens_total", "counter"),
        ("aurad_provider_limit_waits_total", "counter"),
        ("aurad_provider_limit_wait_seconds_total", "counter"),
        ("aurad_provider_limit_waiting", "gauge"),
        ("aurad_provider_limit_in_flight", "gauge"),
    ] {
        assert!(
            families.contains(&(name.to_string(), kind.to_string())),
            "{name} {kind}\n{text}"
        );
    }
    let gpt = [("provider", "openai"), ("model", "openai/gpt-4o")];
    let with = |extra: (&'static str, &'static str)| {
        let mut labels = gpt.to_vec();
        labels.push(extra);
        labels
    };
    assert_eq!(
        value(
            &samples,
            "aurad_model_calls_total",
            &with(("outcome", "ok"))
        ),
        2.0
    );
    assert_eq!(
        value(
            &samples,
            "aurad_model_calls_total",
            &with(("outcome", "rate_limited"))
        ),
        1.0
    );
    let mut bucket = with(("outcome", "ok"));
    bucket.push(("le", "0.5"));
    assert_eq!(
        value(
            &samples,
            "aurad_model_call_duration_seconds_bucket",
            &bucket
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "aurad_model_call_duration_seconds_sum",
            &with(("outcome", "ok"))
        ),
        1.75
    );
    assert_eq!(
        value(
            &samples,
            "aurad_model_retries_total",
            &with(("reason", "status"))
        ),
        2.0
    );
    assert_eq!(
        value(
            &samples,
            "aurad_model_retries_total",
            &[
                ("provider", "anthropic"),
                ("model", "anthropic/claude-x"),
                ("reason", "stream_cut")
            ]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "aurad_model_fallbacks_total",
            &[
                ("from", "openai/gpt-4o"),
                ("to", "anthropic/claude-x"),
                ("reason", "rate_limited")
            ]
        ),
        1.0
    );
    let tokens = |provider, model, direction| {
        value(
            &samples,
            "aurad_provider_tokens_total",
            &[
                ("provider", provider),
                ("model", model),
                ("direction", direction),
            ],
        )
    };
    assert_eq!(tokens("openai", "openai/gpt-4o", "input"), 100.0);
    assert_eq!(tokens("openai", "openai/gpt-4o", "cached_input"), 60.0);
    assert_eq!(tokens("openai", "openai/gpt-4o", "output"), 5.0);
    assert_eq!(tokens("anthropic", "anthropic/claude-x", "input"), 50.0);
    assert_eq!(
        tokens("anthropic", "anthropic/claude-x", "cached_input"),
        10.0
    );
    let openai = [("provider", "openai")];
    assert_eq!(
        value(&samples, "aurad_provider_limit_waits_total", &openai),
        2.0
    );
    assert_eq!(
        value(&samples, "aurad_provider_limit_wait_seconds_total", &openai),
        1.75
    );
    assert_eq!(
        value(&samples, "aurad_provider_limit_waiting", &openai),
        1.0
    );
    assert_eq!(
        value(&samples, "aurad_provider_limit_in_flight", &openai),
        1.0
    );
    // The agent's own counters go on as before.
    assert_eq!(
        value(
            &samples,
            "aurad_model_tokens_total",
            &[("agent", "triage"), ("direction", "input")]
        ),
        150.0
    );
}

#[test]
fn a_gate_gone_with_its_limits_leaves_the_gauges() {
    let gates: &'static Gates = Box::leak(Box::default());
    let m = Metrics::with_gates(gates);
    let limits = Limits {
        requests_per_minute: Some(60),
        ..Limits::default()
    };
    gates.get("slow", "slow", limits, None);
    let (_, samples) = parse(&m.render());
    assert_eq!(
        value(
            &samples,
            "aurad_provider_limit_waiting",
            &[("provider", "slow")]
        ),
        0.0
    );
    // Without limits it stays a gate (a 429 still pauses it), with no gauges.
    assert!(
        gates
            .get("slow", "slow", Limits::default(), None)
            .limits()
            .is_empty()
    );
    let (_, samples) = parse(&m.render());
    assert!(
        find(
            &samples,
            "aurad_provider_limit_waiting",
            &[("provider", "slow")]
        )
        .is_none()
    );
}
