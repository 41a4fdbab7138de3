//! `mcp.json`: the MCP servers a project uses. Reads both accepted shapes
//! (`{"servers": [...]}` and `{"mcpServers": {NAME: ...}}`; a `servers`
//! object keyed by name, as VS Code writes it, is read like `mcpServers`),
//! interpolates `${ENV}` inside strings, and reports every problem with its
//! `mcp.json:line:column`. Depends on `types` only (and its `config` siblings).

mod fields;
mod json;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use json::{Member, Node, Value};

use super::bounds::{Syntax, check_text};
use super::diag::{Diagnostic, offset_to_place};
use super::interp::Escape;
use super::{EnvLookup, read_interpolated};

/// Default bound on spawn + MCP handshake + tool listing.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound on one tool call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// One MCP server declared in `mcp.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: McpTransport,
    pub startup_timeout: Duration,
    pub call_timeout: Duration,
    /// Place of this server's entry in `mcp.json` (1-based).
    pub line: usize,
    pub column: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    Stdio {
        /// As written, except that a relative path with a `/` is resolved
        /// against the project root; a bare name is looked up on `PATH`.
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        /// Resolved against the project root.
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// Headers the MCP HTTP transport sets itself; a config may not override them.
pub const RESERVED_HEADERS: [&str; 4] = [
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
];

const FILE: &str = "mcp.json";
const TIMEOUT_FIELDS: [&str; 2] = ["startup_timeout", "call_timeout"];
const STDIO_FIELDS: [&str; 4] = ["command", "args", "env", "cwd"];
const HTTP_FIELDS: [&str; 2] = ["url", "headers"];

/// Loads `mcp.json` from the project root. No file: no servers, no error.
/// Servers with errors are left out; their diagnostics say why.
pub fn load_mcp(root: &Path, env: EnvLookup) -> (Vec<McpServerConfig>, Vec<Diagnostic>) {
    let rel = Path::new(FILE);
    match read_interpolated(&root.join(FILE), rel, env, Escape::JsonString) {
        Ok(None) => (Vec::new(), Vec::new()),
        Ok(Some((text, _hash))) => parse_mcp(root, &text),
        Err(diags) => (Vec::new(), diags),
    }
}

/// Parses the (already interpolated) text of `mcp.json`.
pub fn parse_mcp(root: &Path, text: &str) -> (Vec<McpServerConfig>, Vec<Diagnostic>) {
    let mut p = Parser {
        text,
        root,
        diags: Vec::new(),
    };
    if let Err(d) = check_text(Path::new(FILE), text, Syntax::Json, 1) {
        return (Vec::new(), vec![d]);
    }
    if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
        let message = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = message.strip_suffix(&suffix).unwrap_or(&message);
        let hint = if text.trim().is_empty() {
            "; write `{\"mcpServers\": {}}` or delete the file"
        } else {
            "; fix the JSON syntax (no trailing commas or comments)"
        };
        p.diags.push(Diagnostic::error(
            Path::new(FILE),
            (e.line().max(1), e.column().max(1)),
            format!("invalid JSON: {message}{hint}"),
        ));
        return (Vec::new(), p.diags);
    }
    let Some(doc) = json::parse(text) else {
        p.error(0, "cannot read the JSON document (too deeply nested?)");
        return (Vec::new(), p.diags);
    };
    let servers = p.document(&doc);
    p.diags.sort_by_key(|d| (d.line, d.column));
    (servers, p.diags)
}

struct Parser<'a> {
    text: &'a str,
    root: &'a Path,
    diags: Vec<Diagnostic>,
}

/// Which file shape an entry came from (the name of its transport key).
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// `servers: [...]`: `name` and `transport` keys.
    List,
    /// `mcpServers: {NAME: ...}`: `type` key.
    Map,
}

