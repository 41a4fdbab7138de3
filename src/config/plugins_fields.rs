//! The checks of single fields of a `tools.d/NAME.yaml` file, for
//! `plugins.rs`: the `parameters` schema, `timeout`, `command`, `env` and the
//! `http` block. Each returns the validated value or what is wrong (and
//! where); `plugins.rs` turns that into diagnostics.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use serde_yaml::Value;

use super::{ArgsIn, PluginAction};
use crate::config::diag::{Diagnostic, locate};
use crate::config::duration::parse_duration;
use crate::config::schema::json_schema;

const METHODS: &[&str] = &["GET", "POST", "PUT", "PATCH", "DELETE"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    method: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, Value>,
    send_as: Option<String>,
}

/// The schema as JSON, or the keys to point at and what is wrong.
pub(super) fn check_schema(schema: &Value) -> Result<serde_json::Value, (Vec<String>, String)> {
    let at_params = |msg: String| (vec!["parameters".to_string()], msg);
    let Value::Mapping(map) = schema else {
        return Err(at_params(
            "`parameters` must be a JSON Schema mapping with `type: object`, e.g. `{ type: object, properties: { city: { type: string } } }`".into(),
        ));
    };
    match map.get("type") {
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => {
            let shown = serde_yaml::to_string(other).unwrap_or_default();
            return Err((
                vec!["parameters".into(), "type".into()],
                format!(
                    "`parameters` must have `type: object` (the arguments are one JSON object), not `type: {}`; put the values under `properties`",
                    shown.trim()
                ),
            ));
        }
        None => {
            return Err(at_params(
                "`parameters` must have `type: object` (the arguments are one JSON object)".into(),
            ));
        }
    }
    json_schema(schema, "parameters")
}

/// A timeout written as a duration string or a number of seconds.
pub(super) fn timeout_value(v: &Value) -> Result<Duration, String> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .ok_or_else(|| format!("invalid duration {n}: use e.g. 10s or 2m")),
        Value::String(s) => parse_duration(s),
        _ => Err("use a duration such as 10s or 2m, or a number of seconds".into()),
    }
}

/// Strings, numbers and booleans as text; anything else is not a scalar.
fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

pub(super) fn command_argv(command: &Value) -> Result<Vec<String>, String> {
    let usage = "write `command` as a list such as [\"python3\", \"weather.py\"] or [\"./weather.sh\"], or as one program path";
    let argv = match command {
        Value::String(s) => vec![s.clone()],
        Value::Sequence(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                scalar_text(item).ok_or_else(|| format!("command[{i}] is not a string; {usage}"))
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(format!("`command` must be a list of strings; {usage}")),
    };
    match argv.first() {
        None => Err(format!("`command` is empty; {usage}")),
        Some(p) if p.trim().is_empty() => {
            Err(format!("the program (command[0]) is empty; {usage}"))
        }
        Some(_) => Ok(argv),
    }
}

/// A map of scalar values as strings, or the offending key and a message.
pub(super) fn string_map(
    map: Option<&BTreeMap<String, Value>>,
    field: &str,
) -> Result<BTreeMap<String, String>, (String, String)> {
    let mut out = BTreeMap::new();
    for (key, value) in map.into_iter().flatten() {
        let text = scalar_text(value).ok_or_else(|| {
            (
                key.clone(),
                format!("`{field}.{key}` must be a string (quote it)"),
            )
        })?;
        out.insert(key.clone(), text);
    }
    Ok(out)
}

pub(super) fn http_action(
    http: &RawHttp,
    text: &str,
    path: &Path,
    diags: &mut Vec<Diagnostic>,
) -> Option<PluginAction> {
    let mut err = |keys: &[&str], msg: String| {
        diags.push(Diagnostic::error(path, locate(text, keys), msg));
    };
    let mut ok = true;
    let method = http
        .method
        .as_deref()
        .unwrap_or("POST")
        .trim()
        .to_ascii_uppercase();
    if !METHODS.contains(&method.as_str()) {
        ok = false;
        err(
            &["http", "method"],
            format!(
                "http.method {method:?} is not supported; use one of {}",
                METHODS.join(", ")
            ),
        );
    }
    let url = http.url.as_deref().unwrap_or("").trim().to_string();
    if url.is_empty() {
        ok = false;
        err(
            &["http"],
            "`http.url` is required, e.g. `url: https://api.example.com/weather`".into(),
        );
    } else if !valid_url(&url) {
        ok = false;
        err(
            &["http", "url"],
            format!("http.url {url:?} must be an absolute http:// or https:// URL with a host"),
        );
    }
    let send_as = match http.send_as.as_deref().map(str::trim) {
        None if method == "GET" => ArgsIn::Query,
        None => ArgsIn::Body,
        Some("body") => ArgsIn::Body,
        Some("query") => ArgsIn::Query,
        Some(other) => {
            ok = false;
            err(
                &["http", "send_as"],
                format!(
                    "http.send_as {other:?} is not known; use `body` (JSON body) or `query` (query parameters)"
                ),
            );
            ArgsIn::Body
        }
    };
    let mut headers = BTreeMap::new();
    for (key, value) in &http.headers {
        let valid_key = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !valid_key {
            ok = false;
            err(
                &["http", "headers"],
                format!("header name {key:?} is not valid; use letters, digits and `-`"),
            );
            continue;
        }
        match scalar_text(value) {
            // Never show the value: it may be a secret.
            Some(v) if v.chars().any(|c| c.is_control() && c != '\t') => {
                ok = false;
                err(
                    &["http", "headers", key],
                    format!("the value of header `{key}` contains control characters; remove them"),
                );
            }
            Some(v) => {
                headers.insert(key.clone(), v);
            }
            None => {
                ok = false;
                err(
                    &["http", "headers", key],
                    format!("the value of header `{key}` must be a string (quote it)"),
                );
            }
        }
    }
    ok.then_some(PluginAction::Http {
        method,
        url,
        headers,
        send_as,
    })
}

fn valid_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    rest.is_some_and(|r| {
        let host = r.split(['/', '?', '#']).next().unwrap_or("");
        !host.is_empty()
            && !host.contains(char::is_whitespace)
            && !url.contains(char::is_whitespace)
    })
}
