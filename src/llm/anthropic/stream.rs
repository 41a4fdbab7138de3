//! Assembling a [`ModelTurn`] from Messages stream events: text and
//! thinking forwarded as deltas, `tool_use` blocks put together from their
//! `input_json_delta` pieces, usage and stop reason kept. Pure: no I/O, so
//! it is tested from lists of event values.

use std::collections::BTreeMap;

use serde_json::Value;

use super::super::http::{Assemble, Flow, error_text, event_json, truncate};
use crate::llm::{AnswerIdentity, CutKind, Delta, ModelTurn, ProviderError};
use crate::types::{ToolCall, Usage};

/// A content block being assembled. Only `tool_use` blocks need state:
/// text and thinking are forwarded as they come.
#[derive(Debug)]
enum Block {
    ToolUse {
        id: String,
        name: String,
        /// The `input_json_delta` pieces so far.
        json: String,
        /// The `input` of `content_block_start` (normally `{}`, the whole
        /// input in a non-streamed answer), used when no piece came.
        input: Value,
    },
    /// Text, thinking, or a block type we do not use.
    Other,
}

/// Assembles a [`ModelTurn`] from Messages stream events, forwarding text
/// and thinking as deltas as they come.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    text: String,
    reasoning: String,
    /// Content blocks by their stream `index`, so tool calls come out in
    /// block order.
    blocks: BTreeMap<u64, Block>,
    input_tokens: Option<u64>,
    cache_read_tokens: Option<u64>,
    cache_creation_tokens: Option<u64>,
    output_tokens: Option<u64>,
    finish_reason: Option<String>,
    identity: AnswerIdentity,
    done: bool,
}

impl Assembler {
    /// One parsed event object of type `kind`.
    fn push(
        &mut self,
        kind: &str,
        value: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Flow, ProviderError> {
        match kind {
            "message_start" => {
                if let Some(message) = value.get("message") {
                    self.identity.note(message, "id", "model");
                }
                if let Some(usage) = value.pointer("/message/usage") {
                    self.push_usage(usage);
                }
            }
            "content_block_start" => {
                let index = self.index_of(value)?;
                let block = value.get("content_block").unwrap_or(&Value::Null);
                self.start_block(index, block, on_delta)?;
            }
            "content_block_delta" => {
                let index = self.index_of(value)?;
                let delta = value.get("delta").unwrap_or(&Value::Null);
                self.push_delta(index, delta, on_delta)?;
            }
            "message_delta" => {
                if let Some(reason) = value.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.finish_reason = Some(reason.to_string());
                }
                if let Some(usage) = value.get("usage") {
                    self.push_usage(usage);
                }
            }
            "message_stop" => {
                self.done = true;
                return Ok(Flow::Done);
            }
            "error" => return Err(stream_error(value)),
            // `content_block_stop`, `ping` and event types added later.
            _ => {}
        }
        Ok(Flow::More)
    }

    /// The block `index` of an event.
    fn index_of(&self, value: &Value) -> Result<u64, ProviderError> {
        value.get("index").and_then(Value::as_u64).ok_or_else(|| {
            ProviderError::Stream(format!(
                "content block event without index: {}",
                truncate(&value.to_string())
            ))
        })
    }

