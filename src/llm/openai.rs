//! The OpenAI-compatible chat-completions provider (OpenAI, Ollama, vLLM,
//! llama.cpp, LM Studio, OpenRouter, ...): `POST {base_url}/chat/completions`
//! with `stream: true`, the answer read as server-sent events and assembled
//! into a [`ModelTurn`].
//!
//! The pure parts are tested without HTTP: the request JSON here, the chunk
//! assembly in the `stream` submodule. Malformed provider data never panics:
//! it becomes [`ProviderError::Stream`].

use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::ACCEPT;
use serde_json::{Map, Value, json};

use super::http::stream_turn;
use super::{
    ChatRequest, DEFAULT_IDLE_TIMEOUT, Delta, ModelTurn, Provider, ProviderError, shortest_decimal,
};
use crate::types::Message;

pub(super) mod stream;

use stream::Assembler;

/// A provider speaking the OpenAI chat-completions protocol.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    base_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
    /// The longest wait for the answer head or between two pieces of the
    /// answer body ([`DEFAULT_IDLE_TIMEOUT`] unless set).
    idle_timeout: Duration,
    /// Whether requests with a cache key send it as `prompt_cache_key`.
    prompt_caching: bool,
}

impl OpenAiProvider {
    /// `base_url` is the API root such as `https://api.openai.com/v1`; a
    /// trailing `/` is ignored. With `api_key`, requests carry
    /// `Authorization: Bearer KEY`. With `prompt_caching`, a request's
    /// cache key is sent as `prompt_cache_key` ([`request_body`]).
    pub fn new(
        base_url: String,
        api_key: Option<String>,
        client: reqwest::Client,
        prompt_caching: bool,
    ) -> Self {
        let base_url = base_url.trim_end_matches('/').to_string();
        OpenAiProvider {
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
        format!("{}/chat/completions", self.base_url)
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
            .json(&request_body(request, self.prompt_caching));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        stream_turn::<Assembler>(builder, self.idle_timeout, on_delta).await
    }
}

impl Provider for OpenAiProvider {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(self.call(request, on_delta))
    }
}

/// The JSON body of a streamed chat-completions request. With
/// `prompt_caching`, the request's cache key goes as `prompt_cache_key`:
/// OpenAI caches prompt prefixes by itself (1024 tokens and up), and the
/// key routes the calls of one agent to where its prefix is cached.
pub fn request_body(request: &ChatRequest, prompt_caching: bool) -> Value {
    let messages: Vec<Value> = request.messages.iter().map(message_json).collect();
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(t) = request.temperature.and_then(shortest_decimal) {
        body.insert("temperature".into(), t);
    }
    if let Some(m) = request.max_tokens {
        body.insert("max_tokens".into(), json!(m));
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "response_format".into(),
            json!({ "type": "json_schema", "json_schema": { "name": "output", "schema": schema } }),
        );
    }
    if prompt_caching && let Some(key) = &request.cache_key {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({ "include_usage": true }));
    Value::Object(body)
}

fn message_json(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({ "role": "system", "content": content }),
        Message::User { content } => json!({ "role": "user", "content": content }),
        Message::Assistant {
            content,
            tool_calls,
            ..
        } => {
            if tool_calls.is_empty() {
                return json!({ "role": "assistant", "content": content });
            }
            let calls: Vec<Value> = tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": { "name": c.name, "arguments": c.arguments },
                    })
                })
                .collect();
            let content = if content.is_empty() {
                Value::Null
            } else {
                json!(content)
            };
            json!({ "role": "assistant", "content": content, "tool_calls": calls })
        }
        Message::Tool {
            tool_call_id,
            content,
            ..
        } => json!({ "role": "tool", "tool_call_id": tool_call_id, "content": content }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ToolCall, ToolSpec};

    #[test]
    fn request_body_has_every_part() {
        let request = ChatRequest {
            model: "gpt-x".into(),
            messages: vec![
                Message::system("sys"),
                Message::user("hi"),
                Message::Assistant {
                    content: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "read".into(),
                        arguments: "{\"p\":1}".into(),
                    }],
                    provider_items: None,
                },
                Message::Tool {
                    tool_call_id: "c1".into(),
                    name: "read".into(),
                    content: "out".into(),
                    is_error: false,
                },
                Message::assistant("done", Vec::new()),
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                parameters: json!({ "type": "object" }),
            }],
            temperature: Some(0.2),
            max_tokens: Some(100),
            output_schema: None,
            cache_key: None,
        };
        let body = request_body(&request, true);
        assert_eq!(
            body,
            json!({
                "model": "gpt-x",
                "messages": [
                    { "role": "system", "content": "sys" },
                    { "role": "user", "content": "hi" },
                    { "role": "assistant", "content": null, "tool_calls": [
                        { "id": "c1", "type": "function",
                          "function": { "name": "read", "arguments": "{\"p\":1}" } }
                    ] },
                    { "role": "tool", "tool_call_id": "c1", "content": "out" },
                    { "role": "assistant", "content": "done" },
                ],
                "tools": [{ "type": "function", "function": {
                    "name": "read", "description": "reads", "parameters": { "type": "object" } } }],
                "temperature": 0.2,
                "max_tokens": 100,
                "stream": true,
                "stream_options": { "include_usage": true },
            })
        );
        let bare = ChatRequest {
            model: "m".into(),
            messages: vec![],
            tools: vec![],
            temperature: None,
            max_tokens: None,
            output_schema: None,
            cache_key: None,
        };
        let body = request_body(&bare, true);
        assert!(body.get("tools").is_none() && body.get("temperature").is_none());
        assert!(body.get("max_tokens").is_none());
    }

    #[test]
    fn prompt_caching_sends_the_cache_key_unless_off() {
        let request = ChatRequest {
            model: "m".into(),
            messages: vec![Message::user("hi")],
            tools: vec![],
            temperature: None,
            max_tokens: None,
            output_schema: None,
            cache_key: Some("triage".into()),
        };
        assert_eq!(
            request_body(&request, true)["prompt_cache_key"],
            json!("triage")
        );
        assert!(
            request_body(&request, false)
                .get("prompt_cache_key")
                .is_none()
        );
        let keyless = ChatRequest {
            cache_key: None,
            ..request
        };
        assert!(
            request_body(&keyless, true)
                .get("prompt_cache_key")
                .is_none()
        );
    }

    #[test]
    fn base_url_trailing_slash_is_ignored() {
        let p = OpenAiProvider::new("http://h/v1/".into(), None, reqwest::Client::new(), true);
        assert_eq!(p.endpoint(), "http://h/v1/chat/completions");
    }
}
