//! What each field of an MCP server entry means across the editors'
//! dialects (Claude Desktop and Code, Cursor, VS Code, Windsurf, Zed, Cline,
//! Roo): the fields aurad uses, the editor-only ones it accepts and ignores
//! with a note saying why, and the transport names (`type`). The sources are
//! listed in `tests/fixtures/mcp-dialects/README.md`.

/// Fields of a stdio server.
/// (`sandbox` is aurad's own.)
pub(super) const STDIO_FIELDS: [&str; 6] = ["command", "args", "env", "cwd", "envFile", "sandbox"];
/// Fields of an HTTP server (`serverUrl` is Windsurf's `url`).
pub(super) const HTTP_FIELDS: [&str; 3] = ["url", "serverUrl", "headers"];
/// aurad's own bounds.
pub(super) const TIMEOUT_FIELDS: [&str; 2] = ["startup_timeout", "call_timeout"];
/// `disabled: true` (Cline, Roo) or `enabled: false` (Zed) skip a server.
pub(super) const SWITCH_FIELDS: [&str; 2] = ["disabled", "enabled"];

/// A transport a `type` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    Stdio,
    Http,
}

/// The transport a `type` (or Cline's legacy `transportType`) value names,
/// or why aurad cannot use it.
pub(super) fn transport_kind(value: &str, key: &str, server: &str) -> Result<Kind, String> {
    match value {
        "stdio" => Ok(Kind::Stdio),
        "http" | "streamable-http" | "streamableHttp" | "streamable_http" => Ok(Kind::Http),
        "sse" => Err(format!(
            "server `{server}`: the legacy HTTP+SSE transport (`\"{key}\": \"sse\"`, MCP 2024-11-05, deprecated since 2025-03-26) is not supported: aurad's MCP client (rmcp 3.11) has none. If the server also speaks Streamable HTTP, set `\"{key}\": \"http\"` and point `url` at that endpoint (often `/mcp` rather than `/sse`); otherwise run a stdio bridge to it as a `command`"
        )),
        "ws" | "websocket" => Err(format!(
            "server `{server}`: the WebSocket transport (`\"{key}\": \"{value}\"`) is not a standard MCP transport and aurad has no client for it; use a stdio `command` or a Streamable HTTP `url` (`\"{key}\": \"http\"`)"
        )),
        other => Err(format!(
            "server `{server}`: unknown {key} {other:?}; use \"stdio\" or \"http\" (also read: \"streamable-http\", \"streamableHttp\")"
        )),
    }
}

/// Why an editor-only field is accepted and ignored, or `None` when the
/// field is not one of them.
pub(super) fn ignored(key: &str) -> Option<&'static str> {
    Some(match key {
        "autoApprove" | "alwaysAllow" => {
            "it lists tools an editor may call without asking; aurad never asks: an agent may call the tools its `tools:` allow-list names"
        }
        "disabledTools" => {
            "aurad offers a server's tools only to the agents whose `tools:` allow-list names them: leave these tools out of those lists"
        }
        "timeout" => {
            "its unit differs between clients (milliseconds in Claude Code, seconds in Cline, Roo and Zed); set `call_timeout` (e.g. \"60s\") instead"
        }
        "oauth" | "auth" => {
            "aurad has no OAuth sign-in; send a token with `headers` (e.g. \"Authorization\": \"Bearer ${TOKEN}\")"
        }
        "headersHelper" => {
            "aurad runs no header helper command; put the headers in `headers`, with ${VAR} for secrets"
        }
        "sandboxEnabled" => {
            "aurad does not sandbox MCP servers: this one runs with the daemon user's rights"
        }
        "alwaysLoad" | "dev" | "watchPaths" | "metadata" | "settings" | "remote" | "source" => {
            "an editor setting with no meaning for a daemon"
        }
        _ => return None,
    })
}

/// The fields a server entry may have, for "valid fields: ..." messages.
pub(super) fn valid_fields(transport_key: &str, list: bool) -> String {
    let mut valid: Vec<&str> = Vec::new();
    if list {
        valid.push("name");
    }
    valid.push(transport_key);
    valid.extend(
        TIMEOUT_FIELDS
            .iter()
            .chain(&STDIO_FIELDS)
            .chain(&HTTP_FIELDS)
            .chain(&SWITCH_FIELDS),
    );
    let list: Vec<String> = valid.iter().map(|f| format!("`{f}`")).collect();
    list.join(", ")
}
