//! The MCP protocol side of agents as tools: [`AgentServer`], rmcp's
//! `ServerHandler` over an [`AgentRuns`]. `tools/list` lists the agents
//! offered; `tools/call` starts a run, turns its events into
//! `notifications/progress` when the client sent a progress token, and
//! answers with its end: the answer text, the JSON result as
//! `structuredContent` for an agent whose `output_schema` is declared, or
//! `isError` with how the run ended. A cancelled call (the client's
//! `notifications/cancelled`, a closed HTTP stream, the session's end)
//! cancels the run. Depends on `types` and its parent's trait.

use std::sync::Arc;

use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, MetaObject, PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use super::{AgentRuns, AgentTool};
use crate::types::{RunEvent, RunState};

/// The `_meta` key of a tool result that names the run it started.
pub const RUN_ID_META: &str = "aurad/run_id";

/// The project's agents as an MCP server's tools.
#[derive(Clone)]
pub struct AgentServer {
    runs: Arc<dyn AgentRuns>,
}

impl AgentServer {
    pub fn new(runs: Arc<dyn AgentRuns>) -> AgentServer {
        AgentServer { runs }
    }

    /// Runs agent `tool` for one `tools/call` to its end (or its
    /// cancellation).
    async fn call(
        &self,
        tool: &AgentTool,
        arguments: Option<Map<String, Value>>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let input = match read_input(tool, arguments) {
            Ok(input) => input,
            Err(why) => return failed(why, None),
        };
        // Not raced with the cancellation: a start dropped half-way could
        // leave a run nobody follows. A cancelled call's run is cancelled
        // below, at once.
        let run = match self.runs.start(&tool.name, input).await {
            Ok(run) => run,
            Err(why) => return failed(format!("cannot run agent `{}`: {why}", tool.name), None),
        };
        let run_id = run.run_id;
        let mut events = run.events;
        let mut progress = Progress::new(context, &run_id);
        let mut cancelled = false;
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = context.ct.cancelled(), if !cancelled => {
                    tracing::info!(run = %run_id, agent = %tool.name, "the MCP client cancelled the call; cancelling its run");
                    self.runs.cancel(&run_id).await;
                    cancelled = true;
                    continue;
                }
            };
            match event {
                Some(RunEvent::Finished {
                    state,
                    reason,
                    output,
                    result,
                    ..
                }) => return finished(tool, &run_id, state, reason, output, result),
                Some(event) => progress.report(&event).await,
                None => {
                    return failed(
                        format!(
                            "the events of run {run_id} ended before its end; see `aurad logs {run_id}`"
                        ),
                        Some(&run_id),
                    );
                }
            }
        }
    }
}

impl ServerHandler for AgentServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("aurad", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each tool runs one agent of an aurad project: give the whole task as `input`. \
                 Every call is a run recorded in the project (`aurad runs`, `aurad logs RUN`).",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self.runs.tools().iter().map(tool_of).collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.runs
            .tools()
            .iter()
            .find(|t| t.name == name)
            .map(tool_of)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let tools = self.runs.tools();
        let Some(tool) = tools.iter().find(|t| t.name == request.name) else {
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            return Err(McpError::invalid_params(
                format!(
                    "no tool `{}`: the tools are the agents offered ({}); list them with tools/list",
                    request.name,
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                ),
                None,
            ));
        };
        Ok(self.call(tool, request.arguments, &context).await.into())
    }
}

/// The MCP tool of an agent: `{input}` (required when it has no `prompt`)
/// and, when declared, its `outputSchema`.
fn tool_of(tool: &AgentTool) -> Tool {
    let input = if tool.needs_input {
        "The whole task for this agent: it sees nothing else of this conversation."
    } else {
        "The task for this agent; without it the agent runs its own `prompt`."
    };
    let mut schema = json!({
        "type": "object",
        "properties": { "input": { "type": "string", "description": input } },
        "additionalProperties": false,
    });
    if tool.needs_input {
        schema["required"] = json!(["input"]);
    }
    let schema = match schema {
        Value::Object(schema) => schema,
        _ => Map::new(),
    };
    let mcp_tool = Tool::new(tool.name.clone(), tool.description.clone(), schema);
    match &tool.output_schema {
        Some(output) => mcp_tool.with_raw_output_schema(Arc::new(output.clone())),
        None => mcp_tool,
    }
}

