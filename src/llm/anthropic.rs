//! The Anthropic Messages provider: `POST {base_url}/v1/messages` with
//! `stream: true`, the answer read as server-sent events (`message_start`,
//! `content_block_*`, `message_delta`, `message_stop`) and assembled into a
//! [`ModelTurn`].
//!
//! The pure parts are tested without HTTP: the request JSON here, the event
//! assembly in the `stream` submodule. Malformed provider data never panics:
//! it becomes [`ProviderError::Stream`].

use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::{Map, Value, json};

use super::http::stream_turn;
use super::{
    ChatRequest, DEFAULT_IDLE_TIMEOUT, Delta, ModelTurn, Provider, ProviderError, shortest_decimal,
};
use crate::types::Message;

pub(super) mod stream;

use stream::Assembler;

/// The API root of Anthropic itself.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// `max_tokens` when the request sets none: the Messages API requires it.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The `anthropic-version` header every request carries.
const API_VERSION: &str = "2023-06-01";

/// A provider speaking the Anthropic Messages protocol.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    base_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
    /// The longest wait for the answer head or between two pieces of the
    /// answer body ([`DEFAULT_IDLE_TIMEOUT`] unless set).
    idle_timeout: Duration,
    /// Whether requests with a cache key mark `cache_control` breakpoints.
    prompt_caching: bool,
}

impl AnthropicProvider {
    /// `base_url` is the API root such as [`DEFAULT_BASE_URL`] (without
    /// `/v1`); a trailing `/` is ignored. With `api_key`, requests carry
    /// `x-api-key: KEY`; an empty key counts as none. With
    /// `prompt_caching`, a request with a cache key marks what to cache
    /// ([`request_body`]).
    pub fn new(
        base_url: String,
        api_key: Option<String>,
        client: reqwest::Client,
        prompt_caching: bool,
    ) -> Self {
        let base_url = base_url.trim_end_matches('/').to_string();
        AnthropicProvider {
            base_url,
            api_key: api_key.filter(|k| !k.is_empty()),
            client,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            prompt_caching,
        }
    }

    /// With `idle` as the longest wait for the answer head or between two
    /// pieces of the answer: past it the call fails with a retryable
    /// [`CutKind::Idle`](super::CutKind::Idle) cut.
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
    }

    /// The URL requests are sent to.
    pub fn endpoint(&self) -> String {
        format!("{}/v1/messages", self.base_url)
    }

    async fn call(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ModelTurn, ProviderError> {
        let mut builder = self
            .client
            .post(self.endpoint())
            .header(ACCEPT, "text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .header("anthropic-version", API_VERSION)
            .json(&request_body(request, self.prompt_caching));
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key);
        }
        stream_turn::<Assembler>(builder, self.idle_timeout, on_delta).await
    }
}

impl Provider for AnthropicProvider {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(self.call(request, on_delta))
    }
}

/// The most `cache_control` breakpoints a request may carry.
pub const MAX_CACHE_BREAKPOINTS: usize = 4;

