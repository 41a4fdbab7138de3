//! `otel:` in `aurad.yaml`: where OpenTelemetry traces go (an OTLP/HTTP
//! endpoint, its headers, the service name). Validated here with located
//! diagnostics; header values are secrets and never appear in a message or
//! in `Debug`. Depends on nothing of ours besides `config`'s diagnostics.

use std::collections::BTreeMap;
use std::path::Path;

use serde_yaml::Value;

use super::diag::{Diagnostic, locate};

/// The OTLP path of the traces signal, appended to a base endpoint.
pub const TRACES_PATH: &str = "/v1/traces";

/// Validated `otel:` settings.
#[derive(Clone, PartialEq, Eq)]
pub struct OtelSettings {
    /// The full URL spans are POSTed to (`.../v1/traces`).
    pub traces_endpoint: String,
    /// Extra HTTP headers (an API key, a tenant): secrets.
    pub headers: BTreeMap<String, String>,
    /// `service.name` of the exported resource; `None`: `OTEL_SERVICE_NAME`,
    /// else `aurad`.
    pub service_name: Option<String>,
}

impl std::fmt::Debug for OtelSettings {
    /// Header values are secrets: only their names are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtelSettings")
            .field("traces_endpoint", &self.traces_endpoint)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("service_name", &self.service_name)
            .finish()
    }
}

/// The traces URL for an OTLP base endpoint: `/v1/traces` is appended
/// unless the path already ends with it (as `OTEL_EXPORTER_OTLP_ENDPOINT`
/// is read).
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim().trim_end_matches('/');
    if base.ends_with(TRACES_PATH) {
        base.to_string()
    } else {
        format!("{base}{TRACES_PATH}")
    }
}

/// Parses the value of `otel:`; problems are pushed to `diags`, located in
/// `text` (the file at `path`), and give `None`.
pub fn parse_otel(
    value: &Value,
    path: &Path,
    text: &str,
    diags: &mut Vec<Diagnostic>,
) -> Option<OtelSettings> {
    let err = |keys: &[&str], msg: String| Diagnostic::error(path, locate(text, keys), msg);
    let Value::Mapping(map) = value else {
        diags.push(err(
            &["otel"],
            "`otel` must be a mapping, e.g. otel: { endpoint: \"http://localhost:4318\" }".into(),
        ));
        return None;
    };
    let before = diags.len();
    let mut endpoint = None;
    let mut headers = BTreeMap::new();
    let mut service_name = None;
    for (key, field) in map {
        let Some(key) = key.as_str() else {
            diags.push(err(&["otel"], "`otel` keys must be names".into()));
            continue;
        };
        match key {
            "endpoint" => match field.as_str().map(str::trim) {
                Some(url) if is_http_url(url) => endpoint = Some(url.to_string()),
                Some(url) => diags.push(err(
                    &["otel", "endpoint"],
                    format!(
                        "otel.endpoint {url:?} is not an http:// or https:// URL with a host, e.g. http://localhost:4318"
                    ),
                )),
                None => diags.push(err(
                    &["otel", "endpoint"],
                    "otel.endpoint must be a URL string, e.g. \"http://localhost:4318\"".into(),
                )),
            },
            "service_name" => match field.as_str().map(str::trim) {
                Some(name) if !name.is_empty() => service_name = Some(name.to_string()),
                _ => diags.push(err(
                    &["otel", "service_name"],
                    "otel.service_name must be a non-empty string".into(),
                )),
            },
            "headers" => parse_headers(field, &mut headers, &err, diags),
            other => diags.push(err(
                &["otel", other],
                format!(
                    "unknown field `otel.{other}`: expected `endpoint`, `headers` or `service_name`"
                ),
            )),
        }
    }
    if diags.len() > before {
        return None;
    }
    let Some(endpoint) = endpoint else {
        diags.push(err(
            &["otel"],
            "`otel` needs an `endpoint`, e.g. otel: { endpoint: \"http://localhost:4318\" }".into(),
        ));
        return None;
    };
    Some(OtelSettings {
        traces_endpoint: traces_url(&endpoint),
        headers,
        service_name,
    })
}