    /// `content_block_start`, or a block of a non-streamed answer.
    fn start_block(
        &mut self,
        index: u64,
        block: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(), ProviderError> {
        let text = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or("");
        let state = match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                self.push_text(text("text"), on_delta);
                Block::Other
            }
            Some("thinking") => {
                self.push_reasoning(text("thinking"), on_delta);
                Block::Other
            }
            Some("tool_use") => Block::ToolUse {
                id: text("id").to_string(),
                name: text("name").to_string(),
                json: String::new(),
                input: block.get("input").cloned().unwrap_or(Value::Null),
            },
            Some(_) => Block::Other,
            None => {
                return Err(ProviderError::Stream(format!(
                    "content block without type: {}",
                    truncate(&block.to_string())
                )));
            }
        };
        self.blocks.insert(index, state);
        Ok(())
    }

    /// `content_block_delta`.
    fn push_delta(
        &mut self,
        index: u64,
        delta: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(), ProviderError> {
        let text = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or("");
        match delta.get("type").and_then(Value::as_str) {
            Some("text_delta") => self.push_text(text("text"), on_delta),
            Some("thinking_delta") => self.push_reasoning(text("thinking"), on_delta),
            Some("input_json_delta") => match self.blocks.get_mut(&index) {
                Some(Block::ToolUse { json, .. }) => json.push_str(text("partial_json")),
                _ => {
                    return Err(ProviderError::Stream(format!(
                        "input_json_delta for block {index}, which is not a tool_use block"
                    )));
                }
            },
            // `signature_delta` (we never send thinking back), citations,
            // and delta types added later.
            _ => {}
        }
        Ok(())
    }

    fn push_text(&mut self, text: &str, on_delta: &mut (dyn FnMut(Delta) + Send)) {
        if !text.is_empty() {
            self.text.push_str(text);
            on_delta(Delta::Text(text.to_string()));
        }
    }

    fn push_reasoning(&mut self, text: &str, on_delta: &mut (dyn FnMut(Delta) + Send)) {
        if !text.is_empty() {
            self.reasoning.push_str(text);
            on_delta(Delta::Reasoning(text.to_string()));
        }
    }

    /// A `usage` object of `message_start`, `message_delta` or a whole
    /// answer; later values replace earlier ones.
    fn push_usage(&mut self, usage: &Value) {
        let count = |key: &str| usage.get(key).and_then(Value::as_u64);
        let fields = [
            (&mut self.input_tokens, "input_tokens"),
            (&mut self.cache_read_tokens, "cache_read_input_tokens"),
            (
                &mut self.cache_creation_tokens,
                "cache_creation_input_tokens",
            ),
            (&mut self.output_tokens, "output_tokens"),
        ];
        for (field, key) in fields {
            if let Some(n) = count(key) {
                *field = Some(n);
            }
        }
    }

    /// The usage: Anthropic's `input_tokens` excludes the tokens read from
    /// and written to the prompt cache, so all three make the input.
    fn usage(&self) -> Usage {
        let parts = [
            self.input_tokens,
            self.cache_read_tokens,
            self.cache_creation_tokens,
        ];
        let input_tokens = parts
            .iter()
            .any(Option::is_some)
            .then(|| parts.iter().flatten().sum());
        Usage {
            input_tokens,
            output_tokens: self.output_tokens,
            cached_input_tokens: self.cache_read_tokens,
        }
    }
}

/// An `error` event (`{"type":"error","error":{"type":..,"message":..}}`)
/// as the status Anthropic would have answered with before the stream
/// started, so an overloaded or rate-limited stream is retried like one.
fn stream_error(value: &Value) -> ProviderError {
    let kind = value
        .pointer("/error/type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let status = match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => 400,
    };
    let message = error_text(value)
        .filter(|m| !m.is_empty())
        .or_else(|| (!kind.is_empty()).then(|| kind.to_string()))
        .unwrap_or_else(|| truncate(&value.to_string()));
    ProviderError::Status {
        status,
        message,
        retry_after: None,
    }
}

