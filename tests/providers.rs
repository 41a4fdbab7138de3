//! The provider conformance suite: the same cases, run against each of the
//! four wire formats (OpenAI chat completions, OpenAI Responses, Anthropic
//! Messages, Gemini streamGenerateContent) through the one `Provider` trait, each provider
//! talking real HTTP to the scripted mock on 127.0.0.1, which answers in the
//! format the route asks for. Only what differs by wire is written per wire:
//! how a provider is built, where the auth key and tool results travel.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a test: a panic is its failure report, and what it prints helps read one"
)]

mod support;

use std::time::Duration;

use aurad::llm::anthropic::AnthropicProvider;
use aurad::llm::gemini::GeminiProvider;
use aurad::llm::openai::OpenAiProvider;
use aurad::llm::openai_responses::OpenAiResponsesProvider;
use aurad::llm::retry::{RetryPolicy, stream_with_retry};
use aurad::llm::{ChatRequest, CutKind, Delta, ModelTurn, Provider, ProviderError};
use aurad::types::{Message, ToolCall, ToolSpec};
use serde_json::{Value, json};
use support::mock_llm::{MockLlm, Recorded, Reply};

const WAIT: Duration = Duration::from_secs(10);
const KEY: &str = "sk-test-key";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Wire {
    OpenAi,
    OpenAiResponses,
    Anthropic,
    Gemini,
}

const WIRES: [Wire; 4] = [
    Wire::OpenAi,
    Wire::OpenAiResponses,
    Wire::Anthropic,
    Wire::Gemini,
];

impl Wire {
    fn provider(self, mock: &MockLlm) -> Box<dyn Provider> {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        let key = Some(KEY.to_string());
        match self {
            Wire::OpenAi => Box::new(OpenAiProvider::new(mock.base_url(), key, client, true)),
            Wire::OpenAiResponses => Box::new(OpenAiResponsesProvider::new(
                mock.base_url(),
                key,
                client,
                true,
            )),
            Wire::Anthropic => Box::new(AnthropicProvider::new(mock.root_url(), key, client, true)),
            Wire::Gemini => Box::new(GeminiProvider::new(mock.root_url(), key, client)),
        }
    }

