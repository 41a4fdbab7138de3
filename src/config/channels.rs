//! `channels/NAME.yaml`: a channel binds one platform account (a Telegram
//! bot, a Slack app, a Discord bot, a mailbox) to one agent, with the
//! allow-list of who may talk to it. The raw serde shape (unknown fields
//! refused), its validation into a [`ChannelConfig`] with every problem
//! located, and the loading of the whole directory: a file with errors is
//! left out, the others load. Each platform's own section is parsed in
//! `channels/PLATFORM.rs`.
//!
//! Secrets (tokens, signing secrets, passwords) are taken only as `${VAR}`:
//! a literal secret in a file that lands in git is refused, and a `${VAR}`
//! value is redacted everywhere like every substituted variable.
//!
//! Depends on the rest of `config`.

pub mod discord;
pub mod email;
pub mod slack;
pub mod telegram;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_yaml::Value;
use sha2::{Digest, Sha256};

use super::bounds::{Syntax, check_text};
use super::diag::{Diagnostic, locate};
use super::yaml_value::{describe_value, yaml_diagnostic};
use super::{EnvLookup, interp, relative, yaml_files};

/// The directory of channel files.
pub const CHANNEL_DIR: &str = "channels";

/// A channel, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelConfig {
    /// The file stem: names the channel in status, metrics and sessions.
    pub name: String,
    /// The file, relative to the project root.
    pub path: PathBuf,
    /// SHA-256 of the file as interpolated: a reload reconnects only a
    /// channel whose file (or one of its variables) changed.
    pub hash: String,
    pub agent: String,
    pub allow: Allow,
    /// The words a reply may use to decide a waiting call, lowercase.
    pub approve_word: String,
    pub deny_word: String,
    pub platform: PlatformConfig,
}

/// Who may talk to a channel: a sender whose user id is in `users`, or
/// whose message comes from a chat in `chats`. Everyone else is ignored
/// and counted. `anyone` lets everyone in (a public bot), said explicitly.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Allow {
    pub users: Vec<String>,
    pub chats: Vec<String>,
    pub anyone: bool,
}

impl Allow {
    /// May `user`, writing in `chat`, talk to the channel? Email addresses
    /// compare without regard to case.
    pub fn admits(&self, user: &str, chat: Option<&str>) -> bool {
        self.anyone
            || self.users.iter().any(|u| u.eq_ignore_ascii_case(user))
            || chat.is_some_and(|c| self.chats.iter().any(|x| x == c))
    }
}

/// A channel's platform and its settings.
#[derive(Debug, Clone, PartialEq)]
pub enum PlatformConfig {
    Telegram(telegram::TelegramConfig),
    Slack(slack::SlackConfig),
    Discord(discord::DiscordConfig),
    Email(email::EmailConfig),
}

impl PlatformConfig {
    /// The platform's name, as in the file.
    pub fn name(&self) -> &'static str {
        match self {
            PlatformConfig::Telegram(_) => "telegram",
            PlatformConfig::Slack(_) => "slack",
            PlatformConfig::Discord(_) => "discord",
            PlatformConfig::Email(_) => "email",
        }
    }
}

/// The platforms' section names, for messages.
const PLATFORMS: &str = "`telegram`, `slack`, `discord`, `email`";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChannel {
    agent: Option<Value>,
    allow: Option<RawAllow>,
    approve_word: Option<String>,
    deny_word: Option<String>,
    telegram: Option<telegram::RawTelegram>,
    slack: Option<slack::RawSlack>,
    discord: Option<discord::RawDiscord>,
    email: Option<email::RawEmail>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAllow {
    #[serde(default)]
    users: Vec<Value>,
    #[serde(default)]
    chats: Vec<Value>,
    #[serde(default)]
    anyone: bool,
}

/// What a platform's parser needs to locate its problems and check its
/// secrets.
pub struct Section<'a> {
    pub path: &'a Path,
    /// The file as interpolated (what was parsed).
    pub text: &'a str,
    /// The file as written (before `${VAR}` was replaced).
    pub raw: &'a str,
    /// The section's key (`telegram`, ...).
    pub key: &'static str,
    pub diagnostics: Vec<Diagnostic>,
}

