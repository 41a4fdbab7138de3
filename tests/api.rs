//! The HTTP API end to end: a real daemon (`aurad::daemon::serve`) in this
//! process on a free loopback port, a project in a temporary directory whose
//! provider is the mock LLM, reqwest as the client.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::daemon::{Api, SseEvent, SseReader, json_of, sign};
use support::inproc::eventually;
use support::mock_llm::{MockLlm, Reply};
use support::project::{add_settings, project_with_mock};

/// How long anything may take before a test fails.
const WAIT: Duration = Duration::from_secs(30);

/// Agent `a`: renders its prompt from vars when no input is given.
const AGENT_A: &str =
    "model: mock/m\nprompt: \"Daily check for {{ vars.who | default('nobody') }}\"\n";

fn add_agent(dir: &tempfile::TempDir, name: &str, yaml: &str) {
    std::fs::write(dir.path().join("agents").join(format!("{name}.yaml")), yaml).unwrap();
}

/// The text of every message the mock received in request `index`.
fn request_text(mock: &MockLlm, index: usize) -> String {
    let requests = mock.requests();
    requests[index]
        .messages()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The events other than deltas: (kind, id).
fn complete_events(events: &[SseEvent]) -> Vec<(String, Option<i64>)> {
    events
        .iter()
        .filter(|e| !e.event.ends_with("_delta"))
        .map(|e| (e.event.clone(), e.id))
        .collect()
}

/// Asserts the shape of a whole run's stream: `started` first, `finished`
/// last, every event's kind matching its `type`, deltas without ids and
/// the other ids increasing.
fn assert_whole_run(events: &[SseEvent]) {
    assert!(!events.is_empty());
    assert_eq!(events[0].event, "started", "{events:?}");
    assert_eq!(events.last().unwrap().event, "finished", "{events:?}");
    let mut last_id = 0;
    for event in events {
        assert_eq!(event.data["type"], json!(event.event), "{event:?}");
        if event.event.ends_with("_delta") {
            assert_eq!(event.id, None, "deltas carry no id: {event:?}");
        } else {
            let id = event.id.unwrap_or_else(|| panic!("no id: {event:?}"));
            assert!(id > last_id, "ids increase: {events:?}");
            last_id = id;
        }
    }
}

#[tokio::test]
async fn reads_and_their_errors() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, AGENT_A);
    add_agent(
        &dir,
        "quiet",
        "model: mock/m\ndescription: no prompt\nsystem: Be brief.\ntools: [\"c*\"]\nmemory: { tools: true }\n",
    );
    let api = Api::start(dir.path(), &[]).await;

    let (status, health) = api.get_json("/healthz").await;
    assert_eq!(status, 200);
    assert_eq!(health["status"], "ok");
    assert_eq!(health["agents"], 2);

    let response = api.get("/metrics").send().await.unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    // Families with labels appear with their first series; these have none.
    assert!(text.contains("# TYPE aurad_runs_running gauge"), "{text}");
    assert!(
        text.contains("# TYPE aurad_reloads_total counter"),
        "{text}"
    );

    let (status, agents) = api.get_json("/v1/agents").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "quiet"]);

    let (status, agent) = api.get_json("/v1/agents/quiet").await;
    assert_eq!(status, 200);
    assert_eq!(agent["description"], "no prompt");
    assert_eq!(agent["model"], "mock/m");
    assert_eq!(agent["webhook"], false);
    assert_eq!(agent["last_run"], Value::Null);
    // Its allow-list resolved, and the memory tools it gets.
    assert_eq!(
        agent["tools"],
        json!([
            "calculator",
            "current_time",
            "memory_delete",
            "memory_save",
            "memory_search"
        ])
    );

    let (status, error) = api.get_json("/v1/agents/nope").await;
    assert_eq!(status, 404);
    assert!(
        error["error"].as_str().unwrap().contains("`nope`"),
        "{error}"
    );

    let (status, runs) = api.get_json("/v1/runs").await;
    assert_eq!(status, 200);
    assert_eq!(runs, json!({ "runs": [] }));

    let (status, error) = api.get_json("/v1/runs?state=done").await;
    assert_eq!(status, 400);
    let message = error["error"].as_str().unwrap();
    for state in ["queued", "running", "succeeded", "cancelled", "missed"] {
        assert!(message.contains(state), "{message}");
    }
    for query in ["limit=0", "limit=1001", "limit=ten", "colour=red"] {
        let (status, error) = api.get_json(&format!("/v1/runs?{query}")).await;
        assert_eq!(status, 400, "{query}: {error}");
        assert!(error["error"].is_string(), "{error}");
    }

    for path in [
        "/v1/runs/0190aaaa-0000-7000-8000-000000000000",
        "/v1/runs/zzzz",
        "/v1/runs/ab",
        "/v1/runs/zzzz/events",
    ] {
        let (status, error) = api.get_json(path).await;
        assert_eq!(status, 404, "{path}: {error}");
        assert!(error["error"].is_string(), "{error}");
    }
    let (status, _) = api.post_json("/v1/runs/zzzz/cancel", &json!({})).await;
    assert_eq!(status, 404);

    let (status, error) = api.get_json("/nowhere").await;
    assert_eq!(status, 404);
    assert!(
        error["error"].as_str().unwrap().contains("/nowhere"),
        "{error}"
    );
    let (status, error) =
        json_of(api.client.delete(api.url("/v1/runs")).send().await.unwrap()).await;
    assert_eq!(status, 405, "{error}");

    api.stop().await;
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test]
async fn bad_run_requests_are_refused_with_reasons() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, AGENT_A);
    add_agent(&dir, "quiet", "model: mock/m\nsystem: Be brief.\n");
    let api = Api::start(dir.path(), &[]).await;

    let (status, error) = api
        .post_json("/v1/agents/nope/runs", &json!({ "input": "x" }))
        .await;
    assert_eq!(status, 404);
    assert!(
        error["error"].as_str().unwrap().contains("`nope`"),
        "{error}"
    );

    let response = api
        .post("/v1/agents/a/runs")
        .header("content-type", "application/json")
        .body("{\"input\": ")
        .send()
        .await
        .unwrap();
    let (status, error) = json_of(response).await;
    assert_eq!(status, 400);
    assert!(error["error"].as_str().unwrap().contains("EOF"), "{error}");

    let (status, error) = api
        .post_json("/v1/agents/a/runs", &json!({ "inptu": "x" }))
        .await;
    assert_eq!(status, 400);
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("unknown field `inptu`"),
        "{error}"
    );

    let (status, error) = api
        .post_json("/v1/agents/a/runs", &json!({ "vars": [1] }))
        .await;
    assert_eq!(status, 400, "{error}");

    let big = json!({ "input": "x".repeat(1024 * 1024 + 10) }).to_string();
    let response = api
        .post("/v1/agents/a/runs")
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    let (status, error) = json_of(response).await;
    assert_eq!(status, 413);
    assert!(
        error["error"].as_str().unwrap().contains("larger than"),
        "{error}"
    );

    // No prompt and no input: the run cannot be prepared.
    let response = api
        .post("/v1/agents/quiet/runs")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    let (status, error) = json_of(response).await;
    assert_eq!(status, 422);
    assert!(
        error["error"].as_str().unwrap().contains("input"),
        "{error}"
    );

    let (_, runs) = api.get_json("/v1/runs").await;
    assert_eq!(runs, json!({ "runs": [] }));
    api.stop().await;
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test]
async fn a_started_run_succeeds_and_shows_in_lists_metrics_and_agents() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("all done".into()));
    let dir = project_with_mock(&mock, AGENT_A);
    let api = Api::start(dir.path(), &[]).await;

    let response = api
        .post("/v1/agents/a/runs")
        .json(&json!({ "input": "triage issue 42", "vars": { "who": "ops" } }))
        .send()
        .await
        .unwrap();
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let (status, run) = json_of(response).await;
    assert_eq!(status, 202, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    assert_eq!(location, format!("/v1/runs/{id}"));
    assert_eq!(run["agent"], "a");
    assert_eq!(run["trigger"], "api");
    assert_eq!(run["input"], "triage issue 42");
    // A slot was free: claimed `running` at once, never `queued`.
    assert_eq!(run["state"], "running", "{run}");
    assert!(run["started_at"].is_string(), "{run}");

    let run = api.wait_run(&id).await;
    assert_eq!(run["state"], "succeeded", "{run}");
    assert_eq!(run["output"], "all done");
    assert!(request_text(&mock, 0).contains("triage issue 42"));

    let (status, runs) = api.get_json("/v1/runs").await;
    assert_eq!(status, 200);
    assert_eq!(runs["runs"][0]["id"], json!(id));
    let (_, runs) = api
        .get_json("/v1/runs?agent=a&state=succeeded&limit=1")
        .await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1);
    let (_, runs) = api.get_json("/v1/runs?state=failed").await;
    assert_eq!(runs, json!({ "runs": [] }));
    let (_, runs) = api.get_json("/v1/runs?agent=other").await;
    assert_eq!(runs, json!({ "runs": [] }));

    let (status, by_prefix) = api.get_json(&format!("/v1/runs/{}", &id[..13])).await;
    assert_eq!(status, 200);
    assert_eq!(by_prefix["id"], json!(id));

    let (_, agent) = api.get_json("/v1/agents/a").await;
    assert_eq!(agent["last_run"]["id"], json!(id));

    let metrics = api
        .get("/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("aurad_runs_total{agent=\"a\",state=\"succeeded\"} 1\n"),
        "{metrics}"
    );

    let (status, answer) = api
        .post_json(&format!("/v1/runs/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 409);
    assert_eq!(
        answer["error"],
        json!(format!("run {id} is already succeeded"))
    );
    assert_eq!(answer["run"]["id"], json!(id));
    api.stop().await;
}

#[tokio::test]
async fn without_input_the_prompt_is_rendered_with_the_vars() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("one".into()));
    mock.push(Reply::Text("two".into()));
    let dir = project_with_mock(&mock, AGENT_A);
    let api = Api::start(dir.path(), &[]).await;

    // An empty body (JSON by its content type) is all defaults.
    let response = api
        .post("/v1/agents/a/runs")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    let (status, run) = json_of(response).await;
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["input"], "Daily check for nobody");
    let first = api.wait_run(run["id"].as_str().unwrap()).await;
    assert_eq!(first["state"], "succeeded", "{first}");

    let (status, run) = api
        .post_json("/v1/agents/a/runs", &json!({ "vars": { "who": "ops" } }))
        .await;
    assert_eq!(status, 202, "{run}");
    let second = api.wait_run(run["id"].as_str().unwrap()).await;
    assert_eq!(second["state"], "succeeded", "{second}");
    assert!(request_text(&mock, 1).contains("Daily check for ops"));
    api.stop().await;
}