    /// The path a request for model `m` goes to.
    fn path(self) -> &'static str {
        match self {
            Wire::OpenAi => "/v1/chat/completions",
            Wire::OpenAiResponses => "/v1/responses",
            Wire::Anthropic => "/v1/messages",
            Wire::Gemini => "/v1beta/models/m:streamGenerateContent?alt=sse",
        }
    }

    /// The key as the request carried it.
    fn key_sent(self, request: &Recorded) -> Option<String> {
        match self {
            Wire::OpenAi | Wire::OpenAiResponses => request
                .header("authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(str::to_string),
            Wire::Anthropic => request.header("x-api-key").map(str::to_string),
            Wire::Gemini => request.header("x-goog-api-key").map(str::to_string),
        }
    }

    /// The system prompt as the request carried it.
    fn system_sent(self, request: &Recorded) -> Option<String> {
        let body = &request.body;
        match self {
            Wire::OpenAi => body["messages"]
                .as_array()?
                .iter()
                .find(|m| m["role"] == "system")
                .and_then(|m| m["content"].as_str())
                .map(str::to_string),
            Wire::OpenAiResponses => body["instructions"].as_str().map(str::to_string),
            Wire::Anthropic => body["system"].as_str().map(str::to_string),
            Wire::Gemini => body
                .pointer("/systemInstruction/parts/0/text")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }

    /// The tool declarations sent: (name, parameters schema).
    fn tools_sent(self, request: &Recorded) -> Vec<(String, Value)> {
        let body = &request.body;
        let (list, name, params): (Option<&Vec<Value>>, &str, &str) = match self {
            Wire::OpenAi => (
                body["tools"].as_array(),
                "/function/name",
                "/function/parameters",
            ),
            Wire::OpenAiResponses => (body["tools"].as_array(), "/name", "/parameters"),
            Wire::Anthropic => (body["tools"].as_array(), "/name", "/input_schema"),
            Wire::Gemini => (
                body.pointer("/tools/0/functionDeclarations")
                    .and_then(Value::as_array),
                "/name",
                "/parameters",
            ),
        };
        list.into_iter()
            .flatten()
            .map(|t| {
                let n = t.pointer(name).and_then(Value::as_str).unwrap_or_default();
                (
                    n.to_string(),
                    t.pointer(params).cloned().unwrap_or(Value::Null),
                )
            })
            .collect()
    }

    /// The tool results the last turn of the request carried, as (who,
    /// content): who is the call id (OpenAI, Anthropic) or the tool name
    /// (Gemini, which has no ids); and how many turns carried them.
    fn tool_results_sent(self, request: &Recorded) -> (Vec<(String, String)>, usize) {
        let body = &request.body;
        let mut results = Vec::new();
        let mut turns = 0;
        match self {
            Wire::OpenAi => {
                for m in body["messages"].as_array().unwrap() {
                    if m["role"] == "tool" {
                        turns += 1;
                        results.push((
                            m["tool_call_id"].as_str().unwrap().to_string(),
                            m["content"].as_str().unwrap().to_string(),
                        ));
                    }
                }
            }
            Wire::OpenAiResponses => {
                for item in body["input"].as_array().unwrap() {
                    if item["type"] == "function_call_output" {
                        turns += 1;
                        results.push((
                            item["call_id"].as_str().unwrap().to_string(),
                            item["output"].as_str().unwrap().to_string(),
                        ));
                    }
                }
            }
            Wire::Anthropic => {
                for m in body["messages"].as_array().unwrap() {
                    let blocks: Vec<&Value> = m["content"]
                        .as_array()
                        .map(|b| b.iter().filter(|b| b["type"] == "tool_result").collect())
                        .unwrap_or_default();
                    if !blocks.is_empty() {
                        assert_eq!(m["role"], "user", "tool results go in a user turn");
                        turns += 1;
                    }
                    for b in blocks {
                        let content = match &b["content"] {
                            Value::String(s) => s.clone(),
                            Value::Array(parts) => parts
                                .iter()
                                .filter_map(|p| p["text"].as_str())
                                .collect::<String>(),
                            other => panic!("tool_result content {other}"),
                        };
                        results.push((b["tool_use_id"].as_str().unwrap().to_string(), content));
                    }
                }
            }
            Wire::Gemini => {
                for c in body["contents"].as_array().unwrap() {
                    let parts: Vec<&Value> = c["parts"]
                        .as_array()
                        .map(|p| {
                            p.iter()
                                .filter(|p| p.get("functionResponse").is_some())
                                .collect()
                        })
                        .unwrap_or_default();
                    if !parts.is_empty() {
                        assert_eq!(c["role"], "user", "function responses go in a user turn");
                        turns += 1;
                    }
                    for p in parts {
                        let r = &p["functionResponse"];
                        // A failed call's text goes under `error`.
                        let response = &r["response"];
                        let text = response["content"].as_str().or(response["error"].as_str());
                        results.push((
                            r["name"].as_str().unwrap().to_string(),
                            text.unwrap().to_string(),
                        ));
                    }
                }
            }
        }
        (results, turns)
    }
}

fn request(text: &str) -> ChatRequest {
    ChatRequest {
        model: "m".into(),
        messages: vec![Message::system("Be brief."), Message::user(text)],
        tools: vec![],
        temperature: None,
        max_tokens: None,
        output_schema: None,
        cache_key: None,
    }
}

fn read_file_spec() -> ToolSpec {
    ToolSpec {
        name: "read_file".into(),
        description: "Reads a file.".into(),
        parameters: json!({
            "type": "object",
            "properties": { "path": { "type": "string", "description": "Relative path." } },
            "required": ["path"]
        }),
    }
}

fn fast_policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    }
}

/// One call straight to the provider: the result and the deltas seen.
async fn call(
    p: &dyn Provider,
    req: &ChatRequest,
) -> (Result<ModelTurn, ProviderError>, Vec<Delta>) {
    let mut deltas = Vec::new();
    let result = p.stream(req, &mut |d| deltas.push(d)).await;
    (result, deltas)
}

