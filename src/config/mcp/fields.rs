//! The field-level half of MCP file parsing: transport-specific fields
//! (`command` (also Zed's `{path, args, env}`), `args`, `env`, `envFile`,
//! `cwd`; `url` or `serverUrl`, `headers`), typed values with their
//! variables expanded, and durations, each problem reported at the value's
//! place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::dialect::{HTTP_FIELDS, STDIO_FIELDS};
use super::json::{Member, Value};
use super::{McpTransport, Parser, RESERVED_HEADERS};
use crate::config::duration::{format_duration, parse_duration};
use crate::types::SandboxMode;

impl Parser<'_> {
    pub(super) fn misplaced(
        &mut self,
        name: &str,
        fields: &BTreeMap<&str, &Member>,
        keys: &[&str],
        is: &str,
    ) {
        for key in keys {
            if let Some(m) = fields.get(key) {
                let (hint, other) = if is == "stdio" {
                    (
                        "remove it, or make the server an http server with `url`",
                        "http",
                    )
                } else {
                    (
                        "remove it, or make the server a stdio server with `command`",
                        "stdio",
                    )
                };
                self.error(
                    m.key_offset,
                    format!("`{key}` is for {other} servers, but server `{name}` is {is}; {hint}"),
                );
            }
        }
    }

    pub(super) fn stdio(
        &mut self,
        name: &str,
        entry_at: usize,
        fields: &BTreeMap<&str, &Member>,
    ) -> Option<McpTransport> {
        self.misplaced(name, fields, &HTTP_FIELDS, "stdio");
        let (command, zed_args, zed_env) = match fields.get("command") {
            None => {
                self.error(entry_at, format!("server `{name}` is a stdio server but has no `command`; add the program to run, e.g. \"command\": \"npx\""));
                return None;
            }
            // Zed's older form: "command": {"path": ..., "args": [...], "env": {...}}
            Some(m) if matches!(m.value.value, Value::Object(_)) => {
                self.zed_command(name, m, fields)?
            }
            Some(m) => (self.expanded_string(m), None, None),
        };
        let command = command.and_then(|(c, m)| {
            if c.trim().is_empty() {
                self.error(m, "`command` is empty; name the program to run");
                None
            } else if c.contains('/') && Path::new(&c).is_relative() {
                Some(self.root.join(&c).to_string_lossy().into_owned())
            } else {
                Some(c)
            }
        });
        let args = match zed_args.or_else(|| fields.get("args").copied()) {
            None => Some(Vec::new()),
            Some(m) => self.string_list(m),
        };
        let (mut env, env_file) = match fields.get("envFile") {
            None => (Some(BTreeMap::new()), None),
            Some(m) => match self.env_file(m) {
                Some((path, vars)) => (Some(vars), Some(path)),
                None => (None, None),
            },
        };
        match zed_env.or_else(|| fields.get("env").copied()) {
            None => {}
            Some(m) => match (self.env_map(m), &mut env) {
                (Some(vars), Some(env)) => env.extend(vars),
                _ => env = None,
            },
        }
        // Without `cwd`, the server runs in the project root (as editors
        // run a project's `.mcp.json` servers), so relative paths in `args`
        // mean the same whatever folder `aurad` was started from.
        let cwd = match fields.get("cwd") {
            None => Some(self.root.to_path_buf()),
            Some(m) => self.expanded_string(m).map(|(c, _)| self.root.join(c)),
        };
        let sandbox = match fields.get("sandbox") {
            None => Some(SandboxMode::None),
            Some(m) => self.sandbox_mode(name, m),
        };
        Some(McpTransport::Stdio {
            command: command?,
            args: args?,
            env: env?,
            cwd: cwd?,
            env_file,
            sandbox: sandbox?,
            root: self.root.to_path_buf(),
        })
    }

    /// Zed's `"command": {"path", "args", "env"}`: the command (with the
    /// offset of its value) and the `args` and `env` members.
    #[allow(
        clippy::type_complexity,
        reason = "the command, its args and its env, as documented above"
    )]
    fn zed_command<'m>(
        &mut self,
        name: &str,
        m: &'m Member,
        fields: &BTreeMap<&str, &Member>,
    ) -> Option<(
        Option<(String, usize)>,
        Option<&'m Member>,
        Option<&'m Member>,
    )> {
        let Value::Object(inner) = &m.value.value else {
            return None;
        };
        let mut path = None;
        let (mut args, mut env) = (None, None);
        for f in inner {
            match f.key.as_str() {
                "path" => path = Some(f),
                "args" => args = Some(f),
                "env" => env = Some(f),
                other => self.error(
                    f.key_offset,
                    format!("unknown field `{other}` in the `command` of server `{name}`; valid fields: `path`, `args`, `env`"),
                ),
            }
        }
        for (inner, key) in [(args, "args"), (env, "env")] {
            if let (Some(_), Some(outer)) = (inner, fields.get(key)) {
                self.error(
                    outer.key_offset,
                    format!("server `{name}` gives `{key}` both inside `command` and beside it; keep one"),
                );
            }
        }
        let Some(path) = path else {
            self.error(
                m.value.offset,
                format!(
                    "the `command` object of server `{name}` has no `path`; add the program to run"
                ),
            );
            return None;
        };
        Some((self.expanded_string(path), args, env))
    }

    /// `envFile`: read relative to the project root.
    /// The `envFile` (resolved) and its variables.
    fn env_file(&mut self, m: &Member) -> Option<(PathBuf, BTreeMap<String, String>)> {
        let (shown, _) = self.expanded_string(m)?;
        let path = self.root.join(&shown);
        match super::envfile::read_env_file(&path, &shown) {
            Ok(vars) => Some((path, vars)),
            Err(message) => {
                self.error(m.value.offset, message);
                None
            }
        }
    }

    pub(super) fn http(
        &mut self,
        name: &str,
        entry_at: usize,
        fields: &BTreeMap<&str, &Member>,
    ) -> Option<McpTransport> {
        self.misplaced(name, fields, &STDIO_FIELDS, "http");
        if let (Some(_), Some(m)) = (fields.get("url"), fields.get("serverUrl")) {
            self.error(
                m.key_offset,
                format!("server `{name}` has both `url` and `serverUrl`; keep one"),
            );
            return None;
        }
        let url = match fields.get("url").or_else(|| fields.get("serverUrl")) {
            None => {
                self.error(entry_at, format!("server `{name}` is an http server but has no `url`; add its streamable HTTP endpoint, e.g. \"url\": \"http://127.0.0.1:9000/mcp\""));
                None
            }
            Some(m) => self.expanded_string(m).and_then(|(u, at)| {
                let scheme_ok = u.starts_with("http://") || u.starts_with("https://");
                if scheme_ok && u.len() > "https://".len() && !u.contains(char::is_whitespace) {
                    Some(u)
                } else {
                    self.error(
                        at,
                        format!("`{}` {u:?} is not an http:// or https:// URL", m.key),
                    );
                    None
                }
            }),
        };
        let headers = match fields.get("headers") {
            None => Some(BTreeMap::new()),
            Some(m) => self.string_map(m, "header", valid_header_name),
        };
        if let (Some(m), Some(headers)) = (fields.get("headers"), &headers) {
            for (key, value) in headers {
                if RESERVED_HEADERS.contains(&key.to_ascii_lowercase().as_str()) {
                    self.error(
                        m.value.offset,
                        format!("header `{key}` is set by the MCP transport itself; remove it"),
                    );
                } else if value.chars().any(|c| c.is_control() && c != '\t') {
                    self.error(
                        m.value.offset,
                        format!("the value of header `{key}` contains control characters"),
                    );
                }
            }
        }
        Some(McpTransport::Http {
            url: url?,
            headers: headers?,
        })
    }

    /// A string value with its variables expanded, and the offset of the
    /// value.
    fn expanded_string(&mut self, m: &Member) -> Option<(String, usize)> {
        let raw = self.string(m)?;
        self.expand(m.value.offset, &raw)
            .map(|s| (s, m.value.offset))
    }

    /// `value` (a JSON string starting at `offset`) with its variables
    /// expanded; an error points at the reference that failed.
    fn expand(&mut self, offset: usize, value: &str) -> Option<String> {
        let vars = super::vars::Vars {
            env: self.env,
            root: self.root,
            inputs: &self.inputs,
        };
        match vars.expand(value) {
            Ok(expanded) => Some(expanded),
            Err((at, message)) => {
                // Exact when nothing before the reference is escaped.
                let raw = self.text.get(offset + 1..).unwrap_or("");
                let exact = raw.get(..at).is_some_and(|before| !before.contains('\\'))
                    && raw.get(at..).is_some_and(|r| r.starts_with('$'));
                self.error(if exact { offset + 1 + at } else { offset }, message);
                None
            }
        }
    }

    /// `env`: strings (variables expanded), numbers and booleans (written
    /// as text); a `null` is left out with a note.
    fn env_map(&mut self, m: &Member) -> Option<BTreeMap<String, String>> {
        let Value::Object(members) = &m.value.value else {
            return self.string_map(m, "environment variable", valid_env_name);
        };
        let mut strings = Vec::new();
        let mut out = BTreeMap::new();
        for entry in members {
            match &entry.value.value {
                Value::Number(n) if valid_env_name(&entry.key) => {
                    out.insert(entry.key.clone(), format_number(*n));
                }
                Value::Bool(b) if valid_env_name(&entry.key) => {
                    out.insert(entry.key.clone(), b.to_string());
                }
                Value::Null => self.warning(
                    entry.value.offset,
                    format!(
                        "`{}` is null: left out of the server's environment",
                        entry.key
                    ),
                ),
                _ => strings.push(entry.clone()),
            }
        }
        let only_strings = Member {
            key: m.key.clone(),
            key_offset: m.key_offset,
            value: super::json::Node {
                offset: m.value.offset,
                value: Value::Object(strings),
            },
        };
        let strings = self.string_map(&only_strings, "environment variable", valid_env_name)?;
        out.extend(strings);
        Some(out)
    }

    /// `sandbox`: one of the modes an agent's `sandbox:` takes.
    fn sandbox_mode(&mut self, name: &str, m: &Member) -> Option<SandboxMode> {
        let text = self.string(m)?;
        let found = SandboxMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == text);
        if found.is_none() {
            let modes: Vec<&str> = SandboxMode::ALL.iter().map(|mode| mode.as_str()).collect();
            self.error(
                m.value.offset,
                format!(
                    "server `{name}`: `sandbox` is {text:?}; use one of {}",
                    modes.join(", ")
                ),
            );
        }
        found
    }

    pub(super) fn string(&mut self, m: &Member) -> Option<String> {
        match &m.value.value {
            Value::String(s) => Some(s.clone()),
            other => {
                self.error(
                    m.value.offset,
                    format!("`{}` must be a string, got {}", m.key, other.kind()),
                );
                None
            }
        }
    }

    pub(super) fn string_list(&mut self, m: &Member) -> Option<Vec<String>> {
        let Value::Array(items) = &m.value.value else {
            self.error(
                m.value.offset,
                format!(
                    "`{}` must be an array of strings, got {}",
                    m.key,
                    m.value.value.kind()
                ),
            );
            return None;
        };
        let mut out = Vec::new();
        let mut ok = true;
        for item in items {
            match &item.value {
                Value::String(s) => match self.expand(item.offset, s) {
                    Some(value) => out.push(value),
                    None => ok = false,
                },
                other => {
                    self.error(
                        item.offset,
                        format!(
                            "`{}` must contain only strings, got {}; quote it",
                            m.key,
                            other.kind()
                        ),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    pub(super) fn string_map(
        &mut self,
        m: &Member,
        what: &str,
        valid_key: fn(&str) -> bool,
    ) -> Option<BTreeMap<String, String>> {
        let Value::Object(members) = &m.value.value else {
            self.error(
                m.value.offset,
                format!(
                    "`{}` must be an object of {what} names to string values, got {}",
                    m.key,
                    m.value.value.kind()
                ),
            );
            return None;
        };
        let mut out = BTreeMap::new();
        let mut ok = true;
        for entry in members {
            if !valid_key(&entry.key) {
                self.error(
                    entry.key_offset,
                    format!("{:?} is not a valid {what} name", entry.key),
                );
                ok = false;
            }
            match &entry.value.value {
                Value::String(s) => match self.expand(entry.value.offset, s) {
                    Some(value) => {
                        out.insert(entry.key.clone(), value);
                    }
                    None => ok = false,
                },
                other => {
                    self.error(
                        entry.value.offset,
                        format!(
                            "the value of {what} `{}` must be a string, got {}; quote it",
                            entry.key,
                            other.kind()
                        ),
                    );
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    pub(super) fn duration(
        &mut self,
        fields: &BTreeMap<&str, &Member>,
        key: &str,
        default: Duration,
    ) -> Duration {
        let Some(m) = fields.get(key) else {
            return default;
        };
        let parsed = match &m.value.value {
            Value::String(s) => parse_duration(s),
            Value::Number(n) if n.is_finite() && *n >= 0.0 && *n < 1e9 => {
                Ok(Duration::from_secs_f64(*n))
            }
            other => Err(format!(
                "must be a duration such as \"30s\" or a number of seconds, got {}",
                other.kind()
            )),
        };
        match parsed {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                self.error(
                    m.value.offset,
                    format!(
                        "`{key}` must be more than zero (default {})",
                        format_duration(default)
                    ),
                );
                default
            }
            Err(e) => {
                self.error(m.value.offset, format!("`{key}`: {e}"));
                default
            }
        }
    }
}

/// An HTTP header name: one RFC 9110 token.
fn valid_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

/// An environment variable name a process can be given.
fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// A JSON number as an environment value: `8080`, not `8080.0`.
fn format_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        n.to_string()
    }
}
