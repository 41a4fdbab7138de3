//! The OpenAI Responses wire format against the mock on 127.0.0.1, for
//! what only it has (the cases every format shares are in
//! `providers.rs`): the request body of a stateless conversation
//! (instructions, input items with a carried reasoning item, function calls
//! and their outputs, tools, `prompt_cache_key` with caching on and off,
//! `text.format` for an output schema), argument deltas without a done
//! event, cached tokens, an answer cut at its token limit, failures and
//! `error` events, a stream cut before `response.completed` retried, a
//! whole JSON answer; and `aurad run` of an agent on a `kind:
//! openai-responses` provider, whose second request carries the first
//! answer's reasoning item, its call and the call's output.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::time::Duration;

use assert_cmd::cargo::cargo_bin_cmd;
use aurad::llm::openai_responses::{ITEMS_KEY, OpenAiResponsesProvider};
use aurad::llm::retry::{RetryPolicy, stream_with_retry};
use aurad::llm::{ChatRequest, CutKind, Delta, EarlyStop, ModelTurn, Provider, ProviderError};
use aurad::types::{Message, ToolCall, ToolSpec};
use serde_json::{Value, json};
use support::mock_llm::{Fault, FaultPlan, MockLlm, Reply};

const WAIT: Duration = Duration::from_secs(10);

fn provider(mock: &MockLlm, prompt_caching: bool) -> OpenAiResponsesProvider {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    OpenAiResponsesProvider::new(
        mock.base_url(),
        Some("sk-test".into()),
        client,
        prompt_caching,
    )
}

fn request(text: &str) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![Message::system("Be brief."), Message::user(text)],
        tools: vec![],
        temperature: None,
        max_tokens: None,
        output_schema: None,
        cache_key: Some("helper".into()),
    }
}

async fn call(
    p: &dyn Provider,
    req: &ChatRequest,
) -> (Result<ModelTurn, ProviderError>, Vec<Delta>) {
    let mut deltas = Vec::new();
    let result = p.stream(req, &mut |d| deltas.push(d)).await;
    (result, deltas)
}

/// One call through the retry layer: the result and the errors retried.
async fn call_retrying(
    p: &dyn Provider,
    req: &ChatRequest,
) -> (Result<ModelTurn, ProviderError>, Vec<ProviderError>) {
    let policy = RetryPolicy {
        max_attempts: 3,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    };
    let mut retried = Vec::new();
    let result = stream_with_retry(p, req, &policy, &mut |_| {}, &mut |_, _, e| {
        retried.push(e.clone())
    })
    .await;
    (result, retried)
}

fn event(kind: &str, mut fields: Value) -> Value {
    fields["type"] = json!(kind);
    fields
}

fn completed(output: Value, usage: Value) -> Value {
    event(
        "response.completed",
        json!({ "response": { "id": "resp_t", "model": "m-2026", "status": "completed",
            "output": output, "usage": usage } }),
    )
}

#[tokio::test]
async fn the_request_carries_the_conversation_statelessly() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("ok".into()));
    mock.push(Reply::Text("ok".into()));
    let reasoning = json!({ "type": "reasoning", "id": "rs_1",
        "summary": [{ "type": "summary_text", "text": "Read it first." }],
        "encrypted_content": "gAAAA-secret-thoughts" });
    let mut req = request("summarise notes.txt");
    req.messages.push(Message::Assistant {
        content: String::new(),
        tool_calls: vec![ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"notes.txt"}"#.into(),
        }],
        provider_items: Some(json!({ ITEMS_KEY: [reasoning.clone()] })),
    });
    req.messages.push(Message::Tool {
        tool_call_id: "call_1".into(),
        name: "read_file".into(),
        content: "buy milk".into(),
        is_error: false,
    });
    req.tools = vec![ToolSpec {
        name: "read_file".into(),
        description: "Reads a file.".into(),
        parameters: json!({ "type": "object", "properties": { "path": { "type": "string" } } }),
    }];
    req.output_schema = Some(json!({ "type": "object", "required": ["summary"] }));
    req.max_tokens = Some(500);
    call(&provider(&mock, true), &req).await.0.unwrap();
    call(&provider(&mock, false), &req).await.0.unwrap();

    let sent = mock.wait_for_requests(2, WAIT).await;
    let body = &sent[0].body;
    assert_eq!(sent[0].path, "/v1/responses");
    assert_eq!(sent[0].header("authorization"), Some("Bearer sk-test"));
    assert_eq!(body["instructions"], "Be brief.");
    assert_eq!(
        body["input"],
        json!([
            { "type": "message", "role": "user", "content": "summarise notes.txt" },
            reasoning,
            { "type": "function_call", "call_id": "call_1", "name": "read_file",
              "arguments": "{\"path\":\"notes.txt\"}" },
            { "type": "function_call_output", "call_id": "call_1", "output": "buy milk" },
        ]),
        "{body}"
    );
    assert_eq!(
        body["tools"],
        json!([{ "type": "function", "name": "read_file", "description": "Reads a file.",
            "parameters": req.tools[0].parameters, "strict": false }])
    );
    assert_eq!(
        body["text"]["format"],
        json!({ "type": "json_schema", "name": "output",
            "schema": { "type": "object", "required": ["summary"] }, "strict": false })
    );
    assert_eq!(body["max_output_tokens"], 500);
    assert_eq!(
        (&body["stream"], &body["store"]),
        (&json!(true), &json!(false))
    );
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(body["prompt_cache_key"], "helper", "caching on");
    assert!(
        sent[1].body.get("prompt_cache_key").is_none(),
        "caching off: {}",
        sent[1].body
    );
}

