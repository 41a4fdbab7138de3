//! `tools.d/NAME.yaml`: tool plugins, a script or an HTTP endpoint of the
//! user's that becomes a tool. The raw serde shape (unknown fields refused),
//! its conversion into a validated [`PluginConfig`], and the loading of the
//! whole `tools.d` directory, reporting every problem of every file. May
//! depend on the rest of `config`, serde and jsonschema (to check that the
//! `parameters` schema compiles); never on `tools`. The checks of single
//! fields live in `plugins_fields.rs`, the unit tests in `plugins_tests.rs`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_yaml::Value;

use self::fields::{RawHttp, check_schema, command_argv, http_action, string_map, timeout_value};
use super::bounds::{Syntax, check_text};
use super::diag::{Diagnostic, locate};
use super::yaml_value::yaml_diagnostic;
use super::{EnvLookup, interp, read_interpolated, relative, yaml_files};
pub use crate::types::plugin::{ArgsIn, PLUGIN_DIR, PluginAction, PluginConfig};

/// How long a plugin may run when its file gives no `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPlugin {
    description: Option<String>,
    parameters: Option<Value>,
    command: Option<Value>,
    http: Option<RawHttp>,
    timeout: Option<Value>,
    env: Option<BTreeMap<String, Value>>,
}

/// Is `name` a valid tool name (`[A-Za-z0-9_-]{1,64}`)?
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Loads every `tools.d/*.yaml` (and `.yml`) under `root`. Plugins with
/// errors are left out; the diagnostics say why. No `tools.d` directory is
/// no plugins, not an error.
pub fn load_plugins(root: &Path, env: EnvLookup) -> (Vec<PluginConfig>, Vec<Diagnostic>) {
    let dir = root.join(PLUGIN_DIR);
    let mut diagnostics = Vec::new();
    let mut plugins = Vec::new();
    for (name, file) in yaml_files(root, PLUGIN_DIR, "tool", &mut diagnostics) {
        let rel = relative(root, &file);
        let mut name_ok = true;
        if !valid_tool_name(&name) {
            name_ok = false;
            diagnostics.push(Diagnostic::error(
                &rel,
                (0, 0),
                format!(
                    "tool name {name:?} (the file name) must match [A-Za-z0-9_-]{{1,64}}; rename the file, e.g. to {}.yaml",
                    suggest_name(&name)
                ),
            ));
        }
        let text = match read_interpolated(&file, &rel, env, interp::Escape::Yaml) {
            Ok(Some((text, _hash))) => text,
            Ok(None) => {
                diagnostics.push(Diagnostic::error(
                    &rel,
                    (0, 0),
                    "the file disappeared while loading",
                ));
                continue;
            }
            Err(diags) => {
                diagnostics.extend(diags);
                continue;
            }
        };
        let (plugin, diags) = parse_plugin(&name, &rel, &text);
        let mut diags = diags;
        if let Some(p) = &plugin {
            diags.extend(check_program(&dir, p));
        }
        diagnostics.extend(diags);
        if let Some(plugin) = plugin.filter(|_| name_ok) {
            plugins.push(plugin);
        }
    }
    (plugins, diagnostics)
}

fn suggest_name(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() { "my_tool".into() } else { s }
}

/// Warnings about a command's program file, which may still appear before
/// the tool is called: missing, not executable, or looked up in `PATH` while
/// a file of that name sits in `tools.d`.
fn check_program(dir: &Path, plugin: &PluginConfig) -> Vec<Diagnostic> {
    use std::os::unix::fs::PermissionsExt;
    let PluginAction::Command { argv, .. } = &plugin.action else {
        return Vec::new();
    };
    let program = &argv[0];
    let place = locate(&plugin.text, &["command"]);
    let warn = |msg: String| vec![Diagnostic::warning(&plugin.path, place, msg)];
    if !program.contains('/') {
        if dir.join(program).is_file() {
            return warn(format!(
                "`{program}` is looked up in PATH, not in {PLUGIN_DIR}/; write `./{program}` to run the file next to this one"
            ));
        }
        return Vec::new();
    }
    let file = dir.join(program);
    match std::fs::metadata(&file) {
        Err(_) => warn(format!(
            "the program {program:?} does not exist (looked for {}); the tool will fail until it does",
            Path::new(PLUGIN_DIR)
                .join(program.trim_start_matches("./"))
                .display()
        )),
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 == 0 => warn(format!(
            "the program {program:?} is not executable; run `chmod +x {}`",
            Path::new(PLUGIN_DIR)
                .join(program.trim_start_matches("./"))
                .display()
        )),
        Ok(_) => Vec::new(),
    }
}

