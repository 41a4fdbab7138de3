//! Assembling a [`ModelTurn`] from Gemini `GenerateContentResponse`s: text
//! and thought parts forwarded as deltas, whole function calls collected in
//! order, the latest usage and the finish reason kept, blocked prompts and
//! in-stream errors turned into [`ProviderError`]s. Pure: no I/O, so it is
//! tested from lists of response values.

use std::time::Duration;

use serde_json::{Value, json};

use super::super::http::{Assemble, Flow, error_text, invalid_chunk, truncate};
use crate::llm::{AnswerIdentity, CutKind, Delta, ModelTurn, ProviderError};
use crate::types::{ToolCall, Usage};

/// Assembles a [`ModelTurn`] from streamed responses, forwarding text and
/// thoughts as deltas as they come.
#[derive(Debug, Default)]
pub(crate) struct Assembler {
    text: String,
    reasoning: String,
    tool_calls: Vec<ToolCall>,
    usage: Usage,
    finish_reason: Option<String>,
    /// Whether any response carried a candidate.
    saw_candidate: bool,
    identity: AnswerIdentity,
}

impl Assembler {
    /// The data of one server-sent event (trimmed, not blank): one
    /// response object.
    fn push_data(
        &mut self,
        data: &str,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(), ProviderError> {
        // Gemini sends no `[DONE]`; a proxy in between might.
        if data == "[DONE]" {
            return Ok(());
        }
        let response: Value =
            serde_json::from_str(data).map_err(|e| invalid_chunk("event", &e, data))?;
        self.push_response(&response, on_delta)
    }

    /// One parsed `GenerateContentResponse` (or `{"error": ..}`).
    pub(super) fn push_response(
        &mut self,
        response: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(), ProviderError> {
        self.identity.note(response, "responseId", "modelVersion");
        let Some(obj) = response.as_object() else {
            return Err(ProviderError::Stream(format!(
                "response is not an object: {}",
                truncate(&response.to_string())
            )));
        };
        if let Some(err) = obj.get("error").filter(|e| !e.is_null()) {
            return Err(error_object(err));
        }
        if let Some(usage) = obj.get("usageMetadata") {
            self.push_usage(usage);
        }
        let candidate = match obj.get("candidates") {
            None | Some(Value::Null) => None,
            Some(Value::Array(all)) => all
                .iter()
                // Only the first candidate is ours (`candidateCount` is
                // never set).
                .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0),
            Some(other) => {
                return Err(ProviderError::Stream(format!(
                    "candidates is not a list: {}",
                    truncate(&other.to_string())
                )));
            }
        };
        match candidate {
            Some(candidate) => self.push_candidate(candidate, on_delta),
            None => match response
                .pointer("/promptFeedback/blockReason")
                .and_then(Value::as_str)
            {
                // A refusal of this prompt: sending it again will not help.
                Some(reason) => Err(ProviderError::Status {
                    status: 400,
                    message: format!("prompt blocked: {reason}"),
                    retry_after: None,
                }),
                None => Ok(()),
            },
        }
    }

    fn push_candidate(
        &mut self,
        candidate: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(), ProviderError> {
        self.saw_candidate = true;
        match candidate.pointer("/content/parts") {
            None | Some(Value::Null) => {}
            Some(Value::Array(parts)) => {
                for part in parts {
                    self.push_part(part, on_delta)?;
                }
            }
            Some(other) => {
                return Err(ProviderError::Stream(format!(
                    "content.parts is not a list: {}",
                    truncate(&other.to_string())
                )));
            }
        }
        if let Some(reason) = candidate.get("finishReason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_string());
        }
        Ok(())
    }

    /// One content part: text, a thought, or a whole function call. Other
    /// kinds (inline data, executable code, a lone thought signature) carry
    /// nothing for us.
    fn push_part(
        &mut self,
        part: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(), ProviderError> {
        if !part.is_object() {
            return Err(ProviderError::Stream(format!(
                "content part is not an object: {}",
                truncate(&part.to_string())
            )));
        }
        if let Some(text) = part.get("text").and_then(Value::as_str)
            && !text.is_empty()
        {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                self.reasoning.push_str(text);
                on_delta(Delta::Reasoning(text.to_string()));
            } else {
                self.text.push_str(text);
                on_delta(Delta::Text(text.to_string()));
            }
        }
        if let Some(call) = part.get("functionCall").filter(|c| !c.is_null()) {
            self.push_call(call, part)?;
        }
        Ok(())
    }

    /// A function call; Gemini sends each one whole.
    fn push_call(&mut self, call: &Value, part: &Value) -> Result<(), ProviderError> {
        let Some(name) = call
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        else {
            return Err(ProviderError::Stream(format!(
                "function call has no name: {}",
                truncate(&call.to_string())
            )));
        };
        let index = self.tool_calls.len();
        let id = [call.get("id"), part.get("id")]
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find(|id| !id.is_empty())
            .map_or_else(|| format!("call_{index}"), str::to_string);
        let arguments = match call.get("args") {
            None | Some(Value::Null) => "{}".to_string(),
            Some(args) => args.to_string(),
        };
        self.tool_calls.push(ToolCall {
            id,
            name: name.to_string(),
            arguments,
        });
        Ok(())
    }

    fn push_usage(&mut self, usage: &Value) {
        let count = |key: &str| usage.get(key).and_then(Value::as_u64);
        if let Some(n) = count("promptTokenCount") {
            self.usage.input_tokens = Some(n);
        }
        // Thinking tokens are billed as output.
        let output = match (count("candidatesTokenCount"), count("thoughtsTokenCount")) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        if output.is_some() {
            self.usage.output_tokens = output;
        }
        if let Some(n) = count("cachedContentTokenCount") {
            self.usage.cached_input_tokens = Some(n);
        }
    }
}

/// Gemini's error object `{"code": 503, "message": .., "status":
/// "UNAVAILABLE", "details": [..]}`: a [`ProviderError::Status`] with its
/// code (so 5xx and 429 are retried), or a stream error without one.
pub(super) fn error_object(err: &Value) -> ProviderError {
    let message = match err {
        Value::String(s) => s.clone(),
        other => {
            error_text(&json!({ "error": other })).unwrap_or_else(|| truncate(&other.to_string()))
        }
    };
    let code = err
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..=599).contains(c));
    match code {
        Some(status) => ProviderError::Status {
            status,
            message,
            retry_after: retry_delay(err),
        },
        None => ProviderError::Stream(message),
    }
}