#[tokio::test]
async fn a_run_started_with_accept_event_stream_streams_its_events() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Delay(
        Duration::from_millis(200),
        Box::new(Reply::Text("hello streaming world".into())),
    ));
    let dir = project_with_mock(&mock, AGENT_A);
    let api = Api::start(dir.path(), &[]).await;

    let response = api
        .post("/v1/agents/a/runs")
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "stream please" }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let events = SseReader::new(response).collect(WAIT).await;
    assert_whole_run(&events);
    assert_eq!(events[0].data["input"], "stream please");
    let text: String = events
        .iter()
        .filter(|e| e.event == "text_delta")
        .map(|e| e.data["text"].as_str().unwrap())
        .collect();
    assert_eq!(text, "hello streaming world");
    assert!(events.iter().filter(|e| e.event == "text_delta").count() > 1);
    let finished = &events.last().unwrap().data;
    assert_eq!(finished["state"], "succeeded");

    // The stored events read back the same, the text merged into one delta.
    let id = events[0].data["run_id"].as_str().unwrap().to_string();
    let response = api
        .get(&format!("/v1/runs/{id}/events"))
        .send()
        .await
        .unwrap();
    let stored = SseReader::new(response).collect(WAIT).await;
    assert_eq!(complete_events(&stored), complete_events(&events));
    let merged: Vec<&SseEvent> = stored.iter().filter(|e| e.event == "text_delta").collect();
    assert_eq!(merged.len(), 1, "{stored:?}");
    assert_eq!(merged[0].data["text"], "hello streaming world");
    api.stop().await;
}