/// Parses one plugin file's interpolated `text`. Returns the plugin when it
/// has no errors, and every diagnostic found.
pub fn parse_plugin(
    name: &str,
    path: &Path,
    text: &str,
) -> (Option<PluginConfig>, Vec<Diagnostic>) {
    let mut diags = Vec::new();
    if let Err(d) = check_text(path, text, Syntax::Yaml, 1) {
        return (None, vec![d]);
    }
    if text.trim().is_empty() || text.lines().all(|l| l.trim_start().starts_with('#')) {
        diags.push(Diagnostic::error(
            path,
            (1, 1),
            "the tool file is empty: it needs `description`, `parameters` and `command` or `http`",
        ));
        return (None, diags);
    }
    let raw: RawPlugin = match serde_yaml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => return (None, vec![yaml_diagnostic(path, text, &e)]),
    };
    let err = |keys: &[&str], msg: String| Diagnostic::error(path, locate(text, keys), msg);

    let description = raw.description.as_deref().map(str::trim).unwrap_or("");
    if description.is_empty() {
        diags.push(err(
            &["description"],
            "`description` is required: say in one sentence what the tool does, for the model"
                .into(),
        ));
    }
    let parameters = match &raw.parameters {
        None => {
            diags.push(err(
                &["parameters"],
                "`parameters` is required: a JSON Schema such as `{ type: object, properties: { city: { type: string } } }`".into(),
            ));
            None
        }
        Some(schema) => check_schema(schema)
            .map_err(|(keys, msg)| {
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                diags.push(err(&keys, msg));
            })
            .ok(),
    };
    let timeout = match &raw.timeout {
        None => Some(DEFAULT_TIMEOUT),
        Some(v) => match timeout_value(v) {
            Ok(d) if d.is_zero() => {
                diags.push(err(&["timeout"], "`timeout` must be more than 0".into()));
                None
            }
            Ok(d) => Some(d),
            Err(msg) => {
                diags.push(err(&["timeout"], format!("timeout: {msg}")));
                None
            }
        },
    };
    let action = match (&raw.command, &raw.http) {
        (Some(_), Some(_)) => {
            diags.push(err(
                &["http"],
                "give either `command` (run a program) or `http` (call a URL), not both; remove one".into(),
            ));
            None
        }
        (None, None) => {
            diags.push(Diagnostic::error(
                path,
                (1, 1),
                "the tool does nothing: add `command: [program, args...]` (run a program in tools.d/) or `http: { url: ... }` (call a URL)",
            ));
            None
        }
        (Some(command), None) => {
            let argv = command_argv(command).map_err(|m| diags.push(err(&["command"], m)));
            let env = string_map(raw.env.as_ref(), "env")
                .map_err(|(key, m)| diags.push(err(&["env", &key], m)));
            match (argv, env) {
                (Ok(argv), Ok(env)) => Some(PluginAction::Command { argv, env }),
                _ => None,
            }
        }
        (None, Some(http)) => {
            if raw.env.is_some() {
                diags.push(err(
                    &["env"],
                    "`env` applies to `command` tools only; for `http`, put values in `url` or `headers` (with ${VAR})".into(),
                ));
            }
            http_action(http, text, path, &mut diags)
        }
    };
    if diags.iter().any(Diagnostic::is_error) {
        return (None, diags);
    }
    match (parameters, timeout, action) {
        (Some(parameters), Some(timeout), Some(action)) => {
            let plugin = PluginConfig {
                name: name.to_string(),
                path: path.to_path_buf(),
                description: description.to_string(),
                parameters,
                timeout,
                action,
                text: text.to_string(),
            };
            (Some(plugin), diags)
        }
        _ => (None, diags),
    }
}

#[path = "plugins_fields.rs"]
mod fields;

#[cfg(test)]
#[path = "plugins_tests.rs"]
mod tests;