#[tokio::test]
async fn reasoning_summaries_stream_and_the_reasoning_item_is_kept_to_carry() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Reasoning("Check twice.".into(), "Done.".into()));
    let (turn, deltas) = call(&provider(&mock, true), &request("hi")).await;
    let turn = turn.unwrap();
    assert_eq!(
        (turn.reasoning.as_str(), turn.text.as_str()),
        ("Check twice.", "Done.")
    );
    assert!(
        deltas
            .iter()
            .filter(|d| matches!(d, Delta::Reasoning(_)))
            .count()
            > 1
    );
    let items = turn.provider_items.expect("a reasoning item to carry");
    assert_eq!(items[ITEMS_KEY][0]["encrypted_content"], "enc-mock");
    assert_eq!(items[ITEMS_KEY][0]["id"], "rs_0");
    assert_eq!(turn.response_id.as_deref(), Some("resp_mock"));
}

#[tokio::test]
async fn argument_deltas_of_two_calls_cached_tokens_and_a_token_limit() {
    let mock = MockLlm::start().await;
    let added = |i: u64, call_id: &str| {
        event(
            "response.output_item.added",
            json!({ "output_index": i, "item": { "type": "function_call", "id": format!("fc_{i}"),
                "call_id": call_id, "name": "read_file", "arguments": "" } }),
        )
    };
    let piece = |i: u64, delta: &str| {
        event(
            "response.function_call_arguments.delta",
            json!({ "output_index": i, "item_id": format!("fc_{i}"), "delta": delta }),
        )
    };
    // No `.done` events: the arguments are the deltas put together.
    mock.push(Reply::Chunks(vec![
        added(0, "call_a"),
        added(1, "call_b"),
        piece(0, "{\"pa"),
        piece(1, "{\"path\":"),
        piece(0, "th\":\"a.txt\"}"),
        piece(1, "\"b.txt\"}"),
        completed(
            json!([]),
            json!({ "input_tokens": 2048, "input_tokens_details": { "cached_tokens": 1920 },
                "output_tokens": 31 }),
        ),
    ]));
    mock.push(Reply::Chunks(vec![
        event(
            "response.output_text.delta",
            json!({ "output_index": 0, "item_id": "msg", "content_index": 0, "delta": "The li" }),
        ),
        event(
            "response.incomplete",
            json!({ "response": { "id": "resp_i", "status": "incomplete",
                "incomplete_details": { "reason": "max_output_tokens" }, "output": [],
                "usage": { "input_tokens": 9, "output_tokens": 16 } } }),
        ),
    ]));
    let p = provider(&mock, true);
    let turn = call(&p, &request("read a and b")).await.0.unwrap();
    let calls: Vec<(&str, Value)> = turn
        .tool_calls
        .iter()
        .map(|c| (c.id.as_str(), serde_json::from_str(&c.arguments).unwrap()))
        .collect();
    assert_eq!(
        calls,
        [
            ("call_a", json!({ "path": "a.txt" })),
            ("call_b", json!({ "path": "b.txt" }))
        ]
    );
    assert_eq!(turn.usage.input_tokens, Some(2048));
    assert_eq!(turn.usage.cached_input_tokens, Some(1920));
    assert_eq!(turn.usage.output_tokens, Some(31));

    let cut = call(&p, &request("list")).await.0.unwrap();
    assert_eq!(cut.text, "The li");
    assert_eq!(cut.early_stop(), Some(EarlyStop::OutputLimit));
}

