//! The Google Gemini provider (the Generative Language API): `POST
//! {base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse`, the
//! answer read as server-sent events (one `GenerateContentResponse` each, no
//! end marker) and assembled into a [`ModelTurn`].
//!
//! The pure parts are tested without HTTP: the request JSON here, the
//! response assembly in the `stream` submodule, the JSON Schema conversion
//! in `schema`. Malformed provider data never panics: it becomes
//! [`ProviderError::Stream`].

use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::header::ACCEPT;
use serde_json::{Map, Value, json};

use super::http::{error_message, parse_retry_after, read_turn, send};
use super::{
    ChatRequest, DEFAULT_IDLE_TIMEOUT, Delta, ModelTurn, Provider, ProviderError, shortest_decimal,
};
use crate::types::Message;

pub mod schema;
pub(super) mod stream;

use stream::{Assembler, retry_delay};

/// The public Gemini API.
pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";

/// Sent as the `thoughtSignature` of replayed function calls. Gemini 3
/// refuses a history whose function calls lack the signature it attached
/// to them, and [`crate::types::ToolCall`] has no place to keep it; this
/// is the value Google documents for calls it did not sign (histories from
/// other models, injected calls). Older models ignore it.
const UNSIGNED_CALL: &str = "skip_thought_signature_validator";

/// A provider speaking Gemini's `generateContent` protocol.
#[derive(Debug, Clone)]
pub struct GeminiProvider {
    base_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
    /// The longest wait for the answer head or between two pieces of the
    /// answer body ([`DEFAULT_IDLE_TIMEOUT`] unless set).
    idle_timeout: Duration,
}

impl GeminiProvider {
    /// `base_url` is the API root such as [`DEFAULT_BASE_URL`]; a trailing
    /// `/` is ignored. With `api_key`, requests carry `x-goog-api-key: KEY`
    /// (never the key in the URL, where it would end up in logs).
    pub fn new(base_url: String, api_key: Option<String>, client: reqwest::Client) -> Self {
        let base_url = base_url.trim_end_matches('/').to_string();
        GeminiProvider {
            base_url,
            api_key: api_key.filter(|k| !k.is_empty()),
            client,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }

    /// With `idle` as the longest wait for the answer head or between two
    /// pieces of the answer: past it the call fails with a retryable
    /// [`CutKind::Idle`](super::CutKind::Idle) cut.
    pub fn with_idle_timeout(mut self, idle: Duration) -> Self {
        self.idle_timeout = idle;
        self
    }

    /// The URL requests for `model` are sent to.
    pub fn endpoint(&self, model: &str) -> String {
        format!(
            "{}/v1beta/models/{model}:streamGenerateContent?alt=sse",
            self.base_url
        )
    }

    async fn call(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ModelTurn, ProviderError> {
        let mut builder = self
            .client
            .post(self.endpoint(&request.model))
            .header(ACCEPT, "text/event-stream")
            .json(&request_body(request)?);
        if let Some(key) = &self.api_key {
            builder = builder.header("x-goog-api-key", key);
        }
        let response = send(builder, self.idle_timeout).await?;
        if !response.status().is_success() {
            return Err(status_error(response).await);
        }
        read_turn::<Assembler>(response, self.idle_timeout, on_delta).await
    }
}

impl Provider for GeminiProvider {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(self.call(request, on_delta))
    }
}

/// A non-success answer as a [`ProviderError::Status`]. Like
/// `http::status_error`, plus two Gemini habits: the error object may come
/// as the only item of a list, and the wait of a 429 is given in the body
/// (`google.rpc.RetryInfo`) rather than in a `Retry-After` header.
async fn status_error(response: reqwest::Response) -> ProviderError {
    let status = response.status();
    let retry_after = parse_retry_after(response.headers());
    let body = response.text().await.unwrap_or_default();
    let mut error = status_from_body(status.as_u16(), status.canonical_reason(), &body);
    if let ProviderError::Status { retry_after: r, .. } = &mut error
        && retry_after.is_some()
    {
        *r = retry_after;
    }
    error
}

/// The error for an error `status` with `body` (the header's wait, if any,
/// is put in by the caller).
fn status_from_body(status: u16, reason: Option<&str>, body: &str) -> ProviderError {
    let value = serde_json::from_str::<Value>(body).ok();
    let error = match &value {
        Some(Value::Array(items)) => items.first(),
        other => other.as_ref(),
    }
    .filter(|v| v.get("error").is_some());
    let message = match error {
        Some(error) => error_message(&error.to_string(), reason),
        None => error_message(body, reason),
    };
    ProviderError::Status {
        status,
        message,
        retry_after: error.and_then(|e| e.get("error")).and_then(retry_delay),
    }
}

/// The JSON body of a `streamGenerateContent` request.
pub fn request_body(request: &ChatRequest) -> Result<Value, ProviderError> {
    let mut body = Map::new();
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::System { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({ "parts": [{ "text": system.join("\n\n") }] }),
        );
    }
    body.insert("contents".into(), Value::Array(contents(&request.messages)));
    if !request.tools.is_empty() {
        let mut declarations = Vec::with_capacity(request.tools.len());
        for tool in &request.tools {
            let parameters = schema::convert(&tool.parameters, "parameters")
                .map_err(|e| ProviderError::Config(format!("tool `{}`: {e}", tool.name)))?;
            let mut declaration = json!({ "name": tool.name, "description": tool.description });
            // Gemini refuses an object schema without properties; a tool
            // that takes no arguments is declared without parameters.
            if parameters.get("properties").is_some() {
                declaration["parameters"] = parameters;
            }
            declarations.push(declaration);
        }
        body.insert(
            "tools".into(),
            json!([{ "functionDeclarations": declarations }]),
        );
    }

