//! The OpenAI Responses wire format of the mock: a scripted [`Reply`] as
//! the API's semantic SSE events (`response.created`, per output item
//! `response.output_item.added` / its deltas / `response.output_item.done`,
//! `response.completed` with the final output and usage). Usage is 10 input
//! and 5 output tokens, the totals of the other formats. A reasoning reply
//! has a reasoning item with `encrypted_content` `enc-mock`, which a
//! stateless client must send back. No `[DONE]`: the API has none.

use serde_json::{Value, json};

use super::{Reply, pieces};

/// The SSE frames of a streamed reply, each `event: TYPE\ndata: JSON\n\n`.
pub(super) fn frames(reply: &Reply, model: &str) -> Vec<String> {
    let response = |status: &str, output: Value| {
        json!({ "id": "resp_mock", "object": "response", "model": model,
                "status": status, "output": output })
    };
    let mut events = vec![
        json!({ "type": "response.created", "response": response("in_progress", json!([])) }),
        json!({ "type": "response.in_progress", "response": response("in_progress", json!([])) }),
    ];
    let mut output = Vec::new();
    match reply {
        Reply::Text(text) => message(&mut events, &mut output, text),
        Reply::Reasoning(reasoning, text) => {
            reasoning_item(&mut events, &mut output, reasoning);
            message(&mut events, &mut output, text);
        }
        Reply::ToolCalls(calls) => {
            for (id, name, arguments) in calls {
                let index = output.len();
                let item = call_item(index, id, name, "");
                added(&mut events, index, &item);
                for piece in pieces(arguments, 4) {
                    events.push(args_delta(index, &piece));
                }
                call_done(&mut events, &mut output, index, id, name, arguments);
            }
        }
        Reply::ToolCallsInterleaved(calls) => {
            for (index, (id, name, _)) in calls.iter().enumerate() {
                added(&mut events, index, &call_item(index, id, name, ""));
            }
            let split: Vec<Vec<String>> = calls.iter().map(|(_, _, a)| pieces(a, 3)).collect();
            let rounds = split.iter().map(Vec::len).max().unwrap_or(0);
            for round in 0..rounds {
                // Last call first, so the pieces arrive out of order.
                for (index, call_pieces) in split.iter().enumerate().rev() {
                    if let Some(piece) = call_pieces.get(round) {
                        events.push(args_delta(index, piece));
                    }
                }
            }
            for (index, (id, name, arguments)) in calls.iter().enumerate() {
                call_done(&mut events, &mut output, index, id, name, arguments);
            }
        }
        Reply::Chunks(values) => return values.iter().map(frame).collect(),
        Reply::Raw { .. } | Reply::Drop | Reply::Hang | Reply::Delay(..) => {
            unreachable!("not a stream")
        }
    }
    let mut done = response("completed", Value::Array(output));
    done["usage"] = json!({ "input_tokens": 10, "input_tokens_details": { "cached_tokens": 0 },
        "output_tokens": 5, "total_tokens": 15 });
    events.push(json!({ "type": "response.completed", "response": done }));
    events.iter().map(frame).collect()
}

/// One SSE frame, named by the event's `type`.
pub fn frame(event: &Value) -> String {
    let name = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    format!("event: {name}\ndata: {event}\n\n")
}

fn added(events: &mut Vec<Value>, index: usize, item: &Value) {
    events
        .push(json!({ "type": "response.output_item.added", "output_index": index, "item": item }));
}

fn done(events: &mut Vec<Value>, output: &mut Vec<Value>, index: usize, item: Value) {
    events
        .push(json!({ "type": "response.output_item.done", "output_index": index, "item": item }));
    output.push(item);
}

/// An assistant message streamed in `output_text` deltas of ~3 characters.
fn message(events: &mut Vec<Value>, output: &mut Vec<Value>, text: &str) {
    let index = output.len();
    let id = format!("msg_{index}");
    let item = |content: Value| {
        json!({ "type": "message", "id": id, "role": "assistant", "status": "completed",
                "content": content })
    };
    added(events, index, &item(json!([])));
    events.push(
        json!({ "type": "response.content_part.added", "item_id": id,
        "output_index": index, "content_index": 0,
        "part": { "type": "output_text", "text": "", "annotations": [] } }),
    );
    for piece in pieces(text, 3) {
        events.push(json!({ "type": "response.output_text.delta", "item_id": id,
            "output_index": index, "content_index": 0, "delta": piece }));
    }
    events.push(json!({ "type": "response.output_text.done", "item_id": id,
        "output_index": index, "content_index": 0, "text": text }));
    let whole = item(json!([{ "type": "output_text", "text": text, "annotations": [] }]));
    done(events, output, index, whole);
}

/// A reasoning item whose summary is streamed in deltas of ~3 characters.
fn reasoning_item(events: &mut Vec<Value>, output: &mut Vec<Value>, summary: &str) {
    let index = output.len();
    let id = format!("rs_{index}");
    added(
        events,
        index,
        &json!({ "type": "reasoning", "id": id, "summary": [] }),
    );
    events.push(
        json!({ "type": "response.reasoning_summary_part.added", "item_id": id,
        "output_index": index, "summary_index": 0,
        "part": { "type": "summary_text", "text": "" } }),
    );
    for piece in pieces(summary, 3) {
        events.push(
            json!({ "type": "response.reasoning_summary_text.delta", "item_id": id,
            "output_index": index, "summary_index": 0, "delta": piece }),
        );
    }
    let whole = json!({ "type": "reasoning", "id": id,
        "summary": [{ "type": "summary_text", "text": summary }],
        "encrypted_content": "enc-mock" });
    done(events, output, index, whole);
}

fn call_item(index: usize, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({ "type": "function_call", "id": format!("fc_{index}"), "call_id": call_id,
            "name": name, "arguments": arguments, "status": "in_progress" })
}

fn args_delta(index: usize, piece: &str) -> Value {
    json!({ "type": "response.function_call_arguments.delta", "item_id": format!("fc_{index}"),
            "output_index": index, "delta": piece })
}

fn call_done(
    events: &mut Vec<Value>,
    output: &mut Vec<Value>,
    index: usize,
    call_id: &str,
    name: &str,
    arguments: &str,
) {
    events.push(json!({ "type": "response.function_call_arguments.done",
        "item_id": format!("fc_{index}"), "output_index": index, "arguments": arguments }));
    let mut item = call_item(index, call_id, name, arguments);
    item["status"] = json!("completed");
    done(events, output, index, item);
}
