//! Assembling a [`ModelTurn`] from chat-completion chunks: text and
//! reasoning forwarded as deltas, tool calls put together by `index` from
//! pieces, usage and finish reason kept. Pure: no I/O, so it is tested from
//! lists of chunk values.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::super::http::{Assemble, Flow, error_text, event_json, truncate};
use crate::llm::{AnswerIdentity, CutKind, Delta, ModelTurn, ProviderError};
use crate::types::{ToolCall, Usage};

/// A tool call being assembled from stream pieces.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles a [`ModelTurn`] from chat-completion chunks, forwarding text
/// and reasoning as deltas as they come.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    text: String,
    reasoning: String,
    /// Tool calls by their stream `index`, so they come out in index order.
    calls: BTreeMap<u64, PartialCall>,
    /// The index the last tool-call piece went to (for servers that omit
    /// `index`).
    last_index: Option<u64>,
    usage: Usage,
    finish_reason: Option<String>,
    identity: AnswerIdentity,
    done: bool,
}

impl Assembler {
    /// One parsed chunk object.
    fn push_chunk(
        &mut self,
        chunk: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(), ProviderError> {
        let Some(obj) = chunk.as_object() else {
            return Err(ProviderError::Stream(format!(
                "chunk is not an object: {}",
                truncate(&chunk.to_string())
            )));
        };
        self.identity.note(chunk, "id", "model");
        if let Some(err) = obj.get("error").filter(|e| !e.is_null()) {
            let message = match err {
                Value::String(s) => s.clone(),
                other => error_text(&json!({ "error": other }))
                    .unwrap_or_else(|| truncate(&other.to_string())),
            };
            return Err(ProviderError::Stream(message));
        }
        if let Some(usage) = obj.get("usage") {
            self.push_usage(usage);
        }
        let Some(choices) = obj.get("choices").and_then(Value::as_array) else {
            return Ok(());
        };
        for choice in choices {
            // Only the first choice is ours (`n` is never set).
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            // Some servers put the usage on the choice.
            if let Some(usage) = choice.get("usage") {
                self.push_usage(usage);
            }
            if let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) {
                self.push_delta(delta, on_delta)?;
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_string());
            }
        }
        Ok(())
    }

    fn push_usage(&mut self, usage: &Value) {
        if let Some(n) = usage.get("prompt_tokens").and_then(Value::as_u64) {
            self.usage.input_tokens = Some(n);
        }
        if let Some(n) = usage.get("completion_tokens").and_then(Value::as_u64) {
            self.usage.output_tokens = Some(n);
        }
        if let Some(n) = usage
            .pointer("/prompt_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
        {
            self.usage.cached_input_tokens = Some(n);
        }
    }

    fn push_delta(
        &mut self,
        delta: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(), ProviderError> {
        let reasoning = ["reasoning_content", "reasoning"]
            .iter()
            .filter_map(|k| delta.get(*k).and_then(Value::as_str))
            .find(|s| !s.is_empty());
        if let Some(r) = reasoning {
            self.reasoning.push_str(r);
            on_delta(Delta::Reasoning(r.to_string()));
        }
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.text.push_str(text);
            on_delta(Delta::Text(text.to_string()));
        }
        match delta.get("tool_calls") {
            None | Some(Value::Null) => {}
            Some(Value::Array(calls)) => {
                for call in calls {
                    self.push_tool_call(call)?;
                }
            }
            Some(other) => {
                return Err(ProviderError::Stream(format!(
                    "tool_calls is not a list: {}",
                    truncate(&other.to_string())
                )));
            }
        }
        Ok(())
    }

    /// One tool-call piece. The id, name and arguments may each come split
    /// over several chunks; some servers repeat the id and name in every
    /// chunk instead, or omit `index`.
    fn push_tool_call(&mut self, piece: &Value) -> Result<(), ProviderError> {
        if !piece.is_object() {
            return Err(ProviderError::Stream(format!(
                "tool call piece is not an object: {}",
                truncate(&piece.to_string())
            )));
        }
        let id = piece.get("id").and_then(Value::as_str).unwrap_or("");
        let index = match piece.get("index").and_then(Value::as_u64) {
            Some(i) => i,
            None => {
                // No index: a known id continues its own call, a new id
                // starts a new call, no id continues the last one.
                let known = (!id.is_empty())
                    .then(|| self.calls.iter().find(|(_, c)| c.id == id).map(|(k, _)| *k))
                    .flatten();
                match (known, self.last_index) {
                    (Some(own), _) => own,
                    (None, Some(last)) if id.is_empty() => last,
                    _ => self.calls.keys().next_back().map_or(0, |k| k + 1),
                }
            }
        };
        self.last_index = Some(index);
        let call = self.calls.entry(index).or_default();
        merge_piece(&mut call.id, id);
        let function = piece.get("function");
        if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
            merge_piece(&mut call.name, name);
        }
        match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(args)) => call.arguments.push_str(args),
            // Some servers send the arguments as an object.
            Some(v @ Value::Object(_)) => call.arguments.push_str(&v.to_string()),
            _ => {}
        }
        Ok(())
    }
}

