//! The built-in `test` model: deterministic, offline, no key. It is for
//! trying an agent definition, not intelligence (in the spirit of
//! pydantic-ai's TestModel). On the first turn it calls every tool it is
//! offered, once each, with arguments generated from the tool's JSON Schema
//! (`examples`, then `default`, then `enum`, then a value of the type); once
//! tool results are in, it answers with a short text listing each result.
//! An agent with an `output_schema` gets, as its final answer, JSON generated
//! the same way (every property filled), so a newcomer's first agent with a
//! schema runs offline with `--model test` as it will with a real model.

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};

use super::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};
use crate::types::{Message, ToolCall};

#[derive(Debug, Default, Clone, Copy)]
pub struct TestModel;

impl Provider for TestModel {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(async move {
            let turn = respond(request);
            for piece in split_words(&turn.text) {
                on_delta(Delta::Text(piece));
            }
            Ok(turn)
        })
    }
}

/// The model's whole answer to `request`.
pub fn respond(request: &ChatRequest) -> ModelTurn {
    let last_user = request
        .messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }));
    let since_user = &request.messages[last_user.map_or(0, |i| i + 1)..];
    let results: Vec<(&str, &str, bool)> = since_user
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => Some((name.as_str(), content.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    let called_already = since_user
        .iter()
        .any(|m| matches!(m, Message::Assistant { tool_calls, .. } if !tool_calls.is_empty()));
    if !request.tools.is_empty() && !called_already {
        let tool_calls = request
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| ToolCall {
                id: format!("call_test_{}", i + 1),
                name: t.name.clone(),
                arguments: generate(&t.parameters).to_string(),
            })
            .collect();
        return ModelTurn {
            tool_calls,
            finish_reason: Some("tool_calls".into()),
            ..ModelTurn::default()
        };
    }
    let text = if let Some(schema) = &request.output_schema {
        generate_with(schema, Fill::Every).to_string()
    } else if results.is_empty() {
        let input = last_user
            .map(|i| request.messages[i].content())
            .unwrap_or("");
        format!(
            "test model: no tools to call. Your input was: {}",
            first_line(input, 200)
        )
    } else {
        let mut text = format!("test model: called {} tool(s).", results.len());
        for (name, content, is_error) in results {
            let status = if is_error { "error" } else { "ok" };
            text.push_str(&format!(
                "\n- {name}: {status}: {}",
                first_line(content, 120)
            ));
        }
        text
    };
    ModelTurn {
        text,
        finish_reason: Some("stop".into()),
        ..ModelTurn::default()
    }
}

/// Which properties of an object [`generate_with`] fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fill {
    /// Only the required ones: tool arguments, where an optional argument
    /// may change what the tool does.
    Required,
    /// Every property: a final answer, which reads better complete.
    Every,
}

/// A value satisfying `schema` as far as a simple reading of it goes, with
/// only the required properties of objects.
pub fn generate(schema: &Value) -> Value {
    generate_with(schema, Fill::Required)
}

fn generate_with(schema: &Value, fill: Fill) -> Value {
    if let Some(v) = schema
        .get("examples")
        .and_then(|e| e.as_array())
        .and_then(|a| a.first())
    {
        return v.clone();
    }
    if let Some(v) = schema.get("const").or_else(|| schema.get("default")) {
        return v.clone();
    }
    if let Some(v) = schema
        .get("enum")
        .and_then(|e| e.as_array())
        .and_then(|a| a.first())
    {
        return v.clone();
    }
    if let Some(first) = ["anyOf", "oneOf", "allOf"].iter().find_map(|k| {
        schema
            .get(*k)
            .and_then(|v| v.as_array())
            .and_then(|a| a.first())
    }) {
        return generate_with(first, fill);
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "string",
    };
    match ty {
        "object" => {
            let mut out = Map::new();
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    if fill == Fill::Every || required.contains(&name.as_str()) {
                        out.insert(name.clone(), generate_with(prop, fill));
                    }
                }
            }
            Value::Object(out)
        }
        "array" => {
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = schema
                .get("items")
                .map(|items| generate_with(items, fill))
                .unwrap_or(json!("a"));
            let count = if fill == Fill::Every { min.max(1) } else { min };
            Value::Array(vec![item; count as usize])
        }
        "integer" => json!(schema.get("minimum").and_then(Value::as_i64).unwrap_or(0)),
        "number" => json!(schema.get("minimum").and_then(Value::as_f64).unwrap_or(0.0)),
        "boolean" => json!(false),
        "null" => Value::Null,
        _ => {
            if let Some(sample) = schema
                .get("format")
                .and_then(Value::as_str)
                .and_then(formatted)
            {
                return json!(sample);
            }
            let min = schema
                .get("minLength")
                .and_then(Value::as_u64)
                .unwrap_or(1)
                .max(1);
            json!("a".repeat(min as usize))
        }
    }
}

