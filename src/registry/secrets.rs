//! Which values the daemon treats as secret, for the snapshot's
//! [`Redactor`]: each is redacted as `[redacted:NAME]`, NAME being the
//! variable (or config field) it came from.
//!
//! - every variable of the process environment whose name looks like a
//!   credential (the rule that also keeps them from tool processes,
//!   `tools::process::secret_variables`: `*_API_KEY`, `*_TOKEN`,
//!   `*SECRET*`, `*PASSWORD`, ...), `DATABASE_URL` (and `*_DATABASE_URL`),
//!   `*_WEBHOOK_URL`, and `AURAD_TOKEN`;
//! - the variables the configuration names: each provider's `api_key_env`
//!   and each webhook's `secret_env`;
//! - every variable substituted by `${VAR}` into any file, except a few
//!   that are never secret and would blank out paths ([`NEVER_SECRET`]);
//! - credential-looking entries written literally in a plugin's or an MCP
//!   server's `env` or HTTP `headers` (`Authorization` too, with and
//!   without its `Bearer ` scheme);
//! - the userinfo (`user:password`) and the password of any URL of the
//!   form `scheme://user:password@host` in any environment value or in a
//!   provider's `base_url`, a plugin's or an MCP server's `url`.
//!
//! Values shorter than `redact::MIN_SECRET_LEN` are skipped by the
//! redactor. May depend on `config` and `tools`.

use std::ffi::OsString;

use crate::config::mcp::McpTransport;
use crate::config::plugins::PluginAction;
use crate::config::{EnvLookup, Project};
use crate::redact::Redactor;
use crate::tools::process::secret_variables;

/// Variables that are never secret: substituted into a file (`${HOME}`),
/// they stay as they are, so paths in tool output are not blanked out.
pub const NEVER_SECRET: [&str; 16] = [
    "HOME", "USER", "LOGNAME", "PATH", "PWD", "SHELL", "TMPDIR", "TMP", "TEMP", "LANG", "LANGUAGE",
    "TERM", "TZ", "HOSTNAME", "EDITOR", "VISUAL",
];

/// The redactor of `project`'s secrets: the named variables are read with
/// `env`, the credential-looking ones are found among `process_env` (the
/// process environment, as (name, value)).
pub fn redactor(project: &Project, env: EnvLookup, process_env: &[(String, String)]) -> Redactor {
    Redactor::new(secrets(project, env, process_env))
}

/// The process environment's secrets alone (for log lines written before
/// any project is loaded).
pub fn process_redactor() -> Redactor {
    Redactor::new(environment_secrets(&process_env()))
}

/// The redactor of the variables `names` (substituted into a file that
/// was read without a whole project, such as `mcp.json` by `aurad mcp`),
/// read with `env`, except those [`NEVER_SECRET`].
pub fn variables_redactor<'a>(
    names: impl IntoIterator<Item = &'a String>,
    env: EnvLookup,
) -> Redactor {
    Redactor::new(
        names
            .into_iter()
            .filter(|name| !NEVER_SECRET.contains(&name.as_str()))
            .filter_map(|name| Some((name.clone(), env(name)?))),
    )
}

/// The process environment as (name, value) pairs, variables that are not
/// valid UTF-8 left out.
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect()
}

/// Every (name, value) `project` and the environment make secret; the
/// names the configuration gives come first, so a value known under two
/// names is redacted under the one the user wrote.
pub fn secrets(
    project: &Project,
    env: EnvLookup,
    process_env: &[(String, String)],
) -> Vec<(String, String)> {
    let mut named: Vec<String> = Vec::new();
    let settings = &project.settings;
    named.extend(
        settings
            .providers
            .values()
            .filter_map(|p| p.api_key_env.clone()),
    );
    named.extend(
        project
            .agents
            .values()
            .filter_map(|a| a.triggers.webhook.as_ref())
            .map(|w| w.secret_env.clone()),
    );
    named.push("AURAD_TOKEN".into());
    // What an agent passes to its tools is theirs to use, not to print.
    named.extend(
        project
            .agents
            .values()
            .flat_map(|a| a.pass_env.iter())
            .filter(|name| !NEVER_SECRET.contains(&name.as_str()))
            .cloned(),
    );
    named.extend(
        project
            .substituted
            .iter()
            .filter(|name| !NEVER_SECRET.contains(&name.as_str()))
            .cloned(),
    );
    let mut secrets: Vec<(String, String)> = Vec::new();
    for name in named {
        if let Some(value) = env(&name).filter(|v| !v.is_empty()) {
            secrets.extend(url_credentials(&name, &value));
            secrets.push((name, value));
        }
    }
    secrets.extend(config_literals(project));
    secrets.extend(environment_secrets(process_env));
    secrets
}

