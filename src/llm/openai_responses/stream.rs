//! Assembling a [`ModelTurn`] from the Responses API's semantic events:
//! text and reasoning (summary or raw reasoning text) forwarded as deltas,
//! function calls put together by `output_index` from their added item,
//! argument deltas and done item, reasoning items with their encrypted
//! content kept for the next request, usage and the end state read from
//! the terminal `response.completed` / `response.incomplete` /
//! `response.failed`. There is no `[DONE]`: a stream that ends without a
//! terminal event was cut. Pure: no I/O, so it is tested from lists of
//! event values. May depend on `llm` and `types` only.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::super::http::{Assemble, Flow, error_text, event_json, truncate};
use super::ITEMS_KEY;
use crate::llm::{AnswerIdentity, CutKind, Delta, ModelTurn, ProviderError};
use crate::types::{ToolCall, Usage};

/// A function call being assembled.
#[derive(Debug, Default)]
struct PartialCall {
    /// The output item's own id (`fc_...`), which argument events name.
    item_id: String,
    /// The id its output is sent back under (`call_...`).
    call_id: String,
    name: String,
    arguments: String,
}

/// One output item of the answer, by what this format keeps of it.
#[derive(Debug)]
enum Item {
    Call(PartialCall),
    /// A reasoning item as it goes back in the next request.
    Reasoning(Value),
}

/// Assembles a [`ModelTurn`] from Responses stream events, forwarding
/// text and reasoning as deltas as they come.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    text: String,
    reasoning: String,
    /// The output items kept, by `output_index`, so they come out in order.
    items: BTreeMap<u64, Item>,
    usage: Usage,
    finish_reason: Option<String>,
    identity: AnswerIdentity,
    /// Whether text or reasoning came as deltas (else the final output
    /// items are read for them).
    streamed_text: bool,
    streamed_reasoning: bool,
    /// A terminal event (`response.completed` or `response.incomplete`)
    /// arrived.
    ended: bool,
}