    let mut config = Map::new();
    if let Some(t) = request.temperature.and_then(shortest_decimal) {
        config.insert("temperature".into(), t);
    }
    if let Some(m) = request.max_tokens {
        config.insert("maxOutputTokens".into(), json!(m));
    }
    // Gemini refuses JSON mode together with function calling, so with tools
    // the answer's shape is left to the prompt (the engine validates it
    // whatever the provider did).
    if let Some(output) = &request.output_schema
        && request.tools.is_empty()
    {
        config.insert("responseMimeType".into(), json!("application/json"));
        // A schema Gemini cannot express still gets JSON mode; the engine
        // holds the answer to the full schema.
        if let Ok(schema) = schema::convert(output, "output_schema") {
            config.insert("responseSchema".into(), schema);
        }
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    Ok(Value::Object(body))
}

/// The conversation as Gemini `contents`: `user` and `model` turns, tool
/// results as `functionResponse` parts of a `user` turn, consecutive turns
/// of one role merged into one.
fn contents(messages: &[Message]) -> Vec<Value> {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, parts) = match message {
            // Sent as `systemInstruction`.
            Message::System { .. } => continue,
            Message::User { content } => ("user", text_part(content).into_iter().collect()),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut parts: Vec<Value> = text_part(content).into_iter().collect();
                for (i, call) in tool_calls.iter().enumerate() {
                    let args = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    let mut part = json!({ "functionCall": { "name": call.name, "args": args } });
                    // Gemini signs the first call of a step only.
                    if i == 0 {
                        part["thoughtSignature"] = json!(UNSIGNED_CALL);
                    }
                    parts.push(part);
                }
                ("model", parts)
            }
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => {
                let key = if *is_error { "error" } else { "content" };
                let part = json!({
                    "functionResponse": { "name": name, "response": { key: content } }
                });
                ("user", vec![part])
            }
        };
        if parts.is_empty() {
            // Gemini refuses empty turns and empty text parts.
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(parts),
            _ => turns.push((role, parts)),
        }
    }
    turns
        .into_iter()
        .map(|(role, parts)| json!({ "role": role, "parts": parts }))
        .collect()
}

