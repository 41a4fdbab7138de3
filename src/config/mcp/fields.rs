//! The field-level half of `mcp.json` parsing: transport-specific fields
//! (`command`, `args`, `env`, `cwd`; `url`, `headers`), typed values and
//! durations, each problem reported at the value's place.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use super::json::{Member, Value};
use super::{HTTP_FIELDS, McpTransport, Parser, RESERVED_HEADERS, STDIO_FIELDS};
use crate::config::duration::{format_duration, parse_duration};

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
        let command = match fields.get("command") {
            None => {
                self.error(entry_at, format!("server `{name}` is a stdio server but has no `command`; add the program to run, e.g. \"command\": \"npx\""));
                None
            }
            Some(m) => self.string(m).and_then(|c| {
                if c.trim().is_empty() {
                    self.error(
                        m.value.offset,
                        "`command` is empty; name the program to run",
                    );
                    None
                } else if c.contains('/') && Path::new(&c).is_relative() {
                    Some(self.root.join(&c).to_string_lossy().into_owned())
                } else {
                    Some(c)
                }
            }),
        };
        let args = match fields.get("args") {
            None => Some(Vec::new()),
            Some(m) => self.string_list(m),
        };
        let env = match fields.get("env") {
            None => Some(BTreeMap::new()),
            Some(m) => self.string_map(m, "environment variable", |k| {
                !k.is_empty() && !k.contains(['=', '\0'])
            }),
        };
        let cwd = match fields.get("cwd") {
            None => Some(None),
            Some(m) => self.string(m).map(|c| Some(self.root.join(c))),
        };
        Some(McpTransport::Stdio {
            command: command?,
            args: args?,
            env: env?,
            cwd: cwd?,
        })
    }

    pub(super) fn http(
        &mut self,
        name: &str,
        entry_at: usize,
        fields: &BTreeMap<&str, &Member>,
    ) -> Option<McpTransport> {
        self.misplaced(name, fields, &STDIO_FIELDS, "http");
        let url = match fields.get("url") {
            None => {
                self.error(entry_at, format!("server `{name}` is an http server but has no `url`; add its streamable HTTP endpoint, e.g. \"url\": \"http://127.0.0.1:9000/mcp\""));
                None
            }
            Some(m) => self.string(m).and_then(|u| {
                let scheme_ok = u.starts_with("http://") || u.starts_with("https://");
                if scheme_ok && u.len() > "https://".len() && !u.contains(char::is_whitespace) {
                    Some(u)
                } else {
                    self.error(
                        m.value.offset,
                        format!("`url` {u:?} is not an http:// or https:// URL"),
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
                Value::String(s) => out.push(s.clone()),
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
                Value::String(s) => {
                    out.insert(entry.key.clone(), s.clone());
                }
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