/// One call through the retry layer: the result and the retries reported.
async fn call_retrying(
    p: &dyn Provider,
    req: &ChatRequest,
) -> (Result<ModelTurn, ProviderError>, Vec<(u32, ProviderError)>) {
    let mut retries = Vec::new();
    let result = stream_with_retry(p, req, &fast_policy(), &mut |_| {}, &mut |attempt, _, e| {
        retries.push((attempt, e.clone()))
    })
    .await;
    (result, retries)
}

fn text_of(deltas: &[Delta]) -> String {
    deltas
        .iter()
        .filter_map(|d| match d {
            Delta::Text(t) => Some(t.as_str()),
            Delta::Reasoning(_) => None,
        })
        .collect()
}

fn args(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments)
        .unwrap_or_else(|e| panic!("arguments {:?} are not JSON: {e}", call.arguments))
}

#[tokio::test]
async fn plain_text_is_streamed_in_pieces_and_assembled_with_usage() {
    for wire in WIRES {
        let mock = MockLlm::start().await;
        mock.push(Reply::Text("Hello from the mock model.".into()));
        let provider = wire.provider(&mock);
        let (result, deltas) = call(provider.as_ref(), &request("hi")).await;
        let turn = result.unwrap_or_else(|e| panic!("{wire:?}: {e}"));
        assert_eq!(turn.text, "Hello from the mock model.", "{wire:?}");
        assert!(turn.tool_calls.is_empty(), "{wire:?}");
        // Streamed: several deltas, in order, adding up to the text.
        assert!(deltas.len() > 3, "{wire:?}: {deltas:?}");
        assert_eq!(text_of(&deltas), turn.text, "{wire:?}");
        assert_eq!(turn.usage.input_tokens, Some(10), "{wire:?}");
        assert_eq!(turn.usage.output_tokens, Some(5), "{wire:?}");
        assert!(turn.finish_reason.is_some(), "{wire:?}");

        let sent = mock.wait_for_requests(1, WAIT).await;
        assert_eq!(sent.len(), 1, "{wire:?}");
        assert_eq!(sent[0].method, "POST", "{wire:?}");
        assert_eq!(sent[0].path, wire.path(), "{wire:?}");
        assert_eq!(wire.key_sent(&sent[0]).as_deref(), Some(KEY), "{wire:?}");
        assert_eq!(
            wire.system_sent(&sent[0]).as_deref(),
            Some("Be brief."),
            "{wire:?}"
        );
        assert!(
            !sent[0].path.contains(KEY) && !sent[0].body.to_string().contains(KEY),
            "{wire:?}: the key travels in a header only"
        );
    }
}

#[tokio::test]
async fn reasoning_is_told_apart_from_the_answer() {
    for wire in WIRES {
        let mock = MockLlm::start().await;
        mock.push(Reply::Reasoning(
            "Think first.".into(),
            "Then answer.".into(),
        ));
        let provider = wire.provider(&mock);
        let (result, deltas) = call(provider.as_ref(), &request("hi")).await;
        let turn = result.unwrap_or_else(|e| panic!("{wire:?}: {e}"));
        assert_eq!(turn.text, "Then answer.", "{wire:?}");
        assert_eq!(turn.reasoning, "Think first.", "{wire:?}");
        let reasoning: String = deltas
            .iter()
            .filter_map(|d| match d {
                Delta::Reasoning(t) => Some(t.as_str()),
                Delta::Text(_) => None,
            })
            .collect();
        assert_eq!(reasoning, "Think first.", "{wire:?}");
    }
}

#[tokio::test]
async fn a_single_tool_call_is_assembled_and_the_tools_are_declared() {
    for wire in WIRES {
        let mock = MockLlm::start().await;
        mock.push(Reply::tool_call(
            "call_a",
            "read_file",
            r#"{"path": "notes/todo.txt"}"#,
        ));
        let provider = wire.provider(&mock);
        let mut req = request("read my todo list");
        req.tools = vec![read_file_spec()];
        let (result, _) = call(provider.as_ref(), &req).await;
        let turn = result.unwrap_or_else(|e| panic!("{wire:?}: {e}"));
        assert_eq!(turn.tool_calls.len(), 1, "{wire:?}: {turn:?}");
        let c = &turn.tool_calls[0];
        assert_eq!(c.name, "read_file", "{wire:?}");
        assert!(!c.id.is_empty(), "{wire:?}: every call has an id");
        assert_eq!(args(c), json!({ "path": "notes/todo.txt" }), "{wire:?}");
        assert_eq!(turn.usage.output_tokens, Some(5), "{wire:?}");

        let sent = mock.wait_for_requests(1, WAIT).await;
        let tools = wire.tools_sent(&sent[0]);
        assert_eq!(tools.len(), 1, "{wire:?}: {}", sent[0].body);
        assert_eq!(tools[0].0, "read_file", "{wire:?}");
        assert_eq!(
            tools[0].1["properties"]["path"]["type"]
                .as_str()
                .map(str::to_lowercase),
            Some("string".to_string()),
            "{wire:?}: {}",
            tools[0].1
        );
        assert_eq!(tools[0].1["required"], json!(["path"]), "{wire:?}");
    }
}

