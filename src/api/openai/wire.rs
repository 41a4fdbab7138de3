//! OpenAI's chat completion wire format as the compatible endpoint reads
//! and writes it: the request body (what is honoured, ignored or refused),
//! the client's `messages` turned into a run's input and history, and the
//! `chat.completion`, `chat.completion.chunk` and `model` objects.
//!
//! Depends on `types` (messages, usage) and serde only.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::types::{Message, ToolCall, Usage};

/// A refused request: the message says what to change, `param` names the
/// field.
#[derive(Debug, PartialEq)]
pub(super) struct Refused {
    pub message: String,
    pub param: &'static str,
}

fn refused(param: &'static str, message: impl Into<String>) -> Refused {
    Refused {
        message: message.into(),
        param,
    }
}

/// The body of `POST /v1/chat/completions`. Honoured: `model` (an agent),
/// `messages`, `stream`. Accepted and ignored (the agent's own settings
/// apply): `temperature`, `top_p`, `max_tokens`, `max_completion_tokens`,
/// `presence_penalty`, `frequency_penalty`, `seed`, `stop`, `user`,
/// `metadata`, `store`, `stream_options` (the usage chunk is always sent)
/// and any field not named here. Refused: `n` other than 1, `tools`,
/// `functions`, `tool_choice` other than `auto`/`none` (the agent's tools
/// run inside aurad), `response_format` other than `text`, `logprobs`,
/// `audio` and `modalities` other than text.
#[derive(Debug, Deserialize)]
pub(super) struct ChatBody {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    n: Option<u64>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    functions: Option<Value>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(default)]
    response_format: Option<Value>,
    #[serde(default)]
    logprobs: Option<bool>,
    #[serde(default)]
    audio: Option<Value>,
    #[serde(default)]
    modalities: Option<Vec<String>>,
}

impl ChatBody {
    /// Refuses what the endpoint cannot do.
    pub fn check(&self) -> Result<(), Refused> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(refused(
                "n",
                "`n` must be 1: an agent gives one answer per run; send several requests for several answers",
            ));
        }
        let empty = |v: &Option<Value>| {
            v.as_ref()
                .is_none_or(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty))
        };
        if !empty(&self.tools) || !empty(&self.functions) {
            let param = if empty(&self.tools) {
                "functions"
            } else {
                "tools"
            };
            return Err(refused(
                param,
                "client tools are not supported: the agent's own tools (its `tools:` in agents/) run inside aurad and the answer comes back; remove `tools`",
            ));
        }
        if let Some(choice) = &self.tool_choice
            && !matches!(choice.as_str(), Some("auto" | "none"))
            && !choice.is_null()
        {
            return Err(refused(
                "tool_choice",
                "`tool_choice` can only be `auto` or `none`: the agent decides which of its tools to call",
            ));
        }
        if let Some(format) = &self.response_format
            && !format.is_null()
            && format["type"] != "text"
        {
            return Err(refused(
                "response_format",
                "`response_format` can only be `text`: give the agent an `output_schema` in its YAML for structured answers",
            ));
        }
        if self.logprobs == Some(true) {
            return Err(refused(
                "logprobs",
                "`logprobs` is not supported: an agent's answer has no log probabilities",
            ));
        }
        let audio = self.audio.as_ref().is_some_and(|a| !a.is_null())
            || self
                .modalities
                .as_ref()
                .is_some_and(|m| m.iter().any(|m| m != "text"));
        if audio {
            return Err(refused(
                "modalities",
                "only text is supported: remove `audio` and `modalities`",
            ));
        }
        Ok(())
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Function,
}

/// One message of the client's conversation.
#[derive(Debug, Deserialize)]
pub(super) struct ChatMessage {
    role: Role,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    tool_calls: Option<Vec<ClientToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

/// A message's content: text, or a list of parts of which only text parts
/// are understood.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ClientToolCall {
    id: String,
    function: ClientFunction,
}

#[derive(Debug, Deserialize)]
struct ClientFunction {
    name: String,
    #[serde(default)]
    arguments: String,
}

