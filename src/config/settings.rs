//! `aurad.yaml`: optional project settings (providers, database). Every field
//! has a default; fields of later issues are refused, not ignored.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_yaml::Value;

use super::agent::yaml_diagnostic;
use super::diag::{Diagnostic, locate};
use super::duration::duration_value;

pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    #[serde(default)]
    providers: BTreeMap<String, RawProvider>,
    database: Option<String>,
    listen: Option<String>,
    max_concurrent_runs: Option<usize>,
    shutdown_grace: Option<Value>,
    prices: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProvider {
    kind: String,
    base_url: Option<String>,
    api_key_env: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    OpenAi,
}

/// A configured model provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    /// `None`: the kind's default (for `openai`, `OPENAI_BASE_URL` or the
    /// public endpoint), resolved when the provider is built.
    pub base_url: Option<String>,
    /// The environment variable holding the API key.
    pub api_key_env: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Absolute path of the SQLite database.
    pub database: PathBuf,
    /// Configured providers plus the built-in `openai`.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Where `aurad serve` answers the HTTP API.
    pub listen: SocketAddr,
    /// Runs executing at once, across all agents; the rest wait `queued`.
    pub max_concurrent_runs: usize,
    /// How long shutdown lets running runs finish before cancelling them.
    pub shutdown_grace: Duration,
}

/// The API's default address: loopback only, so no token is needed.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 7777);

impl Settings {
    pub fn defaults(root: &Path) -> Settings {
        let mut providers = BTreeMap::new();
        providers.insert(
            "openai".to_string(),
            ProviderConfig {
                name: "openai".into(),
                kind: ProviderKind::OpenAi,
                base_url: None,
                api_key_env: Some("OPENAI_API_KEY".into()),
            },
        );
        Settings {
            database: root.join("aurad.db"),
            providers,
            listen: DEFAULT_LISTEN,
            max_concurrent_runs: 8,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// Built-in provider names whose wire formats arrive in a later issue.
pub const LATER_PROVIDERS: &[&str] = &["anthropic", "gemini"];

/// Parses `aurad.yaml`'s interpolated text. On errors the defaults are
/// returned along with the diagnostics.
pub fn parse_settings(root: &Path, path: &Path, text: &str) -> (Settings, Vec<Diagnostic>) {
    let mut settings = Settings::defaults(root);
    let mut diags = Vec::new();
    if text.trim().is_empty() {
        return (settings, diags);
    }
    let raw: RawSettings = match serde_yaml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            diags.push(yaml_diagnostic(path, &e));
            return (settings, diags);
        }
    };
    let err = |keys: &[&str], msg: String| Diagnostic::error(path, locate(text, keys), msg);
    if raw.prices.is_some() {
        diags.push(err(
            &["prices"],
            "`prices` is not supported yet in this build; remove the field".into(),
        ));
    }
    if let Some(listen) = &raw.listen {
        match listen.trim().parse::<SocketAddr>() {
            Ok(addr) => settings.listen = addr,
            Err(_) => diags.push(err(
                &["listen"],
                format!("listen {listen:?} is not an address: write IP:PORT, e.g. 127.0.0.1:7777"),
            )),
        }
    }
    match raw.max_concurrent_runs {
        Some(0) => diags.push(err(
            &["max_concurrent_runs"],
            "`max_concurrent_runs` must be at least 1".into(),
        )),
        Some(n) if n > 10_000 => diags.push(err(
            &["max_concurrent_runs"],
            format!("`max_concurrent_runs` is {n}; at most 10000"),
        )),
        Some(n) => settings.max_concurrent_runs = n,
        None => {}
    }
    if let Some(v) = &raw.shutdown_grace {
        match duration_value(v) {
            Ok(d) => settings.shutdown_grace = d,
            Err(msg) => diags.push(err(&["shutdown_grace"], format!("shutdown_grace: {msg}"))),
        }
    }
    if let Some(db) = raw.database {
        if db.trim().is_empty() {
            diags.push(err(
                &["database"],
                "`database` is empty: give a file path such as aurad.db".into(),
            ));
        } else {
            settings.database = root.join(db);
        }
    }
    for (name, p) in raw.providers {
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if !valid {
            diags.push(err(
                &["providers", &name],
                format!("provider name {name:?} must be lowercase letters, digits, `_` or `-`"),
            ));
            continue;
        }
        let kind = match p.kind.as_str() {
            "openai" => ProviderKind::OpenAi,
            "anthropic" | "gemini" => {
                diags.push(err(
                    &["providers", &name, "kind"],
                    format!("provider kind `{}` is not supported yet in this build; use kind: openai (any OpenAI-compatible server)", p.kind),
                ));
                continue;
            }
            other => {
                diags.push(err(
                    &["providers", &name, "kind"],
                    format!("unknown provider kind {other:?}: expected one of `openai`, `anthropic`, `gemini`"),
                ));
                continue;
            }
        };
        if let Some(url) = &p.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            diags.push(err(
                &["providers", &name, "base_url"],
                format!("base_url {url:?} must start with http:// or https://"),
            ));
            continue;
        }
        if p.base_url.is_none() && name != "openai" {
            diags.push(err(
                &["providers", &name],
                format!("provider `{name}` needs a `base_url`, e.g. http://localhost:11434/v1 for Ollama"),
            ));
            continue;
        }
        let api_key_env = p
            .api_key_env
            .or_else(|| (name == "openai").then(|| "OPENAI_API_KEY".to_string()));
        settings.providers.insert(
            name.clone(),
            ProviderConfig {
                name,
                kind,
                base_url: p.base_url,
                api_key_env,
            },
        );
    }
    (settings, diags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_custom_provider() {
        let root = Path::new("/p");
        let text = "providers:\n  ollama: { kind: openai, base_url: \"http://localhost:11434/v1\" }\ndatabase: data/x.db\n";
        let (s, d) = parse_settings(root, Path::new("aurad.yaml"), text);
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(s.database, Path::new("/p/data/x.db"));
        assert_eq!(
            s.providers["ollama"].base_url.as_deref(),
            Some("http://localhost:11434/v1")
        );
        assert!(s.providers.contains_key("openai"));
    }

    #[test]
    fn bad_kind_and_later_fields_are_errors() {
        let text =
            "providers:\n  x:\n    kind: cohere\n    base_url: http://a\nlisten: 0.0.0.0:x\n";
        let (_, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        let d: Vec<_> = d.iter().map(|d| d.to_string()).collect();
        assert!(
            d.iter()
                .any(|m| m.starts_with("aurad.yaml:5:9: listen \"0.0.0.0:x\" is not an address")),
            "{d:?}"
        );
        assert!(
            d.iter()
                .any(|m| m.starts_with("aurad.yaml:3:11: unknown provider kind \"cohere\"")),
            "{d:?}"
        );
    }
}