#[tokio::test]
async fn parallel_tool_calls_keep_their_order() {
    let calls = vec![
        (
            "call_1".to_string(),
            "read_file".to_string(),
            r#"{"path": "a.txt"}"#.to_string(),
        ),
        (
            "call_2".to_string(),
            "read_file".to_string(),
            r#"{"path": "b.txt"}"#.to_string(),
        ),
        (
            "call_3".to_string(),
            "read_file".to_string(),
            r#"{"path": "c.txt"}"#.to_string(),
        ),
    ];
    for wire in WIRES {
        for reply in [
            Reply::ToolCalls(calls.clone()),
            Reply::ToolCallsInterleaved(calls.clone()),
        ] {
            let mock = MockLlm::start().await;
            mock.push(reply);
            let provider = wire.provider(&mock);
            let mut req = request("read three files");
            req.tools = vec![read_file_spec()];
            let (result, _) = call(provider.as_ref(), &req).await;
            let turn = result.unwrap_or_else(|e| panic!("{wire:?}: {e}"));
            let paths: Vec<Value> = turn
                .tool_calls
                .iter()
                .map(|c| args(c)["path"].clone())
                .collect();
            assert_eq!(
                paths,
                [json!("a.txt"), json!("b.txt"), json!("c.txt")],
                "{wire:?}"
            );
            let mut ids: Vec<&str> = turn.tool_calls.iter().map(|c| c.id.as_str()).collect();
            ids.sort();
            ids.dedup();
            assert_eq!(ids.len(), 3, "{wire:?}: ids are distinct: {turn:?}");
        }
    }
}

#[tokio::test]
async fn tool_results_are_fed_back_in_one_turn() {
    for wire in WIRES {
        let mock = MockLlm::start().await;
        mock.push(Reply::Text("a.txt says hi, b.txt is missing.".into()));
        let provider = wire.provider(&mock);
        let mut req = request("read a.txt and b.txt");
        req.tools = vec![read_file_spec()];
        req.messages.push(Message::Assistant {
            content: String::new(),
            tool_calls: vec![
                ToolCall {
                    id: "call_1".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"a.txt"}"#.into(),
                },
                ToolCall {
                    id: "call_2".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"b.txt"}"#.into(),
                },
            ],
            provider_items: None,
        });
        for (id, content, is_error) in [("call_1", "hi", false), ("call_2", "no such file", true)] {
            req.messages.push(Message::Tool {
                tool_call_id: id.into(),
                name: "read_file".into(),
                content: content.into(),
                is_error,
            });
        }
        let (result, _) = call(provider.as_ref(), &req).await;
        let turn = result.unwrap_or_else(|e| panic!("{wire:?}: {e}"));
        assert_eq!(turn.text, "a.txt says hi, b.txt is missing.", "{wire:?}");

        let sent = mock.wait_for_requests(1, WAIT).await;
        let (results, turns) = wire.tool_results_sent(&sent[0]);
        let contents: Vec<&str> = results.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(
            contents,
            ["hi", "no such file"],
            "{wire:?}: {}",
            sent[0].body
        );
        match wire {
            Wire::Gemini => assert!(results.iter().all(|(who, _)| who == "read_file")),
            _ => {
                let ids: Vec<&str> = results.iter().map(|(id, _)| id.as_str()).collect();
                assert_eq!(ids, ["call_1", "call_2"], "{wire:?}");
            }
        }
        // OpenAI sends one `tool` message or `function_call_output` item
        // per result; the others put all results of a turn into one user
        // turn.
        let expected_turns = match wire {
            Wire::OpenAi | Wire::OpenAiResponses => 2,
            Wire::Anthropic | Wire::Gemini => 1,
        };
        assert_eq!(turns, expected_turns, "{wire:?}: {}", sent[0].body);
    }
}