/// Adds a piece of an id or name: appended when it continues the value,
/// ignored when a server repeats the whole value, taken whole when a server
/// sends the value so far.
fn merge_piece(current: &mut String, piece: &str) {
    if piece.is_empty() || current == piece {
        return;
    }
    if !current.is_empty() && piece.starts_with(current.as_str()) {
        *current = piece.to_string();
    } else {
        current.push_str(piece);
    }
}

impl Assemble for Assembler {
    /// One server-sent event: its type (`message` unless named) and data.
    fn push_event(
        &mut self,
        event: &str,
        data: &str,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Flow, ProviderError> {
        if data == "[DONE]" {
            self.done = true;
            return Ok(Flow::Done);
        }
        let chunk = event_json(event, data, "chunk")?;
        if event == "error" && chunk.get("error").is_none() {
            return Err(ProviderError::Stream(
                error_text(&chunk).unwrap_or_else(|| truncate(data)),
            ));
        }
        self.push_chunk(&chunk, on_delta)?;
        Ok(Flow::More)
    }

    /// The assembled turn, once the stream has ended.
    fn finish(self) -> Result<ModelTurn, ProviderError> {
        if !self.done && self.finish_reason.is_none() {
            return Err(ProviderError::cut(
                CutKind::EndedEarly,
                "the stream ended without [DONE] or a finish_reason",
            ));
        }
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (index, call) in self.calls {
            if call.name.is_empty() {
                return Err(ProviderError::Stream(format!(
                    "tool call at index {index} has no function name"
                )));
            }
            let id = if call.id.is_empty() {
                format!("call_{index}")
            } else {
                call.id
            };
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
        Ok(ModelTurn {
            text: self.text,
            reasoning: self.reasoning,
            tool_calls,
            usage: self.usage,
            finish_reason: self.finish_reason,
            response_id: self.identity.id,
            response_model: self.identity.model,
            provider_items: None,
        })
    }

    /// A non-streamed chat-completion answer (a server that ignored `stream`).
    fn parse_full(
        value: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ModelTurn, ProviderError> {
        let mut assembler = Assembler::default();
        assembler.push_chunk(value, on_delta)?;
        if value.get("choices").and_then(Value::as_array).is_none() {
            return Err(ProviderError::Stream(format!(
                "response has no choices: {}",
                truncate(&value.to_string())
            )));
        }
        assembler.done = true;
        assembler.finish()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;

    fn assemble(chunks: &[Value]) -> (Result<ModelTurn, ProviderError>, Vec<Delta>) {
        let mut deltas = Vec::new();
        let mut on_delta = |d: Delta| deltas.push(d);
        let mut asm = Assembler::default();
        let mut result = Ok(());
        for c in chunks {
            let data = c.as_str().map_or_else(|| c.to_string(), str::to_string);
            match asm.feed("message", &data, &mut on_delta) {
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

    fn delta(d: Value) -> Value {
        json!({ "choices": [{ "index": 0, "delta": d, "finish_reason": null }] })
    }

    fn finish(reason: &str) -> Value {
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": reason }] })
    }

    fn tc(index: u64, id: Option<&str>, name: Option<&str>, args: Option<&str>) -> Value {
        let mut f = Map::new();
        if let Some(n) = name {
            f.insert("name".into(), json!(n));
        }
        if let Some(a) = args {
            f.insert("arguments".into(), json!(a));
        }
        let mut call = json!({ "index": index, "function": f });
        if let Some(id) = id {
            call["id"] = json!(id);
        }
        delta(json!({ "tool_calls": [call] }))
    }

    #[test]
    fn text_reasoning_and_usage() {
        let (turn, deltas) = assemble(&[
            json!({ "id": "chatcmpl-1", "model": "gpt-x-2026-01-01",
                    "choices": [{ "index": 0, "delta": { "role": "assistant", "content": "" } }] }),
            delta(json!({ "reasoning_content": "hmm" })),
            delta(json!({ "reasoning": " ok" })),
            delta(json!({ "content": "Hel" })),
            delta(json!({ "content": "lo" })),
            finish("stop"),
            json!({ "choices": [], "usage": { "prompt_tokens": 7, "completion_tokens": 3 } }),
            json!("[DONE]"),
        ]);
        let turn = turn.unwrap();
        assert_eq!(turn.text, "Hello");
        assert_eq!(turn.reasoning, "hmm ok");
        assert_eq!(turn.finish_reason.as_deref(), Some("stop"));
        assert_eq!(turn.usage.input_tokens, Some(7));
        assert_eq!(turn.usage.output_tokens, Some(3));
        assert_eq!(turn.response_id.as_deref(), Some("chatcmpl-1"));
        assert_eq!(turn.response_model.as_deref(), Some("gpt-x-2026-01-01"));
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
    fn interleaved_split_tool_calls_come_out_in_index_order() {
        let (turn, _) = assemble(&[
            tc(1, Some("call_"), Some("wri"), None),
            tc(0, Some("call_a"), Some("read"), Some("")),
            tc(1, Some("b"), Some("te"), Some("{\"x\"")),
            tc(0, None, None, Some("{\"p\":")),
            tc(1, None, None, Some(":2}")),
            tc(0, None, None, Some("1}")),
            finish("tool_calls"),
        ]);
        let turn = turn.unwrap();
        let calls: Vec<(&str, &str, &str)> = turn
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            vec![
                ("call_a", "read", "{\"p\":1}"),
                ("call_b", "write", "{\"x\":2}")
            ]
        );
    }

    #[test]
    fn repeated_ids_missing_index_and_empty_arguments() {
        let no_index = |id: &str, name: &str, args: &str| {
            delta(
                json!({ "tool_calls": [{ "id": id, "function": { "name": name, "arguments": args } }] }),
            )
        };
        let (turn, _) = assemble(&[
            tc(0, Some("c1"), Some("a"), Some("{\"k\"")),
            tc(0, Some("c1"), Some("a"), Some(":1}")),
            no_index("c2", "b", ""),
            no_index("c3", "c", "{}"),
            finish("tool_calls"),
        ]);
        let turn = turn.unwrap();
        assert_eq!(turn.tool_calls.len(), 3);
        assert_eq!(turn.tool_calls[0].id, "c1");
        assert_eq!(turn.tool_calls[0].arguments, "{\"k\":1}");
        assert_eq!(turn.tool_calls[1].arguments, "{}");
        assert_eq!(turn.tool_calls[2].name, "c");
    }

    #[test]
    fn malformed_and_early_ends_are_stream_errors() {
        let cases: Vec<(Vec<Value>, &str)> = vec![
            (vec![delta(json!({ "content": "x" }))], "stream ended early"),
            (vec![json!("{not json")], "invalid chunk JSON"),
            (vec![json!([1, 2])], "not an object"),
            (
                vec![json!({ "error": { "message": "overloaded" } })],
                "overloaded",
            ),
            (vec![json!({ "error": "plain" })], "plain"),
            (vec![delta(json!({ "tool_calls": 5 }))], "not a list"),
            (
                vec![tc(0, Some("c"), None, Some("{}")), finish("tool_calls")],
                "no function name",
            ),
        ];
        for (chunks, want) in cases {
            let err = assemble(&chunks).0.expect_err(want);
            crate::llm::assert_stream_error(&err, want);
        }
        // A finish reason without [DONE] is a complete answer.
        let (turn, _) = assemble(&[delta(json!({ "content": "x" })), finish("length")]);
        assert_eq!(turn.unwrap().finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn full_json_response_is_accepted() {
        let mut deltas = Vec::new();
        let value = json!({
            "choices": [{ "index": 0, "finish_reason": "stop",
                "message": { "role": "assistant", "content": "whole" } }],
            "usage": { "prompt_tokens": 1, "completion_tokens": 2 },
        });
        let turn = Assembler::parse_full(&value, &mut |d| deltas.push(d)).unwrap();
        assert_eq!(turn.text, "whole");
        assert_eq!(deltas, vec![Delta::Text("whole".into())]);
    }
}
