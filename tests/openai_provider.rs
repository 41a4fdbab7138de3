//! `OpenAiProvider` and `stream_with_retry` against the scripted mock server
//! (real HTTP on 127.0.0.1): streaming, tool-call assembly, the request
//! sent, error mapping and retries; plus sanity checks of the mock itself.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::time::Duration;

use aurad::llm::openai::OpenAiProvider;
use aurad::llm::retry::{RetryPolicy, stream_with_retry};
use aurad::llm::{ChatRequest, CutKind, Delta, ModelTurn, Provider, ProviderError};
use aurad::types::{Message, ToolCall, ToolSpec};
use serde_json::json;
use support::mock_llm::{MockLlm, Reply};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(10);

fn provider(mock: &MockLlm, key: Option<&str>) -> OpenAiProvider {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    OpenAiProvider::new(mock.base_url(), key.map(str::to_string), client, true)
}

fn request(text: &str) -> ChatRequest {
    ChatRequest {
        model: "mock-model".into(),
        messages: vec![Message::system("be brief"), Message::user(text)],
        tools: vec![],
        temperature: None,
        max_tokens: None,
        output_schema: None,
        cache_key: None,
    }
}

fn fast_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    }
}

/// One provider call; returns the result and the deltas seen.
async fn call(
    p: &OpenAiProvider,
    req: &ChatRequest,
) -> (Result<ModelTurn, ProviderError>, Vec<Delta>) {
    let mut deltas = Vec::new();
    let result = p.stream(req, &mut |d| deltas.push(d)).await;
    (result, deltas)
}

/// One call through the retry layer; returns the result, deltas and the
/// retries reported (attempt, delay, error).
async fn call_retrying(
    p: &OpenAiProvider,
    req: &ChatRequest,
) -> (
    Result<ModelTurn, ProviderError>,
    Vec<Delta>,
    Vec<(u32, Duration, ProviderError)>,
) {
    let mut deltas = Vec::new();
    let mut retries = Vec::new();
    let result = stream_with_retry(
        p,
        req,
        &fast_policy(),
        &mut |d| deltas.push(d),
        &mut |n, d, e| retries.push((n, d, e.clone())),
    )
    .await;
    (result, deltas, retries)
}

fn triple(id: &str, name: &str, args: &str) -> (String, String, String) {
    (id.into(), name.into(), args.into())
}

fn calls_of(turn: &ModelTurn) -> Vec<(String, String, String)> {
    turn.tool_calls
        .iter()
        .map(|c| triple(&c.id, &c.name, &c.arguments))
        .collect()
}

#[tokio::test]
async fn text_deltas_arrive_in_order_and_assemble() {
    let mock = MockLlm::start().await;
    let text = "Hello there, this answer is streamed in small pieces. ✓ done";
    mock.push(Reply::Text(text.into()));
    let (turn, deltas) = call(&provider(&mock, None), &request("hi")).await;
    let turn = turn.unwrap();
    assert!(deltas.len() > 5, "expected many deltas, got {deltas:?}");
    let joined: String = deltas
        .iter()
        .map(|d| match d {
            Delta::Text(t) => t.as_str(),
            Delta::Reasoning(_) => panic!("unexpected reasoning"),
        })
        .collect();
    assert_eq!(joined, text);
    assert_eq!(turn.text, text);
    assert_eq!(turn.finish_reason.as_deref(), Some("stop"));
    assert_eq!(turn.usage.input_tokens, Some(10));
    assert_eq!(turn.usage.output_tokens, Some(5));
    assert!(turn.tool_calls.is_empty());
}

#[tokio::test]
async fn split_parallel_tool_calls_assemble_in_index_order() {
    let mock = MockLlm::start().await;
    let calls = vec![
        triple(
            "call_alpha",
            "read_file",
            r#"{"path":"notes/today.md","max_bytes":4096}"#,
        ),
        triple(
            "call_beta",
            "search",
            r#"{"query":"retry after","limit":3}"#,
        ),
        triple("call_gamma", "now", "{}"),
    ];
    mock.push(Reply::ToolCalls(calls.clone()));
    mock.push(Reply::ToolCallsInterleaved(calls.clone()));
    let p = provider(&mock, None);
    for _ in 0..2 {
        let (turn, deltas) = call(&p, &request("go")).await;
        let turn = turn.unwrap();
        assert_eq!(calls_of(&turn), calls);
        assert_eq!(turn.finish_reason.as_deref(), Some("tool_calls"));
        assert!(deltas.is_empty() && turn.text.is_empty());
    }
}

