//! The project's MCP servers, read from the first of `mcp.json`,
//! `.mcp.json` (Claude Code) and `.vscode/mcp.json` (VS Code) in every
//! common dialect: aurad's `{"servers": [...]}` list, `mcpServers` (Claude
//! Desktop and Code, Cursor, Windsurf, Cline, Roo), VS Code's `servers`
//! object with `inputs`, and Zed's `context_servers`. String values may use
//! the dialects' variables ([`vars`]); editor-only fields are accepted and
//! ignored with a note ([`dialect`]). Every problem is reported at its
//! `file:line:column`, and a broken entry only leaves out that server.
//! The files may be JSONC, as VS Code and Zed write them: comments and
//! trailing commas are blanked out first ([`blank_jsonc`]). With none of
//! these files, other editors' files it does not read are named, with how
//! to use them ([`elsewhere`]).
//! Depends on `types` only (and its `config` siblings) and
//! `json-strip-comments`.

mod dialect;
mod elsewhere;
mod envfile;
mod fields;
mod json;
#[cfg(test)]
mod tests;
mod vars;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dialect::{Kind, SWITCH_FIELDS, transport_kind};
use json::{Member, Node, Value};

use super::EnvLookup;
use super::bounds::{self, Syntax, check_text};
use super::diag::{Diagnostic, offset_to_place};

pub use vars::input_variable;

/// Default bound on spawn + MCP handshake + tool listing.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default bound on one tool call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Where MCP servers are read from, relative to the project root: the first
/// of these that exists, and only that one.
pub const MCP_FILES: [&str; 3] = ["mcp.json", ".mcp.json", ".vscode/mcp.json"];

/// One MCP server declared in the project's MCP file.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: McpTransport,
    pub startup_timeout: Duration,
    pub call_timeout: Duration,
    /// The file the server is declared in, relative to the project root
    /// (one of [`MCP_FILES`]).
    pub source: PathBuf,
    /// Place of this server's entry in `source` (1-based).
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
        /// `envFile`'s variables, overridden by `env`'s.
        env: BTreeMap<String, String>,
        /// Where it runs: `cwd` resolved against the project root, or the
        /// project root.
        cwd: PathBuf,
        /// The `envFile` its variables were read from (resolved against
        /// the project root): a file the daemon reads as configuration,
        /// which tools may not change.
        env_file: Option<PathBuf>,
        /// aurad's `sandbox` field: the server's process confined as an
        /// agent's tools are (`none` by default: servers are shared).
        sandbox: crate::types::SandboxMode,
        /// The project root, which the sandbox protects.
        root: PathBuf,
    },
    Http {
        url: String,
        /// Sent with every request; values may hold secrets.
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

/// The MCP files present in the project, in the order they are looked for.
pub fn mcp_files_present(root: &Path) -> Vec<&'static str> {
    MCP_FILES
        .into_iter()
        .filter(|f| root.join(f).symlink_metadata().is_ok())
        .collect()
}

/// The MCP file servers are read from, if any.
pub fn mcp_file(root: &Path) -> Option<&'static str> {
    mcp_files_present(root).first().copied()
}

/// Loads the servers of the project's MCP file. No file: no servers, no
/// error. Servers with errors are left out; their diagnostics say why.
/// Another MCP file beside the one used is named in a warning.
pub fn load_mcp(root: &Path, env: EnvLookup) -> (Vec<McpServerConfig>, Vec<Diagnostic>) {
    let present = mcp_files_present(root);
    let Some(&used) = present.first() else {
        return (Vec::new(), elsewhere::other_editors_files(root));
    };
    let rel = Path::new(used);
    let mut diags = Vec::new();
    if present.len() > 1 {
        let ignored: Vec<String> = present[1..].iter().map(|f| format!("`{f}`")).collect();
        diags.push(Diagnostic::warning(
            rel,
            (0, 0),
            format!(
                "MCP servers are read from `{used}` only; {} {} ignored (aurad reads the first of {}): merge its servers into `{used}`, or delete it",
                ignored.join(" and "),
                if ignored.len() == 1 { "is" } else { "are" },
                MCP_FILES.join(", "),
            ),
        ));
    }
    let text = match bounds::read_bounded(&root.join(rel), rel)
        .and_then(|bytes| bytes.map(|b| bounds::decode(b, rel)).transpose())
    {
        Ok(Some(text)) => text,
        Ok(None) => return (Vec::new(), diags),
        Err(d) => {
            diags.push(d);
            return (Vec::new(), diags);
        }
    };
    let (servers, more) = parse_mcp_file(root, rel, &text, env);
    diags.extend(more);
    (servers, diags)
}