/// The credential-looking variables of `vars`, and URL credentials in any.
fn environment_secrets(vars: &[(String, String)]) -> Vec<(String, String)> {
    let credential_names = secret_variables(vars.iter().map(|(name, _)| OsString::from(name)));
    let mut secrets = Vec::new();
    for (name, value) in vars {
        let upper = name.to_ascii_uppercase();
        let secret = credential_names.iter().any(|n| n == name.as_str())
            || upper == "DATABASE_URL"
            || upper.ends_with("_DATABASE_URL")
            || upper == "WEBHOOK_URL"
            || upper.ends_with("_WEBHOOK_URL");
        if secret {
            secrets.push((name.clone(), value.clone()));
        }
        secrets.extend(url_credentials(name, value));
    }
    secrets
}

/// Secrets written as they are in the configuration: credential-looking
/// `env` entries and headers of plugins and MCP servers, and URL
/// credentials of their URLs and of the providers' base URLs.
fn config_literals(project: &Project) -> Vec<(String, String)> {
    let mut secrets = Vec::new();
    for provider in project.settings.providers.values() {
        if let Some(url) = &provider.base_url {
            let field = format!("providers.{}.base_url", provider.name);
            secrets.extend(url_credentials(&field, url));
        }
    }
    for plugin in &project.plugins {
        let (pairs, url) = match &plugin.action {
            PluginAction::Command { env, .. } => (env, None),
            PluginAction::Http { url, headers, .. } => (headers, Some(url)),
        };
        secrets.extend(credential_entries(pairs));
        if let Some(url) = url {
            secrets.extend(url_credentials(&format!("{}.url", plugin.name), url));
        }
    }
    for server in &project.mcp_servers {
        match &server.transport {
            McpTransport::Stdio { env, .. } => secrets.extend(credential_entries(env)),
            McpTransport::Http { url, headers } => {
                secrets.extend(credential_entries(headers));
                secrets.extend(url_credentials(&format!("{}.url", server.name), url));
            }
        }
    }
    secrets
}

/// The entries of an `env` or `headers` map whose key looks like a
/// credential, under their key; an `Authorization` value also without its
/// scheme (`Bearer `).
fn credential_entries<'a>(
    pairs: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Vec<(String, String)> {
    let pairs: Vec<(&String, &String)> = pairs.into_iter().collect();
    let credential_names = secret_variables(pairs.iter().map(|(k, _)| OsString::from(k.as_str())));
    let mut secrets = Vec::new();
    for (key, value) in pairs {
        let authorization = key.eq_ignore_ascii_case("authorization")
            || key.eq_ignore_ascii_case("proxy-authorization");
        if authorization {
            if let Some((_, credentials)) = value.trim().split_once(' ') {
                secrets.push((key.clone(), credentials.trim().to_string()));
            }
            secrets.push((key.clone(), value.clone()));
        } else if credential_names.iter().any(|n| n == key.as_str()) {
            secrets.push((key.clone(), value.clone()));
        }
    }
    secrets
}