#[tokio::test]
async fn failures_fail_rate_limits_are_retried_and_cuts_are_retried() {
    let failed = |code: &str| {
        Reply::Chunks(vec![event(
            "response.failed",
            json!({ "response": { "id": "r", "status": "failed",
                "error": { "code": code, "message": "mock failure" } } }),
        )])
    };
    let mock = MockLlm::start().await;
    let p = provider(&mock, true);
    mock.push(failed("invalid_prompt"));
    mock.push(Reply::Text("never sent".into()));
    let (result, retried) = call_retrying(&p, &request("hi")).await;
    match result {
        Err(ProviderError::Stream(message)) => {
            assert!(message.contains("invalid_prompt: mock failure"))
        }
        other => panic!("{other:?}"),
    }
    assert!(retried.is_empty());
    assert_eq!(mock.request_count(), 1);

    let mock = MockLlm::start().await;
    let p = provider(&mock, true);
    mock.push(Reply::Chunks(vec![event(
        "error",
        json!({ "code": "invalid_request_error", "message": "bad input", "param": null }),
    )]));
    let err = call(&p, &request("hi")).await.0.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Stream(m) if m.contains("bad input")),
        "{err:?}"
    );

    let mock = MockLlm::start().await;
    let p = provider(&mock, true);
    mock.push(failed("rate_limit_exceeded"));
    mock.push(Reply::Text("after the limit".into()));
    let (result, retried) = call_retrying(&p, &request("hi")).await;
    assert_eq!(result.unwrap().text, "after the limit");
    assert!(
        matches!(retried[..], [ProviderError::Status { status: 429, .. }]),
        "{retried:?}"
    );

    // Half of the answer's events, then the stream ends cleanly: a cut,
    // asked again.
    let mock = MockLlm::start().await;
    mock.set_faults(FaultPlan::new(7).at(1, Fault::EndEarly));
    mock.push(Reply::Text("whole at last".into()));
    let p = provider(&mock, true);
    let (result, retried) = call_retrying(&p, &request("hi")).await;
    assert_eq!(result.unwrap().text, "whole at last");
    assert!(
        matches!(
            retried[..],
            [ProviderError::Cut {
                kind: CutKind::EndedEarly,
                ..
            }]
        ),
        "{retried:?}"
    );
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn a_whole_json_answer_is_accepted() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Raw {
        status: 200,
        headers: vec![],
        body: json!({ "id": "resp_w", "object": "response", "model": "m", "status": "completed",
            "error": null,
            "output": [{ "type": "message", "role": "assistant",
                "content": [{ "type": "output_text", "text": "all at once", "annotations": [] }] }],
            "usage": { "input_tokens": 4, "output_tokens": 3 } })
        .to_string(),
    });
    let (turn, deltas) = call(&provider(&mock, true), &request("hi")).await;
    let turn = turn.unwrap();
    assert_eq!(turn.text, "all at once");
    assert_eq!(deltas, [Delta::Text("all at once".into())]);
    assert_eq!(turn.usage.output_tokens, Some(3));
}

/// `aurad run` of an agent whose provider is `kind: openai-responses`: the
/// model reasons and calls the calculator, then answers; the second request
/// carries the reasoning item, the call and its output, in that order.
#[test]
fn aurad_run_carries_reasoning_and_the_call_into_the_next_request() {
    let mock = MockLlm::start_in_thread();
    let reasoning = json!({ "type": "reasoning", "id": "rs_e2e",
        "summary": [{ "type": "summary_text", "text": "Use the calculator." }],
        "encrypted_content": "enc-e2e-opaque" });
    let call = json!({ "type": "function_call", "id": "fc_e2e", "call_id": "call_e2e",
        "name": "calculator", "arguments": "{\"expression\":\"6*7\"}" });
    mock.push(Reply::Chunks(vec![
        event("response.created", json!({ "response": { "id": "resp_1", "model": "m" } })),
        event(
            "response.output_item.added",
            json!({ "output_index": 0, "item": { "type": "reasoning", "id": "rs_e2e", "summary": [] } }),
        ),
        event(
            "response.output_item.done",
            json!({ "output_index": 0, "item": reasoning }),
        ),
        event("response.output_item.done", json!({ "output_index": 1, "item": call })),
        completed(
            json!([reasoning, call]),
            json!({ "input_tokens": 10, "output_tokens": 5 }),
        ),
    ]));
    mock.push(Reply::Text("The answer is 42.".into()));
    let dir = support::project::project_with_mock(
        &mock,
        "model: gw/m\nsystem: Be exact.\ntools: [calculator]\n",
    );
    support::project::add_settings(
        dir.path(),
        &format!(
            "  gw: {{ kind: openai-responses, base_url: \"{}\" }}\n",
            mock.base_url()
        ),
    );
    cargo_bin_cmd!("aurad")
        .args(["run", "a", "--input", "what is 6*7?", "--dir"])
        .arg(dir.path())
        .env_remove("OPENAI_API_KEY")
        .assert()
        .code(0)
        .stdout("The answer is 42.\n");

    let sent = mock.wait_for_requests_blocking(2, WAIT);
    assert!(sent.iter().all(|r| r.path == "/v1/responses"), "{sent:?}");
    assert_eq!(sent[0].body["instructions"], "Be exact.");
    let input = sent[1].body["input"].as_array().unwrap().clone();
    let at = |kind: &str| {
        input
            .iter()
            .position(|i| i["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} in {input:?}"))
    };
    let (r, c, o) = (
        at("reasoning"),
        at("function_call"),
        at("function_call_output"),
    );
    assert!(
        r < c && c < o,
        "reasoning, call, output in order: {input:?}"
    );
    assert_eq!(input[r], reasoning);
    assert_eq!(input[c]["call_id"], "call_e2e");
    assert_eq!(input[c]["arguments"], "{\"expression\":\"6*7\"}");
    assert_eq!(input[o]["call_id"], "call_e2e");
    assert!(
        input[o]["output"].as_str().unwrap().contains("42"),
        "{}",
        input[o]
    );
}