#[tokio::test]
async fn events_resume_after_last_event_id_or_after() {
    let mock = MockLlm::start().await;
    mock.push(Reply::tool_call(
        "call_1",
        "calculator",
        r#"{"expression":"6*7"}"#,
    ));
    mock.push(Reply::Text("42".into()));
    let dir = project_with_mock(
        &mock,
        "model: mock/m\nsystem: Use tools.\ntools: [calculator]\n",
    );
    let api = Api::start(dir.path(), &[]).await;

    let (status, run) = api
        .post_json("/v1/agents/a/runs", &json!({ "input": "6*7?" }))
        .await;
    assert_eq!(status, 202, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    assert_eq!(api.wait_run(&id).await["state"], "succeeded");

    let path = format!("/v1/runs/{id}/events");
    let all = SseReader::new(api.get(&path).send().await.unwrap())
        .collect(WAIT)
        .await;
    assert_whole_run(&all);
    assert!(all.len() >= 5, "{all:?}");
    let middle = all[2].id.expect("an id");
    // Everything after that event, the merged text (no id) included.
    let expected: Vec<(String, Option<i64>)> =
        all[3..].iter().map(|e| (e.event.clone(), e.id)).collect();
    assert!(!expected.is_empty());

    let resumed = api
        .get(&path)
        .header("last-event-id", middle.to_string())
        .send()
        .await
        .unwrap();
    let resumed = SseReader::new(resumed).collect(WAIT).await;
    let resumed: Vec<(String, Option<i64>)> =
        resumed.iter().map(|e| (e.event.clone(), e.id)).collect();
    assert_eq!(resumed, expected);

    let by_query = api
        .get(&format!("{path}?after={middle}"))
        .send()
        .await
        .unwrap();
    let by_query = SseReader::new(by_query).collect(WAIT).await;
    assert_eq!(by_query.len(), expected.len());

    let last = all.last().unwrap().id.unwrap();
    let nothing = api
        .get(&format!("{path}?after={last}"))
        .send()
        .await
        .unwrap();
    assert!(SseReader::new(nothing).collect(WAIT).await.is_empty());

    let response = api
        .get(&path)
        .header("last-event-id", "soon")
        .send()
        .await
        .unwrap();
    let (status, error) = json_of(response).await;
    assert_eq!(status, 400);
    assert!(
        error["error"].as_str().unwrap().contains("Last-Event-ID"),
        "{error}"
    );
    api.stop().await;
}

#[tokio::test]
async fn a_hanging_run_is_cancelled_live_and_then_cannot_be_cancelled_again() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Hang);
    let dir = project_with_mock(&mock, AGENT_A);
    let api = Api::start(dir.path(), &[]).await;

    let (status, run) = api
        .post_json("/v1/agents/a/runs", &json!({ "input": "wait" }))
        .await;
    assert_eq!(status, 202, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    mock.wait_for_requests(1, WAIT).await;

    // Subscribed while it runs: the stored start, then live to the end.
    let response = api
        .get(&format!("/v1/runs/{id}/events"))
        .send()
        .await
        .unwrap();
    let mut events = SseReader::new(response);
    let started = events.next(WAIT).await.expect("a started event");
    assert_eq!(started.event, "started");
    assert_eq!(started.id, Some(1));

    let (status, answer) = api
        .post_json(&format!("/v1/runs/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["cancelling"], true);
    assert_eq!(answer["run"]["id"], json!(id));

    let mut rest = events.collect(WAIT).await;
    let finished = rest.pop().expect("a finished event");
    assert_eq!(finished.event, "finished");
    assert_eq!(finished.data["state"], "cancelled");

    let run = api.wait_run(&id).await;
    assert_eq!(run["state"], "cancelled", "{run}");
    let (status, answer) = api
        .post_json(&format!("/v1/runs/{id}/cancel"), &json!({}))
        .await;
    assert_eq!(status, 409);
    assert!(
        answer["error"]
            .as_str()
            .unwrap()
            .contains("already cancelled"),
        "{answer}"
    );
    assert_eq!(answer["run"]["state"], "cancelled");
    api.stop().await;
}

#[tokio::test]
async fn with_a_token_every_route_but_healthz_and_hooks_needs_it() {
    let mock = MockLlm::start().await;
    let dir = project_with_mock(&mock, AGENT_A);
    let mut api = Api::start(dir.path(), &[("AURAD_TOKEN", "tok-123-long-enough-0")]).await;

    let (status, _) = api.get_json("/healthz").await;
    assert_eq!(status, 200);

    let bad_tokens = [
        None,
        Some("tok-123-long-enough-"),
        Some("tok-123-long-enough-00"),
        Some("TOK-123-long-enough-0"),
    ];
    for token in bad_tokens {
        api.token = token.map(str::to_string);
        for (method, path) in [
            ("GET", "/v1/agents"),
            ("GET", "/v1/runs"),
            ("GET", "/metrics"),
            ("POST", "/v1/agents/a/runs"),
        ] {
            let request = match method {
                "GET" => api.get(path),
                _ => api.post(path).json(&json!({ "input": "x" })),
            };
            let response = request.send().await.unwrap();
            let challenge = response.headers().get("www-authenticate").cloned();
            let (status, error) = json_of(response).await;
            assert_eq!(status, 401, "{token:?} {path}");
            assert_eq!(challenge.unwrap(), "Bearer");
            assert!(
                error["error"].as_str().unwrap().contains("Bearer"),
                "{error}"
            );
        }
    }
    let response = api
        .client
        .get(api.url("/v1/agents"))
        .header("authorization", "Basic dG9rLTEyMw==")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);

    api.token = Some("tok-123-long-enough-0".into());
    let (status, agents) = api.get_json("/v1/agents").await;
    assert_eq!(status, 200);
    assert_eq!(agents["agents"][0]["name"], "a");
    assert_eq!(api.get("/metrics").send().await.unwrap().status(), 200);

    // Hooks authenticate by signature, not the token: `a` has no webhook.
    api.token = None;
    let (status, _) = api.post_json("/hooks/a", &json!({})).await;
    assert_eq!(status, 404);
    api.stop().await;
    assert_eq!(mock.request_count(), 0);
}

/// POSTs a webhook delivery to `/hooks/{agent}`.
async fn deliver(
    api: &Api,
    agent: &str,
    body: &[u8],
    signature: Option<&str>,
    delivery: Option<(&str, &str)>,
) -> (u16, Value) {
    let mut request = api
        .client
        .post(api.url(&format!("/hooks/{agent}")))
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(signature) = signature {
        request = request.header("x-hub-signature-256", signature);
    }
    if let Some((header, id)) = delivery {
        request = request.header(header, id);
    }
    json_of(request.send().await.unwrap()).await
}

#[tokio::test]
async fn webhooks_check_signatures_and_run_each_delivery_once() {
    const SECRET: &str = "hook-secret";
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("triaged".into()));
    mock.push(Reply::Text("triaged again".into()));
    let dir = project_with_mock(&mock, AGENT_A);
    add_agent(
        &dir,
        "triage",
        "model: mock/m\nprompt: \"Issue: {{ payload.title }}\"\nwebhook: { secret_env: HOOK_SECRET }\n",
    );
    add_agent(
        &dir,
        "unset",
        "model: mock/m\nprompt: x\nwebhook: { secret_env: UNSET_SECRET }\n",
    );
    let api = Api::start(
        dir.path(),
        &[
            ("HOOK_SECRET", SECRET),
            ("AURAD_TOKEN", "tok-long-enough-000"),
        ],
    )
    .await;
    let body = br#"{"action": "opened", "title": "Broken build", "number": 7}"#;
    let good = sign(SECRET, body);
    let github = |id| Some(("x-github-delivery", id));

    // Refused before anything is claimed or run.
    let (status, error) = deliver(
        &api,
        "triage",
        body,
        Some(&sign("wrong", body)),
        github("d-1"),
    )
    .await;
    assert_eq!(status, 401, "{error}");
    let (status, error) = deliver(&api, "triage", body, None, github("d-1")).await;
    assert_eq!(status, 401, "{error}");
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("X-Hub-Signature-256"),
        "{error}"
    );
    let (status, error) = deliver(&api, "triage", b"{}", Some(&good), github("d-1")).await;
    assert_eq!(status, 401, "a signature of another body: {error}");
    let (status, error) = deliver(&api, "triage", body, Some(&good), None).await;
    assert_eq!(status, 400);
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .contains("X-GitHub-Delivery"),
        "{error}"
    );
    let not_json = b"action=opened";
    let (status, error) = deliver(
        &api,
        "triage",
        not_json,
        Some(&sign(SECRET, not_json)),
        github("d-1"),
    )
    .await;
    assert_eq!(status, 400);
    assert!(error["error"].as_str().unwrap().contains("JSON"), "{error}");
    for agent in ["a", "nope"] {
        let (status, error) = deliver(&api, agent, body, Some(&good), github("d-1")).await;
        assert_eq!(status, 404, "{agent}: {error}");
    }
    let (status, error) = deliver(&api, "unset", body, Some(&good), github("d-1")).await;
    assert_eq!(status, 500);
    assert!(
        error["error"].as_str().unwrap().contains("UNSET_SECRET"),
        "{error}"
    );
    assert_eq!(mock.request_count(), 0);

    let (status, run) = deliver(&api, "triage", body, Some(&good), github("d-1")).await;
    assert_eq!(status, 202, "{run}");
    assert_eq!(run["trigger"], "webhook");
    assert_eq!(run["input"], "Issue: Broken build");
    let mut api = api;
    api.token = Some("tok-long-enough-000".into());
    let done = api.wait_run(run["id"].as_str().unwrap()).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert!(request_text(&mock, 0).contains("Issue: Broken build"));

    let (status, answer) = deliver(&api, "triage", body, Some(&good), github("d-1")).await;
    assert_eq!(status, 200);
    assert_eq!(answer, json!({ "duplicate": true, "delivery": "d-1" }));
    let (_, runs) = api.get_json("/v1/runs?agent=triage").await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(mock.request_count(), 1);

    // Another delivery, named by X-Delivery-Id, runs again.
    let (status, run) = deliver(
        &api,
        "triage",
        body,
        Some(&good),
        Some(("x-delivery-id", "d-2")),
    )
    .await;
    assert_eq!(status, 202, "{run}");
    let done = api.wait_run(run["id"].as_str().unwrap()).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    api.stop().await;
}