/// A valid value of a JSON Schema string `format`, where one is known.
fn formatted(format: &str) -> Option<&'static str> {
    Some(match format {
        "date-time" => "2026-01-01T00:00:00Z",
        "date" => "2026-01-01",
        "time" => "00:00:00Z",
        "email" => "someone@example.com",
        "uri" | "url" => "https://example.com/",
        "uuid" => "00000000-0000-4000-8000-000000000000",
        _ => return None,
    })
}

fn first_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() > max {
        format!("{}…", line.chars().take(max).collect::<String>())
    } else {
        line.to_string()
    }
}

fn split_words(text: &str) -> Vec<String> {
    text.split_inclusive(' ').map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ToolSpec;

    fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> ChatRequest {
        ChatRequest {
            model: "test".into(),
            messages,
            tools,
            temperature: None,
            max_tokens: None,
            output_schema: None,
            cache_key: None,
        }
    }

    fn tool(name: &str, parameters: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: String::new(),
            parameters,
        }
    }

    #[test]
    fn generates_from_schema() {
        let schema = json!({"type": "object", "required": ["a", "b", "c", "d", "e"], "properties": {
            "a": {"type": "string", "examples": ["echo hi"]},
            "b": {"type": "integer", "minimum": 3},
            "c": {"enum": ["x", "y"]},
            "d": {"type": "array", "items": {"type": "boolean"}, "minItems": 2},
            "e": {"type": ["null", "number"]},
            "optional": {"type": "string"}
        }});
        assert_eq!(
            generate(&schema),
            json!({"a": "echo hi", "b": 3, "c": "x", "d": [false, false], "e": 0.0})
        );
    }

    #[test]
    fn calls_every_tool_then_summarises() {
        let tools = vec![
            tool("a", json!({"type": "object"})),
            tool("b", json!({"type": "object"})),
        ];
        let first = respond(&request(vec![Message::user("go")], tools.clone()));
        assert_eq!(first.tool_calls.len(), 2);
        assert_eq!(first.tool_calls[1].id, "call_test_2");
        let mut messages = vec![
            Message::user("go"),
            Message::Assistant {
                content: String::new(),
                tool_calls: first.tool_calls,
                provider_items: None,
            },
        ];
        messages.push(Message::Tool {
            tool_call_id: "call_test_1".into(),
            name: "a".into(),
            content: "one\ntwo".into(),
            is_error: false,
        });
        messages.push(Message::Tool {
            tool_call_id: "call_test_2".into(),
            name: "b".into(),
            content: "bad".into(),
            is_error: true,
        });
        let second = respond(&request(messages, tools));
        assert!(second.tool_calls.is_empty());
        assert_eq!(
            second.text,
            "test model: called 2 tool(s).\n- a: ok: one\n- b: error: bad"
        );
    }

    #[test]
    fn with_an_output_schema_it_answers_matching_json() {
        let schema = json!({"type": "object", "required": ["title"], "properties": {
            "title": {"type": "string", "minLength": 3},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
            "when": {"type": "string", "format": "date-time"},
            "score": {"type": "integer", "minimum": 1, "maximum": 5}
        }, "additionalProperties": false});
        let mut req = request(vec![Message::user("summarise")], vec![]);
        req.output_schema = Some(schema.clone());
        let turn = respond(&req);
        let answer: Value = serde_json::from_str(&turn.text).unwrap();
        assert_eq!(
            answer,
            json!({"title": "aaa", "tags": ["a"], "when": "2026-01-01T00:00:00Z", "score": 1})
        );
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(validator.is_valid(&answer), "{answer} does not match");
    }

    #[test]
    fn without_tools_it_echoes_the_input() {
        let turn = respond(&request(vec![Message::user("hello there")], vec![]));
        assert_eq!(
            turn.text,
            "test model: no tools to call. Your input was: hello there"
        );
    }
}
