//! Tests of the Responses event assembler, fed lists of event values.

use super::*;

fn assemble(events: &[Value]) -> (Result<ModelTurn, ProviderError>, Vec<Delta>) {
    let mut deltas = Vec::new();
    let mut on_delta = |d: Delta| deltas.push(d);
    let mut asm = Assembler::default();
    let mut result = Ok(());
    for e in events {
        let data = e.as_str().map_or_else(|| e.to_string(), str::to_string);
        let name = e.get("type").and_then(Value::as_str).unwrap_or("message");
        match asm.feed(name, &data, &mut on_delta) {
            Ok(Flow::Done) => break,
            Ok(Flow::More) => {}
            Err(err) => {
                result = Err(err);
                break;
            }
        }
    }
    (result.and_then(|()| asm.finish()), deltas)
}

fn created() -> Value {
    json!({ "type": "response.created", "sequence_number": 0,
        "response": { "id": "resp_1", "model": "gpt-x-2026-01-01", "status": "in_progress", "output": [] } })
}

fn completed(output: Value, usage: Value) -> Value {
    json!({ "type": "response.completed", "response": {
        "id": "resp_1", "model": "gpt-x-2026-01-01", "status": "completed",
        "output": output, "usage": usage } })
}

fn text_delta(index: u64, delta: &str) -> Value {
    json!({ "type": "response.output_text.delta", "item_id": "msg_1",
        "output_index": index, "content_index": 0, "delta": delta })
}

fn reasoning_item(id: &str, summary: &str) -> Value {
    json!({ "type": "reasoning", "id": id,
        "summary": [{ "type": "summary_text", "text": summary }],
        "encrypted_content": format!("enc-{id}") })
}

#[test]
fn text_reasoning_usage_and_the_carried_reasoning_item() {
    let (turn, deltas) = assemble(&[
        created(),
        json!({ "type": "response.in_progress", "response": { "id": "resp_1" } }),
        json!({ "type": "response.output_item.added", "output_index": 0,
            "item": { "type": "reasoning", "id": "rs_1", "summary": [] } }),
        json!({ "type": "response.reasoning_summary_part.added", "item_id": "rs_1",
            "output_index": 0, "summary_index": 0 }),
        json!({ "type": "response.reasoning_summary_text.delta", "item_id": "rs_1",
            "output_index": 0, "summary_index": 0, "delta": "Think" }),
        json!({ "type": "response.reasoning_summary_part.added", "item_id": "rs_1",
            "output_index": 0, "summary_index": 1 }),
        json!({ "type": "response.reasoning_summary_text.delta", "item_id": "rs_1",
            "output_index": 0, "summary_index": 1, "delta": "More" }),
        json!({ "type": "response.output_item.done", "output_index": 0,
            "item": reasoning_item("rs_1", "Think") }),
        json!({ "type": "response.output_item.added", "output_index": 1,
            "item": { "type": "message", "id": "msg_1", "role": "assistant", "content": [] } }),
        text_delta(1, "Hel"),
        text_delta(1, "lo"),
        json!({ "type": "response.output_text.done", "output_index": 1, "text": "Hello" }),
        json!({ "type": "response.some_future_event", "output_index": 1 }),
        completed(
            json!([reasoning_item("rs_1", "Think"),
                { "type": "message", "role": "assistant",
                  "content": [{ "type": "output_text", "text": "Hello" }] }]),
            json!({ "input_tokens": 70, "input_tokens_details": { "cached_tokens": 64 },
                    "output_tokens": 9, "total_tokens": 79 }),
        ),
    ]);
    let turn = turn.unwrap();
    assert_eq!(turn.text, "Hello");
    assert_eq!(turn.reasoning, "Think\n\nMore");
    assert_eq!(turn.finish_reason.as_deref(), Some("stop"));
    assert_eq!(turn.usage.input_tokens, Some(70));
    assert_eq!(turn.usage.cached_input_tokens, Some(64));
    assert_eq!(turn.usage.output_tokens, Some(9));
    assert_eq!(turn.response_id.as_deref(), Some("resp_1"));
    assert_eq!(turn.response_model.as_deref(), Some("gpt-x-2026-01-01"));
    assert_eq!(
        turn.provider_items,
        Some(json!({ ITEMS_KEY: [reasoning_item("rs_1", "Think")] }))
    );
    assert_eq!(
        deltas,
        vec![
            Delta::Reasoning("Think".into()),
            Delta::Reasoning("\n\n".into()),
            Delta::Reasoning("More".into()),
            Delta::Text("Hel".into()),
            Delta::Text("lo".into()),
        ]
    );
}

fn call_added(index: u64, item_id: &str, call_id: &str, name: &str) -> Value {
    json!({ "type": "response.output_item.added", "output_index": index,
        "item": { "type": "function_call", "id": item_id, "call_id": call_id,
                  "name": name, "arguments": "", "status": "in_progress" } })
}

fn args_delta(index: u64, item_id: &str, delta: &str) -> Value {
    json!({ "type": "response.function_call_arguments.delta", "item_id": item_id,
        "output_index": index, "delta": delta })
}