/// The JSON body of a streamed Messages request.
///
/// With `prompt_caching` and a cache key, the request marks `cache_control`
/// breakpoints, each caching the prompt up to it (the API renders tools,
/// then system, then messages): the last tool definition, the system
/// prompt (sent as a content block for it), the last content block of the
/// conversation, and the last block of the user turn before the newest
/// one, where the previous call of the loop put its own last breakpoint,
/// so this call reads what that one wrote even when more than the API's
/// lookback of 20 blocks came between. Never more than
/// [`MAX_CACHE_BREAKPOINTS`]. A prefix shorter than the model's minimum
/// (1024 tokens and up) is not cached by the API, and marking it costs
/// nothing.
///
/// System messages are joined into the top-level `system`; tool results are
/// `tool_result` blocks of a user turn, and consecutive turns of one role
/// are merged into one (the API wants user and assistant to alternate).
///
/// `output_schema` is not sent: the stable Messages API has no JSON or
/// structured-output mode, and the engine validates (and asks the model to
/// repair) the final answer whatever the provider did.
pub fn request_body(request: &ChatRequest, prompt_caching: bool) -> Value {
    let cache = prompt_caching && request.cache_key.is_some();
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert(
        "max_tokens".into(),
        json!(request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    let mut marks = 0;
    if !system.is_empty() {
        let system = system.join("\n\n");
        let system = if cache {
            marks += 1;
            json!([{ "type": "text", "text": system, "cache_control": ephemeral() }])
        } else {
            json!(system)
        };
        body.insert("system".into(), system);
    }
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.parameters,
                })
            })
            .collect();
        if cache && let Some(last) = tools.last_mut() {
            last["cache_control"] = ephemeral();
            marks += 1;
        }
        body.insert("tools".into(), Value::Array(tools));
    }
    let mut messages = messages_json(&request.messages);
    if cache {
        mark_conversation(&mut messages, MAX_CACHE_BREAKPOINTS - marks);
    }
    body.insert("messages".into(), Value::Array(messages));
    if let Some(t) = request.temperature.and_then(shortest_decimal) {
        body.insert("temperature".into(), t);
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

fn ephemeral() -> Value {
    json!({ "type": "ephemeral" })
}

/// Marks at most `budget` breakpoints in the conversation: the last block
/// of the last turn, then the last block of the user turn before the
/// newest user turn.
fn mark_conversation(turns: &mut [Value], budget: usize) {
    let mut places = Vec::with_capacity(2);
    if let Some(last) = turns.len().checked_sub(1) {
        places.push(last);
    }
    let users: Vec<usize> = (0..turns.len())
        .filter(|&i| turns[i]["role"] == "user")
        .collect();
    if let [.., previous, _newest] = users.as_slice()
        && !places.contains(previous)
    {
        places.push(*previous);
    }
    for at in places.into_iter().take(budget) {
        let turn = &mut turns[at];
        // A plain-string turn becomes one text block, which can carry
        // the mark (the API reads both forms the same).
        if let Some(text) = turn["content"].as_str().map(str::to_string) {
            turn["content"] = json!([text_block(&text)]);
        }
        if let Some(block) = turn["content"].as_array_mut().and_then(|b| b.last_mut()) {
            block["cache_control"] = ephemeral();
        }
    }
}

/// The conversation as Anthropic turns: `{role, content}` with consecutive
/// same-role turns merged. A user turn that is a single text stays a plain
/// string; any other turn is a list of content blocks.
fn messages_json(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            Message::System { .. } => continue,
            Message::User { content } => ("user", vec![text_block(content)]),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut blocks = Vec::with_capacity(tool_calls.len() + 1);
                if !content.is_empty() {
                    blocks.push(text_block(content));
                }
                blocks.extend(tool_calls.iter().map(|c| {
                    json!({
                        "type": "tool_use",
                        "id": c.id,
                        "name": c.name,
                        "input": tool_input(&c.arguments),
                    })
                }));
                ("assistant", blocks)
            }
            Message::Tool {
                tool_call_id,
                content,
                is_error,
                ..
            } => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": tool_call_id,
                    "content": content,
                });
                if *is_error {
                    block["is_error"] = json!(true);
                }
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            // An empty assistant answer: the API rejects empty turns, and
            // dropping it lets the turns around it merge.
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => {
                // Empty texts are dropped when merging: the API rejects
                // empty text blocks.
                existing.retain(|b| !is_empty_text(b));
                existing.extend(blocks.into_iter().filter(|b| !is_empty_text(b)));
            }
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, blocks)| {
            let content = match blocks.as_slice() {
                [only] if role == "user" && only["type"] == "text" => only["text"].clone(),
                _ => Value::Array(blocks),
            };
            json!({ "role": role, "content": content })
        })
        .collect()
}

fn text_block(text: &str) -> Value {
    json!({ "type": "text", "text": text })
}

fn is_empty_text(block: &Value) -> bool {
    block["type"] == "text" && block["text"].as_str().is_some_and(str::is_empty)
}