impl Section<'_> {
    /// An error at field `field` of the section (`a.b` for field `b` of
    /// the section's mapping `a`).
    pub fn error(&mut self, field: &str, message: String) {
        let mut keys = vec![self.key];
        keys.extend(field.split('.').filter(|k| !k.is_empty()));
        let place = locate(self.text, &keys);
        self.diagnostics
            .push(Diagnostic::error(self.path, place, message));
    }

    /// The secret `field` (`a.b` inside a mapping `a`), required or not:
    /// given only as `${VAR}` in the
    /// file as written. A literal value is an error (it would sit in the
    /// file, and in git, in clear).
    pub fn secret(&mut self, field: &str, value: Option<&str>, required: bool) -> Option<String> {
        let Some(value) = value else {
            if required {
                self.error(
                    "",
                    format!(
                        "`{}.{field}` is required; write it as `{}: ${{VAR}}` with the secret in aurad's environment",
                        self.key,
                        field.rsplit('.').next().unwrap_or(field)
                    ),
                );
            }
            return None;
        };
        if !written_as_variable(self.raw, self.key, field) {
            self.error(
                field,
                format!(
                    "`{}.{field}` is a secret: write it as `${{VAR}}` and set VAR in aurad's environment (a secret written in the file ends up in git and in backups)",
                    self.key
                ),
            );
            return None;
        }
        if value.is_empty() {
            self.error(
                field,
                format!(
                    "`{}.{field}` is empty: its variable is set to nothing in aurad's environment",
                    self.key
                ),
            );
            return None;
        }
        Some(value.to_string())
    }

    /// `value` as an `http://` or `https://` base URL without a final `/`,
    /// or `default`.
    pub fn base_url(&mut self, field: &str, value: Option<&str>, default: &str) -> String {
        let Some(value) = value else {
            return default.to_string();
        };
        match reqwest::Url::parse(value) {
            Ok(url) if matches!(url.scheme(), "http" | "https") => {
                value.trim_end_matches('/').to_string()
            }
            _ => {
                self.error(
                    field,
                    format!(
                        "`{}.{field}`: {value:?} is not an http(s) URL; give the API's base URL, e.g. {default}",
                        self.key
                    ),
                );
                default.to_string()
            }
        }
    }
}