/// The call's `input`: a string, required when the agent has no `prompt`.
fn read_input(
    tool: &AgentTool,
    arguments: Option<Map<String, Value>>,
) -> Result<Option<String>, String> {
    let mut arguments = arguments.unwrap_or_default();
    if let Some(other) = arguments.keys().find(|k| *k != "input") {
        return Err(format!(
            "`{}` takes only `input` (a string), not `{other}`",
            tool.name
        ));
    }
    match arguments.remove("input") {
        Some(Value::String(input)) => Ok(Some(input)),
        None | Some(Value::Null) if !tool.needs_input => Ok(None),
        None | Some(Value::Null) => Err(format!(
            "`{}` needs `input`: the agent has no `prompt` of its own; call it with {{\"input\": \"the task\"}}",
            tool.name
        )),
        Some(other) => Err(format!(
            "`input` of `{}` must be a string, not {other}",
            tool.name
        )),
    }
}

/// The tool result of a run's end.
fn finished(
    tool: &AgentTool,
    run_id: &str,
    state: RunState,
    reason: Option<String>,
    output: Option<String>,
    result: Option<Value>,
) -> CallToolResult {
    if state != RunState::Succeeded {
        return failed(
            format!(
                "run {run_id} of agent `{}` ended {state}: {}; see `aurad logs {run_id}`",
                tool.name,
                reason.as_deref().unwrap_or("no reason given")
            ),
            Some(run_id),
        );
    }
    let answer = match (result, &tool.output_schema) {
        (Some(result), Some(_)) => CallToolResult::structured(result),
        (_, _) => CallToolResult::success(vec![ContentBlock::text(output.unwrap_or_default())]),
    };
    answer.with_meta(Some(run_meta(run_id)))
}

/// A tool result with `isError`, saying why.
fn failed(why: String, run_id: Option<&str>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(why)]).with_meta(run_id.map(run_meta))
}

fn run_meta(run_id: &str) -> MetaObject {
    let mut meta = Map::new();
    meta.insert(RUN_ID_META.into(), Value::String(run_id.to_string()));
    MetaObject::from(meta)
}

/// `notifications/progress` for one call, when its client sent a token.
struct Progress {
    to: Option<(ProgressToken, Peer<RoleServer>)>,
    run_id: String,
    /// Notifications sent: each one's `progress` is one more.
    sent: u32,
}

impl Progress {
    fn new(context: &RequestContext<RoleServer>, run_id: &str) -> Progress {
        Progress {
            to: context
                .meta
                .get_progress_token()
                .map(|token| (token, context.peer.clone())),
            run_id: run_id.to_string(),
            sent: 0,
        }
    }

    /// Tells the client what the run just did, if it is worth a line.
    async fn report(&mut self, event: &RunEvent) {
        let Some((token, peer)) = &self.to else {
            return;
        };
        let Some(message) = progress_message(&self.run_id, event) else {
            return;
        };
        self.sent += 1;
        let param = ProgressNotificationParam::new(token.clone(), f64::from(self.sent))
            .with_message(message);
        if let Err(e) = peer.notify_progress(param).await {
            // The client went away; the call's cancellation follows.
            tracing::debug!(run = %self.run_id, "a progress notification could not be sent: {e}");
        }
    }
}