#[test]
fn interleaved_split_calls_come_out_in_output_order() {
    let (turn, _) = assemble(&[
        created(),
        call_added(0, "fc_a", "call_a", "read"),
        call_added(1, "fc_b", "call_b", "write"),
        args_delta(1, "fc_b", "{\"x\""),
        args_delta(0, "fc_a", "{\"p\":"),
        args_delta(1, "fc_b", ":2}"),
        args_delta(0, "fc_a", "1}"),
        json!({ "type": "response.function_call_arguments.done", "item_id": "fc_a",
            "output_index": 0, "arguments": "{\"p\":1}" }),
        completed(json!([]), json!({ "input_tokens": 5, "output_tokens": 3 })),
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
    assert_eq!(turn.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(turn.provider_items, None, "no reasoning, nothing to carry");
}

#[test]
fn the_done_item_is_the_whole_call_and_calls_only_in_the_final_output_count() {
    let (turn, _) = assemble(&[
        call_added(0, "fc_a", "", ""),
        args_delta(0, "fc_a", "{\"p\""),
        json!({ "type": "response.output_item.done", "output_index": 0,
            "item": { "type": "function_call", "id": "fc_a", "call_id": "call_a",
                      "name": "read", "arguments": "{\"p\":1}" } }),
        completed(
            json!([{ "type": "function_call", "id": "fc_a", "call_id": "call_a",
                     "name": "read", "arguments": "{\"p\":1}" },
                   { "type": "function_call", "id": "fc_b", "call_id": "call_b",
                     "name": "list", "arguments": "" }]),
            json!({}),
        ),
    ]);
    let calls = turn.unwrap().tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].arguments, "{\"p\":1}");
    assert_eq!(
        (calls[1].id.as_str(), calls[1].arguments.as_str()),
        ("call_b", "{}")
    );
}

#[test]
fn incomplete_answers_say_why_in_the_names_early_stop_knows() {
    for (reason, want) in [
        ("max_output_tokens", crate::llm::EarlyStop::OutputLimit),
        ("content_filter", crate::llm::EarlyStop::Filtered),
    ] {
        let (turn, _) = assemble(&[
            text_delta(0, "partial"),
            json!({ "type": "response.incomplete", "response": {
                "id": "resp_2", "status": "incomplete",
                "incomplete_details": { "reason": reason }, "output": [],
                "usage": { "input_tokens": 3, "output_tokens": 16 } } }),
        ]);
        let turn = turn.unwrap();
        assert_eq!(turn.text, "partial");
        assert_eq!(turn.early_stop(), Some(want), "{reason}");
        assert_eq!(turn.usage.output_tokens, Some(16));
    }
}

#[test]
fn failures_errors_and_early_ends() {
    let failed = |code: &str| {
        json!({ "type": "response.failed", "response": { "id": "r", "status": "failed",
            "error": { "code": code, "message": "it broke" } } })
    };
    let cases: Vec<(Vec<Value>, &str)> = vec![
        (vec![created(), text_delta(0, "x")], "stream ended early"),
        (vec![json!("{not json")], "invalid event JSON"),
        (vec![json!([1])], "not an object"),
        (vec![failed("invalid_prompt")], "invalid_prompt: it broke"),
        (
            vec![json!({ "type": "error", "code": "bad", "message": "nope", "param": null })],
            "bad: nope",
        ),
        (
            vec![
                call_added(0, "fc", "call", ""),
                completed(json!([]), json!({})),
            ],
            "has no name",
        ),
        (
            vec![json!({ "type": "response.function_call_arguments.delta", "delta": "{" })],
            "no known call",
        ),
    ];
    for (events, want) in cases {
        let err = assemble(&events).0.expect_err(want);
        crate::llm::assert_stream_error(&err, want);
    }
    // Rate limits and server errors are retried as their statuses are.
    for (code, status) in [("rate_limit_exceeded", 429), ("server_error", 500)] {
        let err = assemble(&[failed(code)]).0.unwrap_err();
        assert!(
            matches!(&err, ProviderError::Status { status: s, .. } if *s == status),
            "{err:?}"
        );
        assert!(err.is_retryable());
        let event = json!({ "type": "error", "code": code, "message": "busy" });
        assert!(assemble(&[event]).0.unwrap_err().is_retryable());
    }
}

#[test]
fn a_whole_response_object_is_accepted() {
    let mut deltas = Vec::new();
    let value = json!({
        "id": "resp_9", "object": "response", "model": "gpt-x", "status": "completed",
        "error": null,
        "output": [
            reasoning_item("rs_9", "Plan."),
            { "type": "message", "role": "assistant",
              "content": [{ "type": "output_text", "text": "whole", "annotations": [] }] },
            { "type": "function_call", "id": "fc_9", "call_id": "call_9",
              "name": "read", "arguments": "{}" },
        ],
        "usage": { "input_tokens": 1, "output_tokens": 2 },
    });
    let turn = Assembler::parse_full(&value, &mut |d| deltas.push(d)).unwrap();
    assert_eq!(turn.text, "whole");
    assert_eq!(turn.reasoning, "Plan.");
    assert_eq!(turn.tool_calls[0].id, "call_9");
    assert_eq!(turn.response_id.as_deref(), Some("resp_9"));
    assert!(turn.provider_items.is_some());
    assert_eq!(
        deltas,
        vec![
            Delta::Reasoning("Plan.".into()),
            Delta::Text("whole".into())
        ]
    );
    let err = Assembler::parse_full(&json!({ "choices": [] }), &mut |_| {}).unwrap_err();
    crate::llm::assert_stream_error(&err, "has no output");
}
