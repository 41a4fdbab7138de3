//! `providers:` in aurad.yaml: each provider's wire format, endpoint and
//! key variable, and its policy: the limits every run of it shares, prompt
//! caching, and whether tools are called natively or described in the
//! prompt. The built-in `openai`, `anthropic` and `gemini` exist without an
//! entry; an entry under one of those names may leave out `kind` to set
//! only its policy. May depend on `types` only.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::diag::{Diagnostic, MAX_LIST_ERRORS};

pub const DEFAULT_OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    kind: Option<String>,
    base_url: Option<String>,
    api_key_env: Option<String>,
    /// `native` (the default) or `text`.
    tool_calls: Option<String>,
    /// On by default where the wire format has a prompt cache.
    prompt_caching: Option<bool>,
    limits: Option<RawProviderLimits>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProviderLimits {
    concurrent: Option<u32>,
    requests_per_minute: Option<u32>,
    tokens_per_minute: Option<u64>,
}

/// A provider's wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// OpenAI chat completions, and any server that speaks them.
    OpenAi,
    /// OpenAI's Responses API (`kind: openai-responses`); also what a
    /// provider of kind `openai` at OpenAI's own endpoint uses for the
    /// models served only there.
    OpenAiResponses,
    Anthropic,
    Gemini,
}

impl ProviderKind {
    const ALL: [ProviderKind; 4] = [
        ProviderKind::OpenAi,
        ProviderKind::OpenAiResponses,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
    ];

    /// The kinds with a built-in provider of their name: OpenAI's
    /// Responses API needs none of its own, the built-in `openai` uses it
    /// where a model needs it.
    const BUILTIN: [ProviderKind; 3] = [
        ProviderKind::OpenAi,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::OpenAiResponses => "openai-responses",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
        }
    }

    fn parse(s: &str) -> Option<ProviderKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// The variable holding the key of the built-in provider of this kind.
    fn default_key_env(self) -> &'static str {
        match self {
            ProviderKind::OpenAi | ProviderKind::OpenAiResponses => "OPENAI_API_KEY",
            ProviderKind::Anthropic => "ANTHROPIC_API_KEY",
            ProviderKind::Gemini => "GEMINI_API_KEY",
        }
    }

    /// The kind of the built-in provider called `name`, if it is one.
    fn builtin(name: &str) -> Option<ProviderKind> {
        Self::BUILTIN.into_iter().find(|k| k.as_str() == name)
    }
}

/// How a provider's models are offered tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolCallMode {
    /// The wire format's own tool calling.
    #[default]
    Native,
    /// Tools described in the prompt, calls parsed from the answer text:
    /// for models (many local ones) that ignore `tools`.
    Text,
}

/// The limits all runs of one provider share (`providers.X.limits`);
/// `None`: no limit of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProviderLimits {
    /// Requests in flight at once.
    pub concurrent: Option<u32>,
    pub requests_per_minute: Option<u32>,
    /// Input and output tokens per minute.
    pub tokens_per_minute: Option<u64>,
}

impl ProviderLimits {
    pub fn is_empty(&self) -> bool {
        *self == ProviderLimits::default()
    }
}

/// A configured model provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderConfig {
    pub name: String,
    pub kind: ProviderKind,
    /// `None`: the kind's default (the vendor's public endpoint; for the
    /// built-in `openai`, `OPENAI_BASE_URL` first), resolved when the
    /// provider is built.
    pub base_url: Option<String>,
    /// The environment variable holding the API key.
    pub api_key_env: Option<String>,
    pub tool_calls: ToolCallMode,
    /// Ask for the provider's prompt cache (Anthropic breakpoints, OpenAI's
    /// cache key); on unless `prompt_caching: false`.
    pub prompt_caching: bool,
    pub limits: ProviderLimits,
}

impl ProviderConfig {
    fn builtin(kind: ProviderKind) -> ProviderConfig {
        ProviderConfig {
            name: kind.as_str().to_string(),
            kind,
            base_url: None,
            api_key_env: Some(kind.default_key_env().into()),
            tool_calls: ToolCallMode::Native,
            prompt_caching: true,
            limits: ProviderLimits::default(),
        }
    }
}

