//! One MCP tool as an aurad [`Tool`]: namespaced names, the call (bounded by
//! the server's call timeout and the run's cancellation, retried once on a
//! fresh session when an HTTP session expired) and the mapping of MCP
//! results to the text the model sees.

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};
use rmcp::{Peer, RoleClient, ServiceError};

use super::errors::{describe_error_data, describe_service_error, is_session_expired};
use super::supervise::Server;
use crate::tools::{Tool, ToolContext, ToolError, cap_output};
use crate::types::ToolSpec;

/// Longest tool name providers accept.
pub const MAX_TOOL_NAME: usize = 64;

/// `<server>_<tool>` with every character outside `[A-Za-z0-9_-]` made `_`,
/// cut to 64 characters.
pub fn namespaced_name(server: &str, tool: &str) -> String {
    format!("{server}_{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_TOOL_NAME)
        .collect()
}

/// The aurad spec of an MCP tool, under its namespaced name.
pub(crate) fn spec_for(name: String, tool: &rmcp::model::Tool) -> ToolSpec {
    let description = tool
        .description
        .as_deref()
        .map(str::to_string)
        .or_else(|| tool.title.clone())
        .or_else(|| tool.annotations.as_ref().and_then(|a| a.title.clone()))
        .unwrap_or_default();
    ToolSpec {
        name,
        description,
        parameters: serde_json::Value::Object((*tool.input_schema).clone()),
    }
}

/// A tool of an MCP server. The live session is looked up by server at call
/// time, so the tool keeps working across restarts.
pub struct McpTool {
    pub(crate) server: Arc<Server>,
    /// The name the server knows the tool by.
    pub(crate) original: String,
    pub(crate) spec: ToolSpec,
}

impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> String {
        format!(
            "mcp server {} (tool {})",
            self.server.config.name, self.original
        )
    }

    fn call<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<String, ToolError>> {
        Box::pin(async move {
            let arguments = match args {
                serde_json::Value::Object(map) => map,
                serde_json::Value::Null => serde_json::Map::new(),
                other => {
                    return Err(ToolError::InvalidArguments(format!(
                        "the arguments must be a JSON object, got {other}"
                    )));
                }
            };
            let name = &self.server.config.name;
            let timeout = self.server.config.call_timeout;
            let work = async {
                let (peer, generation) = self.server.peer()?;
                match self.call_once(&peer, arguments.clone()).await {
                    // Only an HTTP session can expire; a stdio server is
                    // never restarted because of an error text.
                    Err(e) if self.server.is_http() && is_session_expired(&e) => {
                        tracing::info!(target: "aurad::mcp", server = %name,
                            "session expired during a call; opening a new session and retrying once");
                        let peer = self.server.renew(generation).await?;
                        self.call_once(&peer, arguments)
                            .await
                            .map_err(|e| self.refused(&e))
                    }
                    other => other.map_err(|e| self.refused(&e)),
                }
            };
            let result = tokio::select! {
                r = tokio::time::timeout(timeout, work) => r.map_err(|_| ToolError::TimedOut(timeout))?,
                () = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
            }?;
            let (text, is_error) = render(&result);
            let text = cap_output(text, ctx.output_cap);
            if is_error {
                Err(ToolError::Failed(if text.is_empty() {
                    format!(
                        "tool `{}` of MCP server `{name}` reported an error without a message",
                        self.original
                    )
                } else {
                    text
                }))
            } else {
                Ok(text)
            }
        })
    }
}

impl McpTool {
    async fn call_once(
        &self,
        peer: &Peer<RoleClient>,
        arguments: serde_json::Map<String, serde_json::Value>,
    ) -> Result<CallToolResult, ServiceError> {
        let params = CallToolRequestParams::new(self.original.clone()).with_arguments(arguments);
        peer.call_tool(params).await
    }

