//! The OpenAI Responses provider: `POST {base_url}/responses` with
//! `stream: true`, the answer read as the API's semantic server-sent events
//! (`response.created`, `response.output_item.*`,
//! `response.output_text.delta`, `response.completed`, ...) and assembled
//! into a [`ModelTurn`]. Used with `kind: openai-responses`, and for the
//! OpenAI models only served on this API ([`requires_responses_api`]).
//!
//! The conversation is sent whole every time with `store: false`: nothing
//! is kept on OpenAI's side, so the reasoning items of an answer (asked for
//! with `include: ["reasoning.encrypted_content"]`) come back in the turn's
//! `provider_items` and are sent again, in order, before that answer's
//! calls, as a stateless conversation must.
//!
//! The pure parts are tested without HTTP: the request JSON here, the event
//! assembly in the `stream` submodule. Malformed provider data never
//! panics: it becomes a [`ProviderError`]. May depend on `types` only.

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

/// The key of this wire format's part of a turn's `provider_items`: an
/// array of the answer's reasoning items, in output order.
pub const ITEMS_KEY: &str = "openai_responses";

/// The OpenAI models served on the Responses API only (a dated snapshot
/// of one, `NAME-YYYY-MM-DD`, counts as it). Determined from the
/// `ResponsesOnlyModel` list of OpenAI's own SDKs (o1-pro, o3-pro, the
/// deep-research models, computer-use-preview, gpt-5-codex, gpt-5-pro,
/// gpt-5.1-codex-max) and the models whose OpenAI model pages list the
/// Responses endpoint and not chat completions (codex-mini-latest, the
/// other gpt-5.x codex and pro models). Asked through a provider of kind
/// `openai` at OpenAI's own endpoint, they are sent in this format.
pub const RESPONSES_ONLY_MODELS: &[&str] = &[
    "o1-pro",
    "o3-pro",
    "o3-deep-research",
    "o4-mini-deep-research",
    "computer-use-preview",
    "codex-mini-latest",
    "gpt-5-codex",
    "gpt-5-pro",
    "gpt-5.1-codex",
    "gpt-5.1-codex-mini",
    "gpt-5.1-codex-max",
    "gpt-5.2-codex",
    "gpt-5.2-pro",
    "gpt-5.3-codex",
    "gpt-5.4-pro",
];

/// Whether OpenAI serves `model` on the Responses API only.
pub fn requires_responses_api(model: &str) -> bool {
    RESPONSES_ONLY_MODELS
        .iter()
        .any(|name| model == *name || model.strip_prefix(name).is_some_and(is_date_suffix))
}

/// `-YYYY-MM-DD`, the suffix of a dated snapshot.
fn is_date_suffix(rest: &str) -> bool {
    let bytes = rest.as_bytes();
    bytes.len() == 11
        && bytes.iter().enumerate().all(|(i, b)| match i {
            0 | 5 | 8 => *b == b'-',
            _ => b.is_ascii_digit(),
        })
}

/// A provider speaking the OpenAI Responses protocol.
#[derive(Debug, Clone)]
pub struct OpenAiResponsesProvider {
    base_url: String,
    api_key: Option<String>,
    client: reqwest::Client,
    /// Whether a request's cache key goes out as `prompt_cache_key`.
    prompt_caching: bool,
    /// The longest wait for the answer head or between two pieces of the
    /// answer body ([`DEFAULT_IDLE_TIMEOUT`] unless set).
    idle_timeout: Duration,
}