fn text_part(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({ "text": text }))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::types::{ToolCall, ToolSpec};

    fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> ChatRequest {
        ChatRequest {
            model: "gemini-x".into(),
            messages,
            tools,
            temperature: None,
            max_tokens: None,
            output_schema: None,
            cache_key: None,
        }
    }

    fn call(id: &str, name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    fn tool_result(name: &str, content: &str, is_error: bool) -> Message {
        Message::Tool {
            tool_call_id: format!("id-{name}"),
            name: name.into(),
            content: content.into(),
            is_error,
        }
    }

    fn read_tool(parameters: Value) -> ToolSpec {
        ToolSpec {
            name: "read".into(),
            description: "reads".into(),
            parameters,
        }
    }

    #[test]
    fn request_body_has_every_part() {
        let mut req = request(
            vec![
                Message::system("sys"),
                Message::system("skills"),
                Message::user("hi"),
                Message::user("again"),
                Message::Assistant {
                    content: "Looking.".into(),
                    tool_calls: vec![
                        call("c1", "read", "{\"p\":1}"),
                        call("c2", "list", "not json"),
                    ],
                    provider_items: None,
                },
                tool_result("read", "out", false),
                tool_result("list", "denied", true),
                Message::Assistant {
                    content: String::new(),
                    tool_calls: vec![call("c3", "read", "[1]")],
                    provider_items: None,
                },
                tool_result("read", "", false),
                Message::user("thanks"),
                Message::assistant("done", Vec::new()),
            ],
            vec![
                read_tool(json!({ "type": "object", "additionalProperties": false,
                    "properties": { "p": { "type": "integer", "default": 0 } },
                    "required": ["p"] })),
                ToolSpec {
                    name: "list".into(),
                    description: "lists".into(),
                    parameters: json!({ "type": "object", "properties": {} }),
                },
            ],
        );
        req.temperature = Some(0.2);
        req.max_tokens = Some(100);
        req.output_schema = Some(json!({ "type": "object" }));
        let signed = |name: &str, args: Value| {
            json!({ "functionCall": { "name": name, "args": args },
                    "thoughtSignature": UNSIGNED_CALL })
        };
        assert_eq!(
            request_body(&req).unwrap(),
            json!({
                "systemInstruction": { "parts": [{ "text": "sys\n\nskills" }] },
                "contents": [
                    { "role": "user", "parts": [{ "text": "hi" }, { "text": "again" }] },
                    { "role": "model", "parts": [
                        { "text": "Looking." },
                        signed("read", json!({ "p": 1 })),
                        { "functionCall": { "name": "list", "args": {} } },
                    ] },
                    { "role": "user", "parts": [
                        { "functionResponse": { "name": "read", "response": { "content": "out" } } },
                        { "functionResponse": { "name": "list", "response": { "error": "denied" } } },
                    ] },
                    { "role": "model", "parts": [signed("read", json!({}))] },
                    { "role": "user", "parts": [
                        { "functionResponse": { "name": "read", "response": { "content": "" } } },
                        { "text": "thanks" },
                    ] },
                    { "role": "model", "parts": [{ "text": "done" }] },
                ],
                "tools": [{ "functionDeclarations": [
                    { "name": "read", "description": "reads", "parameters": {
                        "type": "object",
                        "properties": { "p": { "type": "integer" } },
                        "required": ["p"] } },
                    { "name": "list", "description": "lists" },
                ] }],
                // No JSON mode: there are tools.
                "generationConfig": { "temperature": 0.2, "maxOutputTokens": 100 },
            })
        );

        let bare = request(vec![Message::user("hi")], vec![]);
        assert_eq!(
            request_body(&bare).unwrap(),
            json!({ "contents": [{ "role": "user", "parts": [{ "text": "hi" }] }] })
        );
    }

    #[test]
    fn json_mode_only_without_tools() {
        let mut req = request(vec![Message::user("hi")], vec![]);
        req.output_schema = Some(json!({ "type": "object", "title": "Out",
            "properties": { "n": { "type": ["number", "null"] } } }));
        let body = request_body(&req).unwrap();
        assert_eq!(
            body["generationConfig"],
            json!({
                "responseMimeType": "application/json",
                "responseSchema": { "type": "object",
                    "properties": { "n": { "type": "number", "nullable": true } } },
            })
        );
        // A schema Gemini cannot express: JSON mode without it.
        req.output_schema = Some(json!({ "oneOf": [{ "type": "string" }] }));
        let body = request_body(&req).unwrap();
        assert_eq!(
            body["generationConfig"],
            json!({ "responseMimeType": "application/json" })
        );
    }

    #[test]
    fn unconvertible_tool_schema_is_a_config_error() {
        let req = request(
            vec![Message::user("hi")],
            vec![read_tool(json!({ "type": "object",
                "properties": { "x": { "$ref": "#/$defs/X" } } }))],
        );
        let err = request_body(&req).unwrap_err();
        assert_eq!(
            err,
            ProviderError::Config(
                "tool `read`: parameters.properties.x: \"$ref\" is not supported by Gemini; \
                 inline the definition"
                    .into()
            )
        );
        assert!(!err.is_retryable());
    }

    #[test]
    fn error_bodies() {
        let body =
            r#"{"error":{"code":400,"message":"API key not valid.","status":"INVALID_ARGUMENT"}}"#;
        assert_eq!(
            status_from_body(400, Some("Bad Request"), body),
            ProviderError::Status {
                status: 400,
                message: "API key not valid.".into(),
                retry_after: None
            }
        );
        let listed = r#"[{"error":{"code":429,"message":"Resource exhausted.","status":"RESOURCE_EXHAUSTED",
            "details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.5s"}]}}]"#;
        assert_eq!(
            status_from_body(429, None, listed),
            ProviderError::Status {
                status: 429,
                message: "Resource exhausted.".into(),
                retry_after: Some(Duration::from_millis(1500))
            }
        );
        let plain = status_from_body(502, Some("Bad Gateway"), "");
        assert_eq!(plain.to_string(), "HTTP 502: Bad Gateway");
    }

    #[test]
    fn endpoint_and_key() {
        let p = GeminiProvider::new(
            "http://h/".into(),
            Some(String::new()),
            reqwest::Client::new(),
        );
        assert_eq!(
            p.endpoint("gemini-2.5-flash"),
            "http://h/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert!(p.api_key.is_none());
    }
}