#[tokio::test]
async fn a_4xx_fails_at_once_with_the_providers_own_text() {
    for wire in WIRES {
        let mock = MockLlm::start().await;
        mock.push(Reply::error(400, "model `m` does not exist"));
        mock.push(Reply::Text("never sent".into()));
        let provider = wire.provider(&mock);
        let (result, retries) = call_retrying(provider.as_ref(), &request("hi")).await;
        let error = result.expect_err("a 400 is an error");
        match &error {
            ProviderError::Status {
                status, message, ..
            } => {
                assert_eq!(*status, 400, "{wire:?}");
                assert!(
                    message.contains("model `m` does not exist"),
                    "{wire:?}: {message}"
                );
            }
            other => panic!("{wire:?}: {other:?}"),
        }
        assert!(!error.is_retryable(), "{wire:?}");
        assert!(retries.is_empty(), "{wire:?}: {retries:?}");
        assert_eq!(mock.request_count(), 1, "{wire:?}");
    }
}

#[tokio::test]
async fn a_5xx_a_429_and_an_overload_are_retried() {
    for wire in WIRES {
        let mock = MockLlm::start().await;
        mock.push(Reply::error(503, "try later"));
        mock.push(Reply::Raw {
            status: 429,
            headers: vec![("Retry-After".into(), "0".into())],
            body: json!({ "error": { "message": "slow down" } }).to_string(),
        });
        mock.push(Reply::error(529, "overloaded"));
        mock.push(Reply::Text("made it".into()));
        let provider = wire.provider(&mock);
        let (result, retries) = call_retrying(provider.as_ref(), &request("hi")).await;
        let turn = result.unwrap_or_else(|e| panic!("{wire:?}: {e}"));
        assert_eq!(turn.text, "made it", "{wire:?}");
        let statuses: Vec<Option<u16>> = retries
            .iter()
            .map(|(_, e)| match e {
                ProviderError::Status { status, .. } => Some(*status),
                _ => None,
            })
            .collect();
        assert_eq!(statuses, [Some(503), Some(429), Some(529)], "{wire:?}");
        assert_eq!(mock.request_count(), 4, "{wire:?}");
    }
}