impl ChatMessage {
    /// Its text: the string, or the text parts joined; other parts are
    /// refused.
    fn text(&self, at: usize) -> Result<String, Refused> {
        match &self.content {
            None => Ok(String::new()),
            Some(Content::Text(text)) => Ok(text.clone()),
            Some(Content::Parts(parts)) => {
                let mut texts = Vec::new();
                for part in parts {
                    match (part.kind.as_str(), &part.text) {
                        ("text", Some(text)) => texts.push(text.as_str()),
                        (kind, _) => {
                            return Err(refused(
                                "messages",
                                format!(
                                    "messages[{at}] has a `{kind}` content part: only text parts are supported"
                                ),
                            ));
                        }
                    }
                }
                Ok(texts.join("\n"))
            }
        }
    }
}

/// What a request's messages make of a run: the last message (the user's)
/// is its input; the messages before it, its history, the client's system
/// and developer messages first (after the agent's own system prompt).
#[derive(Debug, PartialEq)]
pub(super) struct Conversation {
    pub input: String,
    pub history: Vec<Message>,
}

/// The last message, which must be the user's, as a turn's input (the
/// session mode: the other messages are not read).
pub(super) fn last_user_message(messages: &[ChatMessage]) -> Result<String, Refused> {
    let Some((last, at)) = messages.last().zip(messages.len().checked_sub(1)) else {
        return Err(refused(
            "messages",
            "`messages` is empty: send at least one user message",
        ));
    };
    if last.role != Role::User {
        return Err(refused(
            "messages",
            "the last message must be the user's: it is what the agent answers",
        ));
    }
    let input = last.text(at)?;
    if input.trim().is_empty() {
        return Err(refused(
            "messages",
            "the last user message is empty; write something",
        ));
    }
    Ok(input)
}

/// The client's whole conversation (the stateless mode).
pub(super) fn conversation(messages: &[ChatMessage]) -> Result<Conversation, Refused> {
    let input = last_user_message(messages)?;
    let earlier = &messages[..messages.len() - 1];
    let (mut system, mut rest) = (Vec::new(), Vec::new());
    for (at, m) in earlier.iter().enumerate() {
        let content = m.text(at)?;
        match m.role {
            Role::System | Role::Developer => system.push(Message::System { content }),
            Role::User => rest.push(Message::User { content }),
            Role::Assistant => rest.push(Message::assistant(
                content,
                m.tool_calls
                    .iter()
                    .flatten()
                    .map(|c| ToolCall {
                        id: c.id.clone(),
                        name: c.function.name.clone(),
                        arguments: c.function.arguments.clone(),
                    })
                    .collect(),
            )),
            Role::Tool => {
                let Some(id) = &m.tool_call_id else {
                    return Err(refused(
                        "messages",
                        format!("messages[{at}] is a tool result without `tool_call_id`"),
                    ));
                };
                let name = rest.iter().rev().find_map(|earlier| match earlier {
                    Message::Assistant { tool_calls, .. } => tool_calls
                        .iter()
                        .find(|c| c.id == *id)
                        .map(|c| c.name.clone()),
                    _ => None,
                });
                let Some(name) = name else {
                    return Err(refused(
                        "messages",
                        format!(
                            "messages[{at}] answers tool call `{id}`, which no earlier assistant message made"
                        ),
                    ));
                };
                rest.push(Message::Tool {
                    tool_call_id: id.clone(),
                    name,
                    content,
                    is_error: false,
                });
            }
            Role::Function => {
                return Err(refused(
                    "messages",
                    format!(
                        "messages[{at}] has the role `function`, which is deprecated: send tool results with the role `tool`"
                    ),
                ));
            }
        }
    }
    system.extend(rest);
    Ok(Conversation {
        input,
        history: system,
    })
}

/// OpenAI's `usage` of a run's usage (unknown counts are 0).
pub(super) fn usage(usage: &Usage) -> Value {
    let prompt = usage.input_tokens.unwrap_or(0);
    let completion = usage.output_tokens.unwrap_or(0);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    })
}

/// What every object of one answer shares: its id, time and model.
#[derive(Debug, Clone)]
pub(super) struct Answer {
    pub id: String,
    pub created: i64,
    pub model: String,
}

