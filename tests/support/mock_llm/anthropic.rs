//! The anthropic wire format of the mock: a scripted [`Reply`] as SSE frames
//! of the Messages API (`message_start`, `ping`, per content block
//! `content_block_start` / `content_block_delta`s / `content_block_stop`,
//! `message_delta` with the stop reason, `message_stop`). Usage is 10 input
//! tokens (`message_start`) and 5 output tokens (`message_delta`), the same
//! totals as the OpenAI format.

use serde_json::{Value, json};

use super::{Reply, pieces};

/// The SSE frames of a streamed reply, each `event: NAME\ndata: JSON\n\n`.
pub(super) fn frames(reply: &Reply, model: &str) -> Vec<String> {
    let mut events = vec![
        json!({ "type": "message_start", "message": {
            "id": "msg_mock", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": { "input_tokens": 10, "output_tokens": 1 },
        } }),
        json!({ "type": "ping" }),
    ];
    let stop_reason = match reply {
        Reply::Text(text) => {
            text_block(&mut events, 0, text);
            "end_turn"
        }
        Reply::Reasoning(reasoning, text) => {
            thinking_block(&mut events, 0, reasoning);
            text_block(&mut events, 1, text);
            "end_turn"
        }
        // Anthropic streams one block after another: interleaving is an
        // OpenAI-format variation only.
        Reply::ToolCalls(calls) | Reply::ToolCallsInterleaved(calls) => {
            for (index, (id, name, arguments)) in calls.iter().enumerate() {
                tool_use_block(&mut events, index, id, name, arguments);
            }
            "tool_use"
        }
        Reply::Chunks(values) => return values.iter().map(frame).collect(),
        Reply::Raw { .. } | Reply::Drop | Reply::Hang | Reply::Delay(..) => {
            unreachable!("not a stream")
        }
    };
    events.push(json!({
        "type": "message_delta",
        "delta": { "stop_reason": stop_reason, "stop_sequence": null },
        "usage": { "output_tokens": 5 },
    }));
    events.push(json!({ "type": "message_stop" }));
    events.iter().map(frame).collect()
}

/// One SSE frame, named by the event's `type`.
fn frame(event: &Value) -> String {
    let name = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    format!("event: {name}\ndata: {event}\n\n")
}

fn block_start(events: &mut Vec<Value>, index: usize, block: Value) {
    events.push(json!({ "type": "content_block_start", "index": index, "content_block": block }));
}

fn block_delta(events: &mut Vec<Value>, index: usize, delta: Value) {
    events.push(json!({ "type": "content_block_delta", "index": index, "delta": delta }));
}

fn block_stop(events: &mut Vec<Value>, index: usize) {
    events.push(json!({ "type": "content_block_stop", "index": index }));
}

/// A text block in `text_delta`s of ~3 characters.
fn text_block(events: &mut Vec<Value>, index: usize, text: &str) {
    block_start(events, index, json!({ "type": "text", "text": "" }));
    for piece in pieces(text, 3) {
        block_delta(
            events,
            index,
            json!({ "type": "text_delta", "text": piece }),
        );
    }
    block_stop(events, index);
}

/// A thinking block in `thinking_delta`s of ~3 characters, then its
/// signature.
fn thinking_block(events: &mut Vec<Value>, index: usize, thinking: &str) {
    block_start(events, index, json!({ "type": "thinking", "thinking": "" }));
    for piece in pieces(thinking, 3) {
        block_delta(
            events,
            index,
            json!({ "type": "thinking_delta", "thinking": piece }),
        );
    }
    block_delta(
        events,
        index,
        json!({ "type": "signature_delta", "signature": "mock-signature" }),
    );
    block_stop(events, index);
}

/// A tool_use block, its input in `input_json_delta` pieces of ~4
/// characters.
fn tool_use_block(events: &mut Vec<Value>, index: usize, id: &str, name: &str, arguments: &str) {
    block_start(
        events,
        index,
        json!({ "type": "tool_use", "id": id, "name": name, "input": {} }),
    );
    for piece in pieces(arguments, 4) {
        block_delta(
            events,
            index,
            json!({ "type": "input_json_delta", "partial_json": piece }),
        );
    }
    block_stop(events, index);
}