#[tokio::test]
async fn reasoning_deltas_come_before_text() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Reasoning(
        "Let me think about it.".into(),
        "It is 4.".into(),
    ));
    let (turn, deltas) = call(&provider(&mock, None), &request("2+2?")).await;
    let turn = turn.unwrap();
    assert_eq!(turn.reasoning, "Let me think about it.");
    assert_eq!(turn.text, "It is 4.");
    let first_text = deltas
        .iter()
        .position(|d| matches!(d, Delta::Text(_)))
        .unwrap();
    assert!(first_text > 0);
    assert!(
        deltas[..first_text]
            .iter()
            .all(|d| matches!(d, Delta::Reasoning(_)))
    );
    assert!(
        deltas[first_text..]
            .iter()
            .all(|d| matches!(d, Delta::Text(_)))
    );
}

#[tokio::test]
async fn request_carries_stream_options_tools_messages_and_key() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Text("ok".into()));
    mock.push(Reply::Text("ok".into()));
    let req = ChatRequest {
        model: "gpt-test".into(),
        messages: vec![
            Message::system("sys"),
            Message::user("read it"),
            Message::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "call_7".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"a"}"#.into(),
                }],
                provider_items: None,
            },
            Message::Tool {
                tool_call_id: "call_7".into(),
                name: "read_file".into(),
                content: "file text".into(),
                is_error: false,
            },
        ],
        tools: vec![ToolSpec {
            name: "read_file".into(),
            description: "Reads a file".into(),
            parameters: json!({ "type": "object", "properties": { "path": { "type": "string" } } }),
        }],
        temperature: Some(0.5),
        max_tokens: Some(256),
        output_schema: None,
        cache_key: None,
    };
    call(&provider(&mock, Some("sk-test")), &req)
        .await
        .0
        .unwrap();
    call(&provider(&mock, None), &request("plain"))
        .await
        .0
        .unwrap();

    let reqs = mock.wait_for_requests(2, WAIT).await;
    let r = &reqs[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert_eq!(r.header("Authorization"), Some("Bearer sk-test"));
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert_eq!(r.body["model"], "gpt-test");
    assert_eq!(r.body["stream"], true);
    assert_eq!(r.body["stream_options"]["include_usage"], true);
    assert_eq!(r.body["temperature"], 0.5);
    assert_eq!(r.body["max_tokens"], 256);
    assert_eq!(r.body["tools"][0]["type"], "function");
    assert_eq!(r.body["tools"][0]["function"]["name"], "read_file");
    assert_eq!(
        r.body["tools"][0]["function"]["parameters"]["type"],
        "object"
    );
    let m = r.messages();
    assert_eq!(m.len(), 4);
    assert_eq!(m[2]["role"], "assistant");
    assert!(m[2]["content"].is_null());
    assert_eq!(m[2]["tool_calls"][0]["id"], "call_7");
    assert_eq!(
        m[2]["tool_calls"][0]["function"]["arguments"],
        r#"{"path":"a"}"#
    );
    assert_eq!(
        m[3],
        json!({ "role": "tool", "tool_call_id": "call_7", "content": "file text" })
    );

    let plain = &reqs[1];
    assert_eq!(plain.header("authorization"), None);
    assert!(plain.body.get("tools").is_none());
}

#[tokio::test]
async fn client_error_reaches_the_caller_and_is_not_retried() {
    let mock = MockLlm::start().await;
    mock.push(Reply::error(400, "bad model"));
    mock.push(Reply::Text("never used".into()));
    let (result, deltas, retries) = call_retrying(&provider(&mock, None), &request("x")).await;
    match result {
        Err(ProviderError::Status {
            status: 400,
            message,
            ..
        }) => assert_eq!(message, "bad model"),
        other => panic!("expected 400, got {other:?}"),
    }
    assert!(deltas.is_empty() && retries.is_empty());
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn server_error_then_success_is_retried() {
    let mock = MockLlm::start().await;
    mock.push(Reply::error(500, "boom"));
    mock.push(Reply::Text("second time".into()));
    let (result, _, retries) = call_retrying(&provider(&mock, None), &request("x")).await;
    assert_eq!(result.unwrap().text, "second time");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].0, 1);
    assert!(
        matches!(&retries[0].2, ProviderError::Status { status: 500, message, .. } if message == "boom")
    );
    assert_eq!(mock.wait_for_requests(2, WAIT).await.len(), 2);
}