impl Assembler {
    /// One parsed event, by its `type`.
    fn push(
        &mut self,
        kind: &str,
        event: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Flow, ProviderError> {
        let delta = || event.get("delta").and_then(Value::as_str).unwrap_or("");
        match kind {
            "response.created" | "response.in_progress" => {
                if let Some(response) = event.get("response") {
                    self.identity.note(response, "id", "model");
                }
            }
            "response.output_item.added" | "response.output_item.done" => {
                let index = output_index(event)?;
                if let Some(item) = event.get("item") {
                    self.push_item(index, item);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let text = delta();
                if !text.is_empty() {
                    self.streamed_text = true;
                    self.text.push_str(text);
                    on_delta(Delta::Text(text.to_string()));
                }
            }
            // Summary parts are paragraphs of their own.
            "response.reasoning_summary_part.added" if !self.reasoning.is_empty() => {
                self.reasoning.push_str("\n\n");
                on_delta(Delta::Reasoning("\n\n".into()));
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let text = delta();
                if !text.is_empty() {
                    self.streamed_reasoning = true;
                    self.reasoning.push_str(text);
                    on_delta(Delta::Reasoning(text.to_string()));
                }
            }
            "response.function_call_arguments.delta" => {
                let call = self.call_of(event)?;
                call.arguments.push_str(delta());
            }
            "response.function_call_arguments.done" => {
                if let Some(arguments) = event.get("arguments").and_then(Value::as_str) {
                    self.call_of(event)?.arguments = arguments.to_string();
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = event.get("response").unwrap_or(&Value::Null);
                self.push_response(response, on_delta)?;
                return Ok(Flow::Done);
            }
            "response.failed" => {
                let response = event.get("response").unwrap_or(&Value::Null);
                return Err(failure(response.get("error").unwrap_or(response)));
            }
            "error" => return Err(failure(event.get("error").unwrap_or(event))),
            // Lifecycle events, content parts, annotations, built-in tools'
            // progress, and whatever a later API version adds.
            _ => {}
        }
        Ok(Flow::More)
    }

    /// An output item as added or done: a function call's id, name and
    /// (when done) whole arguments; a reasoning item worth carrying.
    fn push_item(&mut self, index: u64, item: &Value) {
        let text = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
        match text("type") {
            "function_call" => {
                let entry = self
                    .items
                    .entry(index)
                    .or_insert_with(|| Item::Call(PartialCall::default()));
                let Item::Call(call) = entry else {
                    return;
                };
                for (field, key) in [
                    (&mut call.item_id, "id"),
                    (&mut call.call_id, "call_id"),
                    (&mut call.name, "name"),
                    (&mut call.arguments, "arguments"),
                ] {
                    let value = text(key);
                    if !value.is_empty() {
                        *field = value.to_string();
                    }
                }
            }
            "reasoning" => {
                // Without its encrypted content a reasoning item cannot be
                // sent back under `store: false` (its id names nothing kept
                // on the server): such an item is not carried.
                let Some(encrypted) = item.get("encrypted_content").and_then(Value::as_str) else {
                    return;
                };
                let summary = item.get("summary").cloned().unwrap_or_else(|| json!([]));
                self.items.insert(
                    index,
                    Item::Reasoning(json!({
                        "type": "reasoning",
                        "id": item.get("id").cloned().unwrap_or(Value::Null),
                        "summary": summary,
                        "encrypted_content": encrypted,
                    })),
                );
            }
            _ => {}
        }
    }

    /// The call an arguments event is about: by `output_index`, else by
    /// `item_id`; a call never announced is started.
    fn call_of(&mut self, event: &Value) -> Result<&mut PartialCall, ProviderError> {
        let item_id = event.get("item_id").and_then(Value::as_str).unwrap_or("");
        let index = match event.get("output_index").and_then(Value::as_u64) {
            Some(index) => index,
            None => self
                .items
                .iter()
                .find(|(_, item)| matches!(item, Item::Call(c) if c.item_id == item_id && !item_id.is_empty()))
                .map(|(index, _)| *index)
                .ok_or_else(|| {
                    ProviderError::Stream(format!(
                        "function call arguments for no known call: {}",
                        truncate(&event.to_string())
                    ))
                })?,
        };
        let entry = self.items.entry(index).or_insert_with(|| {
            Item::Call(PartialCall {
                item_id: item_id.to_string(),
                ..PartialCall::default()
            })
        });
        match entry {
            Item::Call(call) => Ok(call),
            Item::Reasoning(_) => Err(ProviderError::Stream(format!(
                "function call arguments for the reasoning item at output_index {index}"
            ))),
        }
    }

    /// The final response object of a terminal event (or a whole answer):
    /// its identity, usage and end state, and what its output holds that
    /// the stream did not deliver.
    fn push_response(
        &mut self,
        response: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(), ProviderError> {
        if response.get("status").and_then(Value::as_str) == Some("failed") {
            return Err(failure(response.get("error").unwrap_or(response)));
        }
        self.identity.note(response, "id", "model");
        if let Some(usage) = response.get("usage") {
            let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
            self.usage.input_tokens = count("/input_tokens").or(self.usage.input_tokens);
            self.usage.output_tokens = count("/output_tokens").or(self.usage.output_tokens);
            self.usage.cached_input_tokens =
                count("/input_tokens_details/cached_tokens").or(self.usage.cached_input_tokens);
        }
        if let Some(output) = response.get("output").and_then(Value::as_array) {
            self.push_output(output, on_delta);
        }
        let incomplete = response.get("status").and_then(Value::as_str) == Some("incomplete");
        self.finish_reason = Some(if incomplete {
            // In the names `ModelTurn::early_stop` knows.
            match response
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
            {
                Some("max_output_tokens") => "length".into(),
                Some("content_filter") => "content_filter".into(),
                Some(other) => other.to_string(),
                None => "incomplete".into(),
            }
        } else if self.items.values().any(|i| matches!(i, Item::Call(_))) {
            "tool_calls".into()
        } else {
            "stop".into()
        });
        self.ended = true;
        Ok(())
    }

    /// The final output items: calls and reasoning items the stream did
    /// not announce, and the text and reasoning it did not stream (a
    /// server that sends the answer only at its end, or not streamed).
    fn push_output(&mut self, output: &[Value], on_delta: &mut (dyn FnMut(Delta) + Send)) {
        for (index, item) in output.iter().enumerate() {
            let index = index as u64;
            match item.get("type").and_then(Value::as_str) {
                Some("function_call" | "reasoning") if !self.items.contains_key(&index) => {
                    self.push_item(index, item);
                }
                _ => {}
            }
            if item.get("type").and_then(Value::as_str) == Some("reasoning")
                && !self.streamed_reasoning
            {
                for part in item
                    .get("summary")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(text) = part.get("text").and_then(Value::as_str) {
                        if !self.reasoning.is_empty() {
                            self.reasoning.push_str("\n\n");
                        }
                        self.reasoning.push_str(text);
                        on_delta(Delta::Reasoning(text.to_string()));
                    }
                }
            }
            if item.get("type").and_then(Value::as_str) == Some("message") && !self.streamed_text {
                for part in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let text = part
                        .get("text")
                        .or_else(|| part.get("refusal"))
                        .and_then(Value::as_str);
                    if let Some(text) = text.filter(|t| !t.is_empty()) {
                        self.text.push_str(text);
                        on_delta(Delta::Text(text.to_string()));
                    }
                }
            }
        }
    }
}

/// The `output_index` of an item event.
fn output_index(event: &Value) -> Result<u64, ProviderError> {
    event
        .get("output_index")
        .and_then(Value::as_u64)
        .ok_or_else(|| {
            ProviderError::Stream(format!(
                "output item event without output_index: {}",
                truncate(&event.to_string())
            ))
        })
}

/// A `response.failed` error or an `error` event. The API's error codes
/// `rate_limit_exceeded` and `server_error` are passing conditions, as the
/// 429 and 500 statuses they stand for, and retried as those; any other
/// fails the call.
fn failure(error: &Value) -> ProviderError {
    let code = error.get("code").and_then(Value::as_str).unwrap_or("");
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| error_text(error))
        .unwrap_or_else(|| truncate(&error.to_string()));
    let message = if code.is_empty() {
        message
    } else {
        format!("{code}: {message}")
    };
    let status = match code {
        "rate_limit_exceeded" => Some(429),
        "server_error" => Some(500),
        _ => None,
    };
    match status {
        Some(status) => ProviderError::Status {
            status,
            message,
            retry_after: None,
        },
        None => ProviderError::Stream(message),
    }
}

impl Assemble for Assembler {
    /// One server-sent event. Its kind is the data's `type` (the API sets
    /// it on every event), else the SSE event name.
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
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event)
            .to_string();
        self.push(&kind, &value, on_delta)
    }

    /// The assembled turn, once the stream has ended.
    fn finish(self) -> Result<ModelTurn, ProviderError> {
        if !self.ended {
            return Err(ProviderError::cut(
                CutKind::EndedEarly,
                "the stream ended without response.completed",
            ));
        }
        let mut tool_calls = Vec::new();
        let mut reasoning_items = Vec::new();
        for (index, item) in self.items {
            match item {
                Item::Reasoning(value) => reasoning_items.push(value),
                Item::Call(call) => {
                    if call.name.is_empty() {
                        return Err(ProviderError::Stream(format!(
                            "function call at output_index {index} has no name"
                        )));
                    }
                    let id = [call.call_id, call.item_id]
                        .into_iter()
                        .find(|id| !id.is_empty())
                        .unwrap_or_else(|| format!("call_{index}"));
                    let arguments = if call.arguments.trim().is_empty() {
                        "{}".to_string()
                    } else {
                        call.arguments
                    };
                    tool_calls.push(ToolCall {
                        id,
                        name: call.name,
                        arguments,
                    });
                }
            }
        }
        Ok(ModelTurn {
            text: self.text,
            reasoning: self.reasoning,
            tool_calls,
            usage: self.usage,
            finish_reason: self.finish_reason,
            response_id: self.identity.id,
            response_model: self.identity.model,
            provider_items: (!reasoning_items.is_empty())
                .then(|| json!({ ITEMS_KEY: reasoning_items })),
        })
    }

    /// A non-streamed response object (a server that ignored `stream`).
    fn parse_full(
        value: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ModelTurn, ProviderError> {
        if let Some(error) = value.get("error").filter(|e| !e.is_null()) {
            return Err(failure(error));
        }
        if value.get("output").and_then(Value::as_array).is_none() {
            return Err(ProviderError::Stream(format!(
                "response has no output: {}",
                truncate(&value.to_string())
            )));
        }
        let mut assembler = Assembler::default();
        assembler.push_response(value, on_delta)?;
        assembler.finish()
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