    fn refused(&self, e: &ServiceError) -> ToolError {
        let name = &self.server.config.name;
        ToolError::Failed(match e {
            ServiceError::McpError(data) => format!(
                "MCP server `{name}` refused the call to `{}`: {}; check the arguments against the tool's schema",
                self.original,
                describe_error_data(data)
            ),
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => format!(
                "MCP server `{name}` went away during the call ({}); it is being restarted, try again shortly",
                describe_service_error(e)
            ),
            other => format!(
                "the call to MCP server `{name}` failed: {}",
                describe_service_error(other)
            ),
        })
    }
}

/// The text of a result for the model, and whether it is an error.
pub fn render(result: &CallToolResult) -> (String, bool) {
    let mut parts: Vec<String> = Vec::new();
    let mut has_text = false;
    for block in &result.content {
        match block {
            ContentBlock::Text(t) => {
                has_text = true;
                parts.push(t.text.clone());
            }
            ContentBlock::Image(i) => parts.push(format!(
                "[image: {}, {} bytes]",
                i.mime_type,
                base64_len(&i.data)
            )),
            ContentBlock::Audio(a) => parts.push(format!(
                "[audio: {}, {} bytes]",
                a.mime_type,
                base64_len(&a.data)
            )),
            ContentBlock::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    has_text = true;
                    parts.push(format!("[resource: {uri}]\n{text}"));
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => parts.push(format!(
                    "[resource: {uri}, {}, {} bytes]",
                    mime_type.as_deref().unwrap_or("binary"),
                    base64_len(blob)
                )),
                _ => parts.push("[resource: unsupported kind]".into()),
            },
            ContentBlock::ResourceLink(link) => {
                let mut text = format!("[resource link: {}", link.uri);
                if !link.name.is_empty() && link.name != link.uri {
                    text.push_str(&format!(" ({})", link.name));
                }
                if let Some(d) = link.description.as_deref().filter(|d| !d.is_empty()) {
                    text.push_str(&format!(": {d}"));
                }
                text.push(']');
                parts.push(text);
            }
            other => parts.push(format!(
                "[unsupported content: {}]",
                serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(String::from))
                    .unwrap_or_else(|| "unknown".into())
            )),
        }
    }
    if !has_text && let Some(structured) = &result.structured_content {
        parts.push(structured.to_string());
    }
    (parts.join("\n"), result.is_error == Some(true))
}

/// Bytes encoded by a base64 text (padding and whitespace ignored).
fn base64_len(data: &str) -> usize {
    let chars = data
        .bytes()
        .filter(|b| !b.is_ascii_whitespace() && *b != b'=')
        .count();
    chars * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_sanitised_and_cut() {
        assert_eq!(namespaced_name("fs", "read_file"), "fs_read_file");
        assert_eq!(
            namespaced_name("gh", "issues.list/all"),
            "gh_issues_list_all"
        );
        assert_eq!(namespaced_name("s", "é"), "s__");
        assert_eq!(namespaced_name("s", &"x".repeat(100)).len(), MAX_TOOL_NAME);
    }

    #[test]
    fn renders_every_kind_of_content() {
        let mut result = CallToolResult::success(vec![
            ContentBlock::text("one"),
            ContentBlock::image("iVBORw0KGgo=", "image/png"),
            ContentBlock::embedded_text("file:///a.txt", "hello"),
            ContentBlock::text("two"),
        ]);
        assert_eq!(
            render(&result),
            (
                "one\n[image: image/png, 8 bytes]\n[resource: file:///a.txt]\nhello\ntwo".into(),
                false
            )
        );
        result.is_error = Some(true);
        assert!(render(&result).1);
        let structured = CallToolResult::structured(serde_json::json!({"n": 1}));
        assert!(render(&structured).0.contains("{\"n\":1}"));
        assert_eq!(base64_len("AAAA"), 3);
        assert_eq!(base64_len("AAA="), 2);
        assert_eq!(base64_len("AA=="), 1);
        assert_eq!(base64_len("AAAAAA"), 4);
    }
}