/// Is `key.field` of the raw YAML `raw` exactly one `${VAR}` reference?
/// (`field` may be a path, `a.b`.)
fn written_as_variable(raw: &str, key: &str, field: &str) -> bool {
    let Ok(Value::Mapping(file)) = serde_yaml::from_str::<Value>(raw) else {
        return false;
    };
    let value = field
        .split('.')
        .try_fold(file.get(key), |v, k| v.map(|v| v.get(k)))
        .flatten()
        .and_then(Value::as_str);
    value.is_some_and(|v| {
        let v = v.trim();
        v.starts_with("${")
            && v.ends_with('}')
            && v[2..v.len() - 1]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// Loads every `channels/*.yaml` (and `.yml`) under `root`. A channel with
/// errors is left out; the diagnostics say why. No `channels` directory is
/// no channels. `agents` are the agent file names present, to check each
/// channel's `agent`.
pub fn load_channels(
    root: &Path,
    env: EnvLookup,
    agents: &[String],
) -> (Vec<ChannelConfig>, Vec<Diagnostic>) {
    let mut diagnostics = Vec::new();
    let mut channels = Vec::new();
    for (name, file) in yaml_files(root, CHANNEL_DIR, "channel", &mut diagnostics) {
        let rel = relative(root, &file);
        let raw = match super::bounds::read_bounded(&file, &rel)
            .and_then(|b| b.map(|b| super::bounds::decode(b, &rel)).transpose())
        {
            Ok(Some(raw)) => raw,
            Ok(None) => continue,
            Err(d) => {
                diagnostics.push(d);
                continue;
            }
        };
        let text = match interp::interpolate_with(&raw, env, interp::Escape::Yaml) {
            Ok(text) => text,
            Err(errors) => {
                diagnostics.extend(
                    errors
                        .into_iter()
                        .map(|e| Diagnostic::error(&rel, (e.line, e.column), e.message)),
                );
                continue;
            }
        };
        let (channel, diags) = parse_channel(&name, &rel, &raw, &text, agents);
        diagnostics.extend(diags);
        channels.extend(channel);
    }
    (channels, diagnostics)
}

/// Parses channel `name` from `text` (the file `path` as interpolated;
/// `raw` as written).
pub fn parse_channel(
    name: &str,
    path: &Path,
    raw: &str,
    text: &str,
    agents: &[String],
) -> (Option<ChannelConfig>, Vec<Diagnostic>) {
    if let Err(d) = check_text(path, text, Syntax::Yaml, 1) {
        return (None, vec![d]);
    }
    let mut diags = Vec::new();
    if !super::plugins::valid_tool_name(name) {
        diags.push(Diagnostic::error(
            path,
            (1, 1),
            format!(
                "channel name {name:?} (the file name) must match [A-Za-z0-9_-]{{1,64}}; rename the file"
            ),
        ));
    }
    if matches!(
        serde_yaml::from_str::<Value>(text),
        Ok(Value::Sequence(_) | Value::String(_) | Value::Number(_) | Value::Bool(_))
    ) {
        diags.push(Diagnostic::error(
            path,
            (1, 1),
            format!("a channel file is a mapping of fields (`agent`, `allow` and one of {PLATFORMS}), not a list or a single value"),
        ));
        return (None, diags);
    }
    let parsed: RawChannel = match serde_yaml::from_str(text) {
        Ok(Some(raw)) => raw,
        Ok(None) => {
            diags.push(Diagnostic::error(
                path,
                (1, 1),
                format!(
                    "the channel file is empty: it needs `agent`, `allow` and one platform section ({PLATFORMS})"
                ),
            ));
            return (None, diags);
        }
        Err(e) => return (None, vec![yaml_diagnostic(path, text, &e)]),
    };
    let err = |keys: &[&str], msg: String| Diagnostic::error(path, locate(text, keys), msg);
    let agent = match &parsed.agent {
        Some(Value::String(a)) if agents.contains(a) => Some(a.clone()),
        Some(Value::String(a)) => {
            let known = if agents.is_empty() {
                "there are no agents in agents/".to_string()
            } else {
                format!("the agents are: {}", agents.join(", "))
            };
            diags.push(err(
                &["agent"],
                format!("`agent`: there is no agent `{a}` (no agents/{a}.yaml); {known}"),
            ));
            None
        }
        Some(other) => {
            diags.push(err(
                &["agent"],
                format!(
                    "`agent` must be the name of an agent file, not {}",
                    describe_value(other)
                ),
            ));
            None
        }
        None => {
            diags.push(err(
                &[],
                "`agent` is required: the agent this channel talks to (a file of agents/)".into(),
            ));
            None
        }
    };
    let allow = allow_list(parsed.allow, &mut diags, &err);
    let words = reply_words(&parsed.approve_word, &parsed.deny_word, &mut diags, &err);
    // Each platform section present, parsed by its own module: the
    // channel's platform, or `None` when the section has errors.
    let mut platforms = Vec::new();
    let mut each = |key: &'static str, parse: &dyn Fn(&mut Section) -> Option<PlatformConfig>| {
        let mut section = Section {
            path,
            text,
            raw,
            key,
            diagnostics: Vec::new(),
        };
        platforms.push(parse(&mut section));
        diags.append(&mut section.diagnostics);
    };
    if let Some(t) = &parsed.telegram {
        each("telegram", &|s| {
            telegram::parse(t, s).map(PlatformConfig::Telegram)
        });
    }
    if let Some(t) = &parsed.slack {
        each("slack", &|s| slack::parse(t, s).map(PlatformConfig::Slack));
    }
    if let Some(t) = &parsed.discord {
        each("discord", &|s| {
            discord::parse(t, s).map(PlatformConfig::Discord)
        });
    }
    if let Some(t) = &parsed.email {
        each("email", &|s| email::parse(t, s).map(PlatformConfig::Email));
    }
    let platform = match platforms.len() {
        0 => {
            diags.push(err(
                &[],
                format!("a channel needs one platform section: {PLATFORMS}"),
            ));
            None
        }
        1 => platforms.pop().flatten(),
        _ => {
            diags.push(err(
                &[],
                "a channel has one platform section; make one file per platform account".into(),
            ));
            None
        }
    };
    let failed = diags.iter().any(Diagnostic::is_error);
    let (Some(agent), Some(allow), Some((approve_word, deny_word)), Some(platform), false) =
        (agent, allow, words, platform, failed)
    else {
        return (None, diags);
    };
    let channel = ChannelConfig {
        name: name.to_string(),
        path: path.to_path_buf(),
        hash: hex::encode(Sha256::digest(text.as_bytes())),
        agent,
        allow,
        approve_word,
        deny_word,
        platform,
    };
    (Some(channel), diags)
}

fn allow_list(
    raw: Option<RawAllow>,
    diags: &mut Vec<Diagnostic>,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
) -> Option<Allow> {
    let Some(raw) = raw else {
        diags.push(err(
            &[],
            "`allow` is required: who may talk to the agent, e.g. `allow: { users: [\"12345\"] }` (platform user ids, chat ids or email addresses; `anyone: true` for a public bot)".into(),
        ));
        return None;
    };
    let mut ids = |key: &str, values: Vec<Value>| -> Vec<String> {
        values
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) if !s.trim().is_empty() => Some(s.trim().to_string()),
                Value::Number(n) => Some(n.to_string()),
                other => {
                    diags.push(err(
                        &["allow", key],
                        format!(
                            "`allow.{key}`: {} is not an id; write ids as strings, e.g. \"12345\"",
                            describe_value(&other)
                        ),
                    ));
                    None
                }
            })
            .collect()
    };
    let allow = Allow {
        users: ids("users", raw.users),
        chats: ids("chats", raw.chats),
        anyone: raw.anyone,
    };
    if !allow.anyone && allow.users.is_empty() && allow.chats.is_empty() {
        diags.push(err(
            &["allow"],
            "`allow` lets nobody in: list `users` or `chats`, or say `anyone: true` for a public bot".into(),
        ));
        return None;
    }
    Some(allow)
}

fn reply_words(
    approve: &Option<String>,
    deny: &Option<String>,
    diags: &mut Vec<Diagnostic>,
    err: &dyn Fn(&[&str], String) -> Diagnostic,
) -> Option<(String, String)> {
    let mut word = |key: &str, value: &Option<String>, default: &str| -> Option<String> {
        let w = value.as_deref().unwrap_or(default).trim().to_lowercase();
        if w.is_empty() || w.contains(char::is_whitespace) {
            diags.push(err(
                &[key],
                format!("`{key}` must be one word, e.g. {default:?}"),
            ));
            return None;
        }
        Some(w)
    };
    let approve = word("approve_word", approve, "approve");
    let deny = word("deny_word", deny, "deny");
    match (approve, deny) {
        (Some(a), Some(d)) if a == d => {
            diags.push(err(
                &["deny_word"],
                format!("`approve_word` and `deny_word` are both {a:?}; make them differ"),
            ));
            None
        }
        (Some(a), Some(d)) => Some((a, d)),
        _ => None,
    }
}

#[cfg(test)]
#[path = "channels_tests.rs"]
mod tests;