impl Assemble for Assembler {
    /// One server-sent event: its name (`message` unless named) and data.
    /// The event type is taken from the data's `type`, the name serving
    /// when the data has none.
    fn push_event(
        &mut self,
        event: &str,
        data: &str,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Flow, ProviderError> {
        let value = event_json(event, data, "event")?;
        if !value.is_object() {
            return Err(ProviderError::Stream(format!(
                "event is not an object: {}",
                truncate(data)
            )));
        }
        let kind = value.get("type").and_then(Value::as_str).unwrap_or(event);
        self.push(kind, &value, on_delta)
    }

    /// The assembled turn, once the stream has ended.
    fn finish(self) -> Result<ModelTurn, ProviderError> {
        if !self.done {
            return Err(ProviderError::cut(
                CutKind::EndedEarly,
                "the stream ended before message_stop",
            ));
        }
        let usage = self.usage();
        let mut tool_calls = Vec::new();
        for (index, block) in self.blocks {
            let Block::ToolUse {
                id,
                name,
                json,
                input,
            } = block
            else {
                continue;
            };
            if name.is_empty() {
                return Err(ProviderError::Stream(format!(
                    "tool_use block {index} has no name"
                )));
            }
            let id = if id.is_empty() {
                format!("toolu_{index}")
            } else {
                id
            };
            let arguments = if !json.trim().is_empty() {
                json
            } else if input.as_object().is_some_and(|o| !o.is_empty()) {
                input.to_string()
            } else {
                "{}".to_string()
            };
            tool_calls.push(ToolCall {
                id,
                name,
                arguments,
            });
        }
        Ok(ModelTurn {
            text: self.text,
            reasoning: self.reasoning,
            tool_calls,
            usage,
            finish_reason: self.finish_reason,
            response_id: self.identity.id,
            response_model: self.identity.model,
            provider_items: None,
        })
    }

    /// A non-streamed Messages answer (a server that ignored `stream`): its
    /// content blocks, usage and stop reason.
    fn parse_full(
        value: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ModelTurn, ProviderError> {
        if value.get("type").and_then(Value::as_str) == Some("error") {
            return Err(stream_error(value));
        }
        let Some(content) = value.get("content").and_then(Value::as_array) else {
            return Err(ProviderError::Stream(format!(
                "response has no content: {}",
                truncate(&value.to_string())
            )));
        };
        let mut assembler = Assembler::default();
        assembler.identity.note(value, "id", "model");
        for (index, block) in (0u64..).zip(content) {
            assembler.start_block(index, block, on_delta)?;
        }
        if let Some(usage) = value.get("usage") {
            assembler.push_usage(usage);
        }
        assembler.finish_reason = value
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        assembler.done = true;
        assembler.finish()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn assemble(events: &[Value]) -> (Result<ModelTurn, ProviderError>, Vec<Delta>) {
        let mut deltas = Vec::new();
        let mut on_delta = |d: Delta| deltas.push(d);
        let mut asm = Assembler::default();
        let mut result = Ok(());
        for e in events {
            let data = e.as_str().map_or_else(|| e.to_string(), str::to_string);
            let name = e["type"].as_str().unwrap_or("message");
            match asm.feed(name, &data, &mut on_delta) {
                Ok(Flow::Done) => break,
                Ok(Flow::More) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        (result.and_then(|()| asm.finish()), deltas)
    }

    fn start(usage: Value) -> Value {
        json!({ "type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "content": [],
            "model": "claude-x", "stop_reason": null, "usage": usage } })
    }

    fn block(index: u64, block: Value) -> Value {
        json!({ "type": "content_block_start", "index": index, "content_block": block })
    }

    fn delta(index: u64, delta: Value) -> Value {
        json!({ "type": "content_block_delta", "index": index, "delta": delta })
    }

    fn tool_start(index: u64, id: &str, name: &str) -> Value {
        block(
            index,
            json!({ "type": "tool_use", "id": id, "name": name, "input": {} }),
        )
    }

    fn stop(index: u64) -> Value {
        json!({ "type": "content_block_stop", "index": index })
    }

    fn end(reason: &str, output_tokens: u64) -> [Value; 2] {
        [
            json!({ "type": "message_delta", "delta": { "stop_reason": reason,
                    "stop_sequence": null }, "usage": { "output_tokens": output_tokens } }),
            json!({ "type": "message_stop" }),
        ]
    }

    fn args(partial: &str) -> Value {
        json!({ "type": "input_json_delta", "partial_json": partial })
    }

    #[test]
    fn text_thinking_and_usage_with_cache_tokens() {
        let mut events = vec![
            start(json!({ "input_tokens": 5, "cache_read_input_tokens": 100,
                          "cache_creation_input_tokens": 20, "output_tokens": 1 })),
            json!({ "type": "ping" }),
            block(0, json!({ "type": "thinking", "thinking": "" })),
            delta(0, json!({ "type": "thinking_delta", "thinking": "hmm" })),
            delta(0, json!({ "type": "thinking_delta", "thinking": " ok" })),
            delta(0, json!({ "type": "signature_delta", "signature": "sig" })),
            stop(0),
            block(1, json!({ "type": "text", "text": "" })),
            delta(1, json!({ "type": "text_delta", "text": "Hel" })),
            json!({ "type": "some_future_event" }),
            delta(1, json!({ "type": "text_delta", "text": "lo" })),
            stop(1),
        ];
        events.extend(end("end_turn", 9));
        let (turn, deltas) = assemble(&events);
        let turn = turn.unwrap();
        assert_eq!(turn.text, "Hello");
        assert_eq!(turn.reasoning, "hmm ok");
        assert_eq!(turn.finish_reason.as_deref(), Some("end_turn"));
        assert!(turn.tool_calls.is_empty());
        assert_eq!(turn.response_id.as_deref(), Some("msg_1"));
        assert_eq!(turn.response_model.as_deref(), Some("claude-x"));
        assert_eq!(
            turn.usage,
            Usage {
                input_tokens: Some(125),
                output_tokens: Some(9),
                cached_input_tokens: Some(100),
            }
        );
        assert_eq!(
            deltas,
            vec![
                Delta::Reasoning("hmm".into()),
                Delta::Reasoning(" ok".into()),
                Delta::Text("Hel".into()),
                Delta::Text("lo".into()),
            ]
        );
    }

    #[test]
    fn parallel_tool_use_blocks_with_split_json() {
        let mut events = vec![
            start(json!({ "input_tokens": 7, "output_tokens": 2 })),
            block(0, json!({ "type": "text", "text": "" })),
            delta(0, json!({ "type": "text_delta", "text": "Looking." })),
            stop(0),
            tool_start(1, "toolu_a", "read"),
            delta(1, args("")),
            delta(1, args("{\"p\":")),
            delta(1, args("1}")),
            stop(1),
            tool_start(2, "toolu_b", "ls"),
            stop(2),
        ];
        events.extend(end("tool_use", 30));
        let (turn, _) = assemble(&events);
        let turn = turn.unwrap();
        let calls: Vec<(&str, &str, &str)> = turn
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            vec![("toolu_a", "read", "{\"p\":1}"), ("toolu_b", "ls", "{}")]
        );
        assert_eq!(turn.text, "Looking.");
        assert_eq!(turn.finish_reason.as_deref(), Some("tool_use"));
        // Without cache fields: input as reported, cached unknown; the
        // output of message_delta replaces message_start's.
        assert_eq!(turn.usage.input_tokens, Some(7));
        assert_eq!(turn.usage.cached_input_tokens, None);
        assert_eq!(turn.usage.output_tokens, Some(30));
    }

    #[test]
    fn error_events_become_statuses() {
        let overloaded = json!({ "type": "error",
            "error": { "type": "overloaded_error", "message": "Overloaded" } });
        let (turn, _) = assemble(&[start(json!({})), overloaded]);
        let err = turn.unwrap_err();
        assert_eq!(
            err,
            ProviderError::Status {
                status: 529,
                message: "Overloaded".into(),
                retry_after: None
            }
        );
        assert!(err.is_retryable());
        let status_of = |kind: &str| match stream_error(&json!({ "error": { "type": kind } })) {
            ProviderError::Status {
                status, message, ..
            } => {
                assert_eq!(message, kind);
                status
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(status_of("rate_limit_error"), 429);
        assert_eq!(status_of("api_error"), 500);
        assert_eq!(status_of("invalid_request_error"), 400);
        assert_eq!(status_of("something_new"), 400);
        // Not JSON, under the `error` name.
        let mut asm = Assembler::default();
        let err = asm.push_event("error", "boom", &mut |_| {}).unwrap_err();
        assert_eq!(err, ProviderError::Stream("boom".into()));
    }

    #[test]
    fn malformed_and_early_ends_are_stream_errors() {
        let text_start = block(0, json!({ "type": "text", "text": "" }));
        let message_delta = end("end_turn", 1)[0].clone();
        let [nameless_end, stop_event] = end("tool_use", 1);
        let cases: Vec<(Vec<Value>, &str)> = vec![
            (
                vec![start(json!({})), text_start.clone()],
                "before message_stop",
            ),
            (
                vec![text_start.clone(), message_delta],
                "before message_stop",
            ),
            (vec![json!("{not json")], "invalid event JSON"),
            (vec![json!([1, 2])], "not an object"),
            (
                vec![json!({ "type": "content_block_start" })],
                "without index",
            ),
            (vec![block(0, json!({}))], "without type"),
            (
                vec![text_start, delta(0, args("{"))],
                "not a tool_use block",
            ),
            (
                vec![tool_start(0, "t", ""), nameless_end, stop_event],
                "has no name",
            ),
        ];
        for (events, want) in cases {
            let err = assemble(&events).0.expect_err(want);
            crate::llm::assert_stream_error(&err, want);
        }
    }

    #[test]
    fn full_json_response_is_accepted() {
        let mut deltas = Vec::new();
        let value = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                { "type": "thinking", "thinking": "think", "signature": "s" },
                { "type": "text", "text": "whole" },
                { "type": "tool_use", "id": "toolu_1", "name": "read", "input": { "p": 1 } },
            ],
            "stop_reason": "tool_use",
            "usage": { "input_tokens": 3, "cache_read_input_tokens": 2, "output_tokens": 4 },
        });
        let turn = Assembler::parse_full(&value, &mut |d| deltas.push(d)).unwrap();
        assert_eq!(turn.text, "whole");
        assert_eq!(turn.reasoning, "think");
        assert_eq!(turn.tool_calls[0].arguments, "{\"p\":1}");
        assert_eq!(turn.finish_reason.as_deref(), Some("tool_use"));
        assert_eq!(turn.usage.input_tokens, Some(5));
        assert_eq!(turn.usage.cached_input_tokens, Some(2));
        assert_eq!(turn.usage.output_tokens, Some(4));
        assert_eq!(
            deltas,
            vec![
                Delta::Reasoning("think".into()),
                Delta::Text("whole".into())
            ]
        );
        let err = Assembler::parse_full(&json!({ "type": "message" }), &mut |_| {}).unwrap_err();
        assert!(matches!(err, ProviderError::Stream(m) if m.contains("no content")));
    }
}