/// The built-in providers, as they are without an entry.
pub fn builtin_providers() -> BTreeMap<String, ProviderConfig> {
    ProviderKind::BUILTIN
        .into_iter()
        .map(|kind| (kind.as_str().to_string(), ProviderConfig::builtin(kind)))
        .collect()
}

/// Reads `providers:` into `into` (which holds the built-ins), each
/// problem a diagnostic located by `err`.
pub(super) fn parse_providers(
    raw: BTreeMap<String, RawProvider>,
    into: &mut BTreeMap<String, ProviderConfig>,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
    diags: &mut Vec<Diagnostic>,
) {
    let start = diags.len();
    for (name, p) in raw {
        if diags.len() - start >= MAX_LIST_ERRORS {
            diags.push(err(
                &["providers"],
                format!("more than {MAX_LIST_ERRORS} problems in `providers`; fix these first"),
            ));
            break;
        }
        match parse_provider(&name, p, err) {
            Ok(config) => {
                into.insert(name, config);
            }
            Err(d) => diags.push(d),
        }
    }
}

fn parse_provider(
    name: &str,
    p: RawProvider,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
) -> Result<ProviderConfig, Diagnostic> {
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !valid {
        return Err(err(
            &["providers", name],
            format!("provider name {name:?} must be lowercase letters, digits, `_` or `-`"),
        ));
    }
    let kinds = || {
        ProviderKind::ALL
            .iter()
            .map(|k| format!("`{}`", k.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let kind = match (&p.kind, ProviderKind::builtin(name)) {
        (Some(kind), _) => ProviderKind::parse(kind).ok_or_else(|| {
            err(
                &["providers", name, "kind"],
                format!(
                    "unknown provider kind {kind:?}: expected one of {}",
                    kinds()
                ),
            )
        })?,
        (None, Some(builtin)) => builtin,
        (None, None) => {
            return Err(err(
                &["providers", name],
                format!(
                    "provider `{name}` needs a `kind` (one of {}): only the built-in openai, anthropic and gemini may leave it out",
                    kinds()
                ),
            ));
        }
    };
    if let Some(url) = &p.base_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(err(
            &["providers", name, "base_url"],
            format!("base_url {url:?} must start with http:// or https://"),
        ));
    }
    if p.base_url.is_none() && kind == ProviderKind::OpenAi && name != "openai" {
        return Err(err(
            &["providers", name],
            format!(
                "provider `{name}` needs a `base_url`, e.g. http://localhost:11434/v1 for Ollama"
            ),
        ));
    }
    let tool_calls = match p.tool_calls.as_deref() {
        None | Some("native") => ToolCallMode::Native,
        Some("text") => ToolCallMode::Text,
        Some(other) => {
            return Err(err(
                &["providers", name, "tool_calls"],
                format!(
                    "tool_calls {other:?}: expected `native` (the API's tool calling) or `text` (tools described in the prompt, for models that ignore `tools`)"
                ),
            ));
        }
    };
    let limits = match &p.limits {
        Some(l) => parse_limits(name, l, err)?,
        None => ProviderLimits::default(),
    };
    // A provider under a built-in name keeps that name's key variable,
    // and so does one talking to the vendor's own endpoint; a gateway
    // (own base_url) has a key only when it names its variable.
    let builtin = ProviderKind::builtin(name) == Some(kind);
    let api_key_env = p
        .api_key_env
        .or_else(|| (builtin || p.base_url.is_none()).then(|| kind.default_key_env().to_string()));
    Ok(ProviderConfig {
        name: name.to_string(),
        kind,
        base_url: p.base_url,
        api_key_env,
        tool_calls,
        prompt_caching: p.prompt_caching.unwrap_or(true),
        limits,
    })
}

fn parse_limits(
    name: &str,
    raw: &RawProviderLimits,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
) -> Result<ProviderLimits, Diagnostic> {
    let positive = |key: &str, value: Option<u64>| match value {
        Some(0) => Err(err(
            &["providers", name, "limits", key],
            format!(
                "limits.{key} of provider `{name}` is 0, which would stop every call; give at least 1, or leave it out for no limit"
            ),
        )),
        _ => Ok(()),
    };
    positive("concurrent", raw.concurrent.map(u64::from))?;
    positive(
        "requests_per_minute",
        raw.requests_per_minute.map(u64::from),
    )?;
    positive("tokens_per_minute", raw.tokens_per_minute)?;
    Ok(ProviderLimits {
        concurrent: raw.concurrent,
        requests_per_minute: raw.requests_per_minute,
        tokens_per_minute: raw.tokens_per_minute,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::settings::parse_settings;

    use super::*;

    fn parse(text: &str) -> (BTreeMap<String, ProviderConfig>, Vec<Diagnostic>) {
        let (s, d) = parse_settings(Path::new("/p"), Path::new("aurad.yaml"), text);
        (s.providers, d)
    }

    #[test]
    fn a_builtin_takes_policy_without_a_kind() {
        let (p, d) = parse(
            "providers:\n  openai:\n    limits: { concurrent: 4, requests_per_minute: 300, tokens_per_minute: 90000 }\n    prompt_caching: false\n",
        );
        assert!(d.is_empty(), "{d:?}");
        let openai = &p["openai"];
        assert_eq!(openai.kind, ProviderKind::OpenAi);
        assert_eq!(openai.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
        assert!(!openai.prompt_caching);
        assert_eq!(
            openai.limits,
            ProviderLimits {
                concurrent: Some(4),
                requests_per_minute: Some(300),
                tokens_per_minute: Some(90_000),
            }
        );
        assert!(p["anthropic"].prompt_caching, "caching is on by default");
        assert!(p["anthropic"].limits.is_empty());
    }

    #[test]
    fn openai_responses_is_a_kind_with_openais_endpoint_and_key_not_a_builtin() {
        let (p, d) = parse(
            "providers:\n  oai:\n    kind: openai-responses\n  gw:\n    kind: openai-responses\n    base_url: http://127.0.0.1:9/v1\n    prompt_caching: false\n",
        );
        assert!(d.is_empty(), "{d:?}");
        let oai = &p["oai"];
        assert_eq!(oai.kind, ProviderKind::OpenAiResponses);
        assert_eq!(oai.base_url, None, "OpenAI's endpoint, resolved when built");
        assert_eq!(oai.api_key_env.as_deref(), Some("OPENAI_API_KEY"));
        assert!(oai.prompt_caching);
        let gw = &p["gw"];
        assert_eq!(gw.api_key_env, None, "a gateway names its key variable");
        assert!(!gw.prompt_caching);
        assert!(
            !p.contains_key("openai-responses"),
            "no built-in of its own"
        );
        let (_, d) = parse("providers:\n  openai-responses:\n    prompt_caching: false\n");
        assert!(d[0].message.contains("needs a `kind`"), "{d:?}");
    }

    #[test]
    fn text_tool_calls_and_bad_policy_are_located() {
        let (p, d) = parse(
            "providers:\n  local: { kind: openai, base_url: \"http://127.0.0.1:8080/v1\", tool_calls: text }\n",
        );
        assert!(d.is_empty(), "{d:?}");
        assert_eq!(p["local"].tool_calls, ToolCallMode::Text);

        let (_, d) = parse(
            "providers:\n  a: { kind: openai, base_url: \"http://x\", tool_calls: prompt }\n  b:\n    kind: anthropic\n    limits:\n      concurrent: 0\n  c: { base_url: \"http://x\" }\n",
        );
        let msgs: Vec<String> = d
            .iter()
            .map(|d| format!("{}:{} {}", d.line, d.column, d.message))
            .collect();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        assert!(msgs[0].starts_with("2:") && msgs[0].contains("tool_calls \"prompt\""));
        assert!(msgs[1].starts_with("6:") && msgs[1].contains("limits.concurrent"));
        assert!(msgs[2].starts_with("7:") && msgs[2].contains("needs a `kind`"));
    }
}