/// `otel.headers`: a mapping of header names to string values. Messages
/// name the header, never its value.
fn parse_headers(
    field: &Value,
    headers: &mut BTreeMap<String, String>,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
    diags: &mut Vec<Diagnostic>,
) {
    let Value::Mapping(map) = field else {
        diags.push(err(
            &["otel", "headers"],
            "otel.headers must be a mapping of header names to values, e.g. { x-api-key: \"${OTLP_KEY}\" }".into(),
        ));
        return;
    };
    for (name, value) in map {
        let Some(name) = name.as_str() else {
            diags.push(err(
                &["otel", "headers"],
                "otel.headers: header names must be strings".into(),
            ));
            continue;
        };
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            diags.push(err(
                &["otel", "headers", name],
                format!("otel.headers: {name:?} is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~)"),
            ));
            continue;
        }
        match value.as_str() {
            Some(v) if v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b) || b >= 0x80) => {
                headers.insert(name.to_ascii_lowercase(), v.to_string());
            }
            Some(_) => diags.push(err(
                &["otel", "headers", name],
                format!("otel.headers.{name}: the value holds a control character (a line break?); it is not shown because header values are secrets"),
            )),
            None => diags.push(err(
                &["otel", "headers", name],
                format!("otel.headers.{name} must be a string (quote it)"),
            )),
        }
    }
}

/// `tchar` of RFC 9110.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `http://` or `https://` followed by a host.
fn is_http_url(url: &str) -> bool {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    rest.is_some_and(|r| {
        let host = r.split(['/', '?', '#']).next().unwrap_or("");
        !host.is_empty() && !r.chars().any(char::is_whitespace)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Option<OtelSettings>, Vec<String>) {
        let raw: Value = serde_yaml::from_str(text).unwrap();
        let mut diags = Vec::new();
        let got = parse_otel(&raw["otel"], Path::new("aurad.yaml"), text, &mut diags);
        (got, diags.iter().map(|d| d.to_string()).collect())
    }

    #[test]
    fn endpoint_gets_the_traces_path_once() {
        let (got, d) = parse(
            "otel:\n  endpoint: http://127.0.0.1:4318/\n  headers: { X-Api-Key: s3cret }\n  service_name: nightly\n",
        );
        assert!(d.is_empty(), "{d:?}");
        let got = got.unwrap();
        assert_eq!(got.traces_endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(got.headers["x-api-key"], "s3cret");
        assert_eq!(got.service_name.as_deref(), Some("nightly"));
        assert!(!format!("{got:?}").contains("s3cret"));
        assert_eq!(
            traces_url("https://otlp.example/v1/traces"),
            "https://otlp.example/v1/traces"
        );
    }

    #[test]
    fn bad_fields_are_located_and_secrets_not_shown() {
        let text = "listen: 127.0.0.1:1\notel:\n  endpoint: localhost:4318\n  headers:\n    \"bad name\": x\n    auth: \"a\\nsecret-value\"\n  colour: red\n";
        let (got, d) = parse(text);
        assert!(got.is_none());
        assert!(
            d[0].starts_with("aurad.yaml:3:13: otel.endpoint \"localhost:4318\""),
            "{d:?}"
        );
        assert!(d[1].starts_with("aurad.yaml:5:"), "{d:?}");
        assert!(
            d[2].starts_with("aurad.yaml:6:12: otel.headers.auth"),
            "{d:?}"
        );
        assert!(d[3].contains("unknown field `otel.colour`"), "{d:?}");
        assert!(d.iter().all(|m| !m.contains("secret-value")), "{d:?}");
        let (_, d) = parse("otel: { service_name: x }\n");
        assert!(d[0].contains("needs an `endpoint`"), "{d:?}");
    }
}
