//! Tool calling as text, for models that ignore the wire format's `tools`
//! (many local ones): a provider with `tool_calls: text` is wrapped in
//! [`TextTools`], which describes the tools in a system message, renders
//! earlier calls and their results as plain text any chat server takes,
//! sends no `tools`, and reads the calls back out of the answer text
//! (`parse`). Each call is checked as a native one would be (a tool of the
//! request, arguments a JSON object matching its schema); a malformed
//! answer gets one repair call, inside the same `stream()`, that tells the
//! model what was wrong. May depend on `types` only.

mod parse;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::{ChatRequest, Delta, ModelTurn, Provider, ProviderError};
use crate::types::{Message, ToolCall, ToolSpec};

pub use parse::{Parsed, RawCall, Scanner, parse, read_call};

/// The protocol, as the model is told it.
const PROTOCOL: &str = "To call a tool, write one block per call, exactly like this:\n\
<tool_call>{\"name\": \"TOOL_NAME\", \"arguments\": {...}}</tool_call>\n\
where the arguments are a JSON object matching the tool's schema. You may call several tools \
in one answer, one block each; they run in the order written, and their results come back in \
<tool_result> blocks. Write nothing after your last call: wait for the results. When you need \
no tool, answer normally, without any <tool_call> block.";

/// A provider whose models are offered tools in the prompt.
pub struct TextTools {
    inner: Arc<dyn Provider>,
}

impl TextTools {
    pub fn new(inner: Arc<dyn Provider>) -> Self {
        TextTools { inner }
    }

    async fn call(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<ModelTurn, ProviderError> {
        let rewritten = rewrite_request(request);
        if request.tools.is_empty() {
            // Nothing to call: the answer is all text, taken as it is.
            return self.inner.stream(&rewritten, on_delta).await;
        }
        let (first, parsed) = self.stream_parsed(&rewritten, on_delta).await?;
        let problems = match check_calls(&parsed, &request.tools) {
            Ok(calls) => return Ok(self.assemble(first, parsed, calls)),
            Err(problems) => problems,
        };
        // One repair: the answer as it was, and what was wrong with it.
        let mut repair = rewritten;
        repair
            .messages
            .push(Message::assistant(first.text.clone(), vec![]));
        repair
            .messages
            .push(Message::user(repair_prompt(&problems)));
        let (second, parsed) = self.stream_parsed(&repair, on_delta).await?;
        let mut usage = first.usage;
        usage.add(&second.usage);
        match check_calls(&parsed, &request.tools) {
            Ok(calls) => {
                let mut turn = self.assemble(second, parsed, calls);
                turn.usage = usage;
                Ok(turn)
            }
            Err(again) => Err(ProviderError::Stream(format!(
                "the model wrote a malformed tool call ({}), and again after being told how to \
                 fix it ({})",
                problems.join("; "),
                again.join("; ")
            ))),
        }
    }

    /// One call of the inner provider, its text deltas passed on without
    /// the tool-call markup; returns the raw turn (its text whole) and what
    /// the text held.
    async fn stream_parsed(
        &self,
        request: &ChatRequest,
        on_delta: &mut (dyn FnMut(Delta) + Send),
    ) -> Result<(ModelTurn, Parsed), ProviderError> {
        let mut scanner = Scanner::default();
        let turn = {
            let mut filter = |delta: Delta| match delta {
                Delta::Text(text) => {
                    let out = scanner.push(&text);
                    if !out.is_empty() {
                        on_delta(Delta::Text(out));
                    }
                }
                other => on_delta(other),
            };
            self.inner.stream(request, &mut filter).await?
        };
        let (rest, parsed) = scanner.finish();
        if !rest.is_empty() {
            on_delta(Delta::Text(rest));
        }
        // A provider that delivers its text without deltas: parse it whole.
        let parsed = if parsed.text.is_empty() && parsed.calls.is_empty() && !turn.text.is_empty() {
            let whole = parse(&turn.text);
            if !whole.text.is_empty() {
                on_delta(Delta::Text(whole.text.clone()));
            }
            whole
        } else {
            parsed
        };
        Ok((turn, parsed))
    }

    /// The turn with the calls taken out of its text.
    fn assemble(
        &self,
        mut turn: ModelTurn,
        parsed: Parsed,
        calls: Vec<(String, String)>,
    ) -> ModelTurn {
        turn.tool_calls = calls
            .into_iter()
            .map(|(name, arguments)| ToolCall {
                // Random, not counted: a provider is built per run, and a
                // session's history (sent to another model of a chain as
                // native calls) must never hold two calls of one id.
                id: format!("text_call_{:012x}", rand::random::<u64>() >> 16),
                name,
                arguments,
            })
            .collect();
        // Around calls, the text is usually a line break or two: trimmed,
        // as the text of a native call's turn would be.
        turn.text = if turn.tool_calls.is_empty() {
            parsed.text
        } else {
            parsed.text.trim().to_string()
        };
        turn
    }
}

impl Provider for TextTools {
    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
        on_delta: &'a mut (dyn FnMut(Delta) + Send),
    ) -> BoxFuture<'a, Result<ModelTurn, ProviderError>> {
        Box::pin(self.call(request, on_delta))
    }
}

