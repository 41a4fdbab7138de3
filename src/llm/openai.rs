//! The OpenAI-compatible chat-completions provider (OpenAI, Ollama, vLLM,
//! llama.cpp, LM Studio, OpenRouter, ...): `POST {base_url}/chat/completions`
//! with `stream: true`, the answer read as server-sent events and assembled
//! into a [`ModelTurn`].
//!
//! The pure parts are tested without HTTP: the request JSON here, the chunk
//! assembly in the `stream` submodule. Malformed provider data never panics:
//! it becomes [`ProviderError::Stream`].

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::StreamExt;
use futures::future::BoxFuture;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use serde_json::{Map, Value, json};

use super::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};
use crate::types::Message;

mod stream;

use stream::{Assembler, Flow, parse_full_response};

/// How much of a non-JSON error body is kept in the error message.
const MAX_ERROR_BODY_CHARS: usize = 500;

/// A provider speaking the OpenAI chat-completions protocol.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    base_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
}

impl OpenAiProvider {
    /// `base_url` is the API root such as `https://api.openai.com/v1`; a
    /// trailing `/` is ignored. With `api_key`, requests carry
    /// `Authorization: Bearer KEY`.
    pub fn new(base_url: String, api_key: Option<String>, client: reqwest::Client) -> Self {
        let base_url = base_url.trim_end_matches('/').to_string();
        OpenAiProvider {
            base_url,
            api_key: api_key.filter(|k| !k.is_empty()),
            client,
        }
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
            .json(&request_body(request));
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let response = builder.send().await.map_err(send_error)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = parse_retry_after(response.headers());
            let body = response.text().await.unwrap_or_default();
            return Err(ProviderError::Status {
                status: status.as_u16(),
                message: error_message(&body, status.canonical_reason()),
                retry_after,
            });
        }
        let is_json = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().starts_with("application/json"));
        if is_json {
            // The server ignored `stream: true` and answered in one piece.
            let body = response
                .text()
                .await
                .map_err(|e| ProviderError::Stream(error_chain(&e)))?;
            let value: Value = serde_json::from_str(&body)
                .map_err(|e| ProviderError::Stream(format!("invalid JSON response: {e}")))?;
            return parse_full_response(&value, on_delta);
        }

        let mut events = response.bytes_stream().eventsource();
        let mut assembler = Assembler::default();
        while let Some(event) = events.next().await {
            let event = event.map_err(|e| match e {
                // A broken connection is retried like one that never
                // opened; the retry layer refuses once text was shown.
                eventsource_stream::EventStreamError::Transport(e) => {
                    ProviderError::Connect(format!("stream broken: {}", error_chain(&e)))
                }
                other => ProviderError::Stream(other.to_string()),
            })?;
            if assembler.push_event(&event.event, &event.data, on_delta)? == Flow::Done {
                break;
            }
        }
        assembler.finish()
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

/// The JSON body of a streamed chat-completions request.
pub fn request_body(request: &ChatRequest) -> Value {
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
    if let Some(t) = request.temperature {
        // Through the shortest decimal form, so 0.2f32 is sent as 0.2 and
        // not as 0.20000000298023224.
        if let Some(n) = t
            .to_string()
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
        {
            body.insert("temperature".into(), Value::Number(n));
        }
    }
    if let Some(m) = request.max_tokens {
        body.insert("max_tokens".into(), json!(m));
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

/// A send error: a bad URL is a configuration problem, anything else
/// (DNS, refused, TLS, timeout before the answer) a connection error.
fn send_error(e: reqwest::Error) -> ProviderError {
    if e.is_builder() {
        ProviderError::Config(format!("invalid request: {}", error_chain(&e)))
    } else {
        ProviderError::Connect(error_chain(&e))
    }
}

/// The error and its sources, joined: reqwest's own message alone is
/// usually "error sending request for url (...)".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

/// The provider's own error text from an error body.
fn error_message(body: &str, reason: Option<&str>) -> String {
    if let Ok(value) = serde_json::from_str::<Value>(body)
        && let Some(text) = error_text(&value)
    {
        return text;
    }
    let body = body.trim();
    if body.is_empty() {
        reason.unwrap_or("no error text").to_string()
    } else {
        truncate(body)
    }
}

/// `{"error":{"message":..}}`, `{"error":".."}`, `{"message":..}` or
/// `{"detail":..}`.
fn error_text(value: &Value) -> Option<String> {
    let err = value.get("error");
    let text = err
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .or_else(|| err.and_then(Value::as_str))
        .or_else(|| value.get("message").and_then(Value::as_str))
        .or_else(|| value.get("detail").and_then(Value::as_str))?;
    Some(text.to_string())
}

/// `Retry-After` in seconds or as an HTTP date, or OpenAI's
/// `retry-after-ms`.
fn parse_retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && (0.0..1e12).contains(&ms)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = header(RETRY_AFTER.as_str())?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && (0.0..1e9).contains(&secs))
            .then(|| Duration::from_secs_f64(secs));
    }
    let date = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = date.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

/// Cuts text to [`MAX_ERROR_BODY_CHARS`] characters.
fn truncate(text: &str) -> String {
    match text.char_indices().nth(MAX_ERROR_BODY_CHARS) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_string(),
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
                },
                Message::Tool {
                    tool_call_id: "c1".into(),
                    name: "read".into(),
                    content: "out".into(),
                    is_error: false,
                },
                Message::Assistant {
                    content: "done".into(),
                    tool_calls: vec![],
                },
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "reads".into(),
                parameters: json!({ "type": "object" }),
            }],
            temperature: Some(0.2),
            max_tokens: Some(100),
        };
        let body = request_body(&request);
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
        };
        let body = request_body(&bare);
        assert!(body.get("tools").is_none() && body.get("temperature").is_none());
        assert!(body.get("max_tokens").is_none());
    }

    #[test]
    fn base_url_trailing_slash_is_ignored() {
        let p = OpenAiProvider::new("http://h/v1/".into(), None, reqwest::Client::new());
        assert_eq!(p.endpoint(), "http://h/v1/chat/completions");
    }

    #[test]
    fn error_bodies_and_retry_after() {
        assert_eq!(
            error_message(r#"{"error":{"message":"bad model"}}"#, None),
            "bad model"
        );
        assert_eq!(error_message(r#"{"detail":"nope"}"#, None), "nope");
        assert_eq!(error_message("", Some("Bad Gateway")), "Bad Gateway");
        let long = "x".repeat(2000);
        assert_eq!(
            error_message(&long, None).chars().count(),
            MAX_ERROR_BODY_CHARS + 3
        );

        let mut h = HeaderMap::new();
        assert_eq!(parse_retry_after(&h), None);
        h.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(
            RETRY_AFTER,
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(parse_retry_after(&h), Some(Duration::ZERO));
        let later = (chrono::Utc::now() + chrono::Duration::seconds(120)).to_rfc2822();
        h.insert(RETRY_AFTER, later.parse().unwrap());
        let wait = parse_retry_after(&h).unwrap();
        assert!(wait > Duration::from_secs(100) && wait <= Duration::from_secs(120));
        h.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(parse_retry_after(&h), None);
        h.insert("retry-after-ms", "250".parse().unwrap());
        assert_eq!(parse_retry_after(&h), Some(Duration::from_millis(250)));
    }
}