#[tokio::test]
async fn rate_limit_retry_after_is_parsed_and_honoured() {
    let mock = MockLlm::start().await;
    let limited = |secs: &str| Reply::Raw {
        status: 429,
        headers: vec![("Retry-After".into(), secs.into())],
        body: r#"{"error":{"message":"slow down"}}"#.into(),
    };
    // Retry-After: 0 is retried at once.
    mock.push(limited("0"));
    mock.push(Reply::Text("fine".into()));
    let p = provider(&mock, None);
    let (result, _, retries) = call_retrying(&p, &request("x")).await;
    assert_eq!(result.unwrap().text, "fine");
    assert_eq!(retries.len(), 1);
    assert_eq!(retries[0].2.retry_after(), Some(Duration::ZERO));

    // The provider reports the wait it was asked for.
    mock.push(limited("7"));
    let (result, _) = call(&p, &request("x")).await;
    let err = result.unwrap_err();
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    assert!(err.to_string().contains("slow down"), "{err}");

    // More than MAX_RETRY_AFTER (10 minutes): give up at once instead of
    // waiting, with the provider's error and why.
    mock.push(limited("3600"));
    let before = mock.request_count();
    let (result, _, retries) = call_retrying(&p, &request("x")).await;
    let err = result.unwrap_err();
    assert!(
        matches!(&err, ProviderError::GaveUp { last, .. } if matches!(**last, ProviderError::Status { status: 429, .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("slow down"), "{err}");
    assert!(retries.is_empty());
    assert_eq!(mock.request_count(), before + 1);
}

#[tokio::test]
async fn dropped_connection_is_a_connect_error_and_is_retried() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Drop);
    let p = provider(&mock, None);
    let (result, _) = call(&p, &request("x")).await;
    assert!(
        matches!(result, Err(ProviderError::Connect(_))),
        "{result:?}"
    );

    mock.push(Reply::Drop);
    mock.push(Reply::Text("recovered".into()));
    let (result, _, retries) = call_retrying(&p, &request("x")).await;
    assert_eq!(result.unwrap().text, "recovered");
    assert_eq!(retries.len(), 1);
    assert!(matches!(retries[0].2, ProviderError::Connect(_)));
    assert_eq!(mock.request_count(), 3);
}

#[tokio::test]
async fn connection_refused_is_a_connect_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let p = OpenAiProvider::new(
        format!("http://127.0.0.1:{port}/v1"),
        None,
        reqwest::Client::new(),
        true,
    );
    let (result, _) = call(&p, &request("x")).await;
    assert!(
        matches!(result, Err(ProviderError::Connect(_))),
        "{result:?}"
    );
}

#[tokio::test]
async fn error_object_mid_stream_is_a_stream_error_and_not_retried() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Chunks(vec![
        json!({ "choices": [{ "index": 0, "delta": { "content": "partial " }, "finish_reason": null }] }),
        json!({ "error": { "message": "model overloaded", "type": "server_error" } }),
    ]));
    mock.push(Reply::Text("never used".into()));
    let (result, deltas, retries) = call_retrying(&provider(&mock, None), &request("x")).await;
    match result {
        Err(ProviderError::Stream(m)) => assert!(m.contains("model overloaded"), "{m}"),
        other => panic!("expected Stream error, got {other:?}"),
    }
    assert_eq!(deltas, vec![Delta::Text("partial ".into())]);
    assert!(retries.is_empty());
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn stream_ending_without_finish_or_done_is_an_error() {
    let mock = MockLlm::start().await;
    let sse = |body: &str| Reply::Raw {
        status: 200,
        headers: vec![("Content-Type".into(), "text/event-stream".into())],
        body: body.into(),
    };
    let content = r#"data: {"choices":[{"index":0,"delta":{"content":"cut"}}]}"#;
    mock.push(sse(&format!(": keep-alive\n\n{content}\n\n")));
    mock.push(sse(&format!(
        "{content}\n\ndata: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"length\"}}]}}\n\n"
    )));
    let p = provider(&mock, None);
    let (result, _) = call(&p, &request("x")).await;
    // A cut (retryable), not an answer.
    assert!(
        matches!(
            &result,
            Err(ProviderError::Cut {
                kind: CutKind::EndedEarly,
                ..
            })
        ),
        "{result:?}"
    );
    let (result, _) = call(&p, &request("x")).await;
    let turn = result.unwrap();
    assert_eq!(
        (turn.text.as_str(), turn.finish_reason.as_deref()),
        ("cut", Some("length"))
    );
}