/// The progress line of `event`; `None` for streamed text and the like.
fn progress_message(run_id: &str, event: &RunEvent) -> Option<String> {
    Some(match event {
        RunEvent::Started { agent, model, .. } => {
            format!("run {run_id} of `{agent}` started on {model}")
        }
        RunEvent::Usage { iteration, .. } => format!("model turn {iteration} done"),
        RunEvent::ToolCall { name, .. } => format!("calling tool `{name}`"),
        RunEvent::ToolResult { name, is_error, .. } => {
            if *is_error {
                format!("tool `{name}` failed")
            } else {
                format!("tool `{name}` answered")
            }
        }
        RunEvent::ModelRetry { attempt, error, .. } => {
            format!("model call failed ({error}); trying again (attempt {attempt})")
        }
        RunEvent::ApprovalRequested { name, .. } => {
            format!("waiting for a person to approve `{name}`: aurad approve {run_id} (or --deny)")
        }
        RunEvent::ApprovalDecided { name, approved, .. } => {
            format!("`{name}` {}", if *approved { "approved" } else { "denied" })
        }
        RunEvent::StepStarted { step, index, .. } => match index {
            Some(i) => format!("step `{step}` [{i}] started"),
            None => format!("step `{step}` started"),
        },
        RunEvent::StepFinished {
            step, index, state, ..
        } => match index {
            Some(i) => format!("step `{step}` [{i}] {state}"),
            None => format!("step `{step}` {state}"),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(needs_input: bool) -> AgentTool {
        AgentTool {
            name: "writer".into(),
            description: "Writes".into(),
            needs_input,
            output_schema: None,
        }
    }

    fn args(value: Value) -> Option<Map<String, Value>> {
        value.as_object().cloned()
    }

    #[test]
    fn input_is_a_string_required_without_a_prompt() {
        let needs = tool(true);
        assert_eq!(
            read_input(&needs, args(json!({"input": "hi"}))),
            Ok(Some("hi".into()))
        );
        let missing = read_input(&needs, None).unwrap_err();
        assert!(missing.contains("needs `input`"), "{missing}");
        let number = read_input(&needs, args(json!({"input": 3}))).unwrap_err();
        assert!(number.contains("must be a string, not 3"), "{number}");
        let extra = read_input(&needs, args(json!({"input": "a", "x": 1}))).unwrap_err();
        assert!(extra.contains("not `x`"), "{extra}");
        assert_eq!(read_input(&tool(false), None), Ok(None));
    }

    #[test]
    fn the_input_schema_requires_input_only_without_a_prompt() {
        let required = tool_of(&tool(true));
        assert_eq!(
            required.input_schema.get("required"),
            Some(&json!(["input"]))
        );
        let optional = tool_of(&tool(false));
        assert_eq!(optional.input_schema.get("required"), None);
        assert_eq!(optional.output_schema, None);
    }

    #[test]
    fn a_run_that_did_not_succeed_is_an_error_result_naming_it() {
        let result = finished(
            &tool(true),
            "r1",
            RunState::Failed,
            Some("the model failed".into()),
            None,
            None,
        );
        assert_eq!(result.is_error, Some(true));
        let text = result.content[0].as_text().unwrap().text.clone();
        assert!(
            text.contains("run r1 of agent `writer` ended failed: the model failed"),
            "{text}"
        );
        let ok = finished(
            &tool(true),
            "r2",
            RunState::Succeeded,
            None,
            Some("hi".into()),
            None,
        );
        assert_eq!(ok.is_error, Some(false));
        assert_eq!(ok.content[0].as_text().unwrap().text, "hi");
        assert_eq!(ok.meta.unwrap().0[RUN_ID_META], json!("r2"));
    }

    #[test]
    fn streamed_text_is_no_progress() {
        let delta = RunEvent::TextDelta { text: "x".into() };
        assert_eq!(progress_message("r", &delta), None);
        let call = RunEvent::ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: "{}".into(),
        };
        assert_eq!(
            progress_message("r", &call).as_deref(),
            Some("calling tool `bash`")
        );
    }
}