impl Answer {
    /// The `chat.completion` of a run that answered `content`.
    pub fn completion(&self, content: &str, used: &Usage) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": content, "refusal": null },
                "logprobs": null,
                "finish_reason": "stop",
            }],
            "usage": usage(used),
            "system_fingerprint": null,
        })
    }

    /// A `chat.completion.chunk` with `delta` (and `finish_reason`).
    pub fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "delta": delta,
                "logprobs": null,
                "finish_reason": finish_reason,
            }],
        })
    }

    /// The last chunk: no choices, the run's usage.
    pub fn usage_chunk(&self, used: &Usage) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage(used),
        })
    }
}

/// An agent as a `model` object.
pub(super) fn model(name: &str, created: i64) -> Value {
    json!({ "id": name, "object": "model", "created": created, "owned_by": "aurad" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> ChatBody {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn the_last_user_message_is_the_input_and_the_rest_the_history() {
        let body = body(
            r#"{"model": "a", "messages": [
                {"role": "system", "content": "be terse"},
                {"role": "user", "content": "what is 6*7?"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "42"},
                {"role": "assistant", "content": "42"},
                {"role": "developer", "content": "answer in French"},
                {"role": "user", "content": [{"type": "text", "text": "and"}, {"type": "text", "text": "7*7?"}]}
            ]}"#,
        );
        let conversation = conversation(&body.messages).unwrap();
        assert_eq!(conversation.input, "and\n7*7?");
        let roles: Vec<&str> = conversation
            .history
            .iter()
            .map(|m| match m {
                Message::System { .. } => "system",
                Message::User { .. } => "user",
                Message::Assistant { .. } => "assistant",
                Message::Tool { .. } => "tool",
            })
            .collect();
        assert_eq!(
            roles,
            ["system", "system", "user", "assistant", "tool", "assistant"]
        );
        assert!(matches!(
            &conversation.history[4],
            Message::Tool { name, content, .. } if name == "calc" && content == "42"
        ));
    }

    #[test]
    fn a_conversation_must_end_with_a_user_message() {
        let last = |text: &str| conversation(&body(text).messages).unwrap_err().message;
        assert!(last(r#"{"model": "a", "messages": []}"#).contains("empty"));
        assert!(
            last(r#"{"model": "a", "messages": [{"role": "assistant", "content": "x"}]}"#)
                .contains("last message must be the user's")
        );
        assert!(
            last(r#"{"model": "a", "messages": [{"role": "user", "content": " "}]}"#)
                .contains("empty")
        );
        assert!(
            last(
                r#"{"model": "a", "messages": [{"role": "tool", "tool_call_id": "x", "content": "1"}, {"role": "user", "content": "hi"}]}"#
            )
            .contains("no earlier assistant message made")
        );
        assert!(
            last(
                r#"{"model": "a", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}"#
            )
            .contains("`image_url` content part")
        );
    }

    #[test]
    fn unsupported_parameters_are_refused_and_harmless_ones_ignored() {
        let check = |text: &str| body(text).check().map_err(|e| e.param);
        let base = r#""model": "a", "messages": [{"role": "user", "content": "hi"}]"#;
        assert_eq!(
            check(&format!(
                r#"{{{base}, "temperature": 0.2, "max_tokens": 5, "n": 1, "stream_options": {{"include_usage": true}}, "tools": [], "tool_choice": "auto", "response_format": {{"type": "text"}}, "whatever": 1}}"#
            )),
            Ok(())
        );
        assert_eq!(check(&format!(r#"{{{base}, "n": 2}}"#)), Err("n"));
        assert_eq!(
            check(&format!(
                r#"{{{base}, "tools": [{{"type": "function", "function": {{"name": "f"}}}}]}}"#
            )),
            Err("tools")
        );
        assert_eq!(
            check(&format!(r#"{{{base}, "tool_choice": "required"}}"#)),
            Err("tool_choice")
        );
        assert_eq!(
            check(&format!(
                r#"{{{base}, "response_format": {{"type": "json_object"}}}}"#
            )),
            Err("response_format")
        );
        assert_eq!(
            check(&format!(r#"{{{base}, "logprobs": true}}"#)),
            Err("logprobs")
        );
    }

    #[test]
    fn usage_counts_unknown_tokens_as_zero() {
        let used = Usage {
            input_tokens: Some(10),
            output_tokens: None,
            ..Usage::default()
        };
        assert_eq!(
            usage(&used),
            json!({"prompt_tokens": 10, "completion_tokens": 0, "total_tokens": 10})
        );
    }
}