/// The wait asked for in an error's `google.rpc.RetryInfo` detail
/// (`"retryDelay": "37s"`), which Gemini sends on 429s instead of a
/// `Retry-After` header.
pub(super) fn retry_delay(err: &Value) -> Option<Duration> {
    err.get("details")?
        .as_array()?
        .iter()
        .filter(|d| {
            d.get("@type")
                .and_then(Value::as_str)
                .is_some_and(|t| t.ends_with("google.rpc.RetryInfo"))
        })
        .filter_map(|d| d.get("retryDelay").and_then(Value::as_str))
        .find_map(|delay| {
            let secs: f64 = delay.trim().strip_suffix('s')?.parse().ok()?;
            (secs.is_finite() && (0.0..1e9).contains(&secs)).then(|| Duration::from_secs_f64(secs))
        })
}

impl Assemble for Assembler {
    fn push_event(
        &mut self,
        _name: &str,
        data: &str,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<Flow, ProviderError> {
        // Gemini's events are unnamed and have no end marker: the answer is
        // complete when the body ends.
        self.push_data(data, on_delta).map(|()| Flow::More)
    }

    /// The assembled turn, once the stream has ended.
    fn finish(self) -> Result<ModelTurn, ProviderError> {
        if !self.saw_candidate {
            return Err(ProviderError::cut(
                CutKind::EndedEarly,
                "the answer ended without any candidate",
            ));
        }
        // The last response always names a finish reason: without one the
        // answer was cut short.
        if self.finish_reason.is_none() {
            return Err(ProviderError::cut(
                CutKind::EndedEarly,
                "the stream ended without a finishReason",
            ));
        }
        Ok(ModelTurn {
            text: self.text,
            reasoning: self.reasoning,
            tool_calls: self.tool_calls,
            usage: self.usage,
            finish_reason: self.finish_reason,
            response_id: self.identity.id,
            response_model: self.identity.model,
            provider_items: None,
        })
    }

    /// A non-streamed answer: one response object, or a list of them (the
    /// JSON-array form of `streamGenerateContent`).
    fn parse_full(
        value: &Value,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ModelTurn, ProviderError> {
        let mut assembler = Assembler::default();
        match value {
            Value::Array(responses) => {
                for response in responses {
                    assembler.push_response(response, on_delta)?;
                }
            }
            response => assembler.push_response(response, on_delta)?,
        }
        assembler.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assemble(events: &[Value]) -> (Result<ModelTurn, ProviderError>, Vec<Delta>) {
        let mut deltas = Vec::new();
        let mut on_delta = |d: Delta| deltas.push(d);
        let mut asm = Assembler::default();
        let mut result = Ok(());
        for e in events {
            let data = e.as_str().map_or_else(|| e.to_string(), str::to_string);
            if let Err(err) = asm.feed("message", &data, &mut on_delta) {
                result = Err(err);
                break;
            }
        }
        (result.and_then(|()| asm.finish()), deltas)
    }

    fn parts(parts: Value) -> Value {
        json!({ "candidates": [{ "content": { "role": "model", "parts": parts }, "index": 0 }],
                "modelVersion": "gemini-x", "responseId": "r-1" })
    }

    fn last(parts: Value, usage: Value) -> Value {
        json!({ "candidates": [{ "content": { "role": "model", "parts": parts },
                                 "finishReason": "STOP", "index": 0 }],
                "usageMetadata": usage })
    }

    #[test]
    fn text_thoughts_and_usage() {
        let (turn, deltas) = assemble(&[
            parts(json!([{ "text": "hmm", "thought": true }])),
            parts(json!([{ "text": " ok", "thought": true }, { "text": "Hel" }])),
            json!({ "candidates": [{ "content": { "parts": [{ "text": "lo" }] } }],
                    "usageMetadata": { "promptTokenCount": 3 } }),
            last(
                json!([{ "text": "" }, { "thoughtSignature": "c2ln" }]),
                json!({ "promptTokenCount": 12, "candidatesTokenCount": 4,
                        "thoughtsTokenCount": 6, "cachedContentTokenCount": 8,
                        "totalTokenCount": 22 }),
            ),
        ]);
        let turn = turn.unwrap();
        assert_eq!(turn.text, "Hello");
        assert_eq!(turn.reasoning, "hmm ok");
        assert!(turn.tool_calls.is_empty());
        assert_eq!(turn.finish_reason.as_deref(), Some("STOP"));
        assert_eq!(turn.response_id.as_deref(), Some("r-1"));
        assert_eq!(turn.response_model.as_deref(), Some("gemini-x"));
        assert_eq!(
            turn.usage,
            Usage {
                input_tokens: Some(12),
                output_tokens: Some(10),
                cached_input_tokens: Some(8),
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
    fn function_calls_whole_in_order_with_ids() {
        let (turn, deltas) = assemble(&[
            parts(json!([{ "text": "Let me look." },
                         { "functionCall": { "name": "read", "args": { "p": 1 } } }])),
            parts(
                json!([{ "functionCall": { "name": "list" }, "thoughtSignature": "c2ln" },
                         { "functionCall": { "id": "fc-9", "name": "write",
                                             "args": { "x": [true] } } }]),
            ),
            last(
                json!([]),
                json!({ "promptTokenCount": 5, "candidatesTokenCount": 2 }),
            ),
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
                ("call_0", "read", "{\"p\":1}"),
                ("call_1", "list", "{}"),
                ("fc-9", "write", "{\"x\":[true]}"),
            ]
        );
        assert_eq!(turn.text, "Let me look.");
        assert_eq!(deltas, vec![Delta::Text("Let me look.".into())]);
        assert_eq!(turn.usage.cached_input_tokens, None);
        assert_eq!(turn.usage.output_tokens, Some(2));
    }

    #[test]
    fn blocked_prompts_and_in_stream_errors() {
        let (blocked, _) = assemble(&[json!({
            "promptFeedback": { "blockReason": "SAFETY", "safetyRatings": [] },
            "usageMetadata": { "promptTokenCount": 7 },
        })]);
        assert_eq!(
            blocked.unwrap_err(),
            ProviderError::Status {
                status: 400,
                message: "prompt blocked: SAFETY".into(),
                retry_after: None
            }
        );

        let (overloaded, _) = assemble(&[
            parts(json!([{ "text": "par" }])),
            json!({ "error": { "code": 503, "message": "The model is overloaded.",
                               "status": "UNAVAILABLE" } }),
        ]);
        let err = overloaded.unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(err.to_string(), "HTTP 503: The model is overloaded.");

        let (quota, _) = assemble(&[json!({ "error": {
            "code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED",
            "details": [{ "@type": "type.googleapis.com/google.rpc.RetryInfo",
                          "retryDelay": "37s" }] } })]);
        let err = quota.unwrap_err();
        assert!(err.is_retryable());
        assert_eq!(err.retry_after(), Some(Duration::from_secs(37)));

        let (bad_request, _) =
            assemble(&[json!({ "error": { "code": 400, "message": "bad arg" } })]);
        assert!(!bad_request.unwrap_err().is_retryable());
    }

    #[test]
    fn malformed_and_early_ends_are_stream_errors() {
        let cases: Vec<(Vec<Value>, &str)> = vec![
            (vec![], "without any candidate"),
            (
                vec![json!({ "usageMetadata": { "promptTokenCount": 1 } })],
                "without any candidate",
            ),
            (vec![parts(json!([{ "text": "x" }]))], "ended early"),
            (vec![json!("{not json")], "invalid event JSON"),
            (vec![json!([1, 2])], "not an object"),
            (vec![json!({ "candidates": 5 })], "candidates is not a list"),
            (vec![parts(json!({ "text": "x" }))], "parts is not a list"),
            (vec![parts(json!(["x"]))], "part is not an object"),
            (
                vec![parts(json!([{ "functionCall": { "args": {} } }]))],
                "function call has no name",
            ),
            (vec![json!({ "error": { "message": "odd" } })], "odd"),
            (vec![json!({ "error": "plain" })], "plain"),
        ];
        for (events, want) in cases {
            let err = assemble(&events).0.expect_err(want);
            crate::llm::assert_stream_error(&err, want);
        }
        // `[DONE]` and empty data from a proxy are ignored; a safety stop
        // without content is a complete (empty) answer.
        let (turn, _) = assemble(&[
            json!(""),
            json!({ "candidates": [{ "finishReason": "SAFETY", "index": 0 }] }),
            json!("[DONE]"),
        ]);
        assert_eq!(turn.unwrap().finish_reason.as_deref(), Some("SAFETY"));
    }

    #[test]
    fn full_json_responses_are_accepted() {
        let mut deltas = Vec::new();
        let one = last(
            json!([{ "text": "whole" }]),
            json!({ "promptTokenCount": 1 }),
        );
        let turn = Assembler::parse_full(&one, &mut |d| deltas.push(d)).unwrap();
        assert_eq!(turn.text, "whole");
        assert_eq!(deltas, vec![Delta::Text("whole".into())]);

        let list = json!([
            parts(json!([{ "text": "a" }])),
            last(json!([{ "text": "b" }]), json!({}))
        ]);
        let turn = Assembler::parse_full(&list, &mut |_| {}).unwrap();
        assert_eq!(turn.text, "ab");
        let err = Assembler::parse_full(
            &json!([{ "error": { "code": 500, "message": "boom" } }]),
            &mut |_| {},
        );
        assert!(err.unwrap_err().is_retryable());
    }
}