impl OpenAiResponsesProvider {
    /// `base_url` is the API root such as `https://api.openai.com/v1`; a
    /// trailing `/` is ignored. With `api_key`, requests carry
    /// `Authorization: Bearer KEY`; an empty key counts as none. With
    /// `prompt_caching`, a request's cache key is sent as
    /// `prompt_cache_key` (the provider's `prompt_caching` setting).
    pub fn new(
        base_url: String,
        api_key: Option<String>,
        client: reqwest::Client,
        prompt_caching: bool,
    ) -> Self {
        let base_url = base_url.trim_end_matches('/').to_string();
        OpenAiResponsesProvider {
            base_url,
            api_key: api_key.filter(|k| !k.is_empty()),
            client,
            prompt_caching,
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

    /// The URL requests are sent to.
    pub fn endpoint(&self) -> String {
        format!("{}/responses", self.base_url)
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

impl Provider for OpenAiResponsesProvider {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(self.call(request, on_delta))
    }
}

/// The JSON body of a streamed, stateless Responses request.
///
/// The opening system messages become `instructions`, the API's place for
/// the system prompt; a system message later in the conversation (a
/// session's summary, say) stays where it is as a `developer` message
/// (the API documents `developer` and `system` input messages as taking
/// precedence over `user` ones), so its place in the story is kept.
///
/// `reasoning.summary` is not asked for: OpenAI refuses it for some models
/// and for organisations not verified for it, and a refused request would
/// fail the run. Summaries a server sends anyway are read.
pub fn request_body(request: &ChatRequest, prompt_caching: bool) -> Value {
    let opening = request
        .messages
        .iter()
        .take_while(|m| matches!(m, Message::System { .. }))
        .count();
    let instructions: Vec<&str> = request.messages[..opening]
        .iter()
        .map(Message::content)
        .collect();
    let mut input = Vec::new();
    for message in &request.messages[opening..] {
        push_input(&mut input, message);
    }
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    if !instructions.is_empty() {
        body.insert("instructions".into(), json!(instructions.join("\n\n")));
    }
    body.insert("input".into(), Value::Array(input));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                // Not strict: strict mode asks more of a schema (every
                // property required, no extra ones) than tools declare.
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                    "strict": false,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(t) = request.temperature.and_then(shortest_decimal) {
        body.insert("temperature".into(), t);
    }
    if let Some(m) = request.max_tokens {
        body.insert("max_output_tokens".into(), json!(m));
    }
    if let Some(schema) = &request.output_schema {
        body.insert(
            "text".into(),
            json!({ "format": {
                "type": "json_schema", "name": "output", "schema": schema, "strict": false,
            } }),
        );
    }
    if prompt_caching && let Some(key) = &request.cache_key {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(false));
    body.insert("include".into(), json!(["reasoning.encrypted_content"]));
    Value::Object(body)
}

/// Adds the input items of one message after the opening system ones.
fn push_input(input: &mut Vec<Value>, message: &Message) {
    match message {
        Message::System { content } => {
            input.push(json!({ "type": "message", "role": "developer", "content": content }));
        }
        Message::User { content } => {
            input.push(json!({ "type": "message", "role": "user", "content": content }));
        }
        Message::Assistant {
            content,
            tool_calls,
            provider_items,
        } => {
            // The answer's reasoning first, as it came before the answer.
            let reasoning = provider_items
                .as_ref()
                .and_then(|items| items.get(ITEMS_KEY))
                .and_then(Value::as_array);
            input.extend(reasoning.into_iter().flatten().cloned());
            if !content.is_empty() {
                input.push(json!({ "type": "message", "role": "assistant", "content": content }));
            }
            for call in tool_calls {
                input.push(json!({
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                }));
            }
        }
        Message::Tool {
            tool_call_id,
            content,
            ..
        } => input.push(json!({
            "type": "function_call_output",
            "call_id": tool_call_id,
            "output": content,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{ToolCall, ToolSpec};

    fn request(messages: Vec<Message>) -> ChatRequest {
        ChatRequest {
            model: "gpt-x".into(),
            messages,
            tools: vec![],
            temperature: None,
            max_tokens: None,
            output_schema: None,
            cache_key: Some("helper".into()),
        }
    }

    #[test]
    fn request_body_has_every_part_and_carries_reasoning_before_the_calls() {
        let reasoning = json!({ "type": "reasoning", "id": "rs_1",
            "summary": [{ "type": "summary_text", "text": "look first" }],
            "encrypted_content": "gAAA-opaque" });
        let mut req = request(vec![
            Message::system("sys"),
            Message::system("more sys"),
            Message::user("hi"),
            Message::Assistant {
                content: "let me look".into(),
                tool_calls: vec![ToolCall {
                    id: "call_1".into(),
                    name: "read".into(),
                    arguments: "{\"p\":1}".into(),
                }],
                provider_items: Some(json!({ ITEMS_KEY: [reasoning.clone()] })),
            },
            Message::Tool {
                tool_call_id: "call_1".into(),
                name: "read".into(),
                content: "out".into(),
                is_error: false,
            },
            Message::system("a summary"),
            Message::assistant("done", vec![]),
        ]);
        req.tools = vec![ToolSpec {
            name: "read".into(),
            description: "reads".into(),
            parameters: json!({ "type": "object" }),
        }];
        req.temperature = Some(0.2);
        req.max_tokens = Some(100);
        req.output_schema = Some(json!({ "type": "object" }));
        assert_eq!(
            request_body(&req, true),
            json!({
                "model": "gpt-x",
                "instructions": "sys\n\nmore sys",
                "input": [
                    { "type": "message", "role": "user", "content": "hi" },
                    reasoning,
                    { "type": "message", "role": "assistant", "content": "let me look" },
                    { "type": "function_call", "call_id": "call_1", "name": "read",
                      "arguments": "{\"p\":1}" },
                    { "type": "function_call_output", "call_id": "call_1", "output": "out" },
                    { "type": "message", "role": "developer", "content": "a summary" },
                    { "type": "message", "role": "assistant", "content": "done" },
                ],
                "tools": [{ "type": "function", "name": "read", "description": "reads",
                    "parameters": { "type": "object" }, "strict": false }],
                "temperature": 0.2,
                "max_output_tokens": 100,
                "text": { "format": { "type": "json_schema", "name": "output",
                    "schema": { "type": "object" }, "strict": false } },
                "prompt_cache_key": "helper",
                "stream": true,
                "store": false,
                "include": ["reasoning.encrypted_content"],
            })
        );
        let off = request_body(&req, false);
        assert!(off.get("prompt_cache_key").is_none(), "caching off: {off}");
    }

    #[test]
    fn a_bare_request_has_only_what_is_set() {
        let mut req = request(vec![Message::user("hi")]);
        req.cache_key = None;
        let body = request_body(&req, true);
        for key in [
            "instructions",
            "tools",
            "temperature",
            "max_output_tokens",
            "text",
            "prompt_cache_key",
        ] {
            assert!(body.get(key).is_none(), "{key}: {body}");
        }
    }

    #[test]
    fn responses_only_models_are_known_with_their_dated_snapshots() {
        for model in [
            "o1-pro",
            "o3-pro-2025-06-10",
            "gpt-5-codex",
            "codex-mini-latest",
            "o3-deep-research-2025-06-26",
            "computer-use-preview",
        ] {
            assert!(requires_responses_api(model), "{model}");
        }
        for model in [
            "gpt-4o-mini",
            "o3",
            "gpt-5",
            "o1-pro-latest",
            "gpt-5-codexx",
            "o3-pro-2025-06",
        ] {
            assert!(!requires_responses_api(model), "{model}");
        }
    }

    #[test]
    fn base_url_trailing_slash_is_ignored() {
        let p =
            OpenAiResponsesProvider::new("http://h/v1/".into(), None, reqwest::Client::new(), true);
        assert_eq!(p.endpoint(), "http://h/v1/responses");
    }
}