/// Parses the text of an `mcp.json` with no environment (every variable
/// unset).
pub fn parse_mcp(root: &Path, text: &str) -> (Vec<McpServerConfig>, Vec<Diagnostic>) {
    parse_mcp_file(root, Path::new(MCP_FILES[0]), text, &|_| None)
}

/// `text` with its JSONC comments (`//`, `/* */`) and trailing commas
/// replaced by spaces, byte for byte, so every place in the file stays
/// where it was; plain JSON comes back unchanged. A text the stripper
/// refuses is returned as it is, for the JSON reader to report.
pub fn blank_jsonc(text: &str) -> String {
    let mut blanked = text.to_string();
    match json_strip_comments::strip(&mut blanked) {
        Ok(()) => blanked,
        Err(_) => text.to_string(),
    }
}

/// Parses the text of the MCP file `file` (relative to `root`), reading
/// variables with `env`.
pub fn parse_mcp_file(
    root: &Path,
    file: &Path,
    text: &str,
    env: EnvLookup,
) -> (Vec<McpServerConfig>, Vec<Diagnostic>) {
    if let Err(d) = check_text(file, text, Syntax::Json, 1) {
        return (Vec::new(), vec![d]);
    }
    let blanked = blank_jsonc(text);
    let text = blanked.as_str();
    let mut p = Parser {
        text,
        root,
        file,
        env,
        inputs: BTreeMap::new(),
        diags: Vec::new(),
    };
    if let Err(e) = serde_json::from_str::<serde_json::Value>(text) {
        let message = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        let message = message.strip_suffix(&suffix).unwrap_or(&message);
        let hint = if text.trim().is_empty() {
            "; write `{\"mcpServers\": {}}` or delete the file"
        } else {
            "; fix the JSON syntax"
        };
        p.diags.push(Diagnostic::error(
            file,
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
    /// The file being read, relative to the root.
    file: &'a Path,
    env: EnvLookup<'a>,
    /// VS Code's `inputs`, by id.
    inputs: BTreeMap<String, vars::Input>,
    diags: Vec<Diagnostic>,
}

/// Which file shape an entry came from (the name of its transport key).
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// `servers: [...]`: `name` and `transport` keys.
    List,
    /// `{NAME: ...}` under `mcpServers`, `servers` or `context_servers`:
    /// `type` key.
    Map,
}

/// The top-level keys that hold the servers.
const SERVER_KEYS: [&str; 3] = ["mcpServers", "servers", "context_servers"];

impl Parser<'_> {
    fn error(&mut self, offset: usize, message: impl Into<String>) {
        let place = offset_to_place(self.text, offset);
        self.diags
            .push(Diagnostic::error(self.file, place, message));
    }

    fn warning(&mut self, offset: usize, message: impl Into<String>) {
        let place = offset_to_place(self.text, offset);
        self.diags
            .push(Diagnostic::warning(self.file, place, message));
    }

    fn document(&mut self, doc: &Node) -> Vec<McpServerConfig> {
        let Value::Object(members) = &doc.value else {
            self.error(
                doc.offset,
                format!(
                    "{} must be a JSON object such as {{\"mcpServers\": {{...}}}}, got {}",
                    self.file.display(),
                    doc.value.kind()
                ),
            );
            return Vec::new();
        };
        let mut chosen: Option<&Member> = None;
        for m in members {
            match m.key.as_str() {
                key if SERVER_KEYS.contains(&key) => match chosen {
                    Some(first) => self.error(
                        m.key_offset,
                        format!(
                            "both `{}` and `{}` are present; put every server under one of them",
                            first.key, m.key
                        ),
                    ),
                    None => chosen = Some(m),
                },
                "inputs" => self.inputs(m),
                "sandbox" => self.warning(
                    m.key_offset,
                    "`sandbox` (VS Code) is accepted and ignored: aurad does not sandbox MCP servers, they run with the daemon user's rights",
                ),
                "$schema" => {}
                "mcp" => self.error(
                    m.key_offset,
                    "unknown field `mcp`: `{\"mcp\": {\"servers\": {...}}}` is the shape of VS Code's settings.json; an MCP file holds the servers at its top: write `{\"servers\": {...}}` (what is inside `mcp`, one level up)",
                ),
                other => self.error(
                    m.key_offset,
                    format!("unknown field `{other}`; valid top-level fields: `mcpServers` (an object by name), `servers` (an object by name, or aurad's list), `context_servers` (Zed), `inputs` (VS Code)"),
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
                    "an object mapping server names to their settings (or aurad's array of server objects)"
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
            let name = if valid_name(&name) {
                name
            } else if name.is_empty() {
                self.error(
                    name_at,
                    "a server name is empty; name it (letters, digits, `_`, `-`)",
                );
                continue;
            } else {
                // Claude Desktop allows any name; a tool prefix cannot.
                let usable: String = name
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '-' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                self.warning(
                    name_at,
                    format!("server name {name:?} has characters tool names cannot: aurad calls it `{usable}` (its tools are `{usable}_<tool>`)"),
                );
                usable
            };
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

    /// VS Code's `inputs`: `[{"id": ..., "description": ..., "default": ...}]`.
    fn inputs(&mut self, m: &Member) {
        let Value::Array(items) = &m.value.value else {
            self.error(
                m.value.offset,
                format!(
                    "`inputs` must be an array of {{\"id\": ...}} objects, got {}",
                    m.value.value.kind()
                ),
            );
            return;
        };
        for item in items {
            let Value::Object(fields) = &item.value else {
                self.error(item.offset, "each input must be an object with an `id`");
                continue;
            };
            let text = |key: &str| {
                fields
                    .iter()
                    .find(|f| f.key == key)
                    .and_then(|f| match &f.value.value {
                        Value::String(s) => Some(s.clone()),
                        _ => None,
                    })
            };
            match text("id") {
                Some(id) => {
                    let input = vars::Input {
                        description: text("description"),
                        default: text("default"),
                    };
                    self.inputs.insert(id, input);
                }
                None => self.error(item.offset, "this input has no string `id`; add `\"id\": \"...\"`, the name `${input:...}` uses"),
            }
        }
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

    /// `Some(true)` when the entry is switched off (`disabled: true` or
    /// `enabled: false`), after a note saying it is skipped.
    fn switched_off(&mut self, name: &str, members: &[Member]) -> bool {
        for m in members {
            if !SWITCH_FIELDS.contains(&m.key.as_str()) {
                continue;
            }
            match (&m.value.value, m.key.as_str()) {
                (Value::Bool(true), "disabled") | (Value::Bool(false), "enabled") => {
                    let value = !matches!(m.key.as_str(), "enabled");
                    self.warning(
                        m.key_offset,
                        format!(
                            "server `{name}` is switched off (`\"{}\": {value}`): skipped",
                            m.key
                        ),
                    );
                    return true;
                }
                (Value::Bool(_), _) => {}
                (other, key) => self.error(
                    m.value.offset,
                    format!("`{key}` must be true or false, got {}", other.kind()),
                ),
            }
        }
        false
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
        let before = self.diags.len();
        if self.switched_off(&name, members) {
            return None;
        }
        let transport_keys: &[&str] = match shape {
            Shape::List => &["transport"],
            // `transportType`: Cline's older name for it.
            Shape::Map => &["type", "transportType"],
        };
        let mut fields: BTreeMap<&str, &Member> = BTreeMap::new();
        for m in members {
            let key = m.key.as_str();
            let used = (shape == Shape::List && key == "name")
                || transport_keys.contains(&key)
                || dialect::TIMEOUT_FIELDS.contains(&key)
                || dialect::STDIO_FIELDS.contains(&key)
                || dialect::HTTP_FIELDS.contains(&key)
                || SWITCH_FIELDS.contains(&key);
            if used {
                if fields.insert(key, m).is_some() {
                    self.error(
                        m.key_offset,
                        format!("field `{key}` appears twice in server `{name}`; keep one"),
                    );
                }
            } else if key == "description" {
                // A note for people (Claude Code's `.mcp.json` has one per
                // server): nothing to use, nothing to warn about.
            } else if let Some(why) = dialect::ignored(key) {
                self.warning(
                    m.key_offset,
                    format!("server `{name}`: `{key}` is accepted and ignored: {why}"),
                );
            } else {
                self.error(
                    m.key_offset,
                    format!(
                        "unknown field `{key}` in server `{name}`; valid fields: {}",
                        dialect::valid_fields(transport_keys[0], shape == Shape::List)
                    ),
                );
            }
        }
        let kind = self.kind(&name, entry_at, transport_keys, &fields, members);
        let startup_timeout = self.duration(&fields, "startup_timeout", DEFAULT_STARTUP_TIMEOUT);
        let call_timeout = self.duration(&fields, "call_timeout", DEFAULT_CALL_TIMEOUT);
        let transport = match kind? {
            Kind::Stdio => self.stdio(&name, entry_at, &fields),
            Kind::Http => self.http(&name, entry_at, &fields),
        };
        if self.diags[before..].iter().any(Diagnostic::is_error) {
            return None;
        }
        let (line, column) = offset_to_place(self.text, entry_at);
        Some(McpServerConfig {
            name,
            transport: transport?,
            startup_timeout,
            call_timeout,
            source: self.file.to_path_buf(),
            line,
            column,
        })
    }

    /// The transport of an entry: its `type`, else inferred from `command`
    /// or a URL.
    fn kind(
        &mut self,
        name: &str,
        entry_at: usize,
        transport_keys: &[&str],
        fields: &BTreeMap<&str, &Member>,
        members: &[Member],
    ) -> Option<Kind> {
        let typed: Vec<&&Member> = transport_keys
            .iter()
            .filter_map(|k| fields.get(k))
            .collect();
        if let [first, second, ..] = typed[..] {
            self.error(
                second.key_offset,
                format!(
                    "server `{name}` has both `{}` and `{}`; keep `{}`",
                    first.key, second.key, first.key
                ),
            );
            return None;
        }
        if let Some(m) = typed.first() {
            return match &m.value.value {
                Value::String(s) => match transport_kind(s, &m.key, name) {
                    Ok(kind) => Some(kind),
                    Err(message) => {
                        self.error(m.value.offset, message);
                        None
                    }
                },
                other => {
                    self.error(
                        m.value.offset,
                        format!(
                            "`{}` must be a string (\"stdio\" or \"http\"), got {}",
                            m.key,
                            other.kind()
                        ),
                    );
                    None
                }
            };
        }
        let url = fields.get("url").or_else(|| fields.get("serverUrl"));
        match (fields.get("command"), url) {
            (Some(_), None) => Some(Kind::Stdio),
            (None, Some(_)) => Some(Kind::Http),
            (Some(_), Some(u)) => {
                self.error(u.key_offset, format!("server `{name}` has both `command` and `{}`; keep `command` for a local process or `{}` for an HTTP server", u.key, u.key));
                None
            }
            (None, None) if members.iter().any(|m| m.key == "settings") => {
                self.error(entry_at, format!("server `{name}` has only `settings`: it is a Zed extension server, which only Zed can run; give it a `command` (and `args`) to run it as a stdio server"));
                None
            }
            (None, None) => {
                self.error(entry_at, format!("server `{name}` needs `command` (a local stdio server) or `url` (an HTTP server)"));
                None
            }
        }
    }
}

/// Server names prefix tool names, so they keep to `[A-Za-z0-9_-]+`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