#[tokio::test]
async fn a_stream_cut_before_its_end_is_an_error_not_an_answer() {
    for wire in WIRES {
        let mock = MockLlm::start().await;
        // Only the first event of an answer, then the body ends.
        let first = match wire {
            Wire::OpenAi => {
                json!({ "choices": [{ "index": 0, "delta": { "content": "Hel" }, "finish_reason": null }] })
            }
            Wire::OpenAiResponses => json!({ "type": "response.output_text.delta",
                "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Hel" }),
            Wire::Anthropic => json!({ "type": "message_start", "message": {
                "id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
                "usage": { "input_tokens": 10, "output_tokens": 1 } } }),
            Wire::Gemini => {
                json!({ "candidates": [{ "content": { "role": "model", "parts": [{ "text": "Hel" }] }, "index": 0 }] })
            }
        };
        mock.push(Reply::Raw {
            status: 200,
            headers: vec![("Content-Type".into(), "text/event-stream".into())],
            body: match wire {
                Wire::Anthropic => format!("event: message_start\ndata: {first}\n\n"),
                Wire::OpenAiResponses => {
                    format!("event: response.output_text.delta\ndata: {first}\n\n")
                }
                _ => format!("data: {first}\n\n"),
            },
        });
        let provider = wire.provider(&mock);
        let (result, _) = call(provider.as_ref(), &request("hi")).await;
        assert!(
            matches!(
                result,
                Err(ProviderError::Cut {
                    kind: CutKind::EndedEarly,
                    ..
                })
            ),
            "{wire:?}: {result:?}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_server_is_a_retryable_connection_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = reqwest::Client::new();
    let providers: Vec<(Wire, Box<dyn Provider>)> = vec![
        (
            Wire::OpenAi,
            Box::new(OpenAiProvider::new(
                format!("http://{addr}/v1"),
                None,
                client.clone(),
                true,
            )),
        ),
        (
            Wire::OpenAiResponses,
            Box::new(OpenAiResponsesProvider::new(
                format!("http://{addr}/v1"),
                None,
                client.clone(),
                true,
            )),
        ),
        (
            Wire::Anthropic,
            Box::new(AnthropicProvider::new(
                format!("http://{addr}"),
                None,
                client.clone(),
                true,
            )),
        ),
        (
            Wire::Gemini,
            Box::new(GeminiProvider::new(format!("http://{addr}"), None, client)),
        ),
    ];
    for (wire, provider) in providers {
        let (result, _) = call(provider.as_ref(), &request("hi")).await;
        let error = result.expect_err("nothing listens");
        assert!(
            matches!(error, ProviderError::Connect(_)),
            "{wire:?}: {error:?}"
        );
        assert!(error.is_retryable(), "{wire:?}");
    }
}

/// `kind: anthropic` / `kind: gemini` in aurad.yaml, through the registry
/// and the runner as any run goes: the right route, the agent's
/// `max_tokens`, a run that succeeds with its usage.
#[tokio::test]
async fn configured_vendor_kinds_run_agents_end_to_end() {
    for (kind, route) in [
        ("anthropic", "/v1/messages"),
        ("gemini", "/v1beta/models/m:streamGenerateContent?alt=sse"),
    ] {
        let mock = MockLlm::start().await;
        mock.push(Reply::Text("Hi from the gateway.".into()));
        let settings = format!(
            "  gw: {{ kind: {kind}, base_url: \"{}\" }}\n",
            mock.root_url()
        );
        let agent = "model: gw/m\nsystem: Be brief.\nmax_tokens: 321\n";
        let project = support::project::Project::with_settings(&mock, agent, &settings);
        let (outcome, _, _) = project
            .run("hi", tokio_util::sync::CancellationToken::new())
            .await;
        assert_eq!(
            outcome.state,
            aurad::types::RunState::Succeeded,
            "{kind}: {outcome:?}"
        );
        assert_eq!(outcome.output.as_deref(), Some("Hi from the gateway."));
        assert_eq!(outcome.usage.input_tokens, Some(10), "{kind}");
        let sent = mock.wait_for_requests(1, WAIT).await;
        assert_eq!(sent[0].path, route, "{kind}");
        let max_tokens = match kind {
            "anthropic" => &sent[0].body["max_tokens"],
            _ => &sent[0].body["generationConfig"]["maxOutputTokens"],
        };
        assert_eq!(max_tokens, &json!(321), "{kind}: {}", sent[0].body);
    }
}

/// With a cache key, what each wire sends to ask for its prompt cache:
/// OpenAI the key as `prompt_cache_key`, Anthropic `cache_control`
/// breakpoints (the system prompt as a block, the last tool, the last
/// message), Gemini nothing (its caching is implicit).
#[tokio::test]
async fn a_cache_key_asks_each_wire_for_its_prompt_cache() {
    let mock = MockLlm::start().await;
    let mut req = request("hi");
    req.tools = vec![read_file_spec()];
    req.cache_key = Some("agent-a".into());
    for wire in WIRES {
        mock.push(Reply::Text("ok".into()));
        call(wire.provider(&mock).as_ref(), &req).await.0.unwrap();
        let body = mock.requests().pop().unwrap().body;
        let text = body.to_string();
        match wire {
            Wire::OpenAi | Wire::OpenAiResponses => {
                assert_eq!(body["prompt_cache_key"], "agent-a");
                assert!(!text.contains("cache_control"), "{text}");
            }
            Wire::Anthropic => {
                let mark = json!({ "type": "ephemeral" });
                assert_eq!(body["system"][0]["cache_control"], mark);
                assert_eq!(body["system"][0]["text"], "Be brief.");
                assert_eq!(body["tools"][0]["cache_control"], mark);
                assert_eq!(body["messages"][0]["content"][0]["cache_control"], mark);
                assert_eq!(text.matches("cache_control").count(), 3, "{text}");
            }
            Wire::Gemini => {
                assert!(!text.contains("cache"), "{text}");
            }
        }
    }
}