#[tokio::test]
async fn non_streamed_json_answer_is_accepted() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Raw {
        status: 200,
        headers: vec![],
        body: json!({
            "choices": [{ "index": 0, "finish_reason": "stop",
                "message": { "role": "assistant", "content": "all at once" } }],
            "usage": { "prompt_tokens": 3, "completion_tokens": 4 },
        })
        .to_string(),
    });
    let (result, deltas) = call(&provider(&mock, None), &request("x")).await;
    let turn = result.unwrap();
    assert_eq!(turn.text, "all at once");
    assert_eq!(turn.usage.output_tokens, Some(4));
    assert_eq!(deltas.len(), 1);
}

// ---- the mock itself ----

/// Sends a raw HTTP request and reads until the server closes, or `None`
/// when nothing arrives within `within`.
async fn raw_exchange(mock: &MockLlm, path: &str, within: Duration) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(mock.addr()).await.unwrap();
    let body = r#"{"model":"m","messages":[]}"#;
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    match tokio::time::timeout(within, s.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

#[tokio::test]
async fn mock_hang_drop_404_fallback_and_delay() {
    let mock = MockLlm::start().await;
    mock.push(Reply::Hang);
    mock.push(Reply::Drop);
    mock.push(Reply::Delay(
        Duration::from_millis(20),
        Box::new(Reply::Text("late".into())),
    ));

    // Hang: recorded, but no answer within the bound.
    assert_eq!(
        raw_exchange(&mock, "/v1/chat/completions", Duration::from_millis(300)).await,
        None
    );
    assert_eq!(mock.wait_for_requests(1, WAIT).await[0].body["model"], "m");
    // Drop: the connection closes with no bytes.
    assert_eq!(
        raw_exchange(&mock, "/v1/chat/completions", WAIT)
            .await
            .as_deref(),
        Some("")
    );
    // Delay: answers after waiting, streamed chunked.
    let late = raw_exchange(&mock, "/v1/chat/completions", WAIT)
        .await
        .unwrap();
    assert!(
        late.starts_with("HTTP/1.1 200") && late.contains("text/event-stream"),
        "{late}"
    );
    assert!(late.contains("[DONE]"));
    // Other paths: 404, still recorded; the script is untouched.
    mock.push(Reply::Text("kept".into()));
    let not_found = raw_exchange(&mock, "/v1/models", WAIT).await.unwrap();
    assert!(not_found.starts_with("HTTP/1.1 404"), "{not_found}");
    assert_eq!(mock.remaining(), 1);
    let reqs = mock.wait_for_requests(4, WAIT).await;
    assert_eq!(reqs[3].path, "/v1/models");

    // Empty script: the default fallback is a 500, then a custom one.
    let p = provider(&mock, None);
    call(&p, &request("x")).await.0.unwrap();
    let (result, _) = call(&p, &request("x")).await;
    match result {
        Err(ProviderError::Status {
            status: 500,
            message,
            ..
        }) => {
            assert_eq!(message, "mock: no scripted reply left")
        }
        other => panic!("expected the fallback 500, got {other:?}"),
    }
    mock.set_fallback(Reply::Text("always".into()));
    assert_eq!(call(&p, &request("x")).await.0.unwrap().text, "always");
}

#[test]
fn mock_runs_in_its_own_thread_for_sync_callers() {
    let mock = MockLlm::start_in_thread();
    mock.push(Reply::Text("from a thread".into()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let turn = rt
        .block_on(async { call(&provider(&mock, None), &request("x")).await.0 })
        .unwrap();
    assert_eq!(turn.text, "from a thread");
    let reqs = mock.wait_for_requests_blocking(1, WAIT);
    assert_eq!(reqs[0].messages()[1]["content"], "x");
}