/// For each `scheme://user:password@` in `text`: the userinfo and the
/// password, under `name`.
pub fn url_credentials(name: &str, text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let authority_and_more = &rest[at + 3..];
        let end = authority_and_more
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace())
            .unwrap_or(authority_and_more.len());
        let authority = &authority_and_more[..end];
        if let Some((userinfo, _host)) = authority.rsplit_once('@')
            && let Some((_user, password)) = userinfo.split_once(':')
            && !password.is_empty()
        {
            found.push((name.to_string(), userinfo.to_string()));
            found.push((name.to_string(), password.to_string()));
        }
        rest = &authority_and_more[end..];
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load;
    use std::collections::BTreeMap;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn credential_looking_variables_and_urls_are_secret() {
        let env = vars(&[
            ("OPENAI_API_KEY", "sk-openai-0123456789"),
            ("MY_SERVICE_TOKEN", "tok-0123456789"),
            ("DATABASE_URL", "postgres://app:db-pass-123@db:5432/app"),
            (
                "SLACK_WEBHOOK_URL",
                "https://hooks.slack.example/T000/B000/XXXX",
            ),
            ("PROXY", "http://bob:proxy-pass-9@proxy:3128"),
            ("HOME", "/home/someone-long"),
            ("PATH", "/usr/local/bin:/usr/bin"),
        ]);
        let found = environment_secrets(&env);
        let r = Redactor::new(found);
        let text = "sk-openai-0123456789 tok-0123456789 hooks: https://hooks.slack.example/T000/B000/XXXX db-pass-123 bob:proxy-pass-9 /home/someone-long";
        assert_eq!(
            r.redact(text),
            "[redacted:OPENAI_API_KEY] [redacted:MY_SERVICE_TOKEN] hooks: [redacted:SLACK_WEBHOOK_URL] [redacted:DATABASE_URL] [redacted:PROXY] /home/someone-long"
        );
    }

    #[test]
    fn url_credentials_are_found_in_text() {
        assert_eq!(
            url_credentials("X", "a https://u:p4ss-word@h/x and ftp://anon@h b://c:d@e"),
            vars(&[
                ("X", "u:p4ss-word"),
                ("X", "p4ss-word"),
                ("X", "c:d"),
                ("X", "d")
            ])
        );
        assert!(url_credentials("X", "https://h/x?u=a:b@c").is_empty());
    }

    #[test]
    fn configured_variables_and_substitutions_are_secret() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("agents")).unwrap();
        std::fs::create_dir_all(root.join("tools.d")).unwrap();
        std::fs::write(
            root.join("aurad.yaml"),
            "providers:\n  gw: { kind: openai, base_url: \"http://gw:gw-password-1@127.0.0.1:9/v1\", api_key_env: GW_KEY_VAR }\n",
        )
        .unwrap();
        std::fs::write(
            root.join("agents/a.yaml"),
            "model: test\nsystem: \"Home is ${HOME}\"\nwebhook: { secret_env: HOOK_VAR }\n",
        )
        .unwrap();
        std::fs::write(
            root.join("tools.d/t.yaml"),
            "description: t\nparameters: { type: object }\ncommand: [\"cat\"]\nenv:\n  PLAIN: \"${PLAIN_VALUE}\"\n  GITHUB_TOKEN: literal-token-123\n",
        )
        .unwrap();
        let env_vars: BTreeMap<&str, &str> = BTreeMap::from([
            ("GW_KEY_VAR", "gateway-key-123"),
            ("HOOK_VAR", "hook-secret-123"),
            ("PLAIN_VALUE", "substituted-123"),
            ("HOME", "/home/long-user-name"),
            ("AURAD_TOKEN", "daemon-token-123"),
        ]);
        let lookup = |name: &str| env_vars.get(name).map(|v| v.to_string());
        let loaded = load(root, &lookup);
        assert!(!loaded.has_errors(), "{:?}", loaded.diagnostics);
        assert!(loaded.project.substituted.contains("PLAIN_VALUE"));
        let r = redactor(&loaded.project, &lookup, &[]);
        assert_eq!(
            r.redact(
                "gateway-key-123 hook-secret-123 substituted-123 literal-token-123 gw-password-1 daemon-token-123 /home/long-user-name"
            ),
            "[redacted:GW_KEY_VAR] [redacted:HOOK_VAR] [redacted:PLAIN_VALUE] [redacted:GITHUB_TOKEN] [redacted:providers.gw.base_url] [redacted:AURAD_TOKEN] /home/long-user-name"
        );
    }

    #[test]
    fn variables_alone_are_redacted_but_never_home() {
        let env = |name: &str| match name {
            "MCP_KEY_PART" => Some("mcp-value-123456".to_string()),
            "HOME" => Some("/home/long-user-name".to_string()),
            _ => None,
        };
        let names = ["MCP_KEY_PART", "HOME", "UNSET"].map(String::from);
        let r = variables_redactor(&names, &env);
        assert_eq!(
            r.redact("mcp-value-123456 /home/long-user-name"),
            "[redacted:MCP_KEY_PART] /home/long-user-name"
        );
    }

    #[test]
    fn authorization_headers_are_secret_with_and_without_scheme() {
        let headers = BTreeMap::from([
            (
                "Authorization".to_string(),
                "Bearer abc-def-ghi-jkl".to_string(),
            ),
            ("X-Api-Key".to_string(), "key-0123456789".to_string()),
            ("Accept".to_string(), "application/json".to_string()),
        ]);
        let r = Redactor::new(credential_entries(&headers));
        assert_eq!(
            r.redact(
                "Bearer abc-def-ghi-jkl | abc-def-ghi-jkl | key-0123456789 | application/json"
            ),
            "[redacted:Authorization] | [redacted:Authorization] | [redacted:X-Api-Key] | application/json"
        );
    }
}