/// A tool call's `input`: its arguments parsed as a JSON object. Arguments
/// that are not a JSON object (the model produced malformed JSON, which the
/// engine already reported back as a tool error) are sent as `{}`: the API
/// accepts nothing else, and the matching `tool_result` carries the error.
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ToolCall, ToolSpec};

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn tool(id: &str, content: &str, is_error: bool) -> Message {
        Message::Tool {
            tool_call_id: id.into(),
            name: "t".into(),
            content: content.into(),
            is_error,
        }
    }

    #[test]
    fn request_body_has_every_part() {
        let request = ChatRequest {
            model: "claude-x".into(),
            messages: vec![
                Message::system("sys one"),
                Message::system("sys two"),
                Message::user("hi"),
                Message::Assistant {
                    content: "let me look".into(),
                    tool_calls: vec![
                        call("c1", "read", "{\"p\":1}"),
                        call("c2", "grep", "not json"),
                        call("c3", "ls", ""),
                    ],
                    provider_items: None,
                },
                tool("c1", "out", false),
                tool("c2", "bad arguments", true),
                tool("c3", "", false),
                Message::user("and now?"),
                Message::Assistant {
                    content: String::new(),
                    tool_calls: vec![call("c4", "read", "{}")],
                    provider_items: None,
                },
                tool("c4", "more", false),
                Message::assistant("done", Vec::new()),
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                parameters: json!({ "type": "object" }),
            }],
            temperature: Some(0.2),
            max_tokens: Some(100),
            output_schema: Some(json!({ "type": "object" })),
            cache_key: None,
        };
        let body = request_body(&request, true);
        assert_eq!(
            body,
            json!({
                "model": "claude-x",
                "max_tokens": 100,
                "system": "sys one\n\nsys two",
                "messages": [
                    { "role": "user", "content": "hi" },
                    { "role": "assistant", "content": [
                        { "type": "text", "text": "let me look" },
                        { "type": "tool_use", "id": "c1", "name": "read", "input": { "p": 1 } },
                        { "type": "tool_use", "id": "c2", "name": "grep", "input": {} },
                        { "type": "tool_use", "id": "c3", "name": "ls", "input": {} },
                    ] },
                    { "role": "user", "content": [
                        { "type": "tool_result", "tool_use_id": "c1", "content": "out" },
                        { "type": "tool_result", "tool_use_id": "c2", "content": "bad arguments",
                          "is_error": true },
                        { "type": "tool_result", "tool_use_id": "c3", "content": "" },
                        { "type": "text", "text": "and now?" },
                    ] },
                    { "role": "assistant", "content": [
                        { "type": "tool_use", "id": "c4", "name": "read", "input": {} },
                    ] },
                    { "role": "user", "content": [
                        { "type": "tool_result", "tool_use_id": "c4", "content": "more" },
                    ] },
                    { "role": "assistant", "content": [{ "type": "text", "text": "done" }] },
                ],
                "tools": [{ "name": "read", "description": "reads",
                            "input_schema": { "type": "object" } }],
                "temperature": 0.2,
                "stream": true,
            })
        );
    }

    #[test]
    fn bare_request_defaults_max_tokens_and_omits_optional_parts() {
        let bare = ChatRequest {
            model: "m".into(),
            messages: vec![
                Message::user("a"),
                Message::assistant(String::new(), Vec::new()),
                Message::user("b"),
            ],
            tools: vec![],
            temperature: None,
            max_tokens: None,
            output_schema: None,
            cache_key: None,
        };
        let body = request_body(&bare, true);
        assert_eq!(body["max_tokens"], json!(DEFAULT_MAX_TOKENS));
        assert!(body.get("system").is_none() && body.get("tools").is_none());
        assert!(body.get("temperature").is_none());
        // The empty assistant turn is dropped and the user turns merged.
        assert_eq!(
            body["messages"],
            json!([{ "role": "user", "content": [
                { "type": "text", "text": "a" },
                { "type": "text", "text": "b" },
            ] }])
        );
    }

    /// Every `cache_control` of a body, by where it is.
    fn breakpoints(body: &Value) -> Vec<String> {
        let mut found = Vec::new();
        for (i, t) in body["tools"].as_array().into_iter().flatten().enumerate() {
            if t.get("cache_control").is_some() {
                found.push(format!("tools/{i}"));
            }
        }
        for (i, b) in body["system"].as_array().into_iter().flatten().enumerate() {
            if b.get("cache_control").is_some() {
                found.push(format!("system/{i}"));
            }
        }
        for (m, turn) in body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            for (i, b) in turn["content"].as_array().into_iter().flatten().enumerate() {
                if b.get("cache_control").is_some() {
                    found.push(format!("messages/{m}/{i}"));
                }
            }
        }
        found
    }

    fn cached_request(messages: Vec<Message>, tools: usize) -> ChatRequest {
        ChatRequest {
            model: "claude-x".into(),
            messages,
            tools: (0..tools)
                .map(|i| ToolSpec {
                    name: format!("t{i}"),
                    description: "d".into(),
                    parameters: json!({ "type": "object" }),
                })
                .collect(),
            temperature: None,
            max_tokens: None,
            output_schema: None,
            cache_key: Some("agent".into()),
        }
    }

    #[test]
    fn prompt_caching_marks_tools_system_and_the_conversation_prefix() {
        let request = cached_request(
            vec![
                Message::system("sys"),
                Message::user("first"),
                Message::Assistant {
                    provider_items: None,
                    content: String::new(),
                    tool_calls: vec![call("c1", "t0", "{}")],
                },
                tool("c1", "out", false),
                Message::Assistant {
                    provider_items: None,
                    content: "and".into(),
                    tool_calls: vec![call("c2", "t1", "{}")],
                },
                tool("c2", "more", false),
            ],
            2,
        );
        let body = request_body(&request, true);
        assert_eq!(
            breakpoints(&body),
            ["tools/1", "system/0", "messages/2/0", "messages/4/0"]
        );
        assert_eq!(
            body["system"],
            json!([{ "type": "text", "text": "sys", "cache_control": { "type": "ephemeral" } }])
        );
        assert_eq!(
            body["tools"][1]["cache_control"],
            json!({ "type": "ephemeral" })
        );
        // A plain-string user turn becomes a block to carry its mark.
        let body = request_body(&cached_request(vec![Message::user("hi")], 0), true);
        assert_eq!(
            body["messages"],
            json!([{ "role": "user", "content": [
                { "type": "text", "text": "hi", "cache_control": { "type": "ephemeral" } },
            ] }])
        );
        assert!(body.get("system").is_none() && body.get("tools").is_none());
    }

    #[test]
    fn prompt_caching_never_marks_more_than_four_and_not_when_off() {
        let mut messages = vec![Message::system("a"), Message::system("b")];
        for i in 0..10 {
            messages.push(Message::user(format!("q{i}")));
            messages.push(Message::Assistant {
                provider_items: None,
                content: format!("a{i}"),
                tool_calls: vec![],
            });
        }
        messages.push(Message::user("last"));
        for tools in [0, 1, 5] {
            let request = cached_request(messages.clone(), tools);
            let marks = breakpoints(&request_body(&request, true));
            assert!(marks.len() <= MAX_CACHE_BREAKPOINTS, "{marks:?}");
            assert_eq!(marks.len(), if tools == 0 { 3 } else { 4 }, "{marks:?}");
            assert!(marks.contains(&"messages/20/0".to_string()), "{marks:?}");
            assert!(marks.contains(&"messages/18/0".to_string()), "{marks:?}");
            // Off, or without a cache key: no marks, system a string.
            let off = request_body(&request, false);
            assert!(breakpoints(&off).is_empty() && off["system"] == json!("a\n\nb"));
            let keyless = ChatRequest {
                cache_key: None,
                ..request
            };
            assert!(breakpoints(&request_body(&keyless, true)).is_empty());
        }
    }

    #[test]
    fn base_url_trailing_slash_is_ignored_and_empty_key_is_none() {
        let p = AnthropicProvider::new(
            "http://h/".into(),
            Some(String::new()),
            Default::default(),
            true,
        );
        assert_eq!(p.endpoint(), "http://h/v1/messages");
        assert!(p.api_key.is_none());
        let p = AnthropicProvider::new(DEFAULT_BASE_URL.into(), None, Default::default(), true);
        assert_eq!(p.endpoint(), "https://api.anthropic.com/v1/messages");
    }
}