impl Parser<'_> {
    fn error(&mut self, offset: usize, message: impl Into<String>) {
        let place = offset_to_place(self.text, offset);
        self.diags
            .push(Diagnostic::error(Path::new(FILE), place, message));
    }

    fn document(&mut self, doc: &Node) -> Vec<McpServerConfig> {
        let Value::Object(members) = &doc.value else {
            self.error(
                doc.offset,
                format!(
                    "mcp.json must be a JSON object such as {{\"mcpServers\": {{...}}}}, got {}",
                    doc.value.kind()
                ),
            );
            return Vec::new();
        };
        let mut chosen: Option<&Member> = None;
        for m in members {
            match m.key.as_str() {
                "servers" | "mcpServers" => match chosen {
                    Some(first) => self.error(
                        m.key_offset,
                        format!(
                            "both `{}` and `{}` are present; put every server under one of them",
                            first.key, m.key
                        ),
                    ),
                    None => chosen = Some(m),
                },
                "$schema" => {}
                other => self.error(
                    m.key_offset,
                    format!("unknown field `{other}`; valid top-level fields: `servers` (a list) or `mcpServers` (an object by name)"),
                ),
            }
        }
        let Some(list) = chosen else {
            return Vec::new();
        };
        // (name, offset of the entry, offset of the name, Shape, fields)
        let mut entries: Vec<(String, usize, usize, Shape, &Node)> = Vec::new();
        match (&list.value.value, list.key.as_str()) {
            (Value::Array(items), "servers") => {
                for item in items {
                    if let Some((name, at)) = self.list_entry_name(item) {
                        entries.push((name, item.offset, at, Shape::List, item));
                    }
                }
            }
            (Value::Object(named), _) => {
                for m in named {
                    entries.push((
                        m.key.clone(),
                        m.key_offset,
                        m.key_offset,
                        Shape::Map,
                        &m.value,
                    ));
                }
            }
            (other, key) => {
                let want = if key == "servers" {
                    "an array of server objects"
                } else {
                    "an object mapping server names to their settings"
                };
                self.error(
                    list.value.offset,
                    format!("`{key}` must be {want}, got {}", other.kind()),
                );
                return Vec::new();
            }
        }
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        let mut servers = Vec::new();
        for (name, entry_at, name_at, shape, node) in entries {
            if !valid_name(&name) {
                self.error(
                    name_at,
                    format!("server name {name:?} must match [A-Za-z0-9_-]+ (it prefixes tool names); rename it"),
                );
                continue;
            }
            if let Some(first) = seen.get(&name) {
                let (line, _) = offset_to_place(self.text, *first);
                self.error(
                    name_at,
                    format!("server name `{name}` is used twice (first on line {line}); rename or remove one"),
                );
                continue;
            }
            seen.insert(name.clone(), name_at);
            if let Some(server) = self.server(name, entry_at, shape, node) {
                servers.push(server);
            }
        }
        servers
    }

    /// The `name` of a `servers` list entry, or an error.
    fn list_entry_name(&mut self, item: &Node) -> Option<(String, usize)> {
        let Value::Object(members) = &item.value else {
            self.error(
                item.offset,
                format!(
                    "each entry of `servers` must be an object with `name`, `transport`, ..., got {}",
                    item.value.kind()
                ),
            );
            return None;
        };
        match members.iter().find(|m| m.key == "name") {
            Some(Member {
                value:
                    Node {
                        value: Value::String(name),
                        offset,
                    },
                ..
            }) => Some((name.clone(), *offset)),
            Some(m) => {
                self.error(
                    m.value.offset,
                    format!("`name` must be a string, got {}", m.value.value.kind()),
                );
                None
            }
            None => {
                self.error(
                    item.offset,
                    "this server has no `name`; add `\"name\": \"...\"` (letters, digits, `_`, `-`)",
                );
                None
            }
        }
    }

    fn server(
        &mut self,
        name: String,
        entry_at: usize,
        shape: Shape,
        node: &Node,
    ) -> Option<McpServerConfig> {
        let Value::Object(members) = &node.value else {
            self.error(
                node.offset,
                format!(
                    "server `{name}` must be an object with `command` or `url`, got {}",
                    node.value.kind()
                ),
            );
            return None;
        };
        let errors_before = self.diags.len();
        let transport_key = if shape == Shape::List {
            "transport"
        } else {
            "type"
        };
        let mut fields: BTreeMap<&str, &Member> = BTreeMap::new();
        for m in members {
            let key = m.key.as_str();
            let known = (shape == Shape::List && key == "name")
                || key == transport_key
                || TIMEOUT_FIELDS.contains(&key)
                || STDIO_FIELDS.contains(&key)
                || HTTP_FIELDS.contains(&key);
            if !known {
                let mut valid: Vec<&str> = Vec::new();
                if shape == Shape::List {
                    valid.push("name");
                }
                valid.push(transport_key);
                valid.extend(
                    TIMEOUT_FIELDS
                        .iter()
                        .chain(&STDIO_FIELDS)
                        .chain(&HTTP_FIELDS),
                );
                let list: Vec<String> = valid.iter().map(|f| format!("`{f}`")).collect();
                self.error(
                    m.key_offset,
                    format!(
                        "unknown field `{key}` in server `{name}`; valid fields: {}",
                        list.join(", ")
                    ),
                );
            } else if fields.insert(key, m).is_some() {
                self.error(
                    m.key_offset,
                    format!("field `{key}` appears twice in server `{name}`; keep one"),
                );
            }
        }
        let kind = match fields.get(transport_key) {
            Some(m) => {
                match &m.value.value {
                    Value::String(s) => match s.as_str() {
                        "stdio" => Some(Kind::Stdio),
                        "http" | "streamable-http" | "streamableHttp" => Some(Kind::Http),
                        "sse" => {
                            self.error(m.value.offset, format!("server `{name}`: the legacy `sse` transport is not supported; point `url` at the server's streamable HTTP endpoint and use `\"{transport_key}\": \"http\"`"));
                            None
                        }
                        other => {
                            self.error(m.value.offset, format!("server `{name}`: unknown {transport_key} {other:?}; use \"stdio\" or \"http\""));
                            None
                        }
                    },
                    other => {
                        self.error(m.value.offset, format!("`{transport_key}` must be a string (\"stdio\" or \"http\"), got {}", other.kind()));
                        None
                    }
                }
            }
            None => match (fields.get("command"), fields.get("url")) {
                (Some(_), None) => Some(Kind::Stdio),
                (None, Some(_)) => Some(Kind::Http),
                (Some(_), Some(u)) => {
                    self.error(u.key_offset, format!("server `{name}` has both `command` and `url`; keep `command` for a local process or `url` for an HTTP server"));
                    None
                }
                (None, None) => {
                    self.error(entry_at, format!("server `{name}` needs `command` (a local stdio server) or `url` (an HTTP server)"));
                    None
                }
            },
        };
        let startup_timeout = self.duration(&fields, "startup_timeout", DEFAULT_STARTUP_TIMEOUT);
        let call_timeout = self.duration(&fields, "call_timeout", DEFAULT_CALL_TIMEOUT);
        let transport = match kind? {
            Kind::Stdio => self.stdio(&name, entry_at, &fields),
            Kind::Http => self.http(&name, entry_at, &fields),
        };
        if self.diags.len() > errors_before {
            return None;
        }
        let (line, column) = offset_to_place(self.text, entry_at);
        Some(McpServerConfig {
            name,
            transport: transport?,
            startup_timeout,
            call_timeout,
            line,
            column,
        })
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Stdio,
    Http,
}

/// Server names prefix tool names, so they keep to `[A-Za-z0-9_-]+`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