#[tokio::test]
async fn shutdown_refuses_new_runs_and_ends_open_streams() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Hang);
    let dir = project_with_mock(&mock, AGENT_A);
    add_settings(dir.path(), "shutdown_grace: 1s\n");
    add_agent(&dir, "quiet", "model: mock/m\nsystem: Be brief.\n");
    let api = Api::start(dir.path(), &[]).await;

    let response = api
        .post("/v1/agents/a/runs")
        .header("accept", "text/event-stream")
        .json(&json!({ "input": "wait" }))
        .send()
        .await
        .unwrap();
    let mut events = SseReader::new(response);
    assert_eq!(events.next(WAIT).await.unwrap().event, "started");
    mock.wait_for_requests(1, WAIT).await;

    let client = api.client.clone();
    let token = api.token.clone().unwrap_or_default();
    let quiet = api.url("/v1/agents/quiet/runs");
    let stopping = tokio::spawn(api.stop());
    // Until the shutdown begins `quiet` cannot run for want of input (422);
    // then no run is accepted at all (503) while the grace period lasts.
    let error = eventually("runs to be refused with 503", WAIT, || async {
        let request = client
            .post(&quiet)
            .bearer_auth(&token)
            .header("content-type", "application/json");
        let (status, body) = json_of(request.send().await.unwrap()).await;
        assert!(status == 422 || status == 503, "{status}: {body}");
        (status == 503).then_some(body)
    })
    .await;
    assert!(
        error["error"].as_str().unwrap().contains("shutting down"),
        "{error}"
    );

    let rest = events.collect(WAIT).await;
    let finished = rest.last().expect("a finished event");
    assert_eq!(finished.event, "finished");
    assert_eq!(finished.data["state"], "cancelled");
    tokio::time::timeout(WAIT, stopping).await.unwrap().unwrap();
}
