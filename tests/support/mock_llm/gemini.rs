//! The gemini wire format of the mock: a scripted [`Reply`] as SSE frames
//! the way `streamGenerateContent?alt=sse` sends them, one
//! `GenerateContentResponse` per event and no end marker; the last event
//! carries `finishReason: STOP` and the usage (10 prompt / 5 candidate
//! tokens, like the OpenAI format).

use serde_json::{Value, json};

use super::{Reply, pieces};

/// The SSE frames of a streamed reply.
pub(super) fn frames(reply: &Reply, model: &str) -> Vec<String> {
    let event = |parts: Vec<Value>| {
        json!({
            "candidates": [{ "content": { "role": "model", "parts": parts }, "index": 0 }],
            "modelVersion": model,
        })
    };
    let texts = |text: &str, thought: bool| -> Vec<Value> {
        pieces(text, 3)
            .into_iter()
            .map(|piece| {
                let part = if thought {
                    json!({ "text": piece, "thought": true })
                } else {
                    json!({ "text": piece })
                };
                event(vec![part])
            })
            .collect()
    };
    // Gemini sends the arguments as an object and no call id (the provider
    // assigns ids). Scripted arguments that are not JSON are sent as a
    // string, so a malformed call stays malformed.
    let call_part = |name: &str, args: &str| {
        let args = serde_json::from_str::<Value>(args).unwrap_or_else(|_| json!(args));
        json!({ "functionCall": { "name": name, "args": args } })
    };
    let mut events: Vec<Value> = match reply {
        Reply::Text(text) => texts(text, false),
        Reply::Reasoning(reasoning, text) => {
            let mut events = texts(reasoning, true);
            events.extend(texts(text, false));
            events
        }
        Reply::ToolCalls(calls) => calls
            .iter()
            .map(|(_, name, args)| event(vec![call_part(name, args)]))
            .collect(),
        Reply::ToolCallsInterleaved(calls) => vec![event(
            calls
                .iter()
                .map(|(_, name, args)| call_part(name, args))
                .collect(),
        )],
        Reply::Chunks(chunks) => {
            return chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
        }
        Reply::Raw { .. } | Reply::Drop | Reply::Hang | Reply::Delay(..) => {
            unreachable!("not a stream")
        }
    };
    if events.is_empty() {
        events.push(event(vec![]));
    }
    if let Some(last) = events.last_mut() {
        last["candidates"][0]["finishReason"] = json!("STOP");
        last["usageMetadata"] = json!({
            "promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15,
        });
    }
    events.iter().map(|e| format!("data: {e}\n\n")).collect()
}