/// The request as a model without tool calling sees it: the tools
/// described in a system message after the others, earlier calls as
/// `<tool_call>` text in the assistant's turns, results as
/// `<tool_result>` user turns (consecutive ones in one turn), no `tools`,
/// and, while there are tools, no output schema.
pub fn rewrite_request(request: &ChatRequest) -> ChatRequest {
    let mut messages: Vec<Message> = Vec::with_capacity(request.messages.len() + 1);
    let leading_system = request
        .messages
        .iter()
        .take_while(|m| matches!(m, Message::System { .. }))
        .count();
    for (i, message) in request.messages.iter().enumerate() {
        if i == leading_system && !request.tools.is_empty() {
            messages.push(Message::system(tools_prompt(&request.tools)));
        }
        match message {
            Message::Assistant {
                content,
                tool_calls,
                ..
            } if !tool_calls.is_empty() => {
                let mut text = content.clone();
                for call in tool_calls {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&call_text(call));
                }
                messages.push(Message::assistant(text, vec![]));
            }
            Message::Tool {
                tool_call_id,
                name,
                content,
                is_error,
            } => {
                let error = if *is_error { " error=\"true\"" } else { "" };
                let block = format!(
                    "<tool_result name=\"{name}\" id=\"{tool_call_id}\"{error}>\n{content}\n</tool_result>"
                );
                match messages.last_mut() {
                    // A result after a result: the same user turn.
                    Some(Message::User { content })
                        if i > 0 && matches!(request.messages[i - 1], Message::Tool { .. }) =>
                    {
                        content.push('\n');
                        content.push_str(&block);
                    }
                    _ => messages.push(Message::user(block)),
                }
            }
            other => messages.push(other.clone()),
        }
    }
    if leading_system == request.messages.len() && !request.tools.is_empty() {
        messages.push(Message::system(tools_prompt(&request.tools)));
    }
    ChatRequest {
        messages,
        tools: vec![],
        // A server held to the answer's schema (a JSON mode or grammar)
        // could not write a call; the engine checks the final answer
        // against it whatever the provider did.
        output_schema: if request.tools.is_empty() {
            request.output_schema.clone()
        } else {
            None
        },
        ..request.clone()
    }
}

/// The system message describing `tools` and how to call them.
fn tools_prompt(tools: &[ToolSpec]) -> String {
    let mut text = String::from("You can use these tools:\n");
    for tool in tools {
        text.push_str(&format!(
            "\n## {}\n{}\nArguments (JSON Schema): {}\n",
            tool.name, tool.description, tool.parameters
        ));
    }
    text.push('\n');
    text.push_str(PROTOCOL);
    text
}

/// A call as the model is asked to write it.
fn call_text(call: &ToolCall) -> String {
    let arguments = serde_json::from_str::<Value>(&call.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| Value::Object(Default::default()));
    // Written by hand so the name comes first, as the protocol shows it.
    format!(
        "<tool_call>{{\"name\": {}, \"arguments\": {arguments}}}</tool_call>",
        Value::String(call.name.clone())
    )
}

/// Each call of `parsed` as (name, arguments JSON), or every problem found,
/// each naming its call.
fn check_calls(parsed: &Parsed, tools: &[ToolSpec]) -> Result<Vec<(String, String)>, Vec<String>> {
    let mut calls = Vec::new();
    let mut problems = Vec::new();
    for (i, raw) in parsed.calls.iter().enumerate() {
        let which = format!("tool call {}", i + 1);
        match check_call(raw, tools) {
            Ok(call) => calls.push(call),
            Err(why) => problems.push(format!("{which}: {why}")),
        }
    }
    if problems.is_empty() {
        Ok(calls)
    } else {
        Err(problems)
    }
}

fn check_call(raw: &RawCall, tools: &[ToolSpec]) -> Result<(String, String), String> {
    let (name, arguments) = read_call(&raw.body)?;
    let Some(tool) = tools.iter().find(|t| t.name == name) else {
        let known: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        return Err(format!(
            "there is no tool `{name}`; the tools are: {}",
            known.join(", ")
        ));
    };
    let arguments = Value::Object(arguments);
    let validator = jsonschema::validator_for(&tool.parameters)
        .map_err(|e| format!("the schema of `{name}` does not compile: {e}"))?;
    let wrong: Vec<String> = validator
        .iter_errors(&arguments)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect();
    if !wrong.is_empty() {
        return Err(format!(
            "the arguments of `{name}` do not match its schema: {}",
            wrong.join("; ")
        ));
    }
    Ok((name, arguments.to_string()))
}

/// What the model is told after a malformed call.
fn repair_prompt(problems: &[String]) -> String {
    format!(
        "Your answer had a malformed tool call, and no tool ran:\n- {}\n\nWrite it again as \
         <tool_call>{{\"name\": \"TOOL_NAME\", \"arguments\": {{...}}}}</tool_call>, with the \
         name of one of the tools and arguments that are a JSON object matching its schema; or \
         answer without a tool call.",
        problems.join("\n- ")
    )
}

#[cfg(test)]
#[path = "text_tools/tests.rs"]
mod tests;
